"""The saturation (seed) members of the step-latency model family.

Problem
-------
Predict the wall time ``T`` (ms) of one engine step from the number of requests
``B`` in the step, the number of tokens ``S`` it computes and, for the
context-aware members, per-request chunk sizes and prior context lengths.
Every member is a :class:`~perfmodel.core.model_base.Model`: a vectorised,
numerically stable ``predict`` (``expm1`` for the saturation factors, so no
overflow for large ``S``), an analytic ``jacobian``, and one tuple of
:class:`~perfmodel.core.model_base.Param` giving each parameter's name, unit,
bounds and physical reading.  This module holds the members built on the
throughput-saturation form (docs/model.md, The saturation form); the context-aware members
that keep its core are in :mod:`perfmodel.core.models_ctx`, and all are registered
in :mod:`perfmodel.core.model` (``MODELS``, ``get_model``).

Members
-------
``seed``
    The 8-parameter throughput-saturation form the project started from
    (docs/model.md, The saturation form)::

        Thr(B,S) = P_max (1 - exp(-k_B B)) (1 - exp(-k_S S))
        T(B,S)   = tau_0 + (w_0 + w_1 S) / Thr(B,S) + tau_B B + tau_S S

    ``w_0``, ``w_1`` and ``P_max`` enter only through ``w_0/P_max`` and
    ``w_1/P_max``: scaling all three by one factor leaves every prediction
    unchanged, so the form is *not identifiable* and is fitted through
    ``seed_id`` (see :meth:`SeedModel.to_identifiable`).
``seed_id``
    The identifiable form that is actually fitted, with ``a_0 = w_0/P_max``
    (ms) and ``a_1 = w_1/P_max`` (ms/token)::

        T = tau_0 + (a_0 + a_1 S) / ((1 - e^{-k_B B})(1 - e^{-k_S S})) + tau_B B + tau_S S

``seed_gamma``
    The gamma-corrected form (docs/model.md, Gamma correction), in
    identifiable parameters::

        T = tau_0 + (a_0 + a_1 S)/(u v) (1 + gamma_B B + gamma_S S) + tau_B B + tau_S S

``seed_ctx``
    ``seed_id`` plus two context terms (see :class:`SeedCtxModel`).

The shared parameters (:data:`SEED_PARAMS`) and the saturation factor
(:func:`saturation`) are public for the members of :mod:`perfmodel.core.models_ctx`.

Monotonicity
------------
With ``a_0 > 0`` the saturation members are *not* monotone in ``S``: ``T``
falls from ``+inf`` as ``S -> 0`` and rises again (docs/model.md, Monotonicity).
:meth:`SaturationBase.rising_from` gives the smallest ``S`` from which ``T``
is non-decreasing at a given ``B``; SLA inversion searches only that branch.
"""
from __future__ import annotations

import numpy as np

from perfmodel.core.model_base import Model, Param

__all__ = [
    "MEMBERS",
    "SEED_PARAMS",
    "SaturationBase",
    "SeedCtxModel",
    "SeedGammaModel",
    "SeedIdModel",
    "SeedModel",
    "saturation",
]


# ---------------------------------------------------------------------------
# shared pieces of the saturation family
# ---------------------------------------------------------------------------

def saturation(k, x):
    """Return (1 - exp(-k x), x exp(-k x)) stably: the factor and its d/dk."""
    u = -np.expm1(-k * x)
    du = x * np.exp(-k * x)
    return u, du


def _slope(x, y) -> float:
    x = np.asarray(x, float)
    y = np.asarray(y, float)
    if x.size < 2 or np.ptp(x) == 0:
        return 0.0
    return float(np.polyfit(x, y, 1)[0])


_TAU0 = Param("tau_0", "ms", 1e-6, 1e5, "fixed per-step overhead (launches, sync, scheduling)")
_TAUB = Param("tau_B", "ms/request", 0.0, 1e3, "per-request overhead (metadata, sampling)",
              {"B": 1.0})
_TAUS = Param("tau_S", "ms/token", 0.0, 1e2, "per-token overhead outside the saturating work",
              {"S": 1.0})
_KB = Param("k_B", "1/request", 1e-6, 1e3,
            "saturation rate of throughput in the number of requests", {"B": 1.0})
_KS = Param("k_S", "1/token", 1e-8, 1e2,
            "saturation rate of throughput in the number of tokens", {"S": 1.0})
_A0 = Param("a_0", "ms", 0.0, 1e5, "fixed work over peak throughput, w_0/P_max")
_A1 = Param("a_1", "ms/token", 0.0, 1e3,
            "per-token work over peak throughput, w_1/P_max: the ms per token at saturation",
            {"S": 1.0})

#: the parameters shared by the saturation members, by name (tau_0, a_0, a_1, k_B, k_S,
#: tau_B, tau_S)
SEED_PARAMS: dict[str, Param] = {p.name: p for p in (_TAU0, _A0, _A1, _KB, _KS, _TAUB, _TAUS)}


class SaturationBase(Model):
    """Common helpers of the saturation members (features B and S)."""

    def rising_from(self, theta, batch_size: float, s_max: float = 2**24) -> float:
        """Smallest integer S >= 1 from which T(B, S) is non-decreasing in S.

        The saturation members fall from ``+inf`` at small S (when ``a_0 > 0``)
        and then rise; the fall can last up to a few multiples of ``1/k_S``.
        The search scans a log grid up to ``max(s_max, 50/k_S)`` for the last
        fall, then bisects on integers for the first S with
        ``T(S+1) >= T(S)``.  SLA inversion searches only ``[S0, inf)``.
        """
        theta = self.check_theta(theta)
        names = self.param_names
        horizon = float(s_max)
        if "k_S" in names:
            horizon = max(horizon, 50.0 / theta[names.index("k_S")])
        grid = np.unique(np.round(np.geomspace(1, horizon, 4000)))
        t = self._eval_s(theta, batch_size, grid)
        falling = np.nonzero(np.diff(t) < 0)[0]
        if falling.size == 0:
            return 1.0
        lo = int(grid[falling[-1]])
        hi = int(grid[min(falling[-1] + 2, grid.size - 1)])
        # invariant: T(lo+1) < T(lo); find the first s in (lo, hi] with T(s+1) >= T(s)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            tm = self._eval_s(theta, batch_size, np.array([mid, mid + 1], float))
            if tm[1] >= tm[0]:
                hi = mid
            else:
                lo = mid
        return float(hi)

    def _eval_s(self, theta, batch_size, s):
        f = {"B": np.full(s.shape, float(batch_size)), "S": np.asarray(s, float)}
        return self._predict(theta, self._extend(f))

    def _extend(self, f):
        return f

    def _seed_heuristic(self, feats, y):
        """The heuristic start (docs/model.md, Initialisation), in native parameters."""
        B = np.asarray(feats["B"], float)
        S = np.asarray(feats["S"], float)
        y = np.asarray(y, float)
        p_max = float(np.clip(np.quantile(S / y, 0.95), 1.0, 1e4))
        w1 = max(_slope(S, y), 1e-6)
        tau0 = float(np.min(y) / 2)
        w0 = 0.1 * w1 * float(np.median(S))
        del B
        return {"P_max": p_max, "k_B": 0.1, "k_S": 0.01, "w_0": w0, "w_1": w1, "tau_0": tau0,
                    "tau_B": 1e-3, "tau_S": 1e-3}


class SeedIdModel(SaturationBase):
    """Identifiable throughput-saturation form (what ``seed`` is fitted through).

    ``T = tau_0 + (a_0 + a_1 S) / ((1-e^{-k_B B})(1-e^{-k_S S})) + tau_B B + tau_S S``

    Relation to the seed form: ``a_0 = w_0/P_max``, ``a_1 = w_1/P_max``;
    ``tau_0, k_B, k_S, tau_B, tau_S`` are the seed's own. ``P_max`` itself is
    not identifiable from step times: only ratios are.
    """

    name = "seed_id"
    formula = "tau_0 + (a_0 + a_1*S)/((1-exp(-k_B*B))*(1-exp(-k_S*S))) + tau_B*B + tau_S*S"
    params = (_TAU0, _A0, _A1, _KB, _KS, _TAUB, _TAUS)

    def _parts(self, th, f):
        _tau0, a0, a1, kB, kS, _tauB, _tauS = th
        B, S = f["B"], f["S"]
        u, du = saturation(kB, B)
        v, dv = saturation(kS, S)
        work = a0 + a1 * S
        return B, S, u, du, v, dv, work

    def _predict(self, th, f):
        tau0, _a0, _a1, _kB, _kS, tauB, tauS = th
        B, S, u, _du, v, _dv, work = self._parts(th, f)
        return tau0 + work / (u * v) + tauB * B + tauS * S

    def _jacobian(self, th, f):
        _tau0, _a0, _a1, _kB, _kS, _tauB, _tauS = th
        B, S, u, du, v, dv, work = self._parts(th, f)
        inv = 1.0 / (u * v)
        return np.column_stack([
            np.ones_like(B),
            inv,
            S * inv,
            -work * inv * du / u,
            -work * inv * dv / v,
            B,
            S,
        ])

    def initial_guess(self, feats, y):
        f = self.check_features(feats)
        y = np.asarray(y, float)
        S = f["S"]
        slope = max(_slope(S, y), 1e-6)
        tau0 = float(np.min(y) / 2)
        a1 = slope
        a0 = max(float(np.min(y)) / 4, 1e-6)
        kB = 1.0 / max(float(np.median(f["B"])), 1.0)
        kS = 1.0 / max(float(np.median(S)), 1.0)
        return self.clip([tau0, a0, a1, kB, kS, 1e-3, 1e-4])

    def seed_heuristic(self, feats, y):
        """The seed's heuristic start mapped to identifiable parameters."""
        h = self._seed_heuristic(self.check_features(feats), y)
        return self.clip([h["tau_0"], h["w_0"] / h["P_max"], h["w_1"] / h["P_max"],
                          h["k_B"], h["k_S"], h["tau_B"], h["tau_S"]])


_SEED_ID = SeedIdModel()  # the identifiable core the other members build on


class SeedModel(SaturationBase):
    """The 8-parameter saturation form ``seed`` (docs/model.md, The saturation form).

    ``T = tau_0 + (w_0 + w_1 S) / (P_max (1-e^{-k_B B})(1-e^{-k_S S})) + tau_B B + tau_S S``

    Not identifiable: only ``w_0/P_max`` and ``w_1/P_max`` are determined by
    step times.  It is fitted through :class:`SeedIdModel`; a fit report
    gives intervals only for the identifiable parameters and shows ``P_max``,
    ``w_0``, ``w_1`` under the convention that ``P_max`` equals its seed
    heuristic value ``quantile(S/T, 0.95)`` (no interval: not identifiable).
    """

    name = "seed"
    formula = ("tau_0 + (w_0 + w_1*S)/(P_max*(1-exp(-k_B*B))*(1-exp(-k_S*S)))"
               " + tau_B*B + tau_S*S")
    params = (
        Param("P_max", "tokens/ms", 1e-6, 1e7, "peak throughput (not identifiable alone)"),
        _KB,
        _KS,
        Param("w_0", "token", 0.0, 1e9, "fixed work per step, in token-equivalents"),
        Param("w_1", "1", 0.0, 1e6, "work per token, in token-equivalents per token"),
        _TAU0,
        _TAUB,
        _TAUS,
    )
    fitted_as = "seed_id"
    not_identifiable = ("P_max", "w_0", "w_1")

    def _predict(self, th, f):
        pmax, kB, kS, w0, w1, tau0, tauB, tauS = th
        B, S = f["B"], f["S"]
        u, _ = saturation(kB, B)
        v, _ = saturation(kS, S)
        return tau0 + (w0 + w1 * S) / (pmax * u * v) + tauB * B + tauS * S

    def _jacobian(self, th, f):
        pmax, kB, kS, w0, w1, _tau0, _tauB, _tauS = th
        B, S = f["B"], f["S"]
        u, du = saturation(kB, B)
        v, dv = saturation(kS, S)
        g = (w0 + w1 * S) / (pmax * u * v)
        return np.column_stack([
            -g / pmax,
            -g * du / u,
            -g * dv / v,
            1.0 / (pmax * u * v),
            S / (pmax * u * v),
            np.ones_like(B),
            B,
            S,
        ])

    def to_identifiable(self, theta) -> np.ndarray:
        """Map seed parameters to ``seed_id``: (tau_0, w_0/P, w_1/P, k_B, k_S, tau_B, tau_S)."""
        pmax, kB, kS, w0, w1, tau0, tauB, tauS = self.check_theta(theta)
        return np.array([tau0, w0 / pmax, w1 / pmax, kB, kS, tauB, tauS])

    def from_identifiable(self, theta_id, p_max: float) -> np.ndarray:
        """Seed parameters for identifiable ``theta_id`` under the convention ``P_max = p_max``."""
        tau0, a0, a1, kB, kS, tauB, tauS = _SEED_ID.check_theta(theta_id)
        return np.array([p_max, kB, kS, a0 * p_max, a1 * p_max, tau0, tauB, tauS])

    def initial_guess(self, feats, y):
        h = self._seed_heuristic(self.check_features(feats), y)
        return self.clip([h[n] for n in self.param_names])


class SeedGammaModel(SaturationBase):
    """Gamma-corrected saturation form (docs/model.md, Gamma correction), identifiable parameters.

    ``T = tau_0 + (a_0 + a_1 S)/(u v) (1 + gamma_B B + gamma_S S) + tau_B B + tau_S S``
    with ``u = 1-e^{-k_B B}``, ``v = 1-e^{-k_S S}``, ``a_i = w_i / P_max``.
    The seed proposes it only where the base form is shown inadequate.
    """

    name = "seed_gamma"
    formula = ("tau_0 + (a_0 + a_1*S)/((1-exp(-k_B*B))*(1-exp(-k_S*S)))*(1+gamma_B*B+gamma_S*S)"
               " + tau_B*B + tau_S*S")
    params = (
        _TAU0, _A0, _A1, _KB, _KS,
        Param("gamma_B", "1/request", 0.0, 1e2, "relative slow-down of the work per request",
              {"B": 1.0}),
        Param("gamma_S", "1/token", 0.0, 1e1, "relative slow-down of the work per token",
              {"S": 1.0}),
        _TAUB, _TAUS,
    )

    def _parts(self, th, f):
        _tau0, _a0, _a1, kB, kS, gB, gS, _tauB, _tauS = th
        B, S = f["B"], f["S"]
        u, du = saturation(kB, B)
        v, dv = saturation(kS, S)
        g = 1.0 + gB * B + gS * S
        return B, S, u, du, v, dv, g

    def _predict(self, th, f):
        tau0, a0, a1, _kB, _kS, _gB, _gS, tauB, tauS = th
        B, S, u, _du, v, _dv, g = self._parts(th, f)
        return tau0 + (a0 + a1 * S) / (u * v) * g + tauB * B + tauS * S

    def _jacobian(self, th, f):
        _tau0, a0, a1, _kB, _kS, _gB, _gS, _tauB, _tauS = th
        B, S, u, du, v, dv, g = self._parts(th, f)
        inv = 1.0 / (u * v)
        w = (a0 + a1 * S) * inv
        return np.column_stack([
            np.ones_like(B),
            inv * g,
            S * inv * g,
            -w * g * du / u,
            -w * g * dv / v,
            w * B,
            w * S,
            B,
            S,
        ])

    def initial_guess(self, feats, y):
        th = _SEED_ID.initial_guess(feats, y)
        return self.clip(np.concatenate([th[:5], [1e-3, 1e-5], th[5:]]))


class SeedCtxModel(SaturationBase):
    """Context-aware saturation form: ``seed_id`` plus attention terms.

    ``T = seed_id(B, S) + c_attn * attn_prefill + c_kv * decode_ctx``

    ``attn_prefill = sum over prefill chunks of c_i (ctx_i + c_i/2)`` counts
    the query-key pairs of chunked-prefill attention (each of the ``c_i`` new
    tokens attends to the ``ctx_i`` cached tokens and, causally, to half its
    own chunk on average); ``decode_ctx = sum over decode requests of ctx_i``
    counts the KV-cache entries a decode step reads.  ``c_attn`` (ms per
    query-key pair) and ``c_kv`` (ms per cached token read) are the
    attention's compute and memory costs, which ``B`` and ``S`` do not see.
    Needs the trace's ``chunk_sizes`` and ``context_lens``.
    """

    name = "seed_ctx"
    formula = "seed_id(B,S) + c_attn*attn_prefill + c_kv*decode_ctx"
    params = SeedIdModel.params + (
        Param("c_attn", "ms/token^2", 0.0, 1e2,
              "cost per query-key pair of prefill attention", {"attn_prefill": 1.0}),
        Param("c_kv", "ms/token", 0.0, 1e2,
              "cost per cached context token read by a decode request", {"decode_ctx": 1.0}),
    )
    requires = ("B", "S", "attn_prefill", "decode_ctx")

    def _predict(self, th, f):
        base = _SEED_ID._predict(th[:7], f)
        return base + th[7] * f["attn_prefill"] + th[8] * f["decode_ctx"]

    def _jacobian(self, th, f):
        J = _SEED_ID._jacobian(th[:7], f)
        return np.column_stack([J, f["attn_prefill"], f["decode_ctx"]])

    def _extend(self, f):
        z = np.zeros_like(f["S"])
        return {**f, "attn_prefill": z, "decode_ctx": z}

    def initial_guess(self, feats, y):
        th = _SEED_ID.initial_guess(feats, y)
        return self.clip(np.concatenate([th, [1e-7, 1e-6]]))


#: the members of this module, in registration order
MEMBERS: tuple[Model, ...] = (SeedModel(), _SEED_ID, SeedGammaModel(), SeedCtxModel())
