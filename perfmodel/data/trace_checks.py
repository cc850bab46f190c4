"""The checks of a step trace: each finds the rows that break one rule of the schema.

Problem
-------
:func:`perfmodel.data.trace.validate_trace` must report every problem of a
trace in one message naming, for each, the column, what is wrong, how many
rows and the first rows.  Each checker here looks at one part of the schema
(:mod:`perfmodel.data.trace_schema`) and appends a :class:`Problem` (column,
what, row mask) instead of raising, so that all are collected:

* :func:`check_structure` - aliases, rows present, required columns (raises
  at once: nothing else can be checked without them);
* :func:`check_step_values` - ``batch_size``, ``total_tokens``, ``duration_ms``;
* :func:`check_optional_columns` - ``step``, ``timestamp``, ``num_decode``,
  ``num_prefill``;
* :func:`check_list_columns` - ``chunk_sizes``, ``context_lens``;

then :func:`drop_or_raise` turns the problems into one message, or into the
rows to drop.  :func:`check_degenerate` refuses a trace of identical rows,
and :func:`check_step_columns` is the light check the estimators use.

Every message is verified in ``tests/data/test_trace_checks.py``.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pandas as pd

from perfmodel._checks import rows_text
from perfmodel.data.features import row_reduce
from perfmodel.data.trace_lists import ListCells, parse_list_cells
from perfmodel.data.trace_schema import (
    ALIASES,
    LIST_COLUMNS,
    MAX_COUNT,
    MIN_DURATION_MS,
    REQUIRED_COLUMNS,
    ROW_CONVENTION,
    resolve_aliases,
)
from perfmodel.errors import InputError

__all__ = [
    "Problem",
    "check_degenerate",
    "check_list_columns",
    "check_optional_columns",
    "check_step_columns",
    "check_step_values",
    "check_structure",
    "drop_or_raise",
    "numeric_values",
    "require_frame",
    "where_text",
]

_MAX_ROWS_SHOWN = 5


@dataclass
class Problem:
    """One broken rule: the column, what is wrong, and the rows (bool mask) where it is."""

    column: str
    what: str
    mask: np.ndarray

    def message(self) -> str:
        rows = np.nonzero(self.mask)[0]
        shown = ", ".join(str(int(r)) for r in rows[:_MAX_ROWS_SHOWN])
        more = ", ..." if len(rows) > _MAX_ROWS_SHOWN else ""
        noun = "row" if len(rows) == 1 else "rows"
        return f"column {self.column!r}: {self.what} in {len(rows)} {noun} ({noun} {shown}{more})"


def where_text(source) -> str:
    """How messages name a trace: ``"trace 'x.csv'"``, or ``"trace"`` without a source."""
    return f"trace {str(source)!r}" if source is not None else "trace"


def require_frame(df, who: str) -> None:
    """Refuse anything but a DataFrame: ``"<who> takes a pandas DataFrame, got <type>"``."""
    if not isinstance(df, pd.DataFrame):
        raise InputError(f"{who} takes a pandas DataFrame, got {type(df).__name__}")


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


def numeric_values(df, col, problems, *, integer=False, label=None) -> np.ndarray:
    """Coerce a column to float, recording non-numeric, non-finite and non-integer rows.

    Integer columns (``integer=True``) are also checked against
    :data:`MAX_COUNT`, on the values as parsed (before any cast to int64).
    """
    raw = df[col]
    odd = _odd_dtype(raw)
    if odd is not None:
        vals = np.full(len(raw), np.nan)
        problems.append(Problem(col, f"non-numeric values ({odd})", np.ones(len(raw), bool)))
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
        problems.append(Problem(col, "non-numeric values", nonnum))
    nonfinite = ~np.isfinite(vals) & ~nonnum
    if nonfinite.any():
        problems.append(Problem(col, "missing, NaN or infinite values", nonfinite))
    if integer:
        fin = np.isfinite(vals)
        nonint = np.zeros(len(vals), bool)
        nonint[fin] = vals[fin] != np.floor(vals[fin])
        if nonint.any():
            problems.append(Problem(col, f"non-integer {label or 'values'}", nonint))
        _check_max(col, raw, vals, problems)
    return vals


def _check_max(col: str, raw, vals: np.ndarray, problems: list[Problem]) -> None:
    """Integers above :data:`MAX_COUNT` (``vals`` as parsed; an exact test below 2^53).

    A value above 2^40 stays above it as a float (rounding is monotone), so
    the test on the parsed floats is exact; the message shows the first bad
    value as it was written.
    """
    too_big = np.isfinite(vals) & (np.abs(vals) > MAX_COUNT)
    if too_big.any():
        first = raw.iloc[int(np.flatnonzero(too_big)[0])] if hasattr(raw, "iloc") else None
        shown = f"{first}" if first is not None else f"{vals[too_big][0]:.6g}"
        problems.append(Problem(col, f"values beyond the maximum {MAX_COUNT} (2^40) of an "
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


def check_structure(df: pd.DataFrame, where: str, require_duration: bool):
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
    out = df.copy(deep=False)  # copy-on-write (pandas >= 3): df's data is never written
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


def check_step_values(out: pd.DataFrame, problems: list[Problem], *,
                       allow_degenerate: bool = False):
    """``B``, ``S``, ``T``: numeric, finite, integer where they count, in range.

    Returns ``(B, S, okB, okS)``; ``okB``/``okS`` mark the rows where ``B``
    and ``S`` are valid integers (the later checks compare against them there only).
    """
    B = numeric_values(out, "batch_size", problems, integer=True, label="B")
    S = numeric_values(out, "total_tokens", problems, integer=True, label="S")
    with np.errstate(invalid="ignore"):
        if (m := np.isfinite(B) & (B < 1)).any():
            problems.append(Problem("batch_size", "B < 1", m))
        # later checks compare against B and S only where those are valid integers
        okB = np.isfinite(B) & (B >= 1) & (B == np.floor(B))
        okS = np.isfinite(S) & (S == np.floor(S))
        if (m := okB & okS & (S < B)).any():
            problems.append(Problem(
                "total_tokens", "S < B (every scheduled request computes at least one token)", m))
    if "duration_ms" in out.columns:
        T = numeric_values(out, "duration_ms", problems)
        with np.errstate(invalid="ignore"):
            if (m := np.isfinite(T) & (T <= 0)).any():
                problems.append(Problem("duration_ms", "T <= 0", m))
            if not allow_degenerate and (
                    m := np.isfinite(T) & (T > 0) & (T < MIN_DURATION_MS)).any():
                problems.append(Problem(
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
    require_frame(df, "check_degenerate")
    cols = [c for c in (*REQUIRED_COLUMNS, *LIST_COLUMNS) if c in df.columns]
    if len(df) < 2 or "duration_ms" not in cols:
        return
    def constant(col: str) -> bool:  # O(n), stops at the first column that varies
        a = df[col].to_numpy()
        return bool(np.all(a[1:] == a[0]))

    if all(constant(c) for c in cols):
        first = {c: df[c].iloc[0] for c in REQUIRED_COLUMNS}
        vals = ", ".join(f"{c}={v!r}" for c, v in first.items())
        raise InputError(f"{where_text(source)} is degenerate: every row identical ({len(df)} rows, "
                         f"{vals}): one measurement, nothing to fit; pass allow_degenerate=True "
                         "(--allow-degenerate) to use it anyway")


def check_optional_columns(out: pd.DataFrame, problems: list[Problem], B, okB) -> None:
    """``step``, ``timestamp``, ``num_decode``, ``num_prefill`` where present."""
    if "step" in out.columns:
        numeric_values(out, "step", problems, integer=True, label="step numbers")
    if "timestamp" in out.columns:
        numeric_values(out, "timestamp", problems)
    counts = {}
    for col in ("num_decode", "num_prefill"):
        if col in out.columns:
            v = numeric_values(out, col, problems, integer=True, label="counts")
            with np.errstate(invalid="ignore"):
                if (m := np.isfinite(v) & (v < 0)).any():
                    problems.append(Problem(col, "negative counts", m))
            counts[col] = v
    if len(counts) == 2:
        tot = counts["num_decode"] + counts["num_prefill"]
        with np.errstate(invalid="ignore"):
            m = np.isfinite(tot) & okB & (tot != B)
        if m.any():
            problems.append(Problem("num_decode", "num_decode + num_prefill != batch_size", m))


def check_list_columns(out: pd.DataFrame, problems: list[Problem], B, S, okB, okS) -> dict[str, ListCells]:
    """The per-request lists ``chunk_sizes``, ``context_lens`` where present; returns them parsed."""
    lists: dict[str, ListCells] = {}
    for col in LIST_COLUMNS:
        if col not in out.columns:
            continue
        L = parse_list_cells(out[col])
        lists[col] = L
        if L.missing.any():
            problems.append(Problem(col, "missing values", L.missing))
        if L.bad.any():
            problems.append(Problem(col, "cells that are not integers joined by ';'", L.bad))
        ok = L.ok
        if ok.any() and len(L.flat):
            # per-row extremes in the items' own type: no full-size float/abs copy of the items
            lo = row_reduce(L.flat, L.counts, "min")
            hi = row_reduce(L.flat, L.counts, "max")
            if (m := ok & ((hi > MAX_COUNT) | (lo < -MAX_COUNT))).any():
                first = int(L.flat[(L.flat > MAX_COUNT) | (L.flat < -MAX_COUNT)][0])
                problems.append(Problem(col, f"items beyond the maximum {MAX_COUNT} (2^40) of "
                                              f"an integer column, e.g. {first}", m))
            if col == "chunk_sizes":
                if (m := ok & (lo < 1)).any():
                    problems.append(Problem(col, "a chunk size < 1 (each scheduled request "
                                                  "computes at least one token)", m))
                tot = row_reduce(L.flat, L.counts, "sum")
                if (m := ok & okS & (tot != S)).any():
                    problems.append(Problem(col, "chunk sizes whose sum differs from "
                                                  "total_tokens", m))
            elif (m := ok & (lo < 0)).any():
                problems.append(Problem(col, "a negative context length", m))
        if (m := ok & okB & (L.counts != B)).any():
            problems.append(Problem(col, "a number of items different from batch_size", m))
    if len(lists) == 2:
        a, b = lists["chunk_sizes"], lists["context_lens"]
        if (m := a.ok & b.ok & (a.counts != b.counts)).any():
            problems.append(Problem("context_lens",
                                     "a number of items different from chunk_sizes", m))
    return lists


def drop_or_raise(problems: list[Problem], n: int, where: str, drop_invalid: bool):
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
