"""Context-aware members of the step-latency family that keep the saturation core of ``seed_id``.

Problem
-------
``B`` and ``S`` do not see attention: a prefill chunk of ``c_i`` tokens on
top of ``ctx_i`` cached tokens computes ``c_i (ctx_i + c_i/2)`` query-key
pairs, and every request reads its ``ctx_i`` cached keys and values from
memory (docs/model.md, Context-aware members).  The members here add these costs to the
identifiable seed form ``seed_id`` (:mod:`perfmodel.core.models_seed`) and keep its reading: a fixed overhead,
per-request and per-token overheads, and token work divided by a
throughput that saturates in ``B`` and ``S``.

One general form, :class:`SatCtxModel`, covers the members; each switches
terms on::

    u = 1 - exp(-k_B B)            v = 1 - exp(-k_S S)
    W = [a_0] + a_1 S + [a_attn A]
    T = tau_0 + W / (u v) + tau_B B + tau_S S + [c_attn A]
          + [c_kv K] + [c_kv_mixed K [A > 0]]

with ``A = attn_prefill`` (query-key pairs of the prefill chunks, c_i > 1)
and ``K`` the cached tokens read (``decode_ctx``: decode requests only;
``ctx_sum``: every request), all from :func:`perfmodel.data.trace.step_features`.

Members
-------
``seed_kv`` (8 parameters)
    ``seed_id + c_kv decode_ctx``: decode KV reads only.
``seed_attn`` (9)
    prefill attention *inside* the saturating work (``a_attn``: ms per
    query-key pair at saturated throughput: attention compute shares the
    matrix units' throughput with the token-linear work) plus
    ``c_kv decode_ctx``.
``seed_attn_kv`` (10)
    ``seed_attn`` with the KV-read term on every request's context
    (``ctx_sum``) and a second KV cost, ``c_kv_mixed``, that applies only
    in steps that compute a prefill chunk.  Reading: a decode-only step runs
    attention on the decode path (FlashAttention folds the grouped query
    heads into the query dimension when every query has length 1, so a
    decode reads its KV cache at memory speed), while a step with a prefill
    chunk runs one prefill-tuned varlen launch in which each short request
    pads a query tile: its cached tokens then cost compute, not just
    memory.  On the GPU trace (``data/gpu``: 8 layers of Llama-3-8B, H200)
    the two costs fit to about 1.2e-5 and 3.8e-5 ms per cached token.
``seed_ctx_mono`` (9) -- recommended for traces with per-request context
    (``perfmodel.core.model.RECOMMENDED['context']``)
    ``tau_0 + a_1 S/(u v) + tau_B B + tau_S S + c_attn A
    + (c_kv + c_kv_mixed [A > 0]) ctx_sum``: the terms of ``seed_attn_kv``
    with no fixed work ``a_0`` (the fixed cost is ``tau_0``) and the
    attention term additive, which makes it monotone (below) at a held-out
    cost of about 0.1 MAPE point on the GPU trace and none on Splitwise.

``seed_kv``, ``seed_attn`` and ``seed_attn_kv`` nest ``seed_id`` (added
parameters at 0 give it back exactly), so the nested F and likelihood-ratio
tests of :mod:`perfmodel.stats.adequacy` apply (conservatively: the null lies on
the boundary of the box); ``seed_ctx_mono`` nests ``seed_id`` with
``a_0 = 0`` and is compared by AIC/BIC.

Monotonicity (where it holds, exactly)
--------------------------------------
Adding a token to a step at fixed ``B`` is one of: growing a prefill chunk
``c_i >= 2`` by one (``S + 1``, ``A + ctx_i + c_i + 1/2``); turning a decode
request into a 2-token chunk (``S + 1``, ``A + 2 ctx_i + 2``, ``decode_ctx -
ctx_i``, ``ctx_sum`` unchanged, ``[A > 0]`` can only switch on); or a
request's context growing by one (``ctx_sum + 1``, ``A + c_i`` for a chunk).

* ``seed_ctx_mono``: every term is non-decreasing in ``S``, ``A``,
  ``ctx_sum`` and ``[A > 0]`` for *every* parameter in the box
  (``S / (1 - e^{-k S})`` is increasing in ``S`` because
  ``1 - e^{-x} - x e^{-x} >= 0``), so ``T`` never decreases when a token is
  added, for all ``S >= 1``.  Checked over the fitted parameter box by a
  hypothesis property test (``tests/stats/test_compare.py``).
* ``seed_id``, ``seed_kv``, ``seed_attn``, ``seed_attn_kv``: with ``a_0 > 0``
  (or ``a_attn A > 0``) the core ``W/(u v)`` falls from ``+inf`` at small ``S``
  (docs/model.md, Monotonicity); ``T`` rises with a token only once ``S`` is past
  :meth:`SaturationBase.rising_from` of ``seed_id`` with ``a_0`` replaced by
  ``a_0 + a_attn A``.  ``seed_kv`` and ``seed_attn`` can also fall when a
  decode becomes a 2-token chunk: they stop charging ``c_kv ctx_i``.
* Adding a *request* (``B + 1``) can lower ``T`` in every member through
  the saturation factor ``u(B)`` unless ``tau_B`` covers it, as in ``seed_id``.
"""
from __future__ import annotations

import numpy as np

from perfmodel.core.model_base import Model, Param
from perfmodel.core.models_seed import SEED_PARAMS, SaturationBase, SeedIdModel, saturation

__all__ = [
    "MEMBERS",
    "SatCtxModel",
    "SeedAttnKvModel",
    "SeedAttnModel",
    "SeedCtxMonoModel",
    "SeedCtxMonoNoKBModel",
    "SeedCtxMonoNoKSModel",
    "SeedKvModel",
]

_TAU0, _A0, _A1, _KB, _KS, _TAUB, _TAUS = (
    SEED_PARAMS[k] for k in ("tau_0", "a_0", "a_1", "k_B", "k_S", "tau_B", "tau_S"))
_SEED_ID = SeedIdModel()

_AATTN = Param("a_attn", "ms/token^2", 0.0, 1e2,
               "prefill attention work per query-key pair over peak throughput (saturating)",
               {"attn_prefill": 1.0})
_CATTN = Param("c_attn", "ms/token^2", 0.0, 1e2,
               "cost per query-key pair of prefill attention (additive, not saturating)",
               {"attn_prefill": 1.0})
_CKV_DEC = Param("c_kv", "ms/token", 0.0, 1e2,
                 "cost per cached token read by a decode request (memory-bound)",
                 {"decode_ctx": 1.0})
_CKV_ALL = Param("c_kv", "ms/token", 0.0, 1e2,
                 "cost per cached token read by any request (memory-bound)", {"ctx_sum": 1.0})
_CKV_MIX = Param("c_kv_mixed", "ms/token", 0.0, 1e2,
                 "extra cost per cached token in a step that also computes a prefill chunk "
                 "(short requests pad a query tile of the prefill attention launch)",
                 {"ctx_sum": 1.0})


class SatCtxModel(SaturationBase):
    """General context-aware saturation form (see the module docstring).

    Subclasses set the switches ``attn_in_work`` (``a_attn A`` inside the
    saturating work), ``kv_feature`` (None, ``'decode_ctx'`` or
    ``'ctx_sum'``: the ``c_kv`` term) and ``kv_mixed`` (the ``c_kv_mixed``
    term, on ``kv_feature``); ``params`` and ``requires`` follow.
    """

    fixed_work = True
    saturate_B = True
    saturate_S = True
    attn_in_work = False
    attn_add = False
    kv_feature: str | None = None
    kv_mixed = False

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        ps = ([_TAU0] + ([_A0] if cls.fixed_work else []) + [_A1]
              + ([_KB] if cls.saturate_B else []) + ([_KS] if cls.saturate_S else []))
        if cls.attn_in_work:
            ps.append(_AATTN)
        ps += [_TAUB, _TAUS]
        if cls.attn_add:
            ps.append(_CATTN)
        req = ["B", "S"]
        if cls.attn_in_work or cls.attn_add or cls.kv_mixed:
            req.append("attn_prefill")
        if cls.kv_feature is not None:
            ps.append(_CKV_DEC if cls.kv_feature == "decode_ctx" else _CKV_ALL)
            req.append(cls.kv_feature)
        if cls.kv_mixed:
            if cls.kv_feature != "ctx_sum":
                raise TypeError("kv_mixed needs kv_feature = 'ctx_sum'")
            ps.append(_CKV_MIX)
        cls.params = tuple(ps)
        cls.requires = tuple(req)

    # ---- core -----------------------------------------------------------
    def _terms(self, th, f):
        g = dict(zip(self.param_names, th))
        B, S = f["B"], f["S"]
        # an ablated factor is 1 (its rate at +inf): the work no longer saturates in B (or S)
        u, du = saturation(g["k_B"], B) if self.saturate_B else (np.ones_like(B), np.zeros_like(B))
        v, dv = saturation(g["k_S"], S) if self.saturate_S else (np.ones_like(S), np.zeros_like(S))
        W = g["a_1"] * S + (g["a_0"] if self.fixed_work else 0.0)
        if self.attn_in_work:
            W = W + g["a_attn"] * f["attn_prefill"]
        return g, B, S, u, du, v, dv, W

    def _mixed(self, f):
        return np.where(f["attn_prefill"] > 0, f[self.kv_feature], 0.0)

    def _predict(self, th, f):
        g, B, S, u, _du, v, _dv, W = self._terms(th, f)
        t = g["tau_0"] + W / (u * v) + g["tau_B"] * B + g["tau_S"] * S
        if self.attn_add:
            t = t + g["c_attn"] * f["attn_prefill"]
        if self.kv_feature is not None:
            t = t + g["c_kv"] * f[self.kv_feature]
        if self.kv_mixed:
            t = t + g["c_kv_mixed"] * self._mixed(f)
        return t

    def _jacobian(self, th, f):
        _g, B, S, u, du, v, dv, W = self._terms(th, f)
        inv = 1.0 / (u * v)
        cols = {"tau_0": np.ones_like(B), "a_0": inv, "a_1": S * inv,
                "k_B": -W * inv * du / u, "k_S": -W * inv * dv / v, "tau_B": B, "tau_S": S}
        if self.attn_in_work:
            cols["a_attn"] = f["attn_prefill"] * inv
        if self.attn_add:
            cols["c_attn"] = f["attn_prefill"]
        if self.kv_feature is not None:
            cols["c_kv"] = f[self.kv_feature]
        if self.kv_mixed:
            cols["c_kv_mixed"] = self._mixed(f)
        return np.column_stack([cols[k] for k in self.param_names])

    def _extend(self, f):
        z = np.zeros_like(f["S"])
        return {**f, **{k: z for k in self.requires if k not in f}}

    # ---- starting points ------------------------------------------------
    def initial_guess(self, feats, y):
        """``seed_id``'s guess; each added term starts at 5% of the median step."""
        f = self.check_features(feats)
        y = np.asarray(y, float)
        start = dict(zip(_SEED_ID.param_names, _SEED_ID.initial_guess(f, y)))
        med_y = float(np.median(y))

        def per(key):
            x = f[key]
            return 0.05 * med_y / (float(np.median(x[x > 0])) if np.any(x > 0) else 1.0)

        if self.attn_in_work:
            start["a_attn"] = per("attn_prefill")
        if self.attn_add:
            start["c_attn"] = per("attn_prefill")
        if self.kv_feature is not None:
            start["c_kv"] = per(self.kv_feature)
        if self.kv_mixed:
            start["c_kv_mixed"] = per(self.kv_feature)
        return self.clip([start[n] for n in self.param_names])

    def seed_heuristic(self, feats, y):
        """The heuristic start (docs/model.md, Initialisation) for the shared parameters."""
        f = self.check_features(feats)
        h = dict(zip(_SEED_ID.param_names, _SEED_ID.seed_heuristic(f, y)))
        guess = dict(zip(self.param_names, self.initial_guess(f, y)))
        return self.clip([h.get(n, guess[n]) for n in self.param_names])


class SeedKvModel(SatCtxModel):
    """``seed_id`` plus a decode KV-read term: ``T = seed_id(B, S) + c_kv decode_ctx``."""

    name = "seed_kv"
    formula = "seed_id(B,S) + c_kv*decode_ctx"
    kv_feature = "decode_ctx"


class SeedAttnModel(SatCtxModel):
    """Prefill attention inside the saturating work, decode KV reads additive.

    ``T = tau_0 + (a_0 + a_1 S + a_attn A)/(u v) + tau_B B + tau_S S + c_kv decode_ctx``.
    Prefill attention is matrix-unit compute like the token-linear work, so
    it is divided by the same saturating throughput; a decode request
    streams its KV cache, a cost per cached token that does not saturate.
    """

    name = "seed_attn"
    formula = ("tau_0 + (a_0 + a_1*S + a_attn*attn_prefill)/((1-exp(-k_B*B))*(1-exp(-k_S*S)))"
               " + tau_B*B + tau_S*S + c_kv*decode_ctx")
    attn_in_work = True
    kv_feature = "decode_ctx"


class SeedAttnKvModel(SatCtxModel):
    """``seed_attn`` with KV reads of every request and a mixed-step KV cost.

    ``T = tau_0 + (a_0 + a_1 S + a_attn A)/(u v) + tau_B B + tau_S S
    + (c_kv + c_kv_mixed [A > 0]) ctx_sum``; see the module docstring for
    the reading of ``c_kv_mixed`` and where ``T`` is monotone.
    """

    name = "seed_attn_kv"
    formula = ("tau_0 + (a_0 + a_1*S + a_attn*attn_prefill)/((1-exp(-k_B*B))*(1-exp(-k_S*S)))"
               " + tau_B*B + tau_S*S + (c_kv + c_kv_mixed*[attn_prefill>0])*ctx_sum")
    attn_in_work = True
    kv_feature = "ctx_sum"
    kv_mixed = True


class SeedCtxMonoModel(SatCtxModel):
    """The recommended context-aware member: monotone in every token added.

    ``T = tau_0 + a_1 S/(u v) + tau_B B + tau_S S + c_attn A
    + (c_kv + c_kv_mixed [A > 0]) ctx_sum`` with ``u = 1 - e^{-k_B B}``,
    ``v = 1 - e^{-k_S S}``, ``A = attn_prefill``.  No fixed work ``a_0`` (the
    fixed cost is ``tau_0``), attention additive: at fixed ``B`` the step
    time never decreases when a token is added, for every parameter in the
    box (module docstring).
    """

    name = "seed_ctx_mono"
    formula = ("tau_0 + a_1*S/((1-exp(-k_B*B))*(1-exp(-k_S*S))) + tau_B*B + tau_S*S"
               " + c_attn*attn_prefill + (c_kv + c_kv_mixed*[attn_prefill>0])*ctx_sum")
    fixed_work = False
    attn_add = True
    kv_feature = "ctx_sum"
    kv_mixed = True


class SeedCtxMonoNoKBModel(SeedCtxMonoModel):
    """Ablation of the model of record: ``seed_ctx_mono`` without the batch factor ``u(B)``.

    ``T = tau_0 + a_1 S/(1 - e^{-k_S S}) + tau_B B + tau_S S + c_attn A
    + (c_kv + c_kv_mixed [A > 0]) ctx_sum``: the limit ``k_B -> inf`` of
    ``seed_ctx_mono`` (nested: its predictions are those of
    ``seed_ctx_mono`` with ``k_B`` at a rate where ``u(1) = 1`` to double
    precision).  Fitted and compared on request (``ablation_of``), to test
    on held-out steps whether the batch saturation is needed.
    """

    name = "seed_ctx_mono_nokb"
    formula = ("tau_0 + a_1*S/(1-exp(-k_S*S)) + tau_B*B + tau_S*S"
               " + c_attn*attn_prefill + (c_kv + c_kv_mixed*[attn_prefill>0])*ctx_sum")
    saturate_B = False
    ablation_of = "seed_ctx_mono"


class SeedCtxMonoNoKSModel(SeedCtxMonoModel):
    """Ablation of the model of record: ``seed_ctx_mono`` without the token factor ``v(S)``.

    ``T = tau_0 + a_1 S/(1 - e^{-k_B B}) + tau_B B + tau_S S + c_attn A
    + (c_kv + c_kv_mixed [A > 0]) ctx_sum``: the limit ``k_S -> inf`` (see
    :class:`SeedCtxMonoNoKBModel`).
    """

    name = "seed_ctx_mono_noks"
    formula = ("tau_0 + a_1*S/(1-exp(-k_B*B)) + tau_B*B + tau_S*S"
               " + c_attn*attn_prefill + (c_kv + c_kv_mixed*[attn_prefill>0])*ctx_sum")
    saturate_S = False
    ablation_of = "seed_ctx_mono"


#: the members of this module, in registration order (registered by :mod:`perfmodel.core.model`)
MEMBERS: tuple[Model, ...] = (SeedKvModel(), SeedAttnModel(), SeedAttnKvModel(),
                              SeedCtxMonoModel(), SeedCtxMonoNoKBModel(), SeedCtxMonoNoKSModel())
