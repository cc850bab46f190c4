"""Checks of the frozen-protocol confirmation (perfmodel.decisions.confirmation)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from scipy import stats

from perfmodel.decisions import confirmation as cf
from perfmodel.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
PROTOCOL = ROOT / "data" / "vllm-serve" / "confirmation-protocol.json"


@pytest.mark.parametrize("n", [5, 11, 13, 30])
def test_min_inside_is_the_largest_bound_with_at_most_alpha(n):
    k = cf.min_inside(n, 0.9, 0.05)
    assert stats.binom.cdf(k - 1, n, 0.9) <= 0.05     # P(X < k) <= alpha
    assert stats.binom.cdf(k, n, 0.9) > 0.05          # k + 1 would exceed alpha


def test_min_inside_hand_value_and_input_checks():
    assert cf.min_inside(11, 0.9, 0.05) == 8           # P(X <= 7) = 0.019, P(X <= 8) = 0.090
    with pytest.raises(InputError, match="n"):
        cf.min_inside(0, 0.9)
    with pytest.raises(InputError, match="level"):
        cf.min_inside(10, 1.5)


def _result(runs, engine=None):
    engine = engine or {"max_num_seqs": 32, "max_num_batched_tokens": 768}
    return {"capacity": {"engine": engine}, "runs": runs}


def _run(rate, att, engine=None, conc=None):
    return {"request_rate": rate, "max_concurrency": conc, "attainment": {"measured": att},
            "engine": engine or {"max_num_seqs": 32, "max_num_batched_tokens": 768}}


PROTO = {"capacity": {"attainment_target": 0.99},
         "acceptance": {"rate_outcomes": {"3": "meets", "5": "no prediction", "7": "misses"}}}


def test_rate_outcomes_compares_prediction_and_measurement():
    res = _result({"rate-3": _run(3.0, 1.0), "rate-5": _run(5.0, 0.5),
                   "rate-7": _run(7.0, 0.995), "repeat-1": _run(3.0, 0.98),
                   "conc-16": _run(float("inf"), 0.2, conc=16),
                   "budget-default-3-rep1": _run(3.0, 0.1, engine={"max_num_seqs": 256,
                                                                  "max_num_batched_tokens": 2048}),
                   "rate-9": _run(9.0, 0.1)})
    out = cf.rate_outcomes(res, PROTO).set_index("run")
    assert list(out.index) == ["rate-3", "repeat-1", "rate-5", "rate-7"]
    assert out.loc["rate-3", "agrees"] is True
    assert out.loc["repeat-1", "agrees"] is False      # 0.98 < 0.99: predicted to meet, missed
    assert out.loc["rate-5", "agrees"] is None
    assert out.loc["rate-7", "agrees"] is False        # met although predicted to miss


def test_rate_outcomes_without_a_planned_run_is_an_error():
    with pytest.raises(InputError, match="planned rate"):
        cf.rate_outcomes(_result({"rate-9": _run(9.0, 1.0)}), PROTO)


def _bench(d: Path, date: str):
    d.mkdir(parents=True)
    (d / "bench.json").write_text(json.dumps({"date": date}))


def test_collected_after(tmp_path):
    _bench(tmp_path / "a", "20261127-001000")
    _bench(tmp_path / "b", "20261126-235959")
    out = cf.collected_after(tmp_path, "2026-11-27T00:00:00Z").set_index("run")["after"]
    assert out.to_dict() == {"a": True, "b": False}
    with pytest.raises(InputError, match="frozen_utc"):
        cf.collected_after(tmp_path, "yesterday")
    _bench(tmp_path / "c", "not a date")
    with pytest.raises(InputError, match="c/bench.json date"):
        cf.collected_after(tmp_path, "2026-11-27T00:00:00Z")
    with pytest.raises(InputError, match="no run folder"):
        cf.collected_after(tmp_path / "missing", "2026-11-27T00:00:00Z")


def test_load_protocol_checks(tmp_path):
    with pytest.raises(InputError, match="not a file"):
        cf.load_protocol(tmp_path / "none.json")
    (tmp_path / "p.json").write_text("{")
    with pytest.raises(InputError, match="not JSON"):
        cf.load_protocol(tmp_path / "p.json")
    (tmp_path / "p.json").write_text(json.dumps({"series": "x"}))
    with pytest.raises(InputError, match="lacks frozen_utc"):
        cf.load_protocol(tmp_path / "p.json")
    full = {k: {} for k in cf.PROTOCOL_KEYS}
    full["acceptance"] = {"rate_outcomes": {"3": "maybe"}}
    (tmp_path / "p.json").write_text(json.dumps(full))
    with pytest.raises(InputError, match="unknown rate outcomes"):
        cf.load_protocol(tmp_path / "p.json")


@pytest.mark.skipif(not PROTOCOL.is_file(), reason="the committed protocol is not in this checkout")
def test_committed_protocol_loads_and_its_bounds_follow_the_rule():
    proto = cf.load_protocol(PROTOCOL)
    acc = proto["acceptance"]
    for n, k in acc["min_inside_if_all_planned_runs"].items():
        assert cf.min_inside(int(n), proto["replay"]["level"], acc["alpha"]) == k
    cap = proto["capacity"]["with_run_term"]
    for rate, outcome in acc["rate_outcomes"].items():
        r = float(rate)
        assert outcome == ("meets" if r < cap["lower"] else "misses" if r > cap["upper"]
                           else "no prediction")
