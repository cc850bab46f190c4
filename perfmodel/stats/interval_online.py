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
   that the nominal rank is finite) and enough for the rank at ``a_t`` (a
   coarser pool holds more, and its rank is taken no nearer the centre than
   the finer pool's extreme, so a bound never moves inwards as ``a_t`` falls;
   where no pool holds it, ACI's bound would be infinite and the extreme
   score of the largest pool is used, and at ``a_t >= 1``, ACI's empty
   interval, the opposite extreme); the lower bound is the mirror image,
   each side choosing its own pool.
   Until a pool is that large, step ``t`` keeps its starting interval: the
   fit's stored conformal interval
   (:func:`perfmodel.stats.intervals.conformal_interval`).
4. *Adaptation.*  Each cell and side carries its own miss rate target
   ``a_t``, started at ``a`` and moved after each measured step of the cell
   by ``a_{t+1} = a_t + gamma (a - miss_t)``, also while the starting
   interval is in use (so the hand-off to the ranks starts from the rate
   that interval's misses and hits left): a miss widens the next bounds (or
   keeps them, at the extreme), a
   run of hits narrows them.

Where this departs from ACI, and what that costs: ACI lets ``a_t`` fall
below 0 (an infinite bound) or rise above 1 (an empty interval), which is
what bounds its long-run miss rate under any drift (by ``(1 + gamma) /
(gamma T)`` over ``T`` steps of a cell); its rates then stay within
``[-gamma, 1 + gamma]``.  Here the rank is kept in ``[1, n]``: a bound is
always a score already seen, so the interval stays finite and usable (a
coarser pool is used first where it holds the rank).  A
finite bound can keep missing where ACI's infinite one would not, so the
rates are kept in ACI's own range ``[-gamma, 1 + gamma]``: after a stretch
of misses the bounds narrow again within about ``1 / a`` hits instead of
hundreds (no wind-up), and where the clamp is not reached the update is
ACI's.  The price: when a step's error lies beyond every error seen in its
pool (a steady drift past all history, a first contended stretch), the
interval misses it, and the miss rate of such a stretch is not bounded; the
measured coverage (README.md, Prediction intervals, "Online intervals") is
what this method is judged by.

The step size :data:`GAMMA` is the value of the grid :data:`GAMMA_GRID`
with the lowest mean interval score (Gneiting and Raftery, JASA 2007: width
plus ``2 / (1 - level)`` times the distance of a miss, a proper score that
penalises wide intervals as well as misses) over the development runs'
forward windows (``scripts/interval_study.py --forward``, table
``paper/results/interval_coverage_time-online-gamma.csv``;
tests/stats/test_interval_online.py checks :data:`GAMMA` against it).
:data:`WARMUP` (20) and the departures above were fixed by hand, not
selected.  Steps without a measured time (:func:`perfmodel.stats.interval_coverage.measured`)
get an interval and add no score.

Verification
------------
tests/stats/test_interval_online.py: with ``gamma = 0`` the bounds are the
conformal ranks of the earlier scores by hand; one hit-then-miss sequence
moves both sides' ranks as computed by hand; after a stretch of misses the
bounds narrow again within a few hits; the interval of step ``t`` does not
change when any later step's time changes (no look-ahead), and is the same
when the rows are shuffled with a ``step`` column; unmeasured steps teach
nothing; on a synthetic trace whose noise sd doubles half way, the online
interval's coverage of the second half is within 3 points of the level at
0.8 and 0.9 where the interval calibrated on the first half under-covers by
more than 10 points, on the log, weight and absolute fit scales; the
held-out form starts each fold from its own interval; :data:`GAMMA` is the
minimum of the stored selection; bad input is refused.
"""
from __future__ import annotations

import bisect
import math

import numpy as np
import pandas as pd

from perfmodel._checks import check_int_range, check_number
from perfmodel.core.interval_calibration import KEY, pool_chain
from perfmodel.core.scale import get_scale
from perfmodel.data.trace_features import time_order
from perfmodel.errors import InputError
from perfmodel.stats.interval_coverage import measured, measured_times
from perfmodel.stats.intervals import (
    Interval,
    _inverse,  # the one inverse of a score bound, open ends included
    conformal_interval,
)
from perfmodel.stats.predictive import _level  # the one check of an interval level

__all__ = ["GAMMA", "GAMMA_GRID", "METHOD", "WARMUP", "bound_scores", "interval_score",
           "online_bounds", "online_held_out", "online_interval"]

#: the interval's method name (``Interval.method``, ``perfmodel predict --interval-method``)
METHOD = "online"
#: the step sizes the selection compared (module docstring)
GAMMA_GRID = (0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2)
#: the ACI step size: the grid value of lowest mean interval score on the development runs
GAMMA = 0.02
#: fewest earlier scores a pool needs before its rank replaces the starting interval
WARMUP = 20


def _settings(gamma, warmup) -> tuple[float, int]:
    return check_number("gamma", gamma, lo=0.0, hi=1.0), check_int_range("warmup", warmup, 1)


def _rank(m: int, rate: float) -> int:
    """The conformal rank ``ceil((m + 1)(1 - rate))`` among ``m`` scores, kept in [1, m]
    (1e-9 absorbs the rounding of ``1 - rate``: (10)(1 - 0.1) is 9, not 10)."""
    return min(max(math.ceil((m + 1) * (1.0 - rate) - 1e-9), 1), m)


def _bound(history: dict, ready: list, rate: float, *, lower: bool) -> tuple[float, str]:
    """One side's bound and the pool it came from (module docstring, Method 3).

    The rank at ``rate`` in the finest ready pool that holds it; where a finer pool does not
    (``rate`` below about ``1 / (m + 1)``: ACI's bound would be infinite), the coarser pool's
    rank is taken no nearer the centre than the finer pool's extreme, so the bound never
    moves inwards as ``rate`` falls; where no pool holds it, the extreme score of the
    largest pool (at ``rate >= 1``, ACI's empty interval: the opposite extreme).
    """
    outermost = None  # the extreme of the largest pool that could not hold the rank
    for p in ready:
        h = history[p]
        m = len(h)
        r = math.ceil((m + 1) * (1.0 - rate) - 1e-9)
        if 1 <= r <= m:
            v = h[m - r] if lower else h[r - 1]
            if outermost is not None:
                v = min(v, outermost) if lower else max(v, outermost)
            return v, p
        if r > m:
            outermost = h[0] if lower else h[-1]
    h = history[ready[-1]]
    if rate >= 1.0:
        return (h[-1] if lower else h[0]), ready[-1]
    return (h[0] if lower else h[-1]), ready[-1]


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
        ACI step size in [0, 1] (0: a growing split-conformal rank without adaptation).
    warmup : int
        Fewest earlier scores a pool needs (the nominal rank's need is added).

    Returns
    -------
    (lower, upper, used)
        Score-scale bounds (ndarrays) and, per side (``'lower'``, ``'upper'``), how many
        steps took their bound from each pool (``'start'``: the starting interval).
    """
    level = _level(level)
    gamma, warmup = _settings(gamma, warmup)
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
    used: dict[str, dict[str, int]] = {"lower": {}, "upper": {}}
    for t in range(n):
        chain = pool_chain(str(phase[t]), str(length[t]))
        rates = target.setdefault(chain[0], [a, a])
        ready = [p for p in chain if len(history.get(p, ())) >= need]
        pools = ("start", "start")
        if ready:
            lo[t], p_lo = _bound(history, ready, rates[0], lower=True)
            hi[t], p_hi = _bound(history, ready, rates[1], lower=False)
            pools = (p_lo, p_hi)
        for side, p in zip(("lower", "upper"), pools):
            used[side][p] = used[side].get(p, 0) + 1
        if np.isnan(s[t]):
            continue
        # kept in [-gamma, 1 + gamma], the range ACI's own rates keep where a bound may be
        # infinite: no wind-up while the finite bound keeps missing (module docstring)
        rates[0] = min(max(rates[0] + gamma * (a - float(s[t] < lo[t])), -gamma), 1.0 + gamma)
        rates[1] = min(max(rates[1] + gamma * (a - float(s[t] > hi[t])), -gamma), 1.0 + gamma)
        for p in chain:
            bisect.insort(history.setdefault(p, []), float(s[t]))
    return lo, hi, used


def bound_scores(scale, mu, bound, side: str) -> np.ndarray:
    """Interval bounds (ms) as fit-scale scores about ``mu``; open ends (a bound at or
    below 0 on a positive scale, +-inf, past the weight scale's pole) as -inf / inf.

    Parameters
    ----------
    scale : :class:`perfmodel.core.scale.FitScale`
    mu : array_like, predictions (ms)
    bound : array_like, lower or upper bounds (ms), one per prediction
    side : ``'lower'`` or ``'upper'``

    Returns
    -------
    ndarray
    """
    if side not in ("lower", "upper"):
        raise InputError(f"side must be 'lower' or 'upper', got {side!r}")
    mu, bound = np.asarray(mu, dtype=float), np.asarray(bound, dtype=float)
    if mu.shape != bound.shape:
        raise InputError("mu and bound must have one value per step")
    out = np.full(mu.shape, -np.inf if side == "lower" else np.inf)
    ok = np.isfinite(bound) & ((bound > 0) if scale.positive else True)
    with np.errstate(divide="ignore", invalid="ignore"):
        out[ok] = scale.residual(bound[ok], mu[ok])
    out[~np.isfinite(out)] = -np.inf if side == "lower" else np.inf
    return out


def _online(scale, y, mu, level, start_lower, start_upper, phase, length, order, gamma,
            warmup):
    """The online bounds in ms of steps in any order, computed in ``order`` (time order),
    from the starting bounds (ms); ``y`` NaN where a step has no measured time."""
    ok = measured_times(y)
    s = np.full(len(y), np.nan)
    s[ok] = scale.residual(y[ok], mu[ok])
    slo = bound_scores(scale, mu, np.asarray(start_lower, float), "lower")
    shi = bound_scores(scale, mu, np.asarray(start_upper, float), "upper")
    lo_o, hi_o, used = online_bounds(s[order], slo[order], shi[order], phase[order],
                                     length[order], level, gamma=gamma, warmup=warmup)
    lo, hi = np.empty(len(y)), np.empty(len(y))
    lo[order], hi[order] = lo_o, hi_o
    return _inverse(scale, mu, lo, "lower"), _inverse(scale, mu, hi, "upper"), used


def online_interval(fit, df: pd.DataFrame, level, *, gamma: float = GAMMA,
                    warmup: int = WARMUP) -> Interval:
    """Online (ACI) interval of each step of ``df`` from the measured steps before it.

    Parameters
    ----------
    fit : FitResult
        With its stored conformal calibration (``perfmodel fit`` stores one by
        default): its prediction and scale give the scores, the calibration
        the regimes and the starting interval.
    df : DataFrame
        A step trace with ``duration_ms`` (steps without a measured time,
        :func:`perfmodel.stats.interval_coverage.measured`, get an interval and
        teach nothing); time order from ``step`` / ``timestamp`` or the row order.
    level : float
        One of the calibration's stored levels.
    gamma, warmup : see :func:`online_bounds`

    Returns
    -------
    Interval
        Method ``'online'``; ``regime`` the calibration's ``'phase|length'``.

    Raises
    ------
    InputError
        No calibration, no measured step time in ``df``, a ``step`` column
        that repeats (several runs: their steps would interleave), a level not
        stored, a bad ``gamma`` or ``warmup``.
    """
    if not isinstance(df, pd.DataFrame):
        raise InputError("df must be a pandas DataFrame of steps")
    gamma, warmup = _settings(gamma, warmup)
    if not getattr(fit, "interval_calibration", None):
        raise InputError(f"the online interval starts from the fit's stored {KEY} (its "
                         "regimes and first interval): refit with perfmodel fit --intervals "
                         "conformal")
    ok = measured(df)
    if not ok.any():
        raise InputError("an online interval learns from measured steps: the trace has no "
                         "measured duration_ms (use the stored interval for an advance "
                         "prediction)")
    repeats = int(df["step"].duplicated().sum()) if "step" in df.columns else 0
    if repeats:
        raise InputError(f"an online interval follows one run in time order, but 'step' repeats "
                         f"({repeats} repeated values): several runs "
                         "in one trace, or a step counter that restarts? predict each run's "
                         "trace on its own, or number its steps once")
    start = conformal_interval(fit, df, level)
    mu = np.asarray(fit.predict(df), dtype=float).ravel()
    phase, length = (np.array(v, dtype=object) for v in zip(*(r.split("|", 1)
                                                              for r in start.regime)))
    scale = get_scale(fit.interval_calibration["scale"])
    y = pd.to_numeric(df["duration_ms"], errors="coerce").to_numpy(float)  # _online masks
    lo, hi, used = _online(scale, y, mu, start.level, start.lower, start.upper, phase, length,
                           time_order(df), gamma, warmup)
    text = (f"online adaptive conformal (ACI, gamma {gamma:g}, warm-up {warmup}): each step's "
            f"bounds are ranks of the {scale.name}-scale errors of the measured steps BEFORE it "
            f"in its regime (pools used: {used}); until a pool is large enough, the stored "
            "conformal interval")
    return Interval(start.level, METHOD, lo, hi, text, used, start.calibration, start.regime)


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
    steps : DataFrame of ``held_out_intervals`` (its ``time`` column, its
        ``conformal_lo_`` / ``conformal_hi_`` columns, and its ``scale`` and
        ``levels`` attributes)
    gamma, warmup : see :func:`online_bounds`

    Returns
    -------
    DataFrame
        A copy with ``online_lo_{level}`` and ``online_hi_{level}`` per level.
    """
    if not isinstance(steps, pd.DataFrame):
        raise InputError("steps must be the frame of held_out_intervals")
    levels = steps.attrs.get("levels") or []
    need = {"fold", "time", "phase", "length", "mu", "y"} | {
        f"conformal_{b}_{lv}" for lv in levels for b in ("lo", "hi")}
    missing = sorted(need - set(steps.columns)) + [
        f"attrs[{k!r}]" for k in ("scale", "levels") if not steps.attrs.get(k)]
    if missing:
        raise InputError(f"steps must be the frame of held_out_intervals; missing: "
                         f"{', '.join(missing)}")
    gamma, warmup = _settings(gamma, warmup)
    scale = get_scale(steps.attrs["scale"])
    out = steps.copy()
    for lv in levels:
        lo_all = np.empty(len(steps))
        hi_all = np.empty(len(steps))
        for rows in steps.groupby("fold", sort=True).indices.values():
            part = steps.iloc[rows]
            lo, hi, _ = _online(scale, part["y"].to_numpy(float), part["mu"].to_numpy(float), lv,
                                part[f"conformal_lo_{lv}"].to_numpy(float),
                                part[f"conformal_hi_{lv}"].to_numpy(float),
                                part["phase"].to_numpy(dtype=object),
                                part["length"].to_numpy(dtype=object),
                                np.argsort(part["time"].to_numpy(), kind="stable"), gamma, warmup)
            lo_all[rows], hi_all[rows] = lo, hi
        out[f"online_lo_{lv}"], out[f"online_hi_{lv}"] = lo_all, hi_all
    return out


def interval_score(y, lower, upper, level) -> np.ndarray:
    """Interval score of central intervals (Gneiting and Raftery, JASA 2007, eq. 43).

    ``(upper - lower) + (2 / a)(lower - y)[y < lower] + (2 / a)(y - upper)[y > upper]``
    with ``a = 1 - level``: lower is better; a proper score of the interval
    (width and misses together), in the units of ``y``; ``inf`` for an
    interval with an open end.

    Parameters
    ----------
    y : array_like, finite
    lower, upper : array_like of the shape of ``y`` (``-inf`` / ``inf`` allowed, not NaN)
    level : float in (0, 1)

    Returns
    -------
    ndarray
    """
    a = 1.0 - _level(level)
    y, lo, hi = (np.asarray(v, dtype=float) for v in (y, lower, upper))
    if not (y.shape == lo.shape == hi.shape) or not np.isfinite(y).all() \
            or np.isnan(lo).any() or np.isnan(hi).any():
        raise InputError("y (finite), lower and upper (not NaN) must be arrays of one shape")
    with np.errstate(invalid="ignore"):
        miss = (2 / a) * (np.where(y < lo, lo - y, 0.0) + np.where(y > hi, y - hi, 0.0))
    return (hi - lo) + miss
