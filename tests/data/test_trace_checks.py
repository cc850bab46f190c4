"""Tests of perfmodel.data.trace_checks: every kind of bad value, one message naming column, first rows, count."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfmodel.data.trace_checks import check_degenerate, check_step_columns
from perfmodel.data.trace_schema import MAX_COUNT, ROW_CONVENTION
from perfmodel.data.trace_validate import validate_trace
from perfmodel.errors import InputError


def test_missing_required_columns_lists_all_missing_and_present(error_of):
    df = pd.DataFrame({"batch_size": [1], "foo": [2]})
    msg = error_of(df)
    assert "missing required columns ['total_tokens', 'duration_ms']" in msg
    assert "columns present: ['batch_size', 'foo']" in msg


def test_non_numeric_value_names_column_row_and_count(good_frame, error_of):
    df = good_frame()
    df["batch_size"] = df["batch_size"].astype(object)
    df.loc[2, "batch_size"] = "two"
    msg = error_of(df)
    assert "column 'batch_size': non-numeric values in 1 row (row 2)" in msg
    assert ROW_CONVENTION in msg


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_and_inf(bad, good_frame, error_of):
    df = good_frame()
    df.loc[[1, 3], "duration_ms"] = bad
    assert "column 'duration_ms': missing, NaN or infinite values in 2 rows (rows 1, 3)" \
        in error_of(df)


def test_b_below_one(good_frame, error_of):
    df = good_frame()
    df.loc[0, "batch_size"] = 0
    df.loc[0, ["chunk_sizes", "context_lens"]] = ["", ""]
    assert "column 'batch_size': B < 1 in 1 row (row 0)" in error_of(
        df.drop(columns=["chunk_sizes", "context_lens"]))


@pytest.mark.parametrize("col,label", [("batch_size", "B"), ("total_tokens", "S")])
def test_non_integer_b_or_s(col, label, good_frame, error_of):
    df = good_frame().drop(columns=["chunk_sizes", "context_lens"])
    df[col] = df[col].astype(float)
    df.loc[1, col] = df.loc[1, col] + 0.5
    assert f"column '{col}': non-integer {label} in 1 row (row 1)" in error_of(df)


def test_s_below_b(good_frame, error_of):
    df = good_frame().drop(columns=["chunk_sizes", "context_lens"])
    df.loc[1, "total_tokens"] = 2  # B = 3
    msg = error_of(df)
    assert "column 'total_tokens': S < B" in msg and "in 1 row (row 1)" in msg


@pytest.mark.parametrize("t", [0.0, -3.0])
def test_t_not_positive(t, good_frame, error_of):
    df = good_frame()
    df.loc[2, "duration_ms"] = t
    assert "column 'duration_ms': T <= 0 in 1 row (row 2)" in error_of(df)


def test_first_five_rows_and_total_count(error_of):
    df = pd.DataFrame({"B": [1] * 10, "S": [1] * 10, "T": [1.0, -1, -1, 1, -1, -1, -1, -1, -1, 1]})
    msg = error_of(df)
    assert "T <= 0 in 7 rows (rows 1, 2, 4, 5, 6, ...)" in msg


def test_chunk_sizes_not_summing_to_s(good_frame, error_of):
    df = good_frame()
    df.loc[3, "chunk_sizes"] = "8;1"  # S = 10
    assert ("column 'chunk_sizes': chunk sizes whose sum differs from total_tokens in 1 row "
            "(row 3)") in error_of(df)


def test_list_counts_differ_from_b_and_from_each_other(good_frame, error_of):
    df = good_frame()
    df.loc[1, "context_lens"] = "10;20"  # B = 3, chunks have 3
    msg = error_of(df)
    assert "column 'context_lens': a number of items different from batch_size in 1 row (row 1)" \
        in msg
    assert "column 'context_lens': a number of items different from chunk_sizes in 1 row (row 1)" \
        in msg
    df = good_frame()
    df.loc[2, "chunk_sizes"] = "2"  # B = 2, S = 2
    assert "column 'chunk_sizes': a number of items different from batch_size in 1 row (row 2)" \
        in error_of(df)


def test_negative_context_and_zero_chunk(good_frame, error_of):
    df = good_frame()
    df.loc[2, "context_lens"] = "4;-1"
    df.loc[3, "chunk_sizes"] = "10;0"
    msg = error_of(df)
    assert "column 'context_lens': a negative context length in 1 row (row 2)" in msg
    assert "column 'chunk_sizes': a chunk size < 1" in msg and "(row 3)" in msg


def test_unparseable_and_missing_list_cells(good_frame, error_of):
    df = good_frame()
    df.loc[0, "chunk_sizes"] = "7.5"
    df.loc[1, "chunk_sizes"] = "3;x;1"
    df.loc[2, "context_lens"] = None
    msg = error_of(df)
    assert "column 'chunk_sizes': cells that are not integers joined by ';' in 2 rows (rows 0, 1)" \
        in msg
    assert "column 'context_lens': missing values in 1 row (row 2)" in msg


def test_num_decode_prefill_checks(good_frame, error_of):
    df = good_frame()
    df["num_decode"] = [0, 2, 2, 1]
    df["num_prefill"] = [1, 1, 0, 0]  # row 3: 1 + 0 != 2
    assert "num_decode + num_prefill != batch_size in 1 row (row 3)" in error_of(df)
    df["num_prefill"] = [1, 1, 0, -1]
    assert "column 'num_prefill': negative counts in 1 row (row 3)" in error_of(df)


def test_all_problems_reported_in_one_message(good_frame, error_of):
    df = good_frame()
    df.loc[0, "duration_ms"] = -1.0
    df.loc[1, "context_lens"] = "10;20;-5"
    msg = error_of(df)
    assert "'duration_ms'" in msg and "'context_lens'" in msg
    assert "\n" not in msg


def test_max_count_boundary_is_exact():
    """2^40 is accepted, 2^40 + 1 refused: the test on parsed values is exact below 2^53."""
    ok = validate_trace(pd.DataFrame({"B": [1, 2], "S": [1, MAX_COUNT], "T": [5.0, 6.0]}))
    assert ok["total_tokens"].iloc[1] == MAX_COUNT
    with pytest.raises(InputError, match=r"total_tokens.*maximum.*1099511627777"):
        validate_trace(pd.DataFrame({"B": [1, 2], "S": [1, MAX_COUNT + 1], "T": [5.0, 6.0]}))


def test_degenerate_traces_need_allow_degenerate():
    same = pd.DataFrame({"B": [2] * 5, "S": [9] * 5, "T": [4.0] * 5})
    with pytest.raises(InputError, match="every row identical"):
        validate_trace(same)
    assert len(validate_trace(same, allow_degenerate=True)) == 5
    assert len(validate_trace(same.drop(columns="T"), require_duration=False)) == 5  # a design
    tiny = pd.DataFrame({"B": [1, 2], "S": [1, 9], "T": [5.0, 1e-4]})
    with pytest.raises(InputError, match="below 1 microsecond.*row 1"):
        validate_trace(tiny)
    assert validate_trace(tiny, allow_degenerate=True)["duration_ms"].iloc[1] == 1e-4


def test_check_step_columns_names_rows_by_index_label():
    df = pd.DataFrame({"batch_size": [1, 0, 3, 2], "total_tokens": [1, 1, 2, "x"],
                       "duration_ms": [1.0, 2.0, -1.0, 3.0]}, index=[10, 11, 12, 13])
    with pytest.raises(InputError) as ei:
        check_step_columns(df, need_y=True, name="train")
    msg = str(ei.value)
    assert msg.startswith("`train`: ")
    assert "column `total_tokens` has missing or non-numeric values at rows [13] (1 of 4)" in msg
    assert "column `batch_size` must be >= 1; fails at rows [11] (1 of 4)" in msg
    assert "column `total_tokens` must be >= `batch_size`; fails at rows [12] (1 of 4)" in msg
    assert "column `duration_ms` must be > 0; fails at rows [12] (1 of 4)" in msg
    good = pd.DataFrame({"batch_size": [1, 3], "total_tokens": [1, 5], "duration_ms": [1.0, 4.0]})
    ok = check_step_columns(good, need_y=True)
    assert {k: v.tolist() for k, v in ok.items()} == {"B": [1, 3], "S": [1, 5], "T": [1.0, 4.0]}
    assert set(check_step_columns(df.iloc[[0]], need_y=False)) == {"B", "S"}


@pytest.mark.parametrize("bad,expected", [
    ([1], "must be a pandas DataFrame (a step trace), got list"),
    (pd.DataFrame({"batch_size": [1]}), "lacks column(s) ['total_tokens']"),
    (pd.DataFrame({"batch_size": [], "total_tokens": []}), "has no rows"),
])
def test_check_step_columns_refuses_what_is_not_a_trace(bad, expected):
    with pytest.raises(InputError) as ei:
        check_step_columns(bad, need_y=False)
    assert expected in str(ei.value)


def test_check_degenerate_directly():
    with pytest.raises(InputError, match="check_degenerate takes a pandas DataFrame, got dict"):
        check_degenerate({"batch_size": [1]})
    same = pd.DataFrame({"batch_size": [2, 2], "total_tokens": [9, 9], "duration_ms": [4.0, 4.0]})
    with pytest.raises(InputError, match=r"trace 'x\.csv' is degenerate: every row identical \(2 rows"):
        check_degenerate(same, source="x.csv")
    check_degenerate(same.iloc[:1])  # one row: nothing to compare
    check_degenerate(same.drop(columns="duration_ms"))  # a design: no measurement to repeat
    check_degenerate(same.assign(chunk_sizes=["8;1", "1;8"]))  # the lists differ
