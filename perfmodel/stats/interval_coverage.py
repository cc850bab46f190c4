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
test of one cell.  Both treat the steps as independent draws; steps of one
configuration or of neighbouring time share their errors, so the real
spread is wider: the expected count is an upper bound, and the test rejects
more often than its level.

Verified against hand-counted cases in tests/stats/test_interval_coverage.py
and, before/after, against the tables of ``scripts/interval_study.py`` and
notebook 15, which it replaced (identical values).
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from perfmodel._checks import check_positive, check_probability, check_vector
from perfmodel.core.interval_calibration import LENGTHS, PHASES
from perfmodel.errors import InputError
from perfmodel.stats.predictive import _level  # the one check of an interval level

__all__ = ["calibrated_within_chance", "consistent_with_level", "coverage_by_regime",
           "regime_masks"]


def _labels(name: str, values, n: int) -> np.ndarray:
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


def coverage_by_regime(y, mu, bounds: Mapping, masks: Mapping) -> pd.DataFrame:
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

    Returns
    -------
    pandas.DataFrame
        One row per non-empty regime and level, regime-major in the order of
        ``masks`` and ``bounds``: ``regime``, ``level``, ``n`` (steps),
        ``coverage`` (share with ``lower <= y <= upper``) and ``width`` (median
        of ``(upper - lower) / mu``), unrounded.

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
        tally[lv] = ((y >= lo) & (y <= hi), (hi - lo) / mu)
    rows = []
    for reg, m in masks.items():
        m = np.asarray(m)
        if m.shape != y.shape or m.dtype != bool:
            raise InputError(f"masks[{reg!r}] must be a boolean array, one per step ({len(y)})")
        n = int(m.sum())
        if n == 0:
            continue
        for lv, (inside, width) in tally.items():
            rows.append({"regime": reg, "level": lv, "n": n,
                         "coverage": float(inside[m].mean()),
                         "width": float(np.median(width[m]))})
    return pd.DataFrame(rows, columns=["regime", "level", "n", "coverage", "width"])


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


def calibrated_within_chance(n, level, tolerance: float) -> np.ndarray:
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

    Returns
    -------
    numpy.ndarray
        ``P(|K/n - level| <= tolerance)`` for ``K ~ Binomial(n, level)``: the
        steps taken as independent, so an upper bound for clustered steps.
        Their sum is the expected number of cells within the tolerance.

    Verified in tests/stats/test_interval_coverage.py against a direct sum of
    binomial probabilities and a simulation.
    """
    from scipy import stats

    n, level = _cells(n, level, tolerance)
    eps = 1e-9  # a coverage exactly at the edge counts as within, as in the tables
    hi = np.floor(n * (level + tolerance) + eps)
    lo = np.ceil(n * (level - tolerance) - eps)
    return stats.binom.cdf(hi, n, level) - stats.binom.cdf(lo - 1, n, level)


def consistent_with_level(coverage, n, level, alpha: float = 0.05) -> np.ndarray:
    """Whether each cell's coverage is consistent with its level (exact binomial test).

    Parameters
    ----------
    coverage : float or array of float
        Share of the cell's steps inside the interval, in [0, 1].
    n, level : as in :func:`calibrated_within_chance`
    alpha : float
        Test level, in (0, 1).

    Returns
    -------
    numpy.ndarray of bool
        True where the two-sided exact binomial test of ``round(coverage n)``
        covered steps out of ``n`` against ``level`` has ``p >= alpha`` (steps
        taken as independent: with clustered steps it rejects more often than
        ``alpha``).

    Verified in tests/stats/test_interval_coverage.py (hand-checked cells).
    """
    from scipy import stats

    n, level = _cells(n, level)
    cov = np.atleast_1d(np.asarray(coverage, dtype=float))
    if cov.shape != n.shape and cov.size != 1:
        raise InputError(f"coverage ({cov.size}) and n ({n.size}) do not match")
    cov = np.broadcast_to(cov, n.shape)
    if not np.all(np.isfinite(cov)) or np.any((cov < 0) | (cov > 1)):
        raise InputError("coverage must be shares in [0, 1]")
    alpha = check_probability("alpha", alpha)
    k = np.round(cov * n).astype(np.int64)
    return np.array([stats.binomtest(int(ki), int(ni), float(lv)).pvalue >= alpha
                     for ki, ni, lv in zip(k, n, level)])
