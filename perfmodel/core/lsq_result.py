"""The result of a bounded least-squares solve and its covariance (shared by the solvers).

Problem
-------
:func:`perfmodel.core.fit.fit_curve` (scipy's ``trf`` on the whole Jacobian)
and :func:`perfmodel.core.fit_blocked.blocked_solve` (blocked Gauss-Newton on
fleet-size traces) return the same :class:`CurveFit`, with the covariance
and identification rules of one function, :func:`covariance`; that one is
verified against the NIST StRD certified standard errors
(``tests/core/test_nist.py``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["BOUND_SE_SHARE", "MAX_RELATIVE_STDERR", "STATUS_MESSAGES", "CurveFit", "at_bound",
           "covariance", "near_bound", "within_se_of_bound"]

#: scipy least_squares status codes (one table, as scipy's TERMINATION_MESSAGES)
STATUS_MESSAGES = {
    -1: "improper input parameters",
    0: "the maximum number of function evaluations is exceeded",
    1: "gtol termination condition is satisfied",
    2: "ftol termination condition is satisfied",
    3: "xtol termination condition is satisfied",
    4: "both ftol and xtol termination conditions are satisfied",
}


@dataclass
class CurveFit:
    """Result of :func:`fit_curve`.

    ``cov`` is ``s^2 (J^T J)^{-1}`` with ``s^2 = RSS/(n-p)`` computed from the
    (weighted) residuals at the optimum, the quantity NIST certifies; rows
    and columns of parameters that sit at a bound, or that the Jacobian
    cannot resolve (rank deficiency), are NaN.
    """

    params: np.ndarray
    stderr: np.ndarray
    cov: np.ndarray
    rss: float
    residuals: np.ndarray
    n: int
    dof: int
    nfev: int
    status: int
    message: str
    success: bool
    jac: np.ndarray
    cost: float
    at_bound: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    unidentified: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))


#: a standard error this many times the parameter's magnitude says the data do not determine it
MAX_RELATIVE_STDERR = 1e8

#: an estimate closer to a bound than this share of its standard error is at the bound
BOUND_SE_SHARE = 0.01


def near_bound(theta, lower, upper) -> np.ndarray:
    """Which parameters lie within 1e-8 of their range from a bound (bool per parameter).

    The range is ``upper - lower`` (``|theta| + 1`` where a bound is
    infinite).  :func:`at_bound` falls back on this rule for a parameter
    without a finite standard error.
    """
    x = np.asarray(theta, float)
    lo = np.broadcast_to(np.asarray(lower, float), x.shape)
    hi = np.broadcast_to(np.asarray(upper, float), x.shape)
    span = np.where(np.isfinite(hi - lo), hi - lo, np.abs(x) + 1.0)
    return (np.abs(x - lo) <= 1e-8 * span) | (np.abs(hi - x) <= 1e-8 * span)


def at_bound(theta, lower, upper, J: np.ndarray, rss: float, n: int) -> np.ndarray:
    """Which estimates the fit counts at a bound of the box (bool per parameter).

    Problem: where a solver stops next to a bound depends on rounding, so a
    rule on the solver's own report (scipy's ``active_mask``, an absolute
    ``1e-8 max(1, |bound|)``) or on the box alone cannot be stable.
    ``tau_0 = 1e-6 + 4e-8`` ms was free under one OpenBLAS kernel and at its
    bound of ``1e-6`` under another; a rule of ``1e-8`` of the range (``1e2``
    for ``c_attn``) counted ``c_attn = 5.4e-7`` ms/token^2, 23 standard errors
    from zero, at its bound.

    Rule: an estimate is at a bound when it is on it, or when moving it alone
    onto the bound would raise the residual sum of squares by at most
    ``BOUND_SE_SHARE^2`` residual variances: its distance from the bound is at
    most :data:`BOUND_SE_SHARE` times its conditional standard error
    ``s / ||J_i||`` (the others held; the marginal one is inflated along
    ridges such as ``a_1``/``k_B``, where neither is near a bound).  A
    parameter that :func:`covariance` flags unidentified falls back on
    :func:`near_bound`.

    Parameters
    ----------
    theta, lower, upper : array_like (p,)
        Estimate and box.
    J : ndarray (n, p) or (p, p)
        Jacobian of the weighted residuals at ``theta``, or any ``R`` with
        ``R^T R = J^T J``.
    rss : float
        Residual sum of squares.
    n : int
        Number of observations (the degrees of freedom are ``n - p``).
    """
    x = np.asarray(theta, float)
    dof = int(n) - x.size
    _, unident = covariance(J, rss, dof, theta=x)
    norms = np.linalg.norm(np.asarray(J, float), axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        se = np.sqrt(rss / dof) / norms if dof > 0 else np.full(x.shape, np.nan)
    se = np.where(unident | ~np.isfinite(se), np.nan, se)
    return within_se_of_bound(x, lower, upper, se)


def within_se_of_bound(theta, lower, upper, se) -> np.ndarray:
    """The rule of :func:`at_bound` given conditional standard errors ``se`` (bool per parameter).

    At a bound: on it, or closer to it than :data:`BOUND_SE_SHARE` times the
    standard error; where ``se`` is not finite, :func:`near_bound`.
    """
    x = np.asarray(theta, float)
    lo = np.broadcast_to(np.asarray(lower, float), x.shape)
    hi = np.broadcast_to(np.asarray(upper, float), x.shape)
    se = np.broadcast_to(np.asarray(se, float), x.shape)
    dist = np.minimum(x - lo, hi - x)
    with np.errstate(invalid="ignore"):
        by_se = np.where(np.isfinite(se), dist <= BOUND_SE_SHARE * se, near_bound(x, lo, hi))
    return by_se.astype(bool) | (dist <= 0)


def covariance(J: np.ndarray, rss: float, dof: int, free: np.ndarray | None = None,
               rcond: float = 1e-12, theta: np.ndarray | None = None,
               max_rel_se: float = MAX_RELATIVE_STDERR):
    """Covariance ``s^2 (J^T J)^{-1}`` on the free parameters, NaN elsewhere.

    Uses the SVD of ``J`` (columns scaled to unit norm for conditioning);
    singular directions below ``rcond`` mark the parameters that load on
    them as unidentified (NaN rows/columns) rather than inventing a huge
    finite variance.  With ``theta``, a parameter whose standard error
    exceeds ``max_rel_se * |theta|`` is unidentified too: the column scaling
    hides a Jacobian column that is tiny but not zero (``k_B = 214`` in a
    saturated ``1 - exp(-k_B B)`` has a column of ~1e-93 and a standard error
    of ~1e92, while at ``k_B = 749`` the column underflows to 0), so without
    this rule the flag depended on where in the flat region the solver
    stopped -- and that moved with the BLAS kernel.

    The covariance of the identified parameters is conditional on the
    unidentified ones (computed again without their columns), not marginal
    over the directions the data do not determine: the marginal one depends on
    where along such a direction the solver stopped, which moves with the BLAS
    kernel (parameter draws of a vLLM-CPU fit differed by 1 % of their
    standard deviation between OpenBLAS's Haswell and Sandybridge kernels with
    the marginal covariance, by 1e-5 with the conditional one).
    """
    p = J.shape[1]
    active = np.ones(p, bool) if free is None else np.asarray(free, bool).copy()
    unident = np.zeros(p, bool)
    cov = np.full((p, p), np.nan)
    # drop the unidentified columns and compute again, until a pass flags none
    while active.any():
        cov, new = _covariance_once(J, rss, dof, active, rcond, theta, max_rel_se)
        new &= active
        if not new.any():
            break
        unident |= new
        active &= ~new
        cov = np.full((p, p), np.nan)
    return cov, unident


def _covariance_once(J, rss, dof, free, rcond, theta, max_rel_se):
    """One pass of :func:`covariance` on the parameters ``free`` (no recomputation)."""
    _n, p = J.shape
    cov = np.full((p, p), np.nan)
    unident = np.zeros(p, bool)
    idx = np.nonzero(free)[0]
    if idx.size == 0 or dof <= 0:
        return cov, unident
    Jf = J[:, idx]
    norms = np.linalg.norm(Jf, axis=0)
    zero = norms == 0
    norms[zero] = 1.0
    Js = Jf / norms
    _, sv, vt = np.linalg.svd(Js, full_matrices=False)
    tol = rcond * sv[0] if sv.size else 0.0
    keep = sv > tol
    if not np.all(keep):
        null = vt[~keep]
        loads = np.max(np.abs(null), axis=0) > 0.1
        unident[idx[loads | zero]] = True
    vk = vt[keep]
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        inv = (vk.T / sv[keep] ** 2) @ vk
        inv = inv / np.outer(norms, norms)
        c = (rss / dof) * inv
    # a variance that overflows float64 is an unresolved direction, not a number
    var = np.diag(c)
    unident[idx[~np.isfinite(var)]] = True
    if theta is not None:
        mag = np.abs(np.asarray(theta, float)[idx])
        with np.errstate(invalid="ignore"):
            vague = np.sqrt(np.where(np.isfinite(var), var, np.inf)) > max_rel_se * mag
        unident[idx[vague & (mag > 0)]] = True
    cov[np.ix_(idx, idx)] = c
    bad = np.nonzero(unident)[0]
    cov[bad, :] = np.nan
    cov[:, bad] = np.nan
    return cov, unident
