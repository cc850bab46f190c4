"""A compact random-weight Llama decoder that runs one packed step (needs torch).

Packing and the two attention backends are described in
:mod:`perfmodel.data.collect_torch.harness`; the equivalence of a packed step
with running each request alone is checked in ``tests/data/test_collect_torch.py``.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from perfmodel.data.collect_torch.config import LlamaConfig
from perfmodel.data.collect_torch.plan import StepPlan, _int_array, plan_step
from perfmodel.errors import InputError

ATTN_BACKENDS = ("flash_varlen", "sdpa")


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
