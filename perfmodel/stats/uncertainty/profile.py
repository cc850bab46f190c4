"""Profile-likelihood intervals (F or chi-squared threshold, brentq crossings).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import optimize, stats

from perfmodel.core import fit as _fitmod
from perfmodel.core.scale import scale_of
from perfmodel.errors import FitError
from perfmodel.stats.uncertainty._common import (
    _alpha_problem,
    _check_fit,
    _choice_problem,
    _fit_data,
    _free_mask,
    _raise,
    one_blas_thread,
)
from perfmodel.stats.uncertainty.covariance import _interval_frame

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


def _at_estimate(fit, func, fs, target, w, pscale, lo, hi):
    """The estimate in scaled units, its residual sum of squares and residual dof."""
    theta = np.clip(np.asarray(fit.values, float) * pscale, lo, hi)
    r0 = func(theta, fs) - target
    sw = 1.0 if w is None else w
    rss0 = float(np.sum(sw * r0**2))
    dof = int(np.asarray(target).size) - int(np.sum(_free_mask(fit)))
    return theta, rss0, dof


def _pinned_fit(func, jac, fs, target, w, theta, lo, hi, j, c, start):
    """Least squares over every parameter but ``j``, pinned at ``c`` (scaled units), started
    from ``start`` (the free parameters); the fit_curve result."""
    free = np.arange(theta.size) != j

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

    return _fitmod.fit_curve(f, fs, target, start, jac=jf, bounds=(lo[free], hi[free]),
                             weights=w, xtol=1e-10, ftol=1e-10, gtol=1e-10, max_nfev=2000)


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
        near = min(cache, key=lambda k: abs(k - c))  # warm start from the nearest refit
        count[0] += 1
        r = _pinned_fit(func, jac, xdata, target, w, theta, lo, hi, j, c, cache[near])
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
    theta, rss0, dof = _at_estimate(fit, func, fs, target, w, pscale, lo, hi)
    n = yy.size
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


def profile_rise(fit, param: str, values, data=None, *, y=None,
                 alpha: float = 0.05) -> pd.DataFrame:
    """The profile of one parameter on a given grid: how far the fit's objective rises.

    Problem: where a parameter is determined only on one side (a saturation
    rate so large that ``1 - exp(-k_B B)`` is one for every measured ``B``),
    the statement the data support is a bound: values below some level are
    excluded, none above it.  :func:`profile_intervals` finds its crossings by
    stepping out from the estimate and warm-starting each pinned refit from
    the previous one; on such a flat direction the estimate itself moves with
    the BLAS kernel, and so do that path and the local optimum each pinned
    refit reaches.  Here every value of the grid is refitted (all other
    parameters free within their bounds) from the same start, the estimate,
    so that the result at a grid value does not depend on where else the
    profile was evaluated.

    The rise is ``(RSS(c) - RSS_hat) / s^2`` on the fit's scale, with
    ``s^2 = RSS_hat / (n - p_free)`` as in :func:`profile_intervals`; a value
    is excluded at level ``1 - alpha`` when the rise exceeds
    ``F_{1, n-p}(1 - alpha)`` (Bates & Watts 1988, 6.1).  For a linear model
    the rise is ``((c - theta_j)/se_j)^2`` exactly
    (``tests/stats/test_uncertainty.py``).

    Parameters
    ----------
    fit : FitResult (loss 'linear')
    param : the parameter to pin (one of ``fit.param_names``)
    values : finite values within the parameter's bounds, physical units
    data, y : the fitted data (default: the rows the fit carries)
    alpha : 1 - confidence level of the ``excluded`` column

    Returns
    -------
    DataFrame with columns value, rise, threshold (the F quantile),
    excluded (rise > threshold) and params (the pinned refit's parameter
    vector in physical units, in ``fit.param_names`` order, the pinned value
    in its place: a model at that point of the profile, e.g. to see how far a
    decision moves along a direction the data do not determine), one row per
    value in the given order.
    """
    _check_fit(fit, "profile_rise")
    problems = _alpha_problem(alpha)
    if fit.options.get("loss", "linear") != "linear":
        problems.append(f"profile_rise needs the squared loss; the fit used loss "
                        f"{fit.options.get('loss')!r}")
    names = list(fit.param_names)
    if param not in names:
        problems.append(f"param {param!r} is not a parameter of {fit.fitted_model_name!r} {names}")
    vals = np.atleast_1d(np.asarray(values, dtype=float)) if np.ndim(values) <= 1 else None
    if vals is None or vals.size == 0 or not np.all(np.isfinite(vals)):
        problems.append("values must be a non-empty 1-d sequence of finite numbers")
    elif param in names:
        prm = fit.model.params[names.index(param)]
        if np.any(vals < prm.lower) or np.any(vals > prm.upper):
            problems.append(f"values must lie within the bounds of {param} "
                            f"[{prm.lower:g}, {prm.upper:g}]")
    _raise(problems, "profile_rise")
    feats, yy = _fit_data(fit, data, y, "profile_rise")
    func, jac, fs, target, w, pscale, lo, hi = _objective(fit, feats, yy)
    theta, rss0, dof = _at_estimate(fit, func, fs, target, w, pscale, lo, hi)
    j = names.index(param)
    s2 = rss0 / dof
    q = float(stats.f.ppf(1 - alpha, 1, dof))
    free = np.arange(theta.size) != j
    rise, params = [], []
    with one_blas_thread():
        for c in vals:
            r = _pinned_fit(func, jac, fs, target, w, theta, lo, hi, j, c * pscale[j],
                            theta[free].copy())
            t = theta.copy()
            t[free] = r.params
            t[j] = c * pscale[j]
            rise.append((r.rss - rss0) / s2)
            params.append(t / pscale)
    rise = np.asarray(rise, float)
    return pd.DataFrame({"value": vals, "rise": rise, "threshold": q, "excluded": rise > q,
                         "params": params})
