"""Replay settings: the EP all-to-all term by hand, its wrapper, bad input."""
from __future__ import annotations

import numpy as np
import pytest

from perfmodel.data.datasets.llmservingsim import model_config_from_dict
from perfmodel.decisions.replay import (
    WithAllToAll,
    ep_all_to_all_ms,
    run_engine_settings,
    run_parallelism,
)
from perfmodel.errors import InputError

CFG = model_config_from_dict({"model_type": "qwen3_moe", "hidden_size": 2048,
                              "num_attention_heads": 32, "num_hidden_layers": 48,
                              "intermediate_size": 6144, "vocab_size": 151936,
                              "num_experts": 128, "num_experts_per_tok": 8,
                              "moe_intermediate_size": 768}, "moe")


def test_all_to_all_by_hand():
    # 48 layers x 2 x (20 us + 100 tokens x 2048 x 2 bytes / 16 GB/s = 25.6 us) = 4.3776 ms
    t = ep_all_to_all_ms([100], CFG, ep=2, link_bw_gbs=16, link_latency_us=20)
    assert t[0] == pytest.approx(48 * 2 * (20e-6 + 100 * 2048 * 2 / 16e9) * 1e3)
    assert ep_all_to_all_ms([100, 7], CFG, ep=1, link_bw_gbs=16, link_latency_us=20).tolist() == [0, 0]
    with pytest.raises(InputError, match="link_bw_gbs"):
        ep_all_to_all_ms([1], CFG, ep=2, link_bw_gbs=0, link_latency_us=20)


def test_wrapper_adds_the_term_and_keeps_the_model():
    class Base:
        model = "m"

        def predict(self, f):
            return np.full(len(f["S"]), 10.0)

    w = WithAllToAll(Base(), CFG, ep=2, link_bw_gbs=16, link_latency_us=20)
    f = {"S": np.array([100.0, 0.0])}
    assert w.model == "m"
    assert np.allclose(w.predict(f) - 10.0,
                       ep_all_to_all_ms(f["S"], CFG, ep=2, link_bw_gbs=16, link_latency_us=20))
    with pytest.raises(InputError, match="predict"):
        WithAllToAll(object(), CFG, ep=2, link_bw_gbs=16, link_latency_us=20)


def test_engine_settings_precedence_and_parallelism():
    run = {"max_num_seqs": 64, "tensor_parallel_size": 1, "data_parallel_size": 2,
           "enable_expert_parallel": True, "num_gpu_blocks": 100}
    assert run_parallelism(run) == (1, 2)
    assert run_parallelism({**run, "enable_expert_parallel": False}) == (1, 1)
    kw, kv = run_engine_settings(run)
    assert kw["policy"] == "fcfs" and kw["max_num_seqs"] == 64 and kw["num_gpu_blocks"] == 100
    assert kv["num_gpu_blocks_source"].startswith("logged")
    kw, kv = run_engine_settings(run, overrides={"num_gpu_blocks": None, "policy": "decode_first"})
    assert kw["num_gpu_blocks"] is None and kw["policy"] == "decode_first"
    with pytest.raises(InputError, match="unknown EngineConfig fields"):
        run_engine_settings(run, overrides={"max_seqs": 3})
