"""Tests of perfmodel.stats.validation, the public entry point of validation: every name it
has always exported is still there and is the one object of its home module (folds, splits,
scores, crossval), so notebooks, scripts and the package get the same fold engine."""
from __future__ import annotations

import importlib

import pytest

from perfmodel.stats import validation as va

#: the public names of ``perfmodel.stats.validation`` and the module that defines each
HOMES = {
    "DECORRELATION_THRESHOLD": "folds",
    "DEFAULT_BLOCK": "folds",
    "FOLD_SCHEMES": "folds",
    "decorrelation_lag": "folds",
    "fold_groups": "folds",
    "is_time_ordered": "folds",
    "make_folds": "folds",
    "run_codes": "folds",
    "extrapolation_split": "splits",
    "grouped_kfold": "splits",
    "time_series_splits": "splits",
    "Split": "splits",
    "REGIMES": "scores",
    "metrics": "scores",
    "regime": "scores",
    "cross_validate": "crossval",
}


def test_all_lists_every_public_name_once():
    assert sorted(va.__all__) == sorted(HOMES)
    assert len(set(va.__all__)) == len(va.__all__)


@pytest.mark.parametrize("name", sorted(HOMES))
def test_each_name_is_the_object_of_its_home_module(name):
    home = importlib.import_module(f"perfmodel.stats.{HOMES[name]}")
    assert getattr(va, name) is getattr(home, name)
    obj = getattr(va, name)
    if callable(obj) and hasattr(obj, "__module__") and name != "Split":
        assert obj.__module__ == home.__name__


def test_the_engine_defaults_are_unchanged():
    # the stated defaults the evaluation and the paper's tables were computed with
    assert va.DEFAULT_BLOCK == 25 and va.DECORRELATION_THRESHOLD == 0.1
    assert va.FOLD_SCHEMES == ("grouped", "blocked", "expanding", "extrapolate", "random")
    assert va.REGIMES == ("decode-only", "mixed", "prefill-heavy")
