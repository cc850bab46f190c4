"""Engine step times composed from a layer-profile bundle, and a fit of record to them.

Problem
-------
A published layer-profile bundle (:mod:`perfmodel.data.datasets.llmservingsim`)
times one decoder layer's kernels of a real GPU engine, not whole steps.  To
replay a GPU serving run with the package's step model we need whole-step
times for any batch the scheduler forms (per-request chunk sizes ``c_i`` and
prior contexts ``ctx_i``): :class:`StepComposer` composes them,
:func:`design_for_engine` draws batches covering an engine's range,
:func:`compose_trace` turns them into a step trace in the canonical schema
(:mod:`perfmodel.data.trace`) and :func:`fit_from_profile` fits the model of
record to that trace (the contract ``perfmodel replay --profile`` calls).

Composition of one step (all times from the bundle, microseconds -> ms)
-----------------------------------------------------------------------
With ``L`` decoder layers, ``S = sum c_i`` tokens and ``B`` requests::

    T = L * (attention + sum_dense_layer(S) + moe(S)) + embedding(S)
        + final_layernorm(S) + lm_head(B) + sampler(B)

* *dense*: every ``dense.csv`` layer at ``S`` tokens, once per decoder layer,
  ``layernorm`` twice (input and post-attention norm of a Llama/Qwen block);
  ``embedding`` and ``final_layernorm`` once per step.
* *attention* (:class:`~perfmodel.core.profile_tables.AttentionGrid`): a
  decode is a request with ``c_i = 1`` (as in :mod:`perfmodel.data.features`),
  a prefill chunk one with ``c_i > 1``.  The grid has ONE prefill-chunk axis;
  a step with several prefill chunks maps onto it so: the largest chunk
  ``p1`` (on its context ``kp1``) shares the kernel with all ``n`` decodes,
  ``A(p1, kp1, n, kd_mean)``; every other chunk ``j`` adds its pure-prefill
  time less the kernel's fixed cost, ``A(p_j, kp_j, 0, 0) - A(p_min, 0, 0, 0)``
  (one varlen kernel launch serves them all).  ``kd_mean`` is the mean decode
  context.
* *decode-length skew*: where the bundle has a skew fit
  (``meta.yaml: skew_fit.enabled``), heterogeneous decode contexts add
  ``alpha * (A(p1, kp1, n, kd_max) - A(p1, kp1, n, kd_mean))`` with
  ``alpha`` from ``skew_fit.csv`` by bucket (prefill chunk, ``n``, skew
  rate, largest decode context, prefill context; the bundle's
  ``alpha_default`` where a bucket is absent).  The skew rate of a real batch
  is taken as the fraction of decodes above the mean context (for the
  profiler's two-valued batches this is exactly its ``nb / n``).
* *lm_head / sampler* by the number of sequences ``B`` (every scheduled
  request gets logits in vLLM V1, a partial prefill chunk included).
* *MoE* (``experts > 0``): per layer ``moe(tokens, activated)`` with
  ``activated = E (1 - (1 - k/E)^tokens)``, the expected number of distinct
  experts hit by ``tokens`` tokens routed top-``k`` uniformly.  With expert
  parallelism ``ep`` each rank holds ``E/ep`` experts and receives the
  tokens of all ``ep`` data-parallel ranks, assumed equally loaded
  (``tokens = ep S``, ``activated`` over ``E/ep``).

What one layer timing includes, and what is NOT composed
--------------------------------------------------------
The bundle times kernels of a one-layer dummy model (``load_format: dummy``,
``enforce_eager: true``) on ONE GPU; TP > 1 is emulated by dividing the
per-rank shapes (``hf_overrides``).  Therefore NOT composed: the TP
all-reduces (no communication is in any timing), the expert-parallel
all-to-all, CPU-side scheduling, input preparation and detokenisation
(per-step CPU overhead: the simulator adds its own term), CUDA-graph launch
savings of the real engine (the bundle is eager), prefix-cache hits, and
idle time between steps.

Verified against: grid points held out of the interpolation, monotonicity
in tokens, decodes and context, and hand-summed steps
(``tests/core/test_compose.py``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from perfmodel._checks import check_int_range
from perfmodel.core.profile_tables import AttentionGrid, MoeTable, Table1D
from perfmodel.data.datasets.llmservingsim import (
    ModelConfig,
    ProfileBundle,
    load_model_config,
    load_profile_bundle,
)
from perfmodel.data.features import request_features, row_reduce
from perfmodel.errors import InputError

__all__ = [
    "NOT_COMPOSED",
    "StepComposer",
    "StepDesign",
    "compose_trace",
    "design_for_engine",
    "fit_from_profile",
]

#: what a composed step time leaves out (module docstring)
NOT_COMPOSED: tuple[str, ...] = (
    "TP all-reduce and expert-parallel all-to-all communication",
    "CPU scheduling, input preparation and detokenisation overhead per step",
    "CUDA-graph launch savings of the real engine (the bundle is timed eager)",
    "prefix-cache hits and idle time between steps",
)
_PER_STEP_DENSE = ("embedding", "final_layernorm")
_TWICE_PER_LAYER = ("layernorm",)


@dataclass(frozen=True)
class StepDesign:
    """Batches as flat per-request arrays: requests of step 0, then step 1, ...

    Attributes
    ----------
    chunk, context : int arrays, one value per request (``c_i``, ``ctx_i``)
    counts : requests per step
    kind : per-step label ``'decode'``, ``'prefill'`` or ``'mixed'``
    """

    chunk: np.ndarray
    context: np.ndarray
    counts: np.ndarray
    kind: np.ndarray

    @property
    def n_steps(self) -> int:
        return int(self.counts.size)


def _as_design(chunk_sizes_list, context_lens_list) -> StepDesign:
    """A :class:`StepDesign` from per-step lists, checked."""
    if len(chunk_sizes_list) != len(context_lens_list):
        raise InputError(f"chunk_sizes_list has {len(chunk_sizes_list)} steps but "
                         f"context_lens_list has {len(context_lens_list)}")
    if len(chunk_sizes_list) == 0:
        raise InputError("chunk_sizes_list is empty: give at least one step")
    counts = np.array([len(c) for c in chunk_sizes_list], dtype=np.int64)
    bad = np.nonzero(counts != np.array([len(x) for x in context_lens_list]))[0]
    if bad.size:
        raise InputError(f"steps {bad[:5].tolist()}: chunk_sizes and context_lens differ in length")
    if np.any(counts == 0):
        raise InputError(f"steps {np.nonzero(counts == 0)[0][:5].tolist()} have no request")
    c = np.concatenate([np.asarray(v, dtype=float).ravel() for v in chunk_sizes_list])
    x = np.concatenate([np.asarray(v, dtype=float).ravel() for v in context_lens_list])
    return _checked(StepDesign(c, x, counts, np.full(counts.size, "given")))


def _checked(d: StepDesign) -> StepDesign:
    c, x = d.chunk, d.context
    if not (np.all(np.isfinite(c)) and np.all(c >= 1) and np.all(c == np.round(c))):
        raise InputError("chunk sizes must be integers >= 1")
    if not (np.all(np.isfinite(x)) and np.all(x >= 0) and np.all(x == np.round(x))):
        raise InputError("context lengths must be integers >= 0")
    return d


class StepComposer:
    """Whole-step times of one engine from its bundle and model config (module docstring).

    Parameters
    ----------
    bundle : ProfileBundle, or a bundle folder path (then ``tp`` picks ``tp<N>/``)
    config : ModelConfig, or a config JSON path / registered model name
    tp : tensor-parallel degree (must match a loaded bundle's)
    ep : expert-parallel ranks whose tokens meet in each MoE block (1: none)
    """

    def __init__(self, bundle, config, *, tp: int = 1, ep: int = 1):
        tp = check_int_range("tp", tp, 1)
        self.ep = check_int_range("ep", ep, 1)
        if not isinstance(bundle, ProfileBundle):
            if not isinstance(bundle, str | Path):
                raise InputError(f"profile must be a bundle folder path or a ProfileBundle, "
                                 f"got {type(bundle).__name__}")
            bundle = load_profile_bundle(str(bundle), tp=tp)
        elif bundle.tp != tp:
            raise InputError(f"tp={tp} but the loaded bundle is its TP {bundle.tp} folder")
        if not isinstance(config, ModelConfig):
            if not isinstance(config, str | Path):
                raise InputError(f"model_config must be a config JSON path or a ModelConfig, "
                                 f"got {type(config).__name__}")
            config = load_model_config(config)
        if config.is_moe and bundle.moe is None:
            raise InputError(f"model {config.name} has {config.experts} experts but the bundle "
                             f"{bundle.source} has no moe.csv")
        if config.experts and config.experts % self.ep:
            raise InputError(f"ep={self.ep} does not divide the {config.experts} experts")
        self.bundle, self.config, self.tp = bundle, config, tp
        self.attention = AttentionGrid(bundle.attention)
        self.dense = Table1D(bundle.dense, "layer", "tokens", "dense.csv")
        self.per_seq = Table1D(bundle.per_sequence, "layer", "sequences", "per_sequence.csv")
        for name in ("lm_head", "sampler"):
            if name not in self.per_seq:
                raise InputError(f"bundle {bundle.source}: per_sequence.csv has no {name!r} rows")
        self.moe = MoeTable(bundle.moe) if config.is_moe else None
        self._skew = _SkewTable(bundle) if bundle.skew is not None else None
        self._p_min = float(self.attention.axes[0][self.attention.axes[0] > 0][0])

    # ------------------------------------------------------------------
    def parts_ms(self, design: StepDesign) -> dict[str, np.ndarray]:
        """Per-step components (ms): ``attention``, ``dense``, ``moe``, ``per_step``, ``total``."""
        c, x, counts = design.chunk, design.context, design.counts
        n = counts.size
        rows = np.repeat(np.arange(n), counts)
        B = counts.astype(float)
        S = np.bincount(rows, weights=c, minlength=n)
        attn = self._attention_us(c, x, rows, n)
        dense = np.zeros(n)
        for name in self.dense.curves:
            if name in _PER_STEP_DENSE:
                continue
            dense += self.dense(name, S) * (2.0 if name in _TWICE_PER_LAYER else 1.0)
        moe = self._moe_us(S) if self.moe is not None else np.zeros(n)
        once = sum((self.dense(k, S) for k in _PER_STEP_DENSE if k in self.dense), np.zeros(n))
        once = once + self.per_seq("lm_head", B) + self.per_seq("sampler", B)
        L = self.config.layers
        parts = {"attention": L * attn / 1e3, "dense": L * dense / 1e3, "moe": L * moe / 1e3,
                 "per_step": once / 1e3}
        parts["total"] = parts["attention"] + parts["dense"] + parts["moe"] + parts["per_step"]
        return parts

    def compose(self, design: StepDesign) -> np.ndarray:
        """Step times (ms) of every step of ``design``."""
        if not isinstance(design, StepDesign):
            raise InputError(f"design must be a StepDesign, got {type(design).__name__}")
        return self.parts_ms(_checked(design))["total"]

    def step_ms(self, chunk_sizes_list, context_lens_list) -> np.ndarray:
        """Step times (ms) looked up directly in the bundle, one per step.

        Parameters
        ----------
        chunk_sizes_list, context_lens_list : sequences (one per step) of
            per-request chunk sizes (>= 1) and prior contexts (>= 0)
        """
        return self.parts_ms(_as_design(chunk_sizes_list, context_lens_list))["total"]

    # ------------------------------------------------------------------
    def _attention_us(self, c, x, rows, n) -> np.ndarray:
        dec, pre = c == 1, c > 1
        n_dec = np.bincount(rows, weights=dec.astype(float), minlength=n)
        kd_sum = np.bincount(rows, weights=np.where(dec, x, 0.0), minlength=n)
        kd_mean = np.divide(kd_sum, n_dec, out=np.zeros(n), where=n_dec > 0)
        kd_max = row_reduce(np.where(dec, x, 0.0), np.bincount(rows, minlength=n), "max")
        # the largest prefill chunk of each step (first one on ties) carries the decodes
        order = np.lexsort((-np.where(pre, c, 0.0), rows))
        first = np.zeros(c.size, bool)
        starts = np.r_[0, np.cumsum(np.bincount(rows, minlength=n))[:-1]]
        first[order[starts]] = True
        main = first & pre
        p1 = np.zeros(n)
        kp1 = np.zeros(n)
        p1[rows[main]], kp1[rows[main]] = c[main], x[main]
        A = self.attention
        t = A(p1, kp1, n_dec, kd_mean)
        extra = pre & ~main
        if extra.any():
            add = A(c[extra], x[extra], 0, 0) - A(self._p_min, 0, 0, 0)
            t += np.bincount(rows[extra], weights=np.maximum(add, 0.0), minlength=n)
        if self._skew is not None:
            het = (n_dec >= 2) & (kd_max > kd_mean)
            if het.any():
                above = np.bincount(rows, weights=(dec & (x > kd_mean[rows])).astype(float),
                                    minlength=n)
                rate = np.divide(above, n_dec, out=np.zeros(n), where=n_dec > 0)
                h = np.nonzero(het)[0]
                alpha = self._skew.alpha(p1[h], n_dec[h], rate[h], kd_max[h], kp1[h])
                t[h] += alpha * np.maximum(A(p1[h], kp1[h], n_dec[h], kd_max[h])
                                           - A(p1[h], kp1[h], n_dec[h], kd_mean[h]), 0.0)
        return t

    def _moe_us(self, S) -> np.ndarray:
        cfg = self.config
        tokens = self.ep * S
        local = cfg.experts / self.ep
        k = min(cfg.experts_per_token, cfg.experts) or 1
        activated = local * (1.0 - (1.0 - k / cfg.experts) ** tokens)
        return self.moe(tokens, np.maximum(activated, 1.0))


class _SkewTable:
    """alpha by bucket from ``skew_fit.csv`` and the axes in ``meta.yaml`` (see module)."""

    def __init__(self, bundle: ProfileBundle):
        axes = ((bundle.meta.get("skew_fit") or {}).get("bucket_axes") or {})
        need = ("n_bins", "n_labels", "skew_rate_bins", "skew_rate_labels", "kv_big_bins",
                "kv_big_labels", "kp_bins", "kp_labels")
        miss = [k for k in need if k not in axes]
        if miss:
            raise InputError(f"bundle {bundle.source}: meta.yaml skew_fit.bucket_axes lacks {miss}")
        self.bins = {k: np.asarray(axes[f"{k}_bins"], float)
                     for k in ("n", "skew_rate", "kv_big", "kp")}
        labels = {k: list(axes[f"{k}_labels"]) for k in ("n", "skew_rate", "kv_big", "kp")}
        sk = bundle.skew
        self.pc = np.unique(sk["pc"].to_numpy(float))
        shape = (self.pc.size, *(len(labels[k]) for k in ("n", "skew_rate", "kv_big", "kp")))
        self.table = np.full(shape, float(bundle.alpha_default or 0.0))
        cols = {"n": "n_label", "skew_rate": "skew_rate_label", "kv_big": "kv_big_label",
                "kp": "kp_label"}
        idx = [np.searchsorted(self.pc, sk["pc"].to_numpy(float))]
        ok = np.ones(len(sk), bool)
        for k, col in cols.items():
            pos = {lab: i for i, lab in enumerate(labels[k])}
            ii = sk[col].map(pos)
            ok &= ii.notna().to_numpy()
            idx.append(ii.fillna(0).to_numpy(int))
        alpha = sk["alpha"].to_numpy(float)
        ok &= np.isfinite(alpha)
        self.table[tuple(i[ok] for i in idx)] = alpha[ok]

    def _bin(self, key, v) -> np.ndarray:
        b = self.bins[key]
        return np.clip(np.searchsorted(b, v, side="left") - 1, 0, b.size - 2)

    def alpha(self, pc, n, rate, kv_big, kp) -> np.ndarray:
        pos = self.pc[self.pc > 0]
        lp = np.log(np.maximum(pc, 1.0))
        near = np.abs(lp[:, None] - np.log(pos)[None, :]).argmin(axis=1) if pos.size else 0
        ipc = np.where(pc > 0, np.searchsorted(self.pc, pos[near]) if pos.size else 0, 0)
        return self.table[ipc, self._bin("n", n), self._bin("skew_rate", np.clip(rate, 0, 1)),
                          self._bin("kv_big", kv_big), self._bin("kp", kp)]


# ---------------------------------------------------------------------------
# a design covering an engine's range, the composed trace, the fit
# ---------------------------------------------------------------------------


def _contexts(rng, n: int, max_context: int) -> np.ndarray:
    """``n`` decode contexts of one step: uniform below a log-uniform step level."""
    level = np.exp(rng.uniform(np.log(16), np.log(max(max_context, 17))))
    return rng.integers(1, int(level) + 1, size=n)


def _prefill_chunks(rng, budget: int, k: int, max_context: int):
    """``k`` prefill chunks summing to <= ``budget`` (each >= 2) and their prior contexts."""
    cuts = np.sort(rng.integers(1, budget, size=k - 1)) if k > 1 else np.array([], int)
    sizes = np.diff(np.r_[0, cuts, budget]).astype(int)
    sizes = np.maximum(sizes, 2)
    ctx = np.where(rng.random(k) < 0.5, 0,
                   rng.integers(0, max(max_context - budget, 1) + 1, size=k))
    return sizes, ctx


def design_for_engine(max_num_seqs: int, max_num_batched_tokens: int, max_context: int,
                      n_steps: int = 4000, seed: int = 0) -> StepDesign:
    """Batches covering what an engine with these limits can schedule.

    Problem: the model of record must be fitted to composed steps over the
    whole range a serving run reaches, without knowing the run's steps.

    The steps are drawn, seeded: 40 % decode-only (``B`` uniform in
    ``1..max_num_seqs``, contexts uniform below a log-uniform level up to
    ``max_context``), 20 % prefill-only (1-3 chunks whose total is
    log-uniform up to the token budget, prior context 0 or up to
    ``max_context``), 40 % mixed (``n`` decodes and 1-2 prefill chunks filling
    the rest of the budget, as a chunked-prefill scheduler does, or a
    smaller remainder half of the time).  Every step has
    ``S <= max_num_batched_tokens`` and ``B <= max_num_seqs``.

    Returns
    -------
    StepDesign
    """
    max_num_seqs = check_int_range("max_num_seqs", max_num_seqs, 1)
    budget = check_int_range("max_num_batched_tokens", max_num_batched_tokens, 2)
    max_context = check_int_range("max_context", max_context, 1)
    n_steps = check_int_range("n_steps", n_steps, 3)
    seed = check_int_range("seed", seed, 0)
    rng = np.random.default_rng(seed)
    kinds = rng.choice(np.array(["decode", "prefill", "mixed"]), size=n_steps, p=[0.4, 0.2, 0.4])
    if max_num_seqs < 2 or budget < 4:
        kinds[kinds == "mixed"] = "prefill"
    chunks, ctxs, counts = [], [], np.zeros(n_steps, np.int64)
    for s, kind in enumerate(kinds):
        if kind == "decode":
            b = int(rng.integers(1, min(max_num_seqs, budget) + 1))
            c, x = np.ones(b, int), _contexts(rng, b, max_context)
        elif kind == "prefill":
            total = int(np.exp(rng.uniform(np.log(2), np.log(budget))))
            k = int(min(rng.integers(1, 4), max(total // 2, 1), max_num_seqs))
            c, x = _prefill_chunks(rng, max(total, 2 * k), k, max_context)
        else:
            nd = int(rng.integers(1, max(min(max_num_seqs - 1, budget - 2), 1) + 1))
            k = int(max(min(rng.integers(1, 3), max_num_seqs - nd, (budget - nd) // 2), 1))
            room = budget - nd
            rest = room if rng.random() < 0.5 else int(rng.integers(2 * k, room + 1))
            pc, px = _prefill_chunks(rng, max(rest, 2 * k), k, max_context)
            c = np.r_[np.ones(nd, int), pc]
            x = np.r_[_contexts(rng, nd, max_context), px]
        chunks.append(c)
        ctxs.append(x)
        counts[s] = c.size
    return StepDesign(np.concatenate(chunks).astype(float), np.concatenate(ctxs).astype(float),
                      counts, kinds)


def _joined(values: np.ndarray, counts: np.ndarray) -> list[str]:
    """Per-step ``';'``-joined integers (the trace's list-column format)."""
    text = values.astype(np.int64).astype(str)
    cuts = np.cumsum(counts)[:-1]
    return [";".join(part) for part in np.split(text, cuts)]


def compose_trace(composer: StepComposer, design: StepDesign) -> pd.DataFrame:
    """The composed steps as a step trace in the canonical schema.

    Columns: ``batch_size``, ``total_tokens``, ``duration_ms`` (composed),
    ``chunk_sizes``, ``context_lens`` (``';'``-joined), ``num_decode``,
    ``num_prefill`` and ``phase`` (the design's kind of step); it passes
    :func:`perfmodel.data.trace.validate_trace`.
    """
    if not isinstance(composer, StepComposer):
        raise InputError(f"composer must be a StepComposer, got {type(composer).__name__}")
    y = composer.compose(design)
    f = request_features(design.chunk, design.context, design.counts, counts_keys=True)
    return pd.DataFrame({
        "batch_size": design.counts.astype(np.int64),
        "total_tokens": f["S"].astype(np.int64),
        "duration_ms": y,
        "chunk_sizes": _joined(design.chunk, design.counts),
        "context_lens": _joined(design.context, design.counts),
        "num_decode": f["n_decode"].astype(np.int64),
        "num_prefill": f["n_prefill"].astype(np.int64),
        "phase": design.kind,
    })


def fit_from_profile(profile, model_config, *, tp: int = 1, max_num_seqs: int,
                     max_num_batched_tokens: int, max_context: int, model=None,
                     n_steps: int = 4000, seed: int = 0, ep: int = 1):
    """Fit the step model to steps composed from a profile bundle.

    Problem: a GPU serving run is replayed with the package's step model,
    whose parameters must come from the bundle alone (never from the run's
    measured timings).  This composes a design covering the engine's range
    (:func:`design_for_engine`), fits ``model`` to it and reports the fit's
    error against the composed steps.

    Parameters
    ----------
    profile : bundle folder path or :class:`ProfileBundle`
    model_config : config JSON path, registered model name or :class:`ModelConfig`
    tp : tensor-parallel degree (the bundle's ``tp<N>/`` folder)
    max_num_seqs, max_num_batched_tokens, max_context : the engine's limits
    model : step model to fit; None: ``RECOMMENDED['context']`` of
        :mod:`perfmodel.core.model`
    n_steps, seed : design size and seed
    ep : expert-parallel ranks meeting in each MoE block (see :class:`StepComposer`)

    Returns
    -------
    (FitResult, dict)
        The dict holds ``model``, ``n_steps`` (and per kind), ``mape_pct``,
        ``max_abs_err_pct``, ``p95_abs_err_pct`` of the fit against the
        composed steps, the composed range (``duration_ms_min/max``),
        ``compose_s``, ``fit_s``, the bundle's labels and ``not_composed``.
    """
    from perfmodel.core.fit import fit_model
    from perfmodel.core.model import RECOMMENDED, get_model

    name = get_model(RECOMMENDED["context"] if model is None else model).name
    t0 = time.perf_counter()
    composer = StepComposer(profile, model_config, tp=tp, ep=ep)
    design = design_for_engine(max_num_seqs, max_num_batched_tokens, max_context,
                               n_steps=n_steps, seed=seed)
    y = composer.compose(design)
    feats = request_features(design.chunk, design.context, design.counts)
    t1 = time.perf_counter()
    fit = fit_model(feats, name, y=y, seed=seed, n_starts=4, multistart_subsample=1000)
    t2 = time.perf_counter()
    rel = np.abs(fit.fitted / fit.y - 1.0) * 100
    kinds, nk = np.unique(design.kind, return_counts=True)
    report = {
        "model": fit.model_name, "n_steps": int(design.n_steps),
        "n_steps_by_kind": {str(k): int(v) for k, v in zip(kinds, nk)},
        "mape_pct": float(np.mean(rel)), "p95_abs_err_pct": float(np.quantile(rel, 0.95)),
        "max_abs_err_pct": float(np.max(rel)),
        "duration_ms_min": float(y.min()), "duration_ms_max": float(y.max()),
        "hardware": composer.bundle.hardware, "bundle_model": composer.bundle.model,
        "tp": tp, "ep": ep, "skew_correction": composer._skew is not None,
        "moe": composer.moe is not None,
        "compose_s": t1 - t0, "fit_s": t2 - t1, "not_composed": list(NOT_COMPOSED),
    }
    return fit, report
