"""Noise floors: replicate runs (raw and drift-removed) and configuration repeats."""
import numpy as np
import pandas as pd
import pytest

from perfmodel.data.noise import (
    config_floor,
    group_floors,
    median_oracle_errors,
    median_oracle_factor,
    noise_floor,
    replicate_floor,
)
from perfmodel.errors import InputError

SIGMA = 0.05


def _replicates(n_cfg=1500, runs=3, sigma=SIGMA, drift=None, seed=0):
    """Same-seed runs: each run executes every config once, in a run-specific order."""
    rng = np.random.default_rng(seed)
    mu = np.exp(rng.uniform(np.log(2.0), np.log(200.0), n_cfg))
    phase = np.where(np.arange(n_cfg) % 2 == 0, "decode", "prefill")
    rows = []
    step = 0
    for r in range(runs):
        order = rng.permutation(n_cfg)
        for pos, i in enumerate(order):
            t = mu[i] * np.exp(sigma * rng.standard_normal())
            if drift is not None:
                t *= drift(r, pos / n_cfg)
            rows.append({"step": step, "replicate": r + 1, "config": f"c{i:05d}",
                         "phase": phase[i], "batch_size": 1 + i % 7,
                         "total_tokens": 1 + i % 7 + i, "duration_ms": t})
            step += 1
    return pd.DataFrame(rows)


def test_replicate_floor_matches_known_noise():
    nf = replicate_floor(_replicates())
    assert nf.kind == "replicate runs" and nf.n_groups == 1500 and nf.replicates == 3
    # median of sample sd/mean of 3 log-normal draws: sigma * E-median of chi_2/sqrt(2) ~ 0.83
    assert 0.75 * SIGMA < nf.median_cv < 0.95 * SIGMA
    # the corrected oracle MAPE estimates E|T - mu|/T = sigma sqrt(2/pi) (small sigma)
    truth = 100 * SIGMA * np.sqrt(2 / np.pi)
    assert abs(nf.oracle_mape - truth) / truth < 0.06
    # the uncorrected one understates it by sqrt((n-1)/n)
    assert nf.oracle_mape_sample == pytest.approx(nf.oracle_mape * np.sqrt(2 / 3), rel=0.02)
    assert set(nf.by_group) == {"decode", "prefill"}
    assert nf.floor == nf.oracle_median
    # the unscaled median oracle is a lower bound; scaled by c_3 = sqrt(2) it estimates
    # the error of the true centre, like the corrected mean oracle
    assert nf.oracle_median_sample < nf.oracle_mape_sample
    assert nf.oracle_median == pytest.approx(nf.oracle_median_sample * median_oracle_factor(3))
    assert abs(nf.oracle_median - truth) / truth < 0.06
    assert np.isfinite(nf.row_errors).sum() == nf.n_rows and "row_errors" not in nf.to_dict()


def test_median_oracle_is_the_smallest_mape_of_any_constant_per_group():
    rng = np.random.default_rng(4)
    g = rng.integers(0, 40, 200)
    y = np.exp(rng.standard_t(3, 200) * 0.3 + g / 10)  # heavy tails
    e = median_oracle_errors(y, g)
    for k in np.unique(g):
        yk = y[g == k]
        if yk.size < 2:
            assert np.isnan(e[g == k]).all()
            continue
        # the minimum of a piecewise-linear convex function lies at one of the values
        best = min(np.mean(np.abs(yk - c) / yk) for c in yk)
        grid = np.linspace(yk.min(), yk.max(), 401)
        assert best <= min(np.mean(np.abs(yk - c) / yk) for c in grid) + 1e-12
        assert np.mean(e[g == k]) == pytest.approx(best, rel=1e-12)
    with pytest.raises(InputError):
        median_oracle_errors([1.0, -1.0], [0, 0])


def test_drift_is_removed_and_reported():
    # run 2 slows down smoothly by up to 30% over its course; runs 1 and 3 are steady
    def drift(r, x):
        return 1.0 + 0.3 * np.sin(np.pi * x) if r == 1 else 1.0

    clean = replicate_floor(_replicates(drift=None, seed=3))
    nf = replicate_floor(_replicates(drift=drift, seed=3), window=101)
    assert nf.median_cv > 1.5 * clean.median_cv  # the drift inflates the raw floor
    assert nf.median_cv_drift_removed == pytest.approx(clean.median_cv, rel=0.15)
    assert nf.oracle_mape_drift_removed == pytest.approx(clean.oracle_mape, rel=0.15)
    assert nf.window == 101 and nf.by == "phase"
    lo, hi = nf.drift_range
    assert lo < 1.0 < hi and hi > 1.15
    assert "101 steps" in nf.note


def test_replicate_floor_matches_by_step_without_config():
    # same-seed runs: identical schedules, so the step index within a run is the key
    rng = np.random.default_rng(5)
    n, runs = 400, 3
    B = rng.integers(1, 32, n)
    mu = 2.0 + 0.3 * B
    df = pd.DataFrame({"replicate": np.repeat(np.arange(1, runs + 1), n),
                       "step": np.tile(np.arange(n), runs),
                       "batch_size": np.tile(B, runs), "total_tokens": np.tile(B, runs),
                       "duration_ms": np.tile(mu, runs) * np.exp(SIGMA * rng.standard_normal(
                           n * runs))})
    df.loc[n + 7, "total_tokens"] += 5  # run 2 diverged at step 7: not a replicate any more
    nf = replicate_floor(df, order="step", by=None)
    assert nf.kind == "replicate runs" and nf.key == "step"
    assert nf.n_groups == n - 1 and "1 keys with different schedules" in nf.note
    assert 0.75 * SIGMA < nf.median_cv < 0.95 * SIGMA


def test_config_floor_hand_computed():
    df = pd.DataFrame({"config": ["a", "a", "b", "b", "c"],
                       "duration_ms": [9.0, 11.0, 19.0, 21.0, 5.0]})
    nf = config_floor(df)
    cv_a = np.std([9, 11], ddof=1) / 10
    cv_b = np.std([19, 21], ddof=1) / 20
    assert nf.median_cv == pytest.approx(np.median([cv_a, cv_b]))
    ape = np.array([1 / 9, 1 / 11, 1 / 19, 1 / 21])
    assert nf.oracle_mape_sample == pytest.approx(100 * ape.mean())
    assert nf.oracle_mape == pytest.approx(100 * ape.mean() * np.sqrt(2))
    assert nf.n_groups == 2 and nf.n_rows == 4  # the single 'c' is ignored
    assert np.isnan(nf.median_cv_drift_removed)


def test_noise_floor_picks_the_kind():
    assert noise_floor(_replicates(n_cfg=200)).kind == "replicate runs"
    df = pd.DataFrame({"config": ["a", "a", "b"], "duration_ms": [1.0, 1.1, 2.0]})
    assert noise_floor(df).kind == "configuration repeats"
    none = noise_floor(pd.DataFrame({"config": ["a", "b"], "duration_ms": [1.0, 2.0]}))
    assert none.kind == "none" and np.isnan(none.floor)
    assert noise_floor(pd.DataFrame({"duration_ms": [1.0]})).kind == "none"
    d = none.to_dict()
    assert d["oracle_mape"] is None  # JSON-safe


def test_input_errors_name_the_problem():
    with pytest.raises(InputError, match="missing column"):
        config_floor(pd.DataFrame({"x": [1.0]}))
    with pytest.raises(InputError, match="duration_ms must be finite and > 0; 1 bad rows"):
        config_floor(pd.DataFrame({"config": ["a", "a"], "duration_ms": [1.0, -1.0]}))
    one = _replicates(n_cfg=20, runs=1)
    with pytest.raises(InputError, match="two or more replicate runs"):
        replicate_floor(one)
    with pytest.raises(InputError, match="window"):
        replicate_floor(_replicates(n_cfg=20), window=1)
    dup = _replicates(n_cfg=20)
    dup.loc[1, "config"] = dup.loc[0, "config"]
    with pytest.raises(InputError, match="repeats within a run"):
        replicate_floor(dup)
    with pytest.raises(InputError, match="DataFrame"):
        noise_floor([1, 2])


def test_splitwise_floor_is_per_configuration(fetch_or_skip):
    fetch_or_skip("splitwise/perf_model")
    from perfmodel.data.datasets import splitwise_steps

    sw = splitwise_steps()
    g = sw[(sw.model == "llama2-70b") & (sw.hardware == "a100-80gb") & (sw.tp == 4)]
    nf = noise_floor(g)
    assert nf.kind == "configuration repeats" and nf.replicates == 5
    # docs/model.md, Fit scales: replicate floors of 0.7-3.0% median CV; here well inside that
    assert 0.001 < nf.median_cv < 0.03 and 0.5 < nf.oracle_mape < 5


@pytest.mark.parametrize("n", [2, 3])
def test_median_oracle_factor_is_sqrt2_for_two_and_three(n):
    # n = 2, 3: the mean in-sample deviation from the lower median is range / n, and
    # E range = 2/sqrt(pi) (n=2), 3/sqrt(pi) (n=3) for N(0,1): c_n = sqrt(2) exactly
    assert median_oracle_factor(n) == pytest.approx(np.sqrt(2), rel=0.01)


def test_median_floor_is_robust_to_a_heavy_tailed_replicate():
    rng = np.random.default_rng(5)
    d = _replicates(n_cfg=600, seed=5)
    hit = rng.random(len(d)) < 0.05
    d.loc[hit, "duration_ms"] *= 20.0  # 5% of steps stalled 20x
    nf = replicate_floor(d)
    clean = replicate_floor(_replicates(n_cfg=600, seed=5))
    assert nf.oracle_mape > 5 * clean.oracle_mape  # the mean oracle explodes
    # the median oracle gains about the stalls' own error (each ~0.95 of its time, on ~5% of
    # the rows, times c_3): bounded, and far below the mean oracle
    assert nf.oracle_median < clean.oracle_median + 100 * 0.06 * 0.95 * np.sqrt(2)
    assert nf.oracle_mape > 3 * nf.oracle_median


def test_group_floors_is_noise_floor_of_each_group():
    a = pd.DataFrame({"config": ["a", "a", "b", "b"], "duration_ms": [9.0, 11.0, 19.0, 21.0]})
    b = pd.DataFrame({"config": ["c", "c", "c"], "duration_ms": [4.0, 5.0, 6.0]})
    df = pd.concat([a.assign(hw="x", tp=1), b.assign(hw="y", tp=2)], ignore_index=True)
    got = group_floors(df, ["hw", "tp"])
    assert list(got.index) == [("x", 1), ("y", 2)]
    assert got[("x", 1)].floor == pytest.approx(noise_floor(a).floor)
    assert got[("y", 2)].floor == pytest.approx(noise_floor(b).floor)
    # one group column: plain keys; the pooled floor is not the median of the group floors
    one = group_floors(df, "hw")
    assert list(one.index) == ["x", "y"]
    assert noise_floor(df).floor != pytest.approx(one.map(lambda nf: nf.floor).median())
    with pytest.raises(InputError, match="missing group column"):
        group_floors(df, ["gpu"])
    with pytest.raises(InputError, match="by must be"):
        group_floors(df, 3)
    with pytest.raises(InputError, match="DataFrame"):
        group_floors([1], "hw")
