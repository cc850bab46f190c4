"""Bounded non-linear least squares for step-latency models.

Problem
-------
Minimise ``0.5 * sum_i rho(r_i(theta)^2)`` subject to ``lb <= theta <= ub``
where ``r_i`` is a (weighted) residual of the model against measured step
times and ``rho`` a loss (linear, huber, soft_l1, cauchy; Tukey's biweight
by iteratively reweighted least squares).  The generic core,
:func:`fit_curve`, is a thin layer over :func:`scipy.optimize.least_squares`
(trust-region reflective, ``x_scale='jac'``) that adds the covariance and
standard errors; it is verified against the certified values of the 27 NIST
StRD non-linear regression problems (``tests/core/test_nist.py``).
:func:`fit_model` fits a member of :mod:`perfmodel.core.model` to a step trace:
relative-error options, median scaling of the features, the heuristic
initialisation and a seeded multi-start (docs/model.md, Fitting).

References
----------
NIST StRD, Nonlinear Regression, https://www.itl.nist.gov/div898/strd/nls/nls_main.shtml
Branch, Coleman & Li (1999), a subspace, interior and conjugate gradient
method for large-scale bound-constrained minimization (the ``trf`` method).
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from scipy import optimize

from perfmodel._parallel import one_blas_thread
from perfmodel.core.lsq_result import (  # CurveFit re-exported (one place: lsq_result)
    STATUS_MESSAGES,
    CurveFit,
    covariance,
)
from perfmodel.core.lsq_result import at_bound as bound_rule
from perfmodel.core.model import Model, get_model
from perfmodel.core.scale import SCALES, get_scale
from perfmodel.errors import FitError, InputError

__all__ = ["LOSSES", "RELATIVE", "CurveFit", "fit_curve", "fit_model", "trace_fit_data"]

LOSSES = ("linear", "huber", "soft_l1", "cauchy", "tukey")
#: the residual scales (:mod:`perfmodel.core.scale`)
RELATIVE = tuple(SCALES)

def _as_bounds(bounds, p):
    lo, hi = bounds
    lo = np.broadcast_to(np.asarray(lo, float), (p,)).copy()
    hi = np.broadcast_to(np.asarray(hi, float), (p,)).copy()
    if np.any(lo >= hi):
        bad = np.nonzero(lo >= hi)[0].tolist()
        raise InputError(f"bounds: lower >= upper for parameter indices {bad}")
    return lo, hi


def fit_curve(func: Callable, xdata, ydata, p0, *, jac: Callable | None = None,
              bounds=(-np.inf, np.inf), loss: str = "linear", f_scale: float = 1.0,
              weights=None, x_scale="jac", xtol: float = 1e-15, ftol: float = 1e-15,
              gtol: float = 1e-15, max_nfev: int | None = None) -> CurveFit:
    """Fit ``y ~ func(theta, x)`` by bounded non-linear least squares.

    Minimises ``0.5 sum rho((sqrt(w_i) (func(theta, x)_i - y_i))^2)`` over
    ``lb <= theta <= ub`` with :func:`scipy.optimize.least_squares`
    (``method='trf'``, ``x_scale='jac'`` by default).

    Parameters
    ----------
    func : callable ``func(theta, xdata) -> yhat`` of shape (n,)
    xdata : array_like, passed to ``func`` and ``jac`` unchanged
    ydata : array_like (n,)
    p0 : array_like (p,) starting point (clipped into the bounds)
    jac : callable ``jac(theta, xdata) -> (n, p)``, optional (2-point
        finite differences when omitted)
    bounds : (lower, upper) scalars or arrays
    loss : 'linear', 'huber', 'soft_l1' or 'cauchy' (scipy's robust losses)
    f_scale : float, soft margin between inlier and outlier residuals
    weights : array_like (n,), optional, non-negative sample weights
    xtol, ftol, gtol, max_nfev : passed to ``least_squares``

    Returns
    -------
    CurveFit

    Notes
    -----
    Verified against the certified parameters and standard errors of the
    NIST StRD non-linear regression problems (``tests/core/test_nist.py``).

    Examples
    --------
    >>> import numpy as np
    >>> x = np.arange(1.0, 6.0); y = 2.0 * (1 - np.exp(-0.5 * x))
    >>> r = fit_curve(lambda t, x: t[0] * (1 - np.exp(-t[1] * x)), x, y, [1.0, 1.0])
    >>> np.round(r.params, 6).tolist()
    [2.0, 0.5]
    """
    y = np.asarray(ydata, float).ravel()
    p0 = np.asarray(p0, float).ravel()
    n, p = y.size, p0.size
    if n == 0:
        raise InputError("ydata is empty")
    if not np.all(np.isfinite(y)):
        bad = np.nonzero(~np.isfinite(y))[0]
        raise InputError(f"ydata has {bad.size} non-finite values (first rows {bad[:5].tolist()})")
    if not np.all(np.isfinite(p0)):
        raise InputError("p0 has non-finite values")
    if loss not in ("linear", "huber", "soft_l1", "cauchy"):
        raise InputError(f"loss {loss!r} is not one of linear, huber, soft_l1, cauchy")
    if not (np.isfinite(f_scale) and f_scale > 0):
        raise InputError(f"f_scale must be a positive finite number, got {f_scale!r}")
    lo, hi = _as_bounds(bounds, p)
    if weights is None:
        sw = np.ones(n)
    else:
        w = np.asarray(weights, float).ravel()
        if w.shape != (n,):
            raise InputError(f"weights has length {w.size}, ydata has {n}")
        if np.any(~np.isfinite(w)) or np.any(w < 0):
            bad = np.nonzero(~np.isfinite(w) | (w < 0))[0]
            raise InputError(f"weights must be finite and >= 0: {bad.size} bad (rows {bad[:5].tolist()})")
        sw = np.sqrt(w)
    x0 = np.clip(p0, lo, hi)
    # least_squares needs x0 strictly inside finite bounds
    inside = (x0 <= lo) | (x0 >= hi)
    if np.any(inside):
        span = np.where(np.isfinite(hi - lo), hi - lo, 1.0)
        x0 = np.where(x0 <= lo, lo + 1e-10 * span + 1e-300, x0)
        x0 = np.where(x0 >= hi, hi - 1e-10 * span, x0)

    def resid(t):
        return sw * (func(t, xdata) - y)

    jfun = "2-point" if jac is None else (lambda t: sw[:, None] * jac(t, xdata))
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        res = optimize.least_squares(resid, x0, jac=jfun, bounds=(lo, hi), method="trf",
                                     loss=loss, f_scale=f_scale, x_scale=x_scale, xtol=xtol,
                                     ftol=ftol, gtol=gtol, max_nfev=max_nfev)
    r = res.fun
    if not np.all(np.isfinite(r)):
        raise FitError("the model gave non-finite residuals at the optimum")
    rss = float(r @ r)
    # least_squares returns the Jacobian at the solution; with a robust loss it is
    # rescaled by rho', so the plain one is recomputed only then
    J = res.jac if (jac is None or loss == "linear") else sw[:, None] * jac(res.x, xdata)
    yfit = func(res.x, xdata)
    # at a bound: closer to it than a share of its standard error (lsq_result.at_bound), not
    # scipy's active_mask, which moved with the BLAS kernel
    at_bound = bound_rule(res.x, lo, hi, J, rss, n)
    dof = n - int(np.sum(~at_bound))
    cov, unident = covariance(J, rss, dof, free=~at_bound, theta=res.x)
    stderr = np.sqrt(np.diag(cov))
    return CurveFit(params=res.x, stderr=stderr, cov=cov, rss=rss, residuals=y - yfit,
                    n=n, dof=dof, nfev=int(res.nfev), status=int(res.status),
                    message=STATUS_MESSAGES.get(int(res.status), str(res.message)),
                    success=bool(res.success), jac=J, cost=float(res.cost), at_bound=at_bound,
                    unidentified=unident)


# ---------------------------------------------------------------------------
# fitting a latency model to a trace
# ---------------------------------------------------------------------------

def _tukey_weights(r, c):
    u = r / c
    w = (1 - u**2) ** 2
    w[np.abs(u) >= 1] = 0.0
    return w


def _mad_scale(r):
    s = 1.4826 * np.median(np.abs(r - np.median(r)))
    return s if s > 0 else max(np.std(r), 1e-12)


def _as_float_array(name: str, v) -> np.ndarray:
    """``v`` as a 1-D float array, or InputError naming ``name`` (strings, complex, dates)."""
    a = np.asarray(v)
    if a.dtype.kind not in "biuf" or a.dtype.kind == "b":
        raise InputError(f"{name} must be numeric, got values of type {a.dtype}")
    return a.astype(float, copy=False).ravel()  # float64 arrays are used as they are


def _check_feature_values(feats: dict) -> None:
    """Finite, non-negative feature values (counts, tokens, context sums)."""
    from perfmodel._checks import rows_text

    for k, v in feats.items():
        bad = ~np.isfinite(v)
        if bad.any():
            raise InputError(f"feature {k!r} has non-finite values (NaN or inf) at {rows_text(bad)}")
        if (neg := v < 0).any():
            raise InputError(f"feature {k!r} has negative values at {rows_text(neg)}")


def trace_fit_data(df, model) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The features a fit of ``model`` reads and the step times of a validated trace.

    Problem: :func:`fit_model` on a trace fits these two (its feature-dict
    form, ``fit_model(feats, model, y=y)``, gives the same fit bit for bit:
    ``tests/core/test_fit.py``).  Computed once, they let a caller free a
    large frame before the fit, or refit row subsets without copying rows
    (:func:`perfmodel.stats.intervals.cv_residuals`).  Only the features the
    model (as fitted, e.g. ``seed_id`` for ``seed``) requires are computed.

    Parameters
    ----------
    df : pandas.DataFrame
        A trace already through :func:`perfmodel.data.trace.validate_trace`
        (``read_trace`` does it), with ``duration_ms``.
    model : str or Model

    Returns
    -------
    (dict of str -> float64 array, float64 array of ``duration_ms``)
    """
    import pandas as pd

    from perfmodel.data.trace import step_features

    m = get_model(model)
    if m.fitted_as:
        m = get_model(m.fitted_as)
    if not isinstance(df, pd.DataFrame) or "duration_ms" not in df.columns:
        raise InputError("trace_fit_data needs a validated step trace DataFrame with "
                         "duration_ms")
    return (step_features(df, keys=m.requires),
            df["duration_ms"].to_numpy(float))


def _prepare(data, y, model: Model, outlier_window, allow_degenerate: bool = False):
    """Features dict, y, and the dropped-row note, from a DataFrame or dict."""
    if isinstance(data, dict):
        feats = {k: _as_float_array(f"feature {k!r}", v) for k, v in data.items()}
        if y is None:
            raise InputError("y is required when data is a feature dict")
        y = _as_float_array("y", y)
        sha = None
    else:
        import pandas as pd

        from perfmodel.data.trace import validate_trace

        if not isinstance(data, pd.DataFrame):
            raise InputError(f"data must be a step trace DataFrame or a feature dict, got {type(data).__name__}")
        df = validate_trace(data, allow_degenerate=allow_degenerate)
        feats, y_df = trace_fit_data(df, model)
        y = y_df if y is None else _as_float_array("y", y)
        sha = df.attrs.get("sha256")
        del df, y_df
    feats = model.check_features(feats)
    _check_feature_values(feats)
    n = len(next(iter(feats.values())))
    if y.shape != (n,):
        raise InputError(f"y has {y.size} values but the features have {n} rows")
    bad = ~np.isfinite(y) | (y <= 0)
    if np.any(bad):
        rows = np.nonzero(bad)[0]
        raise InputError(f"duration_ms must be finite and > 0: {rows.size} bad rows (first {rows[:5].tolist()})")
    dropped = None
    keep = np.ones(n, bool)
    if outlier_window is not None:
        lo, hi = outlier_window
        keep = (y >= lo) & (y <= hi)
        rows = np.nonzero(~keep)[0]
        dropped = {"window_ms": [float(lo), float(hi)], "n_dropped": int(rows.size),
                   "rows": rows[:50].tolist()}
        if keep.sum() == 0:
            raise InputError(f"outlier_window {outlier_window} drops all {n} steps")
    return feats, y, keep, dropped, sha


#: above this many fitted steps :func:`fit_model` takes the large-trace path (bounded memory)
LARGE_ROWS = 500_000
#: rows of the seeded subsample a large trace is first polished on
POLISH_ROWS = 200_000

#: most restarts of the trust-region solver from its own solution (see _restart_until_stalled)
MAX_RESTARTS = 20


def _restart_until_stalled(refit: Callable[[np.ndarray], CurveFit], r: CurveFit,
                           max_restarts: int = MAX_RESTARTS, rtol: float = 1e-12) -> CurveFit:
    """Restart ``refit`` from the current solution until the cost stops falling.

    scipy's ``trf`` stops on ``ftol``/``xtol`` when its trust region has shrunk along a
    flat or bound-constrained direction, before the cost is minimal: on the H200 trace
    ``seed_id`` stopped after 9 evaluations at cost 419.66 (SkylakeX OpenBLAS kernel) or
    419.60 (Haswell kernel), predictions 0.5 % apart.  A restart resets the trust region;
    two restarts reach 419.599594 under both kernels, predictions equal to 6 digits.
    Keeps the best fit; stops when a restart lowers the cost by <= ``rtol`` (relative).
    """
    for _ in range(max_restarts):
        try:
            r2 = refit(r.params)
        except FitError:
            return r
        improved = r2.cost < r.cost
        if improved:
            gain = r.cost - r2.cost
            r = r2
        if not improved or gain <= rtol * abs(r.cost):
            return r
    return r


def _check_fit_arguments(*, f_scale, weights, seed, outlier_window, x0, max_nfev, tukey_c,
                         max_irls, multistart_subsample, tol, x_scale, scale,
                         allow_degenerate, large_rows=None):
    """Every scalar option of :func:`fit_model`; returns the outlier window as floats (or None)."""
    from perfmodel._checks import check_int_range, check_number, check_positive

    if f_scale is not None:
        check_positive("f_scale", f_scale)
    if weights is not None:
        w = _as_float_array("weights", weights)
        if (~np.isfinite(w) | (w < 0)).any():
            raise InputError("weights must be finite and >= 0")
        if not (w > 0).any():
            raise InputError("weights are all zero: no step would be fitted")
    if seed is not None and not isinstance(seed, (np.random.SeedSequence, np.random.Generator)):
        check_int_range("seed", seed, 0)
    window = None
    if outlier_window is not None:
        if isinstance(outlier_window, (str, bytes)) or not hasattr(outlier_window, "__len__") \
                or len(outlier_window) != 2:
            raise InputError(f"outlier_window must be (low_ms, high_ms), got {outlier_window!r}")
        lo = check_number("outlier_window[0] (low_ms)", outlier_window[0], lo=0)
        hi = check_number("outlier_window[1] (high_ms)", outlier_window[1], lo=lo, lo_open=True)
        window = (lo, hi)
    if max_nfev is not None:
        check_int_range("max_nfev", max_nfev, 1)
    check_positive("tukey_c", tukey_c)
    check_int_range("max_irls", max_irls, 1)
    if multistart_subsample is not None:
        check_int_range("multistart_subsample", multistart_subsample, 2)
    if large_rows is not None:
        check_int_range("large_rows", large_rows, 1)
    check_number("tol", tol, lo=float(np.finfo(float).eps), hi=1.0, lo_open=True, hi_open=True)
    if not (isinstance(x_scale, str) and x_scale == "jac"):
        xs = _as_float_array("x_scale", x_scale) if not isinstance(x_scale, str) else None
        if xs is None or not np.all(np.isfinite(xs) & (xs > 0)):
            raise InputError(f"x_scale must be 'jac' or positive finite numbers, got {x_scale!r}")
    for name, v in (("scale", scale), ("allow_degenerate", allow_degenerate)):
        if not isinstance(v, (bool, np.bool_)):
            raise InputError(f"{name} must be True or False, got {v!r}")
    if x0 is not None and isinstance(x0, (str, bytes)):
        raise InputError(f"x0 must be parameter values, got {x0!r}")
    return window


def _check_spread(feats, keep, allow_degenerate: bool) -> None:
    """Refuse fitted steps that all share one (B, S): nothing separates overhead from work."""
    if allow_degenerate or "B" not in feats or "S" not in feats:
        return
    B, S = feats["B"][keep], feats["S"][keep]
    if B.size > 1 and np.ptp(B) == 0 and np.ptp(S) == 0:
        raise InputError(f"every fitted step has the single (B, S) = ({B[0]:g}, {S[0]:g}): "
                         "no parameter can be identified; pass allow_degenerate=True "
                         "(--allow-degenerate) to fit it anyway")


def _check_options(model, loss, relative, n_starts) -> tuple[Model, Model]:
    """The model as named and the member it is fitted as; the option checks."""
    m = get_model(model)
    native = m
    if m.fitted_as:
        m = get_model(m.fitted_as)
    if loss not in LOSSES:
        raise InputError(f"loss {loss!r} is not one of {list(LOSSES)}")
    get_scale(relative)
    if not isinstance(n_starts, (int, np.integer)) or n_starts < 1:
        raise InputError(f"n_starts must be an integer >= 1, got {n_starts!r}")
    return native, m


def _kept_rows(m: Model, feats_all, y_all, keep, weights):
    """Features, step times and weights of the steps inside the outlier window."""
    every = bool(keep.all())  # nothing dropped: no copy of the (possibly huge) columns
    feats = feats_all if every else {k: v[keep] for k, v in feats_all.items()}
    yk = y_all if every else y_all[keep]
    if weights is not None:
        w_all = np.asarray(weights, float).ravel()
        if w_all.shape != y_all.shape:
            raise InputError(f"weights has length {w_all.size}, the trace has {y_all.size} steps")
        wk = w_all if every else w_all[keep]
    else:
        wk = None
    n, p = yk.size, m.n_params
    if n <= p:
        raise InputError(f"model {m.name!r} has {p} parameters but only {n} steps to fit")
    return feats, yk, wk


@dataclass(frozen=True)
class _Problem:
    """One scaled least-squares problem: what every solve of a fit shares."""

    func: Callable
    jac: Callable
    x: dict
    y: np.ndarray
    weights: np.ndarray | None
    bounds: tuple
    tol: float
    max_nfev: int | None
    x_scale: object

    def solve(self, start, *, loss: str = "linear", f_scale: float = 1.0) -> CurveFit:
        return fit_curve(self.func, self.x, self.y, start, jac=self.jac, bounds=self.bounds,
                         loss=loss, f_scale=f_scale, weights=self.weights, xtol=self.tol,
                         ftol=self.tol, gtol=self.tol, max_nfev=self.max_nfev,
                         x_scale=self.x_scale)

    def subset(self, rows) -> _Problem:
        return replace(self, x={k: v[rows] for k, v in self.x.items()}, y=self.y[rows],
                       weights=None if self.weights is None else self.weights[rows])


@dataclass(frozen=True)
class _BlockedProblem(_Problem):
    """The same problem solved in blocks (:func:`perfmodel.core.fit_blocked.blocked_solve`)."""

    def solve(self, start, *, loss: str = "linear", f_scale: float = 1.0) -> CurveFit:
        from perfmodel.core.fit_blocked import blocked_solve

        return blocked_solve(self, start, loss=loss, f_scale=f_scale)

    def subset(self, rows) -> _Problem:
        """The rows ``rows`` as an ordinary (in-memory) problem."""
        return _Problem.subset(_as(self, _Problem), rows)


def _as(prob: _Problem, kind: type) -> _Problem:
    return kind(**{k: getattr(prob, k) for k in _Problem.__dataclass_fields__})


def _scaled_problem(m: Model, feats, yk, wk, *, relative, scale, tol, max_nfev, x_scale,
                    only_required: bool = False):
    """Median scaling of the features -> (medians, scale factor per parameter, problem).

    ``only_required``: scaled copies of the model's own features only (the
    large-trace path: the others would be full-length copies nobody reads).
    """
    med = {k: (float(np.median(v[v > 0])) if np.any(v > 0) else 1.0) if scale else 1.0
           for k, v in feats.items()}
    fs = {k: v / med[k] for k, v in feats.items()
          if not only_required or k in m.requires}
    pscale = np.array([np.prod([med[k] ** pw for k, pw in prm.scales_with.items()]) or 1.0
                       for prm in m.params])
    fscale = get_scale(relative)
    func, jac = fscale.regression(m._predict, m._jacobian)
    prob = _Problem(func=func, jac=jac, x=fs, y=fscale.target(yk), weights=fscale.weights(yk, wk),
                    bounds=(m.lower * pscale, m.upper * pscale), tol=tol, max_nfev=max_nfev,
                    x_scale=x_scale)
    return med, pscale, prob


def _start_points(m: Model, feats, yk, x0, n_starts, rng) -> list[np.ndarray]:
    """Starting points in physical units: x0, the heuristic, the guess, perturbations."""
    p = m.n_params
    starts = []
    if x0 is not None:
        starts.append(m.clip(m.check_theta(x0)))
    if hasattr(m, "seed_heuristic"):
        starts.append(m.seed_heuristic(feats, yk))
    starts.append(m.initial_guess(feats, yk))
    guess = m.initial_guess(feats, yk)
    while len(starts) < n_starts:
        pert = guess * np.exp(rng.uniform(-np.log(10), np.log(10), p))
        pert = np.where(guess == 0, rng.uniform(0, 1e-3, p), pert)
        starts.append(m.clip(pert))
    return starts[:n_starts]


def _robust_scale(prob: _Problem, loss, f_scale, pilot_start) -> float:
    """The robust loss's scale: ``f_scale``, or 1.345 x MAD of a linear pilot fit."""
    fsc = 1.0
    if loss in ("huber", "soft_l1", "cauchy", "tukey") and f_scale is None:
        pilot = prob.solve(pilot_start)
        w = prob.weights
        fsc = 1.345 * _mad_scale(pilot.residuals * (np.sqrt(w) if w is not None else 1))
    elif f_scale is not None:
        if not (np.isfinite(f_scale) and f_scale > 0):
            raise InputError(f"f_scale must be positive, got {f_scale!r}")
        fsc = float(f_scale)
    return fsc


def race_starts(solve: Callable[[np.ndarray], CurveFit], starts, name: str):
    """Solve from every start and keep the lowest cost (the multi-start race).

    ``solve(start)`` returns a :class:`CurveFit` or raises :class:`FitError`
    (that start is skipped).  Returns ``(best fit, its start, number of
    starts whose solver reported success)``; raises :class:`FitError` naming
    model ``name`` when every start failed.  Shared by :func:`fit_model` and
    :func:`perfmodel.stats.calibrate.calibrate_from_requests`.
    """
    best = None
    n_ok = 0
    for s0 in starts:
        try:
            r = solve(s0)
        except FitError:
            continue
        n_ok += r.success
        if best is None or r.cost < best[0].cost:
            best = (r, s0)
    if best is None:
        raise FitError(f"all {len(starts)} starts of model {name!r} failed")
    r, s0 = best
    return r, s0, n_ok


def _multistart(prob: _Problem, starts, pscale, *, loss, f_scale, subsample, rng, name):
    """The race of the starts, then the winner polished on all steps with restarts."""
    # Multi-start: on large traces the starts race on a seeded subsample of
    # `multistart_subsample` steps and only the winner is polished on all data
    # (the basin is found on the subsample; the optimum is the full data's).
    n = prob.y.size
    sub = None
    if len(starts) > 1 and subsample and n > subsample:
        sub = np.sort(rng.choice(n, subsample, replace=False))
    race = prob if sub is None else prob.subset(sub)
    # with several starts each race is capped (it only has to find the basin); the
    # winner is then polished without the cap
    max_nfev = prob.max_nfev
    race = replace(race, max_nfev=max_nfev if len(starts) == 1 else min(max_nfev or 300, 300))
    r, s0, n_ok = race_starts(lambda s: race.solve(s * pscale, loss=loss, f_scale=f_scale),
                              starts, name)
    if sub is not None or (len(starts) > 1 and r.status == 0):
        r = prob.solve(r.params, loss=loss, f_scale=f_scale)
    r = _restart_until_stalled(lambda start: prob.solve(start, loss=loss, f_scale=f_scale), r)
    return r, s0, n_ok


def _fit_large(prob: _Problem, sub, starts, pscale, m: Model, *, loss, f_scale, subsample,
               rng):
    """The large-trace path of :func:`fit_model` (its ``large_rows``).

    The robust scale, the race of the starts and the polish with restarts run
    on the seeded subsample ``sub`` (:data:`POLISH_ROWS` steps, where the starts
    were computed); the winner is then solved on all steps in blocks.  Returns
    ``(blocked problem, fit, start, converged starts, robust scale)``.
    """
    small = prob.subset(sub)
    fsc = _robust_scale(small, loss, f_scale, m.clip(starts[0]) * pscale)
    race_loss = "linear" if loss == "tukey" else loss
    r, s0, n_ok = _multistart(small, starts, pscale, loss=race_loss, f_scale=fsc,
                              subsample=subsample, rng=rng, name=m.name)
    big = _as(prob, _BlockedProblem)
    return big, big.solve(r.params, loss=race_loss, f_scale=fsc), s0, n_ok, fsc


def _irls_tukey(prob: _Problem, r: CurveFit, c: float, max_irls: int):
    """Tukey's biweight by IRLS from fit ``r`` -> (fit, weights, scale, iterations)."""
    base_w = prob.weights
    irls_iter = 0
    w_final = base_w
    th = r.params
    for irls_iter in range(1, max_irls + 1):
        res = prob.func(th, prob.x) - prob.y
        rw = res * (np.sqrt(base_w) if base_w is not None else 1.0)
        sc = _mad_scale(rw)
        tw = _tukey_weights(rw, c * sc)
        w_final = tw * (base_w if base_w is not None else 1.0)
        r = replace(prob, weights=w_final).solve(th)
        if np.allclose(r.params, th, rtol=1e-8, atol=0):
            th = r.params
            break
        th = r.params
    return r, w_final, float(c * sc), irls_iter


def fit_model(data, model="seed_id", *, y=None, loss: str = "linear", relative: str = "log",
              f_scale: float | None = None, weights=None, n_starts: int = 8, seed: int = 0,
              scale: bool = True, outlier_window=None, x0=None, max_nfev: int | None = 2000,
              tukey_c: float = 4.685, max_irls: int = 30,
              multistart_subsample: int | None = 5000, tol: float = 1e-8,
              x_scale="jac", allow_degenerate: bool = False,
              large_rows: int | None = LARGE_ROWS):
    """Fit a latency model to a step trace.

    Problem: minimise ``0.5 sum rho(r_i^2)`` with ``r_i = log T_hat_i - log T_i``
    (``relative='log'``, default), ``(T_hat_i - T_i)/T_i`` (``'weight'``) or
    ``T_hat_i - T_i`` (``'absolute'``), all parameters within their bounds.
    The residual, its inverse and its Jacobian on each scale are defined once,
    in :mod:`perfmodel.core.scale`; this fit is what defines them.

    Parameters
    ----------
    data : DataFrame in the step-trace schema, or a dict of feature arrays
        (then ``y`` is required)
    model : str or Model; ``'seed'`` is fitted through ``'seed_id'``
    loss : 'linear', 'huber', 'soft_l1', 'cauchy' or 'tukey' (biweight, IRLS)
    relative : 'log', 'weight' or 'absolute'.  On real traces the absolute
        loss lets the long prefill steps dominate (docs/model.md, Fit scales).
    f_scale : robust-loss scale; default 1.345 x MAD of a linear fit's
        residuals (Huber's 95%-efficiency tuning)
    weights : optional sample weights (multiply the squared residuals)
    n_starts : multi-start count; start 0 is the heuristic start
        (docs/model.md, Initialisation), start 1 a data-driven guess, the rest random
        log-uniform perturbations of it (seeded by ``seed``); the best
        optimum is kept
    scale : divide each feature by its median before fitting (parameters
        are reported in physical units)
    outlier_window : (low_ms, high_ms) or None; drop steps outside it (e.g.
        (1, 300)); off by default and reported when on
    tol : xtol = ftol = gtol of each least-squares solve (default 1e-8: the
        relative change at which a step-time fit is converged; the NIST
        verification of :func:`fit_curve` uses 1e-15)
    multistart_subsample : int or None; above this many steps the starts
        are compared on a seeded subsample of this size and the best one is
        then refined on all steps (None: every start on all steps)
    allow_degenerate : fit a degenerate trace (identical rows, sub-microsecond
        durations, a single (B, S)) instead of refusing it
    large_rows : int or None; above this many fitted steps (default
        :data:`LARGE_ROWS`) the large-trace path is taken: the start points,
        the robust scale's pilot fit, the race of the starts and the polish of
        the winner use a seeded subsample of :data:`POLISH_ROWS` steps, then
        the optimum on all steps
        is found by :func:`perfmodel.core.fit_blocked.blocked_solve`, which
        never holds the ``n x p`` Jacobian (memory: the features and a few
        ``n``-vectors).  It reaches the same optimum as the ordinary path
        within the optimiser tolerance (``tests/core/test_fit_blocked.py``).
        None: always the ordinary path.

    Every argument is checked first: a bad one raises
    :class:`~perfmodel.errors.InputError` naming it.

    Returns
    -------
    perfmodel.core.results.FitResult
    """
    from perfmodel.core.results import FitData, FitEstimate, FitOptions, FitResult

    native, m = _check_options(model, loss, relative, n_starts)
    window = _check_fit_arguments(
        f_scale=f_scale, weights=weights, seed=seed, outlier_window=outlier_window, x0=x0,
        max_nfev=max_nfev, tukey_c=tukey_c, max_irls=max_irls,
        multistart_subsample=multistart_subsample, tol=tol, x_scale=x_scale, scale=scale,
        allow_degenerate=allow_degenerate, large_rows=large_rows)
    feats_all, y_all, keep, dropped, sha = _prepare(data, y, m, window, allow_degenerate)
    _check_spread(feats_all, keep, allow_degenerate)
    feats, yk, wk = _kept_rows(m, feats_all, y_all, keep, weights)
    large = large_rows is not None and yk.size > large_rows
    med, pscale, prob = _scaled_problem(m, feats, yk, wk, relative=relative, scale=scale,
                                        tol=tol, max_nfev=max_nfev, x_scale=x_scale,
                                        only_required=large)
    rng = np.random.default_rng(seed)
    if large:  # the start points come from the polish subsample too
        sub = np.sort(rng.choice(yk.size, min(POLISH_ROWS, yk.size), replace=False))
        starts = _start_points(m, {k: v[sub] for k, v in feats.items()}, yk[sub], x0,
                               n_starts, rng)
    else:
        starts = _start_points(m, feats, yk, x0, n_starts, rng)
    race_loss = "linear" if loss == "tukey" else loss
    # the large path's solves are small (p x p factors, subsamples): one BLAS thread, as
    # in perfmodel._parallel (spinning BLAS threads made this path 5x slower under load)
    with one_blas_thread() if large else contextlib.nullcontext():
        if large:
            prob, r, s0, n_ok, fsc = _fit_large(prob, sub, starts, pscale, m, loss=loss,
                                                f_scale=f_scale, subsample=multistart_subsample,
                                                rng=rng)
        else:
            fsc = _robust_scale(prob, loss, f_scale, m.clip(starts[0]) * pscale)
            r, s0, n_ok = _multistart(prob, starts, pscale, loss=race_loss, f_scale=fsc,
                                      subsample=multistart_subsample, rng=rng, name=m.name)
        irls_iter, w_final = 0, prob.weights
        if loss == "tukey":
            r, w_final, fsc, irls_iter = _irls_tukey(prob, r, tukey_c, max_irls)
    del prob, feats  # the scaled copies of the features: not held while predicting below

    theta = r.params / pscale
    cov = r.cov / np.outer(pscale, pscale)  # elementwise: NaN rows stay local
    pred = m._predict(theta, feats_all)
    return FitResult.build(
        model=native, fitted=m,
        estimate=FitEstimate(theta=theta, cov=cov, at_bound=r.at_bound,
                             unidentified=r.unidentified, init=s0, curve=r),
        data=FitData(y=y_all, yhat=pred, keep=keep, feats=feats_all, medians=med,
                     dropped=dropped, trace_sha256=sha),
        options=FitOptions(loss=loss, relative=relative, f_scale=fsc, n_starts=len(starts),
                           n_converged=int(n_ok), seed=seed, scale=scale,
                           outlier_window=outlier_window, irls_iterations=irls_iter,
                           weighted=w_final is not None),
    )
