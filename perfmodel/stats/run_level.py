"""The run-level term: how much a whole run's steps are slower or faster than the fit says.

Problem
-------
A step model fitted on one run of a server predicts the steps of another run
of the same server on the same host only up to the host's speed during that
run: on a shared machine, frequency scaling, other tenants and cache
pressure make every step of a run a few per cent slower or faster together.
Near saturation the request-level metrics amplify such a factor several times
(a 4 % slower engine gives a 10-15 % longer TPOT at 5 req/s on the vLLM-CPU
runs of ``data/vllm-serve``), so a prediction interval for a run needs a term
for it; per-step noise, independent from step to step, averages away over a
run and cannot stand in for it.

Method
------
:func:`run_speed_ratio` is how much slower a run's steps were than the fit
says, time-weighted: ``sum(y) / sum(yhat)`` over its steps, ``yhat`` the
fit's MEAN step time (:func:`perfmodel.stats.predictive.mean_step_model`).
Time-weighted, because a run's queues see its total busy time: on the later
vLLM-CPU runs the median step was about as fast as in the fitted run while
the slow steps were more frequent, and only the total shows it.  The fitted
run's own ratio is 1 up to the fit's retransformation.
:func:`perfmodel.decisions.simulate.validation.validate_closed_loop` reports
the same number less one as ``step_time_bias``.
:func:`run_level_spread` takes the step logs of several runs that were NOT
used for the fit, and returns ``sd = sqrt(mean(log(ratio)^2))``: the
root-mean-square log ratio about 0, not about the runs' mean, because the
fitted run is the reference and a systematic offset of the other runs from it
is part of what a new run can show.  A replication of a request-level
interval draws one factor ``exp(u)``, ``u ~ N(0, sd^2)``, for all steps of
the run (:func:`perfmodel.decisions.capacity.capacity` with ``run_sd``).
:func:`window_speed` splits one run into windows of wall time and gives each
window's ratio: an episode of contention inside a run (a few seconds of much
slower steps) shows there, and is NOT covered by the run-level term.

Verification
------------
``tests/stats/test_run_level.py``: a run whose every step is the model's
prediction times 1.1 has ratio 1.1 (and a few 5-times-slower steps raise it by
their share of the time); the spread of runs with known factors is their
root-mean-square log factor; bad input is refused with a named error.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from perfmodel.errors import InputError

__all__ = ["EPISODE_WINDOW_S", "run_level_spread", "run_speed_ratio", "window_speed"]

#: the window (seconds of wall time) in which :func:`window_speed` looks for episodes of
#: contention: long enough to hold some hundred steps of the vLLM-CPU runs, short enough
#: that a few seconds of a slow host stand out from the run's average
EPISODE_WINDOW_S = 5.0


def run_speed_ratio(model, steps: pd.DataFrame) -> float:
    """How much slower a run's steps were than ``model`` says (1.1: 10 % slower).

    ``sum(y) / sum(yhat)`` over the steps whose measured ``y``
    (``duration_ms``) and predicted mean ``yhat`` are finite and > 0.

    Parameters
    ----------
    model : a fitted step model (a FitResult: its mean step time; any other
        object with ``.predict(features)``: its prediction as it is)
    steps : the run's step log (``duration_ms`` and the model's features)
    """
    from perfmodel.data.trace import step_features
    from perfmodel.stats.predictive import mean_step_model

    if not callable(getattr(model, "predict", None)):
        raise InputError(f"model must be a fitted step model (.predict), got "
                         f"{type(model).__name__}")
    if not isinstance(steps, pd.DataFrame) or "duration_ms" not in steps.columns:
        raise InputError("steps must be a step log (a DataFrame with duration_ms)")
    y = pd.to_numeric(steps["duration_ms"], errors="coerce").to_numpy(float)
    yhat = (np.asarray(mean_step_model(model).predict(step_features(steps)), float).ravel()
            if len(steps) else y)
    ok = np.isfinite(y) & np.isfinite(yhat) & (y > 0) & (yhat > 0)
    if not ok.any():
        raise InputError("steps has no step with a finite, positive measured and predicted time")
    return float(y[ok].sum() / yhat[ok].sum())


def run_level_spread(fit, runs: Mapping[str, pd.DataFrame]) -> dict:
    """The run-level sd (log scale) from the step logs of runs the fit did not see.

    Parameters
    ----------
    fit : a fitted step model
    runs : run name -> step log; at least two runs, none of them the fit's own

    Returns
    -------
    dict: ``sd`` (root-mean-square log ratio about 0), ``mean_log_ratio``,
    ``n_runs`` and ``ratios`` (name -> :func:`run_speed_ratio`).
    """
    if not isinstance(runs, Mapping):
        raise InputError(f"runs must map run names to step logs, got {type(runs).__name__}")
    if len(runs) < 2:
        raise InputError(f"the run-level spread needs the step logs of >= 2 runs, got {len(runs)}")
    ratios = {str(k): run_speed_ratio(fit, v) for k, v in runs.items()}
    logs = np.log(np.fromiter(ratios.values(), float))
    return {"sd": float(np.sqrt(np.mean(logs ** 2))), "mean_log_ratio": float(logs.mean()),
            "n_runs": len(ratios), "ratios": ratios,
            "rule": "sqrt(mean(log(run_speed_ratio)^2)) over runs the fit did not see"}


def window_speed(model, steps: pd.DataFrame, window_s: float = EPISODE_WINDOW_S) -> pd.DataFrame:
    """:func:`run_speed_ratio` per window of ``window_s`` seconds of a run (episodes of contention).

    Parameters
    ----------
    model : a fitted step model (``.predict``)
    steps : a step log with ``timestamp`` (seconds) and ``duration_ms``; its
        ``involuntary_switches`` (the vLLM step logger's count of the engine
        process's involuntary context switches per step), when present, are summed
    window_s : window length in seconds (> 0; default :data:`EPISODE_WINDOW_S`)

    Returns
    -------
    DataFrame, one row per window with steps: ``start_s`` (from the first
    step), ``steps``, ``speed_ratio`` and, if logged, ``involuntary_switches``.
    """
    from perfmodel._checks import check_positive

    window_s = check_positive("window_s", window_s)
    if not isinstance(steps, pd.DataFrame) or "timestamp" not in steps.columns:
        raise InputError("steps must be a step log with a timestamp column (seconds)")
    t = pd.to_numeric(steps["timestamp"], errors="coerce").to_numpy(float)
    if not np.all(np.isfinite(t)):
        raise InputError("steps.timestamp must be finite numbers (seconds)")
    win = np.floor((t - t.min()) / window_s).astype(np.int64)
    rows = []
    for w in np.unique(win):
        part = steps[win == w]
        try:
            ratio = run_speed_ratio(model, part)
        except InputError:  # no usable step in this window
            continue
        row = {"start_s": float(w * window_s), "steps": len(part), "speed_ratio": ratio}
        if "involuntary_switches" in part.columns:
            row["involuntary_switches"] = float(
                pd.to_numeric(part["involuntary_switches"], errors="coerce").sum())
        rows.append(row)
    return pd.DataFrame(rows, columns=["start_s", "steps", "speed_ratio",
                                       *(["involuntary_switches"]
                                         if "involuntary_switches" in steps.columns else [])])
