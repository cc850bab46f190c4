"""Tests of perfmodel.data.trace: aliases, formats, every kind of bad input, features."""
from __future__ import annotations

import gzip
import hashlib

import numpy as np
import pandas as pd
import pytest

from perfmodel.data.trace import (
    ROW_CONVENTION,
    describe_aliases,
    has_context,
    parse_int_list,
    read_trace,
    resolve_aliases,
    step_features,
    time_order,
    trace_sha256,
    validate_trace,
)
from perfmodel.errors import InputError


def good_frame(n: int = 4) -> pd.DataFrame:
    """A small valid trace with lists and extras."""
    rows = [
        # B, S, T, chunks, contexts
        (1, 7, 12.5, "7", "0"),
        (3, 5, 8.0, "3;1;1", "10;20;0"),
        (2, 2, 6.0, "1;1", "4;9"),
        (2, 10, 9.5, "9;1", "0;30"),
    ][:n]
    return pd.DataFrame({
        "step": range(n),
        "batch_size": [r[0] for r in rows],
        "total_tokens": [r[1] for r in rows],
        "duration_ms": [r[2] for r in rows],
        "chunk_sizes": [r[3] for r in rows],
        "context_lens": [r[4] for r in rows],
        "forward_ms": [1.0, 2.0, 3.0, 4.0][:n],
        "config": ["a", "a", "b", "b"][:n],
    })


def error_of(df, **kw) -> str:
    with pytest.raises(InputError) as ei:
        validate_trace(df, **kw)
    return str(ei.value)


# ---------------------------------------------------------------------------
# aliases
# ---------------------------------------------------------------------------

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


def test_canonical_names_record_no_alias():
    out = validate_trace(good_frame())
    assert out.attrs["alias_map"] == {}
    assert describe_aliases(out) == "canonical column names (no aliases used)"
    assert describe_aliases({"B": "batch_size"}) == "batch_size <- 'B'"


def test_step_ms_is_not_an_alias_of_duration():
    df = pd.DataFrame({"B": [1], "S": [1], "step_ms": [3.0]})
    msg = error_of(df)
    assert "missing required columns ['duration_ms']" in msg
    assert "'step_ms'" in msg  # named among the columns present


def test_duplicate_column_after_aliasing():
    df = pd.DataFrame({"B": [1], "batch_size": [1], "S": [1], "T": [1.0]})
    msg = error_of(df)
    assert "duplicate column after aliasing" in msg
    assert "'B'" in msg and "'batch_size'" in msg


def test_duplicate_raw_column_names():
    df = pd.DataFrame([[1, 1, 1, 1.0]], columns=["B", "B", "S", "T"])
    assert "duplicate column names ['B']" in error_of(df)
    with pytest.raises(InputError, match="duplicate"):
        resolve_aliases(["tokens", "S"])


def test_extras_pass_through_unchanged():
    df = good_frame()
    out = validate_trace(df)
    assert out["forward_ms"].tolist() == df["forward_ms"].tolist()
    assert out["config"].tolist() == df["config"].tolist()
    assert list(out.columns) == list(df.columns)


# ---------------------------------------------------------------------------
# every kind of bad value: one message naming column, first rows, count
# ---------------------------------------------------------------------------

def test_missing_required_columns_lists_all_missing_and_present():
    df = pd.DataFrame({"batch_size": [1], "foo": [2]})
    msg = error_of(df)
    assert "missing required columns ['total_tokens', 'duration_ms']" in msg
    assert "columns present: ['batch_size', 'foo']" in msg


def test_non_numeric_value_names_column_row_and_count():
    df = good_frame()
    df["batch_size"] = df["batch_size"].astype(object)
    df.loc[2, "batch_size"] = "two"
    msg = error_of(df)
    assert "column 'batch_size': non-numeric values in 1 row (row 2)" in msg
    assert ROW_CONVENTION in msg


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_and_inf(bad):
    df = good_frame()
    df.loc[[1, 3], "duration_ms"] = bad
    assert "column 'duration_ms': missing, NaN or infinite values in 2 rows (rows 1, 3)" \
        in error_of(df)


def test_b_below_one():
    df = good_frame()
    df.loc[0, "batch_size"] = 0
    df.loc[0, ["chunk_sizes", "context_lens"]] = ["", ""]
    assert "column 'batch_size': B < 1 in 1 row (row 0)" in error_of(
        df.drop(columns=["chunk_sizes", "context_lens"]))


@pytest.mark.parametrize("col,label", [("batch_size", "B"), ("total_tokens", "S")])
def test_non_integer_b_or_s(col, label):
    df = good_frame().drop(columns=["chunk_sizes", "context_lens"])
    df[col] = df[col].astype(float)
    df.loc[1, col] = df.loc[1, col] + 0.5
    assert f"column '{col}': non-integer {label} in 1 row (row 1)" in error_of(df)


def test_s_below_b():
    df = good_frame().drop(columns=["chunk_sizes", "context_lens"])
    df.loc[1, "total_tokens"] = 2  # B = 3
    msg = error_of(df)
    assert "column 'total_tokens': S < B" in msg and "in 1 row (row 1)" in msg


@pytest.mark.parametrize("t", [0.0, -3.0])
def test_t_not_positive(t):
    df = good_frame()
    df.loc[2, "duration_ms"] = t
    assert "column 'duration_ms': T <= 0 in 1 row (row 2)" in error_of(df)


def test_first_five_rows_and_total_count():
    df = pd.DataFrame({"B": [1] * 10, "S": [1] * 10, "T": [1.0, -1, -1, 1, -1, -1, -1, -1, -1, 1]})
    msg = error_of(df)
    assert "T <= 0 in 7 rows (rows 1, 2, 4, 5, 6, ...)" in msg


def test_chunk_sizes_not_summing_to_s():
    df = good_frame()
    df.loc[3, "chunk_sizes"] = "8;1"  # S = 10
    assert ("column 'chunk_sizes': chunk sizes whose sum differs from total_tokens in 1 row "
            "(row 3)") in error_of(df)


def test_list_counts_differ_from_b_and_from_each_other():
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


def test_negative_context_and_zero_chunk():
    df = good_frame()
    df.loc[2, "context_lens"] = "4;-1"
    df.loc[3, "chunk_sizes"] = "10;0"
    msg = error_of(df)
    assert "column 'context_lens': a negative context length in 1 row (row 2)" in msg
    assert "column 'chunk_sizes': a chunk size < 1" in msg and "(row 3)" in msg


def test_unparseable_and_missing_list_cells():
    df = good_frame()
    df.loc[0, "chunk_sizes"] = "7.5"
    df.loc[1, "chunk_sizes"] = "3;x;1"
    df.loc[2, "context_lens"] = None
    msg = error_of(df)
    assert "column 'chunk_sizes': cells that are not integers joined by ';' in 2 rows (rows 0, 1)" \
        in msg
    assert "column 'context_lens': missing values in 1 row (row 2)" in msg


def test_num_decode_prefill_checks():
    df = good_frame()
    df["num_decode"] = [0, 2, 2, 1]
    df["num_prefill"] = [1, 1, 0, 0]  # row 3: 1 + 0 != 2
    assert "num_decode + num_prefill != batch_size in 1 row (row 3)" in error_of(df)
    df["num_prefill"] = [1, 1, 0, -1]
    assert "column 'num_prefill': negative counts in 1 row (row 3)" in error_of(df)


def test_all_problems_reported_in_one_message():
    df = good_frame()
    df.loc[0, "duration_ms"] = -1.0
    df.loc[1, "context_lens"] = "10;20;-5"
    msg = error_of(df)
    assert "'duration_ms'" in msg and "'context_lens'" in msg
    assert "\n" not in msg


def test_empty_dataframe_and_wrong_type():
    assert "is empty: no data rows" in error_of(pd.DataFrame({"B": [], "S": [], "T": []}))
    with pytest.raises(InputError, match="takes a pandas DataFrame"):
        validate_trace({"B": [1]})


def test_require_duration_false_accepts_a_design():
    df = good_frame().drop(columns=["duration_ms"])
    out = validate_trace(df, require_duration=False)
    assert "duration_ms" not in out.columns
    assert "missing required columns ['duration_ms']" in error_of(df)


def test_output_types_and_normalised_lists():
    df = good_frame()
    df["batch_size"] = df["batch_size"].astype(float)
    df.loc[1, "chunk_sizes"] = "[3, 1, 1]"
    out = validate_trace(df)
    assert out["batch_size"].dtype == np.int64 and out["total_tokens"].dtype == np.int64
    assert out["duration_ms"].dtype == np.float64
    assert out.loc[1, "chunk_sizes"] == "3;1;1"


# ---------------------------------------------------------------------------
# drop_invalid
# ---------------------------------------------------------------------------

def test_drop_invalid_drops_and_reports():
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


# ---------------------------------------------------------------------------
# files and formats
# ---------------------------------------------------------------------------

def _write(df, path):
    suffix = "".join(path.suffixes)
    if suffix.startswith(".csv"):
        df.to_csv(path, index=False)
    elif suffix == ".parquet":
        df.to_parquet(path, index=False)
    else:
        df.to_json(path, orient="records", lines=True)


@pytest.mark.parametrize("name", ["t.csv", "t.parquet", "t.jsonl", "t.ndjson", "t.csv.gz"])
def test_round_trip_each_format(tmp_path, name):
    pytest.importorskip("pyarrow") if name.endswith("parquet") else None
    df = validate_trace(good_frame())
    path = tmp_path / name
    _write(df, path)
    back = read_trace(path)
    pd.testing.assert_frame_equal(back.reset_index(drop=True), df, check_dtype=False)
    assert back["chunk_sizes"].tolist() == ["7", "3;1;1", "1;1", "9;1"]
    assert back.attrs["sha256"] == trace_sha256(path)
    assert back.attrs["source"] == str(path)


def test_single_request_lists_stay_lists_in_csv(tmp_path):
    df = pd.DataFrame({"B": [1, 1], "S": [5, 7], "T": [1.0, 2.0], "chunk_sizes": [5, 7],
                       "context_lens": [0, 3]})
    path = tmp_path / "one.csv"
    df.to_csv(path, index=False)
    out = read_trace(path)
    assert out["chunk_sizes"].tolist() == ["5", "7"]
    assert step_features(out)["ctx_sum"].tolist() == [0.0, 3.0]


def test_native_lists_in_jsonl_and_parquet(tmp_path):
    pytest.importorskip("pyarrow")
    df = pd.DataFrame({"B": [2], "S": [9], "T": [3.0], "chunk_sizes": [[8, 1]],
                       "context_lens": [[0, 40]]})
    for name in ("l.jsonl", "l.parquet"):
        _write(df, tmp_path / name)
        out = read_trace(tmp_path / name)
        assert out.loc[0, "chunk_sizes"] == "8;1" and out.loc[0, "context_lens"] == "0;40"


def test_file_row_numbers_are_zero_based_data_rows(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("B,S,T\n1,1,1.0\n1,1,2.0\n1,1,3.0\n1,1,-4.0\n")
    with pytest.raises(InputError) as ei:
        read_trace(path)
    assert "T <= 0 in 1 row (row 3)" in str(ei.value)
    assert repr(str(path)) in str(ei.value)


def test_aliased_file_from_the_source_report(tmp_path):
    path = tmp_path / "report.csv"
    path.write_text("num_running_reqs,total_scheduled_tokens,model_run_duration_ms\n"
                    "8,4096,104.3\n10,4096,105.1\n")
    out = read_trace(path)
    assert out["batch_size"].tolist() == [8, 10]
    assert describe_aliases(out) == ("batch_size <- 'num_running_reqs', total_tokens <- "
                                     "'total_scheduled_tokens', duration_ms <- "
                                     "'model_run_duration_ms'")


def test_file_errors(tmp_path):
    (tmp_path / "empty.csv").write_bytes(b"")
    (tmp_path / "header.csv").write_text("B,S,T\n")
    (tmp_path / "blank.csv").write_text("\n\n")
    (tmp_path / "junk.parquet").write_bytes(b"not a parquet file at all")
    (tmp_path / "junk.jsonl").write_text('{"B": 1,\n')
    (tmp_path / "t.xlsx").write_text("x")
    (tmp_path / "dup.csv").write_text("B,B,S,T\n1,1,1,1\n")
    cases = {
        "empty.csv": "is empty (0 bytes)",
        "header.csv": "is empty: no data rows (columns present: ['B', 'S', 'T'])",
        "blank.csv": "is empty",
        "junk.parquet": "cannot be read as parquet",
        "junk.jsonl": "cannot be read as jsonl",
        "t.xlsx": "unknown format '.xlsx'",
        "nope.csv": "does not exist",
        "dup.csv": "duplicate column names ['B']",
    }
    for name, expected in cases.items():
        with pytest.raises(InputError) as ei:
            read_trace(tmp_path / name)
        assert expected in str(ei.value), name
        assert name in str(ei.value)
    with pytest.raises(InputError, match="is not a file"):
        read_trace(tmp_path)


def test_read_trace_drop_invalid(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("B,S,T\n1,1,1.0\n2,1,2.0\n1,1,3.0\n")
    out = read_trace(path, drop_invalid=True)
    assert len(out) == 2 and out.attrs["dropped"][0][0] == 1


def test_trace_sha256_matches_hashlib(tmp_path):
    path = tmp_path / "t.csv.gz"
    with gzip.open(path, "wt") as fh:
        fh.write("B,S,T\n1,1,1.0\n")
    assert trace_sha256(path) == hashlib.sha256(path.read_bytes()).hexdigest()
    assert read_trace(path)["duration_ms"].tolist() == [1.0]
    with pytest.raises(InputError, match="does not exist"):
        trace_sha256(tmp_path / "missing.csv")


# ---------------------------------------------------------------------------
# parse_int_list, step_features, has_context, time_order
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("value,expected", [
    ("512;1;1", [512, 1, 1]), ("[512, 1, 1]", [512, 1, 1]), ("5", [5]), (5, [5]),
    ([3, 4], [3, 4]), ("", []), (" 2 ; 3 ", [2, 3]),
])
def test_parse_int_list_forms(value, expected):
    out = parse_int_list(value)
    assert out.dtype == np.int64 and out.tolist() == expected


@pytest.mark.parametrize("value", ["1;x", "1.5", "1;;2", None, 2.5])
def test_parse_int_list_rejects(value):
    with pytest.raises(InputError, match="parse_int_list"):
        parse_int_list(value)


def test_step_features_hand_computed():
    f = step_features(validate_trace(good_frame()))
    # row 0: one prefill chunk 7 at context 0
    # row 1: chunks (3, 1, 1) at contexts (10, 20, 0)
    # row 2: two decodes at contexts 4 and 9
    # row 3: prefill 9 at 0, decode at 30
    np.testing.assert_array_equal(f["B"], [1, 3, 2, 2])
    np.testing.assert_array_equal(f["S"], [7, 5, 2, 10])
    np.testing.assert_array_equal(f["ctx_sum"], [0, 30, 13, 30])
    np.testing.assert_array_equal(f["ctx_max"], [0, 20, 9, 30])
    # attn = sum c (ctx + c/2): 7*3.5; 3*11.5 + 20.5 + 0.5; 4.5 + 9.5; 9*4.5 + 30.5
    np.testing.assert_allclose(f["attn"], [24.5, 55.5, 14.0, 71.0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(f["attn_prefill"], [24.5, 34.5, 0.0, 40.5], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(f["decode_ctx"], [0, 20, 13, 30])
    np.testing.assert_array_equal(f["prefill_sq"], [49, 9, 0, 81])
    # population sd: [7] -> 0; [3,1,1] -> sqrt(8/9); [1,1] -> 0; [9,1] -> 4
    np.testing.assert_allclose(f["chunk_sd"], [0, np.sqrt(8 / 9), 0, 4], rtol=0, atol=1e-12)
    for v in f.values():
        assert v.dtype == np.float64


def test_step_features_matches_a_plain_loop_on_random_steps():
    rng = np.random.default_rng(5)
    rows = []
    for _ in range(300):
        b = int(rng.integers(1, 9))
        c = rng.integers(1, 50, size=b) * (rng.random(b) < 0.4) + 1
        x = rng.integers(0, 1000, size=b)
        rows.append((b, int(c.sum()), ";".join(map(str, c)), ";".join(map(str, x))))
    df = pd.DataFrame(rows, columns=["batch_size", "total_tokens", "chunk_sizes", "context_lens"])
    f = step_features(df)
    for i, (_, _, cs, xs) in enumerate(rows):
        c = np.array(cs.split(";"), float)
        x = np.array(xs.split(";"), float)
        assert f["ctx_sum"][i] == x.sum() and f["ctx_max"][i] == x.max()
        assert f["attn"][i] == pytest.approx(np.sum(c * (x + c / 2)), rel=1e-14)
        assert f["decode_ctx"][i] == x[c == 1].sum()
        assert f["prefill_sq"][i] == np.sum(c[c > 1] ** 2)
        assert f["chunk_sd"][i] == pytest.approx(np.std(c), rel=1e-12, abs=1e-12)


def test_step_features_without_lists_and_errors():
    f = step_features(pd.DataFrame({"batch_size": [1, 2], "total_tokens": [3, 4]}))
    assert set(f) == {"B", "S"}
    with pytest.raises(InputError, match=r"missing columns \['total_tokens'\]"):
        step_features(pd.DataFrame({"batch_size": [1]}))
    bad = pd.DataFrame({"batch_size": [2], "total_tokens": [2], "chunk_sizes": ["1"],
                        "context_lens": ["0"]})
    with pytest.raises(InputError, match="different from batch_size in 1 row"):
        step_features(bad)


def test_has_context():
    df = good_frame()
    assert has_context(df)
    assert not has_context(df.drop(columns=["context_lens"]))
    df.loc[0, "context_lens"] = None
    assert not has_context(df)


def test_time_order_prefers_step_then_timestamp_then_rows():
    df = pd.DataFrame({"step": [2, 0, 1], "timestamp": [0.0, 1.0, 2.0]})
    assert time_order(df).tolist() == [1, 2, 0]
    assert time_order(df.drop(columns=["step"])).tolist() == [0, 1, 2]
    assert time_order(pd.DataFrame({"timestamp": [3.0, 1.0, 2.0]})).tolist() == [1, 2, 0]
    assert time_order(pd.DataFrame({"x": [5, 4]})).tolist() == [0, 1]
    with pytest.raises(InputError, match="column 'step'"):
        time_order(pd.DataFrame({"step": [1, None]}))


def test_max_count_boundary_is_exact():
    """2^40 is accepted, 2^40 + 1 refused: the test on parsed values is exact below 2^53."""
    from perfmodel.data.trace import MAX_COUNT

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
