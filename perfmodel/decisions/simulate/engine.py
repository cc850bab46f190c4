"""The engine: :class:`EngineConfig`, the per-request state, the scheduler (one step)
and the event loop.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from perfmodel._checks import check_choice, check_int_range, check_positive
from perfmodel.data.features import batch_features
from perfmodel.decisions.simulate._common import _predict_one
from perfmodel.errors import InputError

POLICIES = ("decode_first", "prefill_first", "fcfs")


class _Req:
    __slots__ = (
        "O",
        "P",
        "admitted",
        "arrival",
        "computed",
        "finish",
        "first",
        "generated",
        "rid",
    )

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


@dataclass(frozen=True)
class EngineConfig:
    """The engine settings of one simulation (vLLM's names; see the module docstring).

    Parameters
    ----------
    max_num_seqs, max_num_batched_tokens : int >= 1, scheduler limits
    policy : ``'decode_first'`` (default), ``'prefill_first'`` or ``'fcfs'``
    enable_chunked_prefill : split prompts across steps (default True)
    long_prefill_token_threshold : int >= 0, cap on one prefill chunk (0: none)
    step_overhead_ms : float >= 0, time per step outside the model run
    step_noise_sd : float >= 0, sd of a multiplicative log-normal noise on the
        model time (0: deterministic step times)

    The values are checked (and integral floats made ints) on construction,
    with the messages of the keyword arguments of :func:`simulate_closed_loop`.

    Examples
    --------
    >>> EngineConfig(max_num_batched_tokens=512, policy="fcfs").max_num_seqs
    256
    """

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    policy: str = "decode_first"
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0
    step_overhead_ms: float = 0.0
    step_noise_sd: float = 0.0

    def __post_init__(self):
        check_choice("policy", self.policy, POLICIES)
        checked = {
            "max_num_seqs": check_int_range("max_num_seqs", self.max_num_seqs, 1,
                                            integral_float=True),
            "max_num_batched_tokens": check_int_range("max_num_batched_tokens",
                                                      self.max_num_batched_tokens, 1,
                                                      integral_float=True),
            "enable_chunked_prefill": bool(self.enable_chunked_prefill),
            "long_prefill_token_threshold": check_int_range("long_prefill_token_threshold",
                                                            self.long_prefill_token_threshold,
                                                            0, integral_float=True),
            "step_overhead_ms": check_positive("step_overhead_ms", self.step_overhead_ms,
                                               allow_zero=True),
            "step_noise_sd": check_positive("step_noise_sd", self.step_noise_sd,
                                            allow_zero=True),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    def as_dict(self) -> dict[str, Any]:
        """The settings as a dict, in field order."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


_ENGINE_DEFAULTS = EngineConfig()


def _engine(engine: EngineConfig | None, **keywords) -> EngineConfig:
    """``engine``, or an :class:`EngineConfig` from the keyword arguments.

    With ``engine`` given, the keywords must be at their defaults.
    """
    if engine is None:
        return EngineConfig(**keywords)
    if not isinstance(engine, EngineConfig):
        raise InputError(f"engine must be an EngineConfig, got {type(engine).__name__}")
    both = sorted(k for k, v in keywords.items() if v != getattr(_ENGINE_DEFAULTS, k))
    if both:
        raise InputError(f"give the engine settings either as engine=EngineConfig(...) or as "
                         f"keyword arguments, not both (got {', '.join(both)})")
    return engine


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

def _run(model, requests: list[_Req], cfg: EngineConfig, *, closed: tuple | None, seed: int,
         keep_steps: bool, max_steps: int | None):
    """Run the engine loop.

    ``requests``: open loop, all requests (sorted by arrival).  Closed loop:
    ``closed = (num_requests, prompt array, output array)`` and ``requests``
    holds the first ``concurrency`` requests (arrival 0); each finish issues
    the next request at the finish time.
    """
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
    while done < total:
        while pending and pending[0].arrival <= t:
            waiting.append(pending.popleft())
        if not waiting and not running:
            t = pending[0].arrival  # idle until the next arrival
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
                    r.first = end
            else:
                n_dec += 1
                r.computed += 1
                r.generated += 1
            if r.generated >= r.O and not r.in_prefill:
                r.finish = end
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
                        nr = _Req(issued, end, Ps[issued], Os[issued])
                        all_reqs.append(nr)
                        pending.append(nr)
                        issued += 1
        t = end
        n_steps += 1
        if max_steps is not None and n_steps >= max_steps and done < total:
            raise InputError(f"simulation did not finish within max_steps={max_steps} steps")
    return all_reqs, log, n_steps
