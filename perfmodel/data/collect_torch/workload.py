"""A seeded workload of packed steps: :func:`generate_schedule`, :func:`replicate_order`
(no torch needed). See :mod:`perfmodel.data.collect_torch.harness`.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from perfmodel.errors import InputError


# --------------------------------------------------------------------------- workload
@dataclasses.dataclass(frozen=True)
class WorkloadParams:
    """Seeded workload: decode, prefill and mixed (chunked-prefill) step configurations.

    Each class gets its S (total tokens) stratified evenly on a log scale over
    its range: target k of n is exp(log lo + (k + U)/n * log(hi/lo)).
    """

    seed: int = 0
    n_decode: int = 800
    n_prefill: int = 800
    n_mixed: int = 800
    decode_batch: tuple[int, int] = (1, 256)
    decode_ctx: tuple[int, int] = (128, 8192)
    prefill_tokens: tuple[int, int] = (16, 8192)
    prefill_batch: tuple[int, int] = (1, 16)
    prefill_ctx: tuple[int, int] = (16, 8192)
    prefill_prior_frac: float = 0.5
    mixed_tokens: tuple[int, int] = (32, 8192)
    mixed_max_decodes: int = 255
    mixed_max_chunks: int = 2
    max_kv_tokens: int = 1_572_864

    def __post_init__(self):
        bad = []
        for k in ("n_decode", "n_prefill", "n_mixed"):
            v = getattr(self, k)
            if not isinstance(v, int) or v < 0:
                bad.append(f"{k}={v!r}")
        for k in ("decode_batch", "decode_ctx", "prefill_tokens", "prefill_batch",
                  "prefill_ctx", "mixed_tokens"):
            lo, hi = getattr(self, k)
            if not (1 <= lo <= hi):
                bad.append(f"{k}={getattr(self, k)!r}")
        if not 0 <= self.prefill_prior_frac <= 1:
            bad.append(f"prefill_prior_frac={self.prefill_prior_frac!r}")
        if self.mixed_max_chunks < 1 or self.mixed_max_decodes < 1:
            bad.append(f"mixed_max_chunks={self.mixed_max_chunks}, "
                       f"mixed_max_decodes={self.mixed_max_decodes}")
        if self.mixed_tokens[0] < 1 + 2 * self.mixed_max_chunks:
            bad.append(f"mixed_tokens={self.mixed_tokens} (lower end must be >= "
                       f"{1 + 2 * self.mixed_max_chunks})")
        if self.prefill_tokens[0] < 2:
            bad.append(f"prefill_tokens={self.prefill_tokens} (chunks need >= 2 tokens)")
        need = self.decode_batch[1] * (self.decode_ctx[0] + 1)
        if self.max_kv_tokens < max(need, 2 * self.prefill_tokens[1] + self.prefill_ctx[1]):
            bad.append(f"max_kv_tokens={self.max_kv_tokens} (too small for the ranges)")
        if bad:
            raise InputError(f"WorkloadParams: invalid values: {', '.join(bad)}")

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v
                for k, v in dataclasses.asdict(self).items()}


@dataclasses.dataclass(frozen=True)
class StepConfig:
    """One step configuration; replicates share ``config_id``."""

    config_id: str
    phase: str
    chunk_sizes: tuple[int, ...]
    context_lens: tuple[int, ...]

    @property
    def batch_size(self) -> int:
        return len(self.chunk_sizes)

    @property
    def total_tokens(self) -> int:
        return int(sum(self.chunk_sizes))


def _log_stratified(rng, n, lo, hi):
    u = (np.arange(n) + rng.random(n)) / max(n, 1)
    return np.clip(np.round(np.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))),
                   lo, hi).astype(np.int64)


def _log_uniform_int(rng, lo, hi, size=None):
    return np.clip(np.round(np.exp(rng.uniform(math.log(lo), math.log(hi), size))),
                   lo, hi).astype(np.int64)


def _partition(rng, total, parts, minimum):
    """Random split of ``total`` into ``parts`` integers >= ``minimum`` (Dirichlet(1) shares)."""
    extra = total - parts * minimum
    w = rng.dirichlet(np.ones(parts))
    return minimum + rng.multinomial(extra, w)


def _decode_ctx(rng, n, p: WorkloadParams, budget):
    lo, hi = p.decode_ctx
    median = math.exp(rng.uniform(math.log(lo), math.log(hi)))
    sigma = float(rng.choice([0.0, 0.3, 1.0]))
    ctx = np.clip(np.round(median * np.exp(sigma * rng.standard_normal(n))), lo, hi)
    ctx = ctx.astype(np.int64)
    if ctx.sum() > budget:                       # keep sum(ctx + 1) within the KV pool
        ctx = np.maximum(lo, np.floor(ctx * (budget / ctx.sum()))).astype(np.int64)
    return ctx


def _chunk_ctx(rng, n, p: WorkloadParams, prior_prob):
    lo, hi = p.prefill_ctx
    prior = rng.random(n) < prior_prob
    return np.where(prior, _log_uniform_int(rng, lo, hi, n), 0).astype(np.int64)


def generate_schedule(params: WorkloadParams) -> list[StepConfig]:
    """Build the seeded list of step configurations (decode, prefill, mixed).

    decode: B = S stratified on a log scale over ``decode_batch``; per step a
    median context (log-uniform over ``decode_ctx``) and a spread sigma in
    {0, 0.3, 1} of lognormal per-request contexts. prefill: S stratified over
    ``prefill_tokens``; B uniform in 1..min(16, S // 8); chunks >= 2 tokens,
    Dirichlet(1) shares; half the steps fresh prompts (ctx 0), half with each
    request's ctx 0 (prob. 0.3) or log-uniform prior context. mixed: S
    stratified over ``mixed_tokens``; 1..``mixed_max_chunks`` prefill chunks
    plus a log-uniform number of decodes (decodes first, as vLLM v1 orders
    running requests before new ones). Same params give the same schedule.
    """
    if not isinstance(params, WorkloadParams):
        raise InputError(f"generate_schedule: params must be WorkloadParams, "
                         f"got {type(params).__name__}")
    p = params
    rng = np.random.default_rng(p.seed)
    out: list[StepConfig] = []

    for k, B in enumerate(_log_stratified(rng, p.n_decode, *p.decode_batch)):
        ctx = _decode_ctx(rng, int(B), p, p.max_kv_tokens - int(B))
        out.append(StepConfig(f"decode-{k:04d}", "decode", (1,) * int(B), tuple(ctx.tolist())))

    for k, S in enumerate(_log_stratified(rng, p.n_prefill, *p.prefill_tokens)):
        S = int(S)
        bmax = max(1, min(p.prefill_batch[1], S // 8))
        B = int(rng.integers(max(1, min(p.prefill_batch[0], bmax)), bmax + 1))
        c = _partition(rng, S, B, 2)
        prior = rng.random() < p.prefill_prior_frac
        ctx = _chunk_ctx(rng, B, p, 0.7) if prior else np.zeros(B, np.int64)
        out.append(StepConfig(f"prefill-{k:04d}", "prefill", tuple(c.tolist()),
                              tuple(ctx.tolist())))

    for k, S in enumerate(_log_stratified(rng, p.n_mixed, *p.mixed_tokens)):
        S = int(S)
        nch = int(rng.integers(1, p.mixed_max_chunks + 1))
        nd = int(_log_uniform_int(rng, 1, max(1, min(p.mixed_max_decodes, S - 2 * nch))))
        c_pre = _partition(rng, S - nd, nch, 2)
        ctx_pre = _chunk_ctx(rng, nch, p, 0.6)
        budget = p.max_kv_tokens - int((c_pre + ctx_pre).sum()) - nd
        ctx_dec = _decode_ctx(rng, nd, p, budget)
        out.append(StepConfig(f"mixed-{k:04d}", "mixed",
                              tuple([1] * nd + c_pre.tolist()),
                              tuple(ctx_dec.tolist() + ctx_pre.tolist())))
    for s in out:
        if sum(s.chunk_sizes) + sum(s.context_lens) > p.max_kv_tokens:
            raise AssertionError(f"generate_schedule: {s.config_id} exceeds max_kv_tokens")
    return out


def replicate_order(n_configs: int, replicates: int, seed: int) -> list[tuple[int, int]]:
    """(replicate, config index) pairs: all configs per replicate, each replicate shuffled.

    Replicate r uses ``np.random.default_rng([seed, r]).permutation``, so the
    order is fixed by ``seed`` and differs between replicates.
    """
    if not isinstance(n_configs, (int, np.integer)) or n_configs < 1:
        raise InputError(f"replicate_order: n_configs={n_configs!r} must be >= 1")
    if not isinstance(replicates, (int, np.integer)) or replicates < 1:
        raise InputError(f"replicate_order: replicates={replicates!r} must be >= 1")
    order = []
    for r in range(replicates):
        perm = np.random.default_rng([int(seed), r]).permutation(n_configs)
        order.extend((r, int(i)) for i in perm)
    return order
