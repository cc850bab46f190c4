"""Held-out coverage of the conformal prediction interval on one trace.

Problem
-------
Whether ``perfmodel predict --interval`` holds on a user's engine is a
question about steps the fit did not see, per regime.  The paper's study
(``scripts/interval_study.py``) answers it for the repository's datasets;
this module is that protocol as one function, so the same check runs on any
trace: each outer fold of the fold engine
(:func:`perfmodel.stats.intervals.resolved_folds`: contiguous time blocks
for a time-ordered trace, configuration + identical-schedule groups
otherwise, leak-free) is fitted and calibrated on its training side only,
exactly as ``perfmodel fit`` does (the model of record, its default scale,
the Mondrian CV-conformal calibration with inner folds of the same kind),
and its held-out steps are covered by
:func:`perfmodel.stats.intervals.conformal_interval`.  The tally per regime
and level (coverage, width, design effect, s.e., within the tolerance,
consistent with the level) is :func:`perfmodel.stats.interval_coverage.interval_check`'s.

With ``scheme='expanding'`` the outer folds are forward in time instead
(train on the steps before a window, cover the window): a drift of the
engine's speed within the run then shows, as it would for a user who fits
today and predicts later steps.

What it does not check: a shift between runs, workloads or machines (all
folds come from one trace; README.md, Prediction intervals, "Across runs").

Verified against the stored held-out rows of ``scripts/interval_study.py``
(which calls :func:`held_out_intervals`; rerunning it reproduces
``paper/results/interval_coverage.csv`` bit for bit) and in
tests/stats/test_interval_heldout.py (known-truth traces, bad input).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from perfmodel._checks import check_int_range
from perfmodel.data.trace_features import time_rank
from perfmodel.errors import InputError
from perfmodel.stats.folds import DEFAULT_BLOCK
from perfmodel.stats.interval_coverage import TOLERANCE, coverage_clusters, interval_check
from perfmodel.stats.intervals import (
    LEVELS,
    Interval,
    calibrate_intervals,
    conformal_interval,
    interval_regimes,
    model_interval,
    resolved_folds,
    stored_level_index,
)
from perfmodel.stats.predictive import _level

__all__ = ["DEFAULT_LEVELS", "SCHEMES", "check_levels", "held_out_coverage",
           "held_out_intervals"]

#: the levels the paper's tables report
DEFAULT_LEVELS = (0.8, 0.9, 0.95)
#: outer folds: 'auto' / 'grouped' / 'blocked' (every step held out once, the calibration's
#: inner folds of the same kind) or 'expanding' (forward: each test window after its training
#: steps in time, make_folds' expanding windows; the first window is never tested; inner folds
#: 'auto')
SCHEMES = ("auto", "grouped", "blocked", "expanding")


def check_levels(levels) -> list[float]:
    """Interval levels, each one the calibration stores (0.50, 0.51, ..., 0.99), none
    repeated; a single number is one level.  Returns the stored values (so 0.9000000001 is
    0.9, and names the columns ``conformal_lo_0.9``)."""
    if isinstance(levels, (int, float, np.floating, np.integer)) and not isinstance(levels, bool):
        levels = [levels]
    if isinstance(levels, (str, bytes)) or not hasattr(levels, "__iter__"):
        raise InputError(f"levels must be a number or a list of numbers, got {levels!r}")
    out = [_level(v) for v in levels]
    if not out:
        raise InputError("levels: give at least one level")
    cal = {"levels": list(LEVELS)}
    idx = [stored_level_index(cal, v) for v in out]
    bad = [v for v, i in zip(out, idx) if i is None]
    if bad:
        raise InputError(f"levels {bad} are not calibrated: the calibration stores "
                         f"{LEVELS[0]}..{LEVELS[-1]} in steps of 0.01")
    if len(set(idx)) != len(idx):
        raise InputError(f"levels must not repeat, got {out}")
    return [LEVELS[i] for i in idx]


def held_out_intervals(df: pd.DataFrame, *, levels=DEFAULT_LEVELS, model: str | None = None,
                       scheme: str = "auto", k: int = 5, seed: int = 0,
                       time_ordered: bool | None = None, n_starts: int = 4, siblings=None,
                       model_band: bool = False) -> pd.DataFrame:
    """Conformal intervals of every held-out step of ``df``, outer fold by outer fold.

    Parameters
    ----------
    df : DataFrame
        A validated step trace with ``duration_ms``
        (:func:`perfmodel.data.trace.read_trace`).
    levels : sequence of float
        Interval levels, each one the calibration stores (0.50, 0.51, ..., 0.99).
    model : str, optional
        The model fitted on each training side; default the model of record
        for the trace's columns (:func:`perfmodel.core.model.default_for`).
    scheme : ``'auto'``, ``'grouped'``, ``'blocked'`` or ``'expanding'``
        Outer and inner folds (module docstring; :data:`SCHEMES`).  ``'expanding'``
        asks whether the interval holds on LATER steps: each outer test window
        follows its training steps in time (a drift within the run shows there).
    k : int
        Outer folds (and inner folds of each calibration), >= 2.
    seed : int
        Seed of the folds and of the multi-start fits.
    time_ordered : bool, optional
        Passed to the fold engine (default: from the trace's columns).
    n_starts : int
        Multi-start count of each outer fold's fit, >= 1; the calibration's inner
        refits use ``min(n_starts, 4)``, as ``perfmodel fit`` does.
    siblings : list or callable, optional
        :func:`perfmodel.stats.intervals.sibling_scores` records pooled into
        each outer fold's calibration, or a function of the fold's test steps
        that returns them (to cut what the held-out steps share).
    model_band : bool
        Also the model-based band (:func:`perfmodel.stats.intervals.model_interval`).

    Returns
    -------
    pandas.DataFrame
        One row per held-out step: ``fold``, ``n_train`` (the steps its fold was
        fitted and calibrated on: for ``'expanding'`` the steps before the window less
        those the fold engine drops for sharing a group with it), ``row`` (position in ``df``),
        ``phase``, ``length`` (the fold calibration's regimes), ``mu``
        (prediction, ms), ``y`` (measured, ms), ``cluster`` (configuration or
        time block, per fold), ``conformal_lo_{level}`` and
        ``conformal_hi_{level}`` (and ``model_lo_`` / ``model_hi_`` with
        ``model_band``); ``attrs`` hold ``scheme``, ``note``, ``model``, ``k``, ``levels``
        and ``scale`` (the calibrations' fit scale).

    Raises
    ------
    InputError
        No ``duration_ms``, a level not stored, a bad scheme, ``k`` or
        ``n_starts``, or folds the trace cannot give.
    """
    from perfmodel.core.fit import fit_model
    from perfmodel.core.model import default_for

    if not isinstance(df, pd.DataFrame) or "duration_ms" not in df.columns:
        raise InputError("held-out coverage needs a step trace with duration_ms")
    levels = check_levels(levels)
    if scheme not in SCHEMES:
        raise InputError(f"scheme must be one of {', '.join(map(repr, SCHEMES))}, got {scheme!r}")
    if not isinstance(model_band, bool):
        raise InputError(f"model_band must be True or False, got {model_band!r}")
    check_int_range("k", k, 2)
    check_int_range("n_starts", n_starts, 1)
    df = df.reset_index(drop=True)
    model = default_for(df) if model is None else model
    used, note, splits = resolved_folds(df, scheme, k=k, seed=seed, time_ordered=time_ordered,
                                        block=DEFAULT_BLOCK)
    when = time_rank(df)  # each step's place in time
    rows, scale = [], None
    for i, (tr, te) in enumerate(splits):
        train = df.iloc[tr].reset_index(drop=True)
        test = df.iloc[te].reset_index(drop=True)
        fit = fit_model(train, model, n_starts=n_starts, seed=seed)
        # the inner folds as perfmodel fit makes them on this training side (``'auto'``
        # resolves there, falling back to grouped folds where blocks are impossible), and its
        # refits' multi-start count (perfmodel fit: at most 4)
        cal = calibrate_intervals(fit, train, scheme="auto" if scheme == "expanding" else scheme,
                                  k=k, seed=seed,
                                  time_ordered=time_ordered, n_starts=min(n_starts, 4),
                                  siblings=siblings(test) if callable(siblings) else siblings)
        mu = fit.predict(test)
        phase, length = interval_regimes(test, mu, cal["regime_rule"]["length_thresholds_ms"])
        scale = cal["scale"]
        out = pd.DataFrame({"fold": i, "n_train": len(tr), "row": np.asarray(te, dtype=np.int64),
                            "time": when[te], "phase": phase,
                            "length": length, "mu": mu,
                            "y": test["duration_ms"].to_numpy(float),
                            "cluster": [f"fold{i}:{c}" for c in coverage_clusters(test)]})
        for lv in levels:
            if model_band:
                m = model_interval(fit, test, lv)
                out[f"model_lo_{lv}"], out[f"model_hi_{lv}"] = m.lower, m.upper
            c = conformal_interval(fit, test, lv, calibration=cal)
            out[f"conformal_lo_{lv}"], out[f"conformal_hi_{lv}"] = c.lower, c.upper
        rows.append(out)
    steps = pd.concat(rows, ignore_index=True)
    steps.attrs.update({"scheme": used, "note": note, "model": model, "k": int(k),
                        "levels": levels, "scale": scale})
    return steps


def held_out_coverage(steps: pd.DataFrame, levels=None, tolerance: float = TOLERANCE,
                      method: str = "conformal") -> pd.DataFrame:
    """Per regime and level, the coverage of :func:`held_out_intervals`' steps.

    Parameters
    ----------
    steps : DataFrame returned by :func:`held_out_intervals`
    levels : sequence of float, optional
        Default: the levels the steps were made with.
    tolerance : float
        Distance from the level counted as within (default 0.03).
    method : ``'conformal'``, ``'model'`` (needs ``model_band=True``) or ``'online'`` (needs
        :func:`perfmodel.stats.interval_online.online_held_out`); all are tallied
        over the same regimes, the phases and each outer fold calibration's length thirds
        (unlike :func:`~perfmodel.stats.interval_coverage.interval_check` of a model band
        alone, which has no length thirds to use)

    Returns
    -------
    pandas.DataFrame
        ``level`` then the columns of
        :func:`perfmodel.stats.interval_coverage.interval_check` (``regime``,
        ``n``, ``coverage``, ``width``, ``design_effect``, ``se``, ``p_within``,
        ``within_tolerance``, ``consistent``), level-major.
    """
    need = {"phase", "length", "mu", "y", "cluster"}
    if not isinstance(steps, pd.DataFrame) or not need <= set(steps.columns):
        raise InputError("steps must be the frame of held_out_intervals")
    if method not in ("conformal", "model", "online"):
        raise InputError(f"method must be 'conformal', 'model' or 'online', got {method!r}")
    levels = check_levels(steps.attrs.get("levels", DEFAULT_LEVELS) if levels is None
                           else levels)
    frame = pd.DataFrame({"duration_ms": steps["y"].to_numpy(float),
                          "config": steps["cluster"].to_numpy(dtype=object)})
    regime = np.array([f"{a}|{b}" for a, b in zip(steps["phase"], steps["length"])],
                      dtype=object)
    out = []
    for lv in levels:
        lo, hi = f"{method}_lo_{lv}", f"{method}_hi_{lv}"
        if lo not in steps.columns or hi not in steps.columns:
            raise InputError(f"the steps hold no {method} interval at level {lv}")
        iv = Interval(lv, method, steps[lo].to_numpy(float), steps[hi].to_numpy(float), "", {},
                      None, regime)
        out.append(interval_check(frame, steps["mu"].to_numpy(float), iv, tolerance)
                   .assign(level=lv))
    tab = pd.concat(out, ignore_index=True)
    return tab[["level"] + [c for c in tab.columns if c != "level"]]
