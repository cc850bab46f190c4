"""Bootstrap building blocks: percentile, BCa and studentized intervals; block resampling.
"""
from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np
from scipy import special

from perfmodel.stats.uncertainty._common import (
    BLOCKS,
    _alpha_problem,
    _choice_problem,
    _int_problem,
    _raise,
)

# ---------------------------------------------------------------------------
# bootstrap building blocks
# ---------------------------------------------------------------------------

def percentile_interval(samples, alpha: float = 0.05):
    """Percentile interval: the ``alpha/2`` and ``1-alpha/2`` sample quantiles.

    Quantiles by linear interpolation (numpy's default, as
    :func:`scipy.stats.bootstrap`).  ``samples`` is (n_boot, p); returns two
    (p,) arrays.
    """
    s = np.asarray(samples, float)
    _raise(_alpha_problem(alpha) + ([] if s.ndim in (1, 2) and s.shape[0] >= 1 else
                                    [f"samples must be (n_boot, p) with n_boot >= 1, got {s.shape}"]),
           "percentile_interval")
    lo, hi = np.quantile(s, [alpha / 2, 1 - alpha / 2], axis=0)
    return lo, hi


def quantile_mc_range(samples, q: float, level: float = 0.95):
    """Monte Carlo range of the ``q``-quantile of ``samples``: how far another run could move it.

    Problem: an interval's end is the ``q``-quantile of ``n`` Monte Carlo
    draws (bootstrap resamples, a decision's replications); another ``n``
    draws would give another end.  The count of draws below the true
    quantile is binomial(n, q), so the end is an order statistic within
    about ``q n +- z sqrt(n q (1-q))`` of ``q n`` (``z`` the normal quantile
    of ``level``).  Returns the values ``(lo, hi)`` of the two bracketing
    order statistics (clipped to the sample): a distribution-free range for
    the end, (p,) arrays for (n, p) samples.  It says nothing of the
    interval's bias, only of its Monte Carlo noise.  It holds the true
    quantile when the binomial count lies between the two ranks; where the
    range is clipped at the sample's end it holds it less often than
    ``level``: with 40 draws and ``q = 0.05`` it spans the smallest to the
    sixth smallest draw and holds the true quantile with probability 0.86
    (the smallest draw lies above it with probability 0.95^40 = 0.13).
    Verified in ``tests/stats/test_uncertainty.py`` (hand-counted order
    statistics; the share of normal samples whose range holds the true
    quantile, against the binomial probability, for 40 and 400 draws).
    """
    s = np.asarray(samples, float)
    _raise(([] if s.ndim in (1, 2) and s.shape[0] >= 1 else
            [f"samples must be (n,) or (n, p) with n >= 1, got {s.shape}"])
           + ([] if isinstance(q, Real) and 0 < q < 1 else [f"q must be in (0, 1), got {q!r}"])
           + ([] if isinstance(level, Real) and 0 < level < 1 else
              [f"level must be in (0, 1), got {level!r}"]), "quantile_mc_range")
    n = s.shape[0]
    srt = np.sort(s, axis=0)
    half = special.ndtri(0.5 + level / 2) * math.sqrt(n * q * (1 - q))
    lo = int(np.clip(math.floor(q * n - half), 0, n - 1))
    hi = int(np.clip(math.ceil(q * n + half), 0, n - 1))
    return srt[lo], srt[hi]


def share_below(samples, value):
    """Share of ``samples`` below ``value``, ties counted half (a mid-rank PIT value).

    The probability integral transform of ``value`` under the empirical
    distribution of ``samples``: uniform on [0, 1] when ``value`` is one more
    draw from the same distribution, so its histogram over many checks tells
    whether an interval is placed right (not only how often it covers).  The
    same share gives BCa's bias correction (:func:`bca_interval`).  ``samples``
    is (n,) or (n, p); ``value`` a scalar or (p,); returns a float or (p,),
    NaN where ``value`` is not finite.
    Verified in ``tests/stats/test_uncertainty.py`` (hand-counted shares; the
    BCa test against scipy uses it).
    """
    s = np.asarray(samples, float)
    v = np.asarray(value, float)
    _raise([] if s.ndim in (1, 2) and s.shape[0] >= 1 else
           [f"samples must be (n,) or (n, p) with n >= 1, got {s.shape}"], "share_below")
    share = (np.sum(s < v, axis=0) + np.sum(s <= v, axis=0)) / (2.0 * s.shape[0])
    share = np.where(np.isfinite(v), share, np.nan)
    return float(share) if np.ndim(share) == 0 else share


def bca_interval(theta_hat, samples, jackknife, alpha: float = 0.05):
    """Bias-corrected and accelerated (BCa) interval (Efron & Tibshirani 1993, 14.3).

    Problem: the percentile interval is first-order accurate only when the
    bootstrap distribution is unbiased and of constant shape; BCa corrects
    both.  Bias correction ``z0 = Phi^-1(share of samples below theta_hat)``
    (ties counted half, as scipy), acceleration
    ``a = sum d_i^3 / (6 (sum d_i^2)^{3/2})`` with ``d_i = mean(jack) - jack_i``
    from jackknife estimates, and the interval is the ``alpha_1, alpha_2``
    sample quantiles with ``alpha_k = Phi(z0 + (z0 + z_k)/(1 - a (z0 + z_k)))``,
    ``z_1 = Phi^-1(alpha/2)``, ``z_2 = Phi^-1(1 - alpha/2)``.

    A grouped (delete-d) jackknife may be passed instead of leave-one-out:
    the ratio defining ``a`` has the same expectation (for a mean, both give
    skewness / (6 sqrt(n))).

    Parameters
    ----------
    theta_hat : (p,) full-data estimate
    samples : (n_boot, p) bootstrap estimates
    jackknife : (n_jack, p) jackknife estimates
    alpha : 1 - confidence level

    Returns
    -------
    lower, upper, z0, a : (p,) arrays (NaN where z0 is infinite: every
    sample on one side of the estimate)

    Notes
    -----
    Verified against :func:`scipy.stats.bootstrap` (``method='BCa'``) on the
    mean of a skewed sample, fed scipy's own ``bootstrap_distribution``:
    equal to 1e-12 (``tests/stats/test_uncertainty.py``).
    """
    th = np.atleast_1d(np.asarray(theta_hat, float))
    s = np.asarray(samples, float)
    jk = np.asarray(jackknife, float)
    if s.ndim == 1:
        s = s[:, None]
    if jk.ndim == 1:
        jk = jk[:, None]
    problems = _alpha_problem(alpha)
    if s.ndim != 2 or s.shape[1] != th.size or s.shape[0] < 1:
        problems.append(f"samples must be (n_boot, {th.size}), got {s.shape}")
    if jk.ndim != 2 or jk.shape[1] != th.size or jk.shape[0] < 2:
        problems.append(f"jackknife must be (n_jack >= 2, {th.size}), got {jk.shape}")
    _raise(problems, "bca_interval")
    z0 = special.ndtri(share_below(s, th))
    d = jk.mean(axis=0) - jk
    num = np.sum(d**3, axis=0)
    den = 6.0 * np.sum(d**2, axis=0) ** 1.5
    with np.errstate(invalid="ignore", divide="ignore"):
        a = np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)
    lo = np.full(th.size, np.nan)
    hi = np.full(th.size, np.nan)
    za = special.ndtri(alpha / 2)
    for k in range(th.size):
        if not np.isfinite(z0[k]):
            continue
        a1 = special.ndtr(z0[k] + (z0[k] + za) / (1 - a[k] * (z0[k] + za)))
        a2 = special.ndtr(z0[k] + (z0[k] - za) / (1 - a[k] * (z0[k] - za)))
        lo[k], hi[k] = np.quantile(s[:, k], [a1, a2])
    return lo, hi, z0, a


def studentized_interval(theta_hat, se_hat, samples, se_samples, alpha: float = 0.05,
                          min_samples: int = 10):
    """Bootstrap-t (studentized) interval (Efron & Tibshirani 1993, 12.5; Davison & Hinkley 1997, 5.2).

    Problem: percentile intervals inherit the small-sample bias and skew of
    the estimator; studentizing each resample by its own standard error
    gives a pivot whose quantiles transfer (second-order accurate).  With
    ``t*_b = (theta*_b - theta_hat) / se*_b``, the interval is
    ``[theta_hat - q_{1-alpha/2}(t*) se_hat, theta_hat - q_{alpha/2}(t*) se_hat]``
    where ``se_hat`` is the same kind of standard error on the original data.
    Resamples whose ``se*`` is not finite and positive (a parameter at its
    bound in that resample) are left out for that parameter; fewer than
    ``min_samples`` usable ones give NaN.  Near a bound this biases the tail
    of ``t*`` (the left-out resamples are the extreme ones): in the coverage
    study a parameter 2 standard errors from its bound got 0.72 coverage
    with the wild bootstrap-t against 0.90 with the percentile interval
    (:mod:`perfmodel.stats.coverage`); prefer percentile intervals there.

    Parameters
    ----------
    theta_hat, se_hat : (p,) estimate and its standard error
    samples, se_samples : (n_boot, p) resample estimates and their standard errors
    alpha : 1 - confidence level

    Returns
    -------
    lower, upper : (p,) arrays; n_used : (p,) int array

    Notes
    -----
    Verified against ``arch.bootstrap.IIDBootstrap.conf_int(method='studentized')``
    on the same resamples (arch scales by the bootstrap sd; fed that, the two
    agree to 1e-12; ``tests/stats/test_uncertainty.py``).
    """
    th = np.atleast_1d(np.asarray(theta_hat, float))
    sh = np.atleast_1d(np.asarray(se_hat, float))
    s = np.asarray(samples, float).reshape(-1, th.size) if np.ndim(samples) == 1 else \
        np.asarray(samples, float)
    se = np.asarray(se_samples, float).reshape(s.shape) if np.size(se_samples) == s.size else None
    problems = _alpha_problem(alpha)
    if sh.shape != th.shape:
        problems.append(f"se_hat must have shape {th.shape}, got {sh.shape}")
    if s.ndim != 2 or s.shape[1] != th.size:
        problems.append(f"samples must be (n_boot, {th.size}), got {s.shape}")
    if se is None:
        problems.append(f"se_samples must have the shape of samples {s.shape}")
    _raise(problems, "studentized_interval")
    with np.errstate(invalid="ignore", divide="ignore"):
        t = (s - th) / se
    ok = np.isfinite(t) & np.isfinite(se) & (se > 0)
    lo = np.full(th.size, np.nan)
    hi = np.full(th.size, np.nan)
    used = ok.sum(axis=0)
    for k in range(th.size):
        if used[k] >= min_samples and np.isfinite(sh[k]):
            q_lo, q_hi = np.quantile(t[ok[:, k], k], [alpha / 2, 1 - alpha / 2])
            lo[k], hi[k] = th[k] - q_hi * sh[k], th[k] - q_lo * sh[k]
    return lo, hi, used


def block_indices(n: int, block_length: float, *, block: str = "stationary", rng=None):
    """Row indices of one block-bootstrap resample of a length-``n`` series.

    ``'circular'`` (Politis & Romano 1992): ``ceil(n/L)`` blocks of
    ``L = ceil(block_length)`` consecutive rows starting at uniform
    positions, wrapping around the end, cut to ``n``.  ``'stationary'``
    (Politis & Romano 1994): blocks of geometric length with mean
    ``block_length`` (a new block starts at each row with probability
    ``1/block_length``), also wrapping.  Inside a block, each index is the
    previous one plus 1 (mod ``n``).
    """
    problems = _int_problem("n", n, 1) + _choice_problem("block", block, BLOCKS)
    if isinstance(block_length, bool) or not isinstance(block_length, Real) or \
            not (1 <= float(block_length) <= max(int(n) if isinstance(n, Integral) else 1, 1)):
        problems.append(f"block_length must be a number in [1, n={n}], got {block_length!r}")
    _raise(problems, "block_indices")
    rng = np.random.default_rng(rng)
    if block == "circular":
        L = math.ceil(block_length)
        k = math.ceil(n / L)
        starts = rng.integers(0, n, k)
        idx = (starts[:, None] + np.arange(L)[None, :]).ravel()[:n]
        return idx % n
    p = 1.0 / float(block_length)
    new = rng.random(n) < p
    new[0] = True
    starts = rng.integers(0, n, n)
    bid = np.cumsum(new) - 1
    pos = np.nonzero(new)[0]
    offset = np.arange(n) - pos[bid]
    return (starts[bid] + offset) % n


def optimal_block_length(x, block: str = "stationary") -> tuple[float, str]:
    """Data-driven block length for a block bootstrap of series ``x``.

    Politis & White (2004) with the correction of Patton, Politis & White
    (2009), through :func:`arch.bootstrap.optimal_block_length` when the
    ``arch`` package is installed.  Without it, the same formula with an
    AR(1) plug-in: with lag-1 autocorrelation ``rho`` (clipped to
    [-0.99, 0.99]), ``b_SB = (2|rho|/(1-rho^2))^{2/3} n^{1/3}`` and
    ``b_CB = (3/2)^{1/3} b_SB`` -- a simple rule, exact only for AR(1).
    Returns (length >= 1, clipped to n/2; rule used).
    """
    x = np.asarray(x, float).ravel()
    problems = _choice_problem("block", block, BLOCKS)
    if x.size < 4 or not np.all(np.isfinite(x)):
        problems.append(f"x must be >= 4 finite values, got {x.size} values")
    _raise(problems, "optimal_block_length")
    n = x.size
    try:
        from arch.bootstrap import optimal_block_length as _obl
    except ImportError:  # pragma: no cover - depends on the environment
        _obl = None
    if _obl is not None:
        b = float(_obl(x)[block].iloc[0])
        rule = "Politis-White (2004), Patton-Politis-White (2009) via arch"
    else:
        xc = x - x.mean()
        rho = float(np.clip((xc[1:] @ xc[:-1]) / (xc @ xc), -0.99, 0.99)) if xc @ xc > 0 else 0.0
        b = (2 * abs(rho) / (1 - rho**2)) ** (2 / 3) * n ** (1 / 3)
        if block == "circular":
            b *= 1.5 ** (1 / 3)
        rule = "AR(1) plug-in of Politis-White (arch not installed)"
    return float(np.clip(b if np.isfinite(b) else 1.0, 1.0, max(1.0, n / 2))), rule
