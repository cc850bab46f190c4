"""KV-cache capacity: parameter counts, block bytes, and the published runs' logs."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from perfmodel.decisions.simulate import kv_block_bytes, num_gpu_blocks, weight_bytes
from perfmodel.errors import InputError

LLAMA_8B = {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
            "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256,
            "tie_word_embeddings": False, "model_type": "llama"}
MIRROR = Path(os.environ.get("PERFMODEL_DATA_MIRROR", "/nonexistent")) / "llmservingsim"


def test_llama_8b_parameters_and_block_bytes():
    assert weight_bytes(LLAMA_8B) == 2 * 8_030_261_248        # the published parameter count
    # 2 (K, V) x 32 layers x 8 heads x 128 x 2 bytes x 16 tokens = 2 MiB
    assert kv_block_bytes(LLAMA_8B) == 2 * 2**20
    assert kv_block_bytes(LLAMA_8B, tp=2) == 2**20
    assert weight_bytes(LLAMA_8B, tp=2) < weight_bytes(LLAMA_8B) / 2 + 2**20


def test_num_gpu_blocks_formula_by_hand():
    mem = 24 * 2**30
    w = weight_bytes(LLAMA_8B)
    expect = int((0.9 * mem - w - 2**30) // (2 * 2**20))
    assert num_gpu_blocks(LLAMA_8B, gpu_memory_bytes=mem, activation_reserve_bytes=2**30) == expect


def test_bad_input():
    with pytest.raises(InputError, match="no room"):
        num_gpu_blocks(LLAMA_8B, gpu_memory_bytes=8 * 2**30)
    with pytest.raises(InputError, match="num_hidden_layers"):
        kv_block_bytes({"hidden_size": 8})
    with pytest.raises(InputError, match="gpu_memory_utilization"):
        num_gpu_blocks(LLAMA_8B, gpu_memory_bytes=80 * 2**30, gpu_memory_utilization=1.5)


@pytest.mark.skipif(not MIRROR.is_dir(), reason="LLMServingSim files not in PERFMODEL_DATA_MIRROR")
def test_against_the_rtx4090_log():
    cfg = json.loads((MIRROR / "configs/model/meta-llama/Llama-3.1-8B.json").read_text())
    meta = json.loads((MIRROR / "bench/examples/RTX4090/Llama-3.1-8B/vllm/meta.json").read_text())
    mem = meta["hardware"]["device_total_memory_bytes"]
    logged = meta["kv_cache"]["num_gpu_blocks"]
    upper = num_gpu_blocks(cfg, gpu_memory_bytes=mem, gpu_memory_utilization=0.9)
    # with no reserve the formula is an upper bound; vLLM kept ~1.15 GiB for activations,
    # CUDA graphs and non-torch memory on that run
    assert upper > logged
    implied = (0.9 * mem - weight_bytes(cfg)) - logged * kv_block_bytes(cfg)
    assert 1.0 * 2**30 < implied < 1.3 * 2**30
    assert num_gpu_blocks(cfg, gpu_memory_bytes=mem, activation_reserve_bytes=implied) == logged
