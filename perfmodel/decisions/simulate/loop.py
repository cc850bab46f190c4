"""The array engine's scheduler: per-request state in arrays, one step of one replica.

Problem
-------
A replay runs tens of thousands of steps with up to hundreds of requests
each; a Python object per request and one model call per step cost ~150 us
a step.  Here the running requests of a replica live in numpy arrays in
running order, a step is scheduled with a few array operations when nothing
special happens (the *fast path*: every running request fits in the token
budget and in the KV cache), and by a per-request loop otherwise (the *slow
path*: budget cut-offs with chunking off, partial-prefill caps, KV-cache
allocation failures and preemption).  Steps are scheduled in blocks before
their durations are known, then priced by ONE call of the step model on the
features of the whole block (:mod:`.events`).

vLLM V1 semantics (``policy='fcfs'``)
-------------------------------------
Running requests in order, each taking ``num_tokens - num_computed_tokens``
tokens (one for a decode, the rest of its prompt for a prefill, prompt and
generated tokens for a preempted one), capped by
``long_prefill_token_threshold`` and the remaining budget; then waiting
requests FCFS while fewer than ``max_num_seqs`` run and budget remains,
stopping at the first that cannot be allocated.  KV blocks
(``block_size`` tokens) are allocated as tokens are computed: a request holds
``ceil(num_computed / block_size)`` blocks.  When a running request cannot
get its blocks, the last running request (lowest priority) is preempted: its
blocks are freed, it goes to the front of the waiting queue and later
recomputes all its tokens; if it was the request being scheduled, the loop
stops.  A step that preempted admits no new request.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from perfmodel.data.features import CONTEXT_KEYS

_KEYS = ("B", "S", *CONTEXT_KEYS)
_BIG = 1 << 62


class _State:
    """Per-request arrays (all requests of the simulation) and the step records.

    ``A``'s rows hold a request's scheduler state while it waits; while it runs
    its replica's table is the live copy, and a finished request's row is not
    updated (never read again)."""

    def __init__(self, P, O, arrival):
        n = P.size
        self.P = P
        # rows (as in a replica's running table, one contiguous row per quantity): id,
        # num_computed, num_tokens (prompt + sampled output tokens), sampled output tokens,
        # output length, KV blocks held
        self.A = np.zeros((6, n), np.int64)
        self.A[0] = np.arange(n)
        self.A[2] = P
        self.A[4] = O
        self.comp, self.tgt, self.gen, self.O, self.blk = self.A[1:]
        self.arrival = arrival          # seconds (NaN until issued, closed loop)
        self.issue_step = np.full(n, -1, np.int64)   # closed loop: issued at the end of
        self.first_step = np.full(n, -1, np.int64)
        self.finish_step = np.full(n, -1, np.int64)
        self.admit_step = np.full(n, -1, np.int64)
        self.npre = np.zeros(n, np.int64)
        self.replica = np.zeros(n, np.int64)
        self.kv_peak_blocks = None
        self.step_sums = np.zeros(3)


class _Replica:
    """One engine replica: its running requests as one table (columns in running order,
    rows as :class:`_State`'s, each a contiguous view: ``ids``, ``comp``, ``tgt``, ``gen``,
    ``O``, ``blk``) and the waiting queue.  ``kv``: the KV cache is finite (else ``free``
    stays :data:`_BIG` and ``blk`` 0)."""

    __slots__ = ("O", "R", "blk", "comp", "free", "gen", "hint", "ids", "kv", "low", "tgt",
                 "waiting")

    def __init__(self, free: int):
        self.low = free               # fewest free blocks seen (after a step's allocation)
        self.kv = free < _BIG
        self.hint = None              # set by _fast: (prefill positions, S) of its step or None
        self.set(np.zeros((6, 0), np.int64))
        self.waiting: deque = deque()
        self.free = free

    def set(self, R: np.ndarray):
        """Make ``R`` (6 x running, C order) the running table."""
        self.R = R
        self.ids, self.comp, self.tgt, self.gen, self.O, self.blk = R

    def set_rows(self, rows: list):
        """Make the running table from one ``[id, comp, tgt, gen, O, blk]`` list per request."""
        self.set(np.array(rows, np.int64).reshape(-1, 6).T.copy())

    def load(self) -> int:
        return 4 * len(self.waiting) + self.ids.size

    def snapshot(self):
        return self.R.copy(), deque(self.waiting), self.free

    def restore(self, snap):
        self.set(snap[0].copy())
        self.waiting, self.free = deque(snap[1]), snap[2]


def _cdiv(a, b):
    return -(-a // b)


# ---------------------------------------------------------------------------
# one step of one replica
# ---------------------------------------------------------------------------

def _admit(rep: _Replica, st: _State, cfg, budget: int, n_run: int, n_partial: int, step: int):
    """Admit waiting requests FCFS; return (ids, chunks, budget, starved)."""
    ids, chunks = [], []
    thr, bs, kv = cfg.long_prefill_token_threshold, cfg.block_size, cfg.num_gpu_blocks is not None
    cap = cfg.max_num_partial_prefills
    starved = False
    while budget > 0:
        if n_run >= cfg.max_num_seqs:
            break
        if not rep.waiting:
            starved = True
            break
        i = rep.waiting[0]
        need = int(st.tgt[i] - st.comp[i])
        n = min(need, thr) if thr > 0 else need
        n = min(n, budget)
        if not cfg.enable_chunked_prefill and n < need:
            break
        if cap and n > 1 and n_partial >= cap:
            break
        if kv:
            comp = int(st.comp[i])
            full = _cdiv(int(st.tgt[i]), bs) if cfg.reserve_full_prompt else _cdiv(comp + n, bs)
            if full - int(st.blk[i]) > rep.free:
                break
            nb = _cdiv(comp + n, bs) - int(st.blk[i])
            rep.free -= nb
            st.blk[i] += nb
        rep.waiting.popleft()
        if st.admit_step[i] < 0:
            st.admit_step[i] = step
        ids.append(i)
        chunks.append(n)
        budget -= n
        n_run += 1
        n_partial += n > 1
    return ids, chunks, budget, starved


def _join(rep: _Replica, st: _State, ids: list):
    """Append admitted requests to the running arrays."""
    i0, k = ids[0], len(ids)
    if ids[-1] - i0 == k - 1 and (k < 3 or ids == list(range(i0, i0 + k))):
        new = st.A[:, i0:i0 + k]                 # consecutive ids (the usual case): a slice
    else:
        new = st.A[:, ids]
    rep.set(np.concatenate([rep.R, new], axis=1))


def _order(rep: _Replica, need: np.ndarray, policy: str):
    """Positions scheduled before and after the admissions, in batch order."""
    pos = np.arange(rep.ids.size)
    if policy == "fcfs":
        return pos, pos[:0]
    dec = (need == 1) & (rep.gen > 0)
    if policy == "decode_first":
        return np.concatenate([pos[dec], pos[~dec]]), pos[:0]
    return pos[~dec], pos[dec]          # prefill_first: partials, admissions, decodes


_add = np.add.reduce
_nnz = np.count_nonzero
_max = np.maximum.reduce


def _fast(rep: _Replica, st: _State, cfg, step: int):
    """The fast path: (positions, tokens, starved, preempted, full) or None for the slow path.

    Applies when the scheduled running requests get their blocks without
    preemption, no partial-prefill cap binds, and a budget cut-off falls where
    chunking (or a decode) allows it.  ``full``: every running request is
    scheduled, in running order, before any admission (then ``positions`` is
    ``arange``).
    """
    need = rep.tgt - rep.comp
    thr = cfg.long_prefill_token_threshold
    if thr > 0:
        need = np.minimum(need, thr)
    kv = cfg.num_gpu_blocks is not None
    if cfg.max_num_partial_prefills and (rep.waiting or need.max(initial=0) > 1):
        return None
    budget = cfg.max_num_batched_tokens
    m = rep.ids.size
    tot = int(_add(need))
    if cfg.policy == "fcfs" or (cfg.policy == "decode_first" and tot == m):
        before, after, n_before = None, None, need
    else:
        if kv and cfg.policy == "prefill_first":
            return None
        before, after = _order(rep, need, cfg.policy)
        n_before = need[before]
        tot = int(_add(n_before))
    if tot > budget:
        cs = np.cumsum(n_before)
        k = int(np.searchsorted(cs, budget, side="right"))
        rest = budget - (int(cs[k - 1]) if k else 0)
        if rest > 0 and not cfg.enable_chunked_prefill:
            return None
        if before is None:
            before = np.arange(m)
        before = before[:k + (rest > 0)]
        n_before = n_before[:before.size].copy()
        if rest > 0:
            n_before[-1] = rest
        budget = 0
    else:
        budget -= tot
    if kv:
        if before is None:
            newb = -((rep.comp + n_before) // -cfg.block_size) - rep.blk
        else:
            newb = -((rep.comp[before] + n_before) // -cfg.block_size) - rep.blk[before]
        tot_b = int(_add(newb))
        if tot_b > rep.free:
            return None
        if before is None:
            rep.blk += newb
        else:
            rep.blk[before] += newb
        rep.free -= tot_b
    n_sched = m if before is None else before.size
    # with a partial-prefill cap the fast path runs only when nobody waits, so the count of
    # partial prefills (the cap's input) cannot matter to the admission loop
    adm_ids, adm_n, budget, starved = _admit(rep, st, cfg, budget, m, 0, step)
    if after is not None and after.size:
        n_after = need[after]
        if int(_add(n_after)) > budget:               # decodes after admissions, cut
            after, n_after = after[:budget], n_after[:budget]
    else:
        after = None
    # every running request scheduled takes one token: the prefill chunks (n > 1) and S of
    # a full step are known from the admissions (a hint for the step's feature row)
    ones = tot == n_sched
    if before is None and not adm_ids and after is None:
        rep.hint = ([], tot) if ones else None
        return None, n_before, starved, False, True
    full = n_sched == m and after is None and (cfg.policy == "fcfs" or tot == m)
    if full:                            # positions are arange: not needed
        if adm_ids:
            _join(rep, st, adm_ids)
            n_before = np.concatenate([n_before, adm_n])
        rep.hint = ([m + j for j, c in enumerate(adm_n) if c > 1], tot + sum(adm_n)) \
            if ones else None
        return None, n_before, starved, False, True
    rep.hint = None
    if before is None:
        before = np.arange(m)
    parts_p, parts_n = [before], [n_before]
    if adm_ids:
        _join(rep, st, adm_ids)
        parts_p.append(np.arange(m, m + len(adm_ids)))
        parts_n.append(np.asarray(adm_n, np.int64))
    if after is not None:
        parts_p.append(after)
        parts_n.append(n_after)
    return np.concatenate(parts_p), np.concatenate(parts_n), starved, False, False


def _slow_order(need: list, gen: list, policy: str) -> tuple[list, list]:
    """Running positions scheduled before and after admissions, by ``policy``.

    A decode needs one token and has generated at least one; ``fcfs`` keeps running
    order, ``decode_first`` puts the decodes first, ``prefill_first`` schedules
    the decodes only after the admissions.
    """
    m = len(need)
    dec = [need[p] == 1 and gen[p] > 0 for p in range(m)]
    if policy == "fcfs":
        return list(range(m)), []
    if policy == "decode_first":
        return [p for p in range(m) if dec[p]] + [p for p in range(m) if not dec[p]], []
    return [p for p in range(m) if not dec[p]], [p for p in range(m) if dec[p]]


def _slow(rep: _Replica, st: _State, cfg, step: int):
    """The per-request loop: budget cut-offs, caps, KV allocation failures, preemption."""
    ids, comp, tgt, gen, Os, blk = (x.tolist() for x in (rep.ids, rep.comp, rep.tgt, rep.gen,
                                                          rep.O, rep.blk))
    thr, bs = cfg.long_prefill_token_threshold, cfg.block_size
    kv, cap = cfg.num_gpu_blocks is not None, cfg.max_num_partial_prefills
    budget = cfg.max_num_batched_tokens
    need = [t - c for t, c in zip(tgt, comp)]
    if thr > 0:
        need = [min(x, thr) for x in need]
    m = len(ids)
    before, after = _slow_order(need, gen, cfg.policy)
    sched: dict = {}            # position -> tokens, insertion order = batch order
    alive = list(range(m))      # running order; the tail is the preemption victim (popped)
    state = {"budget": budget, "partial": 0, "preempted": False}

    def take(order):
        for p in order:
            if state["budget"] <= 0:
                return
            if p >= len(alive):       # preempted (alive is always range(len(alive)))
                continue
            n = min(need[p], state["budget"])
            if not cfg.enable_chunked_prefill and n < tgt[p] - comp[p]:
                continue
            if cap and n > 1 and state["partial"] >= cap:
                continue
            if kv:
                while _cdiv(comp[p] + n, bs) - blk[p] > rep.free:
                    victim = alive.pop()
                    state["preempted"] = True
                    rep.free += blk[victim]
                    blk[victim] = 0
                    if victim in sched:
                        state["budget"] += sched.pop(victim)
                    if victim == p:
                        return
                nb = _cdiv(comp[p] + n, bs) - blk[p]
                rep.free -= nb
                blk[p] += nb
            sched[p] = n
            state["budget"] -= n
            state["partial"] += n > 1

    take(before)
    adm_ids, adm_n, starved = [], [], False
    if not state["preempted"]:
        adm_ids, adm_n, state["budget"], starved = _admit(
            rep, st, cfg, state["budget"], len(alive), state["partial"], step)
    take(after)
    gone = range(len(alive), m)           # the preempted tail
    for p in reversed(gone):              # back to the front of waiting, in running order
        i = ids[p]
        st.comp[i], st.tgt[i], st.gen[i], st.blk[i] = 0, tgt[p], gen[p], 0
        st.npre[i] += 1
        rep.waiting.appendleft(i)
    newpos = {p: k for k, p in enumerate(alive)}
    rep.set_rows([[ids[p], comp[p], tgt[p], gen[p], Os[p], blk[p]] for p in alive])
    old_n = rep.ids.size
    if adm_ids:
        _join(rep, st, adm_ids)
    after_set = set(after)
    first = [(newpos[p], k) for p, k in sched.items() if p not in after_set]
    last = [(newpos[p], k) for p, k in sched.items() if p in after_set]
    pos = [q for q, _ in first] + list(range(old_n, old_n + len(adm_ids))) + [q for q, _ in last]
    n = [k for _, k in first] + list(adm_n) + [k for _, k in last]
    return np.asarray(pos, np.int64), np.asarray(n, np.int64), starved, state["preempted"], False


def _apply(rep: _Replica, st: _State, pos, n, full: bool, step: int, finished: list):
    """Compute the scheduled tokens; sample where a request caught up; drop the finished.

    ``full``: the first ``n.size`` running requests are scheduled in running
    order (``pos`` may then be None).  Returns the prior contexts
    (``num_computed`` before the step) of the scheduled requests.

    A running request has fewer sampled tokens than its output length before
    a step (it is dropped at the step it reaches it), so the finished ones are
    those with ``gen >= O`` after it.
    """
    if full:
        k = n.size
        if k == rep.ids.size:
            comp = rep.comp
            ctx = comp.copy()
            comp += n
            rep.R[2:4] += comp == rep.tgt             # sampled: tgt and gen (adjacent rows)
            gen, ids = rep.gen, rep.ids
        else:
            comp = rep.comp[:k]
            ctx = comp.copy()
            comp += n
            rep.R[2:4, :k] += comp == rep.tgt[:k]
            gen, ids = rep.gen[:k], rep.ids[:k]
        # gen == 1 and not sampled now: sampled its first token at an earlier step (the
        # first_step filter below drops it)
        firsts = gen == 1
    else:
        ctx = rep.comp[pos]
        new = ctx + n
        rep.comp[pos] = new
        sampled = new == rep.tgt[pos]
        sp = pos[sampled]
        rep.gen[sp] += 1
        rep.tgt[sp] += 1
        ids = rep.ids[pos]
        firsts = np.zeros(pos.size, dtype=bool)
        firsts[sampled] = rep.gen[sp] == 1
    if _nnz(firsts):                    # a few: a Python loop beats fancy indexing
        fs = st.first_step
        for i in ids[firsts].tolist():
            if fs[i] < 0:
                fs[i] = step
    done = rep.gen >= rep.O
    if _nnz(done):
        _drop(rep, st, done, step, finished)
    return ctx


def _drop(rep: _Replica, st: _State, done, step: int, finished: list):
    """Remove the finished requests (mask ``done``) from the running arrays."""
    keep = ~done
    fin = rep.ids[done]
    st.finish_step[fin] = step
    if rep.kv:
        rep.free += int(_add(rep.blk[done]))
    rep.set(rep.R.compress(keep, axis=1))
    finished.extend(fin.tolist())


def _leap_length(rep: _Replica, cfg, kmax: int) -> int:
    """How many all-decode steps can follow without an event (finish or KV shortage)."""
    m = min(int((rep.O - rep.gen).min()), kmax)
    if m <= 0 or cfg.num_gpu_blocks is None:
        return max(m, 0)
    bs = cfg.block_size

    def need(k):
        return int(_add(-((rep.comp + k) // -bs) - rep.blk))

    if need(m) <= rep.free:
        return m
    lo, hi = 0, m                       # need(lo) <= free < need(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if need(mid) <= rep.free:
            lo = mid
        else:
            hi = mid
    return lo


def _leap(rep: _Replica, st: _State, cfg, m: int, step: int, finished: list):
    """Apply ``m`` all-decode steps ``step+1 .. step+m``; return their feature rows and
    the first context vector (for the log)."""
    B = rep.ids.size
    ks = np.arange(m, dtype=float)
    ctx0 = rep.comp.copy()
    cs = float(_add(ctx0)) + ks * B
    F = np.empty((m, len(_KEYS)))
    F[:, 0] = B
    F[:, 1] = B
    F[:, 2] = cs
    F[:, 3] = float(_max(ctx0)) + ks
    F[:, 4] = cs + 0.5 * B
    F[:, 5] = 0.0
    F[:, 6] = cs
    F[:, 7] = 0.0
    F[:, 8] = 0.0
    # a request one prompt token short of its first sample (a budget cut left it one) also
    # takes one token a step: it samples its first token at step + 1
    fresh = rep.gen == 0
    if _nnz(fresh):
        f = rep.ids[fresh]
        st.first_step[f[st.first_step[f] < 0]] = step + 1
    rep.comp += m
    rep.R[2:4] += m                     # tgt and gen
    if cfg.num_gpu_blocks is not None:
        nb = -(rep.comp // -cfg.block_size) - rep.blk
        np.maximum(nb, 0, out=nb)
        rep.blk += nb
        rep.free -= int(_add(nb))
        rep.low = min(rep.low, rep.free)
    done = rep.gen >= rep.O
    if _nnz(done):
        _drop(rep, st, done, step + m, finished)
    return F, ctx0
