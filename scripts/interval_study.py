#!/usr/bin/env python3
"""Held-out coverage of prediction intervals on every real dataset, per regime.

For each dataset of ``scripts/evaluate_all.py`` (the GPU trace, the vLLM-CPU
mixed replicates per model size, the Splitwise (model, GPU, TP) groups
pooled into one dataset; Sarathi and Vidur are not measured step times of
one engine run and are left out), the vLLM-CPU confirmation model
(``data/vllm-cpu-confirmation``, its mixed replicates as one data set
``vllm-cpu-confirmation_<model>``: collected after the model of record was
frozen; left out of ``--siblings``), each GPU
confirmation run (``data/gpu-confirmation*/run*/trace.csv``, data set
``<folder>_<run>``, another model shape, collected after the freeze) and each outer split of the fold engine
(:func:`perfmodel.stats.validation.make_folds`: 5 contiguous blocked folds
with 25-step time blocks for the vLLM-CPU engine traces, 5 grouped folds
otherwise), this script

1. fits the recommended model (:func:`perfmodel.core.model.default_for`) to
   the training side only;
2. calibrates Mondrian CV-conformal intervals on the training side only
   (:func:`perfmodel.stats.intervals.calibrate_intervals`, inner folds of the
   same scheme);
3. records, for every held-out step, whether the model-based
   (:func:`perfmodel.stats.intervals.model_interval`) and the conformal
   interval at 0.8, 0.9 and 0.95 contain its measured time.

It prints (and with ``--out`` writes) the coverage per dataset x regime x
level with the count of held-out steps ``n`` (``covered``: those inside the
conformal interval, so the exact share is ``covered / n``), the binomial standard
error of the conformal coverage (``se_binomial``: steps taken as independent, unlike the
``se`` of :func:`perfmodel.stats.interval_coverage.interval_check`, which carries the
design effect), the median relative width
``(upper - lower) / predicted`` of each interval (an interval that covers by
being wide shows here) and ``deff``, the design effect of the conformal
interval's inside/outside indicators within the held-out steps' clusters
(:func:`perfmodel.stats.interval_coverage.coverage_clusters`: configuration,
else 25-step time block), which the cluster-aware sampling reference of
notebook 17 uses, and ``fold_min`` / ``fold_max``, the smallest and largest
conformal coverage of one outer fold's held-out steps (pooled over the folds
the coverage of a calibration regime is near its level by construction: every
step is a calibration point of the other folds' intervals; the folds' spread
shows how far one fold's interval strays).

``--transfer`` adds the across-runs check: for each model folder of
``--cpu-root`` (default ``data/vllm-cpu``), ``mixed-r1.csv`` is fitted and
calibrated as ``perfmodel fit`` does, and every other trace of the folder
(same-seed replicates, closed loop, sweeps, fixed tokens) is predicted with
the interval at each level: coverage and width per trace x phase.  No fold
of one run can see a run-level shift, so this measures how far an interval
made on one run carries to another.  Each trace is covered a second time with
the run-level term (:mod:`perfmodel.stats.run_term`) whose sd is estimated
from the folder's OTHER traces, the test trace and ``mixed-r1`` left out
(:func:`perfmodel.stats.run_level.run_level_spread`, as ``perfmodel fit
--run-traces`` does): columns ``run_sd``, ``run_n`` (runs it came from),
``conformal_run`` and ``width_run`` (``covered`` / ``covered_run``: the steps inside, for
exact shares); a third time by the online interval
(:func:`perfmodel.stats.interval_online.online_interval`: each step from the
trace's measured steps before it, starting from the stored calibration):
``online``, ``width_online``, ``covered_online``; ``deff``, ``deff_run`` and
``deff_online`` are the design effects of the intervals' indicators within
25-step time blocks.  Regimes: ``all``; the phases of
:func:`perfmodel.stats.validation.regime`; ``short`` / ``medium`` / ``long`` by the
calibration's rule (predicted time in the bottom, middle or top third of the
training steps' predicted times); ``pred>=10ms`` (predicted time >= 10 ms).

``--siblings`` adds, for a data set of several parts (the Splitwise (model,
GPU, TP) groups, each fitted on its own), the same study with the held-out
scores of the other parts pooled into each outer fold's calibration
(:func:`perfmodel.stats.intervals.sibling_scores`, ``perfmodel fit
--sibling-traces``): data set ``<name>-siblings``.  The part being covered
contributes only its training side's inner scores, as without siblings; the
siblings are scored on all their steps (none of them is the part's), and each
outer fold's siblings are cut to the steps whose schedule no held-out step of
the fold shares (the parts ran the same schedules; ``<name>-shared-siblings``
keeps them, to show what the cut changes); ``-siblings-groups`` beside the
table gives each part's own all-steps coverage, alone and with siblings.  It also
covers each vLLM-CPU model size with the other size's scores pooled
(``vllm-cpu_<model>-siblings``): a check of what pooling does where the
siblings' relative errors differ.

``--across-runs`` measures the across-run calibration
(``calibrate_intervals(..., run_column=)``, ``perfmodel fit A.csv B.csv``)
before/after on the same training data: for each model folder of
``--cpu-root`` the recommended model is fitted to ``mixed-r1`` + ``mixed-r2``
(:func:`perfmodel.data.trace.read_runs`) and calibrated twice, within-run
(the two files as one trace, as before) and across runs (every score from a
refit on the other run); ``mixed-r3``, the closed-loop runs and the sweeps
are predicted at each level.  With ``--gpu-root`` (a folder holding
``run1/trace.csv`` and ``run2/trace.csv``, harness traces with a
``replicate`` column = replicate within one run) it also fits ``run1`` and
covers ``run2``: within-run, and across the ``replicate`` column of run1
(the only runs run1 holds; nothing is tuned on these traces).  Regimes as
in ``--transfer``, plus the calibration's length thirds; ``width`` is the
median of ``(upper - lower) / predicted``.

``--forward`` asks "fit today, predict later steps" of every single engine run
with time order (the H200 trace ``data/gpu``, each GPU confirmation run, each
vLLM-CPU ``mixed-r*`` replicate of ``--cpu-root`` and of
``data/vllm-cpu-confirmation``): the outer folds are the fold engine's
expanding windows (train on the steps before a window, cover the window;
``perfmodel coverage --cv expanding``,
:func:`perfmodel.stats.interval_heldout.held_out_intervals` and
:func:`~perfmodel.stats.interval_heldout.held_out_coverage`, the package's
tally).  A vLLM-CPU run is covered twice: all steps, and its quiet steps only
(the contended ones of the collector's rule,
:func:`perfmodel.data.collect.machine_state.flag_contended_run` with the run's
threads and cores from its metadata, dropped before the folds are made),
which separates the host's contention from the engine's drift.  Columns:
``dataset``, ``steps`` (``all`` / ``quiet``), ``n_trace`` (steps of the trace
covered), then those of ``held_out_coverage`` (``covered``: the steps inside);
``-forward-windows`` beside it has, per run and test window, the steps its fit
saw (``n_train``: the steps before the window, less those sharing a
configuration or schedule group with it, which the fold engine drops), the
window's first step (``first_row``, position in the run covered), the steps
covered (``n``) and those inside the interval at each level
(``covered_<level>``): whether a window's coverage depends on how much of the
run its fit saw.  ``-forward-online`` is the per-regime table of the same
held-out steps covered by the online interval
(:func:`perfmodel.stats.interval_online.online_held_out`: each window in time
order, each step from the measured steps of the window before it, starting
from the window's conformal interval; ``runs``: :func:`runs_role`), and
``-online-gamma`` the selection
of its step size: per run (all steps), method (``conformal``, or ``online``
at each step size of the grid) and level, the mean interval score (Gneiting
and Raftery 2007) on the fit scale and the coverage, each run labelled
``development`` or ``confirmation`` (:func:`runs_role`; the package's
``GAMMA`` is the grid value of lowest mean score over the development rows).
``--only`` does not apply to ``--forward`` (which covers every
single run: ``--only none --forward`` runs the forward study alone).

With ``--out FILE`` each table is written atomically (``FILE``, and with the
stem suffixed ``-transfer`` / ``-across-runs`` / ``-forward``), and ``<stem>-settings.json``
beside it records the settings, the start time, the wall time and the 1-minute
load average at the start and the end (the stored results the paper reads:
``paper/results/interval_coverage*``).

Usage::

    nice python scripts/interval_study.py [--only gpu vllm-cpu splitwise] [--out FILE]
    nice python scripts/interval_study.py --only none --transfer [--cpu-root DIR]
    nice -n 10 python scripts/interval_study.py --transfer --siblings --out paper/results/interval_coverage.csv
    nice python scripts/interval_study.py --only none --across-runs [--gpu-root DIR]
    nice python scripts/interval_study.py --only none --forward --out paper/results/interval_coverage_time.csv
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from perfmodel.stats.interval_coverage import TOLERANCE, inside_interval
from perfmodel.stats.interval_heldout import DEFAULT_LEVELS as LEVELS

#: data-set prefix of the confirmation model (collected after the model of record was frozen)
CONFIRMATION = "vllm-cpu-confirmation"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def wanted(name: str, only) -> bool:
    """Whether ``--only`` keeps data set ``name`` (a prefix of it given; no ``--only``: all)."""
    return not only or any(name.startswith(o) for o in only)


def gpu_confirmation_traces():
    """(data set ``<folder>_<run>``, trace path) of each GPU confirmation run, in order."""
    for trace in sorted((ROOT / "data").glob("gpu-confirmation*/run*/trace.csv")):
        yield f"{trace.parent.parent.name}_{trace.parent.name}", trace


def study_parts(only):
    """(dataset, [(part label, loader)], scheme, time_ordered)."""
    from evaluate_all import datasets

    parts: dict[str, list] = {}
    for label, load in datasets():
        if label in ("sarathi", "vidur"):
            continue
        name = "splitwise" if label.startswith("splitwise") else label
        if not wanted(name, only):
            continue
        parts.setdefault(name, []).append((label, load))
    confirm = ROOT / "data" / "vllm-cpu-confirmation"
    if confirm.is_dir():  # the confirmation model: after the data sets above, so their
        from evaluate_all import mixed_replicates  # rows keep their order

        for mdir in sorted(d for d in confirm.iterdir() if d.is_dir()):
            load = mixed_replicates(mdir)
            name = f"{CONFIRMATION}_{mdir.name}"
            if load is not None and wanted(name, only):
                parts[name] = [(name, load)]
    from perfmodel.data.trace import read_trace

    # the GPU confirmation runs (another model shape, collected after the freeze, each on its
    # own: data set gpu-confirmation[-<lease>]_<run>); one run each, so within-run only
    for name, trace in gpu_confirmation_traces():
        if wanted(name, only):
            parts[name] = [(name, lambda p=trace: read_trace(p))]
    for name, loads in parts.items():
        cpu = name.startswith("vllm-cpu")
        yield name, loads, ("blocked" if cpu else "grouped"), (True if cpu else None)


def one_part(df: pd.DataFrame, scheme: str, time_ordered, starts: int,
             siblings=None) -> pd.DataFrame:
    """Per held-out step: regimes, measured and predicted time, interval bounds per level
    (``siblings``: :func:`perfmodel.stats.intervals.sibling_scores` records pooled into each
    outer fold's calibration, or a function of the fold's test steps returning them): the
    package's protocol, :func:`perfmodel.stats.interval_heldout.held_out_intervals`."""
    from perfmodel.stats.interval_heldout import held_out_intervals

    return held_out_intervals(df, levels=LEVELS, scheme=scheme, k=5, seed=0,
                              time_ordered=time_ordered, n_starts=starts, siblings=siblings,
                              model_band=True)


def with_siblings(name: str, loads, scheme: str, timed, starts: int,
                  variants=("disjoint", "shared")) -> dict:
    """``--siblings``: each part of a data set of several parts (the Splitwise groups; or the
    vLLM-CPU model sizes) covered again with the held-out scores of the OTHER parts pooled
    into every outer fold's calibration (leave-one-part-out: no score of the part's own
    held-out steps, nor of any of its steps, comes from a sibling).  The parts may share
    schedules (the Splitwise groups ran the same requests on other GPUs): each outer fold's
    siblings are cut to the steps whose schedule (the fold engine's identity key: batch size,
    tokens, the multiset of chunk and context pairs) no held-out step of that fold has, so no
    twin of a held-out step is a calibration point (``shared``: the same without that cut, to
    show what it changes; only when ``variants`` holds it).  Returns ``{(part, variant):
    steps}``, variant ``disjoint`` or ``shared``."""
    from perfmodel.core.fit import fit_model
    from perfmodel.core.model import default_for
    from perfmodel.stats.intervals import sibling_scores
    from perfmodel.stats.schedule_key import _schedule_key

    frames = {label: load() for label, load in loads}
    records = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for label, df in frames.items():
            fit = fit_model(df, default_for(df), n_starts=starts)
            records[label] = sibling_scores(fit, df, label, scheme=scheme, k=5, seed=0,
                                            time_ordered=timed, n_starts=min(starts, 4))
        cols = ["batch_size", "total_tokens", "chunk_sizes", "context_lens"]

        def disjoint(label):
            others = [k for k in records if k != label]

            def cut(test):
                out = []
                for k in others:
                    r, d = records[k], frames[k]
                    c = [x for x in cols if x in d.columns and x in test.columns]
                    key = _schedule_key(pd.concat([test[c], d[c]], ignore_index=True))
                    mine = key[len(test):][r["rows"]]
                    keep = ~np.isin(mine, key[:len(test)])
                    out.append({f: (v[keep] if isinstance(v, np.ndarray) else v)
                                for f, v in r.items()})
                return out
            return cut

        steps = {}
        for label, df in frames.items():
            log(f"{name}: {label} with the scores of its {len(frames) - 1} siblings")
            steps[label, "disjoint"] = one_part(df, scheme, timed, starts, siblings=disjoint(label))
            if "shared" in variants:
                steps[label, "shared"] = one_part(
                    df, scheme, timed, starts, siblings=[r for k, r in records.items() if k != label])
    return steps


def group_coverage(parts: dict) -> pd.DataFrame:
    """All-steps conformal coverage of each part at each level: ``{(part, calibration): steps}``
    -> one row per part x calibration x level (how far the parts' own coverages spread around
    the pooled one)."""
    rows = []
    for (part, calib), st in parts.items():
        y = st["y"].to_numpy(float)
        for lv in LEVELS:
            inside = inside_interval(y, st[f"conformal_lo_{lv}"], st[f"conformal_hi_{lv}"])
            rows.append({"part": part, "calibration": calib, "level": lv, "n": len(st),
                         "conformal": round(float(inside.mean()), 3)})
    return pd.DataFrame(rows)


def summarise(name: str, steps: pd.DataFrame) -> pd.DataFrame:
    """Coverage of the model and conformal intervals per regime x level (one_part's steps)."""
    from perfmodel.stats.interval_coverage import (
        coverage_by_regime,
        regime_masks,
        within_tolerance,
    )

    y, mu = steps["y"].to_numpy(float), steps["mu"].to_numpy(float)
    masks = regime_masks(steps["phase"], steps["length"], mu, long_ms=10.0,
                         long_label="pred>=10ms")
    tab = {k: coverage_by_regime(y, mu, {lv: (steps[f"{k}_lo_{lv}"], steps[f"{k}_hi_{lv}"])
                                         for lv in LEVELS}, masks,
                                 clusters=steps["cluster"].to_numpy(object))
           for k in ("model", "conformal")}
    m, c = tab["model"], tab["conformal"]
    # the conformal coverage of each outer fold's test steps alone: its range over the folds
    fold = steps["fold"].to_numpy()
    per_fold = []
    for f in np.unique(fold):
        sel = fold == f
        per_fold.append(coverage_by_regime(
            y[sel], mu[sel], {lv: (steps[f"conformal_lo_{lv}"][sel], steps[f"conformal_hi_{lv}"][sel])
                              for lv in LEVELS}, {k: v[sel] for k, v in masks.items()}))
    span = pd.concat(per_fold).groupby(["regime", "level"])["coverage"].agg(["min", "max"])
    span = span.reindex(pd.MultiIndex.from_frame(c[["regime", "level"]]))
    r3 = lambda col: col.map(lambda v: round(float(v), 3))  # Python's rounding, as before
    return pd.DataFrame({"dataset": name, "regime": m["regime"], "level": m["level"],
                         "n": m["n"], "model": r3(m["coverage"]), "conformal": r3(c["coverage"]),
                         "width_model": r3(m["width"]), "width_conformal": r3(c["width"]),
                         "se_binomial": r3(np.sqrt(m["level"] * (1 - m["level"]) / m["n"])),
                         "within_3pt": within_tolerance(c["coverage"], c["level"], TOLERANCE),
                         "deff": c["design_effect"].map(lambda v: round(float(v), 2)),
                         "fold_min": r3(pd.Series(span["min"].to_numpy())),
                         "fold_max": r3(pd.Series(span["max"].to_numpy())),
                         # the steps inside the conformal interval: the exact share for the
                         # tolerance and the tests (the 3-decimal coverage can sit on an edge)
                         "covered": (c["coverage"] * c["n"]).round().astype(int)})


def forward_traces(cpu_root: Path):
    """(data set, trace path) of every single engine run the forward study covers, in a fixed
    order: the H200 trace, the GPU confirmation runs, the vLLM-CPU mixed replicates of
    ``cpu_root`` and of the confirmation folder."""
    gpu = ROOT / "data" / "gpu" / "trace.csv"
    if gpu.exists():
        yield "gpu", gpu
    yield from gpu_confirmation_traces()
    from evaluate_all import replicate_files

    for root, prefix in ((cpu_root, "vllm-cpu"), (ROOT / "data" / CONFIRMATION, CONFIRMATION)):
        if root.is_dir():
            for mdir in sorted(d for d in root.iterdir() if d.is_dir()):
                for trace in replicate_files(mdir):
                    yield f"{prefix}_{mdir.name}_{trace.stem}", trace


def quiet_steps(df: pd.DataFrame, trace: Path):
    """The steps of a vLLM-CPU run that the collector's rule does not flag as contended
    (:func:`perfmodel.data.collect.machine_state.flag_contended_run`, the run's threads and
    cores from its metadata), or None when the trace has no machine state or no metadata."""
    import json

    from perfmodel.data.collect.machine_state import flag_contended_run

    meta = trace.with_suffix(".meta.json")
    if "cpu_ms" not in df.columns or not meta.exists():
        return None
    busy = flag_contended_run(df, json.loads(meta.read_text()))["contended"].to_numpy(bool)
    return df[~busy].reset_index(drop=True)


def runs_role(name: str) -> str:
    """``'confirmation'`` for the runs collected after the model was frozen (the GPU and
    vLLM-CPU confirmation folders), ``'development'`` for the others: the online interval's
    step size is selected on the development runs only."""
    return "confirmation" if "confirmation" in name else "development"


def _tally(steps: pd.DataFrame, method: str, name: str, variant: str, n_trace: int):
    """The package's per-regime tally of one run's held-out steps, with the run's labels and
    the exact covered counts."""
    from perfmodel.stats.interval_heldout import held_out_coverage

    tab = held_out_coverage(steps, tolerance=TOLERANCE, method=method)
    tab.insert(0, "n_trace", n_trace)
    tab.insert(0, "steps", variant)
    tab.insert(0, "dataset", name)
    tab["covered"] = (tab["coverage"] * tab["n"]).round().astype(int)
    for col in ("coverage", "width", "design_effect", "se", "p_within"):
        tab[col] = tab[col].map(lambda v: float(f"{v:.6g}"))
    return tab


def online_scores(steps: pd.DataFrame, name: str) -> pd.DataFrame:
    """Per method and level: the mean interval score (fit scale) and coverage of one run's
    held-out steps, for the conformal interval (``gamma`` empty) and the online interval at
    each step size of the grid (the selection of
    :data:`perfmodel.stats.interval_online.GAMMA`)."""
    from perfmodel.core.scale import get_scale
    from perfmodel.stats.interval_online import (
        GAMMA_GRID,
        bound_scores,
        interval_score,
        online_held_out,
    )

    scale = get_scale(steps.attrs["scale"])
    mu, y = steps["mu"].to_numpy(float), steps["y"].to_numpy(float)
    rows = []
    for method, g in [("conformal", None)] + [("online", g) for g in GAMMA_GRID]:
        on = steps if g is None else online_held_out(steps, gamma=g)
        for lv in LEVELS:
            lo = on[f"{method}_lo_{lv}"].to_numpy(float)
            hi = on[f"{method}_hi_{lv}"].to_numpy(float)
            sc = interval_score(scale.residual(y, mu), bound_scores(scale, mu, lo, "lower"),
                                bound_scores(scale, mu, hi, "upper"), lv)
            rows.append({"dataset": name, "runs": runs_role(name), "method": method,
                         "gamma": g, "level": lv, "n": len(y),
                         "interval_score": float(f"{sc.mean():.6g}"),
                         "coverage": float(f"{np.mean(inside_interval(y, lo, hi)):.6g}")})
    return pd.DataFrame(rows)


def forward(cpu_root: Path, starts: int):
    """Forward-in-time coverage of every single run (module docstring, ``--forward``): the
    per-regime table, and per test window the steps its fit saw (``n_train``), the steps it
    covers and those inside the interval at each level (``covered_<level>``); the same
    per-regime table of the online interval; the online step-size selection table."""
    from perfmodel.data.trace import read_trace
    from perfmodel.stats.interval_heldout import held_out_intervals
    from perfmodel.stats.interval_online import online_held_out

    out, windows, online, scores = [], [], [], []
    for name, trace in forward_traces(cpu_root):
        df = read_trace(trace).reset_index(drop=True)
        variants = [("all", df)]
        if name.startswith("vllm-cpu") and (quiet := quiet_steps(df, trace)) is not None:
            variants.append(("quiet", quiet))
        for variant, d in variants:
            log(f"forward: {name} ({variant} steps: {len(d)})")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                steps = held_out_intervals(d, levels=LEVELS, scheme="expanding", k=5, seed=0,
                                           n_starts=starts)
            y = steps["y"].to_numpy(float)
            inside = {f"covered_{lv}": inside_interval(y, steps[f"conformal_lo_{lv}"],
                                                       steps[f"conformal_hi_{lv}"])
                      for lv in LEVELS}
            per = pd.DataFrame({"fold": steps["fold"], "n_train": steps["n_train"],
                                "row": steps["row"], **inside})
            win = per.groupby(["fold", "n_train"]).agg(
                first_row=("row", "min"), n=("fold", "size"),
                **{k: (k, "sum") for k in inside}).reset_index()
            windows.append(win.assign(dataset=name, steps=variant))
            out.append(_tally(steps, "conformal", name, variant, len(d)))
            online.append(_tally(online_held_out(steps), "online", name, variant, len(d))
                          .assign(runs=runs_role(name)))
            if variant == "all":
                scores.append(online_scores(steps, name))
    win = pd.concat(windows, ignore_index=True)
    win = win[["dataset", "steps"] + [c for c in win.columns if c not in ("dataset", "steps")]]
    return (pd.concat(out, ignore_index=True), win, pd.concat(online, ignore_index=True),
            pd.concat(scores, ignore_index=True))


def transfer(cpu_root: Path, starts: int) -> pd.DataFrame:
    """Fit and calibrate on ``mixed-r1.csv`` of each model folder; cover its other traces,
    without and with the run-level term (module docstring, ``--transfer``)."""
    from perfmodel.core.fit import fit_model
    from perfmodel.core.model import default_for
    from perfmodel.data.trace import read_trace
    from perfmodel.stats.interval_coverage import (
        coverage_by_regime,
        coverage_clusters,
        regime_masks,
    )
    from perfmodel.stats.interval_online import online_interval
    from perfmodel.stats.intervals import calibrate_intervals, conformal_interval
    from perfmodel.stats.run_level import run_level_spread
    from perfmodel.stats.run_term import run_term_record, with_run_term
    from perfmodel.stats.validation import regime

    rows = []
    for mdir in sorted(d for d in cpu_root.iterdir() if d.is_dir()):
        base = mdir / "mixed-r1.csv"
        if not base.exists():
            continue
        log(f"transfer: {mdir.name}: fit and calibrate on {base.name}")
        df = read_trace(base)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = fit_model(df, default_for(df), n_starts=starts)
            fit.interval_calibration = calibrate_intervals(fit, df, n_starts=min(starts, 4))
        traces = {p.stem: read_trace(p) for p in sorted(mdir.glob("*.csv"))
                  if ".calib-" not in p.name and p != base}
        for name, test in traces.items():
            # the run-level sd of the runs the fit did not see, the test run left out
            est = run_level_spread(fit, {k: v for k, v in traces.items() if k != name})
            term = with_run_term(fit.interval_calibration, run_term_record(est["sd"], estimate=est))
            y, mu = test["duration_ms"].to_numpy(float), fit.predict(test)
            masks = regime_masks(regime(test).astype(str).to_numpy())
            clusters = coverage_clusters(test)
            cov, cov_run = (coverage_by_regime(y, mu, {lv: conformal_interval(fit, test, lv, cal)
                                                       for lv in LEVELS}, masks,
                                               clusters=clusters)
                            for cal in (None, term))
            cov_run = cov_run.set_index(["regime", "level"])
            # the online interval: each step of the trace from its measured predecessors,
            # starting from the stored (within-run) calibration, no run term
            cov_on = coverage_by_regime(y, mu, {lv: online_interval(fit, test, lv)
                                                for lv in LEVELS}, masks,
                                        clusters=clusters).set_index(["regime", "level"])
            for r in cov.sort_values("level", kind="stable").itertuples():
                m, rr = masks[r.regime], cov_run.loc[(r.regime, r.level)]
                ro = cov_on.loc[(r.regime, r.level)]
                rows.append({"dataset": mdir.name, "trace": name, "regime": r.regime,
                             "level": r.level, "n": r.n, "conformal": round(r.coverage, 3),
                             "width_conformal": round(r.width, 3),
                             "median_log_ratio": round(float(np.median(
                                 np.log(y[m] / mu[m]))), 3),
                             "run_sd": round(est["sd"], 4), "run_n": est["n_runs"],
                             "conformal_run": round(float(rr["coverage"]), 3),
                             "width_run": round(float(rr["width"]), 3),
                             "deff": round(float(r.design_effect), 2),
                             "deff_run": round(float(rr["design_effect"]), 2),
                             "covered": round(float(r.coverage) * r.n),
                             "covered_run": round(float(rr["coverage"]) * r.n),
                             "online": round(float(ro["coverage"]), 3),
                             "width_online": round(float(ro["width"]), 3),
                             "deff_online": round(float(ro["design_effect"]), 2),
                             "covered_online": round(float(ro["coverage"]) * r.n)})
    return pd.DataFrame(rows)


def _cover(dataset: str, calib: str, fit, test: pd.DataFrame, trace: str) -> list[dict]:
    """Coverage and median width of the fit's stored interval on ``test``, per regime x level."""
    from perfmodel.stats.interval_coverage import (
        coverage_by_regime,
        regime_masks,
        within_tolerance,
    )
    from perfmodel.stats.intervals import conformal_interval, interval_regimes

    cal = fit.interval_calibration
    y, mu = test["duration_ms"].to_numpy(float), fit.predict(test)
    phase, length = interval_regimes(test, mu, cal["regime_rule"]["length_thresholds_ms"])
    bounds = {lv: conformal_interval(fit, test, lv) for lv in LEVELS}
    cov = coverage_by_regime(y, mu, bounds, regime_masks(phase, length))
    return [{"dataset": dataset, "calibration": calib, "trace": trace, "regime": r.regime,
             "level": r.level, "n": r.n, "coverage": round(r.coverage, 3),
             "width": round(r.width, 3),
             "within_3pt": bool(within_tolerance(r.coverage, r.level, TOLERANCE)[0])}
            for r in cov.sort_values("level", kind="stable").itertuples()]


def _fit_both(df: pd.DataFrame, run_column: str, starts: int):
    """The recommended fit of ``df`` with a within-run and an across-run calibration."""
    import copy

    from perfmodel.core.fit import fit_model
    from perfmodel.core.model import default_for
    from perfmodel.stats.intervals import calibrate_intervals

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = fit_model(df, default_for(df), n_starts=starts)
        out = {}
        for calib, col in (("within-run", None), ("across-runs", run_column)):
            f = copy.copy(fit)
            f.interval_calibration = calibrate_intervals(fit, df, n_starts=min(starts, 4),
                                                         run_column=col)
            out[calib] = f
    return out


def across_runs(cpu_root: Path, gpu_root: Path | None, starts: int) -> pd.DataFrame:
    """Before/after of the across-run calibration (module docstring, ``--across-runs``)."""
    from perfmodel.data.trace import read_runs, read_trace

    rows = []
    for mdir in sorted(d for d in cpu_root.iterdir() if d.is_dir()):
        train = [mdir / "mixed-r1.csv", mdir / "mixed-r2.csv"]
        if not all(p.exists() for p in train):
            continue
        log(f"across-runs: {mdir.name}: fit mixed-r1 + mixed-r2, calibrate within / across")
        fits = _fit_both(read_runs(train), "run", starts)
        for path in sorted(mdir.glob("*.csv")):
            if ".calib-" in path.name or path in train:
                continue
            test = read_trace(path)
            for calib, fit in fits.items():
                rows += _cover(mdir.name, calib, fit, test, path.stem)
    if gpu_root is not None:
        log(f"across-runs: {gpu_root}: fit run1, cover run2 (confirmation, nothing tuned)")
        fits = _fit_both(read_trace(gpu_root / "run1" / "trace.csv"), "replicate", starts)
        test = read_trace(gpu_root / "run2" / "trace.csv")
        for calib, fit in fits.items():
            label = calib if calib == "within-run" else "across-replicates"
            rows += _cover(gpu_root.name, label, fit, test, "run2")
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--starts", type=int, default=4)
    ap.add_argument("--out", default=None, help="CSV of the table (written atomically)")
    ap.add_argument("--transfer", action="store_true",
                    help="also fit on mixed-r1 of each --cpu-root model and cover its other traces")
    ap.add_argument("--cpu-root", default=str(ROOT / "data" / "vllm-cpu"))
    ap.add_argument("--across-runs", action="store_true",
                    help="fit mixed-r1 + mixed-r2, calibrate within-run and across runs, "
                         "cover mixed-r3, the closed loop and the sweeps")
    ap.add_argument("--siblings", action="store_true",
                    help="also cover each part of a data set of several parts (the Splitwise "
                         "groups) with the other parts' held-out scores pooled into its "
                         "calibration (data set '<name>-siblings')")
    ap.add_argument("--forward", action="store_true",
                    help="cover later steps of every single run from a fit on the earlier "
                         "ones (expanding windows; vLLM-CPU runs also without contended steps)")
    ap.add_argument("--gpu-root", default=None,
                    help="with --across-runs: a folder with run1/trace.csv and run2/trace.csv")
    args = ap.parse_args(argv)
    started = (time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()), time.perf_counter(),
               os.getloadavg()[0])
    tables, group_tables = [], []
    for name, loads, scheme, timed in study_parts(args.only):
        steps = []
        for label, load in loads:
            log(f"{name}: {label} ({scheme} folds)")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                steps.append(one_part(load(), scheme, timed, args.starts))
        tables.append(summarise(name, pd.concat(steps, ignore_index=True)))
        if args.siblings and len(loads) > 1:
            sib = with_siblings(name, loads, scheme, timed, args.starts)
            for variant, tag in (("disjoint", "siblings"), ("shared", "shared-siblings")):
                tables.append(summarise(f"{name}-{tag}", pd.concat(
                    [v for (_, vv), v in sib.items() if vv == variant], ignore_index=True)))
            groups = {(label, "alone"): st for (label, _), st in zip(loads, steps)}
            groups.update({(label, f"siblings ({v})"): st for (label, v), st in sib.items()})
            group_tables.append(group_coverage(groups).assign(dataset=name))
    if args.siblings:  # the vLLM-CPU model sizes as each other's siblings: a check of the
        cpu = [(name, loads[0]) for name, loads, _, _ in study_parts(args.only)
               if name.startswith("vllm-cpu") and not name.startswith(CONFIRMATION)
               and len(loads) == 1]
        if len(cpu) > 1:  # assumption where the relative errors differ
            for (label, variant), steps in with_siblings(
                    "vllm-cpu", [(n, ld[1]) for n, ld in cpu], "blocked", True,
                    args.starts, variants=("disjoint",)).items():
                if variant == "disjoint":
                    tables.append(summarise(f"{label}-siblings", steps))
    from perfmodel._io import atomic_write_text

    def emit(table: pd.DataFrame, suffix: str) -> None:
        """Print a result table; with --out also write it (``suffix`` added to the file stem)."""
        with pd.option_context("display.max_rows", None, "display.width", 200):
            print(table.to_string(index=False))
        if args.out:
            out = Path(args.out)
            atomic_write_text(out.with_name(out.stem + suffix + out.suffix),
                              table.to_csv(index=False), force=True)

    if tables:
        emit(pd.concat(tables, ignore_index=True), "")
    if group_tables:
        emit(pd.concat(group_tables, ignore_index=True), "-siblings-groups")
    if args.transfer:
        emit(transfer(Path(args.cpu_root), args.starts), "-transfer")
    if args.across_runs:
        emit(across_runs(Path(args.cpu_root), Path(args.gpu_root) if args.gpu_root else None,
                         args.starts), "-across-runs")
    if args.forward:
        table, windows, online, scores = forward(Path(args.cpu_root), args.starts)
        emit(table, "-forward")
        emit(windows, "-forward-windows")
        emit(online, "-forward-online")
        emit(scores, "-online-gamma")
    if args.out:
        write_settings(Path(args.out), args, started)
    return 0


def write_settings(out: Path, args, started) -> None:
    """``<stem>-settings.json`` beside ``out``: settings, wall time and load of this run."""
    import json

    from perfmodel._io import atomic_write_text, json_safe

    utc, t0, load0 = started
    record = {"levels": list(LEVELS), "k": 5, "fold_seed": 0, "n_starts": args.starts,
              "only": args.only, "transfer": args.transfer, "across_runs": args.across_runs,
              "forward": args.forward,
              "siblings": args.siblings,
              "cpu_root": os.path.relpath(args.cpu_root, ROOT), "gpu_root": args.gpu_root,
              "started_utc": utc, "wall_seconds": round(time.perf_counter() - t0, 1),
              "load_average_1min_start_end": [round(load0, 2), round(os.getloadavg()[0], 2)],
              "cpu_count": os.cpu_count(), "niceness": os.nice(0),
              "blas_threads": {k: os.environ.get(k) for k in
                               ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}}
    atomic_write_text(out.with_name(out.stem + "-settings.json"),
                      json.dumps(json_safe(record), indent=2) + "\n", force=True)


if __name__ == "__main__":
    sys.exit(main())
