"""KV-cache capacity of a GPU replica in blocks, from the model's architecture config.

Problem
-------
Under load the KV cache, not ``max_num_seqs``, limits how many requests run
(e.g. a Llama-3.1-8B on a 24 GB card runs at most ~50 of 256 allowed).  vLLM
sizes the cache at start-up (and logs ``num_gpu_blocks``); a replay of a run
that did not log it, or a what-if on another card, needs the same number.

Formula
-------
Per GPU (vLLM's sizing; docs/replay.md, Simulator)::

    kv_bytes       = gpu_memory_bytes * gpu_memory_utilization
                     - weight_bytes - activation_reserve_bytes
    block_bytes    = 2 (K and V) * num_hidden_layers * kv_heads_per_gpu * head_dim
                     * dtype_bytes * block_size
    num_gpu_blocks = floor(kv_bytes / block_bytes)

with ``kv_heads_per_gpu = max(1, num_key_value_heads // tp)``, ``head_dim``
from the config (else ``hidden_size / num_attention_heads``) and
``weight_bytes`` the parameters held by one GPU times ``dtype_bytes``: the
embedding and (unless tied) the LM head, and per layer the attention
projections, the dense MLP or the experts (``num_experts`` x 3 projections of
``moe_intermediate_size``, divided by the expert-parallel degree) and the
router, all but the experts divided by ``tp``; norms are counted, biases are
not.  ``activation_reserve_bytes`` is what vLLM keeps for the peak
activations of a ``max_num_batched_tokens`` step, CUDA graphs and memory
outside PyTorch; vLLM measures it by profiling and it is not derived here
(default 0: the formula then gives an upper bound, like LLMServingSim's).

Checked: Llama-3.1-8B has 8,030,261,248 parameters (its published size);
on the RTX 4090 run (24 GiB card, 25,250,627,584 bytes, utilisation 0.9)
the formula with no reserve gives 3,178 blocks against the 2,588 vLLM
logged, so vLLM kept about 1.15 GiB there (``tests/decisions/test_kvcache.py``).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perfmodel._checks import check_int_range, check_positive, check_probability
from perfmodel.errors import InputError

__all__ = ["DTYPE_BYTES", "kv_block_bytes", "num_gpu_blocks", "weight_bytes"]

#: bytes per element of the dtypes vLLM names
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "fp8": 1,
               "int8": 1, "auto": 2}


def _get(cfg: Mapping, key: str, default=None) -> Any:
    v = cfg.get(key, default)
    if v is None:
        raise InputError(f"model config: missing {key!r} (an architecture config.json: "
                         "num_hidden_layers, hidden_size, num_attention_heads, ...)")
    return v


def _head_dim(cfg: Mapping) -> int:
    hd = cfg.get("head_dim")
    return int(hd) if hd else int(_get(cfg, "hidden_size")) // int(_get(cfg, "num_attention_heads"))


def kv_block_bytes(cfg: Mapping, *, tp: int = 1, dtype_bytes: int = 2,
                   block_size: int = 16) -> int:
    """Bytes of one KV block on one GPU (see the module docstring)."""
    if not isinstance(cfg, Mapping):
        raise InputError(f"model config must be a mapping, got {type(cfg).__name__}")
    tp = check_int_range("tp", tp, 1)
    layers = int(_get(cfg, "num_hidden_layers"))
    kv_heads = int(cfg.get("num_key_value_heads") or _get(cfg, "num_attention_heads"))
    return 2 * layers * max(1, kv_heads // tp) * _head_dim(cfg) * dtype_bytes * block_size


def weight_bytes(cfg: Mapping, *, tp: int = 1, ep: int = 1, dtype_bytes: int = 2) -> int:
    """Bytes of the weights one GPU holds (see the module docstring)."""
    tp = check_int_range("tp", tp, 1)
    ep = check_int_range("ep", ep, 1)
    h = int(_get(cfg, "hidden_size"))
    layers = int(_get(cfg, "num_hidden_layers"))
    heads = int(_get(cfg, "num_attention_heads"))
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    hd = _head_dim(cfg)
    vocab = int(_get(cfg, "vocab_size"))
    attn = h * heads * hd * 2 + h * kv_heads * hd * 2
    norms = 2 * h + (2 * hd if cfg.get("model_type", "").startswith("qwen3") else 0)
    experts = int(cfg.get("num_experts") or cfg.get("num_local_experts") or 0)
    if experts:
        inter = int(cfg.get("moe_intermediate_size") or _get(cfg, "intermediate_size"))
        expert_params = experts * 3 * h * inter
        dense_mlp = h * experts                       # the router
    else:
        expert_params = 0
        dense_mlp = 3 * h * int(_get(cfg, "intermediate_size"))
    embed = vocab * h * (1 if cfg.get("tie_word_embeddings") else 2)
    dense = (embed + layers * (attn + dense_mlp)) / tp + layers * norms + h
    return round((dense + layers * expert_params / ep) * dtype_bytes)


def num_gpu_blocks(cfg: Mapping, *, gpu_memory_bytes: float, gpu_memory_utilization: float = 0.9,
                   tp: int = 1, ep: int = 1, dtype_bytes: int = 2, block_size: int = 16,
                   activation_reserve_bytes: float = 0.0) -> int:
    """KV-cache blocks of one GPU replica (module docstring for the formula).

    Parameters
    ----------
    cfg : mapping, the model's architecture config (Hugging Face ``config.json``)
    gpu_memory_bytes : float > 0, the GPU's memory
    gpu_memory_utilization : float in (0, 1], vLLM's ``--gpu-memory-utilization``
    tp, ep : tensor- and expert-parallel degrees
    dtype_bytes : bytes per weight and KV element (2 for bfloat16)
    block_size : tokens per block
    activation_reserve_bytes : float >= 0, memory vLLM keeps outside weights and KV

    Raises
    ------
    InputError
        Bad arguments, or weights and reserve leaving no room for one block.
    """
    mem = check_positive("gpu_memory_bytes", gpu_memory_bytes)
    util = check_probability("gpu_memory_utilization", gpu_memory_utilization, closed=True)
    reserve = check_positive("activation_reserve_bytes", activation_reserve_bytes,
                             allow_zero=True)
    w = weight_bytes(cfg, tp=tp, ep=ep, dtype_bytes=dtype_bytes)
    blk = kv_block_bytes(cfg, tp=tp, dtype_bytes=dtype_bytes, block_size=block_size)
    n = int((mem * util - w - reserve) // blk)
    if n < 1:
        raise InputError(f"no room for the KV cache: {mem * util / 2**30:.2f} GiB usable, weights "
                         f"{w / 2**30:.2f} GiB, reserve {reserve / 2**30:.2f} GiB")
    return n
