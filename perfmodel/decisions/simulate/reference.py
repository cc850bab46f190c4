"""The per-request reference loop: the engine as it was before the array engine.

Problem
-------
:mod:`.loop` and :mod:`.events` schedule with numpy arrays and price steps in blocks; this
module keeps the straightforward loop (one Python object per request, one
model call per step) as an executable specification of the three policies
without a KV-cache limit.  ``tests/decisions/test_simulate_v1.py`` checks
that both give the same schedules, and ``benchmarks/bench_simulate.py``
measures the array engine against it.  It is not used by any simulation.
"""
from __future__ import annotations

import math
from collections import deque

import numpy as np

from perfmodel.data.features import batch_features
from perfmodel.decisions.simulate._common import _predict_one, _step_time_model
from perfmodel.decisions.simulate.engine import EngineConfig
from perfmodel.errors import InputError


class _Req:
    __slots__ = ("O", "P", "admitted", "arrival", "computed", "finish", "first", "generated",
                 "rid")

    def __init__(self, rid, arrival, P, O):
        self.rid = rid
        self.arrival = arrival
        self.P = int(P)
        self.O = int(O)
        self.computed = 0
        self.generated = 0
        self.first = math.nan
        self.finish = math.nan
        self.admitted = math.nan

    @property
    def in_prefill(self) -> bool:
        return self.computed < self.P


# ---------------------------------------------------------------------------
# scheduler (one step)
# ---------------------------------------------------------------------------

def _prefill_chunk(r: _Req, budget: int, cfg: EngineConfig) -> int:
    n = min(r.P - r.computed, budget)
    if cfg.long_prefill_token_threshold > 0:
        n = min(n, cfg.long_prefill_token_threshold)
    if not cfg.enable_chunked_prefill and n < r.P - r.computed:
        return 0
    return n


def _schedule(running: list, waiting: deque, now: float, cfg: EngineConfig) -> list:
    """One scheduling decision: list of (request, n_tokens), in batch order."""
    budget = cfg.max_num_batched_tokens
    out: list = []

    def decodes():
        nonlocal budget
        for r in running:
            if budget <= 0:
                break
            if not r.in_prefill:
                out.append((r, 1))
                budget -= 1

    def partials():
        nonlocal budget
        for r in running:
            if budget <= 0:
                break
            if r.in_prefill:
                n = _prefill_chunk(r, budget, cfg)
                if n > 0:
                    out.append((r, n))
                    budget -= n

    def admit():
        nonlocal budget
        while waiting and len(running) < cfg.max_num_seqs and budget > 0:
            r = waiting[0]
            n = _prefill_chunk(r, budget, cfg)
            if n <= 0:
                break
            waiting.popleft()
            r.admitted = now
            running.append(r)
            out.append((r, n))
            budget -= n

    if cfg.policy == "decode_first":
        decodes()
        partials()
        admit()
    elif cfg.policy == "prefill_first":
        partials()
        admit()
        decodes()
    else:  # fcfs: running in admission order, then waiting
        for r in running:
            if budget <= 0:
                break
            n = _prefill_chunk(r, budget, cfg) if r.in_prefill else 1
            if n > 0:
                out.append((r, n))
                budget -= n
        admit()
    return out


# ---------------------------------------------------------------------------
# the event loop
# ---------------------------------------------------------------------------

def _run_reference(model, requests: list[_Req], cfg: EngineConfig, *, closed: tuple | None, seed: int,
         keep_steps: bool, max_steps: int | None):
    """Run the engine loop.

    ``requests``: open loop, all requests (sorted by arrival).  Closed loop:
    ``closed = (num_requests, prompt array, output array)`` and ``requests``
    holds the first ``concurrency`` requests (arrival 0); each finish issues
    the next request at the finish time. Steps last the fit's mean time
    without step noise, as in :func:`.events._run`.  A client round trip
    (``cfg.request_intake_ms``, ``cfg.response_delay_ms``): a request is
    schedulable from ``arrival + intake``; its first token and finish are seen
    at the step end plus the response delay, and a closed-loop client sends
    the next request at that finish time.
    """
    model = _step_time_model(model, cfg)  # priced as in .events._run
    rng = np.random.default_rng(seed)
    pending = deque(sorted(requests, key=lambda r: (r.arrival, r.rid)))
    all_reqs = list(pending)
    issued = len(all_reqs)
    waiting: deque = deque()
    running: list = []
    t = 0.0
    log: list = []
    n_steps = 0
    total = closed[0] if closed else len(all_reqs)
    done = 0
    ovh = cfg.step_overhead_ms
    intake, resp = cfg.request_intake_ms / 1000.0, cfg.response_delay_ms / 1000.0

    def eligible(r):
        return r.arrival + intake if intake else r.arrival

    while done < total:
        while pending and eligible(pending[0]) <= t:
            waiting.append(pending.popleft())
        if not waiting and not running:
            t = eligible(pending[0])  # idle until the next arrival
            continue
        batch = _schedule(running, waiting, t, cfg)
        if not batch:  # pragma: no cover - guarded by the argument checks
            raise InputError("the scheduler could not schedule any request (no progress)")
        chunks = np.fromiter((n for _, n in batch), dtype=np.int64, count=len(batch))
        ctx = np.fromiter(((r.computed if r.in_prefill else r.P + r.generated - 1)
                           for r, _ in batch), dtype=np.int64, count=len(batch))
        feats = batch_features(chunks, ctx)
        t_model = _predict_one(model, feats)
        if cfg.step_noise_sd > 0:
            t_model *= float(np.exp(rng.normal(0.0, cfg.step_noise_sd)))
        step_ms = ovh + t_model
        end = t + step_ms / 1000.0
        n_dec = 0
        finished = []
        for (r, n) in batch:
            if r.in_prefill:
                r.computed += n
                if r.computed == r.P:
                    r.generated = 1
                    r.first = end + resp if resp else end
            else:
                n_dec += 1
                r.computed += 1
                r.generated += 1
            if r.generated >= r.O and not r.in_prefill:
                r.finish = end + resp if resp else end
                finished.append(r)
        if keep_steps:
            log.append((n_steps, t, end, len(batch), int(chunks.sum()), n_dec, len(batch) - n_dec,
                        ";".join(map(str, chunks.tolist())), ";".join(map(str, ctx.tolist())),
                        ";".join(str(r.rid) for r, _ in batch), t_model, step_ms,
                        len(running), len(waiting)))
        if finished:
            fin = {id(r) for r in finished}
            running[:] = [r for r in running if id(r) not in fin]
            done += len(finished)
            if closed:
                N, Ps, Os = closed
                for _ in finished:
                    if issued < N:
                        nr = _Req(issued, end + resp if resp else end, Ps[issued],
                                  Os[issued])
                        all_reqs.append(nr)
                        pending.append(nr)
                        issued += 1
        t = end
        n_steps += 1
        if max_steps is not None and n_steps >= max_steps and done < total:
            raise InputError(f"simulation did not finish within max_steps={max_steps} steps")
    return all_reqs, log, n_steps
