"""Time packed ragged engine steps of a random-weight Llama-style decoder.

Problem: measure the step latency T(B, S) of an LLM serving engine on a GPU
without an engine: one step runs B requests, request i with a chunk of
``c_i`` new tokens whose attention reads its ``ctx_i`` cached tokens plus,
causally, its own chunk; S = sum_i c_i. This module supplies

* :class:`LlamaConfig` / :func:`load_config` -- the decoder's dimensions;
* :func:`plan_step` -- the host-side layout of one packed step;
* :class:`KVCache`, :class:`LlamaStepModel` -- a compact Llama decoder
  (RMSNorm, rotary embeddings, GQA attention, SwiGLU MLP) that runs a step;
* :func:`generate_schedule`, :func:`replicate_order` -- a seeded workload;
* :func:`collect` -- warm-up, one CUDA-event timing per step, CSV + metadata;
* :func:`noise_floor` -- the per-step noise floor from replicated configs.

Packing. All S tokens go through the linear layers as one ``(S, hidden)``
tensor. The KV cache is one preallocated pool per layer of ``max_kv_tokens``
slots; within a step, request i owns the contiguous slab
``[cu_k[i], cu_k[i+1])`` of length ``ctx_i + c_i`` (a per-request cache with a
contiguous block table): its first ``ctx_i`` slots hold the cached context and
the step writes the chunk's new keys/values after them. Attention then runs
per request over its slab, in one of two backends:

``"flash_varlen"`` (GPU)
    PyTorch's bundled FlashAttention-2 variable-length kernel
    (``torch.ops.aten._flash_attention_forward`` with cumulative sequence
    lengths; causal masking aligned bottom-right, native GQA): one launch per
    layer for the whole ragged batch, cost proportional to
    sum_i c_i * (ctx_i + c_i), as in vLLM's FlashAttention backend but without
    paging.
``"sdpa"`` (CPU reference, GPU fallback)
    ``torch.nn.functional.scaled_dot_product_attention``: one call per
    prefill chunk (c_i > 1) with an explicit causal-with-offset mask, plus one
    padded batched call for all decode rows (c_i == 1), whose keys/values are
    gathered into a ``(B_dec, max ctx)`` tensor with a padding mask. GQA is
    folded into the query length (the ``group`` query heads sharing a KV head
    become rows), so no key/value is repeated.

The equivalence of a packed step with running each request alone, and of a
chunked prefill with a one-shot prefill, is checked in
``tests/data/test_collect_torch.py`` in float32 (max abs difference < 1e-5); on the
GPU :func:`collect` first checks both backends against SDPA's math kernel on a
one-layer copy of the model (:func:`check_backends`) and uses ``flash_varlen``
only if it agrees, else ``sdpa``.
"""
from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from perfmodel._io import sha256_file
from perfmodel.errors import InputError

__all__ = [
    "ATTN_BACKENDS",
    "TRACE_COLUMNS",
    "KVCache",
    "LlamaConfig",
    "LlamaStepModel",
    "StepConfig",
    "StepPlan",
    "WorkloadParams",
    "check_backends",
    "collect",
    "generate_schedule",
    "load_config",
    "noise_floor",
    "plan_step",
    "replicate_order",
]

TRACE_COLUMNS = [
    "step", "timestamp", "replicate", "config", "phase", "batch_size", "total_tokens",
    "num_decode", "num_prefill", "chunk_sizes", "context_lens", "duration_ms", "step_ms",
    "cpu_ms", "involuntary_switches", "loadavg", "hardware", "model", "source",
]
ATTN_BACKENDS = ("flash_varlen", "sdpa")


# --------------------------------------------------------------------------- config
@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """Dimensions of a Llama-style decoder (names as in Hugging Face ``config.json``)."""

    name: str
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    rope_theta: float = 500000.0
    rms_norm_eps: float = 1e-5
    max_position_embeddings: int = 32768
    description: str = ""

    def __post_init__(self):
        ints = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings"]
        bad = [f"{k}={getattr(self, k)!r}" for k in ints
               if not isinstance(getattr(self, k), int) or getattr(self, k) < 1]
        if bad:
            raise InputError(f"LlamaConfig: fields must be positive integers: {', '.join(bad)}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise InputError(
                f"LlamaConfig: num_attention_heads={self.num_attention_heads} is not a multiple "
                f"of num_key_value_heads={self.num_key_value_heads}")
        if self.head_dim % 2:
            raise InputError(f"LlamaConfig: head_dim={self.head_dim} must be even (rotary)")
        if not (self.rope_theta > 0 and self.rms_norm_eps > 0):
            raise InputError(f"LlamaConfig: rope_theta={self.rope_theta} and "
                             f"rms_norm_eps={self.rms_norm_eps} must be > 0")

    @property
    def group(self) -> int:
        """Query heads per key/value head."""
        return self.num_attention_heads // self.num_key_value_heads

    def n_params(self) -> int:
        """Number of weights (embedding and LM head included)."""
        h, hd = self.hidden_size, self.head_dim
        qkv = h * (self.num_attention_heads + 2 * self.num_key_value_heads) * hd
        layer = qkv + self.num_attention_heads * hd * h + 3 * h * self.intermediate_size + 2 * h
        return self.num_hidden_layers * layer + 2 * self.vocab_size * h + h

    @classmethod
    def from_dict(cls, d: dict) -> LlamaConfig:
        """Build from a dict, rejecting unknown keys (one message lists them)."""
        if not isinstance(d, dict):
            raise InputError(f"LlamaConfig.from_dict: expected a dict, got {type(d).__name__}")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - fields)
        missing = sorted(f.name for f in dataclasses.fields(cls)
                         if f.default is dataclasses.MISSING and f.name not in d)
        if unknown or missing:
            raise InputError(f"LlamaConfig: unknown keys {unknown}, missing keys {missing}")
        return cls(**d)


def load_config(path: str | os.PathLike) -> LlamaConfig:
    """Read a :class:`LlamaConfig` from a JSON file (e.g. ``perfmodel/data/configs/llama-gpu-*.json``)."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"load_config: path={str(p)!r} is not a file")
    try:
        d = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise InputError(f"load_config: {str(p)!r} is not valid JSON ({e})") from None
    return LlamaConfig.from_dict(d)


# --------------------------------------------------------------------------- step plan
@dataclasses.dataclass
class StepPlan:
    """Host-side layout of one packed step (all arrays numpy int64).

    ``cu_q`` / ``cu_k``: cumulative chunk / slab lengths (B+1); ``positions``:
    the rotary position of each of the S packed tokens (ctx_i + j);
    ``write_index``: the KV-pool slot each new token's key/value goes to;
    ``last_index``: the packed row of each request's last token (its logits).
    """

    chunk_sizes: np.ndarray
    context_lens: np.ndarray
    cu_q: np.ndarray
    cu_k: np.ndarray
    positions: np.ndarray
    write_index: np.ndarray
    last_index: np.ndarray

    @property
    def batch_size(self) -> int:
        return int(self.chunk_sizes.size)

    @property
    def total_tokens(self) -> int:
        return int(self.cu_q[-1])

    @property
    def total_kv(self) -> int:
        return int(self.cu_k[-1])

    @property
    def max_q(self) -> int:
        return int(self.chunk_sizes.max())

    @property
    def max_k(self) -> int:
        return int((self.chunk_sizes + self.context_lens).max())


def _int_array(name: str, values) -> np.ndarray:
    a = np.asarray(values)
    if a.ndim != 1 or a.size == 0:
        raise InputError(f"{name}: expected a non-empty 1-d sequence of integers, "
                         f"got shape {a.shape}")
    integral = np.issubdtype(a.dtype, np.integer) or (
        np.issubdtype(a.dtype, np.floating) and bool(np.all(np.isfinite(a)))
        and not np.any(a != np.round(a)))
    if not integral:
        raise InputError(f"{name}: values must be integers, got dtype {a.dtype}")
    return a.astype(np.int64)


def plan_step(chunk_sizes: Sequence[int], context_lens: Sequence[int], *,
              max_kv_tokens: int | None = None, max_position: int | None = None) -> StepPlan:
    """Lay out one packed step: B requests, request i with c_i new and ctx_i cached tokens.

    Parameters
    ----------
    chunk_sizes, context_lens : sequences of int, same length B >= 1
        c_i >= 1 and ctx_i >= 0, in request order.
    max_kv_tokens : int, optional
        KV-pool capacity; sum_i (ctx_i + c_i) must not exceed it.
    max_position : int, optional
        Rotary table length; ctx_i + c_i must not exceed it.

    Returns
    -------
    StepPlan
    """
    c = _int_array("chunk_sizes", chunk_sizes)
    ctx = _int_array("context_lens", context_lens)
    if c.size != ctx.size:
        raise InputError(f"plan_step: chunk_sizes has {c.size} entries, context_lens {ctx.size}")
    bad = np.flatnonzero(c < 1)
    if bad.size:
        raise InputError(f"plan_step: chunk_sizes must be >= 1; requests {bad[:5].tolist()} "
                         f"({bad.size} in all) are not")
    bad = np.flatnonzero(ctx < 0)
    if bad.size:
        raise InputError(f"plan_step: context_lens must be >= 0; requests {bad[:5].tolist()} "
                         f"({bad.size} in all) are not")
    slab = c + ctx
    if max_kv_tokens is not None and slab.sum() > max_kv_tokens:
        raise InputError(f"plan_step: sum(ctx+c)={int(slab.sum())} exceeds "
                         f"max_kv_tokens={max_kv_tokens}")
    if max_position is not None and slab.max() > max_position:
        bad = np.flatnonzero(slab > max_position)
        raise InputError(f"plan_step: ctx+c exceeds max_position={max_position} for requests "
                         f"{bad[:5].tolist()} ({bad.size} in all)")
    cu_q = np.concatenate([[0], np.cumsum(c)])
    cu_k = np.concatenate([[0], np.cumsum(slab)])
    req = np.repeat(np.arange(c.size), c)          # request of each packed token
    j = np.arange(cu_q[-1]) - cu_q[req]             # offset within its chunk
    positions = ctx[req] + j
    write_index = cu_k[req] + positions
    return StepPlan(chunk_sizes=c, context_lens=ctx, cu_q=cu_q, cu_k=cu_k,
                    positions=positions, write_index=write_index, last_index=cu_q[1:] - 1)


# --------------------------------------------------------------------------- model
class KVCache:
    """Preallocated KV pool: ``k``, ``v`` of shape (layers, capacity, kv_heads, head_dim).

    Filled with random values (std ``init_std``) so that timings never run on
    zeros; a step's requests own contiguous slabs of it (see :func:`plan_step`).
    """

    def __init__(self, config: LlamaConfig, capacity: int, *, dtype=torch.float32,
                 device="cpu", seed: int = 0, init_std: float = 1.0):
        if not isinstance(capacity, int) or capacity < 1:
            raise InputError(f"KVCache: capacity={capacity!r} must be a positive integer")
        shape = (config.num_hidden_layers, capacity, config.num_key_value_heads, config.head_dim)
        g = torch.Generator(device=device).manual_seed(seed)
        self.k = torch.empty(shape, dtype=dtype, device=device)
        self.v = torch.empty(shape, dtype=dtype, device=device)
        for t in (self.k, self.v):
            for layer in range(shape[0]):
                t[layer].normal_(0.0, init_std, generator=g)
        self.capacity = capacity

    def nbytes(self) -> int:
        return self.k.numel() * self.k.element_size() * 2


class LlamaStepModel:
    """Random-weight Llama-style decoder that runs one packed engine step.

    Layer: x += W_o attn(rope(W_qkv rmsnorm(x))); x += W_down(silu(g) * u),
    [g, u] = W_gate_up rmsnorm(x) -- the Hugging Face ``LlamaForCausalLM``
    computation (rotate-half rotary embeddings, no llama3 rope scaling), with
    q/k/v and gate/up projections fused as in vLLM. Logits are computed for
    each request's last token only (as engines do); no sampling.
    """

    def __init__(self, config: LlamaConfig, *, dtype=torch.float32, device="cpu", seed: int = 0,
                 init_std: float = 0.02):
        if not isinstance(config, LlamaConfig):
            raise InputError(f"LlamaStepModel: config must be a LlamaConfig, "
                             f"got {type(config).__name__}")
        self.config, self.dtype, self.device = config, dtype, torch.device(device)
        cfg = config
        g = torch.Generator(device=self.device).manual_seed(seed)

        def w(*shape, std=init_std):
            return torch.randn(*shape, generator=g, device=self.device, dtype=dtype) * std

        def norm_w():
            return 1.0 + w(cfg.hidden_size, std=0.1)

        h, hd = cfg.hidden_size, cfg.head_dim
        nq, nkv = cfg.num_attention_heads, cfg.num_key_value_heads
        self.embed = w(cfg.vocab_size, h, std=1.0)
        self.layers = []
        for _ in range(cfg.num_hidden_layers):
            self.layers.append({
                "in_norm": norm_w(), "qkv": w((nq + 2 * nkv) * hd, h), "o": w(h, nq * hd),
                "post_norm": norm_w(), "gate_up": w(2 * cfg.intermediate_size, h),
                "down": w(h, cfg.intermediate_size)})
        self.final_norm = norm_w()
        self.lm_head = w(cfg.vocab_size, h)
        inv = 1.0 / cfg.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        ang = torch.outer(torch.arange(cfg.max_position_embeddings, dtype=torch.float64), inv)
        ang = torch.cat([ang, ang], dim=-1)
        self.cos = ang.cos().to(self.device, dtype)
        self.sin = ang.sin().to(self.device, dtype)
        self.scale = hd ** -0.5

    # ---- pieces
    @staticmethod
    def _rotate_half(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat([-x2, x1], dim=-1)

    def _rope(self, x, cos, sin):
        return x * cos + self._rotate_half(x) * sin

    def _rms(self, x, weight):
        return F.rms_norm(x, (x.shape[-1],), weight, self.config.rms_norm_eps)

    # ---- attention backends; q: (S, nq, hd); pools: (capacity, nkv, hd)
    def _attn_flash(self, q, kpool, vpool, plan: StepPlan, dev):
        total_k = plan.total_kv
        out = torch.ops.aten._flash_attention_forward(
            q, kpool[:total_k], vpool[:total_k], dev["cu_q"], dev["cu_k"], plan.max_q,
            plan.max_k, 0.0, True, False, scale=self.scale)[0]
        return out.reshape(q.shape[0], -1)

    def _attn_sdpa(self, q, kpool, vpool, plan: StepPlan, dev):
        cfg = self.config
        nkv, grp, hd = cfg.num_key_value_heads, cfg.group, cfg.head_dim
        out = torch.empty(q.shape[0], cfg.num_attention_heads * hd, dtype=q.dtype,
                          device=q.device)
        c, ctx = plan.chunk_sizes, plan.context_lens
        for i in np.flatnonzero(c > 1):                      # prefill chunks, one call each
            a, b = int(plan.cu_q[i]), int(plan.cu_q[i + 1])
            ka, kb = int(plan.cu_k[i]), int(plan.cu_k[i + 1])
            ci, L = b - a, kb - ka
            qi = q[a:b].view(ci, nkv, grp, hd).permute(1, 2, 0, 3).reshape(1, nkv, grp * ci, hd)
            ki = kpool[ka:kb].permute(1, 0, 2).unsqueeze(0)   # (1, nkv, L, hd)
            vi = vpool[ka:kb].permute(1, 0, 2).unsqueeze(0)
            allowed = (torch.arange(L, device=q.device)[None, :]
                       <= int(ctx[i]) + torch.arange(ci, device=q.device)[:, None])
            mask = allowed.repeat(grp, 1)                     # rows ordered (group, chunk)
            oi = F.scaled_dot_product_attention(qi, ki, vi, attn_mask=mask, scale=self.scale)
            out[a:b] = oi.view(nkv, grp, ci, hd).permute(2, 0, 1, 3).reshape(ci, -1)
        if "dec_rows" in dev:                                 # all decode rows, one padded call
            rows, gather, pad_mask = dev["dec_rows"], dev["dec_gather"], dev["dec_mask"]
            nd = rows.shape[0]
            qd = q.index_select(0, rows).view(nd, nkv, grp, hd)           # (Bd, nkv, grp, hd)
            kd = kpool[gather].permute(0, 2, 1, 3)                        # (Bd, nkv, Lmax, hd)
            vd = vpool[gather].permute(0, 2, 1, 3)
            od = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=pad_mask[:, None, None, :],
                                                scale=self.scale)
            out.index_copy_(0, rows, od.reshape(nd, -1))
        return out

    # ---- device metadata
    def device_meta(self, plan: StepPlan, tokens: np.ndarray, backend: str) -> dict:
        """Move a step's metadata to the device (one pinned copy per dtype on CUDA)."""
        if backend not in ATTN_BACKENDS:
            raise InputError(f"device_meta: backend={backend!r} not in {ATTN_BACKENDS}")
        tokens = _int_array("tokens", tokens)
        if tokens.size != plan.total_tokens:
            raise InputError(f"device_meta: {tokens.size} tokens for a step of "
                             f"S={plan.total_tokens}")
        parts = {"ids": tokens, "pos": plan.positions, "wr": plan.write_index,
                 "last": plan.last_index}
        if backend == "sdpa":
            dec = np.flatnonzero(plan.chunk_sizes == 1)
            if dec.size:
                lens = plan.context_lens[dec] + 1
                lmax = int(lens.max())
                ar = np.arange(lmax)
                parts["dec_rows"] = plan.cu_q[dec]
                parts["dec_gather"] = (plan.cu_k[dec][:, None] + np.minimum(ar[None, :],
                                                                            lens[:, None] - 1))
                parts["dec_mask"] = (ar[None, :] < lens[:, None]).astype(np.int64)
        names = list(parts)
        flat = np.concatenate([parts[k].ravel() for k in names]).astype(np.int64)
        host = torch.from_numpy(flat)
        if self.device.type == "cuda":
            host = host.pin_memory()
        allv = host.to(self.device, non_blocking=True)
        dev, off = {}, 0
        for k in names:
            n = parts[k].size
            dev[k] = allv[off:off + n].view(parts[k].shape)
            off += n
        if "dec_mask" in dev:
            dev["dec_mask"] = dev["dec_mask"].bool()
        i32 = torch.from_numpy(np.concatenate([plan.cu_q, plan.cu_k]).astype(np.int32))
        if self.device.type == "cuda":
            i32 = i32.pin_memory()
        i32 = i32.to(self.device, non_blocking=True)
        dev["cu_q"], dev["cu_k"] = i32[:plan.batch_size + 1], i32[plan.batch_size + 1:]
        return dev

    @torch.inference_mode()
    def forward(self, plan: StepPlan, dev: dict, cache: KVCache, backend: str = "sdpa"):
        """Run one step; returns (hidden (S, hidden) after the final norm, logits (B, vocab)).

        Writes the chunk's keys/values into ``cache`` at ``plan.write_index``.
        """
        if backend not in ATTN_BACKENDS:
            raise InputError(f"forward: backend={backend!r} not in {ATTN_BACKENDS}")
        if plan.total_kv > cache.capacity:
            raise InputError(f"forward: step needs {plan.total_kv} KV slots, cache has "
                             f"{cache.capacity}")
        cfg = self.config
        S, nq, nkv, hd = plan.total_tokens, cfg.num_attention_heads, cfg.num_key_value_heads, \
            cfg.head_dim
        attn = self._attn_flash if backend == "flash_varlen" else self._attn_sdpa
        x = F.embedding(dev["ids"], self.embed)
        cos = self.cos.index_select(0, dev["pos"]).unsqueeze(1)
        sin = self.sin.index_select(0, dev["pos"]).unsqueeze(1)
        for li, L in enumerate(self.layers):
            h = self._rms(x, L["in_norm"])
            qkv = F.linear(h, L["qkv"])
            q, k, v = qkv.split([nq * hd, nkv * hd, nkv * hd], dim=-1)
            q = self._rope(q.view(S, nq, hd), cos, sin)
            k = self._rope(k.view(S, nkv, hd), cos, sin)
            cache.k[li].index_copy_(0, dev["wr"], k)
            cache.v[li].index_copy_(0, dev["wr"], v.view(S, nkv, hd))
            o = attn(q, cache.k[li], cache.v[li], plan, dev)
            x = x + F.linear(o, L["o"])
            h = self._rms(x, L["post_norm"])
            gate, up = F.linear(h, L["gate_up"]).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, L["down"])
        hidden = self._rms(x, self.final_norm)
        logits = F.linear(hidden.index_select(0, dev["last"]), self.lm_head)
        return hidden, logits

    def step(self, chunk_sizes, context_lens, tokens, cache: KVCache, backend: str = "sdpa"):
        """Plan, move metadata and run one step (convenience for tests)."""
        plan = plan_step(chunk_sizes, context_lens, max_kv_tokens=cache.capacity,
                         max_position=self.config.max_position_embeddings)
        return self.forward(plan, self.device_meta(plan, tokens, backend), cache, backend)


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


# --------------------------------------------------------------------------- collection
def _shape_class(s: StepConfig) -> tuple[str, int, int]:
    return (s.phase, int(math.log2(max(1, s.total_tokens))),
            int(math.log2(max(1, max(a + b for a, b in zip(s.chunk_sizes, s.context_lens))))))


def _nvidia_smi(query: str) -> str:
    try:
        r = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv"],
                           check=False, capture_output=True, text=True, timeout=15)
        return r.stdout.strip()
    except Exception as e:  # noqa: BLE001 -- diagnostics only
        return f"unavailable: {e}"


def check_backends(config: LlamaConfig, *, dtype=torch.bfloat16, device="cuda",
                   seed: int = 0) -> dict:
    """Check the attention backends against SDPA's math kernel on one mixed step.

    Problem: the GPU backends cannot be tested on a CPU, so before timing
    this runs a one-layer copy of ``config`` (own weights and KV cache) on a
    ragged step with decodes, a fresh chunk and a chunk with prior context,
    through ``sdpa`` restricted to the math kernel (the reference), ``sdpa``
    with PyTorch's default kernel choice, and ``flash_varlen``. For each it
    reports the largest per-row relative L2 difference of the hidden states
    from the reference (or the exception). One layer keeps the rounding of
    ``dtype`` small (bf16: ~1e-3..1e-2) next to a masking or layout error
    (order 1e-1 and above).

    Returns dict(rel_err={backend: float | None}, errors={backend: str | None},
    choice=backend to use or None, tolerance).
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel

    small = dataclasses.replace(config, num_hidden_layers=1,
                                vocab_size=min(config.vocab_size, 4096))
    model = LlamaStepModel(small, dtype=dtype, device=device, seed=seed + 7)
    chunks = [1, 1, 1, 37, 64, 1]
    ctxs = [130, 999, 5, 0, 300, 2047]
    toks = np.random.default_rng(seed).integers(0, small.vocab_size, sum(chunks))
    outs, errors = {}, {}
    for name in ("math", "sdpa", "flash_varlen"):
        cache = KVCache(small, 8192, dtype=dtype, device=device, seed=seed + 3)
        try:
            if name == "math":
                with sdpa_kernel([SDPBackend.MATH]):
                    outs[name] = model.step(chunks, ctxs, toks, cache, "sdpa")[0].double()
            else:
                outs[name] = model.step(chunks, ctxs, toks, cache, name)[0].double()
            errors[name] = None
        except Exception as e:  # noqa: BLE001 -- any failure rules the backend out
            errors[name] = f"{type(e).__name__}: {e}"[:500]
    rel = {}
    if "math" in outs:
        ref = outs["math"]
        for name in ("sdpa", "flash_varlen"):
            if name in outs:
                r = ((outs[name] - ref).norm(dim=1) / ref.norm(dim=1)).max()
                rel[name] = float(r) if torch.isfinite(r) else float("inf")
            else:
                rel[name] = None
    tol = max(2e-2, 3 * (rel.get("sdpa") or 0.0))
    choice = None
    for name in ("flash_varlen", "sdpa"):
        if rel.get(name) is not None and rel[name] < tol:
            choice = name
            break
    return {"rel_err": rel, "errors": errors, "choice": choice, "tolerance": tol,
            "step": {"chunk_sizes": chunks, "context_lens": ctxs}}


def collect(config: LlamaConfig, params: WorkloadParams, out_dir: str | os.PathLike, *,
            replicates: int = 3, device: str = "cuda", dtype: str = "bfloat16",
            backend: str = "auto", max_seconds: float = 300.0, warmup_steps: int = 10,
            warmup_all: bool = False, warmup_max_seconds: float = 60.0,
            flush_every: int = 100, progress_every: int = 250, basename: str = "trace",
            config_path: str | None = None, log=print) -> dict:
    """Warm up, then time every step of the replicated schedule; write CSV + metadata.

    Each row is one step measured once: CUDA events recorded around the
    step's metadata preparation (token ids, positions, cumulative lengths,
    KV write slots, packed into one pinned buffer) and its host-to-device
    copy, the forward pass (embedding,
    layers, final norm, last-token logits) and nothing else; ``step_ms`` is
    the host wall time of the same region plus the synchronisation, ``cpu_ms``
    the process CPU time. Before timing, one untimed step of every shape
    class (phase, log2 S, log2 max slab) runs, largest first, after
    ``warmup_steps`` generic ones; with ``warmup_all`` every configuration
    then runs once untimed (for at most ``warmup_max_seconds``), so that
    first-seen GEMM shapes do not slow replicate 1. Rows are appended to
    ``<basename>.csv`` every ``flush_every`` steps and the metadata JSON is
    rewritten at start and end, so a killed run still leaves data. Stops
    early (status 'time_limit') once ``max_seconds`` of timing have passed.

    Returns the metadata dict.
    """
    if not isinstance(config, LlamaConfig) or not isinstance(params, WorkloadParams):
        raise InputError("collect: config must be a LlamaConfig and params WorkloadParams")
    if dtype not in ("bfloat16", "float16", "float32"):
        raise InputError(f"collect: dtype={dtype!r} not in ('bfloat16', 'float16', 'float32')")
    if backend not in ("auto",) + ATTN_BACKENDS:
        raise InputError(f"collect: backend={backend!r} not in {('auto',) + ATTN_BACKENDS}")
    if not (isinstance(replicates, int) and replicates >= 1):
        raise InputError(f"collect: replicates={replicates!r} must be an integer >= 1")
    if not max_seconds > 0:
        raise InputError(f"collect: max_seconds={max_seconds!r} must be > 0")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    csv_path, meta_path = out / f"{basename}.csv", out / f"{basename}.meta.json"
    t_start = time.perf_counter()
    dev = torch.device(device)
    is_cuda = dev.type == "cuda"
    tdtype = getattr(torch, dtype)

    schedule = generate_schedule(params)
    order = replicate_order(len(schedule), replicates, params.seed)
    log(f"[collect] schedule: {len(schedule)} configs x {replicates} replicates "
        f"= {len(order)} steps")

    meta = {
        "status": "running",
        "source": "perfmodel.data.collect_torch",
        "created_unix": time.time(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if is_cuda else None,
        "device": str(dev),
        "gpu_name": torch.cuda.get_device_name(dev) if is_cuda else None,
        "dtype": dtype,
        "model_config": dataclasses.asdict(config),
        "model_config_path": config_path,
        "n_params": config.n_params(),
        "workload": params.to_dict(),
        "replicates": replicates,
        "max_seconds": max_seconds,
        "columns": TRACE_COLUMNS,
    }
    if is_cuda:
        prop = torch.cuda.get_device_properties(dev)
        meta["gpu"] = {"name": prop.name, "total_memory_bytes": prop.total_memory,
                       "multi_processor_count": prop.multi_processor_count,
                       "capability": f"{prop.major}.{prop.minor}",
                       "nvidia_smi_start": _nvidia_smi(
                           "name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,"
                           "power.limit,temperature.gpu,memory.used,memory.total")}
    meta_path.write_text(json.dumps(meta, indent=2))

    model = LlamaStepModel(config, dtype=tdtype, device=dev, seed=params.seed)
    cache = KVCache(config, params.max_kv_tokens, dtype=tdtype, device=dev, seed=params.seed + 1)
    if is_cuda:
        torch.cuda.synchronize(dev)
        meta["gpu"]["memory_allocated_after_init"] = torch.cuda.memory_allocated(dev)
    log(f"[collect] model {config.name}: {config.n_params() / 1e9:.2f} G params, KV pool "
        f"{cache.nbytes() / 2**30:.1f} GiB, init {time.perf_counter() - t_start:.1f} s")

    check = None
    if is_cuda:
        check = check_backends(config, dtype=tdtype, device=dev, seed=params.seed)
        if backend == "auto":
            if check["choice"] is None:
                meta["status"] = "failed_backend_check"
                meta["backend_check"] = check
                meta_path.write_text(json.dumps(meta, indent=2))
                raise RuntimeError(f"collect: no attention backend passed the check: {check}")
            backend = check["choice"]
    elif backend == "auto":
        backend = "sdpa"
    meta["attn_backend"] = backend
    meta["backend_check"] = check
    log(f"[collect] attention backend: {backend}; check: {check}")

    rng_tok = np.random.default_rng([params.seed, 12345])
    hw = meta["gpu_name"] or platform.processor() or "cpu"
    sync = (lambda: torch.cuda.synchronize(dev)) if is_cuda else (lambda: None)

    def run_one(s: StepConfig, timed: bool):
        plan = plan_step(s.chunk_sizes, s.context_lens, max_kv_tokens=cache.capacity,
                         max_position=config.max_position_embeddings)
        toks = rng_tok.integers(0, config.vocab_size, plan.total_tokens)
        if not timed:
            model.forward(plan, model.device_meta(plan, toks, backend), cache, backend)
            return None
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        c0 = time.process_time()
        w0 = time.perf_counter()
        if is_cuda:
            ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            ev0.record()
        d = model.device_meta(plan, toks, backend)
        model.forward(plan, d, cache, backend)
        if is_cuda:
            ev1.record()
            ev1.synchronize()
        w1 = time.perf_counter()
        c1 = time.process_time()
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        dur = ev0.elapsed_time(ev1) if is_cuda else (w1 - w0) * 1e3
        return {"duration_ms": dur, "step_ms": (w1 - w0) * 1e3, "cpu_ms": (c1 - c0) * 1e3,
                    "involuntary_switches": ru1.ru_nivcsw - ru0.ru_nivcsw, "w0": w0}

    # ---- warm-up: generic steps, then one per shape class, largest first
    t_w = time.perf_counter()
    for i in range(min(warmup_steps, len(schedule))):
        run_one(schedule[(i * 7919) % len(schedule)], timed=False)
    classes: dict = {}
    for s in schedule:
        classes.setdefault(_shape_class(s), s)
    for key in sorted(classes, key=lambda k: (-k[1], -k[2], k[0])):
        run_one(classes[key], timed=False)
    sync()
    n_all = 0
    if warmup_all:                      # every config once, untimed, within a time cap
        t_a = time.perf_counter()
        for s in schedule:
            if time.perf_counter() - t_a > warmup_max_seconds:
                break
            run_one(s, timed=False)
            n_all += 1
        sync()
    meta["warmup"] = {"generic_steps": min(warmup_steps, len(schedule)),
                      "shape_classes": len(classes), "all_configs_pass": n_all,
                      "seconds": round(time.perf_counter() - t_w, 3)}
    log(f"[collect] warm-up: {len(classes)} shape classes + {n_all} configs in "
        f"{meta['warmup']['seconds']} s")

    # ---- timed steps
    n_rows, buf, status = 0, [], "complete"
    t0 = time.perf_counter()
    with open(csv_path, "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(TRACE_COLUMNS)
        f.flush()
        for k, (rep, idx) in enumerate(order):
            if time.perf_counter() - t0 > max_seconds:
                status = "time_limit"
                log(f"[collect] time limit {max_seconds} s reached after {k} steps")
                break
            s = schedule[idx]
            r = run_one(s, timed=True)
            c = np.asarray(s.chunk_sizes)
            buf.append([k, round(r["w0"] - t0, 6), rep + 1, s.config_id, s.phase, s.batch_size,
                        s.total_tokens, int((c == 1).sum()), int((c > 1).sum()),
                        ";".join(map(str, s.chunk_sizes)), ";".join(map(str, s.context_lens)),
                        f"{r['duration_ms']:.5f}", f"{r['step_ms']:.5f}", f"{r['cpu_ms']:.4f}",
                        r["involuntary_switches"], f"{os.getloadavg()[0]:.2f}", hw, config.name,
                        f"torch-harness/{backend}"])
            n_rows += 1
            if len(buf) >= flush_every:
                wr.writerows(buf)
                f.flush()
                buf = []
            if progress_every and (k + 1) % progress_every == 0:
                el = time.perf_counter() - t0
                log(f"[collect] {k + 1}/{len(order)} steps, {el:.1f} s, "
                    f"last {s.config_id} B={s.batch_size} S={s.total_tokens} "
                    f"{r['duration_ms']:.3f} ms")
        wr.writerows(buf)
    meta["timing_seconds"] = round(time.perf_counter() - t0, 3)
    meta["total_seconds"] = round(time.perf_counter() - t_start, 3)
    meta["status"] = status
    meta["rows"] = n_rows
    meta["csv"] = csv_path.name
    meta["csv_sha256"] = sha256_file(csv_path)
    if is_cuda:
        meta["gpu"]["max_memory_allocated"] = torch.cuda.max_memory_allocated(dev)
        meta["gpu"]["nvidia_smi_end"] = _nvidia_smi(
            "clocks.sm,clocks.mem,power.draw,temperature.gpu,memory.used")
    try:
        meta["noise_floor"] = noise_floor(pd.read_csv(csv_path))
    except Exception as e:  # noqa: BLE001 -- summary only
        meta["noise_floor"] = {"error": f"{type(e).__name__}: {e}"}
    meta_path.write_text(json.dumps(meta, indent=2))
    log(f"[collect] done: {n_rows} rows, status {status}, {meta['timing_seconds']} s timing")
    return meta


# --------------------------------------------------------------------------- noise floor
def noise_floor(df, *, window: int = 201, drift_by: str | None = "phase",
                duration_bins: Sequence[float] = (0.0, 5.0, 10.0, 30.0, math.inf)) -> dict:
    """Per-step noise floor: median coefficient of variation across replicates of a config.

    ``raw``: for each config seen in every replicate, CV = sd (ddof=1) / mean
    of its durations; the median (and 90th percentile) over configs, overall,
    per phase and per bin of the config's mean duration (``duration_bins``,
    ms). ``drift_removed``: the same after dividing each duration by
    exp(rolling median, over ``window`` steps in time order, of
    log(duration / config geometric mean)) -- the slow run-level drift of a
    shared host, reported separately (data/README.md, Noise floor and
    drift). With ``drift_by='phase'`` (default, when the column exists) the
    drift is estimated within each phase, since a
    host slowdown moves launch-bound decode steps more than GPU-bound prefill
    steps; ``None`` pools all steps. Also: the median ratio of each
    replicate to the per-config geometric mean, and the drift's range.

    Verified against synthetic replicates with a known 5% sd
    (tests/data/test_collect_torch.py: median CV of 3 draws ~ 0.05 * 0.83).
    """
    need = {"config", "replicate", "duration_ms", "step"}
    if not hasattr(df, "columns") or not need <= set(df.columns):
        raise InputError(f"noise_floor: df must have columns {sorted(need)}")
    if not isinstance(window, int) or window < 3:
        raise InputError(f"noise_floor: window={window!r} must be an integer >= 3")
    if drift_by is not None and drift_by not in df.columns:
        drift_by = None
    edges = np.asarray(duration_bins, dtype=float)
    if edges.ndim != 1 or edges.size < 2 or np.any(np.diff(edges) <= 0):
        raise InputError(f"noise_floor: duration_bins={duration_bins!r} must increase")
    d = df.sort_values("step").copy()
    nrep = d["replicate"].nunique()
    counts = d.groupby("config")["replicate"].nunique()
    full = counts.index[counts == nrep]
    d = d[d["config"].isin(full)].copy()
    if d.empty or nrep < 2:
        return {"n_configs": 0, "replicates": int(nrep)}
    logd = np.log(d["duration_ms"])
    lr = logd - logd.groupby(d["config"]).transform("mean")

    def rolling(x):
        return x.rolling(window, center=True, min_periods=max(3, window // 4)).median()

    drift = lr.groupby(d[drift_by]).transform(rolling) if drift_by else rolling(lr)
    d["corr"] = d["duration_ms"] * np.exp(-drift.fillna(0.0))

    def cv(col):
        g = d.groupby("config")[col]
        return g.std(ddof=1) / g.mean()

    groups = {}
    if "phase" in d:
        groups["by_phase"] = d.groupby("config")["phase"].first()
    mean_ms = d.groupby("config")["duration_ms"].mean()
    groups["by_duration_ms"] = pd.cut(mean_ms, edges, right=False).astype(str)
    res = {"n_configs": len(full), "replicates": int(nrep), "window": window,
           "drift_by": drift_by}
    for name, col in (("raw", "duration_ms"), ("drift_removed", "corr")):
        v = cv(col)
        entry = {"median_cv": float(v.median()), "p90_cv": float(v.quantile(0.9))}
        for gname, key in groups.items():
            entry[f"median_cv_{gname}"] = {
                str(k): {"median_cv": float(x.median()), "n_configs": len(x)}
                for k, x in v.groupby(key)}
        res[name] = entry
    res["replicate_median_ratio"] = {
        int(r): float(np.exp(g.median())) for r, g in lr.groupby(d["replicate"])}
    if "phase" in d:
        res["replicate_median_ratio_by_phase"] = {
            str(ph): {int(r): float(np.exp(x.median())) for r, x in g.groupby(d["replicate"])}
            for ph, g in lr.groupby(d["phase"])}
    res["drift_range"] = [float(np.exp(drift.min())), float(np.exp(drift.max()))]
    return res
