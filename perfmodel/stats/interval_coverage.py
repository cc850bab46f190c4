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

Verified against hand-counted cases in tests/stats/test_interval_coverage.py
and, before/after, against the tables of ``scripts/interval_study.py`` and
notebook 15, which it replaced (identical values).
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from perfmodel._checks import check_positive, check_vector
from perfmodel.core.interval_calibration import LENGTHS, PHASES
from perfmodel.errors import InputError
from perfmodel.stats.predictive import _level  # the one check of an interval level

__all__ = ["coverage_by_regime", "regime_masks"]


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
