"""Tests of perfmodel.decisions.real_client: hand-checked replays with a constant step model,
the paper-item functions on a hand-built result, and the committed real-client series."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfmodel.data.requests import load_workload
from perfmodel.decisions import real_client as rc
from perfmodel.decisions.requests_workload import SLO
from perfmodel.decisions.simulate import EngineConfig
from perfmodel.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
SERIES = ROOT / "data" / "vllm-serve" / "llama-small-20261126"
REPLICATES = ROOT / "data" / "vllm-serve" / "llama-small-replicates"


class Const:
    """A step of 10 ms whatever the batch."""

    def predict(self, f):
        return np.full(len(f["B"]), 10.0)


def _run(tmp_path, name, *, rate=4.0, conc=None, cmd="vllm serve m --max-num-seqs 8"):
    d = tmp_path / name
    d.mkdir()
    (d / "bench.json").write_text(json.dumps({
        "request_rate": "inf" if rate is None else rate, "max_concurrency": conc,
        "input_lens": [8, 8], "output_lens": [3, 3], "start_times": [0.0, 1.0],
        "ttfts": [0.01, 0.01], "itls": [[0.01, 0.01]] * 2, "latencies": [0.03, 0.03],
        "errors": ["", ""]}))
    (d / "meta.json").write_text(json.dumps({"server_command": cmd}))
    return d


def test_attained_and_goodput_by_hand():
    slo = SLO.parse("ttft_p99=100,tpot_p99=20")
    ok = rc.attained([50, 150, 100, 10], [10, 10, 25, np.nan], slo)
    assert ok.tolist() == [True, False, False, True]   # NaN TPOT (one token) meets it
    # 3 good requests over first arrival 0 s to last completion 1.5 s
    assert rc.goodput([0.0, 0.5, 1.0], [1000.0, 500.0, 500.0], [1, 1, 1]) == pytest.approx(2.0)
    with pytest.raises(InputError, match="slo"):
        rc.attained([1], [1], "ttft_p99=1")
    e2e = SLO(ttft_ms=None, tpot_ms=None, e2e_ms=100.0)
    assert rc.attained([1, 1], [1, 1], e2e, [100, 101]).tolist() == [True, False]
    with pytest.raises(InputError, match="latency_ms"):
        rc.attained([1], [1], e2e)
    with pytest.raises(InputError, match="one length"):
        rc.goodput([0.0], [1.0, 2.0], [1])


def test_run_limits_and_client_loop(tmp_path):
    d = _run(tmp_path, "a")
    assert rc.run_limits(d) == {"max_num_seqs": 8, "max_num_batched_tokens": 2048}
    assert rc.client_loop(d) == (4.0, None)
    c = _run(tmp_path, "c", rate=None, conc=2, cmd="vllm serve m")
    assert rc.run_limits(c) == rc.VLLM_CPU_SERVE_DEFAULTS
    rate, conc = rc.client_loop(c)
    assert math.isinf(rate) and conc == 2
    with pytest.raises(InputError, match="bench.json"):
        rc.run_limits(tmp_path / "missing")


def _work(arrivals, ttft=10.0, tpot=10.0, lat=30.0):
    n = len(arrivals)
    return pd.DataFrame({"prompt_tokens": [8] * n, "output_tokens": [3] * n,
                         "arrival_s": arrivals, "ttft_ms": [ttft] * n,
                         "tpot_ms": [tpot] * n, "latency_ms": [lat] * n})


def test_replay_run_open_and_closed_loop_by_hand():
    eng = EngineConfig(max_num_seqs=4, max_num_batched_tokens=16, policy="fcfs")
    slo = SLO.parse("ttft_p99=15,tpot_p99=20")
    # open loop, arrivals 1 s apart: each request alone, 3 steps of 10 ms
    # (prefill + first token, two decodes): TTFT 10, TPOT 10, latency 30 ms
    out = rc.replay_run(Const(), _work([0.0, 1.0]), eng, slo)
    for k in ("ttft_ms_p50", "tpot_ms_p50", "latency_ms_p99"):
        assert out[k]["error"] == pytest.approx(0.0, abs=1e-9)
    assert out["attainment"] == {"measured": 1.0, "predicted": 1.0}
    # one client: the second request is issued when the first finishes (30 ms), whatever the
    # recorded start times say; both have TTFT 10 ms, goodput 2 over 60 ms
    closed = rc.replay_run(Const(), _work([0.0, 5.0]), eng, slo, concurrency=1)
    assert closed["ttft_ms_p50"]["predicted"] == pytest.approx(10.0)
    assert closed["goodput_req_s"]["predicted"] == pytest.approx(2 / 0.060)
    # both at once, open loop: one step prefills both, B = 2 -> same times, TTFT 10 ms
    both = rc.replay_run(Const(), _work([0.0, 0.0]), eng, SLO.parse("ttft_p99=5"))
    assert both["attainment"]["predicted"] == 0.0
    with pytest.raises(InputError, match="lacks columns"):
        rc.replay_run(Const(), _work([0.0]).drop(columns="ttft_ms"), eng, slo)


def _res(name, rate, att, *, lim=(32, 768), conc=None, held=True, ttft=100.0, good=1.0):
    pair = {"measured": ttft, "predicted": 0.9 * ttft, "error": -0.1}
    r = {f"{m}_{q}": dict(pair) for m in rc.METRICS for q in ("p50", "p99")}
    r.update(attainment={"measured": att, "predicted": 1.0}, request_rate=rate,
             max_concurrency=conc, held_out=held,
             engine={"max_num_seqs": lim[0], "max_num_batched_tokens": lim[1]},
             goodput_req_s={"measured": good, "predicted": good * 1.1, "error": 0.1})
    return name, r


def _result():
    runs = dict([_res("rate-1", 1.0, 1.0), _res("rate-5.5", 5.5, 1.0), _res("rate-6", 6.0, 0.96),
                 _res("rate-8", 8.0, 0.02), _res("repeat-1", 4.0, 1.0, held=False, ttft=90.0),
                 _res("repeat-2", 4.0, 0.98, ttft=110.0), _res("conc-4", math.inf, 1.0, conc=4),
                 _res("budget-default-6", 6.0, 0.9, lim=(128, 2048), good=4.9),
                 _res("budget-tuned-6", 6.0, 0.98, lim=(16, 256), good=5.4)])
    return {"runs": runs, "slo": {"attainment": 0.99}, "capacity": {"max_rate": 6.3, "engine": {
        "max_num_seqs": 32, "max_num_batched_tokens": 768},
        "interval": {"level": 0.9, "lower": 4.7, "upper": 7.7}}}


def test_paper_items_on_a_hand_built_result():
    res = _result()
    tab = rc.error_table(res)
    assert "repeat-1" not in set(tab["run"]) and len(tab) == len(res["runs"]) - 1
    assert tab.loc[tab.run == "conc-4", "client"].item() == "closed loop, 4 clients"
    assert tab["tpot_ms p99 error"].eq(-0.1).all()
    # repeats measured 90 and 110: half the range (10) over the mean (100)
    assert rc.repeat_spread(res)["ttft_ms p50"] == pytest.approx(0.1)
    chk = rc.capacity_check(res)
    # repeat-2 misses the 0.99 target at 4 req/s: the measured SLO fails from 4 on
    assert chk["first_fail"] == 4.0 and chk["last_pass"] == 1.0 and chk["inside"] is False
    assert chk["verdict"] == "misses"          # the interval [4.7, 7.7] lies above (1, 4]
    assert set(chk["per_rate"]["rate"]) == {1.0, 4.0, 5.5, 6.0, 8.0}   # no budget, no closed loop
    runs = rc.open_loop_runs(res)                 # the same runs, one row each, by rate
    assert runs["rate"].is_monotonic_increasing and len(runs) == chk["per_rate"]["runs"].sum()
    at4 = runs[runs.rate == 4.0]
    assert at4["measured"].min() == chk["per_rate"].set_index("rate").loc[4.0, "measured"]
    assert "repeat-2" in set(at4["run"])
    res["runs"]["repeat-2"]["attainment"]["measured"] = 1.0
    chk = rc.capacity_check(res)
    assert (chk["last_pass"], chk["first_fail"], chk["inside"]) == (5.5, 6.0, True)
    assert chk["verdict"] == "brackets"
    bud = rc.budget_table(res)
    assert bud["config"].tolist() == ["default", "tuned"]
    assert bud["goodput measured"].tolist() == [4.9, 5.4]
    assert bud["max_num_seqs"].tolist() == [128, 16]
    assert rc.capacity_check(res, target=0.9)["first_fail"] == 8.0   # 0.96 meets 0.9
    with pytest.raises(InputError, match="target"):
        rc.capacity_check({**res, "slo": {}})
    with pytest.raises(InputError, match="repeat"):
        rc.repeat_spread(res, prefix="nothing-")
    with pytest.raises(InputError, match="result"):
        rc.error_table({"runs": {}})


def test_client_label_long_and_compact():
    eng = {"max_num_seqs": 32, "max_num_batched_tokens": 768}
    open_loop = {"request_rate": 5.0, "max_concurrency": None, "engine": eng}
    capped = {"request_rate": 5.5, "max_concurrency": 64, "engine": eng}   # a cap, and arrivals
    closed = {"request_rate": math.inf, "max_concurrency": 16, "engine": eng}
    assert rc.client_label(open_loop) == "5 req/s, 32 / 768"
    assert rc.client_label(open_loop, compact=True) == "5; 32/768"
    assert rc.client_label(capped, compact=True) == "5.5; 32/768"
    assert rc.client_label(closed) == "closed loop, 16 clients"
    assert rc.client_label(closed, compact=True) == "C=16; 32/768"
    with pytest.raises(InputError, match="engine"):
        rc.client_label({"request_rate": 5.0})


def test_budget_replicates_by_hand():
    res = _result()
    # rate 6, three paired repeats: tuned - default goodput 0.5, -0.1, 0.3 (mean 0.233)
    for i, (gd, gt, ad, at) in enumerate([(4.9, 5.4, 0.9, 1.0), (5.0, 4.9, 0.8, 0.9),
                                          (4.8, 5.1, 1.0, 1.0)], start=1):
        for cfg, g, a, lim in (("default", gd, ad, (128, 2048)), ("tuned", gt, at, (16, 256))):
            name, r = _res(f"budget-{cfg}-6-rep{i}", 6.0, a, lim=lim, good=g)
            r["n"] = 100 if i < 3 else 200          # pooled attainment weighs by requests
            res["runs"][name] = r
    per_run, per_rate = rc.budget_replicates(res)
    assert len(per_run) == 6 and per_run["rep"].tolist() == [1, 1, 2, 2, 3, 3]
    row = per_rate.iloc[0]
    assert row["rate"] == 6.0 and row["reps"] == 3 and row["tuned wins"] == 2
    assert row["diff mean"] == pytest.approx(0.7 / 3)
    assert (row["diff min"], row["diff max"]) == pytest.approx((-0.1, 0.5))
    assert row["default goodput measured"] == pytest.approx(4.9)
    assert row["default attainment measured"] == pytest.approx((90 + 80 + 200) / 400)
    # predicted goodput is 1.1 x measured in _res: its paired difference too
    assert row["pred diff mean"] == pytest.approx(1.1 * 0.7 / 3)
    # the single-run pair is budget_table's, untouched by the replicates
    assert rc.budget_table(res)["goodput measured"].tolist() == [4.9, 5.4]
    del res["runs"]["budget-tuned-6-rep1"], res["runs"]["budget-tuned-6-rep2"]
    assert rc.budget_replicates(res)[1]["reps"].item() == 1
    del res["runs"]["budget-tuned-6-rep3"]
    with pytest.raises(InputError, match="one configuration"):
        rc.budget_replicates(res)
    with pytest.raises(InputError, match="rep"):
        rc.budget_replicates(_result())


def test_validate_series_train_series_argument(tmp_path):
    (tmp_path / "a").mkdir()
    with pytest.raises(InputError, match="no run folder"):
        rc.validate_series(tmp_path / "a", "x", train_series=tmp_path)
    _run(tmp_path / "a", "r1")
    with pytest.raises(InputError, match="train_series"):
        rc.validate_series(tmp_path / "a", "x", train_series=tmp_path / "missing")
    with pytest.raises(InputError, match="not a run"):
        rc.validate_series(tmp_path / "a", "r1", train_series=tmp_path)


@pytest.mark.skipif(not (SERIES / "repeat-1" / "steps.csv").is_file(),
                    reason="the committed real-client series is not in this checkout")
def test_committed_series():
    res = rc.validate_series(SERIES, "repeat-1", replications=0)
    assert res["model"] == "seed_ctx_mono" and not res["runs"]["repeat-1"]["held_out"]
    assert 0.1 < res["step_overhead_ms"] < 2.0
    for name in ("conc-4", "conc-16"):
        r = res["runs"][name]
        assert r["max_concurrency"] in (4, 16) and "open_loop_replay" in r
    # light load: the engine is rarely busy, TPOT p50 within 10 % (the done-when bound)
    assert abs(res["runs"]["rate-1"]["tpot_ms_p50"]["error"]) < 0.10
    assert rc.capacity_check(res)["inside"] is None      # no interval without replications
    # the client round trip, measured on the training run only: a few ms each way
    cd = res["client_delays"]
    assert 1.0 < cd["request_intake_ms"] < 10.0 and 0.5 < cd["response_delay_ms"] < 5.0
    assert cd["n_intake_consistent"] >= 0.9 * cd["n_requests"]
    # with it, the closed loops' TTFT p50 is closer than without it
    off = rc.validate_series(SERIES, "repeat-1", replications=0, client_round_trip=False)
    assert off["client_delays"] is None
    for name in ("conc-4", "conc-16"):
        assert (abs(res["runs"][name]["ttft_ms_p50"]["error"])
                < abs(off["runs"][name]["ttft_ms_p50"]["error"]))
    with pytest.raises(InputError, match="not a run"):
        rc.validate_series(SERIES, "no-such-run", replications=0)


def _synthetic_log(intake_ms=4.0, resp_ms=2.0, ovh_ms=0.5, n=40, seed=0):
    """A busy engine stepping every 10 ms (9.5 ms model run + 0.5 ms overhead) from t=100 s;
    request i (prompt P_i) sent at a random time joins the first step starting at or after
    its send + intake, and the client sees its first token resp_ms after that step's end.
    One warm-up request before the first send must be ignored."""
    rng = np.random.default_rng(seed)
    send = np.sort(100.0 + rng.uniform(0.0, 0.3, n))
    P = rng.integers(5, 50, n)
    mono = 100.0 + 0.01 * np.arange(40)
    k = np.searchsorted(mono, send + intake_ms / 1e3, side="left")
    rows = [{"mono_s": 99.0, "duration_ms": 9.5, "chunk_sizes": "7", "context_lens": "0"}]
    for j, t in enumerate(mono):
        c, x = ["1"], ["60"]                  # a decode keeps every step busy
        for i in np.nonzero(k == j)[0]:
            c.append(str(P[i]))
            x.append("0")
        rows.append({"mono_s": t, "duration_ms": 9.5, "chunk_sizes": ";".join(c),
                     "context_lens": ";".join(x)})
    ttft = mono[k] + (9.5 + ovh_ms) / 1e3 + resp_ms / 1e3 - send
    perm = rng.permutation(n)                 # the client's file order is not send order
    return pd.DataFrame(rows), send[perm], P[perm], ttft[perm]


def test_client_delay_estimator_on_a_synthetic_log():
    steps, send, P, ttft = _synthetic_log()
    d = rc.estimate_client_delays(steps, send, P, ttft, 0.5)
    assert d["n_requests"] == d["n_intake_consistent"] == d["n_response"] == 40
    assert d["response_delay_ms"] == pytest.approx(2.0, abs=1e-6)
    assert abs(d["request_intake_ms"] - 4.0) < 0.5       # 40 sends over 30 steps pin it down
    steps7, send7, P7, ttft7 = _synthetic_log(intake_ms=7.0, resp_ms=0.8, seed=1)
    d7 = rc.estimate_client_delays(steps7, send7, P7, ttft7, 0.5)
    assert abs(d7["request_intake_ms"] - 7.0) < 0.5
    assert d7["response_delay_ms"] == pytest.approx(0.8, abs=1e-6)
    # the median of (first step start - send) also counts the wait for the step in progress
    assert d["request_intake_ms"] < np.median(
        steps["mono_s"].to_numpy()[1:][np.searchsorted(
            steps["mono_s"].to_numpy()[1:], np.sort(send) + 0.004)] - np.sort(send)) * 1e3


def test_client_delay_estimator_refuses_what_it_cannot_match():
    steps, send, P, ttft = _synthetic_log()
    with pytest.raises(InputError, match="cannot match"):
        rc.estimate_client_delays(steps, send[:-1], P[:-1], ttft[:-1], 0.5)
    with pytest.raises(InputError, match="steps lacks"):
        rc.estimate_client_delays(steps.drop(columns="mono_s"), send, P, ttft, 0.5)
    with pytest.raises(InputError, match="step_overhead_ms"):
        rc.estimate_client_delays(steps, send, P, ttft, -1.0)
    with pytest.raises(InputError, match="one length"):
        rc.estimate_client_delays(steps, send, P[:3], ttft, 0.5)


@pytest.mark.skipif(not (SERIES / "repeat-1" / "steps.csv").is_file()
                    or not (REPLICATES / "repeat-1" / "bench.json").is_file(),
                    reason="the committed real-client series are not in this checkout")
def test_committed_replicates_replayed_with_the_first_series_fit():
    res = rc.validate_series(REPLICATES, "repeat-1", replications=0, train_series=SERIES)
    # the fit of the first series, its overhead; every run of the replicates held out, even
    # the one that shares the training run's name
    assert res["train_series"] == str(SERIES) and res["model"] == "seed_ctx_mono"
    assert res["step_overhead_ms"] == pytest.approx(rc.fit_run(SERIES / "repeat-1")[2])
    assert all(r["held_out"] for r in res["runs"].values()) and len(res["runs"]) == 15
    per_run, per_rate = rc.budget_replicates(res)
    assert per_rate["rate"].tolist() == [5.0, 6.0] and per_rate["reps"].tolist() == [3, 3]
    assert (per_run["n"] == 500).all()
    # paired: both configurations of a repeat replay the same requests and arrivals
    for rate, rep in per_run[["rate", "rep"]].drop_duplicates().itertuples(index=False):
        a, b = (load_workload(REPLICATES / f"budget-{c}-{rate:g}-rep{rep}" / "bench.json")
                for c in ("default", "tuned"))
        assert a["prompt_tokens"].tolist() == b["prompt_tokens"].tolist()
        assert np.allclose(a["arrival_s"] - a["arrival_s"].min(),
                           b["arrival_s"] - b["arrival_s"].min(), atol=0.05)
    # 500-request same-seed repeats: TPOT p50 within a few percent of each other
    assert rc.repeat_spread(res)["tpot_ms p50"] < 0.10


@pytest.mark.parametrize("last_pass, first_fail, lower, upper, verdict", [
    (4.0, 5.0, 3.9, 5.0, "brackets"),       # holds the whole bracket (4, 5]
    (4.0, 5.0, 4.3, 6.0, "overlaps"),       # part of it: the measured rates cannot tell
    (4.0, 5.0, 5.1, 6.0, "misses"),         # wholly above the first failing rate
    (4.0, 5.0, 3.0, 4.0, "misses"),         # wholly at or below the last passing rate
    (None, 4.0, 4.7, 6.2, "misses"),        # only a failing rate measured: (0, 4]
    (None, 4.0, 3.5, 6.2, "overlaps"),
    (5.5, None, 4.0, 6.0, "overlaps"),      # every measured rate met the target: (5.5, inf)
    (5.5, None, 4.0, 5.5, "misses"),
])
def test_failure_point_verdict(last_pass, first_fail, lower, upper, verdict):
    assert rc.failure_point_verdict(last_pass, first_fail, lower, upper) == verdict


@pytest.mark.parametrize("args, match", [((5.0, 4.0, 1.0, 2.0), "below first_fail"),
                                         ((1.0, 2.0, 3.0, 2.0), "above upper"),
                                         ((1.0, 2.0, -1.0, 2.0), "lower"),
                                         ((-1.0, 2.0, 1.0, 2.0), "last_pass")])
def test_failure_point_verdict_bad_input(args, match):
    with pytest.raises(InputError, match=match):
        rc.failure_point_verdict(*args)
