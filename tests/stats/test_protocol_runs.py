"""Tests of perfmodel.stats.protocol_runs: the protocol's tasks on one engine's runs."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfmodel.errors import InputError
from perfmodel.stats.protocol_runs import (
    SUMMARY_COLUMNS,
    engine_run_tasks,
    read_engine_runs,
    summary_rows,
)

ROOT = Path(__file__).resolve().parents[2]
CONFIRMATION = ROOT / "data" / "vllm-cpu-confirmation" / "llama-mid"


def test_read_engine_runs_labels_workloads_and_replicates():
    full = read_engine_runs(CONFIRMATION)
    assert set(full["workload"]) == {"mixed", "sweeps"}
    assert set(full.loc[full["workload"] == "mixed", "replicate"]) == {"mixed-r1", "mixed-r2",
                                                                       "mixed-r3"}
    assert set(full.loc[full["workload"] == "sweeps", "replicate"]) == {
        "decode_sweep", "prefill_sweep", "fixed_tokens"}
    n_files = sum(len(pd.read_csv(f, usecols=[0])) for f in CONFIRMATION.glob("*.csv"))
    assert len(full) == n_files


def test_engine_run_tasks_are_the_protocols_schemes():
    full = read_engine_runs(CONFIRMATION)
    tasks = engine_run_tasks(full, "mid")
    schemes = [t[1] for t in tasks]
    assert schemes == ["blocked25", "blocked100", "extrapolate", "transfer:sweeps->mixed"]
    for label, scheme, df, kw in tasks:
        assert label == "mid"
        if scheme.startswith("transfer"):
            assert kw == {"cv": "transfer", "test_workload": "mixed"}
            assert set(df["workload"]) == {"sweeps", "mixed"}
        else:
            assert "workload" not in df.columns and kw == {}
            assert len(df) == int((full["workload"] == "mixed").sum())
    # a closed loop adds the second transfer
    closed = full[full["workload"] == "mixed"].assign(workload="closed_loop")
    more = engine_run_tasks(pd.concat([full, closed], ignore_index=True), "mid")
    assert more[-1][1] == "transfer:mixed->closed_loop"


def test_summary_rows_keep_the_columns_and_fill_missing_ones():
    tab = pd.DataFrame({"name": ["a", "b"], "kind": ["model", "baseline"], "MAPE": [5.0, 6.0]})
    rows = summary_rows("d", "blocked25", tab)
    assert [tuple(r) for r in rows] == [SUMMARY_COLUMNS] * 2
    assert rows[1]["MAPE"] == 6.0 and np.isnan(rows[0]["ratio_lo"])


def test_bad_input_names_the_problem(tmp_path):
    with pytest.raises(InputError, match="not a folder"):
        read_engine_runs(tmp_path / "missing")
    with pytest.raises(InputError, match="no trace files"):
        read_engine_runs(tmp_path)
    with pytest.raises(InputError, match="workload"):
        engine_run_tasks(pd.DataFrame({"x": [1]}), "d")
    with pytest.raises(InputError, match="no 'mixed' runs"):
        engine_run_tasks(pd.DataFrame({"workload": ["sweeps"]}), "d")
    with pytest.raises(InputError, match="compare"):
        summary_rows("d", "s", None)
