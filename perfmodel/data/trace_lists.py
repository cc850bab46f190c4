"""Per-request list cells of a step trace: parse and normalise ``chunk_sizes`` / ``context_lens``.

Problem
-------
A step's per-request lists arrive as ``'a;b;c'`` text, as ``'[a, b, c]'``,
as a single integer, as JSON/Parquet lists, or as Arrow ``list<int>``
columns (:mod:`perfmodel.data.typed_trace`).  Validation, the feature kernel
and the estimators need the same thing from all of them: the items of every
row as one flat int64 array, the number of items per row, which rows are
missing or not lists of integers, and (for text) the cell normalised to
``'a;b;c'``.  This module is the one parser; the rules a list must obey are
checked in :mod:`perfmodel.data.trace_checks`.

Verified in ``tests/data/test_trace_lists.py`` (every accepted and refused
cell form) and ``tests/data/test_typed_trace.py`` (Arrow and text lists give
the same items).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd

from perfmodel.data.typed_trace import arrow_list_parts, is_arrow_list
from perfmodel.errors import InputError

__all__ = [
    "ListCells",
    "ListColumn",
    "parse_int_list",
    "parse_list_cells",
    "parse_list_column",
]


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
class ListCells:
    """Parsed list column: flat integers, per-row counts, and row status.

    What :func:`parse_list_cells` returns: the row status that validation
    reports and the normalised text it writes back (``strings`` is None for
    an Arrow ``list<int>`` column, which is kept as it is).
    """

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


def parse_list_cells(series: pd.Series) -> ListCells:
    """Parse a whole list column at once, with the status of every row.

    The full result behind :func:`parse_list_column` (which keeps ``flat``,
    ``counts`` and ``ok``): also which rows are missing, which are not lists
    of integers, and the normalised ``'a;b;c'`` text of each good row.

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
    return ListCells(out, missing, bad, flat, counts)


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
    L = parse_list_cells(series)
    # int64 as documented (Arrow list columns keep their items in a smaller type)
    return ListColumn(L.flat.astype(np.int64, copy=False), L.counts, L.ok)


def _arrow_lists(series: pd.Series) -> ListCells:
    """:class:`ListCells` of an Arrow ``list<int>`` column, from its items and offsets (no text)."""
    flat, counts, missing, bad = arrow_list_parts(series)
    return ListCells(None, missing, bad, flat, counts)
