"""Least squares on fleet-size traces in bounded memory: blocked Gauss-Newton.

Problem
-------
:func:`perfmodel.core.fit.fit_curve` hands :func:`scipy.optimize.least_squares`
the whole ``n x p`` Jacobian; ``trf`` keeps several copies of it and takes its
SVD at every iteration, and the covariance takes another.  For 5,000,000 steps
and 9 parameters one copy is 360 MB, and the fit needed ~3 GB.  Here the same
bounded problem, ``min 0.5 sum rho((sqrt(w_i) r_i(theta))^2)``, is solved
without ever holding the Jacobian: every pass over the data evaluates the
residuals and the Jacobian in blocks of :data:`BLOCK_ROWS` rows and folds
each block ``[sqrt(w) J | sqrt(w) r]`` into the ``(p+1) x (p+1)`` triangular
factor of a QR decomposition (TSQR: ``R <- qr([R; block])``).  That factor
holds all the least-squares information of the data at that point:

* the Gauss-Newton step solves ``R_J d = -q`` (``[R_J q]`` the factor's rows);
* ``R_J`` has the singular values, right singular vectors and column norms
  of ``J`` itself (they are invariant under the orthogonal ``Q``), so
  :func:`perfmodel.core.fit.covariance` applied to ``R_J`` gives exactly
  the covariance it gives for ``J`` (``s^2 (J^T J)^{-1}``, same rank and
  identification rules), without squaring the condition number as forming
  ``J^T J`` would.

The solver is Levenberg-Marquardt with Marquardt's column scaling (the
scaling of ``x_scale='jac'``), a projected step for the bounds (a parameter
at a bound whose step points outwards is held there) and scipy's stopping
rules (``ftol``: relative cost decrease; ``xtol``: relative step; ``gtol``:
scaled projected gradient).  Robust losses (huber, soft_l1, cauchy) are
solved by iteratively reweighted Gauss-Newton with weights ``rho'(z_i)``:
the weighted normal equations have the robust cost's gradient, so its fixed
point is the same stationary point ``least_squares`` finds.

``prob`` is a scaled problem of :mod:`perfmodel.core.fit` (``func``, ``jac``,
``x``, ``y``, ``weights``, ``bounds``, ``tol``, ``max_nfev``).  It starts near the optimum (:func:`perfmodel.core.fit.fit_model` polishes on a
seeded subsample first) and memory is the features, a few ``n``-vectors and
one block.  Verified against ``fit_curve`` on the same problems (same
parameters within the optimiser tolerance, same covariance) in
``tests/core/test_fit_blocked.py``.
"""
from __future__ import annotations

import numpy as np

from perfmodel.core.lsq_result import STATUS_MESSAGES, CurveFit, covariance
from perfmodel.core.lsq_result import at_bound as bound_rule
from perfmodel.errors import FitError

__all__ = ["BLOCK_ROWS", "blocked_solve"]

#: rows per block of a pass (one block's Jacobian is BLOCK_ROWS x p float64: 19 MB at p = 9)
BLOCK_ROWS = 262_144
#: Gauss-Newton/Levenberg-Marquardt iterations per solve, at most (passes are counted in nfev)
MAX_ITER = 100


def _rho(loss: str, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """scipy's robust losses: ``(rho(z), rho'(z))`` for ``z = (r / f_scale)^2``."""
    if loss == "linear":
        return z, np.ones_like(z)
    if loss == "huber":
        small = z <= 1
        sq = np.sqrt(np.where(small, 1.0, z))
        return np.where(small, z, 2 * sq - 1), np.where(small, 1.0, 1.0 / sq)
    if loss == "soft_l1":
        t = np.sqrt(1 + z)
        return 2 * (t - 1), 1.0 / t
    if loss == "cauchy":
        return np.log1p(z), 1.0 / (1 + z)
    raise FitError(f"loss {loss!r} has no blocked solver")  # pragma: no cover - checked before


def _blocks(n: int):
    for s in range(0, n, BLOCK_ROWS):
        yield slice(s, min(s + BLOCK_ROWS, n))


def _block(prob, sl: slice):
    x = {k: v[sl] for k, v in prob.x.items()}
    sw = None if prob.weights is None else np.sqrt(prob.weights[sl])
    return x, sw


def _cost(prob, theta, loss: str, f2: float) -> float:
    """The robust cost ``0.5 f^2 sum rho(r^2 / f^2)`` in one pass (inf if not finite)."""
    total = 0.0
    for sl in _blocks(prob.y.size):
        x, sw = _block(prob, sl)
        r = prob.func(theta, x) - prob.y[sl]
        if sw is not None:
            r = r * sw
        total += float(np.sum(_rho(loss, r * r / f2)[0]))
    cost = 0.5 * f2 * total
    return cost if np.isfinite(cost) else np.inf


def _factor(prob, theta, loss: str, f2: float, robust: bool):
    """One pass: the triangular factor of ``[sqrt(omega) J | sqrt(omega) r]`` and the cost.

    ``omega = rho'(r^2/f^2)`` when ``robust`` (the reweighted Gauss-Newton
    system), else 1 (the plain system the covariance is taken from).
    """
    p = theta.size
    R = np.zeros((0, p + 1))
    total = 0.0
    for sl in _blocks(prob.y.size):
        x, sw = _block(prob, sl)
        r = prob.func(theta, x) - prob.y[sl]
        J = prob.jac(theta, x)
        if sw is not None:
            r = r * sw
            J = J * sw[:, None]
        rho, drho = _rho(loss, r * r / f2)
        total += float(np.sum(rho))
        if robust:
            s = np.sqrt(drho)
            r = r * s
            J = J * s[:, None]
        R = np.linalg.qr(np.vstack([R, np.column_stack([J, r])]), mode="r")
        if R.shape[0] > p + 1:
            R = R[: p + 1]
    cost = 0.5 * f2 * total
    if not (np.all(np.isfinite(R)) and np.isfinite(cost)):
        raise FitError("the model gave non-finite residuals or Jacobian")
    if R.shape[0] < p + 1:
        R = np.vstack([R, np.zeros((p + 1 - R.shape[0], p + 1))])
    return R[:p, :p], R[:p, p], cost


def _lm_step(RJ, q, lam, dscale, free):
    """Levenberg-Marquardt step on the free parameters: min |R d + q|^2 + lam |D d|^2."""
    d = np.zeros(RJ.shape[1])
    idx = np.nonzero(free)[0]
    if idx.size == 0:
        return d
    A = RJ[:, idx]
    if lam > 0:
        A = np.vstack([A, np.sqrt(lam) * np.diag(dscale[idx])])
        b = np.concatenate([-q, np.zeros(idx.size)])
    else:
        b = -q
    d[idx] = np.linalg.lstsq(A, b, rcond=None)[0]
    return d


def _held(theta, lo, hi, direction):
    """Parameters on a bound whose ``direction`` points out of the box."""
    return ((theta <= lo) & (direction < 0)) | ((theta >= hi) & (direction > 0))


def _iterate(prob, x, lo, hi, *, loss, f2, robust, tol, max_iter):
    """LM iterations from ``x`` -> (x, cost, status, passes)."""
    RJ, q, cost = _factor(prob, x, loss, f2, robust)
    nfev, lam = 1, 0.0
    while nfev < max_iter:
        grad = RJ.T @ q
        dscale = np.maximum(np.linalg.norm(RJ, axis=0), np.finfo(float).tiny)
        free = ~_held(x, lo, hi, -grad)
        # gtol: every free column's cosine with the residual vector is below tol
        if not np.any(free) or np.max(np.abs(grad[free]) / dscale[free]) <= tol * np.sqrt(
                max(2 * cost, np.finfo(float).tiny)):
            return x, cost, 1, nfev
        while True:
            d = _lm_step(RJ, q, lam, dscale, free)
            xn = np.clip(x + d, lo, hi)
            cn = _cost(prob, xn, loss, f2)
            nfev += 1
            if cn < cost:
                break
            lam = max(lam * 10.0, 1e-3)
            if lam > 1e12 or nfev >= max_iter:  # no decrease along any damped step
                return x, cost, 2, nfev
        gain, step = cost - cn, xn - x
        x, cost = xn, cn
        lam = lam / 10.0 if lam > 1e-9 else 0.0
        if gain <= tol * cost:
            return x, cost, 2, nfev
        if np.linalg.norm(step * dscale) <= tol * (tol + np.linalg.norm(x * dscale)):
            return x, cost, 3, nfev
        RJ, q, cost = _factor(prob, x, loss, f2, robust)
        nfev += 1
    return x, cost, 0, nfev


def blocked_solve(prob, start, *, loss: str = "linear",
                  f_scale: float = 1.0) -> CurveFit:
    """Solve ``prob`` from ``start`` in blocks; a :class:`CurveFit` like ``fit_curve``'s.

    ``jac`` of the result is the ``p x p`` factor ``R_J`` (``R_J^T R_J = J^T J``),
    not the ``n x p`` Jacobian.  ``status`` follows scipy's codes
    (1 gtol, 2 ftol, 3 xtol, 0 iteration limit).
    """
    lo, hi = (np.asarray(b, float) for b in prob.bounds)
    x = np.clip(np.asarray(start, float), lo, hi)
    f2 = float(f_scale) ** 2
    robust = loss != "linear"
    x, cost, status, nfev = _iterate(prob, x, lo, hi, loss=loss, f2=f2, robust=robust,
                                     tol=prob.tol,
                                     max_iter=min(prob.max_nfev or MAX_ITER, MAX_ITER))
    # the covariance (as fit_curve's) is taken from the plain, unweighted-by-rho system
    RJ, _q, _ = _factor(prob, x, "linear", 1.0, False)
    rss = float(2 * _cost(prob, x, "linear", 1.0))
    n = prob.y.size
    # the rule of fit_curve (one place: lsq_result.at_bound)
    at_bound = bound_rule(x, lo, hi, RJ, rss, n)
    dof = n - int(np.sum(~at_bound))
    cov, unident = covariance(RJ, rss, dof, free=~at_bound, theta=x)
    resid = np.empty(n)
    for sl in _blocks(n):
        resid[sl] = prob.y[sl] - prob.func(x, _block(prob, sl)[0])
    return CurveFit(params=x, stderr=np.sqrt(np.diag(cov)), cov=cov, rss=rss, residuals=resid,
                    n=n, dof=dof, nfev=nfev, status=status,
                    message=STATUS_MESSAGES.get(status, "stopped"), success=status > 0,
                    jac=RJ, cost=float(cost), at_bound=at_bound, unidentified=unident)
