"""Exact integer searches on the rising branch of a predicted step time.

Problem
-------
The saturation forms are not monotone in ``S`` (docs/model.md, Monotonicity):
the predicted step time falls from ``+inf`` as ``S -> 0`` and rises again,
and likewise in ``B`` at fixed ``S``.  The SLA answers need, per row of a
vectorised problem, (1) the smallest integer from which the predicted time
does not fall (:func:`rising_start`: a log grid, then bisection on the sign
of the forward difference; this assumes a single minimum between the last
falling grid point and the next-but-one, which holds for the saturation
members because ``(a_0 + a_1 S)/(1 - e^{-k S})`` is convex), and (2) the
largest integer on that branch whose time meets a target
(:func:`largest_below`: exponential search, then bisection), so that

    g(x) <= target  <  g(x + 1)

exactly on integers.  :func:`smallest_below` is the mirror search on the
falling branch.  These properties are checked against brute force and with
hypothesis in ``tests/decisions/test_sla.py``.
"""
from __future__ import annotations

import numpy as np

__all__ = ["largest_below", "line", "rising_start", "smallest_below", "solve_tokens"]

_GRID_POINTS = 256


def line(pred, fixed: np.ndarray, vary: str):
    """``g(X)``: ``pred.surface`` with ``B`` (``vary='S'``) or ``S`` fixed per row, ``X`` varied.

    ``pred`` is a :class:`perfmodel.decisions.predictor.Predictor`; ``fixed``
    holds one value per row and ``X`` is an (n_rows, k) array of integers.
    """
    fixed = np.asarray(fixed, float)

    def g(X):
        X = np.asarray(X, float)
        F = np.broadcast_to(fixed[:, None], X.shape)
        return pred.surface(F, X) if vary == "S" else pred.surface(X, F)

    return g


def rising_start(g, lo: np.ndarray, hi: np.ndarray, k: int = _GRID_POINTS) -> np.ndarray:
    """Smallest integer in [lo, hi] from which g does not fall (per row)."""
    lo = np.asarray(lo, np.int64)
    hi = np.asarray(hi, np.int64)
    m = lo.size
    t = np.linspace(0.0, 1.0, k)
    X = np.round(lo[:, None] * (hi / lo)[:, None] ** t[None, :]).astype(np.int64)
    X[:, 0], X[:, -1] = lo, hi
    X = np.maximum.accumulate(np.clip(X, lo[:, None], hi[:, None]), axis=1)
    V = g(X)
    fall = np.diff(V, axis=1) < 0
    has = fall.any(axis=1)
    j = (k - 2) - np.argmax(fall[:, ::-1], axis=1)
    r = np.arange(m)
    a = np.where(has, X[r, j], lo)
    b = np.where(has, X[r, np.minimum(j + 2, k - 1)], X[:, min(1, k - 1)])
    L, H = a.copy(), b.copy()
    while np.any(L < H):
        act = L < H
        mid = (L + H) // 2
        v = g(np.stack([mid, np.minimum(mid + 1, hi)], axis=1))
        up = v[:, 1] >= v[:, 0]
        H = np.where(act & up, mid, H)
        L = np.where(act & ~up, mid + 1, L)
    return L


def largest_below(g, start, hi, target):
    """Largest integer x in [start, hi] with g(x) <= target, g non-decreasing there.

    Exponential search from ``start`` then bisection.  Returns
    ``(x, feasible, capped, g(start))``; ``x`` is meaningful only where feasible.
    """
    start = np.asarray(start, np.int64)
    hi = np.asarray(hi, np.int64)
    target = np.broadcast_to(np.asarray(target, float), start.shape)
    v0 = g(start[:, None])[:, 0]
    feas = v0 <= target
    ok = start.copy()
    bad = np.full(start.shape, -1, np.int64)
    capped = feas & (start >= hi)
    active = feas & ~capped
    step = 1
    while active.any():
        probe = np.minimum(ok + step, hi)
        v = g(probe[:, None])[:, 0]
        over = v > target
        nb = active & over
        bad[nb] = probe[nb]
        good = active & ~over
        ok[good] = probe[good]
        reached = good & (probe >= hi)
        capped |= reached
        active = good & ~reached
        step *= 2
    ok, _ = _bisect(g, ok, bad, bad >= 0, target, increasing=True)
    return ok, feas, capped, v0


def smallest_below(g, lo, start, target):
    """Smallest integer x in [lo, start] with g(x) <= target, g non-increasing there.

    Rows where ``g(start) > target`` are infeasible (return -1).
    """
    lo = np.asarray(lo, np.int64)
    start = np.asarray(start, np.int64)
    vlo = g(lo[:, None])[:, 0]
    vs = g(start[:, None])[:, 0]
    out = np.where(vlo <= target, lo, -1)
    need = (vlo > target) & (vs <= target)
    # g(lo) > target, g(start) <= target on the rows that need the search
    _, b = _bisect(g, lo.copy(), start.copy(), need, target, increasing=False)
    return np.where(need, b, out)


def _bisect(g, lower, upper, rows, target, *, increasing):
    """Bisect integer brackets ``lower < upper`` on ``rows`` until they are adjacent.

    ``g`` is non-decreasing (``increasing``) or non-increasing between the
    brackets; the bracket on the side where ``g <= target`` keeps that
    property, the other keeps ``g > target``.  Returns ``(lower, upper)``.
    """
    while True:
        act = rows & (upper - lower > 1)
        if not act.any():
            break
        mid = (lower + upper) // 2
        le = g(mid[:, None])[:, 0] <= target
        raise_lower = le if increasing else ~le
        lower = np.where(act & raise_lower, mid, lower)
        upper = np.where(act & ~raise_lower, mid, upper)
    return lower, upper


def solve_tokens(pred, Bs: np.ndarray, targets: np.ndarray, s_max: int):
    """Vectorised ``S*`` for rows ``(B_i, T*_i)`` on the rising branch, searched from ``max(B_i, rising_from)``.

    Returns a dict of arrays: ``S`` (meaningful where ``feasible``),
    ``feasible``, ``capped`` (met up to ``s_max``), ``v_start`` (the searched
    quantity at ``start``), ``rising`` (``rising_from``) and ``start``.
    """
    g = line(pred, Bs, "S")
    m = Bs.size
    rise = rising_start(g, np.ones(m, np.int64), np.full(m, s_max, np.int64))
    start = np.maximum(rise, Bs.astype(np.int64))
    x, feas, capped, v0 = largest_below(g, start, np.full(m, s_max, np.int64), targets)
    return {"S": x, "feasible": feas, "capped": capped, "v_start": v0, "rising": rise,
            "start": start}

