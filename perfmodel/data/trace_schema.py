"""The canonical step-trace schema: column names, limits and accepted aliases.

Problem
-------
Traces come from different collectors and papers with different column
names.  This module says what a step trace is in this package (the canonical
columns, the largest count and the shortest duration accepted, how rows are
numbered in messages) and maps other spellings onto the canonical names.
The checks that enforce it are in :mod:`perfmodel.data.trace_checks`; the
whole pipeline is :func:`perfmodel.data.trace.validate_trace`.

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
>>> resolve_aliases(["B", "S", "duration_ms", "config"])
{'B': 'batch_size', 'S': 'total_tokens'}
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import pandas as pd

from perfmodel.errors import InputError

__all__ = [
    "ALIASES",
    "CANONICAL_COLUMNS",
    "LIST_COLUMNS",
    "MAX_COUNT",
    "MIN_DURATION_MS",
    "REQUIRED_COLUMNS",
    "ROW_CONVENTION",
    "canonical_name",
    "describe_aliases",
    "duplicate_names",
    "resolve_aliases",
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


def _norm(name) -> str:
    return str(name).strip().lower().replace("-", "_").replace(" ", "_")


_LOOKUP: dict[str, str] = {}
for _canon, _names in ALIASES.items():
    _LOOKUP[_norm(_canon)] = _canon
    for _a in _names:
        _LOOKUP[_norm(_a)] = _canon


def canonical_name(name) -> str | None:
    """The canonical column that ``name`` spells, or None for an extra column.

    Matching ignores case and surrounding blanks and treats ``-`` and spaces
    as ``_`` (:data:`ALIASES`); ``canonical_name(" Total-Tokens ")`` is
    ``'total_tokens'``.  Checked on every alias in ``tests/data/test_trace_schema.py``.
    """
    return _LOOKUP.get(_norm(name))


def duplicate_names(names) -> list[str]:
    """The names that occur more than once in ``names``, sorted (empty when none).

    One rule for repeated column names, used on a DataFrame's columns, a CSV
    header and the keys of a JSON object.
    """
    return sorted(n for n, k in Counter(names).items() if k > 1)


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
    dup = duplicate_names(cols)
    if dup:
        raise InputError(f"duplicate column names {dup}; each column must appear once")
    targets: dict[str, list[str]] = {}
    for c in cols:
        canon = canonical_name(c)
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
