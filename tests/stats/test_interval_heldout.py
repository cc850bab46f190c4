"""Held-out coverage of the conformal interval on one trace (``perfmodel.stats.interval_heldout``).

Known truth: a trace simulated from ``seed_id``, fitted with ``seed_id``, with multiplicative (log-normal) noise of known sd; the
model is right, so an interval that holds on held-out steps covers about its
level, and the tally must agree with :func:`interval_check` on the same steps.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfmodel.core.synthetic import simulate_trace
from perfmodel.errors import InputError
from perfmodel.stats.interval_coverage import interval_check
from perfmodel.stats.interval_heldout import (
    check_levels,
    held_out_coverage,
    held_out_intervals,
)
from perfmodel.stats.intervals import Interval


@pytest.fixture(scope="module")
def trace():
    # without step numbers: a designed trace, grouped folds (1164 groups).  With them the
    # 25-step time blocks chain identical schedules into 17 groups, each held-out fold an
    # extrapolation, and the interval covers 0.93 at 0.9: wider, as a leak-free fold must be
    t = simulate_trace("seed_id", n=1200, noise="multiplicative", sigma=0.05, seed=4)
    return t.drop(columns=["step", "timestamp"])


@pytest.fixture(scope="module")
def steps(trace):
    return held_out_intervals(trace, levels=(0.8, 0.9), model="seed_id", n_starts=1,
                              model_band=True)


def test_every_step_is_held_out_once_by_a_fold_that_never_trained_on_it(trace, steps):
    assert sorted(steps["row"]) == list(range(len(trace)))
    assert steps.attrs["scheme"] in ("grouped", "blocked") and steps.attrs["k"] == 5
    assert steps.attrs["model"] == "seed_id"
    assert np.allclose(steps["y"], trace["duration_ms"].to_numpy(float)[steps["row"]])
    for lv in (0.8, 0.9):
        assert np.all(steps[f"conformal_lo_{lv}"] <= steps["mu"])
        assert np.all(steps["mu"] <= steps[f"conformal_hi_{lv}"])


def test_a_correct_model_is_covered_near_the_level(steps):
    tab = held_out_coverage(steps).set_index(["level", "regime"])
    # 1200 steps: the s.e. of a calibrated interval's coverage is about 0.009 at 0.9 and
    # 0.012 at 0.8 (measured: 0.904 and 0.809)
    assert abs(tab.loc[(0.9, "all"), "coverage"] - 0.9) < 0.025
    assert abs(tab.loc[(0.8, "all"), "coverage"] - 0.8) < 0.03
    # and about as wide as the true interval: 2 z sigma of the log-normal noise
    assert tab.loc[(0.9, "all"), "width"] == pytest.approx(2 * 1.645 * 0.05, rel=0.15)
    assert steps.attrs["scheme"] == "grouped"
    assert tab.loc[(0.9, "all"), "n"] == 1200
    assert set(tab.index.get_level_values("regime")) >= {"all", "short", "medium", "long"}


def test_the_tally_is_interval_check_on_the_same_steps(steps):
    tab = held_out_coverage(steps, levels=[0.9])
    reg = np.array([f"{a}|{b}" for a, b in zip(steps["phase"], steps["length"])], dtype=object)
    frame = pd.DataFrame({"duration_ms": steps["y"], "config": steps["cluster"]})
    want = interval_check(frame, steps["mu"].to_numpy(float),
                          Interval(0.9, "conformal", steps["conformal_lo_0.9"].to_numpy(float),
                                   steps["conformal_hi_0.9"].to_numpy(float), "", {}, None, reg))
    assert tab["regime"].tolist() == want["regime"].tolist()
    assert np.allclose(tab["coverage"], want["coverage"])
    assert np.allclose(tab["design_effect"], want["design_effect"])


def test_the_model_band_is_tallied_when_asked(steps):
    tab = held_out_coverage(steps, levels=[0.8], method="model")
    y = steps["y"].to_numpy(float)
    inside = (y >= steps["model_lo_0.8"]) & (y <= steps["model_hi_0.8"])
    assert tab.set_index("regime").loc["all", "coverage"] == pytest.approx(inside.mean())
    # and it is not the conformal interval's tally
    conf = held_out_coverage(steps, levels=[0.8]).set_index("regime")["width"]
    assert not np.allclose(tab.set_index("regime")["width"], conf)


@pytest.mark.parametrize("call, match", [
    (lambda t: held_out_intervals(t.drop(columns="duration_ms")), "duration_ms"),
    (lambda t: held_out_intervals(t, levels=[0.905]), "not calibrated"),
    (lambda t: held_out_intervals(t, levels=[1.5]), "level"),
    (lambda t: held_out_intervals(t, levels=[0.9, 0.9]), "repeat"),
    (lambda t: held_out_intervals(t, levels=[]), "at least one"),
    (lambda t: held_out_intervals(t, scheme="random"), "scheme"),
    (lambda t: held_out_intervals(t, k=1), "k"),
    (lambda t: held_out_intervals(t, n_starts=0), "n_starts"),
    (lambda t: held_out_coverage(t), "held_out_intervals"),
    (lambda t: held_out_intervals(t, model_band=1), "model_band"),
])
def test_bad_input_is_refused(trace, call, match):
    with pytest.raises(InputError, match=match):
        call(trace)


def test_a_level_without_bounds_or_a_band_not_made_is_refused(steps):
    with pytest.raises(InputError, match="0.95"):
        held_out_coverage(steps, levels=[0.95])
    no_band = steps[[c for c in steps.columns if not c.startswith("model_")]]
    no_band.attrs = dict(steps.attrs)
    with pytest.raises(InputError, match="model interval"):
        held_out_coverage(no_band, method="model")


def test_check_levels_takes_one_number_or_several_and_returns_the_stored_levels():
    assert check_levels(0.9) == [0.9]
    assert check_levels([0.8, 0.95]) == [0.8, 0.95]
    assert check_levels(np.float64(0.9)) == [0.9]
    assert check_levels([0.9000000001]) == [0.9]


@pytest.mark.parametrize("levels, match", [
    (None, "number"), ("0.9", "number"), ([0.9, 0.9000000001], "repeat"), ([True], "level"),
    (np.float32(0.9), "not calibrated"),  # 0.899999976: not a stored level, said clearly
])
def test_check_levels_refuses(levels, match):
    with pytest.raises(InputError, match=match):
        check_levels(levels)


def test_forward_folds_show_a_drift_that_the_exchangeable_folds_average_away(trace):
    # known truth: the engine slows by 20 % over the run (log drift linear in time).  Folds
    # that mix the run's times calibrate on the drift as noise and cover about the level;
    # forward windows (train on earlier steps, cover later ones) are slower than everything the
    # interval was calibrated on, and are under-covered
    drifted = trace.assign(duration_ms=trace["duration_ms"]
                           * np.exp(np.log(1.2) * np.arange(len(trace)) / len(trace)))
    fwd = held_out_intervals(drifted, levels=[0.9], model="seed_id", scheme="expanding",
                             n_starts=1)
    mixed = held_out_intervals(drifted, levels=[0.9], model="seed_id", n_starts=1)
    assert fwd.attrs["scheme"] == "expanding" and len(fwd) < len(drifted)
    assert fwd["row"].min() >= len(drifted) // 6  # the first window only trains
    # n_train is the size of each fold's training side, as the fold engine made it; forward, no
    # more than the steps before the window (those sharing a group with it are dropped)
    from perfmodel.stats.folds import DEFAULT_BLOCK
    from perfmodel.stats.intervals import resolved_folds

    for frame, scheme, steps in ((drifted, "expanding", fwd), (drifted, "auto", mixed)):
        _, _, splits = resolved_folds(frame.reset_index(drop=True), scheme, k=5, seed=0,
                                      time_ordered=None, block=DEFAULT_BLOCK)
        assert steps.groupby("fold")["n_train"].first().tolist() == [len(tr) for tr, _ in splits]
    assert np.all(fwd.groupby("fold")["n_train"].first() <= fwd.groupby("fold")["row"].min())
    cov_fwd = held_out_coverage(fwd).set_index("regime").loc["all", "coverage"]
    cov_mixed = held_out_coverage(mixed).set_index("regime").loc["all", "coverage"]
    assert cov_fwd < 0.8 < cov_mixed
    # without the drift the forward windows are covered near the level
    plain = held_out_intervals(trace, levels=[0.9], model="seed_id", scheme="expanding",
                               n_starts=1)
    assert abs(held_out_coverage(plain).set_index("regime").loc["all", "coverage"] - 0.9) < 0.04
