"""Tests of perfmodel.data.trace_validate: canonical output, designs without durations, drop_invalid."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfmodel.data.trace_validate import validate_trace
from perfmodel.errors import InputError


def test_empty_dataframe_and_wrong_type(error_of):
    assert "is empty: no data rows" in error_of(pd.DataFrame({"B": [], "S": [], "T": []}))
    with pytest.raises(InputError, match="takes a pandas DataFrame"):
        validate_trace({"B": [1]})


def test_require_duration_false_accepts_a_design(good_frame, error_of):
    df = good_frame().drop(columns=["duration_ms"])
    out = validate_trace(df, require_duration=False)
    assert "duration_ms" not in out.columns
    assert "missing required columns ['duration_ms']" in error_of(df)


def test_output_types_and_normalised_lists(good_frame):
    df = good_frame()
    df["batch_size"] = df["batch_size"].astype(float)
    df.loc[1, "chunk_sizes"] = "[3, 1, 1]"
    out = validate_trace(df)
    assert out["batch_size"].dtype == np.int64 and out["total_tokens"].dtype == np.int64
    assert out["duration_ms"].dtype == np.float64
    assert out.loc[1, "chunk_sizes"] == "3;1;1"


def test_drop_invalid_drops_and_reports(good_frame):
    df = good_frame()
    df.loc[1, "duration_ms"] = 0.0
    df.loc[3, "chunk_sizes"] = "8;1"
    out = validate_trace(df, drop_invalid=True, source="x.csv")
    assert len(out) == 2
    assert out["step"].tolist() == [0, 2]
    assert list(out.index) == [0, 1]
    dropped = out.attrs["dropped"]
    assert [r for r, _ in dropped] == [1, 3]
    assert "duration_ms: T <= 0" in dropped[0][1]
    assert "chunk_sizes" in dropped[1][1]
    assert out.attrs["dropped_summary"].startswith("dropped 2 of 4 rows")
    assert out.attrs["n_rows_in"] == 4


def test_drop_invalid_all_invalid_still_raises():
    df = pd.DataFrame({"B": [0, 0], "S": [1, 1], "T": [1.0, 1.0]})
    with pytest.raises(InputError, match="all 2 rows are invalid"):
        validate_trace(df, drop_invalid=True)


def test_drop_invalid_does_not_hide_structural_errors():
    with pytest.raises(InputError, match="missing required columns"):
        validate_trace(pd.DataFrame({"B": [1]}), drop_invalid=True)
