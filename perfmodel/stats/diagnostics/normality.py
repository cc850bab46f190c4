"""Normality tests of residuals: Shapiro-Wilk, Jarque-Bera, Anderson-Darling.

Verified in ``tests/stats/test_diagnostics.py`` against scipy/statsmodels
(see :mod:`perfmodel.stats.diagnostics`).
"""
from __future__ import annotations

from typing import Any

import numpy as np
from scipy import stats

from perfmodel._checks import check_int_range
from perfmodel.errors import InputError
from perfmodel.stats.diagnostics._common import (
    SHAPIRO_MAX_N,
    AndersonResult,
    JarqueBeraResult,
    ShapiroResult,
    _resid,
)


def shapiro_wilk(resid: Any, max_n: int = SHAPIRO_MAX_N, seed: int = 0) -> ShapiroResult:
    """Shapiro-Wilk test of normality of the residuals.

    Problem: are the residuals a sample from a normal distribution, as the
    t-based covariance intervals assume?

    Null hypothesis: the residuals are i.i.d. normal (any mean and variance).
    ``statistic`` W lies in (0, 1]; values near 1 agree with normality; a small
    ``pvalue`` (e.g. < 0.05) is evidence against it. With thousands of
    residuals the test rejects for departures too small to matter: read W and
    the QQ plot (:func:`perfmodel.plotting.qq_plot`) along with the p-value.

    Above ``max_n`` (5,000) residuals scipy's p-value is not accurate (scipy
    warns), so the test runs on a seeded random subsample of ``max_n``
    residuals drawn without replacement; ``n_used`` and ``subsampled`` say so.
    :func:`jarque_bera` and :func:`anderson_darling` use the full sample.

    Parameters
    ----------
    resid : array_like, shape (n,)
        Residuals, n >= 3, finite, not constant.
    max_n : int, default 5000
        Largest sample passed to :func:`scipy.stats.shapiro`, 3..5000.
    seed : int, default 0
        Seed of the subsample (``numpy.random.default_rng(seed)``).

    Returns
    -------
    ShapiroResult
        ``statistic``, ``pvalue``, ``n``, ``n_used``, ``subsampled``.

    Notes
    -----
    Verified against :func:`scipy.stats.shapiro` on the same (sub)sample to
    1e-10, and against the worked example (n = 25, W = 0.83467,
    p = 0.000914) that scipy's test suite takes from the original paper.

    Examples
    --------
    >>> import numpy as np
    >>> shapiro_wilk(np.random.default_rng(1).normal(size=200)).pvalue > 0.05
    True
    """
    e = _resid(resid, min_n=3)
    max_n = check_int_range("`max_n`", max_n, 3, SHAPIRO_MAX_N)
    n = e.size
    subsampled = n > max_n
    if subsampled:
        idx = np.sort(np.random.default_rng(seed).choice(n, size=int(max_n), replace=False))
        e = e[idx]
        if np.ptp(e) == 0:
            raise InputError("the Shapiro-Wilk subsample of `resid` is constant")
    res = stats.shapiro(e)
    return ShapiroResult(float(res.statistic), float(res.pvalue), n, e.size, subsampled)


def jarque_bera(resid: Any) -> JarqueBeraResult:
    """Jarque-Bera test of normality from sample skewness and kurtosis.

    Problem: a normality test valid for any number of residuals (it is
    asymptotic, so use it for n in the hundreds or more).

    Null hypothesis: skewness 0 and kurtosis 3 (as for a normal distribution).
    ``statistic`` = n/6 (skew^2 + (kurt - 3)^2 / 4) is chi-square(2) under the
    null; large values (small ``pvalue``) mean skewed or heavy-tailed
    residuals. ``kurtosis`` is the plain (not excess) kurtosis: 3 for normal.

    Parameters
    ----------
    resid : array_like, shape (n,)
        Residuals, n >= 3 (the p-value is asymptotic: hundreds or more), finite,
        not constant.

    Returns
    -------
    JarqueBeraResult
        ``statistic``, ``pvalue``, ``skew``, ``kurtosis``, ``n``.

    Notes
    -----
    Verified against :func:`scipy.stats.jarque_bera` and
    :func:`statsmodels.stats.stattools.jarque_bera` (statistic, p-value,
    skewness, kurtosis) to 1e-10.
    """
    e = _resid(resid, min_n=3)
    res = stats.jarque_bera(e)
    skew = float(stats.skew(e))
    kurt = float(stats.kurtosis(e, fisher=False))
    return JarqueBeraResult(float(res.statistic), float(res.pvalue), skew, kurt, e.size)


def _ad_normal_pvalue(a2: float, n: int) -> float:
    """P-value of A^2 for the normal with estimated mean and variance.

    D'Agostino and Stephens (1986), Goodness-of-Fit Techniques, table 4.9:
    modified statistic A*^2 = A^2 (1 + 0.75/n + 2.25/n^2), piecewise
    exponential fits; the same formula as statsmodels' ``normal_ad``.
    """
    a = a2 * (1.0 + 0.75 / n + 2.25 / n**2)
    if a < 0.2:
        return float(1.0 - np.exp(-13.436 + 101.14 * a - 223.73 * a**2))
    if a < 0.34:
        return float(1.0 - np.exp(-8.318 + 42.796 * a - 59.938 * a**2))
    if a < 0.6:
        return float(np.exp(0.9177 - 4.279 * a - 1.38 * a**2))
    if a <= 13.0:
        return float(np.exp(1.2937 - 5.709 * a + 0.0186 * a**2))
    return 0.0  # below 4.95e-31


def anderson_darling(resid: Any) -> AndersonResult:
    """Anderson-Darling test of normality (mean and variance estimated).

    Problem: a normality test on the full sample that weighs the tails more
    than Shapiro-Wilk's subsample can, with a continuous p-value.

    Null hypothesis: the residuals are i.i.d. normal. ``statistic`` A^2 grows
    with the distance between the empirical and the fitted normal CDF, tails
    weighted most; a small ``pvalue`` is evidence against normality.

    Parameters
    ----------
    resid : array_like, shape (n,)
        Residuals, n >= 8, finite, not constant.

    Returns
    -------
    AndersonResult
        ``statistic``, ``pvalue``, ``n``.

    Notes
    -----
    The statistic is :func:`scipy.stats.anderson` (``dist='norm'``). Its
    p-value is not scipy's: scipy 1.17 interpolates a table and clips the
    p-value to [0.01, 0.15]; here it comes from D'Agostino & Stephens (1986,
    table 4.9), continuous, 0 when A*^2 > 13 (p < 5e-31).
    Verified: statistic equal to scipy's and to statsmodels'
    ``anderson_statistic`` to 1e-10, p-value equal to statsmodels'
    ``normal_ad`` to 1e-10. (statsmodels' own statistic overflows to inf for
    very non-normal samples, where scipy's, used here, stays finite.)
    """
    e = _resid(resid, min_n=8)
    try:
        res = stats.anderson(e, dist="norm", method="interpolate")  # scipy >= 1.17
    except TypeError:  # older scipy: no `method`
        res = stats.anderson(e, dist="norm")
    a2 = float(res.statistic)
    return AndersonResult(a2, _ad_normal_pvalue(a2, e.size), e.size)
