"""Tests of perfmodel.data.typed_trace: the typed, chunked reader gives what the general one gives."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("pyarrow", reason="the typed reader needs pyarrow (perfmodel[parquet])")

from perfmodel.core.synthetic import simulate_trace
from perfmodel.data import trace as T
from perfmodel.data import typed_trace as TT
from perfmodel.data.features import row_reduce
from perfmodel.errors import InputError


@pytest.fixture(scope="module")
def trace_csv(tmp_path_factory):
    p = tmp_path_factory.mktemp("typed") / "t.csv"
    simulate_trace(n=600, noise="multiplicative", seed=4).to_csv(p, index=False)
    return p


def _same_values(a: pd.DataFrame, b: pd.DataFrame):
    assert list(a.columns) == list(b.columns) and len(a) == len(b)
    for c in a.columns:
        if c in T.LIST_COLUMNS:
            fa, ca, _ = T.parse_list_column(a[c])
            fb, cb, _ = T.parse_list_column(b[c])
            np.testing.assert_array_equal(fa, fb)
            np.testing.assert_array_equal(ca, cb)
        else:
            np.testing.assert_array_equal(a[c].to_numpy(), b[c].to_numpy())


def test_typed_csv_read_equals_the_general_one_with_bit_identical_features(trace_csv):
    typed = T.read_trace(trace_csv, lists="arrow")
    text = T.read_trace(trace_csv)
    assert typed.attrs["reader"] == "typed" and text.attrs["reader"] == "general"
    assert isinstance(typed["chunk_sizes"].dtype, pd.ArrowDtype)
    assert text["chunk_sizes"].iloc[0].count(";") + 1 == text["batch_size"].iloc[0]
    _same_values(typed, text)
    fa, fb = T.step_features(typed, counts_keys=True), T.step_features(text, counts_keys=True)
    assert fa.keys() == fb.keys()
    for k in fa:
        np.testing.assert_array_equal(fa[k], fb[k])


@pytest.mark.parametrize("batch_rows", [1, TT.BATCH_ROWS])
def test_list_items_get_the_smallest_integer_type(tmp_path, monkeypatch, batch_rows):
    monkeypatch.setattr(TT, "BATCH_ROWS", batch_rows)  # 1: each batch typed alone, then widened
    p = tmp_path / "t.csv"
    df = pd.DataFrame({"B": [2, 1], "S": [3, 1], "T": [1.0, 2.0],
                       "chunk_sizes": ["2;1", "1"], "context_lens": ["0;70000", "5"]})
    df.to_csv(p, index=False)
    out = T.read_trace(p, lists="arrow")
    assert out.attrs["reader"] == "typed"
    assert str(out["chunk_sizes"].dtype.pyarrow_dtype.value_type) == "int16"
    assert str(out["context_lens"].dtype.pyarrow_dtype.value_type) == "int32"
    assert T.step_features(out)["ctx_sum"].tolist() == [70000.0, 5.0]
    assert T.step_features(out)["S"].tolist() == [3.0, 1.0]


def test_non_canonical_cells_take_the_general_reader(tmp_path):
    p = tmp_path / "t.csv"
    pd.DataFrame({"B": [2, 1], "S": [3, 1], "T": [1.0, 2.0],
                  "chunk_sizes": ["[2, 1]", "1"], "context_lens": ["0;7", "5"]}).to_csv(p, index=False)
    out = T.read_trace(p, lists="arrow")
    assert out.attrs["reader"] == "general"
    assert isinstance(out["chunk_sizes"].dtype, pd.ArrowDtype)  # converted after validation
    assert T.step_features(out)["S"].tolist() == [3.0, 1.0]


def test_a_bad_trace_gets_the_general_message(tmp_path):
    p = tmp_path / "t.csv"
    pd.DataFrame({"B": [2, 1], "S": [4, 1], "T": [1.0, 2.0],
                  "chunk_sizes": ["2;1", "1"], "context_lens": ["0;7", "5"]}).to_csv(p, index=False)
    with pytest.raises(InputError) as typed:
        T.read_trace(p, lists="arrow")
    with pytest.raises(InputError) as text:
        T.read_trace(p)
    assert str(typed.value) == str(text.value)
    assert "sum differs from total_tokens" in str(typed.value)
    dropped = T.read_trace(p, lists="arrow", drop_invalid=True)
    assert len(dropped) == 1 and dropped.attrs["dropped"][0][0] == 0
    assert dropped.attrs["reader"] == "typed"


def test_parquet_round_trip_keeps_lists_typed(trace_csv, tmp_path):
    src = T.read_trace(trace_csv)
    out = TT.write_parquet(src, tmp_path / "t.parquet")
    import pyarrow.parquet as pq

    schema = pq.read_schema(out)
    assert str(schema.field("chunk_sizes").type.value_type) == "int16"
    typed = T.read_trace(out, lists="arrow")
    assert typed.attrs["reader"] == "typed"
    _same_values(typed, src)
    back = T.read_trace(out)  # the default: text cells, as from the CSV
    assert back["chunk_sizes"].tolist() == src["chunk_sizes"].tolist()
    with pytest.raises(InputError, match="exists"):
        TT.write_parquet(src, out)


def test_row_reduce_sums_integers_exactly_like_bincount():
    rng = np.random.default_rng(0)
    counts = rng.integers(0, 5, 50)
    vals = rng.integers(0, 30000, counts.sum()).astype(np.int16)
    rows = np.repeat(np.arange(counts.size), counts)
    ref = np.bincount(rows, weights=vals.astype(float), minlength=counts.size)
    np.testing.assert_array_equal(row_reduce(vals, counts, "sum"), ref)


def test_arrow_list_with_a_missing_item_is_a_bad_row():
    import pyarrow as pa

    s = pd.Series(pd.arrays.ArrowExtensionArray(pa.array([[1, 2], [3, None], None, []],
                                                         pa.list_(pa.int32()))))
    flat, counts, missing, bad = TT.arrow_list_parts(s)
    assert flat.tolist() == [1, 2] and counts.tolist() == [2, 0, 0, 0]
    assert missing.tolist() == [False, False, True, True]
    assert bad.tolist() == [False, True, False, False]


def test_read_trace_refuses_an_unknown_lists_mode(trace_csv):
    with pytest.raises(InputError, match="lists must be 'text' or 'arrow'"):
        T.read_trace(trace_csv, lists="numpy")


def test_row_reduce_integer_sums_in_blocks_equal_one_pass(monkeypatch):
    import perfmodel.data.features as F

    rng = np.random.default_rng(1)
    counts = rng.integers(0, 6, 400)
    vals = rng.integers(0, 4000, counts.sum()).astype(np.int16)
    whole = row_reduce(vals, counts, "sum")
    monkeypatch.setattr(F, "_SUM_BLOCK", 5)
    np.testing.assert_array_equal(row_reduce(vals, counts, "sum"), whole)
    rows = np.repeat(np.arange(counts.size), counts)
    np.testing.assert_array_equal(whole, np.bincount(rows, weights=vals, minlength=counts.size))


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_typed_read_in_small_batches_equals_the_general_read_with_the_same_dtypes(
        trace_csv, tmp_path, monkeypatch, fmt):
    """Columns assembled batch by batch (numpy columns, one Arrow list column) as one read."""
    path = trace_csv
    if fmt == "parquet":
        path = TT.write_parquet(T.read_trace(trace_csv), tmp_path / "t.parquet")
    whole = T.read_trace(path, lists="arrow")
    monkeypatch.setattr(TT, "BATCH_ROWS", 7)  # 600 rows: 86 batches, the last one short
    small = T.read_trace(path, lists="arrow")
    assert small.attrs["reader"] == "typed"
    assert list(small.dtypes.astype(str)) == list(whole.dtypes.astype(str))
    _same_values(small, whole)
    _same_values(small, T.read_trace(trace_csv))
    arr = small["chunk_sizes"].array.__arrow_array__()
    assert arr.num_chunks == 1  # one chunk: its items reach numpy without a copy


def test_a_numeric_column_with_nulls_in_a_later_batch_reads_as_the_general_reader(
        tmp_path, monkeypatch):
    """Batches already kept as numpy pieces go back to Arrow once a batch has a null."""
    monkeypatch.setattr(TT, "BATCH_ROWS", 2)
    p = tmp_path / "t.csv"
    pd.DataFrame({"B": [1, 2, 1, 2, 1, 2], "S": [1, 3, 1, 3, 1, 2],
                  "T": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
                  "extra": [1, 2, 3, 4, None, 6], "note": list("abcdef"),
                  "chunk_sizes": ["1", "2;1", "1", "1;2", "1", "1;1"],
                  "context_lens": ["0", "5;6", "7", "8;9", "1", "2;3"]}).to_csv(p, index=False)
    typed, text = T.read_trace(p, lists="arrow"), T.read_trace(p)
    assert typed.attrs["reader"] == "typed"
    assert typed["extra"].dtype == text["extra"].dtype == np.float64
    np.testing.assert_array_equal(typed["extra"].to_numpy(), text["extra"].to_numpy())
    assert typed["note"].tolist() == list("abcdef")
    _same_values(typed.drop(columns="note"), text.drop(columns="note"))
