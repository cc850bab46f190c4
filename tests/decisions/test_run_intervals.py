"""Replay intervals with the run-level term (perfmodel.decisions.run_intervals)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfmodel.core.fit import fit_model
from perfmodel.core.model import get_model
from perfmodel.decisions import real_client as rc
from perfmodel.decisions import run_intervals as ri
from perfmodel.decisions.requests_workload import SLO
from perfmodel.decisions.simulate import EngineConfig
from perfmodel.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
SERIES = ROOT / "data" / "vllm-serve" / "llama-small-20261126"
REPLICATES = ROOT / "data" / "vllm-serve" / "llama-small-replicates"


def _fit(sigma):
    rng = np.random.default_rng(0)
    n = 400
    B = rng.integers(1, 32, n)
    S = B + rng.integers(0, 400, n)
    theta = np.array([2.0, 1.0, 0.02, 1.0, 0.5, 0.1, 0.02])
    T = get_model("seed_id").predict(theta, {"B": B, "S": S}) * np.exp(rng.normal(0, sigma, n))
    return fit_model(pd.DataFrame({"batch_size": B, "total_tokens": S, "duration_ms": T}),
                     "seed_id", n_starts=2)


def _work(n=40, seed=1):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"prompt_tokens": rng.integers(16, 64, n),
                         "output_tokens": rng.integers(4, 16, n),
                         "arrival_s": np.sort(rng.uniform(0, 2.0, n)),
                         "ttft_ms": 20.0, "tpot_ms": 8.0, "latency_ms": 120.0})


def test_interval_collapses_without_noise_and_widens_with_the_run_term():
    work, eng = _work(), EngineConfig(max_num_seqs=8, max_num_batched_tokens=128, policy="fcfs")
    slo = SLO.parse("ttft_p99=200,tpot_p99=20")
    tight = _fit(1e-6)
    iv = ri.replay_interval(tight, work, eng, slo, replications=5)
    point = rc.replay_run(tight, work, eng, slo)["tpot_ms_p50"]["predicted"]
    assert iv["tpot_ms"]["p50"]["lower"] == pytest.approx(point, rel=1e-3)
    assert iv["tpot_ms"]["p50"]["upper"] == pytest.approx(point, rel=1e-3)
    assert iv["tpot_ms"]["p50"]["measured"] == 8.0 and iv["attainment"]["measured"] == 1.0
    assert set(iv["latency_ms"]) == {"mean", "p50", "p90", "p95", "p99"}
    # requests without measured timings and no SLO: intervals only
    bare = ri.replay_interval(tight, work[["prompt_tokens", "output_tokens", "arrival_s"]],
                              eng, replications=3)
    assert bare["ttft_ms"]["p99"]["measured"] is None and "attainment" not in bare
    wide = ri.replay_interval(tight, work, eng, slo, replications=20, run_sd=0.2)
    w = wide["tpot_ms"]["p50"]
    assert w["upper"] / w["lower"] > 1.3            # exp(2 * 1.645 * 0.2) = 1.93 for TPOT
    assert w["lower"] < point < w["upper"] and wide["run_sd"] == 0.2
    for bad, match in (({"replications": 1}, "replications"), ({"run_sd": -1}, "run_sd"),
                       ({"level": 1.5}, "level")):
        with pytest.raises(InputError, match=match):
            ri.replay_interval(tight, work, eng, slo, **bad)
    with pytest.raises(InputError, match="SLO"):
        ri.replay_interval(tight, work, eng, "ttft_p99=200")
    with pytest.raises(InputError, match="lacks columns"):
        ri.replay_interval(tight, work.drop(columns="arrival_s"), eng)


@pytest.mark.skipif(not (SERIES / "repeat-1" / "steps.csv").is_file()
                    or not (REPLICATES / "repeat-1" / "bench.json").is_file(),
                    reason="the committed real-client series are not in this checkout")
def test_committed_replicates_inside_more_often_with_the_run_term(tmp_path):
    sp = ri.series_run_spread(SERIES, "repeat-1")
    assert sp["n_runs"] == 14 and "repeat-1" not in sp["ratios"]
    assert 0.01 < sp["sd"] < 0.2
    # three later runs, held out (another series), whose engines ran 1-3 % slower than the
    # fitted run: every p50 outside the interval without the run term, inside with it
    for name in ("budget-default-5-rep2", "repeat-1", "repeat-2"):
        (tmp_path / name).symlink_to(REPLICATES / name)
    kw = {"train_series": SERIES, "replications": 20}
    off = ri.series_intervals(tmp_path, "repeat-1", **kw)
    on = ri.series_intervals(tmp_path, "repeat-1", run_sd=sp["sd"], **kw)
    assert on["held_out"].all() and len(on) == 3
    cols = [f"{k} inside" for k in ("ttft_ms_p50", "tpot_ms_p50", "latency_ms_p50")]
    assert on[cols].to_numpy().sum() >= 7
    assert off[cols].to_numpy().sum() <= 2
    with pytest.raises(InputError, match="no run with a steps.csv"):
        ri.series_intervals(tmp_path, "nope", train_series=SERIES)


@pytest.mark.skipif(not (SERIES / "repeat-1" / "steps.csv").is_file()
                    or not (REPLICATES / "repeat-1" / "steps.csv").is_file(),
                    reason="the committed real-client series are not in this checkout")
def test_series_run_spread_over_several_series():
    one = ri.series_run_spread(SERIES, "repeat-1")
    both = ri.series_run_spread(SERIES, "repeat-1", extra_series=[REPLICATES])
    n_rep = sum((d / "steps.csv").is_file() for d in REPLICATES.iterdir())
    assert both["n_runs"] == one["n_runs"] + n_rep
    assert {k: v for k, v in both["ratios"].items() if "/" not in k} == one["ratios"]
    assert all(k.startswith(f"{REPLICATES.name}/") for k in both["ratios"] if "/" in k)
    logs = np.log(list(both["ratios"].values()))
    assert both["sd"] == pytest.approx(np.sqrt(np.mean(logs ** 2)))
    # the training series given again as an extra adds nothing but its own runs, prefixed,
    # and never the training run
    again = ri.series_run_spread(SERIES, "repeat-1", extra_series=[SERIES])
    assert f"{SERIES.name}/repeat-1" not in again["ratios"]
    with pytest.raises(InputError, match="list of series"):
        ri.series_run_spread(SERIES, "repeat-1", extra_series=str(REPLICATES))
    with pytest.raises(InputError, match="not a folder"):
        ri.series_run_spread(SERIES, "repeat-1", extra_series=["/nonexistent/series"])


def _placed(measured, lower=10.0, upper=20.0, pit=None):
    """A series_intervals-like frame for one statistic with the given measured values."""
    m = np.asarray(measured, float)
    pit = np.clip((m - lower) / (upper - lower), 0, 1) if pit is None else np.asarray(pit, float)
    return pd.DataFrame({"tpot_ms_p50 measured": m, "tpot_ms_p50 lower": lower,
                         "tpot_ms_p50 upper": upper, "tpot_ms_p50 pit": pit,
                         "tpot_ms_p50 inside": (lower <= m) & (m <= upper)})


def test_interval_placement_leaves_ties_out_of_the_sign_test():
    # 9 runs whose replays all equal the measured value (pit 1/2: a share within the SLO of
    # 1.00 everywhere) and 4 runs below their replays: the test counts 4 of 4, not 4 of 13
    r = ri.interval_placement(_placed([15.0] * 13, pit=[0.5] * 9 + [0.1] * 4),
                              "tpot_ms_p50").iloc[0]
    assert (r["n"], r["lower_half"], r["upper_half"], r["ties"]) == (13, 4, 0, 9)
    assert r["half_p"] == pytest.approx(2 * 0.5**4)
    # every run a tie: no sign, no p-value
    r = ri.interval_placement(_placed([15.0] * 3, pit=[0.5] * 3), "tpot_ms_p50").iloc[0]
    assert r["ties"] == 3 and np.isnan(r["half_p"])


def test_interval_placement_counts_sides_and_halves():
    # 13 runs, all inside but every one in the lower half: a pass by width that the
    # two-sided count and the halves expose
    low = _placed(np.linspace(10.5, 14.5, 13))
    r = ri.interval_placement(low, ["tpot_ms_p50"]).iloc[0]
    assert (r["n"], r["inside"], r["below"], r["above"], r["lower_half"]) == (13, 13, 0, 0, 13)
    assert r["half_p"] == pytest.approx(2 * 0.5**13)
    assert r["median_width"] == pytest.approx(10 / 15) and r["relative_width"]
    # spread evenly over the interval and beyond it on both sides: halves balanced
    even = _placed([5, 12, 13, 14, 16, 17, 18, 25, 15])
    r = ri.interval_placement(even, "tpot_ms_p50").iloc[0]
    assert (r["inside"], r["below"], r["above"], r["lower_half"]) == (7, 1, 1, 4)
    assert (r["upper_half"], r["ties"]) == (4, 1)          # the run at the midpoint is a tie
    assert r["half_p"] == 1.0 and r["median_pit"] == 0.5
    with pytest.raises(InputError, match="lacks columns"):
        ri.interval_placement(even, ["ttft_ms_p50"])
    with pytest.raises(InputError, match="lacks columns"):
        ri.interval_placement(even.drop(columns="tpot_ms_p50 inside"), ["tpot_ms_p50"])
    with pytest.raises(InputError, match="DataFrame"):
        ri.interval_placement({"a": 1})


def test_replay_interval_gives_the_measured_values_share_of_replays():
    fit = _fit(0.05)
    work = _work()
    iv = ri.replay_interval(fit, work, EngineConfig(max_num_seqs=8), replications=20, seed=3)
    for q in ("p50", "p99"):
        v = iv["tpot_ms"][q]
        assert 0.0 <= v["pit"] <= 1.0
        # below the interval's lower end: under its share (level 0.9 -> 0.05) of replays
        inside = v["lower"] <= v["measured"] <= v["upper"]
        assert inside or (v["pit"] < 0.06 if v["measured"] < v["lower"] else v["pit"] > 0.94)
