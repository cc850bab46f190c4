"""Held-out coverage and width of prediction intervals, tallied per regime.

Problem
-------
An interval that covers 90 % of all held-out steps can cover 70 % of the
long steps and 99 % of the short ones; and an interval that covers by
being wide is no use.  Every study of interval coverage (the held-out,
transfer and across-run tables of ``scripts/interval_study.py``, the GPU
confirmation table of notebook 15) therefore reports, per regime and
level, the share of steps whose measured time lies inside the interval and
the median relative width ``(upper - lower) / predicted``.  This module is
the one place that tally is made.

Regimes
-------
``all``; the phases of :func:`perfmodel.stats.validation.regime`
(``decode-only``, ``mixed``, ``prefill-heavy``); the calibration's length
thirds (``short``, ``medium``, ``long``, from
:func:`perfmodel.stats.intervals.interval_regimes`); and, with ``long_ms``,
the steps predicted at ``long_ms`` or more.  A regime without steps has no
coverage and gets no row.

Sampling reference
------------------
A fixed tolerance (say 3 points) means different things for a cell of 50
steps and one of 9000: a perfectly calibrated interval misses it often in
the first and almost never in the second.  :func:`calibrated_within_chance`
gives the chance that a calibrated interval lands within the tolerance, so
that a count of cells within it can be set against the count a calibrated
interval would reach, and :func:`consistent_with_level` the exact binomial
test of one cell.  By default both treat the steps as independent draws;
steps of one configuration or of neighbouring time share their errors, so
the real spread is wider: that expected count is an upper bound, and that
test rejects more often than its level.  The cluster-aware reference passes
each cell's design effect ``deff`` (``coverage_by_regime(..., clusters=)``:
the one-way ANOVA intraclass correlation of the cell's inside/outside
indicators within the clusters, :mod:`perfmodel.stats.uncertainty.clustering`):
the count inside the interval is then taken as beta-binomial with the
binomial's mean and its variance times ``deff`` (intra-cell correlation
``rho = (deff - 1) / (n - 1)``; ``deff = 1`` is the binomial).  The
indicators' clustering is measured on the interval at hand, so the
reference assumes a calibrated interval's misses would cluster alike.
:func:`within_tolerance` is the one rule for "within the tolerance" (a
coverage exactly at the edge counts as within).

Verified against hand-counted cases in tests/stats/test_interval_coverage.py
and, before/after, against the tables of ``scripts/interval_study.py`` and
notebook 15, which it replaced (identical values).
"""
from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from perfmodel._checks import (
    check_int_range,
    check_number,
    check_positive,
    check_probability,
    check_vector,
)
from perfmodel.core.interval_calibration import LENGTHS, PHASES
from perfmodel.errors import InputError
from perfmodel.stats.predictive import _level  # the one check of an interval level
from perfmodel.stats.uncertainty.clustering import intraclass_correlation

__all__ = ["CHECK_LEGEND", "bound_text", "calibrated_within_chance", "check_summary",
           "consistent_with_level", "coverage_by_regime", "coverage_clusters", "format_check",
           "inside_interval", "interval_check", "measured", "measured_times", "regime_masks",
           "within_tolerance"]

#: the tolerance of "within a few points of nominal" that ``interval_check`` reports
TOLERANCE = 0.03
#: what the columns of :func:`format_check` mean (printed once above the table by
#: ``perfmodel predict --interval`` and ``perfmodel coverage``)
CHECK_LEGEND = ("within: |coverage - level| <= {tol:g}; consistent: exact test at 0.05 with the "
                "design effect (steps of one configuration or time block share errors); s.e.: "
                "of a calibrated interval's coverage on these steps; p(within): the chance that "
                "a calibrated interval lands within {tol:g} on these steps (sampling alone)")

_EDGE = 1e-9  # a coverage exactly at the tolerance's edge counts as within


def _labels(name: str, values, n: int) -> np.ndarray:
    a = np.asarray(values)
    if a.dtype.kind not in "iu":  # integer codes stay integers (no object per step)
        a = np.asarray(values, dtype=object)
    if a.shape != (n,):
        raise InputError(f"{name} must hold one label per step ({n}), got shape {a.shape}")
    return a


def regime_masks(phase, length=None, mu=None, long_ms: float | None = None,
                 long_label: str | None = None) -> dict[str, np.ndarray]:
    """Boolean step masks of the coverage regimes (module docstring, "Regimes").

    Parameters
    ----------
    phase : array_like of str
        Phase label of each step (``decode-only`` / ``mixed`` / ``prefill-heavy``).
    length : array_like of str, optional
        Length label of each step (``short`` / ``medium`` / ``long``); without
        it no length regimes.
    mu : array_like of float, optional
        Predicted step times (ms); needed with ``long_ms``.
    long_ms : float, optional
        Adds the regime of steps with ``mu >= long_ms``.
    long_label : str, optional
        Name of that regime; default ``"predicted >= {long_ms:g} ms"``.

    Returns
    -------
    dict
        Regime name -> boolean array, in the order ``all``, phases, lengths,
        long; every regime listed, empty or not.

    Raises
    ------
    InputError
        Labels not one per step, ``long_ms`` without ``mu`` or not positive.
    """
    if phase is None:
        raise InputError("phase is required, got None")
    ph = np.asarray(phase, dtype=object)
    if ph.ndim != 1:
        raise InputError(f"phase must be 1-D, got shape {ph.shape}")
    n = len(ph)
    masks = {"all": np.ones(n, bool), **{p: ph == p for p in PHASES}}
    if length is not None:
        ln = _labels("length", length, n)
        masks.update({lab: ln == lab for lab in LENGTHS})
    if long_ms is not None:
        long_ms = check_positive("long_ms", long_ms, unit="ms")
        if mu is None:
            raise InputError("long_ms needs mu, the predicted step times")
        m = check_vector("mu", mu, n=n, n_of="phase")
        masks[long_label or f"predicted >= {long_ms:g} ms"] = m >= long_ms
    return masks


def coverage_clusters(df: pd.DataFrame, block: int | None = None,
                      codes: bool = False) -> np.ndarray:
    """Cluster of each held-out step for the design effect of its coverage.

    Steps of one configuration (the ``config`` column: replicates of one
    schedule) share their errors; so do neighbouring steps of one engine run
    (host state).  The label is therefore the configuration when the trace
    has one, else the fold engine's time block
    (:func:`perfmodel.stats.folds.time_blocks`, ``block`` steps, default its
    ``DEFAULT_BLOCK``).  Identical schedules are not linked here (they are
    for leakage, :func:`perfmodel.stats.folds.fold_groups`): that link chains
    whole sweeps into one group and says nothing about shared errors.

    Parameters
    ----------
    df : DataFrame
        The held-out steps.
    block : int, optional
        Steps per time block.
    codes : bool, default False
        Integer codes of the same clusters instead of labels (no string per
        step: for large traces).

    Returns
    -------
    numpy.ndarray of str (or of int with ``codes``), one label per row

    Verified in tests/stats/test_interval_coverage.py.
    """
    from perfmodel.stats.folds import DEFAULT_BLOCK, time_blocks

    if not isinstance(df, pd.DataFrame):
        raise InputError(f"df must be a DataFrame of steps, got {type(df).__name__}")
    if "config" in df.columns:
        c = df["config"]
        if c.isna().any():
            raise InputError("column `config` has missing values")
        if codes:
            return pd.factorize(c.astype(str))[0]
        return ("config:" + c.astype(str)).to_numpy(dtype=object)
    b = time_blocks(df, DEFAULT_BLOCK if block is None else block)
    if codes:
        return np.asarray(b, dtype=np.int64)
    return np.array([f"block:{v}" for v in b], dtype=object)


def inside_interval(y, lower, upper) -> np.ndarray:
    """Which steps' measured times lie inside their interval, ``lower <= y <= upper`` (a bound
    on the edge counts as inside; an infinite bound is open): the one rule of "covered" of
    every tally (:func:`coverage_by_regime`, the studies' per-window and score tables).  No
    input checks: the callers check ``y`` and the bounds' shapes."""
    y = np.asarray(y, dtype=float)
    return (y >= np.asarray(lower, dtype=float)) & (y <= np.asarray(upper, dtype=float))


def coverage_by_regime(y, mu, bounds: Mapping, masks: Mapping, clusters=None) -> pd.DataFrame:
    """Coverage and median relative width of intervals per regime and level.

    Parameters
    ----------
    y : array_like of float
        Measured step times (ms).
    mu : array_like of float
        Predicted step times (ms), the denominator of the relative width.
    bounds : mapping
        Level (in (0, 1)) -> ``(lower, upper)``, arrays of interval bounds
        (ms) per step, or an object with ``lower`` and ``upper`` (an
        :class:`perfmodel.stats.intervals.Interval`); a bound may be infinite
        (one-sided interval).
    masks : mapping
        Regime name -> boolean array per step (:func:`regime_masks`).
    clusters : array_like, optional
        Cluster label of each step (e.g. :func:`perfmodel.stats.folds.fold_groups`
        of the held-out steps: configuration, identical schedule, time block).
        Adds the column ``design_effect``: per cell, the design effect of the
        inside/outside indicators within these clusters (module docstring).

    Returns
    -------
    pandas.DataFrame
        One row per non-empty regime and level, regime-major in the order of
        ``masks`` and ``bounds``: ``regime``, ``level``, ``n`` (steps),
        ``coverage`` (share with ``lower <= y <= upper``) and ``width`` (median
        of ``(upper - lower) / mu``), unrounded; with ``clusters`` also
        ``design_effect`` (>= 1).

    Raises
    ------
    InputError
        Non-finite or mismatched ``y`` / ``mu``, no levels, a bad level,
        bounds or masks not one per step.
    """
    y = check_vector("y", y)
    mu = check_vector("mu", mu, n=len(y), n_of="y")
    if not isinstance(bounds, Mapping) or not bounds:
        raise InputError("bounds must map at least one level to (lower, upper)")
    if not isinstance(masks, Mapping):
        raise InputError("masks must map regime names to boolean arrays")
    tally = {}
    for lv, lu in bounds.items():
        _level(lv)
        if hasattr(lu, "lower") and hasattr(lu, "upper"):
            lu = (lu.lower, lu.upper)
        try:
            lo, hi = (np.asarray(b, dtype=float) for b in lu)
        except (TypeError, ValueError) as exc:
            raise InputError(f"bounds[{lv}] must be (lower, upper) arrays: {exc}") from None
        if lo.shape != y.shape or hi.shape != y.shape:
            raise InputError(f"bounds[{lv}] must hold one bound per step ({len(y)})")
        tally[lv] = (inside_interval(y, lo, hi), (hi - lo) / mu)
    if clusters is not None:
        clusters = _labels("clusters", clusters, len(y))
        if pd.isna(pd.Series(clusters)).any():
            raise InputError("clusters must not hold missing labels")
    rows = []
    for reg, m in masks.items():
        m = np.asarray(m)
        if m.shape != y.shape or m.dtype != bool:
            raise InputError(f"masks[{reg!r}] must be a boolean array, one per step ({len(y)})")
        n = int(m.sum())
        if n == 0:
            continue
        for lv, (inside, width) in tally.items():
            row = {"regime": reg, "level": lv, "n": n, "coverage": float(inside[m].mean()),
                   "width": float(np.median(width[m]))}
            if clusters is not None:
                row["design_effect"] = (intraclass_correlation(
                    inside[m].astype(float), clusters[m]).design_effect if n >= 2 else 1.0)
            rows.append(row)
    cols = ["regime", "level", "n", "coverage", "width"]
    return pd.DataFrame(rows, columns=cols + (["design_effect"] if clusters is not None else []))


def within_tolerance(coverage, level, tolerance: float) -> np.ndarray:
    """Whether each coverage lies within ``tolerance`` of its level: the one rule.

    Problem: "cells within 3 points" was counted by several local rules,
    one of which dropped a coverage exactly at the edge (0.77 at level 0.8
    is 0.0300000000000000266 away in floating point); this rule, with a
    1e-9 allowance, counts the edge as within, as
    :func:`calibrated_within_chance` does.

    Parameters
    ----------
    coverage, level : float or array_like of float
        Shares in [0, 1] and levels in (0, 1), broadcast together.
    tolerance : float
        Allowed distance (a share, e.g. 0.03), > 0.

    Returns
    -------
    numpy.ndarray of bool

    Verified in tests/stats/test_interval_coverage.py (edge cases, bad input).
    """
    check_positive("tolerance", tolerance)
    try:
        cov = np.asarray(coverage, dtype=float)
        lv = np.asarray(level, dtype=float)
        cov, lv = np.broadcast_arrays(np.atleast_1d(cov), np.atleast_1d(lv))
    except (TypeError, ValueError):
        raise InputError("coverage and level must be matching numeric arrays") from None
    if not np.all(np.isfinite(cov)) or np.any((cov < 0) | (cov > 1)):
        raise InputError("coverage must be shares in [0, 1]")
    for v in np.unique(lv):
        _level(float(v))
    return np.abs(cov - lv) <= tolerance + _EDGE


#: intra-cell correlation below which a cell is taken as binomial: the variance it adds is
#: under 0.1 % on 9,000 steps, and scipy's beta-binomial loses digits beyond beta parameters
#: of about 1e7 (tests/stats/test_interval_coverage.py)
_RHO_BINOMIAL = 1e-7


def _rho(n: np.ndarray, design_effect) -> np.ndarray:
    """Intra-cell correlation of the beta-binomial whose variance is ``deff`` times the binomial's."""
    try:
        deff = np.atleast_1d(np.asarray(design_effect, dtype=float))
        n, deff = np.broadcast_arrays(n, deff)
    except (TypeError, ValueError):
        raise InputError(f"design_effect must be numbers >= 1, one per cell, "
                         f"got {design_effect!r}") from None
    if not np.all(np.isfinite(deff)) or np.any(deff < 1):
        raise InputError(f"design_effect must be finite numbers >= 1, got {design_effect!r}")
    rho = np.where(n > 1, (deff - 1.0) / np.maximum(n - 1.0, 1.0), 0.0)
    # below _RHO_BINOMIAL the cell is the binomial: a design effect a rounding error above 1
    # (an intraclass correlation of ~1e-16) would otherwise reach scipy's beta-binomial with
    # beta parameters of 1e15 and more, where it overflows and returns 0 for a sure event
    rho = np.where(rho < _RHO_BINOMIAL, 0.0, rho)
    return np.minimum(rho, 1.0 - 1e-9)  # deff >= n: the whole cell moves as one


def _betabinom_ab(p: float, rho: float) -> tuple[float, float]:
    """Beta parameters of the beta-binomial with mean share ``p`` and intra-cell correlation ``rho``."""
    s = 1.0 / rho - 1.0
    return p * s, (1.0 - p) * s


def _count_pmf(n: int, p: float, rho: float) -> np.ndarray:
    """P(K = 0..n): binomial (rho 0) or the beta-binomial of :func:`_rho`."""
    from scipy import stats

    k = np.arange(n + 1)
    if rho <= 0:
        return stats.binom.pmf(k, n, p)
    return stats.betabinom.pmf(k, n, *_betabinom_ab(p, rho))


def _cells(n, level, tolerance=None):
    n = np.atleast_1d(np.asarray(n))
    if n.size == 0 or not np.issubdtype(n.dtype, np.number) or np.any(n < 1) \
            or np.any(n != np.round(n)):
        raise InputError(f"n must be positive whole step counts, got {n!r}")
    level = np.atleast_1d(np.asarray(level, dtype=float))
    for lv in np.unique(level):
        _level(float(lv))
    if tolerance is not None:
        check_positive("tolerance", tolerance)
    try:
        n, level = np.broadcast_arrays(n.astype(np.int64), level)
    except ValueError:
        raise InputError(f"n ({n.size}) and level ({level.size}) do not match") from None
    return n, level


def calibrated_within_chance(n, level, tolerance: float, design_effect=1.0) -> np.ndarray:
    """Chance that a calibrated interval covers within ``tolerance`` of its level, per cell.

    Problem: a count such as "15 of 78 cells within 3 points" has no meaning
    without the count a calibrated interval would reach on cells of those
    sizes (module docstring, Sampling reference).

    Parameters
    ----------
    n : int or array of int
        Steps in each cell (>= 1).
    level : float or array of float
        Each cell's nominal coverage, in (0, 1).
    tolerance : float
        Allowed distance of the coverage from the level (a share, e.g. 0.03).
    design_effect : float or array of float, default 1
        Each cell's design effect (>= 1; the ``design_effect`` column of
        :func:`coverage_by_regime`); 1 takes the steps as independent.

    Returns
    -------
    numpy.ndarray
        ``P(|K/n - level| <= tolerance)`` for ``K ~ Binomial(n, level)`` (steps
        taken as independent: an upper bound for clustered steps), or with a
        design effect the beta-binomial of the module docstring.  Their sum
        is the expected number of cells within the tolerance.

    Verified in tests/stats/test_interval_coverage.py against a direct sum of
    binomial probabilities and simulations (independent and clustered steps).
    """
    from scipy import stats

    n, level = _cells(n, level, tolerance)
    rho = _rho(n, design_effect)
    n, level, rho = np.broadcast_arrays(n, level, rho)
    hi = np.floor(n * (level + tolerance) + _EDGE)
    lo = np.ceil(n * (level - tolerance) - _EDGE)
    out = stats.binom.cdf(hi, n, level) - stats.binom.cdf(lo - 1, n, level)
    for i in np.flatnonzero(rho > 0):
        a, b = _betabinom_ab(level[i], rho[i])
        out[i] = (stats.betabinom.cdf(hi[i], n[i], a, b)
                  - stats.betabinom.cdf(lo[i] - 1, n[i], a, b))
    return out


def consistent_with_level(coverage, n, level, alpha: float = 0.05,
                          design_effect=1.0) -> np.ndarray:
    """Whether each cell's coverage is consistent with its level (exact binomial test).

    Parameters
    ----------
    coverage : float or array of float
        Share of the cell's steps inside the interval, in [0, 1].
    n, level : as in :func:`calibrated_within_chance`
    alpha : float
        Test level, in (0, 1).
    design_effect : float or array of float, default 1
        As in :func:`calibrated_within_chance`.

    Returns
    -------
    numpy.ndarray of bool
        True where the two-sided exact test of ``round(coverage n)`` covered
        steps out of ``n`` against ``level`` has ``p >= alpha``: the binomial
        test (scipy's ``binomtest``; steps taken as independent, so with
        clustered steps it rejects more often than ``alpha``), or with a
        design effect the same test on the beta-binomial (p = the mass of the
        counts no more likely than the one seen, scipy's two-sided rule).

    Verified in tests/stats/test_interval_coverage.py (hand-checked cells;
    design effect 1 equals ``binomtest``).
    """
    from scipy import stats

    n, level = _cells(n, level)
    rho = np.broadcast_to(_rho(n, design_effect), n.shape)
    cov = np.atleast_1d(np.asarray(coverage, dtype=float))
    if cov.shape != n.shape and cov.size != 1:
        raise InputError(f"coverage ({cov.size}) and n ({n.size}) do not match")
    cov = np.broadcast_to(cov, n.shape)
    if not np.all(np.isfinite(cov)) or np.any((cov < 0) | (cov > 1)):
        raise InputError("coverage must be shares in [0, 1]")
    alpha = check_probability("alpha", alpha)
    k = np.round(cov * n).astype(np.int64)
    out = []
    for ki, ni, lv, r in zip(k, n, level, rho):
        if r <= 0:
            out.append(stats.binomtest(int(ki), int(ni), float(lv)).pvalue >= alpha)
            continue
        pmf = _count_pmf(int(ni), float(lv), float(r))
        out.append(float(pmf[pmf <= pmf[ki] * (1 + 1e-7)].sum()) >= alpha)
    return np.array(out)


def interval_check(df: pd.DataFrame, mu, interval, tolerance: float = TOLERANCE) -> pd.DataFrame:
    """Coverage of one interval on measured steps, per regime, with its sampling reference.

    Problem: a user checks a fit's prediction interval on steps the fit did
    not see (``perfmodel predict FIT.json HELD_OUT.csv --interval 0.9``, the
    trace carrying ``duration_ms``) and needs, per regime, the share
    covered, whether it is within ``tolerance`` of the level, and whether a
    calibrated interval could have given that share on so few, clustered
    steps -- the tally of :func:`coverage_by_regime` with the references of
    :func:`within_tolerance` and :func:`consistent_with_level`.

    Regimes: ``all``, the phases and, for a conformal interval (``interval.regime``
    holds ``phase|length`` per step), the calibration's length thirds; the
    model band has no length thirds, so phases only.  Clusters for the
    design effect: :func:`coverage_clusters` (configuration, else time block).

    Parameters
    ----------
    df : DataFrame
        The predicted steps, with ``duration_ms`` (ms).  Steps whose
        ``duration_ms`` is missing or not positive are left out of the tally
        (:func:`measured`).
    mu : array_like of float
        The fit's predictions of ``df`` (ms).
    interval : :class:`perfmodel.stats.intervals.Interval`
        The interval of ``df`` (``lower``, ``upper``, ``level``, ``regime``).
    tolerance : float
        Distance from the level counted as within (a share; default 0.03).

    Returns
    -------
    pandas.DataFrame
        One row per non-empty regime: ``regime``, ``n``, ``coverage``,
        ``width`` (median ``(upper - lower) / mu``), ``design_effect``,
        ``se`` (the s.e. of a calibrated interval's coverage on these
        steps: ``sqrt(level (1 - level) deff / n)``), ``p_within`` (the chance
        that a calibrated interval's coverage on these steps lands within
        ``tolerance``: :func:`calibrated_within_chance` with the design
        effect), ``within_tolerance`` and ``consistent`` (the cluster-aware
        exact test at 0.05).

    Raises
    ------
    InputError
        No ``duration_ms`` column, no step with a positive one, predictions
        or bounds not one per step.

    Verified in tests/stats/test_interval_coverage.py (known-truth intervals
    whose coverage is set per phase; hand counts).
    """
    from perfmodel.stats.scores import regime

    if not isinstance(df, pd.DataFrame) or "duration_ms" not in df.columns:
        raise InputError("checking an interval needs the measured step times: a trace with "
                         "duration_ms")
    tolerance = check_positive("tolerance", tolerance)
    if not all(hasattr(interval, k) for k in ("level", "lower", "upper")):
        raise InputError("interval must be an Interval (level, lower, upper), got "
                         f"{type(interval).__name__}")
    level = _level(interval.level)
    n = len(df)
    mu = check_vector("mu", mu, n=n, n_of="the trace's rows")
    if np.any(mu <= 0):
        raise InputError("mu must hold positive predicted step times (ms)")
    try:
        lo, hi = (np.asarray(getattr(interval, k), dtype=float) for k in ("lower", "upper"))
    except (TypeError, ValueError):
        raise InputError("the interval's bounds must be numbers") from None
    if lo.shape != (n,) or hi.shape != (n,):
        raise InputError(f"the interval must hold one bound per step ({n})")
    if np.isnan(lo).any() or np.isnan(hi).any() or np.any(lo > hi):
        raise InputError("the interval's bounds must not be NaN, and lower <= upper on every step")
    ok = measured(df)
    if not ok.any():
        raise InputError("no step has a measured duration_ms > 0: nothing to check")
    y = pd.to_numeric(df["duration_ms"], errors="coerce").to_numpy(float)
    reg = getattr(interval, "regime", None)
    if reg is not None:
        # one split per distinct label, not per step (a large trace has a few labels)
        codes, labels = pd.factorize(pd.Series(np.asarray(reg, dtype=object)).astype(str))
        if codes.shape != (n,):
            raise InputError(f"the interval's regime must hold one label per step ({n})")
        parts = [str(v).split("|") for v in labels]
        if any(len(p) != 2 for p in parts):
            raise InputError("the interval's regime labels must be 'phase|length', got "
                             f"{[v for v, p in zip(labels, parts) if len(p) != 2][:3]}")
        phase = np.array([p[0] for p in parts], dtype=object)[codes]
        length = np.array([p[1] for p in parts], dtype=object)[codes]
    else:
        phase, length = regime(df).astype(str).to_numpy(dtype=object), None
    keep = np.flatnonzero(ok)
    masks = regime_masks(phase[keep], None if length is None else length[keep])
    table = coverage_by_regime(y[keep], mu[keep], {level: (lo[keep], hi[keep])}, masks,
                               clusters=coverage_clusters(df.iloc[keep], codes=True))
    table = table.drop(columns="level")
    deff = table["design_effect"].to_numpy(float)
    cells = table["n"].to_numpy(float)
    table["se"] = np.sqrt(level * (1 - level) * deff / cells)
    table["p_within"] = calibrated_within_chance(table["n"].to_numpy(), level, tolerance,
                                                 design_effect=deff)
    table["within_tolerance"] = within_tolerance(table["coverage"], level, tolerance)
    table["consistent"] = consistent_with_level(table["coverage"], table["n"], level,
                                                design_effect=deff)
    return table


def measured(df: pd.DataFrame) -> np.ndarray:
    """Which steps of ``df`` carry a measured step time (finite ``duration_ms`` > 0): the one
    rule of :func:`interval_check` and of ``perfmodel predict``'s check (all False without
    the column)."""
    if not isinstance(df, pd.DataFrame) or "duration_ms" not in df.columns:
        return np.zeros(len(df) if hasattr(df, "__len__") else 0, dtype=bool)
    return measured_times(pd.to_numeric(df["duration_ms"], errors="coerce").to_numpy(float))


def measured_times(y) -> np.ndarray:
    """:func:`measured`'s rule on an array of step times (ms): finite and > 0 (NaN where a
    step has no measured time)."""
    y = np.asarray(y, dtype=float)
    return np.isfinite(y) & (y > 0)


def bound_text(value: float, side: str, digits: int = 2) -> str:
    """A bound on a chance, rounded outwards to ``digits`` decimals: up for an upper bound
    (``side='upper'``), down for a lower one, so the printed bound still holds (0.3641 "at
    most" prints 0.37, not 0.36).  A value within 1e-9 of a grid point, in units of the last
    digit, is that point (float noise such as 0.31 * 100 = 31.000000000000004).

    Raises
    ------
    InputError
        ``value`` not a chance (a finite number in [0, 1], float noise of 1e-9 clipped), an
        unknown ``side``, ``digits`` not an integer in 0..6.
    """
    if side not in ("upper", "lower"):
        raise InputError(f"side must be 'upper' or 'lower', got {side!r}")
    digits = check_int_range("digits", digits, 0, 6)
    v = check_number("value", value)
    if not -1e-9 <= v <= 1 + 1e-9:  # a sum of chances may stray from [0, 1] by float noise
        raise InputError(f"value must be a chance in [0, 1], got {value!r}")
    scaled = min(max(v, 0.0), 1.0) * 10 ** digits
    r = (math.ceil(scaled - 1e-9) if side == "upper" else math.floor(scaled + 1e-9)) / 10 ** digits
    return f"{r:.{digits}f}"


def format_check(table: pd.DataFrame) -> list[str]:
    """Text lines of an :func:`interval_check` table (with a ``level`` column first when it
    has one, as :func:`perfmodel.stats.interval_heldout.held_out_coverage` gives): the one
    layout ``perfmodel predict`` and ``perfmodel coverage`` print (legend: :data:`CHECK_LEGEND`)."""
    lv = "level" in table.columns
    lines = [(f"{'level':>5}  " if lv else "")
             + f"{'regime':<15}{'n':>7}{'coverage':>10}{'s.e.':>7}{'width':>7}  within  "
             + "consistent  p(within)"]
    for r in table.itertuples(index=False):
        lines.append((f"{r.level:>5g}  " if lv else "")
                     + f"{r.regime:<15}{r.n:>7d}{r.coverage:>10.3f}{r.se:>7.3f}{r.width:>7.2f}  "
                     + f"{'yes' if r.within_tolerance else 'no':<6}  "
                     + f"{'yes' if r.consistent else 'no':<10}  {r.p_within:>9.2f}")
    return lines


def check_summary(table: pd.DataFrame, tolerance: float = TOLERANCE) -> str:
    """One line on an :func:`interval_check` table's regime cells (every row but ``all``).

    Problem: "12 of 18 cells within 3 points" reads as a failure or a success
    only next to the count a calibrated interval would reach on cells of
    those sizes and clustering (the sum of ``p_within``, module docstring,
    Sampling reference), next to the chance that a calibrated interval has
    *every* cell within (at most the smallest ``p_within``: every cell within
    implies that one within; the cells share steps, so no product is exact),
    and next to the count the exact test finds consistent with the level.

    Parameters
    ----------
    table : DataFrame from :func:`interval_check` or
        :func:`perfmodel.stats.interval_heldout.held_out_coverage`
    tolerance : the tolerance the table was made with

    Returns
    -------
    str, e.g. ``"regime x level cells within 0.03: 12 of 18 (a calibrated interval: about
    13 expected, and all 18 with a chance of at most 0.41, sampling alone); consistent with
    the level: 17 of 18"``
    """
    need = {"regime", "within_tolerance", "consistent", "p_within"}
    if not isinstance(table, pd.DataFrame) or not need <= set(table.columns):
        raise InputError(f"check_summary needs an interval_check table (columns {sorted(need)})")
    cells = table[table["regime"] != "all"]
    m = len(cells)
    every = (f", and all {m} with a chance of at most "
             f"{bound_text(cells['p_within'].min(), 'upper')}"
             if m else "")
    return (f"regime x level cells within {tolerance:g}: {int(cells['within_tolerance'].sum())} "
            f"of {m} (a calibrated interval: about {float(cells['p_within'].sum()):.0f} "
            f"expected{every}, sampling alone); consistent with the level: "
            f"{int(cells['consistent'].sum())} of {m}")
