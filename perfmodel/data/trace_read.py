"""Read a step-trace file: format detection, parsing, and checks the parsers skip.

Problem
-------
Traces are stored as CSV/TSV, Parquet or JSON (Lines), possibly compressed,
and each parser has its own ways to fail and to hide defects (pandas renames
a repeated CSV header ``B`` to ``B.1``; the json module keeps the last of two
equal keys).  :func:`read_trace` picks the parser from the extension, turns
every parser failure into one :class:`~perfmodel.errors.InputError` naming
the file, refuses repeated column names, and hands the table to
:func:`perfmodel.data.trace_validate.validate_trace`.  Large uncompressed
files can go through the typed, chunked reader of
:mod:`perfmodel.data.typed_trace`.

Verified on every format and every kind of unreadable file in
``tests/data/test_trace_read.py``, and against the general reader in
``tests/data/test_typed_trace.py``.
"""
from __future__ import annotations

import contextlib
import csv
import itertools
import json
import os
from pathlib import Path

import pandas as pd

from perfmodel._io import sha256_file
from perfmodel.data.trace_schema import LIST_COLUMNS, canonical_name, duplicate_names
from perfmodel.data.trace_validate import validate_trace
from perfmodel.data.typed_trace import (
    NotCanonical,
    is_arrow_list,
    read_typed,
    text_list_to_arrow,
)
from perfmodel.errors import InputError

__all__ = ["RUN_COLUMN", "read_runs", "read_trace", "trace_sha256"]

#: the column :func:`read_runs` adds: the engine run (trace file) of each step
RUN_COLUMN = "run"

_COMPRESSION = (".gz", ".bz2", ".xz", ".zst", ".zip")
_FORMATS = {
    ".csv": "csv", ".tsv": "tsv", ".parquet": "parquet", ".pq": "parquet",
    ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json",
}


def _format_of(path: Path) -> tuple[str | None, str]:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in _COMPRESSION:
        suffixes = suffixes[:-1]
    ext = suffixes[-1] if suffixes else ""
    return _FORMATS.get(ext), ext


def _check_file(path) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise InputError(f"trace path must be a str or path, got {type(path).__name__}")
    p = Path(path)
    if not p.exists():
        raise InputError(f"trace file {str(p)!r} does not exist")
    if not p.is_file():
        raise InputError(f"trace path {str(p)!r} is not a file")
    return p


def read_trace(path, *, drop_invalid: bool = False, require_duration: bool = True,
               allow_degenerate: bool = False, lists: str = "text") -> pd.DataFrame:
    """Read a step trace from CSV, Parquet or JSON Lines and validate it.

    Problem: load a trace file of any supported format and return it in the
    canonical schema (see :func:`validate_trace` for the checks).

    The format follows the extension: ``.csv`` (``.tsv`` tab-separated),
    ``.parquet``/``.pq`` (through pandas/pyarrow), ``.jsonl``/``.ndjson``
    (JSON Lines, one object per step), ``.json`` (an array of objects, or JSON
    Lines); a trailing ``.gz``/``.bz2``/``.xz``/``.zst``/``.zip`` is
    decompressed.  ``chunk_sizes``/``context_lens`` are read as text (a
    single-request ``'7'`` stays a list); JSON/Parquet lists are accepted and
    normalised to ``'a;b;c'``.

    Large traces: with ``lists='arrow'``, an uncompressed CSV/TSV or Parquet
    file whose list cells are in the canonical ``'a;b;c'`` form (or are
    integer lists in Parquet) is read in record batches of
    :data:`BATCH_ROWS` rows by pyarrow, numeric columns typed as the file
    gives them, and the lists kept as compact Arrow ``list<int>`` columns
    (``pandas.ArrowDtype``; items of the smallest integer type holding every
    value, plus one offset per row) that :func:`step_features` and
    :func:`validate_trace` read without any text.  Any other file (or cell)
    takes the general path, whose lists are converted after validation.  On
    a 5,000,000-step trace this needs a fraction of the memory of text cells
    (``benchmarks/bench_large_trace.py``; README, "Large traces").

    Parameters
    ----------
    path : str or path-like
    drop_invalid : bool, default False
        See :func:`validate_trace`.
    require_duration, allow_degenerate : bool
        See :func:`validate_trace`.
    lists : {'text', 'arrow'}, default 'text'
        How ``chunk_sizes``/``context_lens`` come back: ``'a;b;c'`` text, or
        Arrow ``list<int>`` columns (above).

    Returns
    -------
    pandas.DataFrame
        As :func:`validate_trace`; ``attrs`` also holds ``sha256`` (of the
        file's bytes), ``format`` and ``reader`` (``'typed'`` or ``'general'``).

    Raises
    ------
    InputError
        The file does not exist, is empty, has an unknown extension, cannot be
        parsed in its format, or fails validation.
    """
    p = _check_file(path)
    fmt, ext = _format_of(p)
    if fmt is None:
        raise InputError(
            f"trace file {str(p)!r}: unknown format {ext or '(no extension)'!r}; "
            f"use one of {sorted(_FORMATS)} (optionally compressed {list(_COMPRESSION)})"
        )
    if lists not in ("text", "arrow"):
        raise InputError(f"lists must be 'text' or 'arrow', got {lists!r}")
    if p.stat().st_size == 0:
        raise InputError(f"trace file {str(p)!r} is empty (0 bytes)")
    df, reader = _load(p, fmt, lists)
    if fmt in ("json", "jsonl"):
        _check_json_duplicates(p)
    out = validate_trace(df, drop_invalid=drop_invalid, source=p,
                         require_duration=require_duration, allow_degenerate=allow_degenerate)
    del df
    if reader == "typed":  # Arrow's allocator keeps what validation freed: hand it back
        import pyarrow as pa

        pa.default_memory_pool().release_unused()
    if lists == "arrow" and reader == "general":
        for col in LIST_COLUMNS:
            if col in out.columns and not is_arrow_list(out[col]):
                out[col] = text_list_to_arrow(out[col])
    out.attrs["sha256"] = trace_sha256(p)
    out.attrs["format"] = fmt
    out.attrs["reader"] = reader
    return out


def _run_names(paths: list[Path]) -> list[str]:
    """A distinct short name per file: its stem, else ``parent/stem`` where stems repeat."""
    names = [p.stem for p in paths]
    if len(set(names)) < len(names):
        names = [f"{p.parent.name}/{p.stem}" for p in paths]
    if len(set(names)) < len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise InputError(f"two traces share the name {dup[0]!r}; give each run its own file name")
    return names


def read_runs(paths, **kwargs) -> pd.DataFrame:
    """Read several trace files, each one engine run, into one trace with a run column.

    Problem: intervals that must hold on a *new* run of an engine are
    calibrated across runs (:func:`perfmodel.stats.intervals.calibrate_intervals`
    with ``run_column``), which needs the steps of several runs told apart.

    Each file is read with :func:`read_trace` (``kwargs``) and gets
    :data:`RUN_COLUMN` = its file stem (``parent/stem`` where stems repeat).
    The fold engine keeps time blocks inside one ``replicate``
    (:func:`perfmodel.stats.folds.fold_groups`), so ``replicate`` becomes
    ``<run>:<replicate>`` (just ``<run>`` for a file without it): the
    replicates inside one file stay apart and no block spans two files.

    Parameters
    ----------
    paths : sequence of >= 2 trace paths
    **kwargs : passed to :func:`read_trace`

    Returns
    -------
    pandas.DataFrame, files in the order given; ``attrs['runs']`` lists the
    run names, ``attrs['sha256']`` the files' hashes, ``attrs['dropped']`` the
    rows dropped by ``drop_invalid`` in all files.

    Verified in ``tests/data/test_trace_read.py`` (labels, replicate, refusals).
    """
    paths = [_check_file(p) for p in paths]
    if len(paths) < 2:
        raise InputError(f"read_runs needs >= 2 trace files, got {len(paths)}")
    names = _run_names(paths)
    parts, dropped = [], []
    for p, name in zip(paths, names):
        d = read_trace(p, **kwargs)
        if RUN_COLUMN in d.columns:
            raise InputError(f"trace {str(p)!r} already has a column {RUN_COLUMN!r}: give it "
                             f"alone and name that column as the run column")
        rep = d["replicate"].astype(str) if "replicate" in d.columns else None
        d[RUN_COLUMN] = name
        d["replicate"] = name if rep is None else name + ":" + rep
        dropped.extend(d.attrs.get("dropped") or [])
        parts.append(d)
    out = pd.concat(parts, ignore_index=True)
    out.attrs = {"runs": names, "sha256": [d.attrs.get("sha256") for d in parts],
                 "alias_map": parts[0].attrs.get("alias_map"), "dropped": dropped}
    return out


def _load(p: Path, fmt: str, lists: str) -> tuple[pd.DataFrame, str]:
    """The raw table of a file and the reader that gave it (``'typed'`` or ``'general'``).

    Every failure of either reader becomes one :class:`InputError` naming
    the file: empty, an optional package missing, or unreadable in its
    format.  A file the typed reader does not take (:class:`NotCanonical`, or
    no pyarrow) goes to the general one.
    """
    try:
        df = None
        if lists == "arrow":
            with contextlib.suppress(NotCanonical, ImportError):
                df = _read_typed(p, fmt)
        reader = "general" if df is None else "typed"
        if df is None:
            df = _read(p, fmt)
    except InputError:
        raise
    except pd.errors.EmptyDataError:
        raise InputError(f"trace file {str(p)!r} is empty (no header, no rows)") from None
    except ImportError as e:
        raise InputError(f"trace file {str(p)!r}: {_missing_package_hint(e, fmt)}") from None
    except Exception as e:  # noqa: BLE001 - parsers raise many types; any is a bad file
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise InputError(f"trace file {str(p)!r} cannot be read as {fmt}: {detail}") from None
    return df, reader


# keep values as written: no dtype guessing, and (pandas < 3) no date parsing of a
# 'timestamp' column; pandas 3 deprecates convert_dates and dtype=False covers it
_JSON_KW = {"dtype": False}
if int(pd.__version__.split(".")[0]) < 3:  # pragma: no cover - depends on the install
    _JSON_KW["convert_dates"] = False


def _read(p: Path, fmt: str) -> pd.DataFrame:
    if fmt in ("csv", "tsv"):
        sep = "," if fmt == "csv" else "\t"
        head = pd.read_csv(p, sep=sep, nrows=0)
        _check_header_duplicates(p, sep)
        list_cols = {c: str for c in head.columns if canonical_name(c) in LIST_COLUMNS}
        return pd.read_csv(p, sep=sep, dtype=list_cols or None)
    if fmt == "parquet":
        return pd.read_parquet(p)
    if fmt == "jsonl":
        return pd.read_json(p, lines=True, **_JSON_KW)
    try:
        return pd.read_json(p, **_JSON_KW)
    except ValueError:
        return pd.read_json(p, lines=True, **_JSON_KW)


def _check_header_duplicates(p: Path, sep: str) -> None:
    """pandas renames a repeated header 'B' to 'B.1'; catch it before it does.

    The header line is read through pandas' own decompression (every
    compression :func:`read_trace` accepts), as text, without renaming.
    """
    with pd.io.common.get_handle(p, "r", compression="infer", encoding="utf-8",
                                 errors="replace") as h:
        header = next(csv.reader(h.handle, delimiter=sep), [])
    names = [h.strip() for h in header]
    dup = duplicate_names(names)
    if dup:
        raise InputError(f"trace file {str(p)!r}: duplicate column names {dup} in the header")


#: JSON Lines objects scanned for repeated keys (json keeps the last silently)
_JSON_SCAN_LINES = 10_000


def _check_json_duplicates(p: Path) -> None:
    """Refuse an object with a key twice ("B" twice: the json parsers keep the last one).

    JSON Lines: the first :data:`_JSON_SCAN_LINES` lines; a JSON array: the
    whole document.  Through pandas' decompression, as for CSV.
    """
    def hook(pairs):
        keys = [k for k, _ in pairs]
        dup = duplicate_names(keys)
        if dup:
            raise InputError(f"trace file {str(p)!r}: duplicate column names {dup} in an object")
        return dict(pairs)

    with pd.io.common.get_handle(p, "r", compression="infer", encoding="utf-8",
                                 errors="replace") as h:
        fh = h.handle
        first = fh.read(1)
        while first.isspace():
            first = fh.read(1)
        if first == "[":
            with contextlib.suppress(json.JSONDecodeError):
                json.loads(first + fh.read(), object_pairs_hook=hook)
            return
        lines = itertools.chain([first + fh.readline()], fh)
        for line in itertools.islice(lines, _JSON_SCAN_LINES):
            if line.strip():
                with contextlib.suppress(json.JSONDecodeError):
                    json.loads(line, object_pairs_hook=hook)


def _missing_package_hint(e: ImportError, fmt: str) -> str:
    """Which optional package a read needs (zstandard for .zst, pyarrow for Parquet, ...)."""
    text = str(e)
    for pkg, extra in (("zstandard", "pip install zstandard"),
                       ("pyarrow", "pip install 'perfmodel[parquet]'"),
                       ("fastparquet", "pip install 'perfmodel[parquet]'")):
        if pkg in text or getattr(e, "name", None) == pkg:
            return f"reading it needs the optional package {pkg!r} ({extra})"
    name = getattr(e, "name", None) or text.splitlines()[0] if text else "?"
    return f"reading {fmt} needs an optional package that is not installed: {name}"


def _read_typed(p: Path, fmt: str) -> pd.DataFrame:
    """The typed, chunked reader (:mod:`perfmodel.data.typed_trace`) on an uncompressed file."""
    if fmt not in ("csv", "tsv", "parquet") or p.suffix.lower() in _COMPRESSION:
        raise NotCanonical
    if fmt != "parquet":
        _check_header_duplicates(p, "," if fmt == "csv" else "\t")
    return read_typed(p, fmt, lambda c: canonical_name(c) in LIST_COLUMNS)


def trace_sha256(path) -> str:
    """Return the hex sha256 of a trace file's bytes (for provenance records)."""
    return sha256_file(_check_file(path))
