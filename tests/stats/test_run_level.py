"""The run-level term (perfmodel.stats.run_level): ratios and spreads with known factors."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfmodel.errors import InputError
from perfmodel.stats.run_level import (
    EPISODE_WINDOW_S,
    run_level_spread,
    run_speed_ratio,
    window_speed,
)


class Linear:
    """A step model: 2 ms + 0.01 ms per token."""

    def predict(self, f):
        return 2.0 + 0.01 * np.asarray(f["S"], float)


def _run(factor, n=300, seed=0, spikes=0):
    rng = np.random.default_rng(seed)
    B = rng.integers(1, 16, n)
    S = B + rng.integers(0, 500, n)
    y = factor * (2.0 + 0.01 * S) * np.exp(rng.normal(0.0, 0.02, n))
    y[:spikes] *= 5.0                       # a few slow steps
    return pd.DataFrame({"batch_size": B, "total_tokens": S, "duration_ms": y})


def test_ratio_of_a_run_with_a_known_factor():
    assert run_speed_ratio(Linear(), _run(1.1)) == pytest.approx(1.1, rel=0.01)
    # time-weighted: 20 of 300 steps 5 times slower raise it by their share of the time
    spiky = _run(0.9, spikes=20)
    pred = 2.0 + 0.01 * spiky["total_tokens"]
    assert run_speed_ratio(Linear(), spiky) == pytest.approx(spiky["duration_ms"].sum() / pred.sum())
    assert run_speed_ratio(Linear(), spiky) > 1.1 * run_speed_ratio(Linear(), _run(0.9))
    # steps without a usable time are left out, not propagated
    df = _run(1.2)
    df.loc[:9, "duration_ms"] = [np.nan, 0.0, -1.0, *([np.inf] * 7)]
    assert run_speed_ratio(Linear(), df) == pytest.approx(1.2, rel=0.01)


def test_spread_is_the_root_mean_square_log_factor():
    factors = {"a": 1.05, "b": 0.95, "c": 1.10}
    sp = run_level_spread(Linear(), {k: _run(f, seed=i) for i, (k, f) in enumerate(factors.items())})
    logs = np.log(list(factors.values()))
    assert sp["n_runs"] == 3
    assert sp["sd"] == pytest.approx(np.sqrt(np.mean(logs ** 2)), abs=0.003)
    assert sp["mean_log_ratio"] == pytest.approx(logs.mean(), abs=0.003)
    assert sp["ratios"]["c"] == pytest.approx(1.10, rel=0.01)
    # an offset common to every run counts: the fitted run is the reference
    same = run_level_spread(Linear(), {"x": _run(1.08, seed=1), "y": _run(1.08, seed=2)})
    assert same["sd"] == pytest.approx(np.log(1.08), abs=0.003)


def test_bad_input_is_named():
    with pytest.raises(InputError, match="predict"):
        run_speed_ratio(object(), _run(1.0))
    with pytest.raises(InputError, match="duration_ms"):
        run_speed_ratio(Linear(), pd.DataFrame({"x": [1]}))
    with pytest.raises(InputError, match="no step"):
        run_speed_ratio(Linear(), _run(1.0).assign(duration_ms=0.0))
    with pytest.raises(InputError, match=">= 2 runs"):
        run_level_spread(Linear(), {"a": _run(1.0)})
    with pytest.raises(InputError, match="map run names"):
        run_level_spread(Linear(), [_run(1.0), _run(1.0)])


def test_window_speed_finds_a_slow_episode():
    df = _run(1.0, n=600, seed=3)
    df["timestamp"] = 1000.0 + 0.05 * np.arange(len(df))        # 30 s, 20 steps per second
    df["involuntary_switches"] = 1
    slow = (df["timestamp"] >= 1010.0) & (df["timestamp"] < 1015.0)
    df.loc[slow, "duration_ms"] *= 1.3
    df.loc[slow, "involuntary_switches"] = 10
    w = window_speed(Linear(), df, window_s=5.0)
    assert w["start_s"].tolist() == [0.0, 5.0, 10.0, 15.0, 20.0, 25.0]
    assert w["steps"].tolist() == [100] * 6
    assert w.loc[2, "speed_ratio"] == pytest.approx(1.3, rel=0.01)
    assert np.allclose(w.drop(index=2)["speed_ratio"], 1.0, atol=0.01)
    assert w["involuntary_switches"].tolist() == [100, 100, 1000, 100, 100, 100]
    # the default window is the one constant the notebooks cite
    assert EPISODE_WINDOW_S == 5.0
    assert window_speed(Linear(), df).equals(w)
    with pytest.raises(InputError, match="timestamp"):
        window_speed(Linear(), df.drop(columns="timestamp"))
    with pytest.raises(InputError, match="window_s"):
        window_speed(Linear(), df, window_s=0)
