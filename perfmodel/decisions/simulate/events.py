"""The array engine's event loop: blocks of steps, pricing, arrivals, checkpoints.

Why blocks are exact
--------------------
A scheduling decision depends on time only through arrivals (open loop).  A
block is scheduled assuming no arrival after its start; once priced, the
first step that starts after the next arrival AND whose admission loop ran
out of waiting requests with slots and budget left (the only way an arrival
can change a step) is found, the state is restored from a checkpoint taken at
the block start and the block is re-run up to that step; the arrival is then
queued.  With data-parallel replicas any step after an arrival ends the block
(routing reads the replicas' queues).  Closed loops issue requests at step
ends, which needs no time.  With a client round trip
(``request_intake_ms``, ``response_delay_ms``) an issued request reaches the
scheduler only later: a closed-loop block then ends at the first step in
which a request finished, and the requests it issues become arrivals at that
step's end plus both delays, handled as open-loop arrivals (they come in
time order, so the arrival list stays sorted).  The schedule is therefore the step-by-step one;
``tests/decisions/test_simulate_v1.py`` checks it against the per-request
reference loop and against the slow path alone.
"""
from __future__ import annotations

import numpy as np

from perfmodel.data.features import request_features
from perfmodel.decisions.simulate import loop as sched
from perfmodel.decisions.simulate._common import _step_time_model
from perfmodel.decisions.simulate.loop import (
    _BIG,
    _KEYS,
    _add,
    _apply,
    _leap,
    _leap_length,
    _Replica,
    _State,
)
from perfmodel.errors import InputError

# ---------------------------------------------------------------------------
# blocks of steps and the event loop
# ---------------------------------------------------------------------------

class _Block:
    """The steps of one block: feature rows per replica-step, flags, log records."""

    def __init__(self):
        self.parts: list = []        # tuples (one row), arrays (rows of a leap) or None (mixed)
        self.rows = 0                # replica-step rows so far
        self.mixed: list = []        # (row, chunks, ctx) of steps with a prefill chunk
        self.row_step: list = []     # block-relative step of each row (data parallel only)
        self.starved: list = []      # per step: could an arrival have been admitted?
        self.log: list = []          # per replica-step: (step, replica, n, ctx, ids, run, wait,
        #                              routed)
        self.n = 0                   # steps
        self.idle = False            # ended because no replica had work


_ZEROS = np.zeros(0, np.intp)
_max = np.maximum.reduce


def _row(n: np.ndarray, ctx: np.ndarray, B: int, S: int, with_sd: bool = True,
         pre: list | None = None) -> tuple:
    """The step features (:data:`_KEYS`) of one step, equal to the feature kernel's.

    :func:`perfmodel.data.features.request_features` on one step, without its
    per-call set-up: decodes summed in closed form, prefill chunks (few) from
    their arrays.  Every sum but ``chunk_sd``'s is of integers or halves
    (exact in any order); ``chunk_sd`` sums in the kernel's order (bincount),
    so the rows are bit-identical (``tests/decisions/test_simulate_v1.py``).
    ``with_sd=False`` (a model that does not use ``chunk_sd``) leaves it at 0.
    ``pre``: the positions of the chunks > 1 when the caller knows them.
    """
    global _ZEROS
    cs = float(_add(ctx))
    cmax = float(_max(ctx))
    if S == B:                                   # every chunk is one token
        return (B, B, cs, cmax, cs + 0.5 * B, 0.0, cs, 0.0, 0.0)
    if pre is None:
        pre = (n > 1).nonzero()[0]
        c, x = n[pre].tolist(), ctx[pre].tolist()       # a few prefill chunks
    else:
        c, x = [int(n[p]) for p in pre], [int(ctx[p]) for p in pre]
    attn_pre = float(sum(ci * (xi + ci / 2.0) for ci, xi in zip(c, x)))
    n_dec = B - len(c)
    dec_ctx = cs - float(sum(x))
    sd = 0.0
    if with_sd:
        if _ZEROS.size < B:
            _ZEROS = np.zeros(2 * B, np.intp)
        dev = n - S / B
        sd = float(np.sqrt(np.bincount(_ZEROS[:B], weights=dev * dev, minlength=1)[0] / B))
    return (B, S, cs, cmax, attn_pre + dec_ctx + 0.5 * n_dec, attn_pre, dec_ctx,
            float(sum(ci * ci for ci in c)), sd)


def _features(blk: _Block) -> dict:
    F = np.empty((blk.rows, len(_KEYS)))
    r = 0
    for part in blk.parts:
        if part is None:
            r += 1
        elif isinstance(part, tuple):
            F[r] = part
            r += 1
        else:
            F[r:r + part.shape[0]] = part
            r += part.shape[0]
    if blk.mixed:
        rows = [m[0] for m in blk.mixed]
        c = np.concatenate([m[1] for m in blk.mixed])
        x = np.concatenate([m[2] for m in blk.mixed])
        counts = np.fromiter((m[1].size for m in blk.mixed), np.int64, len(blk.mixed))
        f = request_features(c, x, counts)
        F[rows] = np.column_stack([f[k] for k in _KEYS])
    return {k: F[:, i] for i, k in enumerate(_KEYS)}


class _Loop:
    """The event loop over replicas (see the module docstring)."""

    def __init__(self, model, cfg, P, O, arrival, concurrency, seed, keep_steps):
        self.model, self.cfg, self.keep = model, cfg, keep_steps
        self.st = _State(P, O, arrival)
        free = cfg.num_gpu_blocks if cfg.num_gpu_blocks is not None else _BIG
        self.reps = [_Replica(free) for _ in range(cfg.data_parallel_size)]
        self.rng = np.random.default_rng(seed)
        self.noise = np.zeros(0)
        self.closed = concurrency is not None
        self.N = P.size
        self.done = 0
        self.rr = 0
        self.next_issue = 0
        self.routed = 0              # requests routed so far (open loop: arrivals queued)
        # closed loop with a client round trip: issued requests become timed arrivals
        self.delayed = self.closed and cfg.client_delayed
        self.deferred: list = []     # issued in this block, not yet arrived (delayed only)
        requires = getattr(getattr(model, "model", None), "requires", None)
        self.with_sd = requires is None or "chunk_sd" in requires

    # -- routing -----------------------------------------------------------
    def route(self, i: int):
        reps = self.reps
        if len(reps) == 1:
            r = 0
        elif self.cfg.routing == "round_robin":
            r = self.rr % len(reps)
            self.rr += 1
        else:
            loads = [rep.load() for rep in reps]
            r = loads.index(min(loads))
        self.st.replica[i] = r
        reps[r].waiting.append(i)
        self.routed += 1

    def issue(self, k: int, step: int):
        """Closed loop: issue the next ``k`` requests at the end of ``step`` (-1: time 0).

        With a client round trip they are kept in ``deferred`` (they arrive later, see
        :func:`_run`) instead of being routed now."""
        for _ in range(k):
            if self.next_issue >= self.N:
                return
            i = self.next_issue
            self.st.issue_step[i] = step
            self.next_issue += 1
            if self.delayed:
                self.deferred.append(i)
            else:
                self.route(i)

    # -- one block ----------------------------------------------------------
    def block(self, K: int, step0: int) -> _Block:
        b = _Block()
        cfg, st, reps, keep = self.cfg, self.st, self.reps, self.keep
        single = len(reps) == 1
        j = 0
        while j < K:
            s = step0 + j
            finished: list = []
            any_work, starved, leap_ok = False, False, single
            for r, rep in enumerate(reps):
                if not rep.ids.size and not rep.waiting:
                    starved = True
                    continue
                m_before = rep.ids.size
                res = sched._fast(rep, st, cfg, s)
                if res is None:
                    res = sched._slow(rep, st, cfg, s)
                    hint = None
                else:
                    hint = rep.hint
                pos, n, starv, pre, full = res
                starved |= starv
                rep.low = min(rep.low, rep.free)
                if not n.size:
                    continue
                any_work = True
                n_run, n_wait = rep.ids.size, len(rep.waiting)
                ids = (rep.ids[:n.size] if full else rep.ids[pos]) if keep else None
                B = n.size
                S = int(_add(n)) if hint is None else hint[1]
                ctx = _apply(rep, st, pos, n, full, s, finished)
                b.parts.append(_row(n, ctx, B, S, self.with_sd,
                                    None if hint is None else hint[0]))
                leap_ok = leap_ok and S == B
                b.rows += 1
                if not single:
                    b.row_step.append(j)
                if keep:
                    b.log.append((s, r, n, ctx, ids, n_run, n_wait, self.routed))
                # a leap needs: every running request scheduled, none admitted, no preemption
                leap_ok = leap_ok and full and B == m_before == n_run and not pre
            if not any_work:
                b.idle = True
                break
            b.starved.append(starved)
            j += 1
            b.n = j
            if finished:
                self.done += len(finished)
                if self.closed:
                    self.issue(len(finished), s)
                if self.done >= self.N or self.deferred:
                    break
                continue
            rep = reps[0]
            if (leap_ok and j < K and rep.ids.size <= cfg.max_num_batched_tokens
                    and not np.any(rep.tgt - rep.comp != 1)):       # all decoding now
                j = self._leap(b, rep, K - j, s, starved)
                if self.done >= self.N or self.deferred:
                    break
        return b

    def _leap(self, b: _Block, rep: _Replica, kmax: int, s: int, starved: bool) -> int:
        """All-decode steps after step ``s`` until an event; return the next block step."""
        m = _leap_length(rep, self.cfg, kmax)
        if m <= 0:
            return b.n
        ids = rep.ids if self.keep else None
        n_wait = len(rep.waiting)
        finished: list = []
        F, ctx0 = _leap(rep, self.st, self.cfg, m, s, finished)
        b.parts.append(F)
        b.rows += m
        b.starved.extend([starved] * m)
        if self.keep:
            ones = np.ones(ids.size, np.int64)
            b.log.extend((s + 1 + k, 0, ones, ctx0 + k, ids, ids.size, n_wait, self.routed)
                         for k in range(m))
        b.n += m
        if finished:
            self.done += len(finished)
            if self.closed:
                self.issue(len(finished), s + m)
        return b.n

    def price(self, b: _Block, step0: int) -> np.ndarray:
        """Model time (ms) of each step of a block, noise included."""
        f = _features(b)
        self.last_BS = (f["B"], f["S"])
        y = np.asarray(self.model.predict(f), dtype=float).ravel()
        if y.size != b.rows or not np.all(np.isfinite(y)) or np.any(y <= 0):
            bad = np.nonzero(~(np.isfinite(y) & (y > 0)))[0] if y.size == b.rows else [0]
            k = int(bad[0]) if len(bad) else 0
            raise InputError(f"model predicted {y[k:k + 1].tolist() if y.size else []} ms for a "
                             f"step with B={int(f['B'][k])}, S={int(f['S'][k])}; a step time "
                             f"must be one positive number per step")
        if len(self.reps) > 1:
            rs = np.asarray(b.row_step)
            starts = np.flatnonzero(np.r_[True, rs[1:] != rs[:-1]])
            y = np.maximum.reduceat(y, starts)
        if self.cfg.step_noise_sd > 0:
            need = step0 + y.size
            if self.noise.size < need:
                extra = max(need - self.noise.size, 4096)
                self.noise = np.concatenate([self.noise, self.rng.normal(
                    0.0, self.cfg.step_noise_sd, extra)])
            y = y * np.exp(self.noise[step0:step0 + y.size])
        return y

    # -- checkpoints ---------------------------------------------------------
    def snapshot(self):
        st = self.st
        act = np.concatenate([rep.ids for rep in self.reps]
                             + [np.fromiter(rep.waiting, np.int64, len(rep.waiting))
                                for rep in self.reps])
        arrs = ("tgt", "comp", "gen", "blk", "first_step", "finish_step", "admit_step", "npre")
        return (act, {a: getattr(st, a)[act].copy() for a in arrs},
                [rep.snapshot() for rep in self.reps], self.done, self.rr, self.routed,
                self.next_issue)

    def restore(self, snap):
        act, vals, reps, self.done, self.rr, self.routed, nxt = snap
        self.st.issue_step[nxt:self.next_issue] = -1      # issued in the undone steps
        self.next_issue = nxt
        self.deferred.clear()
        for a, v in vals.items():
            getattr(self.st, a)[act] = v
        for rep, s in zip(self.reps, reps):
            rep.restore(s)


def _run(model, cfg, P, O, arrival=None, *, concurrency=None, seed=0, keep_steps=True,
         max_steps=None):
    """Simulate; return (state, step log rows, step start times, step model ms, step ms,
    arrival times in order).

    Steps are priced with :func:`._common._step_time_model` (the fit's mean
    step time without step noise).

    The returned arrival times are when requests became eligible for scheduling
    (send time plus ``cfg.request_intake_ms``); ``state.arrival`` keeps the send
    times of an open loop.
    """
    model = _step_time_model(model, cfg)
    loop = _Loop(model, cfg, P, O, np.full(P.size, np.nan) if arrival is None
                 else np.asarray(arrival, float), concurrency, seed, keep_steps)
    st, N = loop.st, P.size
    ovh = cfg.step_overhead_ms
    intake, resp = cfg.request_intake_ms / 1000.0, cfg.response_delay_ms / 1000.0
    timed = not loop.closed or loop.delayed         # requests enter as timed arrivals
    if loop.delayed:                  # grows as clients re-issue (sorted: see the docstring)
        loop.issue(min(concurrency, N), -1)
        order, arr_sorted = list(loop.deferred), [intake] * len(loop.deferred)
        loop.deferred.clear()
    elif loop.closed:
        loop.issue(min(concurrency, N), -1)
        order = np.zeros(0, np.int64)
        arr_sorted = st.arrival[order]
    else:
        order = np.argsort(st.arrival, kind="stable")
        arr_sorted = st.arrival[order] + intake if intake else st.arrival[order]
    ptr, t, step, K = 0, 0.0, 0, 16
    starts_all, model_all, logs = [], [], []
    sums = np.zeros(3)                  # replica-steps, sum of B, sum of S
    while loop.done < N:
        n_arr = len(arr_sorted)
        if timed:
            while ptr < n_arr and arr_sorted[ptr] <= t:
                loop.route(int(order[ptr]))
                ptr += 1
            if all(not rep.ids.size and not rep.waiting for rep in loop.reps):
                t = float(arr_sorted[ptr])
                continue
        pending = ptr < n_arr and timed
        kmax = K if max_steps is None else max(1, min(K, max_steps - step))
        snap = loop.snapshot() if pending else None
        b = loop.block(kmax, step)
        if not b.n:
            raise InputError("the scheduler could not schedule any request (no progress): "
                             "a request does not fit in the KV cache")
        y = loop.price(b, step)
        dur = (ovh + y) / 1000.0
        starts = t + np.concatenate([[0.0], np.cumsum(dur[:-1])])
        if pending:
            hit = starts >= arr_sorted[ptr]
            if len(loop.reps) == 1:
                hit &= np.asarray(b.starved, bool)
            hit[0] = False
            if hit.any():
                j = int(np.argmax(hit))
                loop.restore(snap)
                b = loop.block(j, step)
                y, dur, starts = y[:j], dur[:j], starts[:j]
                K = max(4, 2 * j)
            else:
                K = min(2 * K, 1024)
        else:
            K = min(2 * K, 1024)
        starts_all.append(starts)
        model_all.append(y)
        nrows = b.n if len(loop.reps) == 1 else len(b.row_step)
        sums += (nrows, float(loop.last_BS[0][:nrows].sum()), float(loop.last_BS[1][:nrows].sum()))
        if keep_steps:
            logs.append(b.log)
        step += b.n
        t = float(starts[-1] + dur[-1]) if b.n else t
        if loop.deferred:             # issued at the block's last step: seen, sent, taken in
            order.extend(loop.deferred)
            arr_sorted.extend([t + resp + intake] * len(loop.deferred))
            loop.deferred.clear()
        if max_steps is not None and step >= max_steps and loop.done < N:
            raise InputError(f"simulation did not finish within max_steps={max_steps} steps")
    starts = np.concatenate(starts_all) if starts_all else np.zeros(0)
    model_ms = np.concatenate(model_all) if model_all else np.zeros(0)
    st.kv_peak_blocks = ([cfg.num_gpu_blocks - rep.low for rep in loop.reps]
                         if cfg.num_gpu_blocks is not None else None)
    st.step_sums = sums
    return (st, [r for lg in logs for r in lg], starts, model_ms, ovh + model_ms,
            np.asarray(arr_sorted, float))
