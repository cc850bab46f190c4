"""An SLA-aware batch filter: keep a candidate batch, trim its prompt tokens, or drop requests.

Problem
-------
A scheduler has a candidate batch of requests (docs/model.md, Decision
quantities); :func:`schedule_batch_with_sla` keeps it when the predicted step
time (or its ``q``-quantile, :class:`perfmodel.decisions.predictor.Predictor`)
meets the SLA, otherwise removes the fewest prompt tokens (largest chunks
first), otherwise drops requests from the end.  Its answers were checked
against brute force over trims and against the water-filling rule
(``tests/decisions/test_batch_filter.py``).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from perfmodel._checks import check_positive
from perfmodel.data.features import batch_features
from perfmodel.decisions.predictor import Predictor
from perfmodel.errors import InputError

__all__ = ["ScheduleDecision", "schedule_batch_with_sla"]


@dataclass(frozen=True)
class ScheduleDecision:
    """What :func:`schedule_batch_with_sla` keeps.

    ``chunk_sizes[i]`` is the (possibly trimmed) chunk of request
    ``kept[i]`` (indices into the input, in input order); ``dropped`` are
    the indices removed (always a suffix); ``predicted_ms`` is the value
    compared with the SLA (the ``q``-quantile when ``q`` was given).
    ``action`` is ``'keep'``, ``'trim'``, ``'drop'``, ``'drop+trim'`` or
    ``'infeasible'`` (even the first request alone, at its best chunk,
    misses the SLA: it is returned so that a scheduler still progresses).
    """

    chunk_sizes: list[int]
    kept: list[int]
    dropped: list[int]
    tokens_trimmed: int
    predicted_ms: float
    sla_ms: float
    feasible: bool
    action: str
    reason: str
    context_lens: list[int] = field(default_factory=list)


_CHUNK_KEYS = ("chunk", "chunk_size", "num_tokens", "remaining_tokens", "tokens")
_CTX_KEYS = ("context", "context_len", "num_computed_tokens", "ctx")


def _parse_requests(requests):
    if isinstance(requests, (str, bytes)) or not hasattr(requests, "__iter__"):
        raise InputError(f"requests must be a sequence, got {type(requests).__name__}")
    chunks, ctx = [], []
    for i, r in enumerate(requests):
        c = x = None
        if isinstance(r, (int, np.integer)) and not isinstance(r, bool):
            c, x = int(r), 0
        elif isinstance(r, Mapping):
            c = next((r[k] for k in _CHUNK_KEYS if k in r), None)
            x = next((r[k] for k in _CTX_KEYS if k in r), 0)
        elif isinstance(r, (tuple, list)) and len(r) == 2:
            c, x = r
        else:
            c = next((getattr(r, k) for k in _CHUNK_KEYS if hasattr(r, k)), None)
            x = next((getattr(r, k) for k in _CTX_KEYS if hasattr(r, k)), 0)
        try:
            ci, xi = int(c), int(x)
            okc = float(c) == ci and float(x) == xi
        except (TypeError, ValueError):
            okc = False
        if not okc or ci < 1 or xi < 0:
            raise InputError(f"requests[{i}] = {r!r}: need an integer chunk >= 1 (int, "
                             f"(chunk, context) tuple, dict or object with one of {_CHUNK_KEYS}) "
                             "and an integer context >= 0")
        chunks.append(ci)
        ctx.append(xi)
    if not chunks:
        raise InputError("requests is empty")
    return np.array(chunks, np.int64), np.array(ctx, np.int64)


def _trim(c: np.ndarray, r: int) -> np.ndarray:
    """Remove ``r`` tokens from the largest chunks first (water-filling), chunks stay >= 1."""
    if r <= 0:
        return c.copy()
    lo, hi = 1, int(c.max())
    while lo < hi:
        mid = (lo + hi) // 2
        if int(np.maximum(c - mid, 0).sum()) <= r:
            hi = mid
        else:
            lo = mid + 1
    new = np.minimum(c, lo)
    extra = r - int((c - new).sum())
    if extra > 0:
        cand = [i for i in sorted(range(c.size), key=lambda i: (-c[i], i)) if c[i] >= lo]
        new[cand[:extra]] -= 1
    return new



def schedule_batch_with_sla(fit, requests, sla_ms: float, *, q: float | None = None,
                            method: str = "delta", boot_samples=None) -> ScheduleDecision:
    """Keep a batch if its predicted step time meets the SLA, else shrink it.

    Problem: a scheduler has
    a candidate batch; keep it when the predicted ``T <= SLA``, otherwise
    shrink tokens or requests.  Rule, in order:

    1. predict the batch as given (features from the chunks and contexts,
       :func:`perfmodel.data.features.batch_features`); keep it if it meets the SLA;
    2. trim tokens: remove the fewest prompt tokens, taking from the largest
       prefill chunk first (water-filling; every request keeps >= 1 token,
       decodes are never trimmed), that bring the prediction within the SLA,
       searching only trims that shorten the step (the prediction falls then
       rises as tokens are removed);
    3. if no trim suffices, drop the last request and repeat from 1 with the
       remaining requests' original chunks.

    Parameters
    ----------
    fit : fitted step model (``.predict``; a FitResult for ``q``)
    requests : sequence, in scheduling order, of ints (tokens to compute this
        step), ``(chunk, context)`` tuples, dicts or objects with a chunk
        (``chunk``/``num_tokens``/``remaining_tokens``) and optionally a prior
        context (``context``/``num_computed_tokens``)
    sla_ms : step-time target
    q : optional probability: compare the ``q``-quantile with the SLA

    Returns
    -------
    ScheduleDecision
    """
    T = check_positive("sla_ms", sla_ms, unit="ms")
    chunks, ctx = _parse_requests(requests)
    pred = Predictor(fit, q=q, method=method, boot_samples=boot_samples)

    def tval(c, x):
        return float(pred(batch_features(c, x))[0])

    n = chunks.size
    best = None  # (value, m) of the best failed attempt, for the message
    single = None  # (value, trim, chunks) of the first request alone at its best trim
    for m in range(n, 0, -1):
        c, x = chunks[:m], ctx[:m]
        v = tval(c, x)
        dropped = list(range(m, n))
        if v <= T:
            return ScheduleDecision(c.tolist(), list(range(m)), dropped, 0, v, T, True,
                                    "keep" if m == n else "drop",
                                    f"predicted {v:.4g} ms <= SLA {T:g} ms with {m} of {n} "
                                    "requests",
                                    x.tolist())
        rstar = _fastest_trim(tval, c, x)
        vstar = tval(_trim(c, rstar), x)
        if m == 1:
            single = (vstar, rstar, _trim(c, rstar))
        if vstar > T:
            if best is None or vstar < best[0]:
                best = (vstar, m)
            continue
        r = _least_trim(tval, c, x, rstar, T)
        ct = _trim(c, r)
        vt = tval(ct, x)
        act = "trim" if m == n else "drop+trim"
        return ScheduleDecision(ct.tolist(), list(range(m)), dropped, r, vt, T, True, act,
                                f"trimmed {r} prompt tokens (largest chunks first) with {m} "
                                f"of {n} "
                                f"requests: predicted {vt:.4g} ms <= SLA {T:g} ms", x.tolist())
    v1, r1, c1 = single
    return ScheduleDecision(
        c1.tolist(), [0], list(range(1, n)), r1, v1, T, False, "infeasible",
        f"infeasible: no leading subset of the requests, with trimmed chunks, meets SLA {T:g} ms "
        f"(best {best[0]:.4g} ms with {best[1]} request(s)); returning the first request alone "
        "at its fastest chunk so that the scheduler progresses", ctx[:1].tolist())


def _fastest_trim(tval, c: np.ndarray, x: np.ndarray) -> int:
    """The trim ``r*`` that minimises the prediction (it falls then rises as tokens go)."""
    a, b = 0, int(np.maximum(c - 1, 0).sum())
    while a < b:
        mid = (a + b) // 2
        if tval(_trim(c, mid + 1), x) >= tval(_trim(c, mid), x):
            b = mid
        else:
            a = mid + 1
    return a


def _least_trim(tval, c: np.ndarray, x: np.ndarray, rstar: int, T: float) -> int:
    """The fewest tokens trimmed that meet ``T``, given ``tval(trim 0) > T >= tval(trim r*)``."""
    lo, hi = 0, rstar
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if tval(_trim(c, mid), x) <= T:
            hi = mid
        else:
            lo = mid
    return hi
