"""Tests of perfmodel.data.trace_read: every format, unreadable files, provenance hash."""
from __future__ import annotations

import gzip
import hashlib

import pandas as pd
import pytest

from perfmodel.data.trace_features import step_features
from perfmodel.data.trace_read import read_trace, trace_sha256
from perfmodel.data.trace_schema import describe_aliases
from perfmodel.data.trace_validate import validate_trace
from perfmodel.errors import InputError


def _write(df, path):
    suffix = "".join(path.suffixes)
    if suffix.startswith(".csv"):
        df.to_csv(path, index=False)
    elif suffix == ".parquet":
        df.to_parquet(path, index=False)
    else:
        df.to_json(path, orient="records", lines=True)


@pytest.mark.parametrize("name", ["t.csv", "t.parquet", "t.jsonl", "t.ndjson", "t.csv.gz"])
def test_round_trip_each_format(tmp_path, name, good_frame):
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


@pytest.mark.parametrize("lists", ["text", "arrow"])
def test_a_file_without_a_header_is_refused_by_either_reader(tmp_path, lists):
    """The typed reader (lists='arrow') fails as the general one does: one InputError."""
    path = tmp_path / "blank.csv"
    path.write_text("\n\n")
    with pytest.raises(InputError, match=r"blank\.csv' is empty \(no header, no rows\)"):
        read_trace(path, lists=lists)


def test_read_runs_labels_each_file_and_keeps_replicates_apart(tmp_path, good_frame):
    from perfmodel.data.trace_read import read_runs

    df = validate_trace(good_frame())
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    df.to_csv(tmp_path / "a" / "trace.csv", index=False)
    df.assign(replicate=[1, 2, 1, 2][:len(df)]).to_csv(tmp_path / "b" / "trace.csv", index=False)
    out = read_runs([tmp_path / "a" / "trace.csv", tmp_path / "b" / "trace.csv"])
    assert out.attrs["runs"] == ["a/trace", "b/trace"] and len(out) == 2 * len(df)
    assert list(out["run"].unique()) == ["a/trace", "b/trace"]
    assert set(out["replicate"]) == {"a/trace", "b/trace:1", "b/trace:2"}
    df.to_csv(tmp_path / "x.csv", index=False)
    df.assign(run="r").to_csv(tmp_path / "y.csv", index=False)
    with pytest.raises(InputError, match="already has a column 'run'"):
        read_runs([tmp_path / "x.csv", tmp_path / "y.csv"])
    with pytest.raises(InputError, match=">= 2 trace files"):
        read_runs([tmp_path / "x.csv"])
    with pytest.raises(InputError, match="share the name"):
        read_runs([tmp_path / "x.csv", tmp_path / "x.csv"])
