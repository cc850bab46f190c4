"""SLA inversion, token budgets and an SLA-aware batch filter from a fitted step model.

Problem
-------
Turn a fitted step-latency model ``T(B, S)`` into operator answers
(docs/model.md, Decision quantities): the largest number of tokens ``S*`` a step with ``B``
requests can carry and still meet a step-time target ``T*``; the converse
largest ``B*`` at ``S`` tokens; the same with a stated probability
(``P(T <= T*) >= q``); the frontier over ``B``; a recommended vLLM
``max_num_batched_tokens`` / ``max_num_seqs`` for an inter-token-latency SLO;
and an SLA-aware batch filter, ``schedule_batch_with_sla``.

Where the answers are exact
---------------------------
The saturation forms are **not monotone** in ``S`` (docs/model.md, Monotonicity):
``T`` falls from ``+inf`` as ``S -> 0`` and rises again, and likewise in
``B`` at fixed ``S``.  Every search here runs on the *rising branch*:
``rising_from`` is the smallest integer from which the predicted time does
not fall (found on a log grid, then refined by bisection on the sign of the
forward difference ``T(s+1) - T(s)``; this assumes a single minimum between
the last falling grid point and the next-but-one, which holds for the
saturation members because ``(a_0 + a_1 S)/(1 - e^{-k S})`` is convex).
On that branch an answer satisfies, exactly on integers,

    T(B, S*) <= T*  <  T(B, S* + 1)

unless ``S*`` is capped at ``s_max``; ``S*`` never decreases as ``T*`` grows;
a target below the smallest predicted time on the allowed domain
(``S >= max(B, rising_from)``) is reported as infeasible.  Every answer
reports both ``rising_from`` (the model's, which can be below ``B``) and
``search_from = max(B, rising_from)``, the smallest ``S`` the search
considers (``S >= B``: each request computes at least one token).  These properties
are checked with hypothesis in ``tests/decisions/test_sla.py``.

Uncertainty
-----------
With ``q`` the step time is replaced by its ``q``-quantile under the
prediction distribution of a new step,
:class:`perfmodel.stats.predictive.PredictiveDistribution` -- the same one behind
the bands of :mod:`perfmodel.stats.uncertainty`, so the ``q``-quantile here is the
upper end of the level ``2q - 1`` prediction band there:

* ``method='delta'``: on the fit's scale (:mod:`perfmodel.core.scale`) a new step
  has residual ``e ~ sd * t_dof`` with ``sd^2 = g' C g + s^2`` (``g`` the
  fit-scale Jacobian of the fitted value, ``C = fit.cov``, ``s^2 =
  fit.rss/fit.dof``) and time ``inverse(T_hat, e)``: ``T_hat exp(e)`` for
  ``relative='log'``, ``T_hat + e`` for ``'absolute'``, ``T_hat/(1 - e)`` for
  ``'weight'``.  Parameters at a bound or unidentified carry no variance.
* ``method='bootstrap'``: parameter samples (``boot_samples``, an
  ``n_boot x p`` array, e.g. from a residual or pairs bootstrap) are paired
  at random (seeded) with fit-scale residuals (the fit's own, centred and
  scaled by ``sqrt(n/dof)``, or ``residuals``); the predictive sample is
  ``inverse(T_hat_b, e_j)`` and its empirical quantile is used.  Without
  stored residuals (a fit read from JSON), residuals are drawn from
  ``N(0, s^2)`` and the answer says so.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from perfmodel._checks import check_int_range, check_positive, check_probability
from perfmodel._io import json_safe
from perfmodel.data.features import CONTEXT_KEYS, batch_features, uniform_batch_features
from perfmodel.errors import InputError
from perfmodel.stats.predictive import PredictiveDistribution

__all__ = [
    "DEFAULT_SEQS_GRID",
    "DEFAULT_S_MAX",
    "DIAGNOSTIC_LABEL",
    "BatchAnswer",
    "Predictor",
    "ScheduleDecision",
    "SlaAnswer",
    "frontier",
    "max_batch",
    "max_tokens",
    "max_tokens_quantile",
    "plot_frontier",
    "recommend_token_budget",
    "schedule_batch_with_sla",
]

DEFAULT_S_MAX = 2**20
DEFAULT_SEQS_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256)
_GRID_POINTS = 256
#: what :func:`recommend_token_budget` is (and is not): printed with its answers
DIAGNOSTIC_LABEL = ("diagnostic only: a step-level rule (tokens per second of one full step "
                    "under a step-time target); it ignores queueing and request deadlines and "
                    "can favour max_num_seqs = 1. For a deployment decision use the "
                    "request-level `perfmodel tune` (perfmodel.decisions.tune)")
_FEATURE_KEYS = ("B", "S")


# ---------------------------------------------------------------------------
# argument checks
# ---------------------------------------------------------------------------

def _int_arg(name: str, value, minimum: int = 1) -> int:
    return check_int_range(name, value, minimum, integral_float=True)


def _target_arg(name: str, value) -> float:
    return check_positive(name, value, unit="ms")


def _q_arg(q) -> float:
    return check_probability("q", q)


def _check_predictor_like(fit):
    if not hasattr(fit, "predict") or not callable(fit.predict):
        raise InputError(f"fit must be a FitResult or have a .predict(features) method, got "
                         f"{type(fit).__name__}")


# ---------------------------------------------------------------------------
# the predictor: point prediction or q-quantile
# ---------------------------------------------------------------------------

class Predictor:
    """Predicted step time (ms) of a fit: the point prediction or its ``q``-quantile.

    A thin layer over :class:`perfmodel.stats.predictive.PredictiveDistribution`
    (the one predictive distribution of a new step, shared with the bands of
    :mod:`perfmodel.stats.uncertainty`): it fills model features other than ``B``
    and ``S`` with constants and fixes ``q``.

    Parameters
    ----------
    fit : FitResult (needed for ``q``), or any object with ``.predict(feats)``
    q : None (point prediction) or a probability in (0, 1)
    method : ``'delta'`` or ``'bootstrap'`` (see the module docstring)
    boot_samples : (n_boot, p) parameter samples for ``'bootstrap'``
    residuals : fit-scale residuals for ``'bootstrap'`` (default: from the fit)
    features : constants for model features other than ``B`` and ``S`` (e.g.
        ``{'attn_prefill': ..., 'decode_ctx': ...}`` for ``seed_ctx``), and/or
        ``{'context_tokens': X}``: every request of a step at ``(B, S)`` computes
        ``S/B`` tokens on ``X`` cached ones, and the context features the model
        needs come from :func:`perfmodel.data.features.uniform_batch_features`
        (constants given by name win); features neither given nor implied are 0,
        i.e. those context terms are left out (:attr:`context_assumption` says which)
    n_draws : size of the bootstrap predictive sample
    seed : seed of the bootstrap pairing
    """

    def __init__(self, fit, q=None, method: str = "delta", boot_samples=None, residuals=None,
                 features: Mapping | None = None, n_draws: int = 4000, seed: int = 0):
        _check_predictor_like(fit)
        self.fit = fit
        self.q = None if q is None else _q_arg(q)
        if method not in ("delta", "bootstrap"):
            raise InputError(f"method must be 'delta' or 'bootstrap', got {method!r}")
        if method == "bootstrap" and boot_samples is None and self.q is not None:
            raise InputError("method='bootstrap' needs boot_samples (an n_boot x p array of "
                             "parameter samples)")
        self.method = method
        self.features = self._check_features(features)
        self.requires = tuple(getattr(getattr(fit, "model", None), "requires", _FEATURE_KEYS))
        self._dist_args = {"boot": boot_samples if method == "bootstrap" else None,
                           "residuals": residuals, "n_draws": n_draws, "seed": seed}
        self._dist = None
        self.note = ""
        if self.q is not None:
            self.note = self.distribution.note

    @property
    def distribution(self) -> PredictiveDistribution:
        """The fit's :class:`~perfmodel.stats.predictive.PredictiveDistribution` (built on first use)."""
        if self._dist is None:
            self._dist = PredictiveDistribution(self.fit, **self._dist_args)
        return self._dist

    @staticmethod
    def _check_features(features):
        if features is None:
            return {}
        if not isinstance(features, Mapping):
            raise InputError(f"features must be a dict of constants, got {type(features).__name__}")
        out = {}
        for k, v in features.items():
            if k in ("B", "S"):
                raise InputError("features must not set 'B' or 'S' (they are searched)")
            try:
                x = float(v)
            except (TypeError, ValueError):
                raise InputError(f"features[{k!r}] must be a number, got {v!r}") from None
            if not math.isfinite(x):
                raise InputError(f"features[{k!r}] must be finite, got {v!r}")
            if k == "context_tokens" and x < 0:
                raise InputError(f"features['context_tokens'] must be >= 0, got {v!r}")
            out[k] = x
        return out

    # -- evaluation on feature dicts -------------------------------------
    @property
    def context_assumption(self) -> dict[str, Any]:
        """What the predictions assume about the context features the model needs."""
        need = [k for k in self.requires if k in CONTEXT_KEYS]
        x = self.features.get("context_tokens")
        given = sorted(k for k in need if k in self.features)
        if not need:
            rule = "the model has no context terms"
        elif x is not None:
            rule = (f"every request of a step at (B, S) computes S/B tokens on {x:g} cached "
                    "tokens")
        else:
            rule = "context features not given are 0 (their terms are left out)"
        return {"context_aware": bool(need), "context_tokens": x, "constants": given,
                "rule": rule}

    def _feats(self, feats: Mapping) -> dict:
        f = {k: np.asarray(v, float).ravel() for k, v in feats.items()}
        n = f["B"].size
        x = self.features.get("context_tokens")
        implied = {}
        if x is not None and any(k not in f and k not in self.features for k in self.requires):
            B = f["B"]
            implied = uniform_batch_features(B, f["S"] / np.maximum(B, 1e-12), np.full(n, x))
        for k in (*self.requires, *self.features):
            if k not in f:
                f[k] = np.full(n, self.features[k]) if k in self.features else implied.get(
                    k, np.zeros(n))
        f.pop("context_tokens", None)
        return f

    def point(self, feats: Mapping) -> np.ndarray:
        """Point prediction (ms): the fitted curve (the median for log fits)."""
        return np.asarray(self.fit.predict(self._feats(feats)), dtype=float).ravel()

    def quantile(self, feats: Mapping, q: float | None = None) -> np.ndarray:
        """``q``-quantile (ms) of the step time of a new step with these features."""
        q = self.q if q is None else _q_arg(q)
        if q is None:
            return self.point(feats)
        return self.distribution.quantile(self._feats(feats), q)

    def prob_below(self, feats: Mapping, target_ms: float) -> np.ndarray:
        """``P(T <= target_ms)`` for a new step (NaN without an uncertainty model)."""
        f = self._feats(feats)
        if self.q is None:
            return np.full(f["B"].size, np.nan)
        return self.distribution.cdf(f, target_ms)

    def __call__(self, feats: Mapping) -> np.ndarray:
        return self.quantile(feats)

    def surface(self, B, S) -> np.ndarray:
        """The searched quantity at broadcast arrays ``B``, ``S`` (same shape out)."""
        B, S = np.broadcast_arrays(np.asarray(B, float), np.asarray(S, float))
        v = self({"B": B.ravel(), "S": S.ravel()})
        return v.reshape(B.shape)


# ---------------------------------------------------------------------------
# vectorised integer searches (one row per problem)
# ---------------------------------------------------------------------------

def _line(pred: Predictor, fixed: np.ndarray, vary: str):
    fixed = np.asarray(fixed, float)

    def g(X):
        X = np.asarray(X, float)
        F = np.broadcast_to(fixed[:, None], X.shape)
        return pred.surface(F, X) if vary == "S" else pred.surface(X, F)

    return g


def _rising_start(g, lo: np.ndarray, hi: np.ndarray, k: int = _GRID_POINTS) -> np.ndarray:
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


def _largest_below(g, start, hi, target):
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


def _smallest_below(g, lo, start, target):
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


# ---------------------------------------------------------------------------
# answers
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class SlaAnswer:
    """Largest tokens per step at a batch size under a step-time target.

    ``predicted_ms`` is the point prediction at ``S*`` when feasible, else
    the smallest point prediction reachable on the allowed domain.  With a
    quantile: ``predicted_q_ms`` is the ``q``-quantile at the same S and
    ``prob_meets`` = ``P(T <= target_ms)`` there.  ``capped`` means the
    target is met up to ``s_max``.  ``rising_from`` is the smallest S from
    which the predicted ``T(B, S)`` does not fall (a property of the model,
    possibly below ``B``); ``search_from = max(batch_size, rising_from)`` is
    the smallest S the search considers (S >= B).
    """

    batch_size: int
    target_ms: float
    max_total_tokens: int | None
    predicted_ms: float
    rising_from: int
    search_from: int
    feasible: bool
    reason: str
    q: float | None = None
    method: str | None = None
    predicted_q_ms: float | None = None
    prob_meets: float | None = None
    capped: bool = False

    def to_dict(self) -> dict[str, Any]:
        return json_safe(asdict(self))


@dataclass(frozen=True)
class BatchAnswer:
    """Largest batch size at a token count under a step-time target (B <= S).

    ``rising_from`` is the smallest B from which the predicted ``T(B, S)``
    does not fall; ``search_from``, the smallest B the search considers, is
    the same number (B >= 1 always), kept for the same keys as
    :class:`SlaAnswer`.
    """

    total_tokens: int
    target_ms: float
    max_batch_size: int | None
    predicted_ms: float
    rising_from: int
    search_from: int
    feasible: bool
    reason: str
    q: float | None = None
    predicted_q_ms: float | None = None
    capped: bool = False

    def to_dict(self) -> dict[str, Any]:
        return json_safe(asdict(self))


def _solve_tokens(pred: Predictor, Bs: np.ndarray, targets: np.ndarray, s_max: int):
    """Vectorised S* for rows (B_i, T*_i): returns dict of arrays."""
    g = _line(pred, Bs, "S")
    m = Bs.size
    rise = _rising_start(g, np.ones(m, np.int64), np.full(m, s_max, np.int64))
    start = np.maximum(rise, Bs.astype(np.int64))
    x, feas, capped, v0 = _largest_below(g, start, np.full(m, s_max, np.int64), targets)
    return {"S": x, "feasible": feas, "capped": capped, "v_start": v0, "rising": rise, "start": start}


def _tokens_answer(pred: Predictor, B: int, target: float, s_max: int, sol: dict, i: int):
    feas = bool(sol["feasible"][i])
    rise = int(sol["rising"][i])
    start = int(sol["start"][i])
    q = pred.q
    searched = f"search from S={start} = max(B={B}, rising_from={rise})"
    if feas:
        S = int(sol["S"][i])
        capped = bool(sol["capped"][i])
        f = {"B": [B], "S": [S]}
        point = float(pred.point(f)[0])
        what = f"{q:g}-quantile" if q is not None else "predicted step time"
        if capped:
            reason = (f"the {what} stays <= {target:g} ms up to s_max={s_max}: S* is capped at "
                      "s_max (raise s_max to search further)")
        else:
            nxt = float(pred.surface(B, S + 1))
            reason = (f"{what} {float(pred.surface(B, S)):.4g} ms at S={S} <= {target:g} ms < "
                      f"{nxt:.4g} ms at S={S + 1} ({searched})")
        pq = float(pred.quantile(f)[0]) if q is not None else None
        pm = float(pred.prob_below(f, target)[0]) if q is not None else None
        return SlaAnswer(B, target, S, point, rise, start, True, reason, q,
                         pred.method if q is not None else None, pq, pm, capped)
    f = {"B": [B], "S": [start]}
    point = float(pred.point(f)[0])
    lowest = float(sol["v_start"][i])
    where = (f"at S={start}, the minimum over S >= {B}" if start > B or rise > B
             else f"at S={B} (S >= B: each request computes at least one token)")
    what = f"{q:g}-quantile of the step time" if q is not None else "predicted step time"
    reason = (f"infeasible: target {target:g} ms is below the smallest {what}, "
              f"{lowest:.4g} ms {where}; {searched}")
    pq = lowest if q is not None else None
    return SlaAnswer(B, target, None, point, rise, start, False, reason, q,
                     pred.method if q is not None else None, pq,
                     float(pred.prob_below(f, target)[0]) if q is not None else None, False)


def max_tokens(fit, batch_size: int, target_ms: float, *, s_max: int = DEFAULT_S_MAX,
               features: Mapping | None = None) -> SlaAnswer:
    """Largest integer S >= B with predicted T(B, S) <= T* on the rising branch.

    Problem: ``S* = argmin_S |T(B,S) - T*|`` (docs/model.md) read as "the
    most tokens a step with ``B`` requests can compute within ``T*``".  The
    search starts at ``max(B, rising_from)`` (module docstring), doubles the
    step until the target is exceeded, then bisects on integers, so
    ``T(B,S*) <= T* < T(B,S*+1)`` exactly (tested with hypothesis).

    Parameters
    ----------
    fit : FitResult or any object with ``.predict(features)``
    batch_size : int >= 1
    target_ms : float > 0
    s_max : search cap on S (answers at the cap are flagged ``capped``)
    features : constants for other model features (see :class:`Predictor`)

    Returns
    -------
    SlaAnswer (``max_total_tokens`` None and ``feasible`` False when the
    target is below the smallest predicted time)

    Examples
    --------
    >>> a = max_tokens(fit, 16, 50.0)        # doctest: +SKIP
    >>> a.max_total_tokens, a.predicted_ms   # doctest: +SKIP
    """
    B = _int_arg("batch_size", batch_size)
    T = _target_arg("target_ms", target_ms)
    s_max = _int_arg("s_max", s_max)
    if s_max < B:
        raise InputError(f"s_max={s_max} is below batch_size={B} (S >= B)")
    pred = Predictor(fit, features=features)
    sol = _solve_tokens(pred, np.array([B], np.int64), np.array([T]), s_max)
    return _tokens_answer(pred, B, T, s_max, sol, 0)


def max_tokens_quantile(fit, batch_size: int, target_ms: float, q: float, *,
                        method: str = "delta", boot_samples=None, residuals=None,
                        s_max: int = DEFAULT_S_MAX, features: Mapping | None = None,
                        n_draws: int = 4000, seed: int = 0) -> SlaAnswer:
    """Largest integer S >= B with ``P(T(B,S) <= T*) >= q`` on the rising branch.

    Problem: a target met with a stated probability.  ``P(T <= T*) >= q`` is
    ``quantile_q(T) <= T*``, so this is :func:`max_tokens` with the step time
    replaced by its ``q``-quantile under the prediction distribution of a new
    step (delta method or bootstrap, module docstring); the same exact
    integer property holds for the quantile.

    Parameters
    ----------
    q : probability in (0, 1), e.g. 0.95
    method : ``'delta'`` or ``'bootstrap'``
    boot_samples : (n_boot, p) array of parameter samples (bootstrap)
    residuals : fit-scale residuals for the bootstrap (default: from ``fit``)
    n_draws, seed : size and seed of the bootstrap predictive sample

    Returns
    -------
    SlaAnswer with ``q``, ``method``, ``predicted_q_ms`` and ``prob_meets``
    """
    B = _int_arg("batch_size", batch_size)
    T = _target_arg("target_ms", target_ms)
    q = _q_arg(q)
    s_max = _int_arg("s_max", s_max)
    if s_max < B:
        raise InputError(f"s_max={s_max} is below batch_size={B} (S >= B)")
    pred = Predictor(fit, q=q, method=method, boot_samples=boot_samples, residuals=residuals,
                     features=features, n_draws=n_draws, seed=seed)
    sol = _solve_tokens(pred, np.array([B], np.int64), np.array([T]), s_max)
    ans = _tokens_answer(pred, B, T, s_max, sol, 0)
    if pred.note:
        ans = SlaAnswer(**{**asdict(ans), "reason": ans.reason + f" [{pred.note}]"})
    return ans


def max_batch(fit, total_tokens: int, target_ms: float, *, q: float | None = None,
              method: str = "delta", boot_samples=None, features: Mapping | None = None,
              seed: int = 0) -> BatchAnswer:
    """Largest integer B <= S with predicted T(B, S) <= T* (the converse of :func:`max_tokens`).

    Problem: at a token budget ``S``, how many requests may share a step.
    ``T`` falls then rises in ``B`` too (more requests raise the saturation
    factor ``1 - e^{-k_B B}``, ``tau_B B`` adds time), so the search runs on
    the rising branch in ``B`` from ``rising_from`` up to ``S`` (each request
    computes at least one token); with ``q``, on the ``q``-quantile.

    Returns
    -------
    BatchAnswer (``max_batch_size`` None when infeasible; ``capped`` when
    every B up to S meets the target)
    """
    S = _int_arg("total_tokens", total_tokens)
    T = _target_arg("target_ms", target_ms)
    pred = Predictor(fit, q=q, method=method, boot_samples=boot_samples, features=features,
                     seed=seed)
    g = _line(pred, np.array([S], float), "B")
    one = np.ones(1, np.int64)
    rise = _rising_start(g, one, np.array([S], np.int64))
    x, feas, capped, v0 = _largest_below(g, rise, np.array([S], np.int64), np.array([T]))
    r = int(rise[0])
    if feas[0]:
        B = int(x[0])
        f = {"B": [B], "S": [S]}
        if capped[0]:
            reason = (f"every B from {r} up to S={S} meets {T:g} ms (B <= S; search from "
                      f"B={r} = rising_from)")
        else:
            reason = (f"{float(g(np.array([[B]]))[0, 0]):.4g} ms at B={B} <= {T:g} ms < "
                      f"{float(g(np.array([[B + 1]]))[0, 0]):.4g} ms at B={B + 1} "
                      f"(search from B={r} = rising_from)")
        return BatchAnswer(S, T, B, float(pred.point(f)[0]), r, r, True, reason, pred.q,
                           float(pred.quantile(f)[0]) if pred.q is not None else None,
                           bool(capped[0]))
    f = {"B": [r], "S": [S]}
    reason = (f"infeasible: target {T:g} ms is below the smallest predicted step time "
              f"{float(v0[0]):.4g} ms at S={S} (reached at B={r})")
    return BatchAnswer(S, T, None, float(pred.point(f)[0]), r, r, False, reason, pred.q,
                       float(v0[0]) if pred.q is not None else None, False)


# ---------------------------------------------------------------------------
# frontier
# ---------------------------------------------------------------------------

def frontier(fit, batch_sizes: Sequence[int], target_ms: float, q: float | None = None, *,
             method: str = "delta", boot_samples=None, s_max: int = DEFAULT_S_MAX,
             features: Mapping | None = None, seed: int = 0) -> pd.DataFrame:
    """The SLA frontier ``S*(B)`` over batch sizes, as a table.

    Problem: which (B, S) combinations meet a step-time
    target.  One :func:`max_tokens` (or :func:`max_tokens_quantile` when
    ``q`` is given) per batch size, solved together.

    Returns
    -------
    DataFrame with columns ``batch_size, target_ms, max_total_tokens`` (NA
    when infeasible), ``feasible, capped, rising_from, search_from`` (``max(B,
    rising_from)``: the smallest S searched), ``predicted_ms`` (point
    prediction at S*), ``predicted_q_ms`` and ``prob_meets`` (with ``q``),
    ``tokens_per_s`` (``S*/T_hat * 1000``: the step's token throughput at S*).
    """
    T = _target_arg("target_ms", target_ms)
    if isinstance(batch_sizes, (int, np.integer)):
        batch_sizes = [batch_sizes]
    Bs = np.array([_int_arg("batch_sizes", b) for b in batch_sizes], np.int64)
    if Bs.size == 0:
        raise InputError("batch_sizes is empty")
    s_max = _int_arg("s_max", s_max)
    if s_max < Bs.max():
        raise InputError(f"s_max={s_max} is below the largest batch size {int(Bs.max())}")
    pred = Predictor(fit, q=q, method=method, boot_samples=boot_samples, features=features,
                     seed=seed)
    sol = _solve_tokens(pred, Bs, np.full(Bs.size, T), s_max)
    feas = sol["feasible"]
    S = np.where(feas, sol["S"], sol["start"])
    f = {"B": Bs.astype(float), "S": S.astype(float)}
    point = pred.point(f)
    df = pd.DataFrame({
        "batch_size": Bs,
        "target_ms": T,
        "max_total_tokens": pd.array(np.where(feas, sol["S"], 0), dtype="Int64"),
        "feasible": feas,
        "capped": sol["capped"] & feas,
        "rising_from": sol["rising"],
        "search_from": sol["start"],
        "predicted_ms": point,
    })
    df.loc[~feas, "max_total_tokens"] = pd.NA
    if pred.q is not None:
        df["q"] = pred.q
        df["predicted_q_ms"] = pred.quantile(f)
        df["prob_meets"] = pred.prob_below(f, T)
    df["tokens_per_s"] = np.where(feas, S / point * 1000.0, np.nan)
    return df


def _get_ax(ax):
    from perfmodel.plotting import get_ax

    return get_ax(ax)


def plot_frontier(df: pd.DataFrame, ax=None, *, label: str | None = None):
    """Plot ``S*`` against ``B`` from :func:`frontier` (ax in, ax out).

    Feasible batch sizes are joined by a line; infeasible ones are marked
    with crosses on the x axis; capped answers with an upward triangle.
    The region below the line meets the target.
    """
    need = ("batch_size", "max_total_tokens", "feasible")
    if not isinstance(df, pd.DataFrame) or any(c not in df.columns for c in need):
        raise InputError(f"df must be a DataFrame from frontier() with columns {list(need)}")
    ax = _get_ax(ax)
    ok = df[df["feasible"].astype(bool)]
    bad = df[~df["feasible"].astype(bool)]
    q = df["q"].iloc[0] if "q" in df.columns and len(df) else None
    T = df["target_ms"].iloc[0] if "target_ms" in df.columns and len(df) else None
    if label is None:
        label = (f"S*(B), T* = {T:g} ms" if T is not None else "S*(B)") + (
            f", P >= {q:g}" if q is not None else "")
    ax.plot(ok["batch_size"], ok["max_total_tokens"].astype(float), "o-", label=label)
    if "capped" in df.columns and df["capped"].any():
        c = df[df["capped"].astype(bool)]
        ax.plot(c["batch_size"], c["max_total_tokens"].astype(float), "^", color="k",
                label="capped at s_max")
    if len(bad):
        ax.plot(bad["batch_size"], np.zeros(len(bad)), "x", color="red", label="infeasible")
    ax.set_xscale("log", base=2)
    ax.set_yscale("symlog" if len(ok) and ok["max_total_tokens"].min() < 1 else "log")
    ax.set_xlabel("batch size B (requests)")
    ax.set_ylabel("max tokens per step S*")
    ax.legend(fontsize="small")
    return ax


# ---------------------------------------------------------------------------
# token-budget recommendation
# ---------------------------------------------------------------------------

def recommend_token_budget(fit, itl_slo_ms: float, q: float = 0.95, *,
                           max_num_seqs_grid: Sequence[int] = DEFAULT_SEQS_GRID,
                           cover: str = "full_step", method: str = "delta", boot_samples=None,
                           s_max: int = DEFAULT_S_MAX, features: Mapping | None = None,
                           seed: int = 0) -> dict[str, Any]:
    """Propose vLLM's ``max_num_batched_tokens`` and ``max_num_seqs`` for an ITL SLO (diagnostic).

    A step-level diagnostic (:data:`DIAGNOSTIC_LABEL`, in the answer as
    ``label``): it can rank ``max_num_seqs = 1`` first, which serialises the
    requests.  The request-level decision is
    :func:`perfmodel.decisions.tune.tune_token_budget`.

    Problem: with continuous batching each step emits one token per decoding
    request, so the inter-token latency (ITL) is the step time (plus the
    overhead outside the model run, which ``itl_slo_ms`` should exclude).
    The token budget ``K`` caps the tokens per step and ``max_num_seqs`` =
    ``M`` the requests per step.

    Rule
    ----
    ``cover='full_step'`` (default): for each ``M`` in ``max_num_seqs_grid``
    take the point of the probabilistic SLA frontier, ``K(M) = S*_q(M)``,
    the largest ``K >= M`` with ``P(T(M, K) <= SLO) >= q`` (vLLM requires
    ``max_num_batched_tokens >= max_num_seqs``); choose the ``M`` that
    maximises the token throughput of that full step, ``K / median T(M, K)``
    (ties: the smaller ``M``).

    ``cover='all_batch_sizes'``: stricter, ``K(M)`` must also hold for
    steps at the cap with fewer requests: ``quantile_q T(b, K) <= SLO`` for
    every ``b = 1..M``.  (For each ``b`` the feasible ``S`` form an interval
    ``[L_b, U_b]`` on the fall-then-rise curve; ``K(M) = min_b U_b`` when that
    is ``>= max(M, max_b L_b)``.)  The saturation forms predict steps with
    few requests to be slow (``1 - e^{-k_B b}`` is small), so this can be
    infeasible where ``'full_step'`` is not.

    Either way the answer reports ``worst_case``: the ``b <= M`` whose step
    at ``K`` tokens has the largest ``q``-quantile.  Steps with very few
    tokens (on the falling branch) cannot be prevented by a cap and are not
    covered.

    Returns
    -------
    dict with ``max_num_batched_tokens``, ``max_num_seqs``, ``itl_slo_ms``,
    ``q``, ``method``, ``cover``, ``feasible``, ``reason``, ``rule``; at the
    chosen settings ``predicted_median_ms``, ``predicted_q_ms``,
    ``prob_meets_slo`` (step with ``M`` requests and ``K`` tokens),
    ``worst_case`` (``batch_size``, ``predicted_q_ms``, ``prob_meets_slo``),
    ``tokens_per_s``; and ``table``: one dict per ``M`` in the grid.
    """
    T = _target_arg("itl_slo_ms", itl_slo_ms)
    q = _q_arg(q)
    if cover not in ("full_step", "all_batch_sizes"):
        raise InputError(f"cover must be 'full_step' or 'all_batch_sizes', got {cover!r}")
    if isinstance(max_num_seqs_grid, (int, np.integer)):
        max_num_seqs_grid = [max_num_seqs_grid]
    grid = sorted({_int_arg("max_num_seqs_grid", m) for m in max_num_seqs_grid})
    if not grid:
        raise InputError("max_num_seqs_grid is empty")
    s_max = _int_arg("s_max", s_max)
    Mmax = grid[-1]
    if s_max < Mmax:
        raise InputError(f"s_max={s_max} is below the largest max_num_seqs {Mmax}")
    pred = Predictor(fit, q=q, method=method, boot_samples=boot_samples, features=features,
                     seed=seed)
    Ms = np.array(grid, np.int64)
    if cover == "full_step":
        sol = _solve_tokens(pred, Ms, np.full(Ms.size, T), s_max)
        Ks = {int(M): (int(sol["S"][i]) if sol["feasible"][i] else None,
                       bool(sol["capped"][i]),
                       None if sol["feasible"][i] else
                       f"no K >= {int(M)} meets the SLO at {int(M)} requests (smallest "
                       f"{q:g}-quantile {float(sol['v_start'][i]):.4g} ms)")
              for i, M in enumerate(Ms)}
    else:
        bs = np.arange(1, Mmax + 1, dtype=np.int64)
        sol = _solve_tokens(pred, bs, np.full(bs.size, T), s_max)
        L = _smallest_below(_line(pred, bs.astype(float), "S"), bs, sol["start"], T)
        feas_b = sol["feasible"]
        U = np.where(feas_b, sol["S"], -1)
        Ks = {}
        for M in grid:
            sel = slice(0, M)
            if not feas_b[sel].all():
                worst = int(bs[sel][~feas_b[sel]][0])
                Ks[M] = (None, False, f"no token count meets the SLO at b={worst} requests")
                continue
            K, lo = int(U[sel].min()), int(max(M, L[sel].max()))
            if K < lo:
                Ks[M] = (None, False, (f"the feasible token ranges of b=1..{M} do not overlap "
                                       f"above S={M} (min U_b={K} < {lo})"))
                continue
            Ks[M] = (K, bool(K >= s_max), None)
    table = []
    best = None
    for M in grid:
        K, capped, why = Ks[M]
        if K is None:
            table.append({"max_num_seqs": M, "max_num_batched_tokens": None, "feasible": False,
                              "reason": why})
            continue
        f = {"B": [float(M)], "S": [float(K)]}
        med = float(pred.point(f)[0])
        thr = K / med * 1000.0
        row = {"max_num_seqs": M, "max_num_batched_tokens": K, "feasible": True,
                   "predicted_median_ms": med, "predicted_q_ms": float(pred.quantile(f)[0]),
                   "prob_meets_slo": float(pred.prob_below(f, T)[0]), "tokens_per_s": thr,
                   "capped": capped}
        table.append(row)
        if best is None or thr > best["tokens_per_s"] * (1 + 1e-12):
            best = row
    if cover == "full_step":
        rule = ("for each max_num_seqs M: K(M) = largest K >= M with P(T(M, K) <= SLO) >= q; "
                "choose the M maximising K / median T(M, K)")
    else:
        rule = ("for each max_num_seqs M: K(M) = largest K >= M with P(T(b, K) <= SLO) >= q for "
                "every b = 1..M; choose the M maximising K / median T(M, K)")
    out: dict[str, Any] = {"itl_slo_ms": T, "q": q, "method": method, "cover": cover, "rule": rule,
                               "label": DIAGNOSTIC_LABEL, "table": table,
                               "assumed_context": pred.context_assumption}
    if best is None:
        why = table[0]["reason"]
        if cover == "full_step":
            i = int(np.argmin(sol["v_start"]))
            why = (f"the smallest {q:g}-quantile of a full step over the grid is "
                   f"{float(sol['v_start'][i]):.4g} ms (max_num_seqs={int(Ms[i])}, "
                   f"S={int(sol['start'][i])})")
        out.update(feasible=False, max_num_batched_tokens=None, max_num_seqs=None,
                   reason=f"infeasible: no max_num_seqs in {grid} meets the SLO {T:g} ms with "
                          f"probability {q:g}: {why}")
        return out
    M, K = best["max_num_seqs"], best["max_num_batched_tokens"]
    fb = {"B": np.arange(1, M + 1, dtype=float), "S": np.full(M, float(K))}
    qb = pred.quantile(fb)
    w = int(np.argmax(qb))
    wc = {"batch_size": w + 1, "predicted_q_ms": float(qb[w]),
              "prob_meets_slo": float(pred.prob_below({"B": [w + 1.0], "S": [float(K)]}, T)[0])}
    reason = (f"max_num_seqs={M}, max_num_batched_tokens={K}: a full step is predicted at "
              f"{best['predicted_median_ms']:.4g} ms (median), {best['predicted_q_ms']:.4g} ms "
              f"({q:g}-quantile) <= SLO {T:g} ms; {best['tokens_per_s']:.4g} tokens/s per "
              "full step")
    if wc["predicted_q_ms"] > T:
        reason += (f"; caution: a step at the cap with only b={wc['batch_size']} request(s) is "
                   f"predicted at {wc['predicted_q_ms']:.4g} ms ({q:g}-quantile) > SLO "
                   "(cover='all_batch_sizes' guards against this)")
    out.update(
        feasible=True, max_num_batched_tokens=K, max_num_seqs=M,
        predicted_median_ms=best["predicted_median_ms"], predicted_q_ms=best["predicted_q_ms"],
        prob_meets_slo=best["prob_meets_slo"], tokens_per_s=best["tokens_per_s"],
        worst_case=wc, reason=reason,
    )
    if pred.note:
        out["note"] = pred.note
    return out


# ---------------------------------------------------------------------------
# SLA-aware batch filter (docs/model.md, Decision quantities)
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ScheduleDecision:
    """What :func:`schedule_batch_with_sla` keeps.

    ``chunk_sizes[i]`` is the (possibly trimmed) chunk of request
    ``kept[i]`` (indices into the input, in input order); ``dropped`` are
    the indices removed (always a suffix); ``predicted_ms`` is the value
    compared with the SLA (the ``q``-quantile when ``q`` was given).
    ``action`` is ``'keep'``, ``'trim'``, ``'drop'``, ``'drop+trim'`` or
    ``'infeasible'`` (even the first request alone, at its best chunk,
    misses the SLA: it is returned so that a scheduler still progresses).
    """

    chunk_sizes: list[int]
    kept: list[int]
    dropped: list[int]
    tokens_trimmed: int
    predicted_ms: float
    sla_ms: float
    feasible: bool
    action: str
    reason: str
    context_lens: list[int] = field(default_factory=list)


_CHUNK_KEYS = ("chunk", "chunk_size", "num_tokens", "remaining_tokens", "tokens")
_CTX_KEYS = ("context", "context_len", "num_computed_tokens", "ctx")


def _parse_requests(requests):
    if isinstance(requests, (str, bytes)) or not hasattr(requests, "__iter__"):
        raise InputError(f"requests must be a sequence, got {type(requests).__name__}")
    chunks, ctx = [], []
    for i, r in enumerate(requests):
        c = x = None
        if isinstance(r, (int, np.integer)) and not isinstance(r, bool):
            c, x = int(r), 0
        elif isinstance(r, Mapping):
            c = next((r[k] for k in _CHUNK_KEYS if k in r), None)
            x = next((r[k] for k in _CTX_KEYS if k in r), 0)
        elif isinstance(r, (tuple, list)) and len(r) == 2:
            c, x = r
        else:
            c = next((getattr(r, k) for k in _CHUNK_KEYS if hasattr(r, k)), None)
            x = next((getattr(r, k) for k in _CTX_KEYS if hasattr(r, k)), 0)
        try:
            ci, xi = int(c), int(x)
            okc = float(c) == ci and float(x) == xi
        except (TypeError, ValueError):
            okc = False
        if not okc or ci < 1 or xi < 0:
            raise InputError(f"requests[{i}] = {r!r}: need an integer chunk >= 1 (int, "
                             f"(chunk, context) tuple, dict or object with one of {_CHUNK_KEYS}) "
                             "and an integer context >= 0")
        chunks.append(ci)
        ctx.append(xi)
    if not chunks:
        raise InputError("requests is empty")
    return np.array(chunks, np.int64), np.array(ctx, np.int64)


def _trim(c: np.ndarray, r: int) -> np.ndarray:
    """Remove ``r`` tokens from the largest chunks first (water-filling), chunks stay >= 1."""
    if r <= 0:
        return c.copy()
    lo, hi = 1, int(c.max())
    while lo < hi:
        mid = (lo + hi) // 2
        if int(np.maximum(c - mid, 0).sum()) <= r:
            hi = mid
        else:
            lo = mid + 1
    new = np.minimum(c, lo)
    extra = r - int((c - new).sum())
    if extra > 0:
        cand = [i for i in sorted(range(c.size), key=lambda i: (-c[i], i)) if c[i] >= lo]
        new[cand[:extra]] -= 1
    return new


def schedule_batch_with_sla(fit, requests, sla_ms: float, *, q: float | None = None,
                            method: str = "delta", boot_samples=None) -> ScheduleDecision:
    """Keep a batch if its predicted step time meets the SLA, else shrink it.

    Problem: a scheduler has
    a candidate batch; keep it when the predicted ``T <= SLA``, otherwise
    shrink tokens or requests.  Rule, in order:

    1. predict the batch as given (features from the chunks and contexts,
       :func:`perfmodel.data.features.batch_features`); keep it if it meets the SLA;
    2. trim tokens: remove the fewest prompt tokens, taking from the largest
       prefill chunk first (water-filling; every request keeps >= 1 token,
       decodes are never trimmed), that bring the prediction within the SLA,
       searching only trims that shorten the step (the prediction falls then
       rises as tokens are removed);
    3. if no trim suffices, drop the last request and repeat from 1 with the
       remaining requests' original chunks.

    Parameters
    ----------
    fit : fitted step model (``.predict``; a FitResult for ``q``)
    requests : sequence, in scheduling order, of ints (tokens to compute this
        step), ``(chunk, context)`` tuples, dicts or objects with a chunk
        (``chunk``/``num_tokens``/``remaining_tokens``) and optionally a prior
        context (``context``/``num_computed_tokens``)
    sla_ms : step-time target
    q : optional probability: compare the ``q``-quantile with the SLA

    Returns
    -------
    ScheduleDecision
    """
    T = _target_arg("sla_ms", sla_ms)
    chunks, ctx = _parse_requests(requests)
    pred = Predictor(fit, q=q, method=method, boot_samples=boot_samples)

    def tval(c, x):
        return float(pred(batch_features(c, x))[0])

    n = chunks.size
    best = None  # (value, m) of the best failed attempt, for the message
    single = None  # (value, trim, chunks) of the first request alone at its best trim
    for m in range(n, 0, -1):
        c, x = chunks[:m], ctx[:m]
        v = tval(c, x)
        dropped = list(range(m, n))
        if v <= T:
            return ScheduleDecision(c.tolist(), list(range(m)), dropped, 0, v, T, True,
                                    "keep" if m == n else "drop",
                                    f"predicted {v:.4g} ms <= SLA {T:g} ms with {m} of {n} "
                                    "requests",
                                    x.tolist())
        rmax = int(np.maximum(c - 1, 0).sum())
        # r* = the trim that minimises the prediction (it falls then rises as tokens go)
        a, b = 0, rmax
        while a < b:
            mid = (a + b) // 2
            if tval(_trim(c, mid + 1), x) >= tval(_trim(c, mid), x):
                b = mid
            else:
                a = mid + 1
        rstar = a
        vstar = tval(_trim(c, rstar), x)
        if m == 1:
            single = (vstar, rstar, _trim(c, rstar))
        if vstar > T:
            if best is None or vstar < best[0]:
                best = (vstar, m)
            continue
        lo, hi = 0, rstar  # tval(trim lo) > T >= tval(trim hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if tval(_trim(c, mid), x) <= T:
                hi = mid
            else:
                lo = mid
        ct = _trim(c, hi)
        vt = tval(ct, x)
        act = "trim" if m == n else "drop+trim"
        return ScheduleDecision(ct.tolist(), list(range(m)), dropped, hi, vt, T, True, act,
                                f"trimmed {hi} prompt tokens (largest chunks first) with {m} "
                                f"of {n} "
                                f"requests: predicted {vt:.4g} ms <= SLA {T:g} ms", x.tolist())
    v1, r1, c1 = single
    return ScheduleDecision(
        c1.tolist(), [0], list(range(1, n)), r1, v1, T, False, "infeasible",
        f"infeasible: no leading subset of the requests, with trimmed chunks, meets SLA {T:g} ms "
        f"(best {best[0]:.4g} ms with {best[1]} request(s)); returning the first request alone "
        "at its fastest chunk so that the scheduler progresses", ctx[:1].tolist())
