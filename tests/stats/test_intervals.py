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
