"""The FIT.json schema: a real fit passes, each kind of damage is named, older versions upgrade."""
import json

import numpy as np
import pandas as pd
import pytest

from perfmodel.core import fit_format
from perfmodel.core.fit import fit_model
from perfmodel.core.fit_format import FIT_FORMAT_VERSION, check_fit_dict
from perfmodel.core.results import FitResult
from perfmodel.errors import InputError


@pytest.fixture(scope="module")
def summary():
    rng = np.random.default_rng(3)
    B = rng.integers(1, 64, 200)
    S = B + rng.integers(0, 3000, 200)
    T = (4 + 0.02 * S + 0.05 * B) * np.exp(rng.normal(0, 0.03, 200))
    df = pd.DataFrame({"batch_size": B, "total_tokens": S, "duration_ms": T})
    return json.loads(json.dumps(fit_model(df, "seed_id", n_starts=2).summary()))


def test_a_written_fit_passes_and_round_trips(summary):
    assert summary["format_version"] == FIT_FORMAT_VERSION
    assert check_fit_dict(summary) == summary
    back = FitResult.from_json(json.dumps(summary))
    assert back.params == FitResult.from_json(summary).params


def test_parameters_at_a_bound_are_accepted(summary):
    """A fit at its lower bound (a_1 = 0 or k at 1e-6) is a valid fit."""
    d = json.loads(json.dumps(summary))
    m = FitResult.from_json(d).model
    d["values"] = [float(lo) if np.isfinite(lo) else v for lo, v in zip(m.lower, d["values"])]
    check_fit_dict(d)


@pytest.mark.parametrize("edit,match", [
    (lambda d: d["values"].__setitem__(0, float("1e400")), r"values'\[0\]"),
    (lambda d: d["stderr"].__setitem__(1, -1.0), "stderr"),
    (lambda d: d["cov"][2].__setitem__(2, -1.0), "negative variance"),
    (lambda d: d.update(param_names=list(reversed(d["param_names"]))), "param_names"),
    (lambda d: d.update(fitted_model="no_such_model"), "no_such_model"),
    (lambda d: d["statistics"].update(n_params=3), "n_params"),
    (lambda d: d["optimizer"].update(success="yes"), "success"),
    (lambda d: d["options"].update(relative="cubic"), "relative"),
    (lambda d: d.update(at_bound=["zeta"]), "at_bound"),
    (lambda d: d.update(format_version="1"), "format_version"),
    (lambda d: d.update(format_version=0), "format_version"),
    (lambda d: d.update(interval_calibration="on"), "interval_calibration"),
])
def test_damage_is_named(summary, edit, match):
    d = json.loads(json.dumps(summary))
    edit(d)
    with pytest.raises(InputError, match=match):
        check_fit_dict(d, "f.json")


def test_older_versions_are_upgraded_step_by_step(summary, monkeypatch):
    """A version-1 file read by a version-2 perfmodel goes through UPGRADES[1]."""
    def one_to_two(d):
        return {**d, "upgraded_from": 1}

    monkeypatch.setattr(fit_format, "FIT_FORMAT_VERSION", 2)
    monkeypatch.setitem(fit_format.UPGRADES, 1, one_to_two)
    d = {k: v for k, v in summary.items() if k != "format_version"}  # an unversioned file
    out = fit_format.check_fit_dict(d)
    assert out["format_version"] == 2 and out["upgraded_from"] == 1
    assert "format_version" not in d  # the input is not modified
