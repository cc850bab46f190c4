"""Request-level capacity: hand-computed answers, the search, the interval, bad input."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfmodel.core.fit import fit_model
from perfmodel.core.model import get_model
from perfmodel.decisions.capacity import (
    StepModelDraw,
    _unit_arrivals,
    capacity,
    evaluate_load,
    parameter_draws,
    unit_schedule,
)
from perfmodel.decisions.requests_workload import SLO, Workload, workload_from_lengths
from perfmodel.decisions.simulate import EngineConfig
from perfmodel.errors import InputError


class Const:
    """Every step takes 10 ms, whatever it computes."""

    def predict(self, f):
        return np.full(len(f["B"]), 10.0)


def _fixed(n, P, O):
    return Workload(np.full(n, P), np.full(n, O))


@pytest.mark.parametrize("ttft_limit, expected", [(10.5, 1), (49.9, 2), (50.5, 3), (110.5, 6)])
def test_closed_loop_capacity_by_hand(ttft_limit, expected):
    """max_num_seqs = 1 serialises requests of 1 prefill + 1 decode step (20 ms): the k-th
    waiting client sees TTFT = 20 (k - 1) + 10 ms, so C* = floor((L - 10) / 20) + 1."""
    w = _fixed(24, 10, 2)
    slo = SLO(ttft_ms=ttft_limit, attainment=1.0)
    d = capacity(Const(), w, slo, mode="concurrency", engine=EngineConfig(max_num_seqs=1),
                 replications=0, noise=False)
    assert d["max_concurrency"] == expected == int((ttft_limit - 10) // 20 + 1)
    assert d["feasible"] and not d["capped"]
    assert d["interval"] is None


def test_tpot_limit_above_and_below_the_step_time():
    """Every decode step is 10 ms: TPOT is 10 ms at any load."""
    w = _fixed(40, 16, 8)
    kw = {"engine": EngineConfig(max_num_seqs=64), "replications": 0, "noise": False}
    d = capacity(Const(), w, SLO(tpot_ms=10.5, attainment=1.0), max_load=500.0, **kw)
    assert d["capped"] and d["max_rate"] == 500.0
    d = capacity(Const(), w, SLO(tpot_ms=9.5), **kw)
    assert not d["feasible"] and d["max_rate"] == 0.0
    d = capacity(Const(), w, SLO(tpot_ms=9.5), mode="concurrency", **kw)
    assert d["max_concurrency"] == 0


class Growing:
    """Step time grows with the tokens of the step: 5 ms + 0.05 ms per token."""

    def predict(self, f):
        return 5.0 + 0.05 * np.asarray(f["S"], float)


def test_rate_answer_meets_the_target_and_a_bit_more_does_not():
    w = workload_from_lengths("uniform:32,128", "uniform:8,32", 120, seed=3)
    slo = SLO(ttft_ms=200.0, tpot_ms=15.0, attainment=0.95)
    eng = EngineConfig(max_num_seqs=16, max_num_batched_tokens=256)
    d = capacity(Growing(), w, slo, engine=eng, replications=0, noise=False, rel_tol=0.01,
                 seed=5)
    x = d["max_rate"]
    assert 0 < x < 1e4
    ok = evaluate_load(Growing(), w, slo, x, engine=eng, arrival_seed=5)
    assert ok["attainment"] >= 0.95
    above = [evaluate_load(Growing(), w, slo, x * f, engine=eng, arrival_seed=5)["attainment"]
             for f in (1.011, 1.2, 1.5)]
    assert above[0] < 0.95  # the bisection bracket is within rel_tol
    assert max(above[1:]) < 0.95
    # the curve is scored like evaluate_load and goodput <= throughput
    for c in d["attainment_curve"]:
        assert c["goodput_req_s"] <= c["request_throughput_req_s"] + 1e-12
        assert 0.0 <= c["attainment"] <= 1.0
    assert {"model", "workload", "engine", "arrivals"} <= set(d["assumptions"])


def _fit(seed=0, n=400, sigma=0.05):
    rng = np.random.default_rng(seed)
    B = rng.integers(1, 48, n)
    S = B + rng.integers(0, 800, n)
    theta = np.array([2.0, 1.0, 0.02, 1.0, 0.5, 0.1, 0.02])
    T = get_model("seed_id").predict(theta, {"B": B, "S": S}) * np.exp(rng.normal(0, sigma, n))
    return fit_model(pd.DataFrame({"batch_size": B, "total_tokens": S, "duration_ms": T}),
                     "seed_id", n_starts=2)


@pytest.fixture(scope="module")
def fit():
    return _fit()


def test_interval_brackets_the_spread_of_the_replications(fit):
    w = workload_from_lengths("uniform:32,96", "uniform:8,24", 60, seed=1)
    slo = SLO.parse("ttft_p95=300,tpot_p95=40")
    d = capacity(fit, w, slo, engine=EngineConfig(max_num_seqs=16, max_num_batched_tokens=256),
                 replications=6, level=0.9, rel_tol=0.05)
    iv = d["interval"]
    vals = np.array(iv["values"])
    assert len(vals) == 6 and np.all(vals > 0)
    assert iv["lower"] == pytest.approx(np.quantile(vals, 0.05))
    assert iv["upper"] == pytest.approx(np.quantile(vals, 0.95))
    assert "normal approximation" in iv["sources"]["parameters"]
    assert "log scale" in iv["sources"]["step_noise"]
    # the Monte Carlo range of each end: 6 replications, q = 0.05 -> order statistics 0 and 2 (0.95: 4 and 5)
    srt = np.sort(vals)
    assert iv["lower_mc_range"] == [srt[0], srt[2]]
    assert iv["upper_mc_range"] == [srt[4], srt[5]]
    # a noise-free, exact-parameter search at the same seed is a different but close answer
    d0 = capacity(fit, w, slo, engine=EngineConfig(max_num_seqs=16, max_num_batched_tokens=256),
                  replications=0, noise=False, rel_tol=0.05)
    assert 0.5 < d0["max_rate"] / d["max_rate"] < 2.0


def test_parameter_draws_bootstrap_and_normal(fit):
    boot = np.tile(fit.values, (30, 1)) * (1 + 0.01 * np.arange(30))[:, None]
    th, src = parameter_draws(fit, 50, seed=0, boot_samples=boot)
    assert th.shape == (50, len(fit.values)) and "bootstrap" in src
    assert all(any(np.allclose(t, b) for b in boot) for t in th)
    th, src = parameter_draws(fit, 400, seed=0)
    assert np.all(th >= fit.model.lower) and np.all(th <= fit.model.upper)
    # the draws centre on the estimate (normal approximation) where the bounds do not clip
    sd = np.sqrt(np.diag(fit.cov))
    free = (sd > 0) & (fit.values - 4 * sd > fit.model.lower) & (fit.values + 4 * sd < fit.model.upper)
    assert free.sum() >= 2
    z = (th.mean(0) - fit.values)[free] / (np.sqrt(np.diag(fit.cov))[free] / 20)
    assert np.all(np.abs(z) < 5)


def test_step_noise_is_lognormal_with_the_fit_sd_and_reproducible(fit):
    m = StepModelDraw(fit, seed=4)
    f = {"B": np.full(20000, 8.0), "S": np.full(20000, 256.0)}
    a = m.predict(f)
    m.reset()
    assert np.array_equal(a, m.predict(f))
    mu = fit.predict(f)
    sd = np.std(np.log(a / mu))
    assert sd == pytest.approx(np.sqrt(fit.rss / fit.dof), rel=0.05)
    assert np.array_equal(StepModelDraw(fit, noise=False).predict(f), mu)


@pytest.mark.parametrize("call, match", [
    (lambda: capacity(Const(), "w", SLO(ttft_ms=1)), "workload must be"),
    (lambda: capacity(Const(), _fixed(4, 1, 2), "slo"), "slo must be"),
    (lambda: capacity(Const(), _fixed(4, 1, 2), SLO(ttft_ms=1), mode="x"), "mode"),
    (lambda: capacity(Const(), _fixed(4, 1, 2), SLO(ttft_ms=1)), "need a FitResult"),
    (lambda: capacity(Const(), _fixed(4, 1, 2), SLO(ttft_ms=1), replications=0, noise=False,
                      level=1.5), "level"),
    (lambda: capacity(Const(), _fixed(4, 1, 2), SLO(ttft_ms=1), replications=0, noise=False,
                      engine=EngineConfig(step_noise_sd=0.1)), "step_noise_sd"),
    (lambda: SLO(), "at least one limit"),
    (lambda: SLO(ttft_ms=-1), "positive"),
    (lambda: SLO.parse("ttft_p99=5,tpot_p90=3"), "percentiles differ"),
    (lambda: SLO.parse("ttft_p99=5", attainment=0.9), "contradicts"),
    (lambda: SLO.parse("latency=5"), "METRIC"),
    (lambda: SLO.parse("ttft=fast"), "not a number"),
    (lambda: SLO.parse(""), "empty"),
    (lambda: Workload(np.array([1, 2]), np.array([1])), "equally long"),
    (lambda: Workload(np.array([0]), np.array([1])), "integers >= 1"),
])
def test_bad_input_is_named(call, match):
    with pytest.raises(InputError, match=match):
        call()


def test_slo_parse_and_met():
    s = SLO.parse("ttft_p99=500, tpot_p99=50")
    assert (s.ttft_ms, s.tpot_ms, s.e2e_ms, s.attainment) == (500, 50, None, 0.99)
    assert SLO.parse("e2e=2000").attainment == 0.99
    assert SLO.parse("e2e=2000", attainment=0.9).attainment == 0.9
    req = pd.DataFrame({"ttft_s": [0.4, 0.6, 0.1], "tpot_ms": [10, 10, np.nan],
                        "e2e_s": [1, 1, 1]})
    assert s.met(req).tolist() == [True, False, True]


def test_replications_are_identical_in_process_on_loky_and_on_dask(fit):
    """The interval's searches are independent tasks seeded by their index: the same
    answers in this process, on 2 loky workers and on a Dask LocalCluster of 2 processes."""
    pytest.importorskip("dask.distributed", reason="dask[distributed] is not installed")
    w = workload_from_lengths("uniform:32,96", "uniform:8,24", 60, seed=1)
    slo = SLO.parse("ttft_p95=300,tpot_p95=40")
    kw = {"engine": EngineConfig(max_num_seqs=16, max_num_batched_tokens=256),
          "replications": 4, "rel_tol": 0.05}
    ref = capacity(fit, w, slo, **kw)
    loky = capacity(fit, w, slo, backend="loky", n_jobs=2, **kw)
    dask = capacity(fit, w, slo, backend="dask", n_jobs=2, **kw)  # starts a LocalCluster
    assert len(set(ref["interval"]["values"])) > 1  # the draws differ: a real check
    for other in (loky, dask):
        assert other["interval"] == ref["interval"]
        assert other["max_rate"] == ref["max_rate"]
        assert other["search"] == ref["search"]


def test_backend_is_checked(fit):
    w = _fixed(4, 8, 2)
    with pytest.raises(InputError, match="backend"):
        capacity(fit, w, SLO(ttft_ms=100.0), backend="spark")
    with pytest.raises(InputError, match="only used by backend 'dask'"):
        capacity(fit, w, SLO(ttft_ms=100.0), scheduler="tcp://h:1")


def test_run_level_term_widens_the_interval_and_is_stated(fit):
    """A run-level sd of 0.3 (steps of a replication 0.6-1.6x slower together) spreads the
    answers more than the same replications without it; the output says which was used."""
    w = workload_from_lengths("uniform:32,96", "uniform:8,24", 60, seed=1)
    slo = SLO.parse("ttft_p95=300,tpot_p95=40")
    eng = EngineConfig(max_num_seqs=16, max_num_batched_tokens=256)
    kw = {"engine": eng, "replications": 8, "rel_tol": 0.05}
    d0 = capacity(fit, w, slo, **kw)
    d1 = capacity(fit, w, slo, run_sd=0.3, **kw)
    assert d1["max_rate"] == d0["max_rate"]            # the point answer has no run factor
    v0, v1 = np.log(d0["interval"]["values"]), np.log(d1["interval"]["values"])
    assert np.std(v1) > 1.5 * np.std(v0)
    assert "none" in d0["assumptions"]["run_level"]
    assert "0.3" in d1["assumptions"]["run_level"]
    assert "0.3" in d1["interval"]["sources"]["run_level"]
    with pytest.raises(InputError, match="run_sd"):
        capacity(fit, w, slo, run_sd=-0.1, **kw)


def test_step_model_draw_factor(fit):
    f = {"B": np.full(10, 8.0), "S": np.full(10, 256.0)}
    a = StepModelDraw(fit, noise=False).predict(f)
    assert np.allclose(StepModelDraw(fit, noise=False, factor=1.25).predict(f), 1.25 * a)
    with pytest.raises(InputError, match="factor"):
        StepModelDraw(fit, factor=0.0)


def test_resampled_requests_are_new_draws_per_replication_and_are_stated(fit, monkeypatch):
    """With resample_requests each replication serves its own draw, with replacement, of the
    workload's (prompt, output) pairs (seeded by its index: the same draws on a rerun); without
    it every replication serves the workload itself; the point answer always serves the
    workload; the output says which, and gives the median of the answers."""
    import perfmodel.decisions.capacity as cap

    n = 40
    w = Workload(np.r_[np.full(n // 2, 32), np.full(n // 2, 256)],
                 np.r_[np.full(n // 2, 8), np.full(n // 2, 64)])
    served = []
    real = cap._one_search

    def spy(model, workload, *args, **kwargs):
        served.append(np.c_[workload.prompt_tokens, workload.output_tokens])
        return real(model, workload, *args, **kwargs)

    monkeypatch.setattr(cap, "_one_search", spy)
    slo = SLO.parse("ttft_p95=300,tpot_p95=40")
    kw = {"engine": EngineConfig(max_num_seqs=16, max_num_batched_tokens=256),
          "replications": 6, "rel_tol": 0.05, "noise": False}
    pairs = {(32, 8), (256, 64)}
    d0 = capacity(fit, w, slo, **kw)
    base = np.c_[w.prompt_tokens, w.output_tokens]
    assert len(served) == 7 and all(np.array_equal(x, base) for x in served)
    served.clear()
    d1 = capacity(fit, w, slo, resample_requests=True, **kw)
    assert np.array_equal(served[0], base)                  # the point answer
    draws = served[1:]
    assert len(draws) == 6 and all(len(x) == n and set(map(tuple, x)) <= pairs for x in draws)
    longs = [int((x[:, 0] == 256).sum()) for x in draws]
    assert len(set(longs)) > 1                              # a different mix per replication
    assert d1["max_rate"] == d0["max_rate"]
    assert d1["interval"]["median"] == pytest.approx(np.median(d1["interval"]["values"]))
    assert "not resampled" in d0["interval"]["sources"]["requests"]
    assert "with replacement" in d1["interval"]["sources"]["requests"]
    assert capacity(fit, w, slo, resample_requests=True, **kw)["interval"] == d1["interval"]
    with pytest.raises(InputError, match="resample_requests"):
        capacity(fit, w, slo, resample_requests="yes", **kw)


def test_parameter_draws_hold_a_parameter_that_stopped_just_above_its_bound():
    """A solve that stopped 4e-8 above a bound of 1e-6 (range 1e5) leaves the parameter free
    in the fit's covariance with a standard error far beyond its distance from the bound (a
    real vLLM-CPU fit did so on one host): its normal draws would be clipped in half the
    replications. It is held at its estimate and the other parameter is drawn from its
    conditional normal, sd 0.13 * sqrt(1 - 0.99^2), not from its marginal sd 0.13."""
    from types import SimpleNamespace

    sd, r = np.array([38.0, 0.13]), -0.99
    cov = np.array([[sd[0] ** 2, r * sd[0] * sd[1]], [r * sd[0] * sd[1], sd[1] ** 2]])
    fake = SimpleNamespace(values=np.array([1e-6 + 4e-8, 1.0]), cov=cov,
                           param_names=["tau_0", "a_1"], unidentified=[],
                           model=SimpleNamespace(lower=np.array([1e-6, 0.0]),
                                                 upper=np.array([1e5, 10.0])))
    th, src = parameter_draws(fake, 4000, seed=1)
    assert np.all(th[:, 0] == fake.values[0]) and "at a bound held" in src
    assert np.std(th[:, 1]) == pytest.approx(0.13 * np.sqrt(1 - r**2), rel=0.05)
    # away from the bound the same covariance is drawn as it is
    far = SimpleNamespace(**{**vars(fake), "values": np.array([200.0, 1.0])})
    th, _ = parameter_draws(far, 4000, seed=1)
    assert np.std(th[:, 0]) == pytest.approx(38.0, rel=0.05)


def test_unit_schedule_gives_back_the_measured_arrivals_at_the_runs_rate():
    a = np.array([3.0, 3.5, 3.5, 4.25])
    u = unit_schedule(a, 4.0)
    assert np.allclose(u, [0.0, 2.0, 2.0, 5.0])
    assert np.allclose(u / 4.0 + a[0], a)
    for bad, match in (([1.0, 0.5], "non-decreasing"), ([0.0, np.nan], "finite"),
                       ([], "1-D")):
        with pytest.raises(InputError, match=match):
            unit_schedule(bad, 1.0)
    with pytest.raises(InputError, match="rate"):
        unit_schedule(a, 0.0)


def test_given_arrivals_serve_every_search_and_burstier_arrivals_lower_the_answer(fit):
    """With ``unit_arrivals`` the point search and every replication use that schedule (the
    replications then differ only by parameters, noise and run factor); a schedule whose
    requests come in bursts of ten at once, at the same mean rate as an evenly spaced one,
    gives a lower capacity: the answer depends on the arrivals it is given."""
    n = 60
    w = Workload(np.full(n, 64), np.full(n, 16))
    slo = SLO.parse("ttft_p95=150,tpot_p95=40")
    kw = {"engine": EngineConfig(max_num_seqs=16, max_num_batched_tokens=256),
          "rel_tol": 0.02, "noise": False}
    even = np.arange(n, dtype=float)
    bursts = np.repeat(np.arange(0, n, 10, dtype=float), 10)
    d_even = capacity(fit, w, slo, replications=0, unit_arrivals=even, **kw)
    d_burst = capacity(fit, w, slo, replications=0, unit_arrivals=bursts, **kw)
    assert 0 < d_burst["max_rate"] < 0.9 * d_even["max_rate"]
    assert "given schedule" in d_even["assumptions"]["arrivals"]
    # the answer is the one evaluate_load confirms on that schedule
    ok = evaluate_load(fit, w, slo, d_even["max_rate"], engine=kw["engine"], unit_arrivals=even)
    assert ok["attainment"] >= slo.attainment
    # no parameter uncertainty, no noise, no run term: every replication is the point answer
    d = capacity(fit, w, slo, replications=3, unit_arrivals=even,
                 boot_samples=np.tile(fit.values, (20, 1)), **kw)
    assert d["interval"]["values"] == [d["max_rate"]] * 3
    assert "given schedule" in d["interval"]["sources"]["arrivals"]
    for call, match in (({"unit_arrivals": even[:-1]}, "one arrival time per request"),
                        ({"unit_arrivals": even[::-1]}, "non-decreasing"),
                        ({"unit_arrivals": even, "mode": "concurrency"}, "mode='rate'"),
                        ({"unit_arrivals": even, "resample_requests": True}, "resample_requests")):
        with pytest.raises(InputError, match=match):
            capacity(fit, w, slo, replications=0, **kw, **call)


def test_a_poisson_schedule_given_as_recorded_arrivals_gives_the_poisson_answer(fit):
    """The recorded-arrival path and the Poisson path search the same way: the schedule the
    Poisson point search draws (seed ``s``), written out as arrival times of a run at 3 req/s
    starting at 7 s and read back with :func:`unit_schedule`, gives the same point answer; the
    schedule of replication 0 (seed ``s + 2000``) given the same way gives replication 0's
    answer within the search's tolerance (its search starts from the other point answer); the
    parameters are held at the fit (step noise and schedule vary)."""
    n, s, tol = 80, 11, 0.02
    w = workload_from_lengths("uniform:32,96", "uniform:8,24", n, seed=2)
    slo = SLO.parse("ttft_p95=300,tpot_p95=40")
    kw = {"engine": EngineConfig(max_num_seqs=16, max_num_batched_tokens=256),
          "rel_tol": tol, "seed": s, "boot_samples": np.tile(fit.values, (20, 1))}
    recorded = lambda seed: unit_schedule(_unit_arrivals(n, seed) / 3.0 + 7.0, 3.0)
    poisson = capacity(fit, w, slo, replications=1, **kw)
    given = capacity(fit, w, slo, replications=0, unit_arrivals=recorded(s), **kw)
    assert given["max_rate"] == pytest.approx(poisson["max_rate"], rel=1e-9)
    rep0 = capacity(fit, w, slo, replications=1, unit_arrivals=recorded(s + 2000), **kw)
    ratio = rep0["interval"]["values"][0] / poisson["interval"]["values"][0]
    assert 1 / (1 + tol) <= ratio <= 1 + tol
