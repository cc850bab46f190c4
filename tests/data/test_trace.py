"""Tests of perfmodel.data.trace: the one import point of the step-trace modules.

The functions themselves are tested beside their home modules
(``test_trace_schema.py``, ``test_trace_lists.py``, ``test_trace_checks.py``,
``test_trace_validate.py``, ``test_trace_read.py``, ``test_trace_features.py``).
"""
from __future__ import annotations

import doctest
import importlib

import pytest

from perfmodel.data import trace

#: the public names of perfmodel.data.trace, by the module that defines each
HOMES = {
    "trace_schema": ["ALIASES", "CANONICAL_COLUMNS", "LIST_COLUMNS", "MAX_COUNT",
                     "MIN_DURATION_MS", "REQUIRED_COLUMNS", "ROW_CONVENTION",
                     "describe_aliases", "resolve_aliases"],
    "trace_lists": ["ListColumn", "parse_int_list", "parse_list_column"],
    "trace_checks": ["check_degenerate", "check_step_columns"],
    "trace_validate": ["validate_trace"],
    "trace_read": ["RUN_COLUMN", "read_runs", "read_trace", "trace_sha256"],
    "trace_features": ["has_context", "step_features", "time_order"],
}


def test_every_public_name_is_the_home_modules_own_object():
    names = [n for group in HOMES.values() for n in group]
    assert sorted(trace.__all__) == sorted(names)
    for mod, group in HOMES.items():
        home = importlib.import_module(f"perfmodel.data.{mod}")
        for name in group:
            assert name in home.__all__, (mod, name)
            assert getattr(trace, name) is getattr(home, name), (mod, name)


@pytest.mark.parametrize("mod", ["trace", "trace_schema", "trace_validate"])
def test_the_docstring_examples_run(mod):
    result = doctest.testmod(importlib.import_module(f"perfmodel.data.{mod}"))
    assert result.attempted > 0 and result.failed == 0
