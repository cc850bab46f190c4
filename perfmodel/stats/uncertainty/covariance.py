"""Covariance intervals: classical ``s^2 (J^T J)^{-1}`` and sandwich (HC0, HC3, HAC, CR1).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from perfmodel.core.scale import scale_of
from perfmodel.errors import InputError
from perfmodel.stats.uncertainty import _common

# ---------------------------------------------------------------------------
# covariance intervals
# ---------------------------------------------------------------------------

def _newey_west_lags(n: int) -> int:
    return math.floor(4.0 * (n / 100.0) ** (2.0 / 9.0))


def sandwich_cov(J, e, kind: str = "HC3", *, maxlags: int | None = None,
                 groups=None) -> np.ndarray:
    """Heteroscedasticity/autocorrelation/cluster-robust covariance ``A^{-1} M A^{-1}``.

    Problem: when the errors do not have one variance (``HC``) or are
    correlated in time (``HAC``), ``s^2 (J^T J)^{-1}`` is wrong; the sandwich
    with bread ``A = J^T J`` and meat ``M`` built from the residuals is not.

    ``HC0``: ``M = sum_i e_i^2 j_i j_i^T``; ``HC3``: ``e_i^2 / (1 - h_ii)^2``
    (MacKinnon & White 1985); ``HAC``: Newey-West with Bartlett weights
    ``1 - l/(L+1)``, ``L = maxlags`` (default ``floor(4 (n/100)^(2/9))``),
    rows in time order, no small-sample correction; ``CR1``: cluster-robust,
    ``M = c sum_g s_g s_g^T`` with ``s_g = sum_{i in g} e_i j_i`` over the
    ``G`` clusters of ``groups`` and ``c = G/(G-1) (n-1)/(n-p)`` (Cameron &
    Miller, J. Human Resources 50, 2015, sec. IIC).

    Parameters
    ----------
    J : (n, p) Jacobian of the fitted values on the fit's scale
    e : (n,) residuals on the same scale
    kind : 'HC0', 'HC3', 'HAC' or 'CR1'
    maxlags : HAC truncation lag
    groups : CR1 only: one cluster label per row (>= 2 clusters)

    Returns
    -------
    (p, p) ndarray

    Notes
    -----
    Verified against statsmodels ``OLS(y, X).fit(cov_type='HC0'|'HC3'|'HAC',
    cov_kwds={'maxlags': L})`` to 1e-10 on a linear model (where ``J = X``), and
    CR1 against ``cov_type='cluster'`` (its default corrections) to 1e-10.
    """
    J = np.asarray(J, float)
    e = np.asarray(e, float).ravel()
    problems = []
    if J.ndim != 2 or J.shape[0] != e.size:
        problems.append(f"J must be (n, p) with n = len(e) = {e.size}, got shape {J.shape}")
    problems += _common._choice_problem("kind", kind, ("HC0", "HC3", "HAC", "CR1"))
    codes = None
    if kind == "CR1":
        if groups is None or np.asarray(groups).ravel().size != e.size:
            problems.append(f"CR1 needs groups: one cluster label per row ({e.size})")
        else:
            codes = pd.factorize(np.asarray(groups).ravel())[0]
            if codes.max() < 1:
                problems.append("CR1 needs at least 2 clusters")
    if maxlags is not None:
        problems += _common._int_problem("maxlags", maxlags, 0)
    if not problems and (not np.all(np.isfinite(J)) or not np.all(np.isfinite(e))):
        problems.append("J and e must be finite")
    _common._raise(problems, "sandwich_cov")
    n, _p = J.shape
    norms = np.linalg.norm(J, axis=0)
    norms[norms == 0] = 1.0
    Js = J / norms
    bread = np.linalg.pinv(Js.T @ Js, rcond=1e-13)
    if kind == "HC3":
        h = _common._leverage(J)
        g = Js * (e / (1.0 - h))[:, None]
    else:
        g = Js * e[:, None]
    meat = g.T @ g
    if kind == "CR1":
        G = int(codes.max()) + 1
        sums = np.zeros((G, g.shape[1]))
        np.add.at(sums, codes, g)
        meat = sums.T @ sums * (G / (G - 1.0)) * ((n - 1.0) / (n - _p))
    if kind == "HAC":
        L = _newey_west_lags(n) if maxlags is None else int(maxlags)
        for lag in range(1, min(L, n - 1) + 1):
            w = 1.0 - lag / (L + 1.0)
            gamma = g[lag:].T @ g[:-lag]
            meat += w * (gamma + gamma.T)
    cov = bread @ meat @ bread
    return cov / np.outer(norms, norms)


def _interval_frame(fit, est, se, lower, upper, method, **attrs) -> pd.DataFrame:
    df = pd.DataFrame({"estimate": est, "stderr": se, "lower": lower, "upper": upper},
                      index=pd.Index(list(fit.param_names), name="parameter"))
    df.attrs.update(method=method, **attrs)
    return df


def covariance_intervals(fit, alpha: float = 0.05, *, cov_type: str = "classical", data=None,
                         y=None, maxlags: int | None = None, groups=None) -> pd.DataFrame:
    """t-based intervals ``theta_j +/- t_{1-alpha/2, dof} se_j`` from a covariance matrix.

    Problem: the cheapest interval for each parameter, exact for a linear
    model with iid normal errors and asymptotically right for a smooth
    non-linear one.  ``cov_type='classical'`` uses the fit's own
    ``s^2 (J^T J)^{-1}`` (:meth:`FitResult.conf_int`); ``'HC0'``, ``'HC3'`` and
    ``'HAC'`` use :func:`sandwich_cov` on the fit's scale (needs the data:
    the fit's own rows when it carries them, else ``data``).  Parameters at a
    bound or not identified get NaN (no interval).

    Parameters
    ----------
    fit : FitResult
    alpha : 1 - confidence level
    cov_type : 'classical', 'HC0', 'HC3', 'HAC' or 'CR1' (cluster-robust; its
        intervals use ``t`` with ``G - 1`` degrees of freedom, ``G`` clusters)
    data, y : the fitted data for the sandwich types (see :func:`bootstrap`)
    maxlags : HAC lag (default Newey-West's ``floor(4 (n/100)^(2/9))``)
    groups : CR1 only: a column name of the trace ``data`` or one cluster
        label per row of ``data`` (of the fit's rows when ``data`` is None)

    Returns
    -------
    DataFrame indexed by parameter with columns estimate, stderr, lower, upper;
    ``attrs['method']``.
    """
    _common._check_fit(fit, "covariance_intervals")
    problems = (_common._alpha_problem(alpha)
                + _common._choice_problem("cov_type", cov_type, _common.COV_TYPES))
    _common._raise(problems, "covariance_intervals")
    q = stats.t.ppf(1 - alpha / 2, max(fit.dof, 1))
    est = np.asarray(fit.values, float)
    if cov_type == "classical":
        ci = fit.conf_int(alpha)
        lo = np.array([ci[n][0] for n in fit.param_names])
        hi = np.array([ci[n][1] for n in fit.param_names])
        return _interval_frame(fit, est, np.asarray(fit.stderr, float), lo, hi,
                               "covariance", cov_type="classical", quantile=float(q))
    feats, yy = _common._fit_data(fit, data, y, "covariance_intervals")
    codes = None
    if cov_type == "CR1":
        if groups is None:
            raise InputError("covariance_intervals: cov_type 'CR1' needs groups")
        codes = _common._fit_groups(fit, data, groups, yy.size, "covariance_intervals")
        q = stats.t.ppf(1 - alpha / 2, int(codes.max()))
    cov = _robust_cov(fit, feats, yy, cov_type, maxlags, codes)
    se = np.sqrt(np.clip(np.diag(cov), 0, None))
    se[~np.isfinite(np.diag(cov))] = np.nan
    return _interval_frame(fit, est, se, est - q * se, est + q * se, "covariance",
                           cov_type=cov_type, quantile=float(q))


def _robust_cov(fit, feats, yy, cov_type, maxlags=None, groups=None) -> np.ndarray:
    model = fit.model
    scale = scale_of(fit)
    mu = model.predict(fit.values, feats)
    J = scale.jacobian(model.jacobian(fit.values, feats), mu, yy)
    e = scale.residual(yy, mu)
    free = _common._free_mask(fit)
    p = len(fit.param_names)
    cov = np.full((p, p), np.nan)
    if free.any():
        cov[np.ix_(free, free)] = sandwich_cov(J[:, free], e, cov_type, maxlags=maxlags,
                                               groups=groups)
    return cov
