"""perfmodel replay: a round trip through a run folder, bench files, CSV output, bad input."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from perfmodel.core.results import FitResult
from perfmodel.decisions.simulate import EngineConfig, simulate_open_loop

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "data" / "example" / "example_trace.csv"
MIRROR = Path(os.environ.get("PERFMODEL_DATA_MIRROR", "/nonexistent")) / "llmservingsim"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, fit_json):
    """A run folder whose 'measured' timestamps are the simulator's own (a round trip)."""
    d = tmp_path_factory.mktemp("run")
    (d / "vllm").mkdir()
    rng = np.random.default_rng(0)
    N = 60
    P, O = rng.integers(16, 400, N), rng.integers(2, 80, N)
    arr = np.cumsum(rng.exponential(0.05, N))
    cfg = EngineConfig(max_num_seqs=16, max_num_batched_tokens=512, policy="fcfs",
                       num_gpu_blocks=120)
    sim = simulate_open_loop(FitResult.from_json(fit_json), prompt_tokens=P, output_tokens=O,
                             arrival_times=arr, engine=cfg).requests
    assert sim["num_preemptions"].sum() > 0          # the run exercises the KV limit
    base = 5000.0
    with open(d / "vllm" / "requests.jsonl", "w") as fh:
        fh.writelines(json.dumps({
                "request_id": f"r{i}", "input_toks": int(P[i]), "output_toks": int(O[i]),
                "arrival_time": 1.7e9 + arr[i], "queued_ts": base + arr[i],
                "first_token_ts": base + sim["first_token_s"][i],
                "last_token_ts": base + sim["finish_s"][i]}) + "\n" for i in range(N))
    (d / "vllm" / "meta.json").write_text(json.dumps({
        "model": "toy", "engine_kwargs": {"max_num_seqs": 16, "max_num_batched_tokens": 512},
        "kv_cache": {"num_gpu_blocks": 120, "block_size": 16}}))
    (d / "config.json").write_text(json.dumps({"nodes": [{"instances": [
        {"model_name": "toy", "npu_mem": {"mem_size": 24, "mem_util": 0.9}}]}]}))
    return d


def test_round_trip_reproduces_the_run(run_dir, fit_json, run, tmp_path):
    out = tmp_path / "per_request.csv"
    rc, text, err = run(["replay", run_dir, "--fit", fit_json, "--json", "-o", out])
    assert rc == 0, err
    d = json.loads(text)
    for m in ("ttft_ms", "tpot_ms", "latency_ms"):
        assert set(d[m]) == {"mean", "p50", "p90", "p95", "p99"}
        for k, v in d["relative_error"][m].items():
            assert abs(v) < 1e-5, (m, k, v)     # epoch-second arrivals: ~1e-7 s rounding
    assert d["num_preemptions"] > 0
    assert d["assumptions"]["kv_cache"]["num_gpu_blocks"] == 120
    assert d["assumptions"]["engine"]["max_num_seqs"] == 16
    assert d["model"] == "seed_id"
    csv = out.read_text().splitlines()
    assert csv[0].startswith("request_id,arrival_s,prompt_tokens") and len(csv) == 61
    # the output exists now: refused without --force, exit 2 with one line
    rc, _, err = run(["replay", run_dir, "--fit", fit_json, "-o", out])
    assert rc == 2 and len(err.strip().splitlines()) == 1


def test_options_override_the_run(run_dir, fit_json, run):
    rc, text, _ = run(["replay", run_dir, "--fit", fit_json, "--json", "--max-num-seqs", "4",
                       "--num-gpu-blocks", "5000", "--step-overhead-ms", "1.5"])
    assert rc == 0
    d = json.loads(text)
    e = d["assumptions"]["engine"]
    assert (e["max_num_seqs"], e["num_gpu_blocks"], e["step_overhead_ms"]) == (4, 5000, 1.5)
    assert d["num_preemptions"] == 0
    assert d["relative_error"]["ttft_ms"]["mean"] > 0.05      # fewer slots: more queueing


def test_bench_result_file(tmp_path, fit_json, run):
    b = {"input_lens": [100, 200, 300, 50], "output_lens": [20, 10, 5, 8],
         "ttfts": [0.1, 0.1, 0.2, 0.05], "itls": [[0.01] * 19, [0.01] * 9, [0.01] * 4, [0.01] * 7],
         "start_times": [10.0, 10.1, 10.3, 10.4], "errors": ["", "", "", ""]}
    p = tmp_path / "bench.json"
    p.write_text(json.dumps(b))
    rc, text, err = run(["replay", p, "--fit", fit_json, "--max-num-seqs", "32",
                         "--max-num-batched-tokens", "768", "--json"])
    assert rc == 0, err
    d = json.loads(text)
    assert d["measured"]["tpot_ms"]["mean"] == pytest.approx(10.0)
    assert d["assumptions"]["kv_cache"]["num_gpu_blocks"] is None
    rc, text, _ = run(["replay", p, "--fit", fit_json])
    assert rc == 0 and "ttft_ms pred" in text and "ttft_ms err" in text
    # the interval: every statistic's, wider with the run-level term, stated in the output
    base = ["replay", p, "--fit", fit_json, "--interval-replications", "8", "--json"]
    rc, text, err = run(base)
    assert rc == 0, err
    iv = json.loads(text)["interval"]
    assert iv["replications"] == 8 and iv["level"] == 0.9 and iv["run_level"].startswith("none")
    narrow = iv["tpot_ms"]["p50"]
    assert narrow["lower"] <= narrow["upper"] and narrow["measured"] == pytest.approx(10.0)
    rc, text, err = run([*base, "--run-sd", "0.3"])
    assert rc == 0, err
    wide = json.loads(text)["interval"]["tpot_ms"]["p50"]
    assert wide["upper"] - wide["lower"] > 2 * (narrow["upper"] - narrow["lower"])
    rc, text, _ = run(["replay", p, "--fit", fit_json, "--interval-replications", "4"])
    assert rc == 0 and "90 % interval over 4 replays" in text and "tpot_ms int" in text
    for extra, match in ((["--interval-replications", "1"], "interval-replications"),
                         (["--run-sd", "0.1"], "need --interval-replications"),
                         (["--interval-replications", "4", "--run-sd", "-1"], "run_sd")):
        rc, _, err = run(["replay", p, "--fit", fit_json, *extra])
        assert rc == 2 and match in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("extra,match", [
    (["--max-num-seqs", "0"], "max_num_seqs"),
    (["--routing", "random"], "invalid choice"),
])
def test_bad_engine_options(run_dir, fit_json, run, extra, match):
    rc, _, err = run(["replay", run_dir, "--fit", fit_json, *extra])
    assert rc == 2 and match in err and len(err.strip().splitlines()) == 1


def test_bad_sources(tmp_path, fit_json, run):
    w = tmp_path / "w.csv"
    w.write_text("prompt_tokens,output_tokens,arrival_s\n10,5,0\n")
    for args, match in (([tmp_path / "none.jsonl", "--fit", fit_json], "does not exist"),
                        ([tmp_path, "--fit", fit_json], "missing vllm"),
                        ([EXAMPLE, "--fit", fit_json], "missing columns"),
                        ([w, "--fit", tmp_path / "nofit.json"], "does not exist"),
                        ([w, "--profile", tmp_path], "--model-config")):
        rc, _, err = run(["replay", *args])
        assert rc == 2 and match in err, err
        assert len(err.strip().splitlines()) == 1


def test_profile_path(run):
    pytest.importorskip("perfmodel.core.compose", reason="step composition not in this version")
    run_ = MIRROR / "bench/examples/RTXPRO6000/Llama-3.1-8B"
    bundle = MIRROR / "profiler/perf/RTXPRO6000/meta-llama/Llama-3.1-8B/bf16"
    if not run_.is_dir() or not bundle.is_dir():
        pytest.skip("LLMServingSim files not in PERFMODEL_DATA_MIRROR")
    rc, text, err = run(["replay", run_, "--profile", bundle, "--model-config",
                         MIRROR / "configs/model/meta-llama/Llama-3.1-8B.json", "--json"])
    assert rc == 0, err
    d = json.loads(text)
    assert d["assumptions"]["step_model"]["source"] == "profile"
    assert d["ttft_ms"]["mean"] > 0 and "relative_error" in d


def test_profile_path_calls_the_composition_contract(run_dir, fit_json, run, monkeypatch,
                                                     tmp_path):
    """The call perfmodel.core.compose.fit_from_profile must answer (a stand-in module)."""
    import sys
    import types

    calls = {}

    def fit_from_profile(profile_dir, model_config_path, *, tp, max_num_seqs,
                         max_num_batched_tokens, max_context):
        calls.update(profile_dir=str(profile_dir), model_config=str(model_config_path), tp=tp,
                     max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                     max_context=max_context)
        return FitResult.from_json(fit_json), {"composed_mape": 0.01}

    monkeypatch.setitem(sys.modules, "perfmodel.core.compose",
                        types.SimpleNamespace(fit_from_profile=fit_from_profile))
    cfg = tmp_path / "model.json"
    cfg.write_text("{}")
    rc, text, err = run(["replay", run_dir, "--profile", tmp_path, "--model-config", cfg,
                         "--json"])
    assert rc == 0, err
    d = json.loads(text)
    assert calls["tp"] == 1 and calls["max_num_seqs"] == 16
    assert calls["max_num_batched_tokens"] == 512
    reqs = [json.loads(x) for x in (run_dir / "vllm" / "requests.jsonl").read_text().splitlines()]
    assert calls["max_context"] == max(r["input_toks"] + r["output_toks"] for r in reqs)
    assert d["assumptions"]["step_model"]["composed_mape"] == 0.01
    # the same step model as --fit: the same prediction
    rc, text2, _ = run(["replay", run_dir, "--fit", fit_json, "--json"])
    assert json.loads(text2)["ttft_ms"] == d["ttft_ms"]
