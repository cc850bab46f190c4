"""Tests of residuals against time order: Durbin-Watson, Ljung-Box, a linear trend.

Verified in ``tests/stats/test_diagnostics.py`` against statsmodels and R
(see :mod:`perfmodel.stats.diagnostics`).
"""
from __future__ import annotations

from typing import Any

import numpy as np
from scipy import stats

from perfmodel._checks import check_int_range
from perfmodel.errors import InputError
from perfmodel.stats.diagnostics._common import (
    DurbinWatsonResult,
    LjungBoxResult,
    TrendResult,
    _resid,
    _vector,
)


def durbin_watson(resid: Any) -> DurbinWatsonResult:
    """Durbin-Watson test for lag-1 autocorrelation of time-ordered residuals.

    Problem: consecutive engine steps share machine state (caches, contention,
    clock drift), so residuals may be correlated in time, which makes i.i.d.
    standard errors too small.

    ``statistic`` d = sum (e_t - e_{t-1})^2 / sum e_t^2, in [0, 4]; about 2
    means no lag-1 correlation, towards 0 positive, towards 4 negative
    correlation; ``rho`` = 1 - d/2 is the lag-1 correlation it implies.
    Null hypothesis: no lag-1 autocorrelation. ``pvalue`` is two-sided from
    the large-sample normal law sqrt(n) (1 - d/2) ~ N(0, 1); it ignores the
    design matrix (the exact Durbin-Watson bounds need it), so read it as
    approximate when n is below a few hundred.

    Parameters
    ----------
    resid : array_like, shape (n,)
        Residuals in time order (sort by step or timestamp first), n >= 3.

    Returns
    -------
    DurbinWatsonResult
        ``statistic``, ``pvalue``, ``rho``, ``n``.

    Notes
    -----
    Verified: ``statistic`` against
    :func:`statsmodels.stats.stattools.durbin_watson` to 1e-10 and against R's
    ``car::durbinWatsonTest`` values recorded in statsmodels' test suite
    (e.g. 1.95298958377419 on its 20-value series).
    """
    e = _resid(resid, min_n=3)
    d = float(np.sum(np.diff(e) ** 2) / np.sum(e**2))
    rho = 1.0 - d / 2.0
    z = np.sqrt(e.size) * rho
    return DurbinWatsonResult(d, float(2.0 * stats.norm.sf(abs(z))), rho, e.size)


def ljung_box(resid: Any, lags: int | None = None) -> LjungBoxResult:
    """Ljung-Box portmanteau test for autocorrelation up to ``lags``.

    Problem: Durbin-Watson sees only lag 1; periodic effects (e.g. a
    scheduler cycle) show at longer lags.

    Null hypothesis: the residual autocorrelations at lags 1..``lags`` are all
    zero. ``statistic`` Q = n (n + 2) sum_k r_k^2 / (n - k) is chi-square with
    ``lags`` degrees of freedom under the null; a small ``pvalue`` means some
    autocorrelation. Residuals are demeaned first.

    Parameters
    ----------
    resid : array_like, shape (n,)
        Residuals in time order, n >= 4.
    lags : int, optional
        Largest lag, 1 <= lags < n. Default ``min(10, n // 5)`` (at least 1),
        statsmodels' default.

    Returns
    -------
    LjungBoxResult
        ``statistic``, ``pvalue``, ``lags``, ``n``.

    Notes
    -----
    Verified against :func:`statsmodels.stats.diagnostic.acorr_ljungbox` to
    1e-10 and against R's ``Box.test(type = "Ljung-Box", lag = 4)``
    (5.23587172795227, p 0.263940335284713) on the macrodata regression
    residuals recorded in statsmodels' test suite.
    """
    e = _resid(resid, min_n=4)
    if lags is None:
        lags = max(1, min(10, e.size // 5))
    lags = check_int_range("`lags`", lags, 1, e.size - 1)
    from statsmodels.stats.diagnostic import acorr_ljungbox

    out = acorr_ljungbox(e, lags=[int(lags)], return_df=True)
    return LjungBoxResult(
        float(out["lb_stat"].iloc[0]), float(out["lb_pvalue"].iloc[0]), int(lags), e.size
    )


def trend_test(resid: Any, order: Any = None) -> TrendResult:
    """Linear trend of the residuals against time order (docs/model.md, Evaluation).

    Problem: a drifting host (data/README.md, Noise floor and drift) shows as
    residuals that rise or fall over the trace.

    OLS of the residuals on [1, order]. Null hypothesis: slope 0 (no linear
    drift). ``slope`` is in residual units (ms) per unit of ``order``; ``t`` is
    slope / stderr and ``pvalue`` its two-sided Student-t p-value with n - 2
    degrees of freedom.

    Parameters
    ----------
    resid : array_like, shape (n,)
        Residuals, n >= 3.
    order : array_like, shape (n,), optional
        Time of each residual (step index or timestamp). Default: row order
        0..n-1.

    Returns
    -------
    TrendResult
        ``slope``, ``intercept``, ``stderr``, ``t``, ``pvalue``, ``n``;
        ``statistic`` aliases ``t``.

    Notes
    -----
    Verified against :func:`scipy.stats.linregress` (slope, intercept,
    stderr, p-value) and statsmodels ``OLS`` (t value) to 1e-10. The shortcut
    ``linregress(...)[:2]`` returns slope and intercept, not a p-value.
    """
    e = _resid(resid, min_n=3)
    t_ = np.arange(e.size, dtype=float) if order is None else _vector(order, "order", n=e.size)
    if np.ptp(t_) == 0:
        raise InputError("`order` is constant: no time order to test a trend against")
    res = stats.linregress(t_, e)
    t_stat = res.slope / res.stderr if res.stderr > 0 else np.inf * np.sign(res.slope)
    return TrendResult(
        float(res.slope),
        float(res.intercept),
        float(res.stderr),
        float(t_stat),
        float(res.pvalue),
        e.size,
    )
