"""scripts/interval_study.py: which data sets --only keeps, and the quiet steps of --forward."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "interval_study.py"


@pytest.fixture(scope="module")
def study():
    spec = importlib.util.spec_from_file_location("interval_study", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop("interval_study", None)


def test_only_keeps_the_data_sets_named_by_a_prefix(study):
    assert study.wanted("vllm-cpu_llama-tiny", None) and study.wanted("gpu", [])
    assert study.wanted("vllm-cpu_llama-tiny", ["vllm-cpu"])
    assert not study.wanted("gpu-confirmation_run1", ["vllm-cpu", "splitwise"])
    assert not study.wanted("gpu", ["none"])


def _run(tmp_path, cpu_ms, meta=True):
    n = len(cpu_ms)
    df = pd.DataFrame({"duration_ms": np.full(n, 10.0), "step_ms": np.full(n, 10.0),
                       "cpu_ms": cpu_ms, "involuntary_switches": np.full(n, 2),
                       "loadavg": np.full(n, 1.5)})
    trace = tmp_path / "mixed-r1.csv"
    if meta:
        trace.with_suffix(".meta.json").write_text(json.dumps(
            {"threads": {"torch_num_threads": 2, "cpu_count": 2}}))
    return df, trace


def test_quiet_steps_drop_the_contended_ones_by_the_collectors_rule(study, tmp_path):
    # a step whose process had half its threads' CPU time (ratio 1.0 of 2) is contended
    cpu = np.full(10, 20.0)
    cpu[[3, 7]] = 10.0
    df, trace = _run(tmp_path, cpu)
    quiet = study.quiet_steps(df, trace)
    assert len(quiet) == 8 and (quiet["cpu_ms"] == 20.0).all()
    assert quiet.index.tolist() == list(range(8))  # renumbered: the folds see positions
    assert len(df) == 10  # the trace itself is untouched


def test_no_quiet_variant_without_machine_state_or_metadata(study, tmp_path):
    df, trace = _run(tmp_path, np.full(5, 20.0), meta=False)
    assert study.quiet_steps(df, trace) is None  # no metadata: threads and cores unknown
    df, trace = _run(tmp_path, np.full(5, 20.0))
    assert study.quiet_steps(df.drop(columns="cpu_ms"), trace) is None


def test_forward_covers_every_single_run_once(study):
    # the repository's runs: the H200 trace, 8 GPU confirmation runs, 3 mixed replicates of
    # each of the three vLLM-CPU models (the derived calib-pre/-post traces are not replicates)
    names = [n for n, _ in study.forward_traces(ROOT / "data" / "vllm-cpu")]
    assert len(names) == len(set(names)) == 18
    assert names[0] == "gpu" and sum(n.startswith("gpu-confirmation") for n in names) == 8
    assert sorted(n for n in names if n.startswith("vllm-cpu")) == sorted(
        f"{pre}_{m}_mixed-r{r}" for pre, m in (("vllm-cpu", "llama-small"),
                                               ("vllm-cpu", "llama-tiny"),
                                               ("vllm-cpu-confirmation", "llama-mid"))
        for r in (1, 2, 3))


def test_replicate_files_are_the_mixed_runs_only(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    from evaluate_all import replicate_files

    for name in ("mixed-r1.csv", "mixed-r2.csv", "mixed-r1.calib-pre.csv", "mixed-rx.csv",
                 "closed_loop-r1.csv"):
        (tmp_path / name).write_text("")
    assert [p.name for p in replicate_files(tmp_path)] == ["mixed-r1.csv", "mixed-r2.csv"]
