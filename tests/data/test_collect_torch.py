"""Tests of the PyTorch step harness (perfmodel.data.collect_torch): CPU, float32, tiny model.

Known truth: a packed ragged step must compute, for every request, exactly
what the same model computes for that request alone with the same cached
keys/values; and a prefill split into chunks (second chunk reading the KV
cache the first one wrote) must equal the one-shot prefill.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="torch is not installed in this environment (the collector is optional; "
                    "use a venv with torch, e.g. .venv-torch)")

from perfmodel._io import sha256_file
from perfmodel.data.collect_torch import harness as H
from perfmodel.errors import InputError

CONFIG = Path(__file__).resolve().parents[2] / "perfmodel" / "data" / "configs" / "llama-gpu-tiny.json"
TOL = 1e-5


@pytest.fixture(scope="module")
def cfg():
    return H.load_config(CONFIG)


@pytest.fixture(scope="module")
def model(cfg):
    torch.manual_seed(0)
    return H.LlamaStepModel(cfg, dtype=torch.float32, device="cpu", seed=11)


def _random_context(cfg, ctxs, seed):
    g = torch.Generator().manual_seed(seed)
    shape = lambda c: (cfg.num_hidden_layers, c, cfg.num_key_value_heads, cfg.head_dim)
    return ([torch.randn(shape(c), generator=g) for c in ctxs],
            [torch.randn(shape(c), generator=g) for c in ctxs])


def _packed_vs_separate(cfg, model, chunks, ctxs, seed):
    rng = np.random.default_rng(seed)
    toks = rng.integers(0, cfg.vocab_size, sum(chunks))
    kctx, vctx = _random_context(cfg, ctxs, seed)
    plan = H.plan_step(chunks, ctxs)
    cache = H.KVCache(cfg, plan.total_kv + 17, seed=seed + 1)
    for i, c in enumerate(ctxs):
        a = int(plan.cu_k[i])
        cache.k[:, a:a + c] = kctx[i]
        cache.v[:, a:a + c] = vctx[i]
    hid, logits = model.step(chunks, ctxs, toks, cache, "sdpa")
    assert hid.shape == (sum(chunks), cfg.hidden_size)
    assert logits.shape == (len(chunks), cfg.vocab_size)
    assert torch.isfinite(hid).all() and torch.isfinite(logits).all()
    worst = 0.0
    for i, (c, x) in enumerate(zip(chunks, ctxs)):
        alone = H.KVCache(cfg, x + c + 3, seed=seed + 2)   # different random slots elsewhere
        alone.k[:, :x] = kctx[i]
        alone.v[:, :x] = vctx[i]
        a, b = int(plan.cu_q[i]), int(plan.cu_q[i + 1])
        h1, l1 = model.step([c], [x], toks[a:b], alone, "sdpa")
        worst = max(worst, float((h1 - hid[a:b]).abs().max()), float((l1 - logits[i]).abs().max()))
        # the step wrote this request's new keys/values where the plan said
        kb = int(plan.cu_k[i])
        assert torch.allclose(cache.k[:, kb + x:kb + x + c], alone.k[:, x:x + c], atol=TOL)
    return worst, float(hid.abs().max())


@pytest.mark.parametrize("chunks,ctxs", [
    ([1, 1, 1, 1], [5, 0, 17, 3]),                  # decode only, ragged contexts
    ([6, 3, 9], [0, 4, 11]),                        # prefill chunks, fresh and with context
    ([1, 7, 1, 1, 12, 1], [9, 0, 30, 2, 5, 1]),     # mixed chunked-prefill batch
])
def test_packed_step_equals_separate_requests(cfg, model, chunks, ctxs):
    worst, scale = _packed_vs_separate(cfg, model, chunks, ctxs, seed=sum(chunks))
    assert scale > 0.1          # outputs are not trivially zero
    assert worst < TOL, f"max abs difference {worst:.3g} (output scale {scale:.3g})"


def test_chunked_prefill_equals_full_prefill(cfg, model):
    rng = np.random.default_rng(3)
    toks = rng.integers(0, cfg.vocab_size, 29)
    full, _ = model.step([29], [0], toks, H.KVCache(cfg, 40, seed=1), "sdpa")
    cache = H.KVCache(cfg, 40, seed=2)
    parts = [model.step([11], [0], toks[:11], cache, "sdpa")[0],
             model.step([1], [11], toks[11:12], cache, "sdpa")[0],      # a decode step
             model.step([17], [12], toks[12:], cache, "sdpa")[0]]
    assert float((torch.cat(parts) - full).abs().max()) < TOL
    # the rotary embedding matters: a wrong position changes the output
    bad = model.step([17], [13], toks[12:], cache, "sdpa")[0]
    assert float((bad - parts[2]).abs().max()) > 1e-3


def test_plan_step_layout():
    p = H.plan_step([2, 1, 3], [4, 0, 1])
    assert p.cu_q.tolist() == [0, 2, 3, 6]
    assert p.cu_k.tolist() == [0, 6, 7, 11]
    assert p.positions.tolist() == [4, 5, 0, 1, 2, 3]
    assert p.write_index.tolist() == [4, 5, 6, 8, 9, 10]
    assert p.last_index.tolist() == [1, 2, 5]
    assert (p.max_q, p.max_k, p.total_tokens, p.total_kv) == (3, 6, 6, 11)
    with pytest.raises(InputError, match="chunk_sizes must be >= 1"):
        H.plan_step([1, 0], [0, 0])
    with pytest.raises(InputError, match="max_kv_tokens"):
        H.plan_step([4], [10], max_kv_tokens=13)
    with pytest.raises(InputError, match="2 entries"):
        H.plan_step([1, 1], [0, 0, 0])


def _small_params(seed=5):
    return H.WorkloadParams(seed=seed, n_decode=40, n_prefill=40, n_mixed=40,
                            decode_batch=(1, 16), decode_ctx=(8, 64), prefill_tokens=(4, 96),
                            prefill_ctx=(4, 64), mixed_tokens=(8, 96), mixed_max_decodes=12,
                            max_kv_tokens=4096)


def test_workload_is_deterministic_and_in_range():
    a, b = H.generate_schedule(_small_params()), H.generate_schedule(_small_params())
    assert a == b
    assert a != H.generate_schedule(_small_params(seed=6))
    assert len(a) == 120 and len({s.config_id for s in a}) == 120
    for s in a:
        c, x = np.array(s.chunk_sizes), np.array(s.context_lens)
        assert c.size == x.size == s.batch_size
        assert (c >= 1).all() and (x >= 0).all() and c.sum() + x.sum() <= 4096
        if s.phase == "decode":
            assert (c == 1).all() and 1 <= s.batch_size <= 16 and ((x >= 8) & (x <= 64)).all()
        elif s.phase == "prefill":
            assert (c >= 2).all() and 4 <= s.total_tokens <= 96 and s.batch_size <= 16
        else:
            assert s.phase == "mixed" and (c == 1).any() and (c > 1).any()
            assert 8 <= s.total_tokens <= 96
    # S of each class spread over its log range: every log-decile is populated
    S = np.array([s.total_tokens for s in a if s.phase == "prefill"])
    edges = np.exp(np.linspace(np.log(4), np.log(96), 11))
    assert (np.histogram(S, edges)[0] > 0).all()


def test_replicate_order_shuffles_each_replicate():
    o = H.replicate_order(50, 3, seed=1)
    assert o == H.replicate_order(50, 3, seed=1)
    assert len(o) == 150 and [r for r, _ in o] == [0] * 50 + [1] * 50 + [2] * 50
    perms = [[i for r, i in o if r == k] for k in range(3)]
    assert all(sorted(p) == list(range(50)) for p in perms)
    assert perms[0] != perms[1] != perms[2]
    with pytest.raises(InputError, match="replicates"):
        H.replicate_order(5, 0, seed=1)


def test_collect_end_to_end_on_cpu(cfg, tmp_path):
    params = H.WorkloadParams(seed=2, n_decode=3, n_prefill=3, n_mixed=3, decode_batch=(1, 8),
                              decode_ctx=(8, 64), prefill_tokens=(4, 64), prefill_ctx=(4, 64),
                              mixed_tokens=(8, 64), mixed_max_decodes=6, max_kv_tokens=2048)
    meta = H.collect(cfg, params, tmp_path, replicates=2, device="cpu", dtype="float32",
                     warmup_steps=2, progress_every=0, log=lambda *a: None)
    assert meta["status"] == "complete" and meta["rows"] == 18
    import pandas as pd
    df = pd.read_csv(tmp_path / "trace.csv")
    assert list(df.columns) == H.TRACE_COLUMNS and len(df) == 18
    assert (df["duration_ms"] > 0).all()
    cs = df["chunk_sizes"].astype(str).str.split(";").map(lambda v: sum(map(int, v)))
    assert (cs == df["total_tokens"]).all()
    assert (df["num_decode"] + df["num_prefill"] == df["batch_size"]).all()
    assert (df.groupby("config")["replicate"].nunique() == 2).all()
    saved = json.loads((tmp_path / "trace.meta.json").read_text())
    assert saved["csv_sha256"] == sha256_file(tmp_path / "trace.csv")
    assert saved["noise_floor"]["n_configs"] == 9


def test_noise_floor_known_cv():
    import pandas as pd
    rng = np.random.default_rng(0)
    rows, step = [], 0
    for r in (1, 2, 3):
        for k in rng.permutation(400):
            rows.append({"step": step, "replicate": r, "config": f"c{k}", "phase": "decode",
                             "duration_ms": (1 + k) * (1 + 0.05 * rng.standard_normal())})
            step += 1
    nf = H.noise_floor(pd.DataFrame(rows))
    assert nf["n_configs"] == 400
    # median sample CV of 3 normal draws with sd 5% is 0.05*sqrt(ln 4) ~ 0.042 (chi, 2 dof)
    assert 0.035 < nf["raw"]["median_cv"] < 0.055
    with pytest.raises(InputError, match="columns"):
        H.noise_floor(pd.DataFrame({"x": [1]}))


def test_check_backends_on_cpu(cfg):
    chk = H.check_backends(cfg, dtype=torch.float32, device="cpu", seed=1)
    assert chk["errors"]["math"] is None and chk["errors"]["sdpa"] is None
    assert chk["rel_err"]["sdpa"] < 1e-5          # default SDPA kernel == math kernel on CPU
    if chk["errors"]["flash_varlen"] is not None:  # no CPU kernel for the flash op
        assert chk["rel_err"]["flash_varlen"] is None and chk["choice"] == "sdpa"
