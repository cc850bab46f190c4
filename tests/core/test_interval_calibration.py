"""Tests of perfmodel.core.interval_calibration: the stored form and its validator."""
from __future__ import annotations

import copy
import json

import pytest

from perfmodel.core.interval_calibration import KEY, check_interval_calibration
from perfmodel.errors import InputError

GOOD = {
    "version": 1, "method": "mondrian-cv-conformal", "scale": "log", "levels": [0.8, 0.9],
    "regime_rule": {"phase": {"prefill_ratio": 32.0}, "length_thresholds_ms": [5.0, 12.5]},
    "min_count": 50,
    "pools": {"*|*": {"n": 300, "lower": [-0.1, -0.2], "upper": [0.1, 0.2]},
              "mixed|long": {"n": 80, "lower": [-0.1, None], "upper": [0.1, None]}},
    "folds": {"scheme": "grouped", "k": 5},
}


def test_a_good_calibration_passes_and_survives_json():
    assert check_interval_calibration(json.loads(json.dumps(GOOD))) == GOOD


def _broken(path, value):
    d = copy.deepcopy(GOOD)
    *head, last = path
    t = d
    for k in head:
        t = t[k]
    if value is KeyError:
        del t[last]
    else:
        t[last] = value
    return d


@pytest.mark.parametrize("path,value,needle", [
    (("folds",), KeyError, "missing keys"),
    (("version",), 2, "version"),
    (("method",), "split", "method"),
    (("levels",), [0.9, 0.8], "increasing"),
    (("levels",), [0.8, 1.0], "increasing"),
    (("pools", "*|*", "upper"), [0.1], "one value per level"),
    (("pools", "*|*", "lower"), [0.5, -0.2], "lower quantile above"),
    (("pools", "odd|long"), {"n": 1, "lower": [0, 0], "upper": [0, 0]}, "unknown pool"),
    (("pools", "*|*", "n"), -1, "n must be"),
    (("regime_rule", "phase"), {"prefill_ratio": 1}, "prefill_ratio"),
    (("min_count",), 0, "min_count"),
    (("quantile_rule",), "median", "quantile_rule"),
])
def test_damage_is_named(path, value, needle):
    with pytest.raises(InputError, match=needle):
        check_interval_calibration(_broken(path, value))


@pytest.mark.parametrize("rule", ["cluster-subsample-interpolated", "step-rank"])
def test_both_quantile_rules_pass_and_a_calibration_without_the_key_is_the_step_rank(rule):
    # GOOD has no quantile_rule: a calibration written before the key existed still loads
    assert check_interval_calibration({**GOOD, "quantile_rule": rule})["quantile_rule"] == rule


def test_not_an_object():
    with pytest.raises(InputError, match=KEY):
        check_interval_calibration([1, 2])


@pytest.mark.parametrize("rec", [
    {"sd": 0.0, "source": "run-sd", "n_runs": None},
    {"sd": 0.034, "source": "run-traces", "n_runs": 7, "ratios": {"a": 0.96, "b": 1.0}},
])
def test_a_run_term_passes_and_a_calibration_without_it_still_loads(rec):
    assert "run_term" not in GOOD
    assert check_interval_calibration({**GOOD, "run_term": rec})["run_term"] == rec


@pytest.mark.parametrize("rec", [
    {"sd": -0.1, "source": "run-sd"}, {"sd": float("inf"), "source": "run-sd"},
    {"sd": 0.1, "source": "guess"}, {"sd": 0.1}, "0.1",
    {"sd": 0.1, "source": "run-traces", "n_runs": 1},
    {"sd": 0.1, "source": "run-traces", "n_runs": True},
])
def test_a_damaged_run_term_is_named(rec):
    with pytest.raises(InputError, match="run_term"):
        check_interval_calibration({**GOOD, "run_term": rec})
