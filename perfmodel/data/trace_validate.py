"""Validate a step trace: run every check, drop or refuse, and return canonical types.

Problem
-------
Turn a table from any collector into the canonical step-trace schema
(:mod:`perfmodel.data.trace_schema`), or say precisely why it is not one.
:func:`validate_trace` runs the checkers of :mod:`perfmodel.data.trace_checks`
in order, collects every problem into one message (or drops the rows with
``drop_invalid``), and casts what is left to the canonical types.

Examples
--------
>>> import pandas as pd
>>> df = validate_trace(pd.DataFrame({"B": [1, 2], "S": [1, 9], "T": [5.0, 7.5]}))
>>> list(df.columns), df["batch_size"].dtype.name
(['batch_size', 'total_tokens', 'duration_ms'], 'int64')
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from perfmodel.data.trace_checks import (
    Problem,
    check_degenerate,
    check_list_columns,
    check_optional_columns,
    check_step_values,
    check_structure,
    drop_or_raise,
    require_frame,
    where_text,
)
from perfmodel.data.trace_lists import ListCells
from perfmodel.errors import InputError

__all__ = ["validate_trace"]


def _canonical_types(out: pd.DataFrame, B, S, lists: dict[str, ListCells]) -> pd.DataFrame:
    """int64 counts, float64 times, list cells as 'a;b;c' strings.

    A column already of its type is kept as it is (no copy): checked
    int64 counts are integers below 2^40, equal to their float copies
    ``B``/``S``.
    """
    for col, v in (("batch_size", B), ("total_tokens", S)):
        if out[col].dtype != np.int64:
            out[col] = v.astype(np.int64)
    for col, dtype in (("duration_ms", np.float64), ("timestamp", np.float64),
                       ("step", np.int64), ("num_decode", np.int64), ("num_prefill", np.int64)):
        if col in out.columns and out[col].dtype != dtype:  # a column of that type: no copy
            out[col] = pd.to_numeric(out[col]).astype(dtype)
    for col, L in lists.items():
        if L.strings is not None:
            out[col] = out[col].astype(str)
    return out


def _valid_rows(out: pd.DataFrame, lists: dict[str, ListCells], B, S, invalid):
    """The rows that passed every check (all when ``invalid`` is None), list text normalised.

    Returns ``(frame, B, S)`` restricted to those rows; text list cells are
    replaced by their normalised ``'a;b;c'`` form, Arrow lists are kept as they are.
    """
    if invalid is not None:
        keep = ~invalid
        out = out.loc[keep]
        for col, L in lists.items():
            if L.strings is not None:
                out[col] = L.strings[keep]
        return out, B[keep], S[keep]
    for col, L in lists.items():
        if L.strings is not None:
            out[col] = L.strings
    return out, B, S


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
    require_frame(df, "validate_trace")
    for name, v in (("drop_invalid", drop_invalid), ("require_duration", require_duration),
                    ("allow_degenerate", allow_degenerate)):
        if not isinstance(v, (bool, np.bool_)):
            raise InputError(f"validate_trace: {name} must be True or False, got {v!r}")
    where = where_text(source)
    out, amap = check_structure(df, where, require_duration)
    problems: list[Problem] = []
    n = len(out)
    B, S, okB, okS = check_step_values(out, problems, allow_degenerate=allow_degenerate)
    check_optional_columns(out, problems, B, okB)
    lists = check_list_columns(out, problems, B, S, okB, okS)
    invalid, dropped, summary = drop_or_raise(problems, n, where, drop_invalid)
    out, B, S = _valid_rows(out, lists, B, S, invalid if problems else None)
    out = _canonical_types(out.reset_index(drop=True), B, S, lists)
    if not allow_degenerate and require_duration:
        check_degenerate(out, source=source)
    out.attrs = {k: v for k, v in df.attrs.items()}
    out.attrs.update(alias_map=dict(amap), dropped=dropped, dropped_summary=summary,
                     n_rows_in=int(n), source=None if source is None else str(source))
    return out
