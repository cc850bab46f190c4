"""The step-trace schema: read, alias, validate, and turn into model features.

Problem
-------
A step-latency model is fitted to a *step trace*: one row per engine step
("model run") giving the number of requests ``B`` scheduled in the step, the
number of tokens ``S`` it computes and its wall time ``T`` in milliseconds.
Traces come from different collectors and papers with different column names,
file formats and defects (missing values, impossible steps, per-request lists
that disagree with the totals).  This module maps them onto one canonical
schema and refuses, with one message naming column, rows and count, anything
that is not a valid step.

Canonical columns
-----------------
``batch_size`` (int, ``B >= 1``), ``total_tokens`` (int, ``S >= B``: every
scheduled request computes at least one token), ``duration_ms`` (float,
``T > 0``) are required.  Optional: ``step`` (int) and ``timestamp`` (float
seconds) give the time order; ``chunk_sizes`` and ``context_lens`` are
per-request integers joined by ``';'`` in the same request order
(``chunk_sizes`` sums to ``S``; ``context_lens`` counts the tokens each request
had computed before the step); ``num_decode`` and ``num_prefill`` (ints,
summing to ``B``).  Every other column (collector extras such as
``forward_ms``, ``cpu_ms``; dataset extras such as ``config``, ``phase``)
passes through unchanged.

Row numbers
-----------
Every message gives row numbers as **0-based data rows**: the first row after
the header of a CSV file (or the first line of a JSON Lines file, the first
row of a Parquet file, position 0 of a DataFrame) is row 0.

Examples
--------
>>> import pandas as pd
>>> df = validate_trace(pd.DataFrame({"B": [1, 2], "S": [1, 9], "T": [5.0, 7.5]}))
>>> list(df.columns), describe_aliases(df)
(['batch_size', 'total_tokens', 'duration_ms'], "batch_size <- 'B', total_tokens <- 'S', duration_ms <- 'T'")
"""
from __future__ import annotations

import contextlib
import csv
import itertools
import json
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from perfmodel._checks import rows_text
from perfmodel._io import sha256_file
from perfmodel.data.features import request_features, row_reduce
from perfmodel.data.typed_trace import (
    NotCanonical,
    arrow_list_parts,
    is_arrow_list,
    read_typed,
    text_list_to_arrow,
)
from perfmodel.errors import InputError

__all__ = [
    "ALIASES",
    "CANONICAL_COLUMNS",
    "LIST_COLUMNS",
    "MAX_COUNT",
    "MIN_DURATION_MS",
    "REQUIRED_COLUMNS",
    "ROW_CONVENTION",
    "ListColumn",
    "check_degenerate",
    "check_step_columns",
    "describe_aliases",
    "has_context",
    "parse_int_list",
    "parse_list_column",
    "read_trace",
    "resolve_aliases",
    "step_features",
    "time_order",
    "trace_sha256",
    "validate_trace",
]

REQUIRED_COLUMNS: tuple[str, ...] = ("batch_size", "total_tokens", "duration_ms")
LIST_COLUMNS: tuple[str, ...] = ("chunk_sizes", "context_lens")
CANONICAL_COLUMNS: tuple[str, ...] = (
    "step", "timestamp", "batch_size", "total_tokens", "duration_ms",
    "chunk_sizes", "context_lens", "num_decode", "num_prefill",
)

#: Accepted alternative names of each canonical column.  Matching ignores
#: case, surrounding blanks, and treats ``-`` and spaces as ``_``.
#: ``step_ms`` is *not* an alias of ``duration_ms``: the collector uses it for
#: the whole engine step (scheduling included), a different quantity.
ALIASES: dict[str, tuple[str, ...]] = {
    "batch_size": ("B", "batch", "bs", "num_reqs", "num_requests", "num_running_reqs",
                   "num_seqs", "n_reqs"),
    "total_tokens": ("S", "tokens", "num_tokens", "total_scheduled_tokens",
                     "total_num_scheduled_tokens", "num_batched_tokens",
                     "num_scheduled_tokens"),
    "duration_ms": ("T", "model_run_duration_ms", "model_run_ms", "latency_ms", "time_ms",
                    "step_time_ms", "duration"),
    "step": ("step_id", "step_idx", "iteration", "iter"),
    "timestamp": ("timestamp_s", "time_s", "ts"),
    "chunk_sizes": ("chunks", "chunk_lens", "num_scheduled_tokens_per_req"),
    "context_lens": ("context_lengths", "contexts", "num_computed_tokens", "computed_tokens"),
    "num_decode": ("n_decode", "num_decodes", "num_decode_reqs"),
    "num_prefill": ("n_prefill", "num_prefills", "num_prefill_reqs"),
}

ROW_CONVENTION = "row numbers are 0-based data rows, header not counted"

#: Largest value accepted in an integer column (``batch_size``, ``total_tokens``,
#: ``step``, ``num_decode``, ``num_prefill``, every item of ``chunk_sizes`` and
#: ``context_lens``): 2^40 (about 1.1e12), far above any real step and far
#: below 2^63, so no count, sum or product of counts the package forms can
#: wrap around in int64.  Values are compared as written (exactly below 2^53),
#: before any cast, so ``18446744073709551615`` (an "unsigned -1") or ``1e19``
#: are refused instead of wrapping to a negative count.
MAX_COUNT: int = 2 ** 40

#: Shortest step duration accepted by :func:`validate_trace` unless
#: ``allow_degenerate``: 1 microsecond (0.001 ms); no engine step is shorter
#: (a single GPU kernel launch takes several microseconds).
MIN_DURATION_MS: float = 1e-3

_MAX_ROWS_SHOWN = 5
_COMPRESSION = (".gz", ".bz2", ".xz", ".zst", ".zip")
_FORMATS = {
    ".csv": "csv", ".tsv": "tsv", ".parquet": "parquet", ".pq": "parquet",
    ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json",
}


def _norm(name) -> str:
    return str(name).strip().lower().replace("-", "_").replace(" ", "_")


_LOOKUP: dict[str, str] = {}
for _canon, _names in ALIASES.items():
    _LOOKUP[_norm(_canon)] = _canon
    for _a in _names:
        _LOOKUP[_norm(_a)] = _canon


# ---------------------------------------------------------------------------
# aliases
# ---------------------------------------------------------------------------

def resolve_aliases(columns) -> dict[str, str]:
    """Map column names onto canonical names.

    Parameters
    ----------
    columns : iterable of str
        Column names as found in a trace.

    Returns
    -------
    dict
        ``{original: canonical}`` for every column whose name is an alias of a
        canonical column (including case/spelling variants of the canonical
        name itself).  Columns that map to themselves, and extras, are absent.

    Raises
    ------
    InputError
        If a name occurs twice, or two columns map onto the same canonical
        column (e.g. both ``B`` and ``batch_size``).
    """
    cols = [str(c) for c in columns]
    dup = sorted(n for n, k in Counter(cols).items() if k > 1)
    if dup:
        raise InputError(f"duplicate column names {dup}; each column must appear once")
    targets: dict[str, list[str]] = {}
    for c in cols:
        canon = _LOOKUP.get(_norm(c))
        if canon is not None:
            targets.setdefault(canon, []).append(c)
    clashes = {k: v for k, v in targets.items() if len(v) > 1}
    if clashes:
        parts = [f"columns {v} all map to {k!r}" for k, v in clashes.items()]
        raise InputError(
            "duplicate column after aliasing: " + "; ".join(parts) + " (keep one of each, or "
            "rename the others to a name that is not an alias)"
        )
    return {v[0]: k for k, v in targets.items() if v[0] != k}


def describe_aliases(df_or_map) -> str:
    """Say in words which alias mapping a validated trace used.

    Parameters
    ----------
    df_or_map : DataFrame or dict
        A DataFrame returned by :func:`validate_trace` / :func:`read_trace`
        (reads ``attrs['alias_map']``), or an ``{original: canonical}`` dict.

    Returns
    -------
    str
        e.g. ``"batch_size <- 'B', total_tokens <- 'S', duration_ms <- 'T'"``,
        or ``"canonical column names (no aliases used)"``.
    """
    if isinstance(df_or_map, pd.DataFrame):
        amap = df_or_map.attrs.get("alias_map")
        if amap is None:
            raise InputError("describe_aliases: the DataFrame has no attrs['alias_map']; "
                             "pass it through validate_trace first")
    elif isinstance(df_or_map, Mapping):
        amap = df_or_map
    else:
        raise InputError(f"describe_aliases takes a DataFrame or a dict, got "
                         f"{type(df_or_map).__name__}")
    if not amap:
        return "canonical column names (no aliases used)"
    order = {c: i for i, c in enumerate(CANONICAL_COLUMNS)}
    items = sorted(amap.items(), key=lambda kv: order.get(kv[1], len(order)))
    return ", ".join(f"{canon} <- {orig!r}" for orig, canon in items)


# ---------------------------------------------------------------------------
# per-request lists
# ---------------------------------------------------------------------------

def _list_to_str(v) -> str | None:
    """Normalise one list cell to 'a;b;c' (None when missing); no int parsing."""
    if v is None:
        return None
    if isinstance(v, str):
        s = v.strip()
        if s[:1] == "[" and s[-1:] == "]":
            s = s[1:-1]
        s = s.replace(",", ";").replace(" ", "")
        if s == "" or s.lower() in ("nan", "none", "null"):
            return None
        return s
    if isinstance(v, (bool, np.bool_)):
        return "\x00"  # never a valid integer list
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        if not np.isfinite(v):
            return None
        return str(int(v)) if float(v).is_integer() else repr(float(v))
    if isinstance(v, (list, tuple, np.ndarray, pd.Series)):
        items = list(v)
        if not items:
            return None
        return ";".join(_list_item_str(x) for x in items)
    return "\x00"


def _list_item_str(x) -> str:
    if isinstance(x, (bool, np.bool_)):
        return "\x00"
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    if isinstance(x, (float, np.floating)) and np.isfinite(x) and float(x).is_integer():
        return str(int(x))
    return str(x).strip()


def parse_int_list(value) -> np.ndarray:
    """Parse one per-request list cell, e.g. ``"512;1;1"``, into integers.

    Accepts the canonical ``';'``-joined form, and also ``','`` separators,
    surrounding brackets (``"[512, 1, 1]"``), a single integer, and a Python
    or NumPy sequence of integers.  An empty string gives an empty array.

    Parameters
    ----------
    value : str, int or sequence of int

    Returns
    -------
    numpy.ndarray of int64

    Raises
    ------
    InputError
        If any item is not an integer (``"1;x"``, ``"1.5"``, ``"1;;2"``).
    """
    if isinstance(value, str) and value.strip() == "":
        return np.zeros(0, dtype=np.int64)
    s = _list_to_str(value)
    if s is None:
        raise InputError(f"parse_int_list: missing value {value!r}; expected integers joined "
                         "by ';' (e.g. '512;1;1')")
    try:
        return np.array([int(tok) for tok in s.split(";")], dtype=np.int64)
    except (ValueError, OverflowError):
        raise InputError(f"parse_int_list: {value!r} is not a list of integers joined by ';' "
                         "(e.g. '512;1;1')") from None


@dataclass
class _Lists:
    """Parsed list column: flat integers, per-row counts, and row status."""

    strings: np.ndarray  # normalised 'a;b;c' per row, '' where missing/bad
    missing: np.ndarray  # bool
    bad: np.ndarray  # bool: present but not a list of integers
    flat: np.ndarray  # int64, concatenation over good rows in row order
    counts: np.ndarray  # int64 per row (0 where missing/bad)

    @property
    def ok(self) -> np.ndarray:
        return ~(self.missing | self.bad)


# a canonical cell: integers of at most 18 digits (so int64 cannot overflow) joined by ';'
_CANON = r"-?\d{1,18}(?:;-?\d{1,18})*"
_INT64 = np.iinfo(np.int64)


def _canonical_cell(s: str) -> str | None:
    """Re-render a normalised cell as canonical integers, or None if it is not integers."""
    try:
        vals = [int(t) for t in s.split(";")]
    except ValueError:
        return None
    if any(v < _INT64.min or v > _INT64.max for v in vals):
        return None
    return ";".join(map(str, vals))


def _parse_lists(series: pd.Series) -> _Lists:
    """Parse a whole list column at once.

    Cells already in canonical form (checked with one vectorised regex) are
    taken as they are; only the others are normalised one by one.  All good
    cells are then joined and cast to int64 in a single ``numpy.fromstring``
    call, whose length is checked against the per-row counts.
    """
    if is_arrow_list(series):
        return _arrow_lists(series)
    n = len(series)
    raw = series.to_numpy(dtype=object)
    canon = np.zeros(n, dtype=bool)
    if n and (pd.api.types.is_string_dtype(series) or series.dtype == object):
        as_str = series.astype("string")
        canon = as_str.str.fullmatch(_CANON).to_numpy(dtype=bool, na_value=False)
        canon &= np.array([isinstance(v, str) for v in raw], dtype=bool)
    strs = np.empty(n, dtype=object)
    strs[canon] = raw[canon]
    missing = np.zeros(n, dtype=bool)
    bad = np.zeros(n, dtype=bool)
    for i in np.nonzero(~canon)[0]:
        c = _list_to_str(raw[i])
        if c is None:
            missing[i] = True
            continue
        c = _canonical_cell(c)
        if c is None:
            bad[i] = True
        else:
            strs[i] = c
    good = ~(missing | bad)
    counts = np.zeros(n, dtype=np.int64)
    counts[good] = [c.count(";") + 1 for c in strs[good]]
    if good.any():
        joined = ";".join(strs[good])
        flat = np.fromstring(joined, dtype=np.int64, sep=";")
        if flat.size != counts.sum():  # pragma: no cover - guarded by the regex above
            flat = np.array(joined.split(";"), dtype=np.int64)
    else:
        flat = np.zeros(0, dtype=np.int64)
    out = np.where(good, strs, "")
    return _Lists(out, missing, bad, flat, counts)


class ListColumn(NamedTuple):
    """A parsed per-request list column (:func:`parse_list_column`)."""

    #: int64: the items of the rows that parsed, in row order
    flat: np.ndarray
    #: int64 per row: the number of items (0 where missing or not a list of integers)
    counts: np.ndarray
    #: bool per row: the cell is a list of integers
    ok: np.ndarray


def parse_list_column(values) -> ListColumn:
    """Parse a whole column of per-request lists (``chunk_sizes``, ``context_lens``).

    Problem: per-request features need the items of every cell as one flat
    array; parse them at once (one vectorised pass for cells already in the
    canonical ``'a;b;c'`` form, cell by cell for the others) with the cell
    formats :func:`parse_int_list` accepts.  A missing or malformed cell is
    not an error here: it is marked in ``ok`` for the caller to report.

    Parameters
    ----------
    values : pandas.Series or sequence of cells

    Returns
    -------
    ListColumn
        ``flat``, ``counts`` and ``ok``; ``flat`` concatenates the rows with
        ``ok`` in row order.
    """
    series = values if isinstance(values, pd.Series) else pd.Series(list(values), dtype=object)
    L = _parse_lists(series)
    # int64 as documented (Arrow list columns keep their items in a smaller type)
    return ListColumn(L.flat.astype(np.int64, copy=False), L.counts, L.ok)


# ---------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------

@dataclass
class _Problem:
    column: str
    what: str
    mask: np.ndarray

    def message(self) -> str:
        rows = np.nonzero(self.mask)[0]
        shown = ", ".join(str(int(r)) for r in rows[:_MAX_ROWS_SHOWN])
        more = ", ..." if len(rows) > _MAX_ROWS_SHOWN else ""
        noun = "row" if len(rows) == 1 else "rows"
        return f"column {self.column!r}: {self.what} in {len(rows)} {noun} ({noun} {shown}{more})"


def _where(source) -> str:
    return f"trace {str(source)!r}" if source is not None else "trace"


def _odd_dtype(raw: pd.Series) -> str | None:
    """The kind of a column that looks numeric to pandas but is not a number of this schema."""
    if pd.api.types.is_bool_dtype(raw):
        return "booleans"
    if pd.api.types.is_complex_dtype(raw):
        return "complex numbers"
    if pd.api.types.is_datetime64_any_dtype(raw) or isinstance(raw.dtype, pd.PeriodDtype):
        return "dates"
    if pd.api.types.is_timedelta64_dtype(raw):
        return "time differences (timedelta)"
    if raw.dtype == object and len(raw):
        kinds = {type(v) for v in raw.to_numpy(dtype=object)[:1000]}
        if kinds & {complex, np.complex64, np.complex128}:
            return "complex numbers"
    return None


def _numeric(df, col, problems, *, integer=False, label=None) -> np.ndarray:
    """Coerce a column to float, recording non-numeric, non-finite and non-integer rows.

    Integer columns (``integer=True``) are also checked against
    :data:`MAX_COUNT`, on the values as parsed (before any cast to int64).
    """
    raw = df[col]
    odd = _odd_dtype(raw)
    if odd is not None:
        vals = np.full(len(raw), np.nan)
        problems.append(_Problem(col, f"non-numeric values ({odd})", np.ones(len(raw), bool)))
        return vals
    num = pd.to_numeric(raw, errors="coerce")
    with np.errstate(all="ignore"):
        vals = num.to_numpy(dtype=float, na_value=np.nan)
    missing_raw = raw.isna().to_numpy(dtype=bool, copy=True)
    if raw.dtype == object or pd.api.types.is_string_dtype(raw):
        s = raw.astype("string").str.strip().str.lower()
        words = s.isin(["", "nan", "none", "null", "na", "<na>"])
        missing_raw |= words.to_numpy(dtype=bool, na_value=True)
    nonnum = np.isnan(vals) & ~missing_raw
    if nonnum.any():
        problems.append(_Problem(col, "non-numeric values", nonnum))
    nonfinite = ~np.isfinite(vals) & ~nonnum
    if nonfinite.any():
        problems.append(_Problem(col, "missing, NaN or infinite values", nonfinite))
    if integer:
        fin = np.isfinite(vals)
        nonint = np.zeros(len(vals), bool)
        nonint[fin] = vals[fin] != np.floor(vals[fin])
        if nonint.any():
            problems.append(_Problem(col, f"non-integer {label or 'values'}", nonint))
        _check_max(col, raw, vals, problems)
    return vals


def _check_max(col: str, raw, vals: np.ndarray, problems: list[_Problem]) -> None:
    """Integers above :data:`MAX_COUNT` (``vals`` as parsed; an exact test below 2^53).

    A value above 2^40 stays above it as a float (rounding is monotone), so
    the test on the parsed floats is exact; the message shows the first bad
    value as it was written.
    """
    too_big = np.isfinite(vals) & (np.abs(vals) > MAX_COUNT)
    if too_big.any():
        first = raw.iloc[int(np.flatnonzero(too_big)[0])] if hasattr(raw, "iloc") else None
        shown = f"{first}" if first is not None else f"{vals[too_big][0]:.6g}"
        problems.append(_Problem(col, f"values beyond the maximum {MAX_COUNT} (2^40) of an "
                                      f"integer column, e.g. {shown}", too_big))


def _numeric_column(df: pd.DataFrame, col: str, problems: list[str]) -> np.ndarray:
    """Column as float; a missing/non-numeric entry is reported in ``problems``."""
    a = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(a)
    if bad.any():
        problems.append(f"column `{col}` has missing or non-numeric values at "
                        f"{rows_text(bad, df.index)}")
    return a


def check_step_columns(df, *, need_y: bool, name: str = "df") -> dict[str, np.ndarray]:
    """Check the step columns of a trace; return ``B``, ``S`` (and ``T`` when ``need_y``).

    Problem: estimators and split functions that take a trace (the baselines,
    :mod:`perfmodel.stats.validation`) need ``batch_size``, ``total_tokens`` and, to
    fit, ``duration_ms`` as finite numbers with ``B >= 1``, ``S >= B`` and
    ``T > 0``, without the full :func:`validate_trace`.  Rows are named by
    the DataFrame's index labels.

    Parameters
    ----------
    df : pandas.DataFrame
    need_y : bool
        Also check and return ``duration_ms`` as ``T``.
    name : str, default 'df'
        The argument as messages name it.

    Returns
    -------
    dict of str -> numpy.ndarray of float

    Raises
    ------
    InputError
        One message listing every problem found (column, first rows, count).
    """
    b, s, t = REQUIRED_COLUMNS
    if not isinstance(df, pd.DataFrame):
        raise InputError(f"`{name}` must be a pandas DataFrame (a step trace), "
                         f"got {type(df).__name__}")
    need = [b, s] + ([t] if need_y else [])
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise InputError(f"`{name}` lacks column(s) {missing}; has {list(df.columns)[:12]}")
    if len(df) == 0:
        raise InputError(f"`{name}` has no rows")
    problems: list[str] = []
    B, S = _numeric_column(df, b, problems), _numeric_column(df, s, problems)
    with np.errstate(invalid="ignore"):
        if (B < 1).any():
            problems.append(f"column `{b}` must be >= 1; fails at {rows_text(B < 1, df.index)}")
        if (S < B).any():
            problems.append(f"column `{s}` must be >= `{b}`; fails at "
                            f"{rows_text(S < B, df.index)}")
    out = {"B": B, "S": S}
    if need_y:
        T = _numeric_column(df, t, problems)
        with np.errstate(invalid="ignore"):
            if (T <= 0).any():
                problems.append(f"column `{t}` must be > 0; fails at "
                                f"{rows_text(T <= 0, df.index)}")
        out["T"] = T
    if problems:
        raise InputError(f"`{name}`: " + "; ".join(problems))
    return out


def _check_columns(df: pd.DataFrame, where: str, require_duration: bool):
    """Structure: aliases resolved, rows present, required columns there (raises at once).

    Returns ``(frame under canonical names, alias map)``.
    """
    present = [str(c) for c in df.columns]
    try:
        amap = resolve_aliases(df.columns)
    except InputError as e:
        raise InputError(f"{where}: {e}") from None
    if len(df) == 0:
        raise InputError(f"{where} is empty: no data rows (columns present: {present})")
    out = df.copy()
    out.columns = present
    out = out.rename(columns=amap)
    required = [c for c in REQUIRED_COLUMNS if require_duration or c != "duration_ms"]
    missing = [c for c in required if c not in out.columns]
    if missing:
        raise InputError(
            f"{where}: missing required columns {missing} (columns present: {present}; "
            f"accepted aliases: " + "; ".join(f"{c}: {list(ALIASES[c])}" for c in missing) + ")"
        )
    return out, amap


def _check_step_values(out: pd.DataFrame, problems: list[_Problem], *,
                       allow_degenerate: bool = False):
    """``B``, ``S``, ``T``: numeric, finite, integer where they count, in range.

    Returns ``(B, S, okB, okS)``; ``okB``/``okS`` mark the rows where ``B``
    and ``S`` are valid integers (the later checks compare against them there only).
    """
    B = _numeric(out, "batch_size", problems, integer=True, label="B")
    S = _numeric(out, "total_tokens", problems, integer=True, label="S")
    with np.errstate(invalid="ignore"):
        if (m := np.isfinite(B) & (B < 1)).any():
            problems.append(_Problem("batch_size", "B < 1", m))
        # later checks compare against B and S only where those are valid integers
        okB = np.isfinite(B) & (B >= 1) & (B == np.floor(B))
        okS = np.isfinite(S) & (S == np.floor(S))
        if (m := okB & okS & (S < B)).any():
            problems.append(_Problem(
                "total_tokens", "S < B (every scheduled request computes at least one token)", m))
    if "duration_ms" in out.columns:
        T = _numeric(out, "duration_ms", problems)
        with np.errstate(invalid="ignore"):
            if (m := np.isfinite(T) & (T <= 0)).any():
                problems.append(_Problem("duration_ms", "T <= 0", m))
            if not allow_degenerate and (
                    m := np.isfinite(T) & (T > 0) & (T < MIN_DURATION_MS)).any():
                problems.append(_Problem(
                    "duration_ms", f"durations below 1 microsecond (T < {MIN_DURATION_MS} ms; "
                                   "milliseconds expected, allow_degenerate / "
                                   "--allow-degenerate to fit them)", m))
    return B, S, okB, okS


def check_degenerate(df, *, source=None) -> None:
    """Refuse a validated trace whose rows are all the same step.

    Problem: a trace in which every row is identical (same ``batch_size``,
    ``total_tokens``, ``duration_ms`` and per-request lists) holds one
    measurement however many rows it has: a fit to it "succeeds" with every
    parameter unidentified.  :func:`validate_trace` calls this unless
    ``allow_degenerate``.

    Parameters
    ----------
    df : pandas.DataFrame
        A trace in the canonical schema.
    source : str or path, optional
        Named in the message.

    Raises
    ------
    InputError
        ``"trace 'x.csv' is degenerate: every row identical (...)"``.
    """
    if not isinstance(df, pd.DataFrame):
        raise InputError(f"check_degenerate takes a pandas DataFrame, got {type(df).__name__}")
    cols = [c for c in (*REQUIRED_COLUMNS, *LIST_COLUMNS) if c in df.columns]
    if len(df) < 2 or "duration_ms" not in cols:
        return
    def constant(col: str) -> bool:  # O(n), stops at the first column that varies
        a = df[col].to_numpy()
        return bool(np.all(a[1:] == a[0]))

    if all(constant(c) for c in cols):
        first = {c: df[c].iloc[0] for c in REQUIRED_COLUMNS}
        vals = ", ".join(f"{c}={v!r}" for c, v in first.items())
        raise InputError(f"{_where(source)} is degenerate: every row identical ({len(df)} rows, "
                         f"{vals}): one measurement, nothing to fit; pass allow_degenerate=True "
                         "(--allow-degenerate) to use it anyway")


def _check_optional_columns(out: pd.DataFrame, problems: list[_Problem], B, okB) -> None:
    """``step``, ``timestamp``, ``num_decode``, ``num_prefill`` where present."""
    if "step" in out.columns:
        _numeric(out, "step", problems, integer=True, label="step numbers")
    if "timestamp" in out.columns:
        _numeric(out, "timestamp", problems)
    counts = {}
    for col in ("num_decode", "num_prefill"):
        if col in out.columns:
            v = _numeric(out, col, problems, integer=True, label="counts")
            with np.errstate(invalid="ignore"):
                if (m := np.isfinite(v) & (v < 0)).any():
                    problems.append(_Problem(col, "negative counts", m))
            counts[col] = v
    if len(counts) == 2:
        tot = counts["num_decode"] + counts["num_prefill"]
        with np.errstate(invalid="ignore"):
            m = np.isfinite(tot) & okB & (tot != B)
        if m.any():
            problems.append(_Problem("num_decode", "num_decode + num_prefill != batch_size", m))


def _check_lists(out: pd.DataFrame, problems: list[_Problem], B, S, okB, okS) -> dict[str, _Lists]:
    """The per-request lists ``chunk_sizes``, ``context_lens`` where present; returns them parsed."""
    lists: dict[str, _Lists] = {}
    for col in LIST_COLUMNS:
        if col not in out.columns:
            continue
        L = _parse_lists(out[col])
        lists[col] = L
        if L.missing.any():
            problems.append(_Problem(col, "missing values", L.missing))
        if L.bad.any():
            problems.append(_Problem(col, "cells that are not integers joined by ';'", L.bad))
        ok = L.ok
        if ok.any() and len(L.flat):
            flat = L.flat.astype(float)
            if (m := ok & (row_reduce(np.abs(flat), L.counts, "max") > MAX_COUNT)).any():
                first = int(L.flat[np.abs(flat) > MAX_COUNT][0])
                problems.append(_Problem(col, f"items beyond the maximum {MAX_COUNT} (2^40) of "
                                              f"an integer column, e.g. {first}", m))
            lo = row_reduce(L.flat, L.counts, "min")
            if col == "chunk_sizes":
                if (m := ok & (lo < 1)).any():
                    problems.append(_Problem(col, "a chunk size < 1 (each scheduled request "
                                                  "computes at least one token)", m))
                tot = row_reduce(L.flat, L.counts, "sum")
                if (m := ok & okS & (tot != S)).any():
                    problems.append(_Problem(col, "chunk sizes whose sum differs from "
                                                  "total_tokens", m))
            elif (m := ok & (lo < 0)).any():
                problems.append(_Problem(col, "a negative context length", m))
        if (m := ok & okB & (L.counts != B)).any():
            problems.append(_Problem(col, "a number of items different from batch_size", m))
    if len(lists) == 2:
        a, b = lists["chunk_sizes"], lists["context_lens"]
        if (m := a.ok & b.ok & (a.counts != b.counts)).any():
            problems.append(_Problem("context_lens",
                                     "a number of items different from chunk_sizes", m))
    return lists


def _drop_or_raise(problems: list[_Problem], n: int, where: str, drop_invalid: bool):
    """One message listing every problem (raised), or the rows to drop and why.

    Returns ``(invalid row mask, dropped (row, reason) list, summary)``.
    """
    invalid = np.zeros(n, dtype=bool)
    for p in problems:
        invalid |= p.mask
    dropped: list[tuple[int, str]] = []
    summary = "no rows dropped"
    if problems:
        msg = f"{where}: " + "; ".join(p.message() for p in problems) + f" [{ROW_CONVENTION}]"
        if not drop_invalid:
            raise InputError(msg)
        if invalid.all():
            raise InputError(f"{where}: all {n} rows are invalid, nothing left after dropping: "
                             + msg[len(where) + 2:])
        reasons: dict[int, list[str]] = {}
        for p in problems:
            for r in np.nonzero(p.mask)[0]:
                reasons.setdefault(int(r), []).append(f"{p.column}: {p.what}")
        dropped = [(r, "; ".join(reasons[r])) for r in sorted(reasons)]
        tally = Counter(f"{p.column}: {p.what}" for p in problems for _ in range(int(p.mask.sum())))
        summary = (f"dropped {len(dropped)} of {n} rows ("
                   + ", ".join(f"{k} x{v}" for k, v in tally.items()) + f"; {ROW_CONVENTION})")
    return invalid, dropped, summary


def _canonical_types(out: pd.DataFrame, B, S, lists: dict[str, _Lists]) -> pd.DataFrame:
    """int64 counts, float64 times, list cells as 'a;b;c' strings."""
    out["batch_size"] = B.astype(np.int64)
    out["total_tokens"] = S.astype(np.int64)
    if "duration_ms" in out.columns:
        out["duration_ms"] = pd.to_numeric(out["duration_ms"]).astype(float)
    for col in ("step", "num_decode", "num_prefill"):
        if col in out.columns:
            out[col] = pd.to_numeric(out[col]).astype(np.int64)
    if "timestamp" in out.columns:
        out["timestamp"] = pd.to_numeric(out["timestamp"]).astype(float)
    for col, L in lists.items():
        if L.strings is not None:
            out[col] = out[col].astype(str)
    return out


def validate_trace(df, *, drop_invalid: bool = False, source=None,
                   require_duration: bool = True, allow_degenerate: bool = False) -> pd.DataFrame:
    """Check a step trace and return it under canonical column names.

    Problem: turn a table from any collector into the canonical step-trace
    schema (module docstring), or say precisely why it is not one.

    Checks, in one pass, reporting every problem found in ONE
    :class:`~perfmodel.errors.InputError` whose message names, for each
    problem, the column, what is wrong, how many rows and the first five rows
    (0-based data rows, see :data:`ROW_CONVENTION`):

    * structure: no rows; duplicate column names, or two columns that alias
      the same canonical column; missing required columns (all listed, with
      the columns present);
    * ``batch_size``/``total_tokens``/``duration_ms``: non-numeric, missing,
      NaN or infinite values; ``B < 1``; non-integer ``B`` or ``S``;
      ``S < B``; ``T <= 0``;
    * ``step``, ``timestamp``, ``num_decode``, ``num_prefill`` (if present):
      non-numeric or non-finite; non-integer step or counts; negative counts;
      ``num_decode + num_prefill != B`` when both are present;
    * ``chunk_sizes``, ``context_lens`` (if present): missing cells, cells that
      are not lists of integers, a count of items different from ``B`` or
      from each other, a chunk size < 1, a negative context, chunk sizes
      whose sum differs from ``S``;
    * integer columns (``B``, ``S``, ``step``, ``num_*``, list items): values
      beyond :data:`MAX_COUNT` (2^40), tested before any cast to int64;
    * degenerate traces, unless ``allow_degenerate``: durations below 1
      microsecond (:data:`MIN_DURATION_MS`), and a trace with a
      ``duration_ms`` column whose rows are all identical
      (:func:`check_degenerate`).

    Parameters
    ----------
    df : pandas.DataFrame
        The trace, with canonical names or aliases (:data:`ALIASES`).
    drop_invalid : bool, default False
        Drop invalid rows instead of raising.  The dropped rows are reported
        in ``attrs['dropped']`` (list of ``(row, reason)``) and
        ``attrs['dropped_summary']``; a trace with no valid row still raises.
        Structural problems (missing or duplicate columns) always raise.
    source : str or path, optional
        Named in messages (e.g. the file name).
    require_duration : bool, default True
        ``False`` accepts a trace without ``duration_ms`` (a design to predict
        on); a ``duration_ms`` column, if present, is still checked.
    allow_degenerate : bool, default False
        Accept sub-microsecond durations and a trace of identical rows.

    Returns
    -------
    pandas.DataFrame
        A new frame, index reset to 0..n-1, canonical names, ``batch_size``
        and ``total_tokens`` (and ``step``/``num_*`` when present) as int64,
        ``duration_ms``/``timestamp`` as float64, list cells normalised to
        ``'a;b;c'`` (Arrow ``list<int>`` columns, from ``read_trace(...,
        lists='arrow')``, are kept as they are); every other column unchanged.  ``attrs``: ``alias_map``
        (``{original: canonical}``), ``dropped``, ``dropped_summary``,
        ``n_rows_in``, ``source``.

    Raises
    ------
    InputError
    """
    if not isinstance(df, pd.DataFrame):
        raise InputError(f"validate_trace takes a pandas DataFrame, got {type(df).__name__}")
    for name, v in (("drop_invalid", drop_invalid), ("require_duration", require_duration),
                    ("allow_degenerate", allow_degenerate)):
        if not isinstance(v, (bool, np.bool_)):
            raise InputError(f"validate_trace: {name} must be True or False, got {v!r}")
    where = _where(source)
    out, amap = _check_columns(df, where, require_duration)
    problems: list[_Problem] = []
    n = len(out)
    B, S, okB, okS = _check_step_values(out, problems, allow_degenerate=allow_degenerate)
    _check_optional_columns(out, problems, B, okB)
    lists = _check_lists(out, problems, B, S, okB, okS)
    invalid, dropped, summary = _drop_or_raise(problems, n, where, drop_invalid)
    if problems:
        keep = ~invalid
        out = out.loc[keep]
        for col, L in lists.items():
            if L.strings is not None:  # text lists normalised; Arrow lists are kept as they are
                out[col] = L.strings[keep]
        B, S = B[keep], S[keep]
    else:
        for col, L in lists.items():
            if L.strings is not None:
                out[col] = L.strings
    out = _canonical_types(out.reset_index(drop=True), B, S, lists)
    if not allow_degenerate and require_duration:
        check_degenerate(out, source=source)

    out.attrs = {k: v for k, v in df.attrs.items()}
    out.attrs.update(alias_map=dict(amap), dropped=dropped, dropped_summary=summary,
                     n_rows_in=int(n), source=None if source is None else str(source))
    return out

# ---------------------------------------------------------------------------
# reading files
# ---------------------------------------------------------------------------

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
    df = None
    if lists == "arrow":
        try:
            df = _read_typed(p, fmt)
        except (NotCanonical, ImportError):
            df = None
    reader = "general" if df is None else "typed"
    try:
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
    if fmt in ("json", "jsonl"):
        _check_json_duplicates(p)
    out = validate_trace(df, drop_invalid=drop_invalid, source=p,
                         require_duration=require_duration, allow_degenerate=allow_degenerate)
    del df
    if lists == "arrow" and reader == "general":
        for col in LIST_COLUMNS:
            if col in out.columns and not is_arrow_list(out[col]):
                out[col] = text_list_to_arrow(out[col])
    out.attrs["sha256"] = trace_sha256(p)
    out.attrs["format"] = fmt
    out.attrs["reader"] = reader
    return out


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
        list_cols = {c: str for c in head.columns if _LOOKUP.get(_norm(c)) in LIST_COLUMNS}
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
    dup = sorted(n for n, k in Counter(names).items() if k > 1)
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
        dup = sorted(k for k, c in Counter(keys).items() if c > 1)
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
    return read_typed(p, fmt, lambda c: _LOOKUP.get(_norm(c)) in LIST_COLUMNS)


def _arrow_lists(series: pd.Series) -> _Lists:
    """:class:`_Lists` of an Arrow ``list<int>`` column, from its items and offsets (no text)."""
    flat, counts, missing, bad = arrow_list_parts(series)
    return _Lists(None, missing, bad, flat, counts)


def trace_sha256(path) -> str:
    """Return the hex sha256 of a trace file's bytes (for provenance records)."""
    return sha256_file(_check_file(path))


# ---------------------------------------------------------------------------
# features and order
# ---------------------------------------------------------------------------

def has_context(df) -> bool:
    """True when the trace has per-request ``chunk_sizes`` and ``context_lens`` for every row."""
    if not isinstance(df, pd.DataFrame):
        raise InputError(f"has_context takes a pandas DataFrame, got {type(df).__name__}")
    return all(c in df.columns and not df[c].isna().any() for c in LIST_COLUMNS)


def step_features(df, *, counts_keys: bool = False) -> dict[str, np.ndarray]:
    """Compute the per-step features that the model family uses, from a trace.

    Problem: models see a step through a few numbers; read them from a trace
    (each list column is parsed at once) and compute them with the package's
    one feature kernel, :func:`perfmodel.data.features.request_features`, whose
    module documents the definitions.

    Keys (float64 arrays, one value per row):

    * ``B``, ``S`` - always (the ``batch_size`` and ``total_tokens`` columns);
    * when ``chunk_sizes`` and ``context_lens`` are present,
      :data:`perfmodel.data.features.CONTEXT_KEYS`: with ``c_i`` the chunk size and
      ``ctx_i`` the prior context of request ``i``: ``ctx_sum = sum ctx_i``;
      ``ctx_max = max ctx_i``; ``attn = sum c_i (ctx_i + c_i/2)`` (query-key
      pairs, causal half of the own chunk); ``attn_prefill`` = the same sum
      over prefill chunks (``c_i > 1``) only; ``decode_ctx = sum of ctx_i
      over c_i == 1``; ``prefill_sq = sum of c_i^2 over c_i > 1``;
      ``chunk_sd`` = population standard deviation of the ``c_i``;
    * with ``counts_keys``, also :data:`perfmodel.data.features.COUNT_KEYS`
      (``n_decode``, ``n_prefill``, ``s_prefill``, ``max_chunk``).

    Verified against hand-computed values in ``tests/data/test_trace.py``.

    Parameters
    ----------
    df : pandas.DataFrame
        A trace in the canonical schema (``validate_trace``); ``duration_ms``
        is not needed.
    counts_keys : bool, default False
        Add the per-step request counts.

    Returns
    -------
    dict of str -> numpy.ndarray

    Raises
    ------
    InputError
        Missing ``batch_size``/``total_tokens``, non-finite values, or list
        cells that do not parse or whose count differs from ``batch_size``.
    """
    if not isinstance(df, pd.DataFrame):
        raise InputError(f"step_features takes a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in ("batch_size", "total_tokens") if c not in df.columns]
    if missing:
        raise InputError(f"step_features: missing columns {missing} (columns present: "
                         f"{[str(c) for c in df.columns]}); pass the trace through "
                         "validate_trace first")
    problems: list[_Problem] = []
    B = _numeric(df, "batch_size", problems)
    S = _numeric(df, "total_tokens", problems)
    if problems:
        raise InputError("step_features: " + "; ".join(p.message() for p in problems)
                         + f" [{ROW_CONVENTION}]")
    feats = {"B": B, "S": S}
    if not all(c in df.columns for c in LIST_COLUMNS):
        return feats
    Lc, Lx = _parse_lists(df["chunk_sizes"]), _parse_lists(df["context_lens"])
    for col, L in (("chunk_sizes", Lc), ("context_lens", Lx)):
        if (~L.ok).any():
            problems.append(_Problem(col, "missing or unparseable lists", ~L.ok))
        elif (m := L.counts != B).any():
            problems.append(_Problem(col, "a number of items different from batch_size", m))
    if problems:
        raise InputError("step_features: " + "; ".join(p.message() for p in problems)
                         + f" [{ROW_CONVENTION}]; pass the trace through validate_trace first")
    f = _blockwise_features(Lc.flat, Lx.flat, Lc.counts, counts_keys)
    feats.update((k, v) for k, v in f.items() if k not in feats)
    return feats


#: requests per block of the feature kernel (bounds its float64 temporaries to some 10 MB each)
FEATURE_BLOCK = 1 << 20


def _blockwise_features(chunks, contexts, counts, counts_keys: bool) -> dict[str, np.ndarray]:
    """:func:`request_features` over blocks of whole steps, concatenated.

    Every feature is a per-step reduction over that step's requests in their
    order, so a block gives the same bits as the whole trace (the kernel's
    Numerics); only the temporaries shrink from the whole trace's requests
    to a block's.
    """
    if chunks.size <= FEATURE_BLOCK:
        return request_features(chunks, contexts, counts, counts_keys=counts_keys)
    ends = np.cumsum(counts)
    parts: list[dict[str, np.ndarray]] = []
    row = 0
    while row < counts.size:
        first = 0 if row == 0 else int(ends[row - 1])
        stop = int(np.searchsorted(ends, first + FEATURE_BLOCK, side="right"))
        stop = max(stop, row + 1)
        last = int(ends[stop - 1])
        parts.append(request_features(chunks[first:last], contexts[first:last],
                                      counts[row:stop], counts_keys=counts_keys))
        row = stop
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def time_order(df) -> np.ndarray:
    """Positions of the rows in time order.

    Problem: time-series diagnostics and cross-validation need the order in
    which steps ran.  Uses ``step`` if present, else ``timestamp``, else the
    row order; ties keep row order (stable sort).

    Returns
    -------
    numpy.ndarray of int64
        ``df.iloc[time_order(df)]`` is the trace in time order.
    """
    if not isinstance(df, pd.DataFrame):
        raise InputError(f"time_order takes a pandas DataFrame, got {type(df).__name__}")
    for col in ("step", "timestamp"):
        if col in df.columns:
            v = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
            if not np.isfinite(v).all():
                bad = _Problem(col, "missing or non-numeric values", ~np.isfinite(v))
                raise InputError(f"time_order: {bad.message()} [{ROW_CONVENTION}]")
            return np.argsort(v, kind="stable").astype(np.int64)
    return np.arange(len(df), dtype=np.int64)
