"""The protocol's tasks for one engine's runs, and the rows every summary of them keeps.

Problem
-------
A folder of vLLM-CPU traces of one model (``data/vllm-cpu/<model>``, the
confirmation traces ``data/vllm-cpu-confirmation/<model>``) holds three
same-seed ``mixed`` replicate runs, decode/prefill/fixed-token sweeps and
sometimes closed-loop runs. The one evaluation protocol
(:mod:`perfmodel.stats.protocol`) judges a model on them in a fixed set of
ways: blocked folds over the time-ordered mixed runs, extrapolation beyond
the training range, and transfer from the sweeps to the mixed workload and
from the mixed workload to the closed loop. ``scripts/evaluate_protocol.py``
(development data) and notebook ``14_confirmation`` (data collected after
the model of record was frozen) must build exactly the same tasks and keep
the same summary columns, so both live here.

Verified in ``tests/stats/test_protocol_runs.py`` on a synthetic folder
(the tasks, their workloads and the summary columns).
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from perfmodel.errors import InputError
from perfmodel.stats.protocol import schemes_for

__all__ = ["SUMMARY_COLUMNS", "SWEEPS", "engine_run_tasks", "read_engine_runs", "summary_rows"]

#: trace files (stems) that form the ``sweeps`` workload
SWEEPS = ("decode_sweep", "prefill_sweep", "fixed_tokens")

#: the columns of one summary row (per dataset, scheme and candidate)
SUMMARY_COLUMNS = ("dataset", "scheme", "name", "kind", "status", "n_test", "MAPE",
                   "noise_floor", "ratio_to_floor", "ratio_lo", "ratio_hi", "lof_p", "n_params",
                   "MAPE_decode-only", "MAPE_mixed", "MAPE_prefill-heavy", "MdAPE", "RMSLE",
                   "diff_vs_ref", "diff_lo", "diff_hi", "p_vs_ref")


def read_engine_runs(folder) -> pd.DataFrame:
    """Every run of one model folder, with ``replicate`` (file stem) and ``workload``.

    ``workload`` is ``sweeps`` for the files in :data:`SWEEPS`, else the stem
    before ``-r`` (``mixed-r2`` -> ``mixed``, ``closed_loop-r1`` ->
    ``closed_loop``). Calibration traces (``*.calib*``) are left out.

    Parameters
    ----------
    folder : path-like
        A folder of trace CSV files (read with :func:`perfmodel.data.trace.read_trace`).

    Returns
    -------
    pandas.DataFrame
        All steps, one row each, files in name order.
    """
    from perfmodel.data.trace import read_trace

    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"not a folder of traces: {folder}")
    parts = []
    for f in sorted(folder.glob("*.csv")):
        if ".calib" in f.name:
            continue
        d = read_trace(f)
        d["replicate"] = f.stem
        d["workload"] = "sweeps" if f.stem in SWEEPS else f.stem.split("-r")[0]
        parts.append(d)
    if not parts:
        raise InputError(f"no trace files (*.csv) in {folder}")
    return pd.concat(parts, ignore_index=True)


def engine_run_tasks(full: pd.DataFrame, label: str) -> list[tuple[str, str, pd.DataFrame, dict]]:
    """The protocol's tasks on one model's runs: ``(label, scheme, steps, compare kwargs)``.

    Every scheme of :func:`perfmodel.stats.protocol.schemes_for` on the
    ``mixed`` runs; ``transfer:sweeps->mixed`` (train on the sweeps, test on
    the mixed runs) and, when closed-loop runs exist,
    ``transfer:mixed->closed_loop``.

    Parameters
    ----------
    full : pandas.DataFrame
        The output of :func:`read_engine_runs` (needs ``workload``).
    label : str
        The dataset label every task carries.
    """
    if not isinstance(full, pd.DataFrame) or "workload" not in full.columns:
        raise InputError("`full` must be the DataFrame of read_engine_runs (with 'workload')")
    mixed = full[full["workload"] == "mixed"].drop(columns="workload").reset_index(drop=True)
    if mixed.empty:
        raise InputError(f"{label}: no 'mixed' runs to evaluate on")
    tasks = [(label, s, mixed, {}) for s in schemes_for(mixed)]
    if (full["workload"] == "sweeps").any():
        tasks.append((label, "transfer:sweeps->mixed",
                      full[full["workload"].isin(["sweeps", "mixed"])].reset_index(drop=True),
                      {"cv": "transfer", "test_workload": "mixed"}))
    if (full["workload"] == "closed_loop").any():
        tasks.append((label, "transfer:mixed->closed_loop",
                      full[full["workload"].isin(["mixed", "closed_loop"])]
                      .reset_index(drop=True), {"cv": "transfer", "test_workload": "closed_loop"}))
    return tasks


def summary_rows(label: str, scheme: str, tab: pd.DataFrame) -> list[dict]:
    """One row per candidate of a :func:`perfmodel.stats.compare.compare` table.

    Keeps :data:`SUMMARY_COLUMNS` (a column the table lacks becomes NaN).
    """
    if not isinstance(tab, pd.DataFrame):
        raise InputError("`tab` must be the DataFrame returned by compare()")
    rows = []
    for _, r in tab.iterrows():
        row = {"dataset": label, "scheme": scheme}
        row.update({c: r.get(c, float("nan")) for c in SUMMARY_COLUMNS[2:]})
        rows.append(row)
    return rows
