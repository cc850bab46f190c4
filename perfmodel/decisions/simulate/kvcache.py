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

from perfmodel._checks import check_int_range, check_positive, check_probability
from perfmodel.data.datasets.llmservingsim import ModelConfig, model_config_from_dict
from perfmodel.errors import InputError

__all__ = ["DTYPE_BYTES", "kv_block_bytes", "num_gpu_blocks", "weight_bytes"]

#: bytes per element of the dtypes vLLM names
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "fp8": 1,
               "int8": 1, "auto": 2}


def _config(cfg) -> ModelConfig:
    """The architecture as a :class:`ModelConfig` (the one parser of config.json files)."""
    return model_config_from_dict(cfg, "model config")


def kv_block_bytes(cfg, *, tp: int = 1, dtype_bytes: int = 2, block_size: int = 16) -> int:
    """Bytes of one KV block on one GPU (see the module docstring).

    ``cfg`` is a :class:`~perfmodel.data.datasets.llmservingsim.ModelConfig` or
    a parsed HuggingFace ``config.json`` dict.
    """
    m = _config(cfg)
    tp = check_int_range("tp", tp, 1)
    return 2 * m.layers * max(1, m.kv_heads // tp) * m.head_dim * dtype_bytes * block_size


def weight_bytes(cfg, *, tp: int = 1, ep: int = 1, dtype_bytes: int = 2) -> int:
    """Bytes of the weights one GPU holds (see the module docstring)."""
    m = _config(cfg)
    tp = check_int_range("tp", tp, 1)
    ep = check_int_range("ep", ep, 1)
    h, hd = m.hidden, m.head_dim
    attn = h * m.heads * hd * 2 + h * m.kv_heads * hd * 2
    norms = 2 * h + (2 * hd if m.model_type.startswith("qwen3") else 0)
    if m.is_moe:
        expert_params = m.experts * 3 * h * (m.moe_intermediate or m.intermediate)
        dense_mlp = h * m.experts                     # the router
    else:
        expert_params = 0
        dense_mlp = 3 * h * m.intermediate
    embed = m.vocab * h * (1 if m.tie_word_embeddings else 2)
    dense = (embed + m.layers * (attn + dense_mlp)) / tp + m.layers * norms + h
    return round((dense + m.layers * expert_params / ep) * dtype_bytes)


def num_gpu_blocks(cfg, *, gpu_memory_bytes: float, gpu_memory_utilization: float = 0.9,
                   tp: int = 1, ep: int = 1, dtype_bytes: int = 2, block_size: int = 16,
                   activation_reserve_bytes: float = 0.0) -> int:
    """KV-cache blocks of one GPU replica (module docstring for the formula).

    Parameters
    ----------
    cfg : ModelConfig, or the model's parsed architecture config (``config.json`` dict)
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
