"""Online prediction intervals of step times: adaptive conformal on the steps measured so far.

Problem
-------
The stored Mondrian CV-conformal calibration (:mod:`perfmodel.stats.intervals`)
holds on held-out steps of the run it was calibrated on.  Forward in time it
need not: on the vLLM-CPU runs the later steps of a run vary less than the
steps the calibration pooled, and a contended stretch varies more, so a
calibration on the first steps over-covers some later windows and
under-covers others (README.md, Prediction intervals, "Forward in time").
When the steps before step ``t`` have been measured -- a live engine being
monitored, a recorded run replayed step by step -- the interval of step
``t`` can learn from their errors.  That is what this module does; it is not
an advance prediction (that has no measured steps: use
:func:`perfmodel.stats.intervals.prediction_interval`).

Method
------
Adaptive conformal inference (ACI; Gibbs and Candes, "Adaptive conformal
inference under distribution shift", NeurIPS 2021), per regime and per side:

1. *Scores.*  The fit is not refitted: the score of a measured step is its
   fit-scale residual :meth:`perfmodel.core.scale.FitScale.residual` about
   the fit's prediction ``mu`` (``log(y / mu)`` by default), an
   out-of-sample error of every step the fit did not see.
2. *Regimes* as the stored calibration defines them
   (:func:`perfmodel.stats.intervals.interval_regimes`, phase x length),
   and the same Mondrian fallback
   (:func:`perfmodel.core.interval_calibration.pool_chain`: the step's cell,
   its phase, every step).
3. *Bounds.*  In time order (:func:`perfmodel.data.trace_features.time_order`),
   the upper bound of step ``t`` is the conformal rank
   ``ceil((n + 1)(1 - a_t))`` among the ``n`` scores of the EARLIER measured
   steps in the finest pool holding at least ``max(warmup, ceil((1 - a) / a))``
   of them (``a = (1 - level) / 2``, the nominal miss rate of one side, so
   that the nominal rank is finite); the lower bound is the mirror image.
   The rank is kept in ``[1, n]``: where ACI would give an infinite (or
   empty) interval after a run of misses (hits), the bound is the largest
   (smallest) score seen.  Until a pool is that large, step ``t`` keeps its
   starting interval: the fit's stored conformal interval
   (:func:`perfmodel.stats.intervals.prediction_interval`, the model band
   without a calibration).
4. *Adaptation.*  Each cell and side carries its own miss rate target
   ``a_t``, started at ``a`` and moved after each measured step of the cell
   by ``a_{t+1} = a_t + gamma (a - miss_t)``: a miss widens the next bounds,
   a run of hits narrows them, so the long-run miss rate of every cell
   follows ``a`` under any drift (the guarantee of ACI, whose bound on the
   deviation shrinks as ``1 / (gamma T)`` over ``T`` steps of a cell).

The step size :data:`GAMMA` was selected, before the confirmation runs were
looked at with it, as the value of the grid :data:`GAMMA_GRID` with the
lowest mean interval score (Gneiting and Raftery, JASA 2007: width plus
``2 / (1 - level)`` times the distance of a miss, a proper score that
penalises wide intervals as well as misses) over the development runs'
forward windows (``scripts/interval_study.py --forward``; the selection
table is stored in ``paper/results/interval_coverage_time-online-gamma.csv``
and tests/stats/test_interval_online.py checks that :data:`GAMMA` is its
minimum).  Steps without a measured time get an interval and add no score.

Verification
------------
tests/stats/test_interval_online.py: the interval of step ``t`` does not
change when any later step's time changes (no look-ahead); without a
calibration and with ``gamma = 0`` the bounds are the order statistics of the
earlier scores by hand; on a synthetic trace whose noise sd doubles half way
the online interval's coverage of the second half is within 3 points of
the level at 0.8 and 0.9 where the interval calibrated on the first half
under-covers by more than 10 points; bad input is refused.
"""
from __future__ import annotations

import bisect
import math

import numpy as np
import pandas as pd

from perfmodel.core.interval_calibration import pool_chain
from perfmodel.core.scale import get_scale, scale_of
from perfmodel.data.trace_features import time_order
from perfmodel.errors import InputError
from perfmodel.stats.interval_coverage import measured
from perfmodel.stats.intervals import (
    Interval,
    _inverse,  # the one inverse of a score bound, open ends included
    interval_regimes,
    prediction_interval,
)
from perfmodel.stats.predictive import _level  # the one check of an interval level

__all__ = ["GAMMA", "GAMMA_GRID", "METHOD", "WARMUP", "interval_score", "online_bounds",
           "online_held_out", "online_interval"]

#: the interval's method name (``Interval.method``, ``perfmodel predict --interval-method``)
METHOD = "online"
#: the step sizes the selection compared (module docstring)
GAMMA_GRID = (0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2)
#: the ACI step size: the grid value of lowest mean interval score on the development runs
GAMMA = 0.05
#: fewest earlier scores a pool needs before its rank replaces the starting interval
WARMUP = 20


def _check_gamma(gamma) -> float:
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float, np.integer, np.floating)) \
            or not math.isfinite(gamma) or not 0 <= gamma <= 1:
        raise InputError(f"gamma must be a number in [0, 1], got {gamma!r}")
    return float(gamma)


def _check_warmup(warmup) -> int:
    if isinstance(warmup, bool) or not isinstance(warmup, (int, np.integer)) or warmup < 1:
        raise InputError(f"warmup must be an integer >= 1, got {warmup!r}")
    return int(warmup)


def _rank(m: int, rate: float) -> int:
    """The conformal rank ``ceil((m + 1)(1 - rate))`` among ``m`` scores, kept in [1, m]
    (1e-9 absorbs the rounding of ``1 - rate``: (10)(1 - 0.1) is 9, not 10)."""
    return min(max(math.ceil((m + 1) * (1.0 - rate) - 1e-9), 1), m)


def online_bounds(scores, start_lower, start_upper, phase, length, level, *,
                  gamma: float = GAMMA, warmup: int = WARMUP):
    """ACI bounds on the score scale, steps given in time order (module docstring, Method).

    Parameters
    ----------
    scores : array_like
        Fit-scale residual of each step, NaN where the step has no measured time.
    start_lower, start_upper : array_like
        Each step's starting bounds on the score scale (``-inf`` / ``inf`` allowed).
    phase, length : array_like of str
        Each step's regime (:func:`perfmodel.stats.intervals.interval_regimes`).
    level : float
        Central coverage in (0, 1).
    gamma : float
        ACI step size in [0, 1] (0: a rolling split-conformal rank without adaptation).
    warmup : int
        Fewest earlier scores a pool needs (the nominal rank's need is added).

    Returns
    -------
    (lower, upper, used)
        Score-scale bounds (ndarrays) and how many steps used each pool
        (``'start'``: the starting interval).
    """
    level, gamma, warmup = _level(level), _check_gamma(gamma), _check_warmup(warmup)
    s = np.asarray(scores, dtype=float).ravel()
    n = len(s)
    lo = np.asarray(start_lower, dtype=float).ravel().copy()
    hi = np.asarray(start_upper, dtype=float).ravel().copy()
    phase, length = np.asarray(phase).ravel(), np.asarray(length).ravel()
    if not (len(lo) == len(hi) == len(phase) == len(length) == n):
        raise InputError("scores, start bounds, phase and length must have one value per step")
    if np.isinf(s).any() or np.isnan(lo).any() or np.isnan(hi).any():
        raise InputError("scores must be finite or NaN (unmeasured); start bounds not NaN")
    a = (1.0 - level) / 2.0
    need = max(warmup, math.ceil((1.0 - a) / a - 1e-9))  # the nominal rank is finite
    history: dict[str, list[float]] = {}  # sorted scores of the earlier steps, per pool
    target: dict[str, list[float]] = {}   # a_t per cell: [lower side, upper side]
    used: dict[str, int] = {}
    for t in range(n):
        chain = pool_chain(str(phase[t]), str(length[t]))
        rates = target.setdefault(chain[0], [a, a])
        pool = next((p for p in chain if len(history.get(p, ())) >= need), None)
        if pool is not None:
            h = history[pool]
            m = len(h)
            hi[t], lo[t] = h[_rank(m, rates[1]) - 1], h[m - _rank(m, rates[0])]
        key = pool if pool is not None else "start"
        used[key] = used.get(key, 0) + 1
        if np.isnan(s[t]):
            continue
        rates[0] += gamma * (a - float(s[t] < lo[t]))
        rates[1] += gamma * (a - float(s[t] > hi[t]))
        for p in chain:
            bisect.insort(history.setdefault(p, []), float(s[t]))
    return lo, hi, used


def _scores_of_bounds(scale, mu, bound, side: str) -> np.ndarray:
    """A ms bound as a score: open ends (0 on a positive scale, +-inf) as -inf / inf."""
    out = np.full(len(mu), -np.inf if side == "lower" else np.inf)
    ok = np.isfinite(bound) & ((bound > 0) if scale.positive else True)
    out[ok] = scale.residual(bound[ok], mu[ok])
    return out


def _online(scale, y, mu, start: Interval, phase, length, order, gamma, warmup):
    """The online bounds in ms of steps in any order, computed in ``order`` (time order)."""
    ok = np.isfinite(y) & ((y > 0) if scale.positive else True)
    s = np.full(len(y), np.nan)
    s[ok] = scale.residual(y[ok], mu[ok])
    slo = _scores_of_bounds(scale, mu, np.asarray(start.lower, float), "lower")
    shi = _scores_of_bounds(scale, mu, np.asarray(start.upper, float), "upper")
    lo_o, hi_o, used = online_bounds(s[order], slo[order], shi[order], phase[order],
                                     length[order], start.level, gamma=gamma, warmup=warmup)
    lo, hi = np.empty(len(y)), np.empty(len(y))
    lo[order], hi[order] = lo_o, hi_o
    return _inverse(scale, mu, lo, "lower"), _inverse(scale, mu, hi, "upper"), used


def online_interval(fit, df: pd.DataFrame, level, *, gamma: float = GAMMA,
                    warmup: int = WARMUP) -> Interval:
    """Online (ACI) interval of each step of ``df`` from the measured steps before it.

    Parameters
    ----------
    fit : FitResult
        Its prediction and scale give the scores; its stored conformal
        calibration (if any) gives the regimes and the starting interval.
    df : DataFrame
        A step trace with ``duration_ms`` (steps without a measured time get
        an interval and teach nothing); time order from ``step`` /
        ``timestamp`` or the row order.
    level : float
        Central coverage; with a calibration, one of its stored levels.
    gamma, warmup : see :func:`online_bounds`

    Returns
    -------
    Interval
        Method ``'online'``; ``regime`` the calibration's ``'phase|length'``
        (length by the model band's thirds of ``df``'s predictions without one).

    Raises
    ------
    InputError
        No measured step time in ``df``, a bad level, ``gamma`` or ``warmup``.
    """
    if not isinstance(df, pd.DataFrame):
        raise InputError("df must be a pandas DataFrame of steps")
    gamma, warmup = _check_gamma(gamma), _check_warmup(warmup)
    if not measured(df).any():
        raise InputError("an online interval learns from measured steps: the trace has no "
                         "measured duration_ms (use the stored interval for an advance "
                         "prediction)")
    start = prediction_interval(fit, df, level)
    mu = np.asarray(fit.predict(df), dtype=float).ravel()
    cal = getattr(fit, "interval_calibration", None)
    if start.regime is not None:
        phase, length = (np.array(v, dtype=object) for v in zip(*(r.split("|", 1)
                                                                  for r in start.regime)))
        scale = get_scale(cal["scale"])
    else:  # no calibration: the model band starts, the thirds of these predictions split
        phase, length = interval_regimes(df, mu, np.quantile(mu, [1 / 3, 2 / 3]).tolist())
        scale = scale_of(fit)
    y = pd.to_numeric(df["duration_ms"], errors="coerce").to_numpy(float)
    lo, hi, used = _online(scale, y, mu, start, np.asarray(phase), np.asarray(length),
                           time_order(df), gamma, warmup)
    text = (f"online adaptive conformal (ACI, gamma {gamma:g}, warm-up {warmup}): each step's "
            f"bounds are ranks of the {scale.name}-scale errors of the measured steps BEFORE it "
            f"in its regime (pools used: {used}); it starts from: {start.method}")
    return Interval(start.level, METHOD, lo, hi, text, used, start.calibration,
                    np.array([f"{p}|{q}" for p, q in zip(phase, length)], dtype=object))


def online_held_out(steps: pd.DataFrame, *, gamma: float = GAMMA,
                    warmup: int = WARMUP) -> pd.DataFrame:
    """Add online intervals to the held-out steps of
    :func:`perfmodel.stats.interval_heldout.held_out_intervals`.

    Each outer fold's test steps are covered online, in time order, starting
    from that fold's conformal interval and regimes: the check of what the
    online interval gives a user who fitted on the training side and then
    watches the held-out steps arrive.

    Parameters
    ----------
    steps : DataFrame of ``held_out_intervals`` (needs its ``time`` column and
        ``scale`` attribute)
    gamma, warmup : see :func:`online_bounds`

    Returns
    -------
    DataFrame
        A copy with ``online_lo_{level}`` and ``online_hi_{level}`` per level.
    """
    need = {"fold", "time", "phase", "length", "mu", "y"}
    if not isinstance(steps, pd.DataFrame) or not need <= set(steps.columns) \
            or "scale" not in steps.attrs:
        raise InputError("steps must be the frame of held_out_intervals")
    gamma, warmup = _check_gamma(gamma), _check_warmup(warmup)
    scale = get_scale(steps.attrs["scale"])
    out = steps.copy()
    for lv in steps.attrs.get("levels", ()):
        lo_all = np.empty(len(steps))
        hi_all = np.empty(len(steps))
        for rows in steps.groupby("fold", sort=True).indices.values():
            part = steps.iloc[rows]
            start = Interval(lv, "conformal", part[f"conformal_lo_{lv}"].to_numpy(float),
                             part[f"conformal_hi_{lv}"].to_numpy(float), "", {})
            lo, hi, _ = _online(scale, part["y"].to_numpy(float), part["mu"].to_numpy(float),
                                start, part["phase"].to_numpy(dtype=object),
                                part["length"].to_numpy(dtype=object),
                                np.argsort(part["time"].to_numpy(), kind="stable"), gamma, warmup)
            lo_all[rows], hi_all[rows] = lo, hi
        out[f"online_lo_{lv}"], out[f"online_hi_{lv}"] = lo_all, hi_all
    return out


def interval_score(y, lower, upper, level) -> np.ndarray:
    """Interval score of central intervals (Gneiting and Raftery, JASA 2007, eq. 43).

    ``(upper - lower) + (2 / a)(lower - y)[y < lower] + (2 / a)(y - upper)[y > upper]``
    with ``a = 1 - level``: lower is better; a proper score of the interval
    (width and misses together), in the units of ``y``.

    Parameters
    ----------
    y, lower, upper : array_like of one shape (finite)
    level : float in (0, 1)

    Returns
    -------
    ndarray
    """
    a = 1.0 - _level(level)
    y, lo, hi = (np.asarray(v, dtype=float) for v in (y, lower, upper))
    if not (y.shape == lo.shape == hi.shape) or not all(np.isfinite(v).all()
                                                        for v in (y, lo, hi)):
        raise InputError("y, lower and upper must be finite arrays of one shape")
    return (hi - lo) + (2 / a) * np.maximum(lo - y, 0) + (2 / a) * np.maximum(y - hi, 0)
