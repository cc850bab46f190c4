"""Step composition from a layer-profile bundle: hand-summed steps, held-out grid points,
monotonicity, the composed trace and fit, bad input."""
from __future__ import annotations

import itertools
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfmodel.core.compose import (
    NOT_COMPOSED,
    StepComposer,
    StepDesign,
    compose_trace,
    design_for_engine,
    fit_from_profile,
)
from perfmodel.core.profile_tables import AttentionGrid, Table1D
from perfmodel.data.datasets import ENV_MIRROR
from perfmodel.data.datasets.llmservingsim import ModelConfig, ProfileBundle
from perfmodel.data.trace import validate_trace
from perfmodel.errors import InputError

MIRROR = os.environ.get(ENV_MIRROR, "")
needs_mirror = pytest.mark.skipif(
    not (MIRROR and (Path(MIRROR) / "llmservingsim").is_dir()),
    reason=f"the LLMServingSim bundles are not in the mirror (set {ENV_MIRROR})")


# ---------------------------------------------------------------------------
# a toy bundle whose times are multilinear in the axes: interpolation is exact
# ---------------------------------------------------------------------------

def _att(p, kp, n, kd):
    return 5 + 0.5 * p + 0.01 * p * kp + n * (1 + 0.02 * kd)


def _toy_bundle(skew=None) -> ProfileBundle:
    rows = []
    for p, kp, n, kd in itertools.product([0, 16, 32, 64], [0, 16, 64], [0, 1, 2, 4], [0, 16, 64]):
        if (p == 0 and kp) or (n == 0 and kd) or (n and not kd) or (p == 0 and n == 0):
            continue
        rows.append((p, kp, n, kd, _att(p, kp, n, kd)))
    att = pd.DataFrame(rows, columns=["prefill_chunk", "kv_prefill", "n_decode", "kv_decode",
                                      "time_us"])
    tok = [1, 64, 128]
    dense = pd.DataFrame(
        [("qkv_proj", t, 2 + 0.1 * t) for t in tok] + [("layernorm", t, 1 + 0.01 * t) for t in tok]
        + [("embedding", t, 3.0) for t in tok] + [("final_layernorm", t, 1.0) for t in tok],
        columns=["layer", "tokens", "time_us"])
    per = pd.DataFrame([("lm_head", s, 10.0 + s) for s in (1, 8)]
                       + [("sampler", s, 2 + 0.5 * s) for s in (1, 8)],
                       columns=["layer", "sequences", "time_us"])
    return ProfileBundle(hardware="toy", model="toy", variant="bf16", tp=1, attention=att,
                         dense=dense, per_sequence=per, moe=None, skew=skew, alpha_default=None,
                         meta={}, source="toy")


TOY_CFG = ModelConfig(name="toy", model_type="llama", layers=2, hidden=64, heads=4, kv_heads=4,
                      head_dim=16, intermediate=128, vocab=100)


def test_a_step_is_the_hand_summed_layers():
    comp = StepComposer(_toy_bundle(), TOY_CFG)
    # two prefill chunks (40 on 16 cached, 20 on 0) and two decodes (contexts 30, 50)
    got = comp.step_ms([[40, 20, 1, 1]], [[16, 0, 30, 50]])
    att = _att(40, 16, 2, 40) + (_att(20, 0, 0, 0) - _att(16, 0, 0, 0))
    layer = att + (2 + 0.1 * 62) + 2 * (1 + 0.01 * 62)
    once = 3 + 1 + (10 + 4) + (2 + 0.5 * 4)
    assert got[0] == pytest.approx((2 * layer + once) / 1e3, rel=1e-12)
    parts = comp.parts_ms(StepDesign(np.array([40., 20, 1, 1]), np.array([16., 0, 30, 50]),
                                     np.array([4]), np.array(["mixed"])))
    assert parts["attention"][0] == pytest.approx(2 * att / 1e3)
    assert parts["moe"][0] == 0.0


def test_toy_steps_grow_with_decodes_context_and_tokens():
    comp = StepComposer(_toy_bundle(), TOY_CFG)
    dec = comp.step_ms([[1] * b for b in (1, 2, 3, 4, 6)], [[32] * b for b in (1, 2, 3, 4, 6)])
    ctx = comp.step_ms([[1, 1]] * 4, [[c, c] for c in (16, 30, 50, 64)])
    tok = comp.step_ms([[p] for p in (16, 24, 40, 64, 100)], [[0]] * 5)
    for v in (dec, ctx, tok):
        assert np.all(np.diff(v) > 0)


def test_interpolation_clamps_below_and_extends_above():
    g = AttentionGrid(_toy_bundle().attention)
    # below the smallest non-zero chunk / decode context: clamped up to it
    assert g(5, 0, 0, 0) == pytest.approx(_att(16, 0, 0, 0))
    assert g(0, 0, 1, 3) == pytest.approx(_att(0, 0, 1, 16))
    # above the grid: the top two points extended linearly (exact for the multilinear toy)
    assert g(128, 16, 8, 128) == pytest.approx(_att(128, 16, 8, 128))
    t = Table1D(_toy_bundle().dense, "layer", "tokens", "dense")
    assert t("qkv_proj", 256) == pytest.approx(2 + 0.1 * 256)
    assert t("qkv_proj", 0.5) == pytest.approx(2 + 0.1 * 1)


# ---------------------------------------------------------------------------
# the published bundles
# ---------------------------------------------------------------------------

def _bundle(hw="RTXPRO6000", model="Llama-3.1-8B", tp=1):
    from perfmodel.data.datasets.llmservingsim import load_profile_bundle
    return load_profile_bundle(hw, model, tp=tp)


def _heldout_attention(att: pd.DataFrame, frac: float, seed: int):
    """Relative errors at interior grid points removed before the grid is built."""
    p, kp, n, kd = (att[c] for c in AttentionGrid.COLS)
    interior = ((p.between(17, p.max() - 1) | (p == 0)) & (kp < kp.max())
                & ((n == 0) | (n.between(2, 127) & kd.between(17, kd.max() - 1))))
    hold = interior.to_numpy() & (np.random.default_rng(seed).random(len(att)) < frac)
    g = AttentionGrid(att[~hold])
    h = att[hold]
    pred = g(h.prefill_chunk, h.kv_prefill, h.n_decode, h.kv_decode)
    return np.abs(pred / h.time_us.to_numpy() - 1), int(hold.sum())


@needs_mirror
@pytest.mark.parametrize("hw", ["RTXPRO6000", "RTX4090"])
def test_attention_grid_predicts_held_out_points(hw):
    att = _bundle(hw).attention
    g = AttentionGrid(att)
    assert np.allclose(g(att.prefill_chunk, att.kv_prefill, att.n_decode, att.kv_decode),
                       att.time_us, rtol=1e-12)
    err, n = _heldout_attention(att, 0.1, seed=0)
    print(f"{hw} attention held-out ({n} points): median {np.median(err):.3f}, "
          f"p90 {np.quantile(err, 0.9):.3f}, p95 {np.quantile(err, 0.95):.3f}, max {err.max():.2f}")
    assert n > 300
    assert np.median(err) < 0.02 and np.quantile(err, 0.9) < 0.12


@needs_mirror
def test_dense_table_predicts_held_out_token_counts():
    dense = _bundle().dense
    errs = []
    for layer, g in dense.groupby("layer"):
        g = g.sort_values("tokens")
        keep = np.ones(len(g), bool)
        keep[1:-1:2] = False  # every other interior token count held out
        t = Table1D(g[keep], "layer", "tokens", "dense")
        errs.append(np.abs(t(layer, g.tokens[~keep]) / g.time_us[~keep].to_numpy() - 1))
    err = np.concatenate(errs)
    print(f"dense held-out ({err.size} points): median {np.median(err):.3f}, "
          f"p95 {np.quantile(err, 0.95):.3f}, max {err.max():.2f}")
    assert np.median(err) < 0.03 and np.quantile(err, 0.95) < 0.15


@needs_mirror
def test_bundle_steps_grow_with_batch_and_context():
    comp = StepComposer(_bundle(), "meta-llama/Llama-3.1-8B")
    dec = comp.step_ms([[1] * b for b in (1, 16, 64, 128)], [[2000] * b for b in (1, 16, 64, 128)])
    ctx = comp.step_ms([[1] * 64] * 4, [[c] * 64 for c in (100, 1000, 4000, 12000)])
    tok = comp.step_ms([[p] for p in (128, 512, 1024, 2048)], [[0]] * 4)
    for v in (dec, ctx, tok):
        assert np.all(np.diff(v) > 0), v


@needs_mirror
def test_skew_correction_applies_only_to_heterogeneous_decodes():
    b = _bundle()
    on = StepComposer(b, "meta-llama/Llama-3.1-8B")
    off = StepComposer(ProfileBundle(**{**b.__dict__, "skew": None, "alpha_default": None}),
                       "meta-llama/Llama-3.1-8B")
    same = ([[1] * 32], [[3000] * 32])
    mixed = ([[1] * 32], [[100] * 28 + [900] * 4])  # bucket n<=32, sr<=15%, kvB<=1k, kp=0
    assert on.step_ms(*same)[0] == off.step_ms(*same)[0]
    sk = b.skew
    alpha = sk[(sk.pc == 0) & (sk.n_label == "n<=32") & (sk.skew_rate_label == "sr<=15%")
               & (sk.kv_big_label == "kvB<=1k") & (sk.kp_label == "kp=0")].alpha.item()
    assert alpha != 0
    a = on.attention
    want = 32 * alpha * (a(0, 0, 32, 900) - a(0, 0, 32, 200)).item() / 1e3  # 32 layers
    assert on.step_ms(*mixed)[0] - off.step_ms(*mixed)[0] == pytest.approx(want, rel=1e-9)


@needs_mirror
def test_moe_model_composes_expert_time():
    comp = StepComposer(_bundle(model="Qwen3-30B-A3B-Instruct-2507"),
                        "Qwen/Qwen3-30B-A3B-Instruct-2507")
    d = StepDesign(np.ones(1 + 16 + 128, float), np.full(145, 500.0),
                   np.array([1, 16, 128]), np.array(["decode"] * 3))
    moe = comp.parts_ms(d)["moe"]
    assert np.all(moe > 0) and np.all(np.diff(moe) > 0)


@needs_mirror
def test_fit_from_profile_reports_its_error_against_the_composed_steps():
    b = _bundle()
    fit, rep = fit_from_profile(b.source, "meta-llama/Llama-3.1-8B", tp=1, max_num_seqs=128,
                                max_num_batched_tokens=2048, max_context=4000, n_steps=600)
    assert rep["model"] == fit.model_name == "seed_ctx_mono" and rep["n_steps"] == 600
    assert 0 < rep["mape_pct"] < 15 and rep["max_abs_err_pct"] >= rep["p95_abs_err_pct"]
    assert rep["mape_pct"] == pytest.approx(fit.mape)
    assert rep["not_composed"] == list(NOT_COMPOSED) and rep["skew_correction"]


def test_design_covers_the_engine_range_within_its_limits():
    d = design_for_engine(64, 512, 3000, n_steps=500, seed=3)
    rows = np.repeat(np.arange(d.n_steps), d.counts)
    S = np.bincount(rows, weights=d.chunk)
    assert d.counts.max() <= 64 and S.max() <= 512 and np.all(d.chunk >= 1)
    assert set(d.kind) == {"decode", "prefill", "mixed"}
    assert d.context.max() > 1000 and d.counts[d.kind == "decode"].max() > 48
    again = design_for_engine(64, 512, 3000, n_steps=500, seed=3)
    assert np.array_equal(again.chunk, d.chunk) and np.array_equal(again.context, d.context)


def test_compose_trace_is_a_valid_canonical_trace():
    comp = StepComposer(_toy_bundle(), TOY_CFG)
    d = design_for_engine(4, 64, 64, n_steps=50, seed=1)
    tr = compose_trace(comp, d)
    v = validate_trace(tr)
    assert len(v) == 50 and np.allclose(v.duration_ms, comp.compose(d))
    assert (tr.num_decode + tr.num_prefill == tr.batch_size).all()


def test_bad_input_names_the_problem():
    comp = StepComposer(_toy_bundle(), TOY_CFG)
    with pytest.raises(InputError, match="differ in length"):
        comp.step_ms([[1, 1]], [[3]])
    with pytest.raises(InputError, match="chunk sizes must be integers >= 1"):
        comp.step_ms([[0]], [[3]])
    with pytest.raises(InputError, match="context lengths"):
        comp.step_ms([[1]], [[-1]])
    with pytest.raises(InputError, match="empty"):
        comp.step_ms([], [])
    with pytest.raises(InputError, match="tp=2 but the loaded bundle"):
        StepComposer(_toy_bundle(), TOY_CFG, tp=2)
    moe_cfg = ModelConfig(**{**TOY_CFG.__dict__, "experts": 8, "experts_per_token": 2})
    with pytest.raises(InputError, match="no moe.csv"):
        StepComposer(_toy_bundle(), moe_cfg)
    with pytest.raises(InputError, match="profile must be"):
        StepComposer(3, TOY_CFG)
    with pytest.raises(InputError, match="max_num_seqs"):
        design_for_engine(0, 2048, 100)
    with pytest.raises(InputError, match="model"):
        fit_from_profile(_toy_bundle(), TOY_CFG, max_num_seqs=4, max_num_batched_tokens=64,
                         max_context=64, model="no_such_model")


@needs_mirror
def test_a_tp2_bundle_composes_per_rank_times_below_tp1():
    from perfmodel.data.datasets.llmservingsim import load_model_config
    cfg = load_model_config("Qwen/Qwen3-30B-A3B-Instruct-2507")
    steps = ([[1] * 64, [2048]], [[2000] * 64, [0]])
    t1 = StepComposer(_bundle(model=cfg.name, tp=1), cfg, tp=1).step_ms(*steps)
    t2 = StepComposer(_bundle(model=cfg.name, tp=2), cfg, tp=2).step_ms(*steps)
    assert np.all(t2 < t1)  # halved per-rank shapes; no all-reduce is in either timing
