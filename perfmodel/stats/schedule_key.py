"""The schedule key of a step: one integer per distinct schedule, for the fold engine.

Problem: two steps with the same batch size, token count and multiset of
(prompt chunk, cached context) pairs are the same measurement as far as a
step model can tell, so the fold engine (:mod:`perfmodel.stats.folds`) keeps
them on one side of every split. Comparing the per-request lists row by row
in Python is too slow for fleet-size traces, so :func:`_schedule_key` codes
the pairs, sorts them within each step and hashes the sorted rows in
blocks; rows whose hashes agree are then compared item by item, so the
groups are exact (no hash collision merges two schedules). Verified against
the former per-row implementation on random lists with forced collisions
and on every committed trace (``tests/stats/test_folds.py``).

Split out of :mod:`perfmodel.stats.folds`, which re-exports
:func:`_schedule_key` for its other callers.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from perfmodel.data.trace_lists import parse_list_cells


def _schedule_key(df: pd.DataFrame) -> np.ndarray:
    """Code of each step's schedule: B, S and the multiset of (chunk, context) pairs.

    Two steps get the same code exactly when they have equal ``batch_size``
    and ``total_tokens`` and, where ``chunk_sizes``/``context_lens`` are
    present, the same multiset of per-request (chunk, context) pairs
    (requests in any order are the same step); a row whose cells do not
    parse as lists of integers of one length matches only rows whose cells
    read the same as written.  Codes are numbered 0, 1, ... in order of
    first row.  Vectorised (:func:`_pair_rows_key`): no per-row Python.
    Verified to give the codes of a plain per-row implementation (kept in
    ``tests/stats/test_folds.py``) on random traces and the committed ones.
    """
    B = df["batch_size"].to_numpy(dtype=np.int64)
    S = df["total_tokens"].to_numpy(dtype=np.int64)
    cols = [c for c in ("chunk_sizes", "context_lens") if c in df.columns]
    parts = [B, S]
    if cols:
        lists = [parse_list_cells(df[c]) for c in cols]
        ok = np.logical_and.reduce([L.ok for L in lists])
        if len(lists) == 2:
            ok &= lists[0].counts == lists[1].counts
        parts += _pair_rows_key(lists, ok)
        del lists
        if not ok.all():  # unparsable cells: identical only as written
            raw = np.zeros(len(df), np.int64)
            bad = np.flatnonzero(~ok)
            cells = zip(*(df[c].iloc[bad] for c in cols))
            text = ["|".join(map(str, row)) for row in cells]  # as written (rare rows)
            raw[bad] = pd.factorize(np.array(text, dtype=object))[0] + 1
            parts.append(raw)
    return _ngroups(parts)


def _ngroups(parts: list[np.ndarray]) -> np.ndarray:
    """Code of each row's tuple of integer ``parts``, numbered in order of first row.

    The codes of ``pandas.DataFrame.groupby(sort=False).ngroup()`` over the
    parts, computed pairwise: the code of the first ``j`` parts and the
    code of part ``j + 1`` (both below ``n``) make one int64 key whose
    factorisation, in order of first row, is the code of the first ``j + 1``
    parts.  One hash table of ``n`` integers at a time instead of a grouping
    over every part (on 5,000,000 steps some 500 MB less at the peak).
    """
    code = pd.factorize(np.asarray(parts[0]))[0].astype(np.int64, copy=False)
    for p in parts[1:]:
        c = pd.factorize(np.asarray(p))[0]
        code *= int(c.max()) + 1 if c.size else 1
        code += c
        del c
        code = pd.factorize(code)[0].astype(np.int64, copy=False)
    return code


#: rows per block of :func:`_pair_rows_key` (bounds its temporaries to a block's requests)
_KEY_BLOCK = 1 << 16


def _item_coder(flats: list[np.ndarray]):
    """Dense codes of request item tuples: ``(code(a, b), ncodes)``.

    ``code(a, b)`` gives int64 codes of the requests ``a:b`` of the flat
    arrays; two requests get one code exactly when their tuples are equal.
    Items of small range (every product of ranges below 2^40) are coded
    arithmetically, value less the minimum in mixed radix, one block at a
    time; others through :func:`pandas.factorize` over all requests.
    """
    los, spans = [], []
    for f in flats:
        lo = int(f.min()) if f.size else 0
        los.append(lo)
        spans.append(int(f.max()) - lo + 1 if f.size else 1)
    if int(np.prod(spans, dtype=object)) < 2**40:
        def code(a, b):
            c = np.zeros(b - a, np.int64)
            for f, lo, span in zip(flats, los, spans):
                c *= span
                c += f[a:b]
                c -= lo
            return c
        return code, int(np.prod(spans, dtype=object))
    whole, ncode = np.zeros(flats[0].size, np.int64), 1
    for f in flats:
        c, uniq = pd.factorize(f)
        whole = pd.factorize(whole * max(len(uniq), 1) + c)[0].astype(np.int64)
        ncode = int(whole.max()) + 1 if whole.size else 1
    return (lambda a, b: whole[a:b]), ncode


def _sorted_rows(code, ncode: int, counts: np.ndarray, off: np.ndarray, r0: int, r1: int,
                 rows: np.ndarray | None = None):
    """Item codes of rows ``r0:r1`` sorted within each row, each item's position in its row,
    and its row (``0`` = ``r0``); only the ``rows`` (positions in ``r0:r1``) if given."""
    a, b = int(off[r0]), int(off[r1])
    c, cnt = code(a, b), counts[r0:r1]
    if rows is not None:
        c, cnt = c[np.repeat(np.isin(np.arange(r1 - r0), rows), cnt)], cnt[rows]
    local = np.repeat(np.arange(cnt.size, dtype=np.int64), cnt)
    key = local * ncode + c
    key.sort()
    key -= local * ncode  # codes sorted within each row
    start = np.zeros(cnt.size, np.int64)
    np.cumsum(cnt[:-1], out=start[1:])
    pos = np.arange(key.size, dtype=np.int64) - start[local]
    return key, pos, (local if rows is None else rows[local])


def _pair_rows_key(lists: list, ok: np.ndarray) -> list[np.ndarray]:
    """Per row ``(items, h, exact)``: equal for rows with equal multisets of item tuples.

    ``lists`` are parsed list columns (:func:`parse_list_cells`) of equal
    counts on the ``ok`` rows; other rows get ``(-1, 0, 0)``.  The tuples
    of a row's requests are coded densely (:func:`_item_coder`), sorted
    within the row and hashed per row (splitmix64 of code and position,
    summed), in blocks of :data:`_KEY_BLOCK` rows.  Rows with equal
    ``(items, h)`` are then compared item by item with the first such row
    (a second pass over the blocks that sorts again and keeps only the sorted
    codes of the first rows of groups with more than one row, not those of
    every request); ``exact`` splits any hash collision, so the key is
    exact, never probabilistic.
    """
    n = ok.size
    flats = []
    for L in lists:  # the items of the ok rows only
        f = L.flat
        if not ok[L.ok].all():
            f = f[np.repeat(ok[L.ok], L.counts[L.ok])]
        flats.append(f)
    code, ncode = _item_coder(flats)
    every = bool(ok.all())
    counts = lists[0].counts if every else np.where(ok, lists[0].counts, 0)
    off = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=off[1:])
    rowhash = np.zeros(n, np.int64)
    for r0 in range(0, n, _KEY_BLOCK):
        r1 = min(n, r0 + _KEY_BLOCK)
        key, pos, _ = _sorted_rows(code, ncode, counts, off, r0, r1)
        a = int(off[r0])
        with np.errstate(over="ignore"):
            h = _splitmix(key.astype(np.uint64) * np.uint64(0x100000001B3) + pos.astype(np.uint64))
        del key, pos
        cs = np.zeros(h.size + 1, np.uint64)
        np.cumsum(h, out=cs[1:])
        rowhash[r0:r1] = (cs[off[r0 + 1:r1 + 1] - a] - cs[off[r0:r1] - a]).view(np.int64)
        del h, cs
    items = counts if every else np.where(ok, counts, -1)
    first = _ngroups([items, rowhash])
    differ = _hash_collisions(code, ncode, counts, off, first)
    exact = np.zeros(n, np.int64)
    for g in differ:  # a hash collision: tell the rows apart by their sorted codes
        rows = np.flatnonzero(first == g)
        keys = np.array([np.sort(code(int(off[r]), int(off[r + 1]))).tobytes() for r in rows],
                        dtype=object)
        exact[rows] = pd.factorize(keys)[0]
    return [items, rowhash, exact]


def _hash_collisions(code, ncode: int, counts: np.ndarray, off: np.ndarray,
                     first: np.ndarray) -> np.ndarray:
    """The ``(items, h)`` groups ``first`` whose rows' sorted item codes are not all equal.

    Every row of a group with more than one row is compared item by item
    with the group's first row; only those first rows' sorted codes are
    kept, in one buffer (rows of one group have one item count).
    """
    n = first.size
    top = np.maximum.accumulate(first)  # groups are numbered in order of first row
    rep = np.flatnonzero(np.r_[True, top[1:] > top[:-1]])  # first row of each group
    del top
    shared = np.bincount(first)[first] > 1  # rows of groups with more than one row
    kept = rep[shared[rep]]  # the first rows compared against
    slot = np.full(rep.size, -1, np.int64)
    slot[first[kept]] = np.arange(kept.size)
    koff = np.zeros(kept.size + 1, np.int64)
    np.cumsum(counts[kept], out=koff[1:])
    buf = np.empty(int(koff[-1]), np.int32 if ncode < 2**31 else np.int64)
    is_rep = np.zeros(n, bool)
    is_rep[rep] = True
    bad = []
    for r0 in range(0, n, _KEY_BLOCK):
        r1 = min(n, r0 + _KEY_BLOCK)
        sel = np.flatnonzero(shared[r0:r1])
        if not sel.size:
            continue
        key, pos, row = _sorted_rows(code, ncode, counts, off, r0, r1, sel)
        row = row + r0
        j = slot[first[row]]
        at = koff[np.maximum(j, 0)] + pos
        mine = is_rep[row]  # first rows: keep their codes
        buf[at[mine]] = key[mine]
        other = ~mine  # the others: compare (their first row is earlier)
        bad.append(first[row[other][key[other] != buf[at[other]]]])
    return np.unique(np.concatenate(bad)) if bad else np.zeros(0, np.int64)


def _splitmix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser of uint64 values (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))
