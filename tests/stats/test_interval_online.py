"""Online (adaptive conformal) prediction intervals (``perfmodel.stats.interval_online``).

Known truth: synthetic traces from ``seed_id`` with log-normal noise of known
sd, whose sd doubles half way through (a drift the stored calibration cannot
see); hand-computed order statistics; the stored selection table of the step size.
"""
from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfmodel.core.fit import fit_model
from perfmodel.core.synthetic import simulate_trace
from perfmodel.errors import InputError
from perfmodel.stats.interval_coverage import interval_check
from perfmodel.stats.interval_heldout import held_out_coverage, held_out_intervals
from perfmodel.stats.interval_online import (
    GAMMA,
    GAMMA_GRID,
    interval_score,
    online_bounds,
    online_held_out,
    online_interval,
)
from perfmodel.stats.intervals import calibrate_intervals, conformal_interval

ROOT = Path(__file__).resolve().parents[2]
SELECTION = ROOT / "paper" / "results" / "interval_coverage_time-online-gamma.csv"


def _drifting(n_half=1200):
    """A trace whose log-noise sd is 0.03 for the first half and 0.06 after (time order =
    row order: no step column)."""
    a = simulate_trace("seed_id", n=n_half, noise="multiplicative", sigma=0.03, seed=1)
    b = simulate_trace("seed_id", n=n_half, noise="multiplicative", sigma=0.06, seed=2)
    return (a.drop(columns=["step", "timestamp"]).reset_index(drop=True),
            b.drop(columns=["step", "timestamp"]).reset_index(drop=True))


def _fitted(first, relative="log"):
    fit = fit_model(first, "seed_id", n_starts=1, relative=relative)
    fit.interval_calibration = calibrate_intervals(fit, first, n_starts=1)
    return fit


@pytest.fixture(scope="module")
def drift():
    first, second = _drifting()
    return _fitted(first), first, second


def _one_cell(n):
    return np.array(["mixed"] * n, dtype=object), np.array(["short"] * n, dtype=object)


def test_gamma_zero_bounds_are_the_conformal_ranks_of_the_earlier_scores_by_hand():
    rng = np.random.default_rng(0)
    s = rng.normal(size=120)
    phase, length = _one_cell(120)
    lo, hi, used = online_bounds(s, np.full(120, -9.0), np.full(120, 9.0), phase, length, 0.8,
                                 gamma=0.0, warmup=5)
    a = Fraction(1, 10)  # exact: the rank by hand without rounding
    need = max(5, math.ceil((1 - a) / a))  # 9: the nominal rank is finite from 9 scores
    assert np.all(hi[:need] == 9.0) and np.all(lo[:need] == -9.0)  # the starting interval
    for t in range(need, 120):
        h = np.sort(s[:t])
        r = min(math.ceil((t + 1) * (1 - a)), t)
        assert hi[t] == h[r - 1] and lo[t] == h[t - r]
    assert used == {side: {"start": need, "mixed|short": 120 - need}
                    for side in ("lower", "upper")}


def test_a_miss_widens_the_next_bound_and_hits_narrow_it():
    s = np.r_[np.linspace(-1, 1, 20), 5.0, 0.0]  # step 20 misses high
    phase, length = _one_cell(len(s))
    lo, hi, _ = online_bounds(s, np.full(22, -9.0), np.full(22, 9.0), phase, length, 0.8,
                              gamma=0.05, warmup=20)
    # by hand: a = 0.1; 20 hits inside the starting interval move the upper target
    # a_t = 0.1 + 20 * 0.05 * 0.1 = 0.2, so step 20 takes rank ceil(21 * 0.8) = 17 of 20
    # (gamma = 0 would take ceil(21 * 0.9) = 19); the miss moves it by 0.05 * (0.1 - 1) to
    # 0.155, so step 21 takes rank ceil(22 * 0.845) = 19 of 21
    assert hi[20] == np.sort(s[:20])[16]
    assert hi[21] == np.sort(s[:21])[18]
    # the lower side hit all 21 times: 0.2 at step 20 (rank 17 from the top: the 4th smallest),
    # then 0.205, rank ceil(22 * 0.795) = 18 from the top of 21: the 4th smallest again
    assert lo[20] == np.sort(s[:20])[3]
    assert lo[21] == np.sort(s[:21])[3]


def test_a_bound_moves_outwards_as_the_miss_rate_falls_across_pools():
    from perfmodel.stats.interval_online import _bound

    # the cell's 20 scores lie in 1.00..1.19; its phase pool adds 2000 small ones: below a
    # rate of 1/21 the cell cannot hold the rank, and the phase pool's rank (near 0.2) must not
    # pull the upper bound inside the cell's range (nor the lower bound, mirrored)
    cell = [1.0 + 0.01 * i for i in range(20)]
    phase = sorted(cell + [0.0001 * i for i in range(2000)])
    hist = {"mixed|short": cell, "mixed|*": phase, "*|*": phase}
    ready = ["mixed|short", "mixed|*", "*|*"]
    rates = np.linspace(0.2, -0.05, 126)
    upper = [_bound(hist, ready, r, lower=False)[0] for r in rates]
    assert np.all(np.diff(upper) >= 0) and upper[-1] == max(phase)
    assert _bound(hist, ready, 0.047, lower=False)[0] >= max(cell)
    mirrored = {k: sorted(-v for v in h) for k, h in hist.items()}
    lower = [_bound(mirrored, ready, r, lower=True)[0] for r in rates]
    assert np.allclose(lower, -np.asarray(upper))


def test_after_a_stretch_of_misses_the_bounds_narrow_again_within_a_few_hits():
    rng = np.random.default_rng(1)
    s = np.r_[rng.normal(size=30), np.linspace(5, 9, 40), np.zeros(30)]
    phase, length = _one_cell(len(s))
    _, hi, _ = online_bounds(s, np.full(100, -20.0), np.full(100, 20.0), phase, length, 0.8,
                             gamma=0.05, warmup=20)
    seen_max = np.maximum.accumulate(s)
    # during the rising stretch every step misses and the bound is the largest score seen
    assert np.all(s[31:70] > hi[31:70]) and np.all(hi[40:70] == seen_max[39:69])
    # a_t kept at -gamma = -0.05: each hit lifts it by 0.05 * 0.1, so the bound leaves the
    # maximum within 20 hits (an unbounded a_t would have fallen to 0.1 - 40 * 0.045 = -1.7:
    # 340 hits)
    assert np.any(hi[70:90] < seen_max[69:89])


def test_no_look_ahead_later_times_do_not_move_earlier_intervals(drift):
    fit, _, second = drift
    base = online_interval(fit, second, 0.9)
    changed = second.copy()
    changed.loc[600:, "duration_ms"] *= 3.0
    moved = online_interval(fit, changed, 0.9)
    assert np.array_equal(base.lower[:601], moved.lower[:601])
    assert np.array_equal(base.upper[:601], moved.upper[:601])
    assert not np.array_equal(base.upper[601:], moved.upper[601:])  # later ones learn


def test_online_interval_follows_a_drift_the_stored_calibration_misses(drift):
    fit, _, second = drift
    mu = fit.predict(second)
    for lv in (0.8, 0.9):
        stored = interval_check(second, mu, conformal_interval(fit, second, lv))
        online = interval_check(second, mu, online_interval(fit, second, lv))
        got = {r: online.set_index("regime").loc[r, "coverage"] for r in ("all",)}
        # noise sd doubled: the first half's interval covers about P(|z| < z_lv / 2)
        assert stored.set_index("regime").loc["all", "coverage"] < lv - 0.10
        assert abs(got["all"] - lv) <= 0.03


def test_online_interval_on_the_steps_it_was_calibrated_on_stays_near_the_level(drift):
    fit, first, _ = drift
    iv = online_interval(fit, first, 0.9)
    y = first["duration_ms"].to_numpy(float)
    cov = np.mean((y >= iv.lower) & (y <= iv.upper))
    assert abs(cov - 0.9) <= 0.03 and iv.method == "online"
    assert set(iv.regime) <= {f"{p}|{q}" for p in ("decode-only", "mixed", "prefill-heavy")
                              for q in ("short", "medium", "long")}


def test_the_interval_of_a_prefix_is_the_prefix_of_the_interval(drift):
    fit, _, second = drift
    full = online_interval(fit, second, 0.9)
    for k in (150, 700):
        part = online_interval(fit, second.iloc[:k], 0.9)
        assert np.array_equal(part.lower, full.lower[:k])
        assert np.array_equal(part.upper, full.upper[:k])


def test_shuffled_rows_with_step_numbers_give_each_step_the_same_interval(drift):
    fit, _, second = drift
    timed = second.assign(step=np.arange(len(second)))
    base = online_interval(fit, timed, 0.9)
    perm = np.random.default_rng(5).permutation(len(timed))
    shuffled = online_interval(fit, timed.iloc[perm].reset_index(drop=True), 0.9)
    assert np.allclose(shuffled.lower, base.lower[perm], rtol=1e-12)
    assert np.allclose(shuffled.upper, base.upper[perm], rtol=1e-12)


@pytest.mark.parametrize("relative", ["weight", "absolute"])
def test_the_other_fit_scales_follow_the_drift_too(relative):
    first, second = _drifting()
    fit = _fitted(first, relative)
    mu = fit.predict(second)
    for lv in (0.8, 0.9):
        stored = interval_check(second, mu, conformal_interval(fit, second, lv))
        online = interval_check(second, mu, online_interval(fit, second, lv))
        assert stored.set_index("regime").loc["all", "coverage"] < lv - 0.10
        assert abs(online.set_index("regime").loc["all", "coverage"] - lv) <= 0.03


def test_unmeasured_steps_get_an_interval_and_teach_nothing(drift):
    fit, _, second = drift
    gap = second.copy()
    gap.loc[100:199, "duration_ms"] = np.nan
    iv = online_interval(fit, gap, 0.9)
    assert np.all(np.isfinite(iv.lower)) and np.all(np.isfinite(iv.upper))
    # the steps after the gap are covered as if the unmeasured steps were not there
    ref = online_interval(fit, pd.concat([second.iloc[:100], second.iloc[200:]],
                                         ignore_index=True), 0.9)
    assert np.allclose(iv.upper[200:], ref.upper[100:], rtol=1e-12)
    assert np.allclose(iv.lower[200:], ref.lower[100:], rtol=1e-12)


def test_held_out_online_uses_each_fold_from_its_own_interval_and_time_order():
    t = simulate_trace("seed_id", n=600, noise="multiplicative", sigma=0.05, seed=3)
    steps = held_out_intervals(t, levels=(0.9,), model="seed_id", scheme="expanding", k=3,
                               n_starts=1)
    assert steps.attrs["scale"] == "log"
    assert np.array_equal(np.sort(steps["time"]), np.sort(steps["row"]))  # step == row order
    on = online_held_out(steps)
    tab = held_out_coverage(on, method="online").set_index("regime")
    # 450 steps of a correct model, in small pools: the s.e. of a calibrated share is 0.014
    assert abs(tab.loc["all", "coverage"] - 0.9) <= 0.03
    # the first steps of each fold keep that fold's conformal interval (the warm-up)
    for _, part in on.groupby("fold"):
        first = part.sort_values("time").iloc[0]
        assert first["online_hi_0.9"] == pytest.approx(first["conformal_hi_0.9"], rel=1e-12)


def test_interval_score_by_hand():
    got = interval_score([1.0, 0.0, 5.0], [0.5, 0.5, 0.5], [2.0, 2.0, 2.0], 0.8)
    assert got.tolist() == pytest.approx([1.5, 1.5 + 10 * 0.5, 1.5 + 10 * 3.0])
    assert np.isinf(interval_score([1.0], [0.5], [np.inf], 0.9)).all()  # an open end
    with pytest.raises(InputError, match="not NaN"):
        interval_score([1.0], [np.nan], [2.0], 0.9)


def test_gamma_is_the_grid_minimum_of_the_stored_selection():
    if not SELECTION.exists():
        pytest.skip(f"{SELECTION.name} not generated (scripts/interval_study.py --forward)")
    sel = pd.read_csv(SELECTION)
    sel = sel[sel["method"] == "online"]
    assert sorted(sel["gamma"].unique().tolist()) == sorted(GAMMA_GRID)
    dev = sel[sel["runs"] == "development"].groupby("gamma")["interval_score"].mean()
    assert dev.idxmin() == GAMMA


@pytest.mark.parametrize("kwargs, needle", [
    ({"gamma": -0.1}, "gamma"), ({"gamma": float("nan")}, "gamma"), ({"gamma": True}, "gamma"),
    ({"warmup": 0}, "warmup"), ({"warmup": 2.5}, "warmup"),
])
def test_bad_settings_are_refused(drift, kwargs, needle):
    fit, _, second = drift
    with pytest.raises(InputError, match=needle):
        online_interval(fit, second, 0.9, **kwargs)


def test_a_trace_without_measured_times_or_a_fit_without_calibration_is_refused(drift):
    fit, first, second = drift
    bare = fit_model(first, "seed_id", n_starts=1)
    with pytest.raises(InputError, match="stored interval_calibration"):
        online_interval(bare, second, 0.9)
    with pytest.raises(InputError, match="measured"):
        online_interval(fit, second.drop(columns="duration_ms"), 0.9)
    with pytest.raises(InputError, match="not calibrated"):
        online_interval(fit, second, 0.905)
    # two runs in one trace: their step counters would interleave in time order
    two = pd.concat([second, second], ignore_index=True)
    two["step"] = np.r_[np.arange(len(second)), np.arange(len(second))]
    with pytest.raises(InputError, match="'step' repeats .*several runs"):
        online_interval(fit, two, 0.9)
    with pytest.raises(InputError, match="missing: fold, length, mu, phase, time"):
        online_held_out(pd.DataFrame({"y": [1.0]}))
    with pytest.raises(InputError, match="one value per step"):
        online_bounds([0.1, 0.2], [0.0], [1.0, 1.0], ["mixed"] * 2, ["short"] * 2, 0.9)
