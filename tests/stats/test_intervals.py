"""Tests of perfmodel.stats.intervals: conformal bounds, calibration, coverage."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from perfmodel.core.fit import fit_model
from perfmodel.core.results import FitResult
from perfmodel.core.synthetic import simulate_trace
from perfmodel.errors import InputError
from perfmodel.stats.intervals import (
    calibrate_intervals,
    cluster_conformal_bounds,
    conformal_bounds,
    conformal_interval,
    normal_tail_bounds,
    prediction_interval,
)
from perfmodel.stats.validation import regime

#: log-scale noise sd per phase: the Mondrian cells must tell them apart
SD = {"decode-only": 0.02, "mixed": 0.06, "prefill-heavy": 0.15}


def _trace(n, seed):
    d = simulate_trace("seed_id", n=n, noise="none", seed=seed)
    sd = regime(d).astype(str).map(SD).to_numpy(float)
    z = np.random.default_rng(seed + 100).standard_normal(n)
    d["duration_ms"] = d["duration_ms"] * np.exp(sd * z)
    return d


@pytest.fixture(scope="module")
def calibrated():
    train = _trace(1500, 1)
    fit = fit_model(train, "seed_id", n_starts=2)
    fit.interval_calibration = calibrate_intervals(fit, train, n_starts=2)
    return fit


def test_conformal_bounds_are_the_order_statistics_of_the_finite_sample_rank():
    s = np.arange(1.0, 20.0)  # n = 19
    lo, hi = conformal_bounds(s[::-1], 0.8)  # ranks floor(20*0.1) = 2, ceil(20*0.9) = 18
    assert (lo, hi) == (2.0, 18.0)
    lo, hi = conformal_bounds(s, 0.95)  # ceil(20*0.975) = 20 > 19: no finite bound
    assert lo == -math.inf and hi == math.inf


def test_conformal_bounds_with_fewer_effective_scores_are_wider():
    s = np.random.default_rng(0).standard_normal(400)
    lo1, hi1 = conformal_bounds(s, 0.9)
    lo2, hi2 = conformal_bounds(s, 0.9, n_eff=20)
    assert lo2 <= lo1 and hi2 >= hi1 and (lo2, hi2) != (lo1, hi1)
    with pytest.raises(InputError, match="n_eff"):
        conformal_bounds(s, 0.9, n_eff=401)


def test_conformal_bounds_cover_exchangeable_draws_at_their_level():
    # the split-conformal guarantee: P(new score inside) >= level, and < level + 2/(n+1)
    rng = np.random.default_rng(3)
    n, reps, level = 39, 4000, 0.9
    hits = 0
    for _ in range(reps):
        x = rng.standard_t(3, n + 1)
        lo, hi = conformal_bounds(x[:n], level)
        hits += lo <= x[n] <= hi
    cov, se = hits / reps, math.sqrt(level * (1 - level) / reps)
    assert level - 4 * se <= cov <= level + 2 / (n + 1) + 4 * se


def test_normal_tail_bounds_contain_the_extremes():
    s = np.array([-1.0, 0.0, 0.1, 0.2, 3.0])
    lo, hi = normal_tail_bounds(s, 0.99, n_eff=3)
    assert lo <= -1.0 and hi >= 3.0


@pytest.mark.parametrize("bad", [0, 1, 1.5, -0.1, "x", True])
def test_bad_levels_are_refused(bad):
    with pytest.raises(InputError, match="level"):
        conformal_bounds([1.0, 2.0], bad)


def test_calibrated_intervals_cover_fresh_steps_per_regime(calibrated):
    test = _trace(3000, 2)
    phase = regime(test).astype(str).to_numpy()
    y = test["duration_ms"].to_numpy()
    for level in (0.8, 0.9, 0.95):
        iv = conformal_interval(calibrated, test, level)
        inside = (y >= iv.lower) & (y <= iv.upper)
        for p in SD:
            m = phase == p
            se = math.sqrt(level * (1 - level) / m.sum())
            # 4 binomial s.e. of the test set plus the calibration's own sampling spread
            assert abs(inside[m].mean() - level) <= 4 * se + 0.02, (level, p, inside[m].mean())


def test_model_based_band_misses_where_noise_differs_by_regime(calibrated):
    # the check above could fail: one pooled residual variance does not cover decode and
    # prefill steps alike (decode over-covered, prefill under-covered)
    test = _trace(3000, 2)
    phase = regime(test).astype(str).to_numpy()
    y = test["duration_ms"].to_numpy()
    iv = prediction_interval(calibrated, test, 0.9, method="model")
    inside = (y >= iv.lower) & (y <= iv.upper)
    assert inside[phase == "decode-only"].mean() > 0.97
    assert inside[phase == "prefill-heavy"].mean() < 0.85


def test_prediction_interval_says_which_method_it_used(calibrated):
    test = _trace(200, 4)
    assert prediction_interval(calibrated, test, 0.9).method == "conformal"
    plain = FitResult.from_json(calibrated.to_json())
    plain.interval_calibration = None
    assert prediction_interval(plain, test, 0.9).method == "model"
    with pytest.raises(InputError, match="interval_calibration"):
        prediction_interval(plain, test, 0.9, method="conformal")
    with pytest.raises(InputError, match="not calibrated"):
        conformal_interval(calibrated, test, 0.905)


def test_calibration_round_trips_through_fit_json(calibrated, tmp_path):
    p = tmp_path / "fit.json"
    calibrated.to_json(p)
    back = FitResult.from_json(p)
    assert back.interval_calibration == json.loads(json.dumps(calibrated.interval_calibration))
    test = _trace(200, 5)
    a, b = conformal_interval(calibrated, test, 0.9), conformal_interval(back, test, 0.9)
    np.testing.assert_allclose(a.lower, b.lower, rtol=1e-12)
    np.testing.assert_allclose(a.upper, b.upper, rtol=1e-12)


def test_calibration_records_regime_rule_counts_and_folds(calibrated):
    cal = calibrated.interval_calibration
    assert cal["folds"]["scheme"] == "blocked" and cal["folds"]["k"] == 5  # time-ordered trace
    assert cal["pools"]["*|*"]["n"] == cal["folds"]["n_steps"] == 1500
    assert sum(p["n"] for k, p in cal["pools"].items() if k.endswith("|*") and k != "*|*") == 1500
    assert 0 < cal["regime_rule"]["length_thresholds_ms"][0] <= cal["regime_rule"]["length_thresholds_ms"][1]


def test_a_damaged_calibration_loads_but_is_refused_where_used(calibrated, tmp_path):
    d = json.loads(calibrated.to_json())
    d["interval_calibration"]["levels"] = [0.9, 0.8]
    back = FitResult.from_json(json.dumps(d))
    with pytest.raises(InputError, match="increasing"):
        prediction_interval(back, _trace(50, 6), 0.9)


def test_cluster_conformal_bounds_without_clusters_interpolate_the_conformal_rank():
    s = np.arange(1.0, 20.0)  # n = 19, upper position 20 * 0.9 = 18, lower 20 * 0.1 = 2
    lo, hi = cluster_conformal_bounds(s[::-1], np.arange(19), 0.8)
    assert lo == pytest.approx(2.0) and hi == pytest.approx(18.0)
    lo, hi = cluster_conformal_bounds(s, np.arange(19), 0.85)  # 20 * 0.925 = 18.5
    assert hi == pytest.approx(18.5) and lo == pytest.approx(1.5)
    assert cluster_conformal_bounds(s, np.arange(19), 0.95) == (-math.inf, math.inf)


def test_cluster_conformal_bounds_weigh_each_cluster_equally():
    # cluster a: one score 0; cluster b: 99 scores of 10. Each cluster weighs 1/2,
    # so the median-ish bounds sit between the clusters, not on cluster b's value
    s = np.r_[0.0, np.full(99, 10.0)]
    g = np.r_[["a"], ["b"] * 99]
    lo, hi = cluster_conformal_bounds(s, g, 0.5)  # m = 2: position 0.75 * 3/2 > 1
    assert (lo, hi) == (-math.inf, math.inf)
    s3 = np.r_[0.0, 5.0, np.full(98, 10.0)]
    g3 = np.r_[["a"], ["c"], ["b"] * 98]
    lo, hi = cluster_conformal_bounds(s3, g3, 0.5)  # m = 3: position 0.75 * 4/3 = 1
    assert hi == pytest.approx(10.0) and lo == pytest.approx(0.0)
    with pytest.raises(InputError, match="clusters"):
        cluster_conformal_bounds(s3, g3[:-1], 0.5)


def test_cluster_rank_covers_new_clusters_where_the_step_rank_falls_short():
    # 12 clusters of 5 replicates, intraclass correlation ~0.9: a step of a new
    # cluster is covered near the level by the cluster rank (measured 0.83: the
    # averaged subsamples are somewhat conservative), not by the step rank (0.77)
    rng = np.random.default_rng(7)
    m, r, level, reps = 12, 5, 0.8, 3000
    hit_c = hit_s = 0
    g = np.repeat(np.arange(m), r)
    for _ in range(reps):
        x = np.repeat(rng.standard_normal(m + 1) * 3.0, r) + rng.standard_normal((m + 1) * r)
        cal, new = x[: m * r], x[m * r]
        lo, hi = cluster_conformal_bounds(cal, g, level)
        hit_c += lo <= new <= hi
        lo, hi = conformal_bounds(cal, level)
        hit_s += lo <= new <= hi
    se = math.sqrt(level * (1 - level) / reps)
    assert level - 0.01 <= hit_c / reps <= level + 0.045, hit_c / reps
    assert hit_s / reps < level - 3 * se, hit_s / reps


def test_calibration_records_its_quantile_rule_and_cluster_counts(calibrated):
    from perfmodel.stats.intervals import QUANTILE_RULE

    cal = calibrated.interval_calibration
    assert cal["quantile_rule"] == QUANTILE_RULE and cal["clusters"] == "steps"
    for pool in cal["pools"].values():  # no config column: every step its own cluster
        if pool["n"] >= 2:
            assert pool["n_clusters"] == pool["n"]


def test_calibration_counts_configurations_when_the_trace_has_them():
    d = _trace(400, 5)
    d["config"] = [f"c{i // 4}" for i in range(len(d))]  # 100 configurations of 4 rows
    fit = fit_model(d, "seed_id", n_starts=1)
    cal = calibrate_intervals(fit, d, n_starts=1)
    assert cal["clusters"] == "config"
    assert cal["pools"]["*|*"]["n_clusters"] == 100 and cal["pools"]["*|*"]["n"] == 400


#: log-scale sd of the run-level shift and of the step noise of :func:`_runs`
RUN_SD, STEP_SD = 0.05, 0.03


def _runs(n_runs, n, seed):
    """``n_runs`` runs of ``n`` steps: one log-scale shift per run (sd RUN_SD) plus step noise."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    parts = []
    for r in range(n_runs):
        d = simulate_trace("seed_id", n=n, noise="none", seed=seed * 100 + r)
        e = RUN_SD * rng.standard_normal() + STEP_SD * rng.standard_normal(n)
        d["duration_ms"] = d["duration_ms"] * np.exp(e)
        d["run"] = f"run{r}"
        d["replicate"] = f"run{r}"  # time blocks stay inside a run
        parts.append(d)
    return pd.concat(parts, ignore_index=True)


@pytest.fixture(scope="module")
def run_shift():
    """Per training draw: a fit of one run calibrated within it, and a fit of 8 runs
    calibrated across them, with 40 new runs (new shifts) to cover."""
    draws = []
    for seed in (3, 4, 5, 6):
        train = _runs(8, 200, seed)
        one = train[train["run"] == "run0"].reset_index(drop=True)
        single = fit_model(one, "seed_id", n_starts=1)
        single.interval_calibration = calibrate_intervals(single, one, n_starts=1)
        across = fit_model(train, "seed_id", n_starts=1)
        across.interval_calibration = calibrate_intervals(across, train, n_starts=1,
                                                          run_column="run")
        draws.append((single, across, _runs(40, 50, seed + 50)))
    return draws


def test_across_run_calibration_covers_new_runs_where_one_run_under_covers(run_shift):
    for level in (0.8, 0.9):
        cov = {"single": [], "across": []}
        for single, across, test in run_shift:
            y = test["duration_ms"].to_numpy()
            for name, fit in (("single", single), ("across", across)):
                iv = conformal_interval(fit, test, level)
                cov[name].append(float(((y >= iv.lower) & (y <= iv.upper)).mean()))
        mean = {k: float(np.mean(v)) for k, v in cov.items()}
        # one run's scores hold its step noise only (sd 0.03), not the shift (sd 0.05)
        assert mean["single"] < level - 0.25, (level, cov)
        # 8 sampled shifts per draw set the quantile: the mean over 4 draws is near the level
        assert abs(mean["across"] - level) <= 0.05, (level, cov)


def test_across_run_calibration_is_recorded_and_said(run_shift):
    single, across, test = run_shift[0]
    assert single.interval_calibration["runs"] == {"calibration": "within-run", "n_runs": 1}
    r = across.interval_calibration["runs"]
    assert r["calibration"] == "across-runs" and r["n_runs"] == 8 and r["column"] == "run"
    assert across.interval_calibration["folds"]["out_of_run"] is True
    iv = conformal_interval(across, test, 0.9)
    assert iv.calibration["calibration"] == "across-runs" and "across runs (8 runs" in iv.description
    assert "within one run" in conformal_interval(single, test, 0.9).description


def test_within_run_calibration_is_unchanged_by_the_run_option(calibrated):
    train = _trace(1500, 1)
    cal = calibrate_intervals(calibrated, train, n_starts=2, run_column=None)
    assert cal["pools"] == calibrated.interval_calibration["pools"]


@pytest.mark.parametrize("column, needle", [("nope", "lacks"), ("one", ">= 2 runs")])
def test_across_run_calibration_refuses_a_missing_column_or_one_run(column, needle):
    d = _trace(200, 6)
    d["one"] = "r1"
    fit = fit_model(d, "seed_id", n_starts=1)
    with pytest.raises(InputError, match=needle):
        calibrate_intervals(fit, d, n_starts=1, run_column=column)


def test_a_damaged_runs_record_is_refused():
    from perfmodel.core.interval_calibration import check_interval_calibration

    d = _trace(300, 7)
    fit = fit_model(d, "seed_id", n_starts=1)
    cal = calibrate_intervals(fit, d, n_starts=1)
    for bad in ({"calibration": "sideways", "n_runs": 1},
                {"calibration": "across-runs", "n_runs": 1, "column": "run"},
                {"calibration": "within-run", "n_runs": 0}):
        with pytest.raises(InputError, match="runs"):
            check_interval_calibration({**cal, "runs": bad})


def test_cv_residuals_are_those_of_refits_on_row_copies_bit_for_bit():
    """Refits on row subsets of the features (no frame copies) give the frames' bits."""
    from perfmodel.core.scale import scale_of
    from perfmodel.stats.intervals import cv_residuals
    from perfmodel.stats.validation import make_folds

    d = simulate_trace(n=600, noise="multiplicative", seed=5)
    fit = fit_model(d, "seed_ctx_mono", n_starts=2)
    got, folds = cv_residuals(fit, d, scheme="grouped", k=3, n_starts=2)
    want = np.full(len(d), np.nan)
    y, scale = d["duration_ms"].to_numpy(float), scale_of(fit)
    for tr, te in make_folds(d, "grouped", k=3, seed=0):
        f = fit_model(d.iloc[tr], fit.model_name, n_starts=2, seed=0)
        want[te] = scale.residual(y[te], f.predict(d.iloc[te]))
    assert np.isfinite(got).sum() == folds["n_steps"] > 0
    np.testing.assert_array_equal(got, want)


def test_bounds_of_all_levels_at_once_are_those_of_one_level_at_a_time():
    """One factorisation and one set of draws for every level: each level's own bits."""
    from perfmodel.stats.intervals import LEVELS, _bounds_of_levels, _cluster_codes

    rng = np.random.default_rng(3)
    scores = rng.standard_normal(400)
    for clusters in (np.arange(400), rng.integers(0, 30, 400).astype(str), np.zeros(400)):
        s, codes, m = _cluster_codes(scores, clusters)
        assert m == len(set(clusters.tolist()))
        many = _bounds_of_levels(s, codes, m, LEVELS, 50, 7)
        one = [cluster_conformal_bounds(scores, clusters, lv, n_sub=50, seed=7) for lv in LEVELS]
        assert many == one
    assert math.isinf(many[-1][1])  # one cluster: no finite rank at any level
    with pytest.raises(InputError, match="one label per score"):
        _cluster_codes(scores, np.arange(3))


def test_interval_regimes_are_the_labels_of_each_step():
    """One object per label shared by the steps: the same labels as a string per step."""
    from perfmodel.stats.intervals import interval_regimes

    d = simulate_trace(n=300, noise="multiplicative", seed=6)
    mu = d["duration_ms"].to_numpy(float)
    t = np.quantile(mu, [1 / 3, 2 / 3])
    phase, length = interval_regimes(d, mu, t)
    assert phase.dtype == object and length.dtype == object
    assert phase.tolist() == regime(d).astype(str).tolist()
    want = np.where(mu < t[0], "short", np.where(mu >= t[1], "long", "medium"))
    assert length.tolist() == want.tolist()
    assert {"short", "medium", "long"} == set(length.tolist())


@pytest.mark.parametrize("extra", ["none", "config", "no_num_decode"])
def test_a_frame_cut_to_the_calibration_columns_gives_the_same_calibration(extra):
    """Given its fold groups and features, a frame without the per-request lists (and the
    other columns the calibration does not read) is calibrated bit for bit as the whole one."""
    from perfmodel.core.fit import trace_fit_data
    from perfmodel.data.trace import validate_trace
    from perfmodel.stats.intervals import calibration_columns
    from perfmodel.stats.validation import fold_groups

    d = validate_trace(simulate_trace(n=700, noise="multiplicative", seed=9))
    if extra == "config":
        d["config"] = [f"c{i // 5}" for i in range(len(d))]
    if extra == "no_num_decode":
        d = d.drop(columns=["num_decode"])
    d["unread"] = np.arange(len(d))  # a column nothing reads
    fit = fit_model(d, "seed_ctx_mono", n_starts=2)
    want = calibrate_intervals(fit, d, n_starts=2)
    cols = calibration_columns(d)
    assert "context_lens" not in cols and "unread" not in cols
    assert ("chunk_sizes" in cols) == (extra == "no_num_decode")  # the phase rule needs it then
    got = calibrate_intervals(fit, d[cols], n_starts=2, groups=fold_groups(d),
                              fit_data=trace_fit_data(d, fit.model_name))
    assert json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)


def test_calibration_inputs_that_do_not_fit_the_trace_are_refused():
    from perfmodel.core.fit import trace_fit_data
    from perfmodel.stats.validation import fold_groups

    d = simulate_trace(n=200, noise="multiplicative", seed=3)
    fit = fit_model(d, "seed_ctx_mono", n_starts=1)
    feats, y = trace_fit_data(d, fit.model_name)
    for bad in ((feats, y[:-1]), ({"B": feats["B"]}, y), feats):
        with pytest.raises(InputError, match="fit_data"):
            calibrate_intervals(fit, d, n_starts=1, fit_data=bad)
    with pytest.raises(InputError, match="groups"):
        calibrate_intervals(fit, d, n_starts=1, groups=fold_groups(d)[:-1])
    windowed = fit_model(d, "seed_ctx_mono", n_starts=1, outlier_window=(0.0, 1e9))
    with pytest.raises(InputError, match="outlier window"):
        calibrate_intervals(windowed, d, n_starts=1, groups=fold_groups(d))


def test_fit_data_with_an_outlier_window_keeps_the_rows_the_fit_kept():
    from perfmodel.core.fit import trace_fit_data

    d = simulate_trace(n=500, noise="multiplicative", seed=4)
    y = d["duration_ms"].to_numpy(float)
    win = (float(np.quantile(y, 0.05)), float(np.quantile(y, 0.95)))
    fit = fit_model(d, "seed_ctx_mono", n_starts=1, outlier_window=win)
    want = calibrate_intervals(fit, d, n_starts=1)
    got = calibrate_intervals(fit, d, n_starts=1, fit_data=trace_fit_data(d, fit.model_name))
    assert json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)
