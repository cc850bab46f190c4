"""Tests of perfmodel.stats.run_term: the run-level term of the step prediction intervals."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

from perfmodel.core.fit import fit_model
from perfmodel.core.results import FitResult
from perfmodel.core.synthetic import simulate_trace
from perfmodel.errors import InputError
from perfmodel.stats.intervals import LEVELS, calibrate_intervals, conformal_interval
from perfmodel.stats.run_level import run_level_spread
from perfmodel.stats.run_term import (
    convolved_bounds,
    run_term_record,
    run_term_text,
    score_distribution,
    with_run_term,
)

#: log-scale sd of the run-level shift and of the step noise of :func:`_runs`
RUN_SD, STEP_SD = 0.05, 0.03


def _normal_pool(s):
    lv = np.asarray(LEVELS)
    return {"n": 1000, "lower": list(s * norm.ppf((1 - lv) / 2)),
            "upper": list(s * norm.ppf((1 + lv) / 2))}


def _runs(n_runs, n, seed, shift=True):
    """``n_runs`` runs of ``n`` steps: one log-scale shift per run (sd RUN_SD; none without
    ``shift``: the reference run) plus step noise (sd STEP_SD)."""
    rng = np.random.default_rng(seed)
    parts = []
    for r in range(n_runs):
        d = simulate_trace("seed_id", n=n, noise="none", seed=seed * 100 + r)
        e = RUN_SD * rng.standard_normal() * shift + STEP_SD * rng.standard_normal(n)
        d["duration_ms"] = d["duration_ms"] * np.exp(e)
        d["run"] = f"run{r}"
        parts.append(d)
    return pd.concat(parts, ignore_index=True)


@pytest.fixture(scope="module")
def one_run():
    """Fits of one reference run (no shift) calibrated within it (4 draws), and 40 new runs
    (shifted by N(0, RUN_SD^2) from it) of each draw."""
    draws = []
    for seed in (3, 4, 5, 6):
        one = _runs(1, 600, seed, shift=False)
        fit = fit_model(one, "seed_id", n_starts=1)
        fit.interval_calibration = calibrate_intervals(fit, one, n_starts=1)
        draws.append((fit, _runs(40, 50, seed + 50)))
    return draws


@pytest.mark.parametrize("s, sd", [(0.05, 0.01), (0.05, 0.05), (0.02, 0.1), (0.1, 0.03)])
def test_normal_scores_give_the_closed_form_sqrt_s2_plus_sd2(s, sd):
    scores = score_distribution(_normal_pool(s), LEVELS)
    for level in (0.5, 0.8, 0.9, 0.95, 0.99):
        lo, hi = convolved_bounds(scores, sd, level)
        exact = np.hypot(s, sd) * norm.ppf((1 + level) / 2)
        assert hi == pytest.approx(exact, rel=2e-3) and lo == pytest.approx(-exact, rel=2e-3)
    # a mis-stated convolution (the sds added, not their squares) is far from it
    assert hi < 0.95 * (s + sd) * norm.ppf(0.995)


def test_a_grid_of_uniform_scores_convolves_as_the_mixture():
    # not normal: scores uniform on [-1, 1], sd 0.5; the bounds solve the mixture cdf exactly
    s = np.linspace(-1, 1, 401)
    lo, hi = convolved_bounds(s, 0.5, 0.9)
    assert norm.cdf((hi - s) / 0.5).mean() == pytest.approx(0.95, abs=1e-9)
    assert norm.cdf((lo - s) / 0.5).mean() == pytest.approx(0.05, abs=1e-9)


def test_sd_zero_gives_the_stored_interval_bit_for_bit(one_run):
    fit, test = one_run[0]
    cal = fit.interval_calibration
    for level in (0.8, 0.9, 0.95):
        a = conformal_interval(fit, test, level)
        b = conformal_interval(fit, test, level,
                               calibration=with_run_term(cal, run_term_record(0.0)))
        assert np.array_equal(a.lower, b.lower) and np.array_equal(a.upper, b.upper)
    assert "no run-level term" in a.description


def test_the_interval_widens_monotonically_with_sd_on_a_skewed_pool():
    lv = np.asarray(LEVELS)
    skew = {"lower": list(-0.02 * norm.ppf((1 + lv) / 2)),  # short left tail, long right tail
            "upper": list(np.expm1(0.3 * norm.ppf((1 + lv) / 2)))}
    scores = score_distribution(skew, LEVELS)
    for level in (0.8, 0.9, 0.95):
        b = np.array([convolved_bounds(scores, sd, level) for sd in (1e-4, 0.01, 0.03, 0.1, 0.3)])
        assert np.all(np.diff(b[:, 1] - b[:, 0]) > 0), b
        assert np.all(np.diff(b[:, 0]) < 0), b  # the lower bound falls as sd grows
        # a tiny sd leaves the stored bounds (to the grid's resolution)
        i = LEVELS.index(level)
        assert b[0] == pytest.approx([skew["lower"][i], skew["upper"][i]], abs=2e-3)


def test_the_run_term_restores_coverage_of_new_runs(one_run):
    """One run's scores hold its step noise only (sd 0.03); new runs add a shift of sd 0.05."""
    for level in (0.8, 0.9):
        cov = {"none": [], "term": []}
        for fit, test in one_run:
            y = test["duration_ms"].to_numpy()
            term = with_run_term(fit.interval_calibration, run_term_record(RUN_SD))
            for name, cal in (("none", None), ("term", term)):
                iv = conformal_interval(fit, test, level, calibration=cal)
                cov[name].append(float(((y >= iv.lower) & (y <= iv.upper)).mean()))
        mean = {k: float(np.mean(v)) for k, v in cov.items()}
        assert mean["none"] < level - 0.2, (level, cov)
        assert abs(mean["term"] - level) <= 0.05, (level, cov)


def test_an_estimated_term_round_trips_through_fit_json(one_run, tmp_path):
    fit, test = one_run[0]
    runs = _runs(3, 200, 77)
    est = run_level_spread(fit, {r: g for r, g in runs.groupby("run")})
    rec = run_term_record(est["sd"], estimate=est)
    assert rec["source"] == "run-traces" and rec["n_runs"] == 3 and set(rec["ratios"]) == {
        "run0", "run1", "run2"}
    fit2 = FitResult.from_json(fit.to_json())
    fit2.interval_calibration = with_run_term(fit.interval_calibration, rec)
    p = tmp_path / "fit.json"
    fit2.to_json(p)
    back = FitResult.from_json(p)
    assert back.interval_calibration == json.loads(json.dumps(fit2.interval_calibration))
    a, b = conformal_interval(fit2, test, 0.9), conformal_interval(back, test, 0.9)
    assert np.array_equal(a.lower, b.lower) and np.array_equal(a.upper, b.upper)
    base = conformal_interval(fit, test, 0.9)
    assert np.all(b.upper - b.lower > base.upper - base.lower)
    assert "estimated from 3 runs" in b.description
    assert f"{est['sd']:.3g}" in run_term_text(back.interval_calibration)


def test_a_calibration_without_the_key_still_loads_and_has_no_term(one_run):
    fit, _ = one_run[0]
    d = json.loads(fit.to_json())
    assert "run_term" not in d["interval_calibration"]
    back = FitResult.from_json(json.dumps(d))
    assert run_term_text(back.interval_calibration).startswith("no run-level term")


def test_bad_run_terms_are_refused(one_run):
    fit, _ = one_run[0]
    cal = fit.interval_calibration
    with pytest.raises(InputError, match="run_sd"):
        run_term_record(-0.1)
    with pytest.raises(InputError, match="run_sd"):
        run_term_record(float("nan"))
    across = {**cal, "runs": {"calibration": "across-runs", "column": "run", "n_runs": 3}}
    with pytest.raises(InputError, match="within-run"):
        with_run_term(across, run_term_record(0.05))
    with pytest.raises(InputError, match="log-scale"):
        with_run_term({**cal, "scale": "absolute"}, run_term_record(0.05))
    for bad in ({"sd": -1, "source": "run-sd"}, {"sd": 0.1, "source": "guess"},
                {"sd": 0.1, "source": "run-traces", "n_runs": 1}):
        with pytest.raises(InputError, match="run_term"):
            conformal_interval(fit, _runs(1, 50, 9), 0.9, calibration={**cal, "run_term": bad})
    with pytest.raises(InputError, match="scores"):
        convolved_bounds([np.nan], 0.1, 0.9)


def test_a_jump_in_the_tail_never_makes_the_interval_narrower():
    """Upper bounds of 0.1 up to level 0.90 and 3.0 from 0.91 (a few very slow steps): the
    convolution with sd 0.8 smooths the jump below 3.0; the interval used keeps the stored one."""
    from perfmodel.stats.run_term import pool_bounds

    lv = np.asarray(LEVELS)
    pool = {"n": 500, "lower": list(-0.1 * np.ones(len(lv))),
            "upper": list(np.where(lv <= 0.90, 0.1, 3.0))}
    cal = {"levels": list(LEVELS), "scale": "log", "runs": {"calibration": "within-run"},
           "run_term": {"sd": 0.8, "source": "run-sd", "n_runs": None}}
    i = LEVELS.index(0.95)
    lo, hi = convolved_bounds(score_distribution(pool, LEVELS), 0.8, 0.95)
    assert hi < 3.0 and lo < -0.1  # the convolution alone moves the upper bound inward
    assert pool_bounds(cal)(pool, i) == (lo, 3.0)
    assert pool_bounds({**cal, "run_term": None})(pool, i) == (-0.1, 3.0)
