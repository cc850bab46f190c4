"""Step features and time order of a validated trace.

Problem
-------
Models see a step through a few numbers (``B``, ``S`` and, with per-request
lists, the context features of :data:`perfmodel.data.features.CONTEXT_KEYS`),
and time-series diagnostics and cross-validation need the order in which
steps ran.  This module reads both from a trace in the canonical schema: the
lists are parsed at once (:mod:`perfmodel.data.trace_lists`) and handed to
the package's one feature kernel, :func:`perfmodel.data.features.request_features`,
in blocks of whole steps so that a long trace needs bounded memory.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from perfmodel.data.features import request_features
from perfmodel.data.trace_checks import Problem, numeric_values, require_frame
from perfmodel.data.trace_lists import parse_list_cells
from perfmodel.data.trace_schema import LIST_COLUMNS, ROW_CONVENTION
from perfmodel.errors import InputError

__all__ = ["FEATURE_BLOCK", "has_context", "step_features", "time_order", "time_rank"]


def has_context(df) -> bool:
    """True when the trace has per-request ``chunk_sizes`` and ``context_lens`` for every row."""
    require_frame(df, "has_context")
    return all(c in df.columns and not df[c].isna().any() for c in LIST_COLUMNS)


def step_features(df, *, counts_keys: bool = False, keys=None) -> dict[str, np.ndarray]:
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

    Verified against hand-computed values in ``tests/data/test_trace_features.py``.

    Parameters
    ----------
    df : pandas.DataFrame
        A trace in the canonical schema (``validate_trace``); ``duration_ms``
        is not needed.
    counts_keys : bool, default False
        Add the per-step request counts.
    keys : collection of str, optional
        Keep only these features (e.g. a model's ``requires``): the others
        are never stored, which bounds the memory of a large trace; each kept
        one has the same bits as without ``keys``.  Default: all.

    Returns
    -------
    dict of str -> numpy.ndarray

    Raises
    ------
    InputError
        Missing ``batch_size``/``total_tokens``, non-finite values, or list
        cells that do not parse or whose count differs from ``batch_size``.
    """
    require_frame(df, "step_features")
    missing = [c for c in ("batch_size", "total_tokens") if c not in df.columns]
    if missing:
        raise InputError(f"step_features: missing columns {missing} (columns present: "
                         f"{[str(c) for c in df.columns]}); pass the trace through "
                         "validate_trace first")
    if keys is not None and (isinstance(keys, (str, bytes))
                             or not all(isinstance(k, str) for k in keys)):
        raise InputError(f"step_features: keys must be a collection of feature names, "
                         f"got {keys!r}")
    problems: list[Problem] = []
    B = numeric_values(df, "batch_size", problems)
    S = numeric_values(df, "total_tokens", problems)
    if problems:
        raise InputError("step_features: " + "; ".join(p.message() for p in problems)
                         + f" [{ROW_CONVENTION}]")
    feats = {"B": B, "S": S}
    if not all(c in df.columns for c in LIST_COLUMNS):
        return feats if keys is None else {k: v for k, v in feats.items() if k in keys}
    Lc, Lx = parse_list_cells(df["chunk_sizes"]), parse_list_cells(df["context_lens"])
    for col, L in (("chunk_sizes", Lc), ("context_lens", Lx)):
        if (~L.ok).any():
            problems.append(Problem(col, "missing or unparseable lists", ~L.ok))
        elif (m := L.counts != B).any():
            problems.append(Problem(col, "a number of items different from batch_size", m))
    if problems:
        raise InputError("step_features: " + "; ".join(p.message() for p in problems)
                         + f" [{ROW_CONVENTION}]; pass the trace through validate_trace first")
    want = None if keys is None else set(keys) - set(feats)
    f = _blockwise_features(Lc.flat, Lx.flat, Lc.counts, counts_keys, want)
    feats.update((k, v) for k, v in f.items() if k not in feats)
    return feats if keys is None else {k: v for k, v in feats.items() if k in keys}


#: requests per block of the feature kernel (bounds its float64 temporaries to some 10 MB each)
FEATURE_BLOCK = 1 << 20


def _blockwise_features(chunks, contexts, counts, counts_keys: bool,
                        keys=None) -> dict[str, np.ndarray]:
    """:func:`request_features` over blocks of whole steps, concatenated.

    Every feature is a per-step reduction over that step's requests in their
    order, so a block gives the same bits as the whole trace (the kernel's
    Numerics); only the temporaries shrink from the whole trace's requests
    to a block's.  ``keys``: store only these features (default: all).
    """
    if chunks.size <= FEATURE_BLOCK:
        f = request_features(chunks, contexts, counts, counts_keys=counts_keys)
        return f if keys is None else {k: v for k, v in f.items() if k in keys}
    ends = np.cumsum(counts)
    out: dict[str, np.ndarray] = {}
    row = 0
    while row < counts.size:
        first = 0 if row == 0 else int(ends[row - 1])
        stop = int(np.searchsorted(ends, first + FEATURE_BLOCK, side="right"))
        stop = max(stop, row + 1)
        last = int(ends[stop - 1])
        part = request_features(chunks[first:last], contexts[first:last],
                                counts[row:stop], counts_keys=counts_keys)
        for k, v in part.items():  # written into the result: no second copy to concatenate
            if keys is not None and k not in keys:
                continue
            if k not in out:
                out[k] = np.empty(counts.size, dtype=v.dtype)
            out[k][row:stop] = v
        row = stop
    return out


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
    require_frame(df, "time_order")
    for col in ("step", "timestamp"):
        if col in df.columns:
            v = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
            if not np.isfinite(v).all():
                bad = Problem(col, "missing or non-numeric values", ~np.isfinite(v))
                raise InputError(f"time_order: {bad.message()} [{ROW_CONVENTION}]")
            return np.argsort(v, kind="stable").astype(np.int64)
    return np.arange(len(df), dtype=np.int64)


def time_rank(df) -> np.ndarray:
    """Each row's place in time order: the inverse permutation of :func:`time_order`.

    Returns
    -------
    numpy.ndarray of int64
        ``time_rank(df)[i]`` is how many steps of ``df`` ran before row ``i``
        (ties in row order).
    """
    order = time_order(df)
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    return rank
