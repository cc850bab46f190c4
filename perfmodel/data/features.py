"""Step features: the numbers a model sees of one engine step, defined once.

Problem
-------
A step-latency model sees a step through a few numbers: the number of
requests ``B``, the tokens ``S`` it computes and, when the per-request chunk
sizes ``c_i`` and prior context lengths ``ctx_i`` are known, sums over the
requests that measure attention work and KV-cache reads.  Traces
(:func:`perfmodel.data.trace.step_features`), the simulator and the SLA scheduler
(:func:`batch_features`), the static-batch calibration
(:func:`uniform_batch_features`) and the baselines all need the same numbers;
this module is the one place that computes them, from plain arrays (numpy
only: no parsing, no DataFrames).

Definitions
-----------
For one step with requests ``i`` (``c_i >= 1`` tokens computed on top of
``ctx_i >= 0`` cached ones); a *prefill* chunk has ``c_i > 1``, a *decode*
``c_i == 1`` (so a one-token prefill chunk counts as a decode):

``B``
    number of requests; ``S = sum c_i``.
``ctx_sum``, ``ctx_max``
    ``sum ctx_i`` (KV-cache entries read) and ``max ctx_i``.
``attn``
    ``sum c_i (ctx_i + c_i/2)``: query-key pairs (each new token attends to
    the cached tokens and, causally, to half its own chunk on average).
``attn_prefill``
    the same sum over prefill chunks only.
``decode_ctx``
    ``sum ctx_i`` over decodes.
``prefill_sq``
    ``sum c_i^2`` over prefill chunks.
``chunk_sd``
    population standard deviation of the ``c_i``.
``n_decode``, ``n_prefill``, ``s_prefill``, ``max_chunk`` (on request)
    number of decodes and of prefill chunks, tokens of the prefill chunks,
    largest chunk.

:data:`CONTEXT_KEYS` names the features that need the per-request lists
(everything above but ``B`` and ``S``; the counts are in
:data:`COUNT_KEYS`).

Numerics
--------
Every per-step sum is a ``numpy.bincount`` over the requests in their order,
so a step gets bit-identical features whether it is computed alone or among
the rows of a trace.  With integer ``c_i`` and ``ctx_i`` (and sums below
``2**52``) every sum except the one inside ``chunk_sd`` is exact.

Examples
--------
>>> f = request_features([512, 1, 1], [0, 30, 7])
>>> {k: float(v[0]) for k, v in f.items() if k in ("B", "S", "attn", "decode_ctx")}
{'B': 3.0, 'S': 514.0, 'attn': 131110.0, 'decode_ctx': 37.0}
"""
from __future__ import annotations

import numpy as np

from perfmodel.errors import InputError

__all__ = [
    "CONTEXT_KEYS",
    "COUNT_KEYS",
    "batch_features",
    "request_features",
    "row_reduce",
    "uniform_batch_features",
]

#: features computed from the per-request ``chunk_sizes`` and ``context_lens`` (besides B, S)
CONTEXT_KEYS: tuple[str, ...] = (
    "ctx_sum", "ctx_max", "attn", "attn_prefill", "decode_ctx", "prefill_sq", "chunk_sd",
)
#: per-step request counts, computed on request (``request_features(..., counts_keys=True)``)
COUNT_KEYS: tuple[str, ...] = ("n_decode", "n_prefill", "s_prefill", "max_chunk")


def row_reduce(values, counts, how: str, rows=None) -> np.ndarray:
    """Per-step sum, min or max of a flat per-request array.

    Parameters
    ----------
    values : numpy.ndarray of float or int
        Per-request values, the requests of step 0 first, then step 1, ...
        Integer values are summed exactly in int64 (any integer type, e.g. the
        compact ``int16`` items of a trace read by :func:`perfmodel.data.trace.read_trace`).
    counts : numpy.ndarray of int
        Requests per step (``counts.sum() == values.size``).
    how : {'sum', 'min', 'max'}
    rows : numpy.ndarray of int, optional
        The step of each request (``np.repeat(np.arange(len(counts)), counts)``),
        if already at hand; used by ``'sum'`` only.

    Returns
    -------
    numpy.ndarray of float, one value per step; a step with no requests gives 0.
    """
    counts = np.asarray(counts)
    n = len(counts)
    if how == "sum":
        values = np.asarray(values)
        if rows is None and values.dtype.kind in "iu":
            return _int_row_sum(values, counts)
        if rows is None:
            rows = np.repeat(np.arange(n), counts)
        return np.bincount(rows, weights=values, minlength=n)
    if how not in ("min", "max"):
        raise InputError(f"how must be one of ['sum', 'min', 'max'], got {how!r}")
    out = np.zeros(n, dtype=float)
    nz = counts > 0
    if nz.any():
        starts = (np.cumsum(counts) - counts)[nz]
        f = np.minimum if how == "min" else np.maximum
        out[nz] = f.reduceat(values, starts)
    return out


#: requests per block of the exact integer row sums (bounds their int64 temporaries)
_SUM_BLOCK = 1 << 20


def _int_row_sum(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Exact int64 sum per step of integer per-request values, as float.

    Equal to ``numpy.bincount`` over the row index while the sums stay below
    ``2**53``; without that index, and summing blocks of whole steps so that
    the int64 copy of small-integer items never spans the whole trace.
    """
    n = counts.size
    out = np.zeros(n, dtype=float)
    ends = np.cumsum(counts)
    row = 0
    while row < n:
        first = 0 if row == 0 else int(ends[row - 1])
        stop = max(int(np.searchsorted(ends, first + _SUM_BLOCK, side="right")), row + 1)
        c = counts[row:stop]
        nz = c > 0
        if nz.any():
            block = values[first:int(ends[stop - 1])]
            starts = (np.cumsum(c) - c)[nz]
            out[row:stop][nz] = np.add.reduceat(block, starts, dtype=np.int64)
        row = stop
    return out


def request_features(chunk_sizes, context_lens, counts=None, *,
                     counts_keys: bool = False) -> dict[str, np.ndarray]:
    """Step features of one or many steps from their per-request chunks and contexts.

    Problem: the one vectorised kernel behind every feature computation of
    the package (module docstring for the definitions).  It does not check
    its input (:func:`batch_features` does, for one step).

    Parameters
    ----------
    chunk_sizes, context_lens : array_like of int, flat
        Per-request chunk sizes ``c_i`` and prior contexts ``ctx_i``: the
        requests of step 0 in batch order, then those of step 1, ...
    counts : array_like of int, optional
        Requests per step (summing to the number of requests); ``None``: all
        requests form one step.
    counts_keys : bool, default False
        Also return :data:`COUNT_KEYS`.

    Returns
    -------
    dict of str -> numpy.ndarray of float64, one value per step
        ``B``, ``S``, then :data:`CONTEXT_KEYS` (and :data:`COUNT_KEYS`) in
        that order.
    """
    c = np.asarray(chunk_sizes, dtype=float).ravel()
    x = np.asarray(context_lens, dtype=float).ravel()
    if counts is None:
        counts = np.array([c.size], dtype=np.int64)
        rows = np.zeros(c.size, dtype=np.intp)
    else:
        counts = np.asarray(counts, dtype=np.int64).ravel()
        rows = np.repeat(np.arange(counts.size), counts)
    n = counts.size

    def rsum(w):
        return np.bincount(rows, weights=w, minlength=n)

    pre = c > 1
    dec = c == 1
    pair = c * (x + c / 2.0)
    mean_c = rsum(c) / counts
    dev = c - mean_c[rows]
    out = {
        "B": counts.astype(float),
        "S": rsum(c),
        "ctx_sum": rsum(x),
        "ctx_max": row_reduce(x, counts, "max"),
        "attn": rsum(pair),
        "attn_prefill": rsum(np.where(pre, pair, 0.0)),
        "decode_ctx": rsum(np.where(dec, x, 0.0)),
        "prefill_sq": rsum(np.where(pre, c * c, 0.0)),
        "chunk_sd": np.sqrt(rsum(dev * dev) / counts),
    }
    if counts_keys:
        n_decode = rsum(dec.astype(float))
        out.update(
            n_decode=n_decode,
            n_prefill=rsum(pre.astype(float)),
            s_prefill=rsum(np.where(pre, c, 0.0)),
            max_chunk=row_reduce(c, counts, "max"),
        )
    return out


def batch_features(chunk_sizes, context_lens=None) -> dict[str, np.ndarray]:
    """Step features of one batch from its per-request chunk sizes and contexts.

    Problem: the simulator and the SLA scheduler build batches in memory and
    need the features :func:`perfmodel.data.trace.step_features` computes from a
    trace row, without formatting strings; this checks one batch and runs
    :func:`request_features` on it.

    Parameters
    ----------
    chunk_sizes : sequence of int >= 1
    context_lens : sequence of int >= 0, optional (zeros when omitted)

    Returns
    -------
    dict of str -> numpy.ndarray of length 1
        ``B``, ``S`` and :data:`CONTEXT_KEYS`.

    Raises
    ------
    InputError
        An empty batch, a chunk below 1, a negative or non-finite context, or
        lists of different lengths.
    """
    c = np.asarray(chunk_sizes, dtype=float).ravel()
    if c.size == 0:
        raise InputError("chunk_sizes is empty: a step needs at least one request")
    if not np.all(np.isfinite(c)) or np.any(c < 1):
        raise InputError("chunk_sizes must be integers >= 1, got "
                         f"{np.asarray(chunk_sizes).tolist()[:10]}")
    x = np.zeros_like(c) if context_lens is None else np.asarray(context_lens, float).ravel()
    if x.shape != c.shape:
        raise InputError(f"context_lens has {x.size} items, chunk_sizes has {c.size}")
    if not np.all(np.isfinite(x)) or np.any(x < 0):
        raise InputError("context_lens must be integers >= 0")
    return request_features(c, x)


def uniform_batch_features(batch_size, chunk, context) -> dict[str, np.ndarray]:
    """Step features of steps whose requests all have the same chunk and context.

    Problem: a static batch of ``B`` equal requests runs steps in which every
    request computes the same chunk on the same context; the sums of
    :func:`request_features` then reduce to products, computed here without
    expanding the requests (the calibration integrates millions of such
    steps).  Equal to :func:`request_features` on the expanded requests (the
    products are exact for integer inputs); ``chunk_sd`` is 0.

    Parameters
    ----------
    batch_size, chunk, context : numpy.ndarray of float, one value per step
        ``B``, the common chunk size ``c >= 1`` and the common prior context.

    Returns
    -------
    dict of str -> numpy.ndarray
        ``B``, ``S`` and :data:`CONTEXT_KEYS`.
    """
    Bs = batch_size
    pair = chunk * (context + chunk / 2.0)
    is_pre = chunk > 1
    return {
        "B": Bs,
        "S": Bs * chunk,
        "ctx_sum": Bs * context,
        "ctx_max": context,
        "attn": Bs * pair,
        "attn_prefill": np.where(is_pre, Bs * pair, 0.0),
        "decode_ctx": np.where(is_pre, 0.0, Bs * context),
        "prefill_sq": np.where(is_pre, Bs * chunk * chunk, 0.0),
        "chunk_sd": np.zeros_like(Bs),
    }
