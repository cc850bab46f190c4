"""LLMServingSim loaders: registry entries, bundles, model configs, serving runs, bad input."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from perfmodel.data import datasets as D
from perfmodel.data.datasets import llmservingsim as L
from perfmodel.errors import InputError

MIRROR = os.environ.get(D.ENV_MIRROR, "")
HAVE = bool(MIRROR) and (Path(MIRROR) / "llmservingsim").is_dir()
needs_mirror = pytest.mark.skipif(
    not HAVE, reason=f"the LLMServingSim files are not in the mirror (set {D.ENV_MIRROR})")


def test_registry_entries_pin_upstream_commit_sha256_and_licence():
    entries = D.list_datasets("llmservingsim/")
    assert len(entries) == 64
    for ds in entries:
        assert ds.url.startswith("https://raw.githubusercontent.com/casys-kaist/LLMServingSim/5daddb21a545658d5150b535712d0494584b5278/")
        assert ds.url.endswith(ds.name[len("llmservingsim/"):]) and ds.path == ds.name
        assert len(ds.sha256) == 64 and ds.license == "MIT"
        assert ds.citation in D.CITATIONS
    runs = L.list_serving_runs()
    assert sorted(runs.itertuples(index=False)) == [
        ("RTX4090", "Llama-3.1-8B"), ("RTXPRO6000", "Llama-3.1-8B"),
        ("RTXPRO6000", "Qwen3-30B-A3B-Instruct-2507")]
    b = L.list_profile_bundles()
    assert set(b[b.hardware == "RTX4090"].tp) == {1}
    assert set(b[b.model == "Qwen/Qwen3-32B"].tp) == {1, 2}


@needs_mirror
def test_every_registered_file_matches_its_sha256_in_the_mirror():
    for ds in D.list_datasets("llmservingsim/"):
        assert D.sha256_file(D.fetch(ds.name, download=False)) == ds.sha256


@needs_mirror
def test_bundle_tables_are_tidy_and_cover_the_documented_grid():
    b = L.load_profile_bundle("RTXPRO6000", "Llama-3.1-8B", tp=1)
    assert b.hardware == "RTXPRO6000" and b.model == "meta-llama/Llama-3.1-8B" and b.tp == 1
    a = b.attention
    assert list(a.columns) == ["prefill_chunk", "kv_prefill", "n_decode", "kv_decode", "time_us"]
    assert not a.duplicated(list(a.columns[:4])).any()
    assert a.prefill_chunk.max() == 2048 and a.n_decode.max() == 256
    assert a.kv_decode.max() == 16384 and (a.time_us > 0).all()
    assert {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"} <= set(b.dense.layer)
    assert set(b.per_sequence.layer) == {"lm_head", "sampler"}
    assert b.moe is None and b.skew is not None and 0 < b.alpha_default < 1
    moe = L.load_profile_bundle("RTXPRO6000", "Qwen/Qwen3-30B-A3B-Instruct-2507", tp=2)
    assert moe.moe is not None and moe.moe.activated_experts.max() == 128  # from tp1/
    rtx = L.load_profile_bundle("RTX4090", "meta-llama/Llama-3.1-8B")
    assert rtx.skew is None and rtx.alpha_default is None  # skew_fit disabled in its meta


@needs_mirror
def test_a_bundle_folder_given_as_path_loads_like_the_registry_entry():
    reg = L.load_profile_bundle("RTX4090", "Llama-3.1-8B")
    own = L.load_profile_bundle(reg.source)
    assert own.attention.equals(reg.attention) and own.dense.equals(reg.dense)


@needs_mirror
def test_model_configs_parse_the_architecture():
    llama = L.load_model_config("meta-llama/Llama-3.1-8B")
    assert (llama.layers, llama.hidden, llama.heads, llama.kv_heads, llama.head_dim) == (
        32, 4096, 32, 8, 128)
    assert llama.intermediate == 14336 and llama.vocab == 128256 and not llama.is_moe
    qwen = L.load_model_config("Qwen3-30B-A3B-Instruct-2507")
    assert qwen.is_moe and (qwen.experts, qwen.experts_per_token) == (128, 8)
    assert qwen.head_dim == 128  # explicit; hidden // heads would give 64
    assert llama.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2


@needs_mirror
def test_serving_run_dir_holds_the_verified_run_files():
    d = L.serving_run_dir("RTXPRO6000", "Qwen/Qwen3-30B-A3B-Instruct-2507")
    for f in L.RUN_FILES:
        assert (d / f).is_file()
    meta = json.loads((d / "vllm/meta.json").read_text())
    assert meta["engine_kwargs"]["data_parallel_size"] == 2


def test_bad_input_names_the_problem(tmp_path):
    with pytest.raises(InputError, match="no registered serving run"):
        L.serving_run_dir("H100", "Llama-3.1-8B")
    with pytest.raises(InputError, match="hardware 'H100'"):
        L.load_profile_bundle("H100", "Llama-3.1-8B")
    with pytest.raises(InputError, match="TP 2 not in bundle"):
        L.load_profile_bundle("RTX4090", "Llama-3.1-8B", tp=2)
    with pytest.raises(InputError, match="tp must be"):
        L.load_profile_bundle("RTX4090", "Llama-3.1-8B", tp=0)
    with pytest.raises(InputError, match="no such folder"):
        L.load_profile_bundle(str(tmp_path / "nope"))
    with pytest.raises(InputError, match="no such file"):
        L.load_model_config(str(tmp_path / "nope.json"))
    cfg = tmp_path / "m.json"
    cfg.write_text(json.dumps({"model_type": "mamba", "hidden_size": 8}))
    with pytest.raises(InputError, match="unknown architecture"):
        L.load_model_config(cfg)
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
    with pytest.raises(InputError, match="missing field 'num_attention_heads'"):
        L.load_model_config(cfg)


@needs_mirror
def test_a_bundle_folder_with_a_missing_file_or_tp_is_refused(tmp_path):
    src = Path(L.load_profile_bundle("RTX4090", "Llama-3.1-8B").source)
    dst = tmp_path / "bundle"
    shutil.copytree(src, dst)
    with pytest.raises(InputError, match=r"TP 2 not in bundle \(has TP \[1\]\)"):
        L.load_profile_bundle(str(dst), tp=2)
    (dst / "tp1" / "dense.csv").unlink()
    with pytest.raises(InputError, match="missing file tp1/dense.csv"):
        L.load_profile_bundle(str(dst))
    (dst / "meta.yaml").unlink()
    with pytest.raises(InputError, match="missing file meta.yaml"):
        L.load_profile_bundle(str(dst))
