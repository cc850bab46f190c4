"""Tests of perfmodel.data.trace_schema: aliases onto canonical names, and how they are reported."""
from __future__ import annotations

import pandas as pd
import pytest

from perfmodel.data.trace_schema import (
    ALIASES,
    canonical_name,
    describe_aliases,
    duplicate_names,
    resolve_aliases,
)
from perfmodel.data.trace_validate import validate_trace
from perfmodel.errors import InputError


@pytest.mark.parametrize("names", [
    ("B", "S", "T"),
    ("batch", "tokens", "duration_ms"),
    ("num_reqs", "total_scheduled_tokens", "model_run_duration_ms"),
    ("Batch_Size", " Total-Tokens ", "DURATION MS"),
])
def test_aliases_map_to_canonical_and_are_recorded(names):
    df = pd.DataFrame({names[0]: [1, 2], names[1]: [3, 4], names[2]: [5.0, 6.0]})
    out = validate_trace(df)
    assert list(out.columns) == ["batch_size", "total_tokens", "duration_ms"]
    expected = {n: c for n, c in zip(names, ["batch_size", "total_tokens", "duration_ms"])
                if n != c}  # identity mappings are not aliases
    assert out.attrs["alias_map"] == expected
    text = describe_aliases(out)
    for n in expected:
        assert repr(n) in text
    assert text.index("batch_size") < text.index("total_tokens")


def test_canonical_names_record_no_alias(good_frame):
    out = validate_trace(good_frame())
    assert out.attrs["alias_map"] == {}
    assert describe_aliases(out) == "canonical column names (no aliases used)"
    assert describe_aliases({"B": "batch_size"}) == "batch_size <- 'B'"


def test_step_ms_is_not_an_alias_of_duration(error_of):
    df = pd.DataFrame({"B": [1], "S": [1], "step_ms": [3.0]})
    msg = error_of(df)
    assert "missing required columns ['duration_ms']" in msg
    assert "'step_ms'" in msg  # named among the columns present


def test_duplicate_column_after_aliasing(error_of):
    df = pd.DataFrame({"B": [1], "batch_size": [1], "S": [1], "T": [1.0]})
    msg = error_of(df)
    assert "duplicate column after aliasing" in msg
    assert "'B'" in msg and "'batch_size'" in msg


def test_duplicate_raw_column_names(error_of):
    df = pd.DataFrame([[1, 1, 1, 1.0]], columns=["B", "B", "S", "T"])
    assert "duplicate column names ['B']" in error_of(df)
    with pytest.raises(InputError, match="duplicate"):
        resolve_aliases(["tokens", "S"])


def test_extras_pass_through_unchanged(good_frame):
    df = good_frame()
    out = validate_trace(df)
    assert out["forward_ms"].tolist() == df["forward_ms"].tolist()
    assert out["config"].tolist() == df["config"].tolist()
    assert list(out.columns) == list(df.columns)


def test_canonical_name_of_every_alias_and_spelling():
    for canon, names in ALIASES.items():
        assert canonical_name(canon) == canon
        for alias in names:
            assert canonical_name(alias) == canon, alias
            assert canonical_name(f" {alias.upper().replace('_', '-')} ") == canon, alias
    assert canonical_name("forward_ms") is None
    assert canonical_name("step_ms") is None  # the whole engine step, not duration_ms


def test_duplicate_names():
    assert duplicate_names(["B", "S", "B", "T", "S", "B"]) == ["B", "S"]
    assert duplicate_names(["B", "b"]) == []  # exact names: case variants are aliases, not repeats
