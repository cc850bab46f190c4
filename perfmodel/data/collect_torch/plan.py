"""The host-side layout of one packed ragged step (:func:`plan_step`; no torch needed).

See :mod:`perfmodel.data.collect_torch.harness` for the packing.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from perfmodel.errors import InputError


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
