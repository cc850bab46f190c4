"""The typed, chunked trace reader: compact columns for fleet-size traces.

Problem
-------
A trace of millions of steps with per-request ``chunk_sizes`` and
``context_lens`` holds some 20 integers per list cell; as text (one Python
string per cell) and then as parsed lists it needs many times the memory of
its numbers.  This module reads an uncompressed CSV/TSV or Parquet trace in
record batches of :data:`BATCH_ROWS` rows with pyarrow, keeps numeric
columns as the file types them, and turns each list column, batch by batch,
into an Arrow ``list<int>`` column: the flat items (of the smallest integer
type that holds every value) plus one offset per row.  Those columns sit in
the DataFrame as ``pandas.ArrowDtype`` and are read without text by
:func:`perfmodel.data.trace.step_features` and
:func:`perfmodel.data.trace.validate_trace` (through :func:`arrow_list_parts`).

Only canonical cells take this path: integers joined by ``';'`` with
nothing else (no blanks, brackets, signs other than a leading ``-``, empty
items).  Anything else raises :class:`NotCanonical` and the caller
(:func:`perfmodel.data.trace.read_trace`) reads the file with its general
reader, whose checks name every problem.

Verified against the general reader (same validated values and bit-identical
step features) in ``tests/data/test_typed_trace.py``.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from perfmodel.errors import InputError

__all__ = ["BATCH_ROWS", "NotCanonical", "arrow_list_parts", "is_arrow_list", "read_typed",
           "text_list_to_arrow", "typed_list"]

#: rows per record batch of the chunked reader (bounds the parsing temporaries)
BATCH_ROWS = 262_144
#: bytes per block of the Arrow CSV reader
_CSV_BLOCK = 16 << 20
#: integer types of the list items, smallest first (the one that holds every value is kept)
_INT_TYPES = ("int16", "int32", "int64")


class NotCanonical(Exception):
    """The file needs the general reader (a cell or column the typed reader does not take)."""


def int_type(lo: int, hi: int):
    import pyarrow as pa

    for name in _INT_TYPES:
        info = np.iinfo(name)
        if info.min <= lo and hi <= info.max:
            return getattr(pa, name)()
    return pa.int64()  # pragma: no cover - cast to int64 already bounds the values


def typed_list(arr):
    """A batch's list column as Arrow ``list<intN>``, N the smallest that holds its items.

    Takes canonical text cells (``'a;b;c'``) or integer lists; raises
    :class:`NotCanonical` for anything else.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    t = arr.type
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        if not pa.types.is_integer(t.value_type) or arr.null_count or arr.flatten().null_count:
            raise NotCanonical
        offsets, items = arr.offsets, arr.flatten()
        if pa.types.is_large_list(t):
            offsets = pc.cast(offsets, pa.int32())
    elif (pa.types.is_string(t) or pa.types.is_large_string(t)) and not arr.null_count:
        parts = pc.split_pattern(arr, ";")
        try:
            items = pc.cast(parts.flatten(), pa.int64())  # rejects '', ' 1', '1.5', '[1', 'x'
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise NotCanonical from None
        offsets = parts.offsets
        if pa.types.is_large_list(parts.type):
            offsets = pc.cast(offsets, pa.int32())
    else:
        raise NotCanonical
    offsets = pc.subtract(offsets, offsets[0]) if len(offsets) and offsets[0].as_py() else offsets
    mm = pc.min_max(items)
    lo, hi = (mm["min"].as_py() or 0), (mm["max"].as_py() or 0)
    return pa.ListArray.from_arrays(offsets, pc.cast(items, int_type(lo, hi)))


def batches(p: Path, fmt: str, list_cols: list[str]):
    """Record batches of ``BATCH_ROWS`` rows: list columns as text or lists, others typed."""
    import pyarrow as pa

    if fmt == "parquet":
        import pyarrow.parquet as pq

        # pre_buffer=False: Arrow's pre-buffering cache keeps every row group's compressed
        # bytes until the file is closed (some 200 MB more at the peak of a 5M-step trace)
        yield from pq.ParquetFile(p, pre_buffer=False).iter_batches(batch_size=BATCH_ROWS)
        return
    import pyarrow.csv as pcsv

    reader = pcsv.open_csv(
        p, read_options=pcsv.ReadOptions(block_size=_CSV_BLOCK),
        parse_options=pcsv.ParseOptions(delimiter="," if fmt == "csv" else "\t"),
        convert_options=pcsv.ConvertOptions(column_types={c: pa.string() for c in list_cols}))
    for b in reader:
        for i in range(0, b.num_rows, BATCH_ROWS):
            yield b.slice(i, BATCH_ROWS)


def plain_type(t) -> bool:
    import pyarrow as pa

    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
            or pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t))


def read_typed(p: Path, fmt: str, is_list: Callable[[str], bool]) -> pd.DataFrame:
    """Read a canonical trace file in record batches into compact typed columns.

    Numeric columns keep the type the file gives them; the per-request
    lists (the columns ``is_list`` names) become Arrow ``list<int>`` columns
    (``pandas.ArrowDtype``) whose items have the smallest integer type that
    holds every value (the flat items plus one offset per row: no Python
    object per cell).  Raises :class:`NotCanonical` for anything else (list
    cells not in the ``'a;b;c'`` form, columns of other types): the caller's
    general reader then reads the file and reports its problems.

    Memory: each batch's numeric and list columns are copied into compact
    numpy pieces as the batch arrives and the batch is dropped (Arrow's pool
    handed back), so the file's decoded batches never all exist next to
    the result; the pieces are then joined one column at a time, each piece
    freed once copied (:class:`_Pieces`).
    """
    import pyarrow as pa

    names: list[str] | None = None
    cols: dict[str, _Pieces] = {}
    pool = pa.default_memory_pool()
    try:
        for b in batches(p, fmt, list_names(p, fmt, is_list)):
            if names is None:
                names = list(b.schema.names)
                if len(set(names)) != len(names):
                    raise NotCanonical
                cols = {c: _Pieces(is_list(c)) for c in names}
            for c in names:
                cols[c].add(b.column(c))
            del b
            pool.release_unused()
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        raise NotCanonical from None
    if not names:
        raise NotCanonical
    return typed_frame(names, cols)


class _Pieces:
    """One column of the typed reader, batch by batch, as compact numpy pieces.

    A list column keeps per batch its offsets (from 0) and items (of the
    batch's smallest integer type, :func:`typed_list`); a numeric column
    without nulls its values.  A plain column of another kind (text,
    booleans, a numeric batch with nulls) keeps the Arrow batches and is
    converted by pandas at the end, as one chunked array.
    """

    def __init__(self, is_list: bool):
        self.is_list = is_list
        self.pieces: list = []
        self.arrow: list | None = None  # Arrow batches, once a batch is not plain numbers

    def add(self, col) -> None:
        import pyarrow as pa

        if self.is_list:
            typed = typed_list(col)
            off = typed.offsets.to_numpy()
            self.pieces.append((off - off[0], np.array(typed.values.to_numpy()[off[0]:off[-1]])))
            return
        if not plain_type(col.type):
            raise NotCanonical
        numeric = (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)) \
            and not col.null_count
        if self.arrow is None and not numeric:  # back to Arrow for the batches so far
            self.arrow = [pa.array(v) for v in self.pieces]
            self.pieces = []
        if self.arrow is not None:
            self.arrow.append(col)
        else:
            self.pieces.append(np.array(col.to_numpy()))  # a copy: the batch can go

    def column(self):
        """The whole column: a numpy array, an Arrow list Series, or pandas' conversion."""
        import pyarrow as pa

        if self.is_list:
            return _one_list_column(self.pieces)
        if self.arrow is not None:
            ch = pa.chunked_array(self.arrow)
            self.arrow = None
            return ch.to_pandas()
        return _one_numpy_column(self.pieces)


def list_names(p: Path, fmt: str, is_list: Callable[[str], bool]) -> list[str]:
    """The list columns of a CSV/TSV header (read as text); none for Parquet (typed there)."""
    if fmt == "parquet":
        return []
    head = pd.read_csv(p, sep="," if fmt == "csv" else "\t", nrows=0)
    return [str(c) for c in head.columns if is_list(str(c))]


def typed_frame(names: list[str], cols: dict) -> pd.DataFrame:
    """The DataFrame of the typed reader from each column's :class:`_Pieces`, one at a time."""
    import pyarrow as pa

    pool = pa.default_memory_pool()
    out = {}
    for c in names:
        out[c] = cols.pop(c).column()
        pool.release_unused()  # this column's batches: back to the system before the next
    return pd.DataFrame(out, copy=False)


def _one_numpy_column(pieces: list) -> np.ndarray:
    """Numpy pieces of one numeric type as one array, each piece dropped once copied."""
    if len(pieces) == 1:
        return pieces.pop()
    out = np.empty(sum(len(v) for v in pieces), pieces[0].dtype)
    at = 0
    while pieces:
        v = pieces.pop(0)
        out[at:at + len(v)] = v
        at += len(v)
        del v
    return out


def _one_list_column(pieces: list) -> pd.Series:
    """Per-batch ``(offsets, items)`` as one Arrow list column in the widest item type.

    The items and offsets are copied into numpy arrays of the final size,
    one batch at a time, each batch dropped once copied, and handed to Arrow
    without a further copy: the column never exists twice in memory (a
    concatenation would hold every batch and the result).  One chunk: its
    items then reach numpy without a copy (:func:`arrow_list_parts`).
    """
    import pyarrow as pa

    dtype = np.dtype(f"int{max((v.dtype.itemsize * 8 for _, v in pieces), default=16)}")
    t = pa.list_(pa.from_numpy_dtype(dtype))
    n_rows = sum(len(off) - 1 for off, _ in pieces)
    n_items = sum(len(v) for _, v in pieces)
    if n_items >= 2**31:  # beyond 32-bit list offsets: the general reader takes the file
        raise NotCanonical
    items = np.empty(n_items, dtype)
    offsets = np.empty(n_rows + 1, np.int32)
    offsets[0] = 0
    row = item = 0
    while pieces:
        off, v = pieces.pop(0)
        items[item:item + len(v)] = v
        offsets[row + 1:row + len(off)] = off[1:] + item
        row, item = row + len(off) - 1, item + len(v)
        del off, v
    arr = pa.ListArray.from_arrays(pa.array(offsets), pa.array(items))
    return pd.Series(pd.arrays.ArrowExtensionArray(pa.chunked_array([arr], t)))


def is_arrow_list(series) -> bool:
    import pyarrow as pa

    dt = getattr(series, "dtype", None)
    return isinstance(dt, pd.ArrowDtype) and pa.types.is_list(dt.pyarrow_dtype)


def arrow_list_parts(series: pd.Series):
    """An Arrow ``list<int>`` column as ``(flat, counts, missing, bad)``, without any text.

    ``flat``: the items of the rows that are lists of integers, in row order
    (their own integer type); ``counts`` (int64): items per row, 0 where
    missing or bad; ``missing``: a null cell or an empty list; ``bad``: a
    list with a missing item.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    ch = series.array.__arrow_array__()
    if not pa.types.is_integer(ch.type.value_type):
        raise InputError(f"column {series.name!r}: list items must be integers, got "
                         f"{ch.type.value_type}")
    missing = ch.is_null().to_numpy(zero_copy_only=False)
    counts = pc.fill_null(pc.list_value_length(ch), 0).to_numpy(zero_copy_only=False)
    bad = np.zeros(len(series), dtype=bool)
    flats, start = [], 0
    for c in ch.chunks:
        items = c.flatten()
        if items.null_count:  # a list with a missing item is not a list of integers
            parent = pc.list_parent_indices(c).to_numpy(zero_copy_only=False)
            null_item = items.is_null().to_numpy(zero_copy_only=False)
            bad[start + np.unique(parent[null_item])] = True
            items = items.filter(pa.array(~bad[start + parent]))
        flats.append(items.to_numpy(zero_copy_only=False))  # no copy: integers, no nulls
        start += len(c)
    flat = (flats[0] if len(flats) == 1 else
            np.concatenate(flats) if flats else np.zeros(0, np.int64))
    missing |= (counts == 0) & ~missing  # an empty list is no list, as an empty text cell
    counts = counts.astype(np.int64)
    counts[bad | missing] = 0
    return flat, counts, missing, bad




def text_list_to_arrow(series) -> pd.Series:
    """A validated text list column (``'a;b;c'`` cells) as a compact Arrow ``list<int>`` column.

    The items get the smallest integer type that holds every value.
    """
    import pyarrow as pa

    name = str(series.name)
    arr = pa.array(pd.Series(series, dtype=object).to_numpy(dtype=object), type=pa.string())
    col = _Pieces(is_list=True)
    try:
        col.add(arr)
    except NotCanonical:
        raise InputError(f"column {name!r}: cells are not integers joined by ';'; pass the "
                         "trace through validate_trace first") from None
    return col.column().set_axis(series.index)


def write_parquet(df: pd.DataFrame, path, *, force: bool = False) -> Path:
    """Write a validated trace as Parquet, the recommended format for large traces.

    Problem: a fleet-size trace as CSV is re-parsed on every read (text to
    numbers, ``'a;b;c'`` to lists); Parquet stores the typed columns and the
    per-request lists as native ``list<int>`` columns, compressed (zstd), so
    :func:`perfmodel.data.trace.read_trace` reads it back without parsing
    text.  Text list cells are converted first (:func:`text_list_to_arrow`).
    Written atomically through :func:`perfmodel._io.atomic_open` (refused
    if ``path`` exists, unless ``force``).

    Parameters
    ----------
    df : pandas.DataFrame
        A trace in the canonical schema (``validate_trace`` / ``read_trace``).
    path : str or path-like
    force : bool, default False

    Returns
    -------
    pathlib.Path
        The file written.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from perfmodel._io import atomic_open

    if not isinstance(df, pd.DataFrame):
        raise InputError(f"write_parquet takes a pandas DataFrame, got {type(df).__name__}")
    cols = {}
    for c in df.columns:
        s = df[c]
        if c in ("chunk_sizes", "context_lens") and not is_arrow_list(s):
            s = text_list_to_arrow(s)
        cols[str(c)] = s
    table = pa.Table.from_pandas(pd.DataFrame(cols, copy=False), preserve_index=False)
    table = table.replace_schema_metadata(None)  # no pandas metadata: any reader sees plain types
    with atomic_open(path, "wb", force=force) as fh:
        pq.write_table(table, fh, compression="zstd", row_group_size=BATCH_ROWS * 4)
    return Path(path)
