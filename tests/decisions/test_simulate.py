"""Tests of perfmodel.decisions.simulate: hand-computed schedules, invariants, validation helpers."""
from __future__ import annotations

import argparse
import json

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest

from perfmodel.cli.simulate import add_simulate_arguments, simulate_command
from perfmodel.core.model import get_model
from perfmodel.decisions.simulate import (
    EngineConfig,
    batch_features,
    compare_to_run,
    estimate_step_overhead,
    evaluate_policies,
    pareto_front,
    plot_policy_contour,
    plot_policy_frontier,
    poisson_arrivals,
    run_setup,
    simulate_closed_loop,
    simulate_open_loop,
    validate_closed_loop,
)
from perfmodel.errors import InputError

TRUE = [5.0, 2.0, 0.05, 0.3, 0.01, 0.1, 0.002]  # seed_id: tau_0, a_0, a_1, k_B, k_S, tau_B, tau_S


class Const:
    """A step model with constant step time c ms."""

    def __init__(self, c):
        self.c = c

    def predict(self, f):
        return np.full(len(f["B"]), float(self.c))


class Truth:
    """seed_id with fixed parameters (a known step model)."""

    def __init__(self, theta=TRUE, name="seed_id"):
        self.m = get_model(name)
        self.theta = np.asarray(theta, float)

    def predict(self, f):
        return self.m.predict(self.theta, f)


# ---------------------------------------------------------------------------
# features
# ---------------------------------------------------------------------------

def test_batch_features_match_trace_step_features():
    from perfmodel.data.trace import step_features

    rng = np.random.default_rng(1)
    rows = []
    for _ in range(30):
        b = int(rng.integers(1, 9))
        c = rng.integers(1, 50, b)
        c[rng.random(b) < 0.5] = 1
        x = rng.integers(0, 300, b)
        rows.append((c, x))
    df = pd.DataFrame({
        "batch_size": [len(c) for c, _ in rows],
        "total_tokens": [int(c.sum()) for c, _ in rows],
        "chunk_sizes": [";".join(map(str, c)) for c, _ in rows],
        "context_lens": [";".join(map(str, x)) for _, x in rows],
    })
    ref = step_features(df)
    for i, (c, x) in enumerate(rows):
        got = batch_features(c, x)
        for k, v in ref.items():
            assert got[k][0] == pytest.approx(v[i], rel=1e-12, abs=1e-12), k


def test_batch_features_rejects_bad_input():
    with pytest.raises(InputError, match="chunk_sizes is empty"):
        batch_features([])
    with pytest.raises(InputError, match="chunk_sizes"):
        batch_features([0, 3])
    with pytest.raises(InputError, match="context_lens has 1 items"):
        batch_features([1, 2], [0])


# ---------------------------------------------------------------------------
# hand-computed closed-loop schedules (constant step time)
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("policy", ["decode_first", "prefill_first", "fcfs"])
def test_closed_loop_constant_model_one_wave(policy):
    c, N, P, O = 10.0, 8, 32, 50
    r = simulate_closed_loop(Const(c), N, N, P, O, policy=policy)
    req = r.requests
    assert np.allclose(req["ttft_s"], c / 1000)          # one prefill step
    assert np.allclose(req["e2e_s"], O * c / 1000)       # 1 prefill + (O-1) decode steps
    assert np.allclose(req["tpot_ms"], c)
    d = r.to_dict()
    assert d["n_steps"] == O
    assert d["output_throughput_tok_s"] == pytest.approx(N * O / (O * c / 1000))
    assert d["median_e2e_s"] == pytest.approx(0.5)
    assert d["median_ttft_s"] == pytest.approx(0.01)
    assert d["mean_tpot_ms"] == pytest.approx(10.0)


def test_closed_loop_two_waves_and_overhead():
    c, x = 10.0, 2.5
    r = simulate_closed_loop(Const(c), 4, 2, 8, 3, step_overhead_ms=x)
    step = (c + x) / 1000
    req = r.requests.sort_values("request_id")
    # requests 0,1 run steps 0..2; requests 2,3 arrive at 3 steps and finish at 6
    assert np.allclose(req["arrival_s"], [0, 0, 3 * step, 3 * step])
    assert np.allclose(req["finish_s"], [3 * step, 3 * step, 6 * step, 6 * step])
    assert np.allclose(req["e2e_s"], 3 * step)
    assert r.n_steps == 6
    assert r.to_dict()["output_throughput_tok_s"] == pytest.approx(12 / (6 * step))
    assert np.allclose(r.steps["step_ms"], c + x)
    assert np.allclose(r.steps["duration_ms"], c)


def test_chunked_prefill_hand_computed_decode_first():
    # K = 10, two requests with 16-token prompts, 3 output tokens, 10 ms steps.
    r = simulate_closed_loop(Const(10.0), 2, 2, 16, 3, max_num_seqs=2, max_num_batched_tokens=10)
    s = r.steps
    assert s["chunk_sizes"].tolist() == ["10", "6;4", "1;9", "1;3", "1", "1"]
    assert s["context_lens"].tolist() == ["0", "10;0", "16;4", "17;13", "16", "17"]
    assert s["request_ids"].tolist() == ["0", "0;1", "0;1", "0;1", "1", "1"]
    req = r.requests
    assert np.allclose(req["ttft_s"], [0.02, 0.04])
    assert np.allclose(req["e2e_s"], [0.04, 0.06])
    assert np.allclose(req["tpot_ms"], [10.0, 10.0])
    assert r.to_dict()["output_throughput_tok_s"] == pytest.approx(6 / 0.06)


def test_single_output_token_has_no_tpot():
    r = simulate_closed_loop(Const(5.0), 3, 3, 4, 1)
    assert r.requests["tpot_ms"].isna().all()
    assert r.to_dict()["mean_tpot_ms"] is None
    assert np.allclose(r.requests["e2e_s"], 0.005)


def test_no_chunked_prefill_waits_for_room():
    # K=10, prompts of 8: only one prompt fits per step without chunking
    r = simulate_closed_loop(Const(1.0), 2, 2, 8, 2, max_num_batched_tokens=10,
                             enable_chunked_prefill=False)
    assert r.steps["chunk_sizes"].tolist()[:2] == ["8", "1;8"]
    with pytest.raises(InputError, match="without chunked prefill"):
        simulate_closed_loop(Const(1.0), 2, 2, 12, 2, max_num_batched_tokens=10,
                             enable_chunked_prefill=False)


def test_long_prefill_threshold_caps_chunks():
    r = simulate_closed_loop(Const(1.0), 1, 1, 100, 2, long_prefill_token_threshold=30)
    assert r.steps["chunk_sizes"].tolist() == ["30", "30", "30", "10", "1"]


# ---------------------------------------------------------------------------
# scheduler invariants
# ---------------------------------------------------------------------------

def _decode_mask(steps, P):
    out = []
    for cs, cx in zip(steps["chunk_sizes"], steps["context_lens"]):
        ctx = np.array(cx.split(";"), int)
        out.append(ctx >= P)  # a decode's prior context is at least the prompt
    return out


@pytest.mark.parametrize("policy", ["decode_first", "prefill_first", "fcfs"])
def test_caps_respected_in_every_step(policy):
    K, M = 64, 6
    r = simulate_open_loop(Truth(), rate=40.0, num_requests=60, prompt_tokens=50,
                           output_tokens=20, max_num_seqs=M, max_num_batched_tokens=K,
                           policy=policy, seed=3)
    s = r.steps
    assert (s["total_tokens"] <= K).all()
    assert (s["batch_size"] <= M).all()
    sums = s["chunk_sizes"].map(lambda v: sum(map(int, v.split(";"))))
    assert (sums == s["total_tokens"]).all()
    # every request computes exactly its prompt plus O - 1 decode tokens
    per = {}
    for ids, cs in zip(s["request_ids"], s["chunk_sizes"]):
        for i, c in zip(ids.split(";"), cs.split(";")):
            per[int(i)] = per.get(int(i), 0) + int(c)
    assert all(v == 50 + 20 - 1 for v in per.values()) and len(per) == 60


def test_decode_first_orders_decodes_before_prefills():
    r = simulate_open_loop(Truth(), rate=80.0, num_requests=40, prompt_tokens=40,
                           output_tokens=10, max_num_batched_tokens=48, policy="decode_first",
                           seed=2)
    mixed = 0
    for m in _decode_mask(r.steps, 40):
        if m.any() and (~m).any():
            mixed += 1
            first_pre = np.argmin(m)
            assert m[:first_pre].all() and not m[first_pre:].any()
    assert mixed > 5


def test_prefill_first_orders_prefills_before_decodes():
    r = simulate_open_loop(Truth(), rate=20.0, num_requests=40, prompt_tokens=40,
                           output_tokens=10, max_num_batched_tokens=48, policy="prefill_first",
                           seed=2)
    mixed = 0
    for m in _decode_mask(r.steps, 40):
        if m.any() and (~m).any():
            mixed += 1
            first_dec = np.argmax(m)
            assert (~m[:first_dec]).all() and m[first_dec:].all()
    assert mixed > 5


def test_decode_first_never_starves_decodes_but_prefill_first_does():
    # 4 running decodes fill a budget of 4 tokens: decode-first admits no prefill
    kw = {"max_num_batched_tokens": 4, "max_num_seqs": 8}
    r = simulate_closed_loop(Const(1.0), 8, 8, 2, 6, policy="decode_first", **kw)
    dec = r.steps["num_decode"].to_numpy()
    running = r.steps["num_running"].to_numpy()
    # whenever requests are decoding, each step serves min(decoders, 4) decodes
    assert (dec[1:] > 0).all()
    r2 = simulate_closed_loop(Const(1.0), 8, 8, 2, 6, policy="prefill_first", **kw)
    assert (r2.steps["num_decode"] == 0).sum() > (r.steps["num_decode"] == 0).sum()
    assert r2.to_dict()["median_ttft_s"] < r.to_dict()["median_ttft_s"]
    assert running.max() <= 8


# ---------------------------------------------------------------------------
# open loop
# ---------------------------------------------------------------------------

def test_poisson_arrivals_deterministic_and_rate():
    a = poisson_arrivals(5.0, 4001, seed=7)
    assert a[0] == 0 and np.all(np.diff(a) >= 0)
    assert np.array_equal(a, poisson_arrivals(5.0, 4001, seed=7))
    assert not np.array_equal(a, poisson_arrivals(5.0, 4001, seed=8))
    assert 4000 / a[-1] == pytest.approx(5.0, rel=0.05)


def test_open_loop_light_load_is_service_time():
    # arrivals 1 s apart, each request alone: e2e = O * c exactly, TTFT = c
    r = simulate_open_loop(Const(4.0), arrival_times=[0.0, 1.0, 2.0], prompt_tokens=10,
                           output_tokens=5)
    assert np.allclose(r.requests["e2e_s"], 0.020)
    assert np.allclose(r.requests["ttft_s"], 0.004)
    assert r.makespan_s == pytest.approx(2.020)


def test_open_loop_arrival_during_step_waits_for_next_step():
    r = simulate_open_loop(Const(10.0), arrival_times=[0.0, 0.004], prompt_tokens=5,
                           output_tokens=2)
    req = r.requests
    assert req.loc[1, "admitted_s"] == pytest.approx(0.010)
    assert req.loc[1, "ttft_s"] == pytest.approx(0.020 - 0.004)


def test_littles_law_open_loop():
    lam = 30.0
    r = simulate_open_loop(Truth(), rate=lam, num_requests=1500, prompt_tokens=64,
                           output_tokens=32, max_num_batched_tokens=256, seed=11,
                           step_overhead_ms=1.0)
    s = r.steps
    # time-average number in the system, from the step log
    L = float(((s["num_running"] + s["num_waiting"]) * (s["end_s"] - s["start_s"])).sum()
              / r.makespan_s)
    lam_eff = len(r.requests) / r.makespan_s
    W = float(r.requests["e2e_s"].mean())
    assert lam_eff == pytest.approx(lam, rel=0.08)
    assert L == pytest.approx(lam_eff * W, rel=0.05)
    # stable system: output rate = arrival rate x output length
    assert r.to_dict()["output_throughput_tok_s"] == pytest.approx(lam_eff * 32, rel=0.02)


def test_deterministic_given_seed():
    kw = {"rate": 50.0, "num_requests": 50, "prompt_tokens": 30, "output_tokens": 8,
              "step_noise_sd": 0.1}
    a = simulate_open_loop(Truth(), seed=4, **kw).to_dict()
    b = simulate_open_loop(Truth(), seed=4, **kw).to_dict()
    c = simulate_open_loop(Truth(), seed=5, **kw).to_dict()
    assert a == b
    assert a["median_e2e_s"] != c["median_e2e_s"]


def test_context_aware_model_sees_contexts():
    theta = TRUE + [1e-4, 1e-3]
    ctx_model = Truth(theta, "seed_ctx")
    base = simulate_closed_loop(Truth(), 4, 4, 200, 50).to_dict()
    withctx = simulate_closed_loop(ctx_model, 4, 4, 200, 50).to_dict()
    assert withctx["mean_tpot_ms"] > base["mean_tpot_ms"]


def test_per_request_lengths():
    r = simulate_closed_loop(Const(1.0), 3, 3, [4, 8, 12], [2, 3, 4])
    assert r.requests["output_tokens"].tolist() == [2, 3, 4]
    assert np.allclose(r.requests["e2e_s"], [0.002, 0.003, 0.004])


# ---------------------------------------------------------------------------
# argument checks
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("kw, match", [
    ({"num_requests": 0}, "num_requests"),
    ({"concurrency": 0}, "concurrency"),
    ({"prompt_tokens": 0}, "prompt_tokens"),
    ({"output_tokens": 1.5}, "output_tokens"),
    ({"max_num_seqs": 0}, "max_num_seqs"),
    ({"max_num_batched_tokens": -1}, "max_num_batched_tokens"),
    ({"step_overhead_ms": -1.0}, "step_overhead_ms"),
    ({"step_overhead_ms": float("nan")}, "step_overhead_ms"),
    ({"policy": "lifo"}, "policy"),
    ({"prompt_tokens": [1, 2]}, "prompt_tokens"),
])
def test_closed_loop_bad_arguments(kw, match):
    args = {"num_requests": 4, "concurrency": 2, "prompt_tokens": 8, "output_tokens": 4}
    args.update(kw)
    with pytest.raises(InputError, match=match):
        simulate_closed_loop(Const(1.0), **args)


def test_open_loop_bad_arguments():
    with pytest.raises(InputError, match="rate"):
        simulate_open_loop(Const(1.0), rate=0.0, num_requests=3, prompt_tokens=1,
                           output_tokens=1)
    with pytest.raises(InputError, match="not both"):
        simulate_open_loop(Const(1.0), rate=1.0, arrival_times=[0.0], prompt_tokens=1,
                           output_tokens=1)
    with pytest.raises(InputError, match="arrival_times"):
        simulate_open_loop(Const(1.0), arrival_times=[-1.0], prompt_tokens=1, output_tokens=1)
    with pytest.raises(InputError, match="rate and num_requests"):
        simulate_open_loop(Const(1.0), prompt_tokens=1, output_tokens=1)


def test_bad_model():
    with pytest.raises(InputError, match="predict"):
        simulate_closed_loop(object(), 1, 1, 1, 1)
    with pytest.raises(InputError, match="positive"):
        simulate_closed_loop(Const(-1.0), 1, 1, 1, 1)


# ---------------------------------------------------------------------------
# overhead and validation helpers
# ---------------------------------------------------------------------------

def _sim_as_run(sim):
    """A measured-run summary and step trace built from a simulation (known truth)."""
    d = sim.to_dict()
    c = d["config"]
    summary = {
        "output_tokens_per_s": d["output_throughput_tok_s"],
        "e2e_s": sim.requests["e2e_s"].tolist(),
        "ttft_s": sim.requests["ttft_s"].tolist(),
        "config": {k: c[k] for k in ("num_requests", "concurrency", "prompt_tokens",
                                     "output_tokens", "max_num_seqs", "max_num_batched_tokens")},
    }
    trace = sim.steps.rename(columns={"start_s": "timestamp"})
    return summary, trace


def test_estimate_step_overhead_both_methods():
    sim = simulate_closed_loop(Truth(), 40, 8, 32, 50, step_overhead_ms=3.0)
    _, tr = _sim_as_run(sim)
    e1 = estimate_step_overhead(tr, method="step_ms")
    e2 = estimate_step_overhead(tr, method="timestamp")
    assert e1.overhead_ms == pytest.approx(3.0, abs=1e-9)
    assert e2.overhead_ms == pytest.approx(3.0, abs=1e-6)
    assert e2.method == "timestamp" and e2.n == len(tr) - 1
    assert estimate_step_overhead(tr).method == "timestamp"
    with pytest.raises(InputError, match="neither a timestamp nor a step_ms"):
        estimate_step_overhead(tr[["batch_size", "total_tokens", "duration_ms"]])
    with pytest.raises(InputError, match="method"):
        estimate_step_overhead(tr, method="magic")


def test_compare_to_run_errors():
    sim = simulate_closed_loop(Const(10.0), 8, 8, 32, 50)
    summary = {"output_tokens_per_s": 800.0 / 1.1, "e2e_s": [0.5 * 1.25] * 8,
               "median_ttft_s": 0.01}
    c = compare_to_run(sim, summary)
    assert c["errors"]["output_throughput_tok_s"] == pytest.approx(0.1)
    assert c["errors"]["median_e2e_s"] == pytest.approx(1 / 1.25 - 1)
    assert c["errors"]["median_ttft_s"] == pytest.approx(0.0)
    assert c["errors"]["mean_tpot_ms"] is None
    with pytest.raises(InputError, match="output throughput"):
        compare_to_run(sim, {"e2e_s": [1.0]})
    with pytest.raises(InputError, match="run_summary"):
        compare_to_run(sim, [1, 2])


def _collector_summary(sim):
    """The same run in the collector's closed_loop_summary format (perfmodel.data.collect)."""
    d = sim.to_dict()
    c = d["config"]
    req = sim.requests
    return {
        "num_requests": len(req), "num_finished": len(req),
        "output_tokens": int(req["output_tokens"].sum()),  # total, not the per-request length
        "span_s": d["makespan_s"], "output_tokens_per_s": d["output_throughput_tok_s"],
        "ttft_ms": {"mean": 1e3 * req["ttft_s"].mean(), "p50": 1e3 * req["ttft_s"].median()},
        "e2e_ms": {"mean": 1e3 * req["e2e_s"].mean(), "p50": 1e3 * req["e2e_s"].median()},
        "requests": [{"name": f"closed_loop-{i:06d}", "prompt_len": int(r.prompt_tokens),
                      "max_tokens": int(r.output_tokens), "output_tokens": int(r.output_tokens),
                      "ttft_ms": 1e3 * r.ttft_s, "e2e_ms": 1e3 * r.e2e_s}
                     for i, r in enumerate(req.itertuples())],
        "workload": {"name": "closed_loop", "seed": 0, "steps": None,
                     "params": {"token_cap": c["max_num_batched_tokens"],
                                "max_num_seqs": c["max_num_seqs"],
                                "num_requests": c["num_requests"],
                                "concurrency": c["concurrency"],
                                "prompt_len": c["prompt_tokens"],
                                "output_len": c["output_tokens"]},
                     "engine_overrides": {"max_num_batched_tokens": c["max_num_batched_tokens"],
                                          "max_num_seqs": c["max_num_seqs"]}},
    }


def test_collector_summary_format():
    sim = simulate_closed_loop(Truth(), 40, 8, 32, 50, max_num_seqs=64,
                               max_num_batched_tokens=512, step_overhead_ms=1.5)
    summ = _collector_summary(sim)
    setup = run_setup(summ)
    assert setup == {"num_requests": 40, "concurrency": 8, "prompt_tokens": 32,
                     "output_tokens": 50, "max_num_seqs": 64, "max_num_batched_tokens": 512}
    c = compare_to_run(sim, summ)
    for k in ("output_throughput_tok_s", "median_e2e_s", "median_ttft_s", "mean_tpot_ms"):
        assert abs(c["errors"][k]) < 1e-9, k
    # without per-request data, the p50 summaries are used
    summ2 = {k: v for k, v in summ.items() if k != "requests"}
    c2 = compare_to_run(sim, summ2)
    assert abs(c2["errors"]["median_e2e_s"]) < 1e-9 and c2["errors"]["mean_tpot_ms"] is None
    # the collector's top-level output_tokens is a total: never read as the output length
    assert "output_tokens" not in run_setup({"output_tokens": 2000, "num_requests": 40})
    trace = sim.steps.rename(columns={"start_s": "timestamp"})
    v = validate_closed_loop(Truth(), trace, summ, policy="decode_first")
    assert v.step_overhead_ms == pytest.approx(1.5, abs=1e-6)
    assert abs(v.errors["output_throughput_tok_s"]) < 1e-9


def test_validate_closed_loop_recovers_synthetic_run():
    # "measured" run = simulation with a known model and 2 ms overhead, noisy steps
    truth = simulate_closed_loop(Truth(), 40, 8, 32, 50, step_overhead_ms=2.0, policy="fcfs",
                                 max_num_batched_tokens=512)
    summary, trace = _sim_as_run(truth)
    v = validate_closed_loop(Truth(), trace, summary)
    assert v.step_overhead_ms == pytest.approx(2.0, abs=1e-6)
    assert abs(v.errors["output_throughput_tok_s"]) < 1e-9
    assert abs(v.errors["median_e2e_s"]) < 1e-9
    # fitting the model on the run's own steps (model given by name)
    assert abs(v.step_time_bias) < 1e-12
    # a run 5% slower than the model: the bias shows the drift
    slow = trace.assign(duration_ms=trace["duration_ms"] * 1.05)
    assert validate_closed_loop(Truth(), slow, summary).step_time_bias == pytest.approx(0.05)
    v2 = validate_closed_loop("seed_id", trace, summary)
    assert abs(v2.errors["output_throughput_tok_s"]) < 0.01
    assert abs(v2.errors["median_e2e_s"]) < 0.01
    json.dumps(v2.to_dict())
    with pytest.raises(InputError, match="concurrency"):
        validate_closed_loop(Truth(), trace, {"output_tokens_per_s": 1.0, "num_requests": 4})


# ---------------------------------------------------------------------------
# policy evaluation
# ---------------------------------------------------------------------------

def test_evaluate_policies_and_plots():
    wl = {"num_requests": 24, "concurrency": 8, "prompt_tokens": 200, "output_tokens": 16}
    df = evaluate_policies(Truth(), wl, policies=("decode_first", "prefill_first"),
                           max_num_batched_tokens=(64, 256), max_num_seqs=(4, 8))
    assert len(df) == 8
    assert set(df["policy"]) == {"decode_first", "prefill_first"}
    assert df["output_throughput_tok_s"].gt(0).all()
    assert df["pareto"].any()
    # a Pareto row is never dominated
    for _, r in df[df["pareto"]].iterrows():
        dom = (df["median_e2e_s"] < r["median_e2e_s"]) & (df["output_throughput_tok_s"]
                                                          > r["output_throughput_tok_s"])
        assert not dom.any()
    ax = plot_policy_frontier(df)
    assert ax.get_xlabel() == "median end-to-end latency (s)"
    assert ax.get_ylabel() == "output throughput (tokens/s)"
    sub = df[df["policy"] == "decode_first"]
    ax2 = plot_policy_contour(sub)
    assert ax2.get_ylabel() == "max_num_seqs"  # an engine option keeps its name
    with pytest.raises(InputError, match="filter"):
        plot_policy_contour(df)
    open_df = evaluate_policies(Truth(), {"rate": 20.0, "num_requests": 30, "prompt_tokens": 50,
                                              "output_tokens": 8}, max_num_batched_tokens=(64,))
    assert len(open_df) == 2
    with pytest.raises(InputError, match="workload is missing"):
        evaluate_policies(Truth(), {"concurrency": 2})


def test_engine_config_gives_the_keyword_results():
    kw = {"max_num_seqs": 6, "max_num_batched_tokens": 96.0, "policy": "fcfs",
          "enable_chunked_prefill": True, "long_prefill_token_threshold": 40,
          "step_overhead_ms": 1.5, "step_noise_sd": 0.1}
    eng = EngineConfig(**kw)
    assert eng.max_num_batched_tokens == 96 and isinstance(eng.max_num_batched_tokens, int)
    a = simulate_closed_loop(Truth(), 20, 5, [30, 120] * 10, 9, seed=3, **kw)
    b = simulate_closed_loop(Truth(), 20, 5, [30, 120] * 10, 9, seed=3, engine=eng)
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.steps, b.steps)
    assert json.dumps(a.to_dict(), sort_keys=True) == json.dumps(b.to_dict(), sort_keys=True)
    assert a.config == b.config
    a = simulate_open_loop(Truth(), prompt_tokens=50, output_tokens=8, rate=15.0,
                           num_requests=25, seed=2, **kw)
    b = simulate_open_loop(Truth(), prompt_tokens=50, output_tokens=8, rate=15.0,
                           num_requests=25, seed=2, engine=eng)
    pd.testing.assert_frame_equal(a.requests, b.requests)
    assert a.config == b.config
    wl = {"num_requests": 16, "concurrency": 4, "prompt_tokens": 100, "output_tokens": 6}
    grid = {"max_num_batched_tokens": (64, 128), "max_num_seqs": (4,)}
    pd.testing.assert_frame_equal(
        evaluate_policies(Truth(), wl, step_overhead_ms=1.5, **grid),
        evaluate_policies(Truth(), wl, engine=EngineConfig(step_overhead_ms=1.5), **grid))
    cfg = simulate_closed_loop(Const(1.0), 1, 1, 4, 2).config
    assert {k: cfg[k] for k in EngineConfig().as_dict()} == EngineConfig().as_dict()
    with pytest.raises(InputError, match="not both"):
        simulate_closed_loop(Truth(), 4, 2, 10, 3, max_num_seqs=8, engine=eng)
    with pytest.raises(InputError, match="not both"):
        evaluate_policies(Truth(), wl, step_overhead_ms=1.0, engine=eng)
    with pytest.raises(InputError, match="engine must be an EngineConfig"):
        simulate_closed_loop(Truth(), 4, 2, 10, 3, engine={"max_num_seqs": 8})
    with pytest.raises(InputError, match="policy"):
        EngineConfig(policy="lifo")
    with pytest.raises(InputError, match="max_num_seqs"):
        EngineConfig(max_num_seqs=0)


def test_pareto_front_simple():
    df = pd.DataFrame({"median_e2e_s": [1.0, 2.0, 1.5, 3.0],
                       "output_throughput_tok_s": [10.0, 20.0, 5.0, 20.0]})
    assert pareto_front(df).tolist() == [True, True, False, False]


def test_pareto_front_ignores_differences_inside_the_seed_spread():
    # row 1 beats row 0 by 0.1 % in throughput on average, but seed to seed the paired
    # difference swings by +-1 %: no dominance.  Row 2 is clearly worse in both.
    df = pd.DataFrame({"median_e2e_s": [1.0, 1.0, 2.0],
                       "output_throughput_tok_s": [1000.0, 1001.0, 500.0]})
    thr = np.array([[1000.0, 1000.0, 1000.0, 1000.0],
                    [1011.0, 991.0, 1012.0, 990.0],
                    [500.0, 505.0, 495.0, 500.0]])
    e2e = np.array([[1.0] * 4, [1.0] * 4, [2.0, 2.1, 1.9, 2.0]])
    samples = {"median_e2e_s": e2e, "output_throughput_tok_s": thr}
    assert pareto_front(df).tolist() == [False, True, False]           # means only
    assert pareto_front(df, samples=samples).tolist() == [True, True, False]
    # a consistent paired gain of 1 tok/s is significant however small
    samples["output_throughput_tok_s"] = np.array([[1000.0, 990, 1010, 1000],
                                                   [1001.0, 991, 1011, 1001],
                                                   [500.0, 505, 495, 500]])
    assert pareto_front(df, samples=samples).tolist() == [False, True, False]
    with pytest.raises(InputError, match="samples"):
        pareto_front(df, samples={"median_e2e_s": e2e[:2], "output_throughput_tok_s": thr[:2]})


def test_evaluate_policies_over_seeds_reports_spread():
    wl = {"rate": 20.0, "num_requests": 30, "prompt_tokens": 50, "output_tokens": 8}
    df = evaluate_policies(Truth(), wl, max_num_batched_tokens=(64, 128), seeds=[0, 1, 2])
    assert (df["n_seeds"] == 3).all()
    assert (df["output_throughput_tok_s_se"] > 0).all()
    one = evaluate_policies(Truth(), wl, max_num_batched_tokens=(64, 128), seed=1)
    assert (one["n_seeds"] == 1).all() and (one["output_throughput_tok_s_se"] == 0).all()
    with pytest.raises(InputError, match="seeds is empty"):
        evaluate_policies(Truth(), wl, seeds=[])


# ---------------------------------------------------------------------------
# CLI helper
# ---------------------------------------------------------------------------

def test_simulate_command(tmp_path):
    from perfmodel.core.fit import fit_model

    rng = np.random.default_rng(0)
    B = rng.integers(1, 64, 200)
    S = B + rng.integers(0, 2048, 200)
    T = Truth().predict({"B": B, "S": S}) * np.exp(rng.normal(0, 0.02, 200))
    fit = fit_model(pd.DataFrame({"batch_size": B, "total_tokens": S, "duration_ms": T}), "seed_id",
                    n_starts=2)
    path = tmp_path / "fit.json"
    fit.to_json(path)
    p = argparse.ArgumentParser()
    add_simulate_arguments(p)
    args = p.parse_args([str(path), "--num-requests", "40", "--concurrency", "8",
                         "--prompt-tokens", "32", "--output-tokens", "50", "--json"])
    text, d = simulate_command(args)
    json.dumps(d)
    for k in ("output_throughput_tok_s", "median_e2e_s", "median_ttft_s", "mean_tpot_ms",
              "n_steps"):
        assert d[k] is not None
    assert "tokens/s" in text
    direct = simulate_closed_loop(fit, 40, 8, 32, 50).to_dict()
    assert d["output_throughput_tok_s"] == pytest.approx(direct["output_throughput_tok_s"])
    args = p.parse_args([str(path), "--num-requests", "4", "--prompt-tokens", "3",
                         "--output-tokens", "2"])
    with pytest.raises(InputError, match="concurrency"):
        simulate_command(args)


def test_metric_label_gives_units_and_keeps_option_names():
    from perfmodel.decisions.simulate.policies import metric_label

    assert metric_label("p90_ttft_s") == "p90 TTFT (s)"
    assert metric_label("mean_tpot_ms") == "mean TPOT (ms)"
    assert metric_label("request_throughput_req_s") == "request throughput (requests/s)"
    assert metric_label("max_num_batched_tokens") == "max_num_batched_tokens"
    with pytest.raises(InputError, match="metric name"):
        metric_label("")
