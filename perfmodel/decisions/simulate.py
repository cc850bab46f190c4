"""A discrete-event continuous-batching simulator driven by a fitted step model.

Problem
-------
A step model predicts the time of one engine step; an operator wants the
end-to-end numbers of a serving configuration: output tokens/s, time to first
token (TTFT), time per output token (TPOT) and request latency.  This module
replays the engine loop of a vLLM-like scheduler step by step: at each step a
scheduler picks requests and chunk sizes under ``max_num_seqs`` and
``max_num_batched_tokens`` (chunked prefill), the step model predicts the
model-run time from the step's features (``B``, ``S`` and, for context-aware
models, per-request chunk sizes and prior contexts), a fixed per-step overhead
outside the model run is added, and tokens are emitted at the end of the step.

The engine loop
---------------
* A request with prompt ``P`` and output ``O`` first computes its prompt, in
  chunks when chunked prefill is on; the step that computes the last prompt
  chunk samples the first output token (its end time is the request's first
  token time).  Each later step computes one token (a decode) and samples the
  next, so a request runs ``O - 1`` decode steps after its prefill.
* The prior context of a chunk (``context_lens``) is the number of tokens the
  request has computed before the step: ``num_computed`` for a prefill chunk,
  ``P + g - 1`` for a decode after ``g`` sampled tokens (vLLM's
  ``num_computed_tokens``).
* A step starts when the previous one ends (or, when the engine is idle, at the
  next arrival); it lasts ``step_overhead_ms + T_model``; requests arriving
  during a step are scheduled from the next step on.
* Scheduling policies (``policy``):

  ``'decode_first'`` (Sarathi-Serve, vLLM V0 with chunked prefill): one token
      for every running decode, then the remaining prompt of partially
      prefilled running requests, then new requests from the waiting queue
      (FCFS) while fewer than ``max_num_seqs`` run and tokens remain.
  ``'prefill_first'``: partial prefills and new admissions first, decodes
      take what budget is left (decodes stall while prefills fill the budget).
  ``'fcfs'`` (vLLM V1): running requests in admission order, each taking one
      token (decode) or its remaining prompt (prefill) as the budget allows,
      then new admissions.

  A prefill chunk is also capped by ``long_prefill_token_threshold`` when it
  is positive.  Without chunked prefill, a prompt must fit in the step's
  remaining budget whole or waits.
* Not modelled: preemption when the KV cache is full, speculative decoding,
  prefix caching, detokenisation and client/network time.

Metrics
-------
``TTFT = first_token - arrival``; ``TPOT = (finish - first_token) / (O - 1)``
(vLLM's benchmark definition; undefined for ``O = 1``);
``e2e = finish - arrival``; output tokens/s ``= sum O / makespan`` with the
makespan from the first arrival to the last finish.  Checked against
hand-computed schedules in ``tests/decisions/test_simulate.py``.

Validation
----------
:func:`compare_to_run` gives relative errors of a simulation against a
measured run summary; :func:`validate_closed_loop` fits or takes a step
model, estimates the overhead from the run's own step trace
(:func:`estimate_step_overhead`) and simulates the run's set-up.
"""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from itertools import product
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from perfmodel._checks import check_choice, check_int_range, check_positive
from perfmodel.data.features import batch_features
from perfmodel.errors import InputError

__all__ = [
    "POLICIES",
    "SETUP_KEYS",
    "EngineConfig",
    "OverheadEstimate",
    "SimulationResult",
    "ValidationResult",
    "batch_features",
    "compare_to_run",
    "estimate_step_overhead",
    "evaluate_policies",
    "pareto_front",
    "plot_policy_contour",
    "plot_policy_frontier",
    "poisson_arrivals",
    "run_setup",
    "simulate_closed_loop",
    "simulate_open_loop",
    "validate_closed_loop",
]

POLICIES = ("decode_first", "prefill_first", "fcfs")


# ---------------------------------------------------------------------------
# argument checks
# ---------------------------------------------------------------------------

def _per_request(name: str, value, n: int) -> np.ndarray:
    """An int or a length-n sequence of ints >= 1 -> int64 array of length n."""
    if np.isscalar(value):
        return np.full(n, check_int_range(name, value, 1, integral_float=True), dtype=np.int64)
    a = np.asarray(value)
    if a.ndim != 1 or a.size != n:
        raise InputError(f"{name} must be an integer or a sequence of {n} integers, "
                         f"got shape {a.shape}")
    if not np.issubdtype(a.dtype, np.number) or not np.all(np.isfinite(a.astype(float))):
        raise InputError(f"{name} must hold finite integers")
    bad = np.nonzero((a < 1) | (a != np.round(a)))[0]
    if bad.size:
        raise InputError(f"{name} must be integers >= 1: {bad.size} bad values, first at "
                         f"positions {bad[:5].tolist()}")
    return a.astype(np.int64)


def _check_model(model):
    if not hasattr(model, "predict") or not callable(model.predict):
        raise InputError(f"model must have a .predict(features) method (e.g. a FitResult), "
                         f"got {type(model).__name__}")
    return model


# ---------------------------------------------------------------------------
# step time of one batch (features: perfmodel.data.features.batch_features)
# ---------------------------------------------------------------------------

def _predict_one(model, feats) -> float:
    y = np.asarray(model.predict(feats), dtype=float).ravel()
    if y.size != 1 or not np.isfinite(y[0]) or y[0] <= 0:
        raise InputError(f"model predicted {y.tolist()} ms for a step with B={int(feats['B'][0])}, "
                         f"S={int(feats['S'][0])}; a step time must be one positive number")
    return float(y[0])


# ---------------------------------------------------------------------------
# workload
# ---------------------------------------------------------------------------

def poisson_arrivals(rate: float, num_requests: int, seed: int = 0) -> np.ndarray:
    """Arrival times (s) of a Poisson process of ``rate`` requests/s, starting at 0.

    The first request arrives at 0; gaps are exponential with mean ``1/rate``
    from ``numpy.random.default_rng(seed)``.
    """
    rate = check_positive("rate", rate)
    n = check_int_range("num_requests", num_requests, 1, integral_float=True)
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / rate, n - 1)
    return np.concatenate([[0.0], np.cumsum(gaps)])


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


_STEP_COLUMNS = ["step", "start_s", "end_s", "batch_size", "total_tokens", "num_decode",
                 "num_prefill", "chunk_sizes", "context_lens", "request_ids", "duration_ms",
                 "step_ms", "num_running", "num_waiting"]


@dataclass
class SimulationResult:
    """Output of a simulation: per-request timings, the step log and the summary.

    Attributes
    ----------
    requests : DataFrame, one row per request: ``request_id, arrival_s,
        prompt_tokens, output_tokens, admitted_s, first_token_s, finish_s,
        ttft_s, tpot_ms, e2e_s``
    steps : DataFrame in the step-trace schema (``batch_size, total_tokens,
        chunk_sizes, context_lens, duration_ms`` = predicted model run, plus
        ``step_ms`` = overhead + model run, ``start_s``, ``end_s``,
        ``request_ids``, ``num_running``/``num_waiting`` after scheduling);
        empty when ``keep_steps=False``
    n_steps : int
    config : dict of the scheduler and workload settings
    """

    requests: pd.DataFrame
    steps: pd.DataFrame
    n_steps: int
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def makespan_s(self) -> float:
        r = self.requests
        return float(r["finish_s"].max() - r["arrival_s"].min())

    @property
    def output_throughput_tok_s(self) -> float:
        return float(self.requests["output_tokens"].sum() / self.makespan_s)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe summary: throughput, latency statistics and the configuration."""
        r = self.requests

        def stat(col, fn):
            v = r[col].to_numpy(float)
            v = v[np.isfinite(v)]
            return float(fn(v)) if v.size else None

        mk = self.makespan_s
        out = {
            "output_throughput_tok_s": self.output_throughput_tok_s,
            "request_throughput_req_s": float(len(r) / mk),
            "total_output_tokens": int(r["output_tokens"].sum()),
            "num_requests": len(r),
            "makespan_s": mk,
            "median_e2e_s": stat("e2e_s", np.median),
            "mean_e2e_s": stat("e2e_s", np.mean),
            "p90_e2e_s": stat("e2e_s", lambda v: np.quantile(v, 0.9)),
            "p99_e2e_s": stat("e2e_s", lambda v: np.quantile(v, 0.99)),
            "median_ttft_s": stat("ttft_s", np.median),
            "mean_ttft_s": stat("ttft_s", np.mean),
            "p90_ttft_s": stat("ttft_s", lambda v: np.quantile(v, 0.9)),
            "mean_tpot_ms": stat("tpot_ms", np.mean),
            "median_tpot_ms": stat("tpot_ms", np.median),
            "p90_tpot_ms": stat("tpot_ms", lambda v: np.quantile(v, 0.9)),
            "n_steps": int(self.n_steps),
        }
        if len(self.steps):
            s = self.steps
            out["mean_batch_size"] = float(s["batch_size"].mean())
            out["mean_total_tokens"] = float(s["total_tokens"].mean())
            out["mean_step_ms"] = float(s["step_ms"].mean())
        out["config"] = {k: (v if not isinstance(v, np.generic) else v.item())
                         for k, v in self.config.items()}
        return out


def _result(reqs: list[_Req], log, n_steps, cfg: EngineConfig, extra: dict) -> SimulationResult:
    reqs = sorted(reqs, key=lambda r: r.rid)
    arr = np.array([r.arrival for r in reqs])
    first = np.array([r.first for r in reqs])
    fin = np.array([r.finish for r in reqs])
    O = np.array([r.O for r in reqs])
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(O > 1, (fin - first) / np.maximum(O - 1, 1) * 1000.0, np.nan)
    df = pd.DataFrame({
        "request_id": [r.rid for r in reqs], "arrival_s": arr,
        "prompt_tokens": [r.P for r in reqs], "output_tokens": O,
        "admitted_s": [r.admitted for r in reqs], "first_token_s": first, "finish_s": fin,
        "ttft_s": first - arr, "tpot_ms": tpot, "e2e_s": fin - arr,
    })
    steps = pd.DataFrame(log, columns=_STEP_COLUMNS)
    return SimulationResult(requests=df, steps=steps, n_steps=n_steps,
                            config={**cfg.as_dict(), **extra})


def simulate_closed_loop(model, num_requests: int, concurrency: int, prompt_tokens,
                         output_tokens, *, max_num_seqs: int = 256,
                         max_num_batched_tokens: int = 2048, policy: str = "decode_first",
                         enable_chunked_prefill: bool = True,
                         long_prefill_token_threshold: int = 0, step_overhead_ms: float = 0.0,
                         step_noise_sd: float = 0.0, seed: int = 0, keep_steps: bool = True,
                         max_steps: int | None = 10_000_000,
                         engine: EngineConfig | None = None) -> SimulationResult:
    """Simulate a closed-loop benchmark: ``concurrency`` clients issue ``num_requests`` in all.

    Problem: predict what a closed-loop benchmark (e.g. 40 requests,
    concurrency 8, 32 prompt tokens, 50 output tokens; docs/model.md,
    Closed-loop benchmark) measures, from a step model.  ``concurrency``
    requests arrive at time 0; whenever one finishes, the next is issued at
    that instant (no think time), until ``num_requests`` have been issued.
    See the module docstring for the engine loop and metric definitions.

    Parameters
    ----------
    model : object with ``.predict(features_dict) -> array`` (ms), e.g. a
        :class:`perfmodel.core.results.FitResult`; it receives the keys of
        :func:`batch_features` as length-1 arrays
    num_requests, concurrency : int >= 1
    prompt_tokens, output_tokens : int >= 1 or a sequence of ``num_requests``
        ints (request ``i`` in issue order)
    max_num_seqs, max_num_batched_tokens : scheduler limits (vLLM's names)
    policy : ``'decode_first'`` (default), ``'prefill_first'`` or ``'fcfs'``
    enable_chunked_prefill : split prompts across steps (default True)
    long_prefill_token_threshold : cap on one prefill chunk (0: none)
    step_overhead_ms : time per step outside the model run (see
        :func:`estimate_step_overhead`)
    step_noise_sd : sd of a multiplicative log-normal noise on the model time
        (0: deterministic step times); drawn from ``seed``
    keep_steps : keep the step log (set False for large sweeps)
    engine : EngineConfig, optional
        The engine settings in one object, instead of ``max_num_seqs`` ...
        ``step_noise_sd`` (which must then be left at their defaults)

    Returns
    -------
    SimulationResult

    Examples
    --------
    >>> class Const:
    ...     def predict(self, f): return np.full(len(f["B"]), 10.0)
    >>> r = simulate_closed_loop(Const(), 8, 8, 32, 50)
    >>> round(r.to_dict()["median_e2e_s"], 9)   # 50 steps of 10 ms
    0.5
    """
    _check_model(model)
    N = check_int_range("num_requests", num_requests, 1, integral_float=True)
    C = check_int_range("concurrency", concurrency, 1, integral_float=True)
    Ps, Os, cfg = _workload(N, prompt_tokens, output_tokens, engine, (
        max_num_seqs, max_num_batched_tokens, policy, enable_chunked_prefill,
        long_prefill_token_threshold, step_overhead_ms, step_noise_sd))
    first = [_Req(i, 0.0, Ps[i], Os[i]) for i in range(min(C, N))]
    reqs, log, n = _run(model, first, cfg, closed=(N, Ps, Os), seed=seed, keep_steps=keep_steps,
                        max_steps=max_steps)
    extra = {"mode": "closed_loop", "num_requests": N, "concurrency": C,
                 "prompt_tokens": _scalar_or_list(Ps), "output_tokens": _scalar_or_list(Os), "seed": seed}
    return _result(reqs, log, n, cfg, extra)


def simulate_open_loop(model, *, prompt_tokens, output_tokens, rate: float | None = None,
                       num_requests: int | None = None, arrival_times=None,
                       max_num_seqs: int = 256, max_num_batched_tokens: int = 2048,
                       policy: str = "decode_first", enable_chunked_prefill: bool = True,
                       long_prefill_token_threshold: int = 0, step_overhead_ms: float = 0.0,
                       step_noise_sd: float = 0.0, seed: int = 0, keep_steps: bool = True,
                       max_steps: int | None = 10_000_000,
                       engine: EngineConfig | None = None) -> SimulationResult:
    """Simulate open-loop traffic: Poisson arrivals at ``rate`` or a replay of ``arrival_times``.

    Problem: latency under a given offered load (requests/s) rather than a
    fixed number of clients.  Give either ``rate`` and ``num_requests``
    (Poisson arrivals from ``seed``, first at 0) or ``arrival_times`` (seconds,
    any order, e.g. a trace's request timestamps).  Other parameters (``engine``
    included) as :func:`simulate_closed_loop`.

    Returns
    -------
    SimulationResult
    """
    _check_model(model)
    if arrival_times is not None:
        if rate is not None:
            raise InputError("give either rate (with num_requests) or arrival_times, not both")
        a = np.asarray(arrival_times, dtype=float).ravel()
        if a.size == 0 or not np.all(np.isfinite(a)) or np.any(a < 0):
            raise InputError("arrival_times must be a non-empty sequence of finite times >= 0 s")
        if (num_requests is not None
                and check_int_range("num_requests", num_requests, 1, integral_float=True) != a.size):
            raise InputError(f"num_requests={num_requests} but arrival_times has {a.size} items")
        arrivals = a
    else:
        if rate is None or num_requests is None:
            raise InputError("give rate and num_requests (Poisson arrivals) or arrival_times")
        arrivals = poisson_arrivals(rate, num_requests, seed)
    N = arrivals.size
    Ps, Os, cfg = _workload(N, prompt_tokens, output_tokens, engine, (
        max_num_seqs, max_num_batched_tokens, policy, enable_chunked_prefill,
        long_prefill_token_threshold, step_overhead_ms, step_noise_sd))
    reqs = [_Req(i, float(arrivals[i]), Ps[i], Os[i]) for i in range(N)]
    reqs, log, n = _run(model, reqs, cfg, closed=None, seed=seed, keep_steps=keep_steps,
                        max_steps=max_steps)
    extra = {"mode": "open_loop", "num_requests": N, "rate": None if rate is None else float(rate),
                 "prompt_tokens": _scalar_or_list(Ps), "output_tokens": _scalar_or_list(Os), "seed": seed}
    return _result(reqs, log, n, cfg, extra)


def _workload(N: int, prompt_tokens, output_tokens, engine, values: tuple):
    """Per-request prompt and output lengths and the engine settings, checked.

    ``values`` are the engine keyword arguments in :class:`EngineConfig`'s field order.
    """
    Ps = _per_request("prompt_tokens", prompt_tokens, N)
    Os = _per_request("output_tokens", output_tokens, N)
    cfg = _engine(engine, **dict(zip((f.name for f in fields(EngineConfig)), values,
                                     strict=True)))
    _check_fits(cfg, Ps)
    return Ps, Os, cfg


def _scalar_or_list(a: np.ndarray):
    return int(a[0]) if np.all(a == a[0]) else a.tolist()


def _check_fits(cfg: EngineConfig, Ps: np.ndarray):
    if not cfg.enable_chunked_prefill and Ps.max() > cfg.max_num_batched_tokens:
        raise InputError(f"prompt_tokens up to {int(Ps.max())} exceed max_num_batched_tokens="
                         f"{cfg.max_num_batched_tokens} without chunked prefill: such a prompt "
                         "can never be scheduled")


# ---------------------------------------------------------------------------
# overhead estimation
# ---------------------------------------------------------------------------

class OverheadEstimate(NamedTuple):
    """Per-step time outside the model run, in ms.

    ``overhead_ms`` is the median, ``q25_ms``/``q75_ms`` the quartiles,
    ``n`` the steps used and ``method`` ``'step_ms'`` or ``'timestamp'``.
    """

    overhead_ms: float
    q25_ms: float
    q75_ms: float
    n: int
    method: str


def estimate_step_overhead(trace, *, method: str = "auto",
                           timestamp_marks: str = "start") -> OverheadEstimate:
    """Estimate the time per step spent outside the model run.

    Problem: the simulator adds a fixed per-step overhead (scheduling, input
    preparation, output processing) to the model time.  Two estimates:

    ``'step_ms'``: median of ``step_ms - duration_ms`` (the collector's whole
        engine-step time minus the model run);
    ``'timestamp'``: median of ``1000 * (t_{i+1} - t_i) - duration_ms`` over
        consecutive steps in time order, where ``t`` is the step's
        ``timestamp`` (s) marking its start (``timestamp_marks='start'``, the
        duration of step ``i`` is subtracted) or its end (``'end'``, the
        duration of step ``i+1``).  This also counts time between engine
        steps (client loop, request intake); negative gaps are dropped, and
        the median ignores the rare idle gaps.

    ``'auto'`` uses timestamps when present, else ``step_ms``.

    Returns
    -------
    OverheadEstimate
    """
    if not isinstance(trace, pd.DataFrame):
        raise InputError(f"trace must be a pandas DataFrame, got {type(trace).__name__}")
    if method not in ("auto", "step_ms", "timestamp"):
        raise InputError(f"method must be 'auto', 'step_ms' or 'timestamp', got {method!r}")
    if timestamp_marks not in ("start", "end"):
        raise InputError(f"timestamp_marks must be 'start' or 'end', got {timestamp_marks!r}")
    if "duration_ms" not in trace.columns:
        raise InputError("trace has no duration_ms column")
    if method == "auto":
        method = "timestamp" if "timestamp" in trace.columns else "step_ms"
    dur = pd.to_numeric(trace["duration_ms"], errors="coerce").to_numpy(float)
    if method == "step_ms":
        if "step_ms" not in trace.columns:
            raise InputError("trace has neither a timestamp nor a step_ms column: cannot estimate "
                             "the per-step overhead (give step_overhead_ms instead)")
        d = pd.to_numeric(trace["step_ms"], errors="coerce").to_numpy(float) - dur
    else:
        if "timestamp" not in trace.columns:
            raise InputError("trace has no timestamp column (method='timestamp')")
        ts = pd.to_numeric(trace["timestamp"], errors="coerce").to_numpy(float)
        o = np.argsort(ts, kind="stable")
        ts, du = ts[o], dur[o]
        gaps = np.diff(ts) * 1000.0
        d = gaps - (du[:-1] if timestamp_marks == "start" else du[1:])
        d = d[d >= 0]
    d = d[np.isfinite(d)]
    if d.size == 0:
        raise InputError(f"no usable steps to estimate the overhead by {method!r}")
    q25, med, q75 = np.quantile(d, [0.25, 0.5, 0.75])
    return OverheadEstimate(float(max(med, 0.0)), float(q25), float(q75), int(d.size), method)


# ---------------------------------------------------------------------------
# comparison with measured runs
# ---------------------------------------------------------------------------

#: set-up keys of a measured run: canonical name -> aliases, searched in the collector's
#: ``workload.params`` and ``workload.engine_overrides``, then under ``config``, ``settings``,
#: ``engine_args``, then at the top level (where ``output_tokens`` is NOT accepted: in the
#: collector's summary it is the run's total output tokens).
SETUP_KEYS = {
    "num_requests": ("num_requests", "n_requests"),
    "concurrency": ("concurrency", "max_concurrency"),
    "prompt_tokens": ("prompt_tokens", "prompt_len", "input_len"),
    "output_tokens": ("output_tokens", "output_len", "max_tokens"),
    "max_num_seqs": ("max_num_seqs",),
    "max_num_batched_tokens": ("max_num_batched_tokens", "token_cap"),
}


def _places(summary: Mapping) -> list[Mapping]:
    out = []
    wl = summary.get("workload")
    if isinstance(wl, Mapping):
        for k in ("params", "engine_overrides"):
            if isinstance(wl.get(k), Mapping):
                out.append(wl[k])
    for k in ("config", "settings", "engine_args"):
        if isinstance(summary.get(k), Mapping):
            out.append(summary[k])
    return out


def run_setup(summary: Mapping) -> dict[str, Any]:
    """The set-up of a measured closed-loop run (see :data:`SETUP_KEYS`); missing keys absent.

    Reads the collector's summary (``perfmodel.data.collect``: ``workload.params`` with
    ``num_requests, concurrency, prompt_len, output_len, max_num_seqs, token_cap``)
    or a flat / ``config`` dict with the canonical names.
    """
    if not isinstance(summary, Mapping):
        raise InputError(f"run_summary must be a dict, got {type(summary).__name__}")
    out = {}
    top = {k: v for k, v in summary.items() if k != "output_tokens"}
    for key, aliases in SETUP_KEYS.items():
        for d in [*_places(summary), top]:
            v = next((d[a] for a in aliases if a in d and d[a] is not None), None)
            if v is not None:
                out[key] = v
                break
    return out


def _per_request_values(summary: Mapping, name: str) -> np.ndarray | None:
    """Per-request ``name`` ('e2e', 'ttft') in seconds, from a list or the collector's requests."""
    v = summary.get(f"{name}_s")
    if isinstance(v, (list, tuple, np.ndarray)):
        return np.asarray([np.nan if x is None else x for x in v], float)
    reqs = summary.get("requests")
    if isinstance(reqs, (list, tuple)) and reqs and isinstance(reqs[0], Mapping):
        if f"{name}_ms" in reqs[0]:
            return np.asarray([np.nan if r.get(f"{name}_ms") is None else r[f"{name}_ms"]
                               for r in reqs], float) / 1000.0
        if f"{name}_s" in reqs[0]:
            return np.asarray([np.nan if r.get(f"{name}_s") is None else r[f"{name}_s"]
                               for r in reqs], float)
    return None


def _median_metric(summary: Mapping, name: str) -> float | None:
    v = _per_request_values(summary, name)
    if v is not None and np.isfinite(v).any():
        return float(np.median(v[np.isfinite(v)]))
    d = summary.get(f"{name}_ms")
    if isinstance(d, Mapping) and d.get("p50") is not None:
        return float(d["p50"]) / 1000.0
    m = summary.get(f"median_{name}_s")
    return None if m is None else float(m)


def _run_metric(summary: Mapping, name: str):
    if name == "output_throughput_tok_s":
        for k in ("output_throughput_tok_s", "output_tokens_per_s", "output_throughput"):
            if summary.get(k) is not None:
                return float(summary[k])
        return None
    if name == "median_e2e_s":
        return _median_metric(summary, "e2e")
    if name == "median_ttft_s":
        return _median_metric(summary, "ttft")
    if name == "mean_tpot_ms":
        v = summary.get("tpot_ms")
        if isinstance(v, (list, tuple, np.ndarray)):
            a = np.asarray([np.nan if x is None else x for x in v], float)
            return float(np.mean(a[np.isfinite(a)])) if np.isfinite(a).any() else None
        reqs = summary.get("requests")
        if isinstance(reqs, (list, tuple)) and reqs and isinstance(reqs[0], Mapping) \
                and {"e2e_ms", "ttft_ms", "output_tokens"} <= set(reqs[0]):
            t = [(r["e2e_ms"] - r["ttft_ms"]) / (r["output_tokens"] - 1) for r in reqs
                 if r.get("e2e_ms") is not None and r.get("ttft_ms") is not None
                 and (r.get("output_tokens") or 0) > 1]
            return float(np.mean(t)) if t else None
        m = summary.get("mean_tpot_ms")
        return None if m is None else float(m)
    raise KeyError(name)  # pragma: no cover


def compare_to_run(sim_result, run_summary: Mapping) -> dict[str, Any]:
    """Relative errors of a simulation against a measured run.

    Problem: the issue's goal is simulated output tokens/s within 5% and
    median end-to-end latency within 10% of a measured closed-loop run.
    Error = ``simulated / measured - 1`` (signed; positive = the simulation
    says faster throughput or longer latency).

    Run-summary keys read: the collector's closed-loop summary
    (:func:`perfmodel.data.collect.vllm_collector.closed_loop_summary`):
    ``output_tokens_per_s``, ``requests`` (per request ``ttft_ms``, ``e2e_ms``,
    ``output_tokens``), ``ttft_ms``/``e2e_ms`` dicts with ``p50``; or a flat
    dict with ``output_throughput_tok_s``, per-request lists ``e2e_s``,
    ``ttft_s``, ``tpot_ms`` or the summaries ``median_e2e_s``,
    ``median_ttft_s``, ``mean_tpot_ms``.  TPOT from the collector's requests
    is ``(e2e - ttft) / (output_tokens - 1)``.  Missing metrics are None.

    Parameters
    ----------
    sim_result : SimulationResult or its ``to_dict()``
    run_summary : dict (e.g. the collector's run-summary JSON)

    Returns
    -------
    dict with, per metric ``m`` in (output_throughput_tok_s, median_e2e_s,
    median_ttft_s, mean_tpot_ms): ``m`` -> {simulated, measured, rel_error}
    and a flat ``errors`` dict ``m -> rel_error``.
    """
    if isinstance(sim_result, SimulationResult):
        sim = sim_result.to_dict()
    elif isinstance(sim_result, Mapping):
        sim = dict(sim_result)
    else:
        raise InputError(f"sim_result must be a SimulationResult or a dict, got "
                         f"{type(sim_result).__name__}")
    if not isinstance(run_summary, Mapping):
        raise InputError(f"run_summary must be a dict, got {type(run_summary).__name__}")
    out: dict[str, Any] = {}
    errors = {}
    for m in ("output_throughput_tok_s", "median_e2e_s", "median_ttft_s", "mean_tpot_ms"):
        meas = _run_metric(run_summary, m)
        s = sim.get(m)
        err = None
        if meas is not None and s is not None and meas != 0:
            err = float(s) / meas - 1.0
        out[m] = {"simulated": None if s is None else float(s), "measured": meas, "rel_error": err}
        errors[m] = err
    if errors["output_throughput_tok_s"] is None:
        raise InputError("run_summary has no output throughput (expected key "
                         "'output_tokens_per_s' or 'output_throughput_tok_s')")
    out["errors"] = errors
    return out


@dataclass
class ValidationResult:
    """A simulation of a measured run and its errors (see :func:`validate_closed_loop`)."""

    simulation: SimulationResult
    comparison: dict
    overhead: OverheadEstimate | None
    step_overhead_ms: float
    settings: dict
    #: exp(median log(measured / predicted step time)) - 1 on the run's own trace: the
    #: drift of the run against the step model (0 when the model was fitted on it)
    step_time_bias: float | None = None

    @property
    def errors(self) -> dict:
        return self.comparison["errors"]

    def to_dict(self) -> dict:
        return {"errors": self.errors, "comparison": self.comparison,
                "step_overhead_ms": self.step_overhead_ms,
                "step_time_bias": self.step_time_bias,
                "overhead": None if self.overhead is None else self.overhead._asdict(),
                "settings": self.settings, "simulated": self.simulation.to_dict()}


def validate_closed_loop(model, trace: pd.DataFrame | None, run_summary: Mapping, *,
                         step_overhead_ms: float | None = None, policy: str = "fcfs",
                         **overrides) -> ValidationResult:
    """Simulate a measured closed-loop run and return the relative errors.

    Problem: check the simulator against a real run: the
    step model is fitted on (or given for) the run's step trace, the per-step
    overhead is estimated from the same trace, the run's own settings are
    simulated, and throughput / median latency are compared.

    Parameters
    ----------
    model : a fitted step model (``.predict``), or a model name (str) to fit
        on ``trace`` with :func:`perfmodel.core.fit.fit_model`
    trace : the run's step trace (canonical schema), used to fit (when
        ``model`` is a name) and to estimate the overhead; may be None when
        both ``model`` and ``step_overhead_ms`` are given
    run_summary : dict with the measured metrics (see :func:`compare_to_run`)
        and the set-up (:func:`run_setup`): ``num_requests``, ``concurrency``,
        ``prompt_tokens``, ``output_tokens`` and optionally ``max_num_seqs``,
        ``max_num_batched_tokens`` (the collector's ``workload.params``, or
        a ``config`` dict)
    step_overhead_ms : override the estimate from the trace
    policy : scheduling policy to simulate (default ``'fcfs'``, vLLM V1's)
    **overrides : other :func:`simulate_closed_loop` keyword arguments

    Returns
    -------
    ValidationResult, with ``errors`` (relative errors per metric) and
    ``step_time_bias``: ``exp(median log(T_measured / T_predicted)) - 1`` over
    the trace's steps, i.e. how much slower (positive) the run's steps were
    than the model says -- the run-level drift to report beside the error
    when the model was fitted on another trace (data/README.md, Noise floor and drift).
    """
    if not isinstance(run_summary, Mapping):
        raise InputError(f"run_summary must be a dict, got {type(run_summary).__name__}")
    if isinstance(model, str):
        if trace is None:
            raise InputError("a trace is needed to fit model " + repr(model))
        from perfmodel.core.fit import fit_model

        model = fit_model(trace, model)
    _check_model(model)
    est = None
    if step_overhead_ms is None:
        if trace is None:
            raise InputError("give a trace or step_overhead_ms")
        est = estimate_step_overhead(trace)
        step_overhead_ms = est.overhead_ms
    setup = run_setup(run_summary)
    need = {}
    for k in ("num_requests", "concurrency", "prompt_tokens", "output_tokens"):
        v = overrides.pop(k, None)
        v = setup.get(k) if v is None else v
        if v is None:
            raise InputError(f"run_summary has no {k!r} (set-up of the run); pass {k}=...")
        need[k] = v
    for k in ("max_num_seqs", "max_num_batched_tokens"):
        if k not in overrides and setup.get(k) is not None:
            overrides[k] = int(setup[k])
    sim = simulate_closed_loop(model, int(need["num_requests"]), int(need["concurrency"]),
                               need["prompt_tokens"], need["output_tokens"], policy=policy,
                               step_overhead_ms=step_overhead_ms, **overrides)
    comp = compare_to_run(sim, run_summary)
    bias = None
    if trace is not None and "duration_ms" in trace.columns:
        from perfmodel.data.trace import step_features

        y = pd.to_numeric(trace["duration_ms"], errors="coerce").to_numpy(float)
        yhat = np.asarray(model.predict(step_features(trace)), float).ravel()
        ok = np.isfinite(y) & np.isfinite(yhat) & (y > 0) & (yhat > 0)
        if ok.any():
            bias = float(np.exp(np.median(np.log(y[ok] / yhat[ok]))) - 1.0)
    return ValidationResult(sim, comp, est, float(step_overhead_ms),
                            {**need, **overrides, "policy": policy}, bias)


# ---------------------------------------------------------------------------
# policy evaluation
# ---------------------------------------------------------------------------

_METRICS = ("output_throughput_tok_s", "request_throughput_req_s", "median_e2e_s", "p90_e2e_s",
            "median_ttft_s", "p90_ttft_s", "mean_tpot_ms", "p90_tpot_ms", "n_steps",
            "mean_batch_size")


def evaluate_policies(model, workload: Mapping, *, policies=("decode_first", "prefill_first"),
                      max_num_batched_tokens=(256, 512, 1024, 2048),
                      max_num_seqs=(256,), long_prefill_token_threshold=(0,),
                      step_overhead_ms: float = 0.0, seed: int = 0,
                      seeds=None, engine: EngineConfig | None = None) -> pd.DataFrame:
    """Sweep batching policies with the simulator: throughput against latency.

    Problem: compare batching policies (docs/model.md, Closed-loop benchmark): chunk sizes
    (``max_num_batched_tokens``, ``long_prefill_token_threshold``),
    decode-first against prefill-first, and admission thresholds
    (``max_num_seqs``) on one workload.  Every combination of the given
    values is simulated (same ``seed``, so the same arrivals).

    Parameters
    ----------
    model : fitted step model (``.predict``)
    workload : closed loop ``{'num_requests', 'concurrency', 'prompt_tokens',
        'output_tokens'}`` or open loop ``{'rate', 'num_requests',
        'prompt_tokens', 'output_tokens'}`` (or ``'arrival_times'``)
    policies, max_num_batched_tokens, max_num_seqs, long_prefill_token_threshold :
        sequences of values to combine
    seed, seeds : one arrival seed, or several (``seeds`` wins): with several,
        every setting is simulated once per seed (the same arrivals for every
        setting), the metrics are the means over seeds, and the Pareto front
        counts a setting as dominated only where the paired seed-to-seed
        differences are significant (:func:`pareto_front` with ``samples``)
    engine : EngineConfig, optional
        The settings every run shares (``step_overhead_ms``,
        ``enable_chunked_prefill``, ``step_noise_sd``), instead of
        ``step_overhead_ms`` (which must then be left at 0); its ``policy``,
        ``max_num_batched_tokens``, ``max_num_seqs`` and
        ``long_prefill_token_threshold`` are replaced by each combination of
        the grids above

    Returns
    -------
    DataFrame, one row per combination: the settings and the metrics
    ``output_throughput_tok_s, request_throughput_req_s, median_e2e_s,
    p90_e2e_s, median_ttft_s, p90_ttft_s, mean_tpot_ms, p90_tpot_ms, n_steps,
    mean_batch_size`` (means over seeds), ``n_seeds``, the standard errors
    ``output_throughput_tok_s_se`` and ``median_e2e_s_se`` over seeds, plus
    ``pareto`` (True where no other row has both higher throughput and lower
    median e2e latency, beyond the seed-to-seed spread when there are several
    seeds).  A single seed gives a front that can hinge on differences far
    inside the simulator's noise (0.1 % in throughput): use several.
    """
    _check_model(model)
    if not isinstance(workload, Mapping):
        raise InputError(f"workload must be a dict, got {type(workload).__name__}")
    closed = "concurrency" in workload
    keys = (("num_requests", "concurrency", "prompt_tokens", "output_tokens") if closed
            else ("prompt_tokens", "output_tokens"))
    missing = [k for k in keys if k not in workload]
    if missing:
        raise InputError(f"workload is missing {missing}")
    poisson = {"rate", "num_requests"} <= set(workload)
    if not closed and "arrival_times" not in workload and not poisson:
        raise InputError("open-loop workload needs 'rate' and 'num_requests' or 'arrival_times'")
    grids = {}
    for name, vals in (("policy", policies), ("max_num_batched_tokens", max_num_batched_tokens),
                       ("max_num_seqs", max_num_seqs),
                       ("long_prefill_token_threshold", long_prefill_token_threshold)):
        vals = [vals] if isinstance(vals, (str, int, np.integer)) else list(vals)
        if not vals:
            raise InputError(f"{name} grid is empty")
        grids[name] = vals
    seeds = [seed] if seeds is None else [int(v) for v in np.atleast_1d(seeds)]
    if not seeds:
        raise InputError("seeds is empty")
    if engine is None:
        shared = {"step_overhead_ms": step_overhead_ms}
    else:
        shared = _engine(engine, step_overhead_ms=step_overhead_ms).as_dict()
        shared = {k: shared[k] for k in ("enable_chunked_prefill", "step_overhead_ms",
                                         "step_noise_sd")}
    rows, per_seed = [], []
    for pol, K, M, thr in product(*grids.values()):
        runs = []
        for sd in seeds:
            kw = {"max_num_seqs": M, "max_num_batched_tokens": K, "policy": pol,
                  "long_prefill_token_threshold": thr, **shared, "seed": sd, "keep_steps": True}
            if closed:
                r = simulate_closed_loop(model, workload["num_requests"],
                                         workload["concurrency"], workload["prompt_tokens"],
                                         workload["output_tokens"], **kw)
            else:
                r = simulate_open_loop(model, prompt_tokens=workload["prompt_tokens"],
                                       output_tokens=workload["output_tokens"],
                                       rate=workload.get("rate"),
                                       num_requests=workload.get("num_requests"),
                                       arrival_times=workload.get("arrival_times"), **kw)
            d = r.to_dict()
            runs.append([np.nan if d.get(m) is None else float(d[m]) for m in _METRICS])
        runs = np.asarray(runs)
        per_seed.append(runs)
        n = len(seeds)
        se = runs.std(axis=0, ddof=1) / np.sqrt(n) if n > 1 else np.zeros(len(_METRICS))
        rows.append({"policy": pol, "max_num_batched_tokens": K, "max_num_seqs": M,
                     "long_prefill_token_threshold": thr,
                     **dict(zip(_METRICS, runs.mean(axis=0))), "n_seeds": n,
                     "output_throughput_tok_s_se": se[_METRICS.index("output_throughput_tok_s")],
                     "median_e2e_s_se": se[_METRICS.index("median_e2e_s")]})
    df = pd.DataFrame(rows)
    for m in ("n_steps",):
        if len(seeds) == 1:
            df[m] = df[m].astype(int)
    stack = np.stack(per_seed)                       # settings x seeds x metrics
    samples = {m: stack[:, :, i] for i, m in enumerate(_METRICS)}
    df["pareto"] = pareto_front(df, samples=samples)
    return df


def pareto_front(df: pd.DataFrame, x: str = "median_e2e_s",
                 y: str = "output_throughput_tok_s", *, samples=None,
                 z: float = 2.0) -> np.ndarray:
    """Boolean mask of rows not dominated in (lower ``x``, higher ``y``).

    Without ``samples``, row ``j`` dominates row ``i`` when it is at least as
    good in both and better in one.  With ``samples`` (``{column: array of
    shape (rows, seeds)}``, the per-seed values behind the means, paired by
    seed), ``j`` dominates ``i`` only when it is better in one metric by more
    than ``z`` standard errors of the paired difference and not worse by more
    than ``z`` standard errors in the other: settings whose differences lie
    inside the seed-to-seed spread do not dominate each other.  With one seed
    the two rules agree.
    """
    for c in (x, y):
        if c not in df.columns:
            raise InputError(f"column {c!r} not in the table (columns: {list(df.columns)})")
    if not (np.isfinite(z) and z >= 0):
        raise InputError(f"z must be a finite number >= 0, got {z!r}")
    if samples is None:
        X = df[x].to_numpy(float)[:, None]
        Y = df[y].to_numpy(float)[:, None]
    else:
        X = np.asarray(samples[x], float)
        Y = np.asarray(samples[y], float)
        if X.shape != Y.shape or X.ndim != 2 or X.shape[0] != len(df):
            raise InputError(f"samples must hold ({len(df)}, seeds) arrays for {x!r} and {y!r}")

    def gain(A, i, j, sign):
        # mean paired improvement of j over i (sign +1: larger is better) and its s.e.
        d = sign * (A[j] - A[i])
        se = d.std(ddof=1) / np.sqrt(d.size) if d.size > 1 else 0.0
        return d.mean(), se

    keep = np.ones(len(df), bool)
    for i in range(len(df)):
        for j in range(len(df)):
            if i == j:
                continue
            gx, sx = gain(X, i, j, -1.0)
            gy, sy = gain(Y, i, j, +1.0)
            better = (gx > z * sx and gx > 0) or (gy > z * sy and gy > 0)
            not_worse = gx >= -z * sx and gy >= -z * sy
            if better and not_worse:
                keep[i] = False
                break
    return keep


def _get_ax(ax):
    from perfmodel.plotting import get_ax

    return get_ax(ax)


def plot_policy_frontier(df: pd.DataFrame, ax=None, *, x: str = "median_e2e_s",
                         y: str = "output_throughput_tok_s", by: str = "policy"):
    """Throughput against latency, one marker per setting, the Pareto front as a line.

    ``df`` is the output of :func:`evaluate_policies`; points are grouped
    (coloured) by the column ``by``; the front is its ``pareto`` column when
    present (else :func:`pareto_front` of the means).  Returns the ``ax``.
    """
    if not isinstance(df, pd.DataFrame) or len(df) == 0:
        raise InputError("df must be a non-empty DataFrame from evaluate_policies")
    for c in (x, y, by):
        if c not in df.columns:
            raise InputError(f"column {c!r} not in the table (columns: {list(df.columns)})")
    ax = _get_ax(ax)
    for key, g in df.groupby(by, sort=True):
        ax.scatter(g[x], g[y], label=f"{by}={key}", alpha=0.8)
    # the front evaluate_policies judged against the seed spread, when it is there
    mask = df["pareto"].to_numpy(bool) if "pareto" in df.columns else pareto_front(df, x, y)
    front = df[mask].sort_values(x)
    ax.plot(front[x], front[y], "k--", lw=1, label="Pareto front")
    ax.set_xlabel(x.replace("_", " "))
    ax.set_ylabel(y.replace("_", " "))
    ax.legend(fontsize="small")
    return ax


def plot_policy_contour(df: pd.DataFrame, ax=None, *, x: str = "max_num_batched_tokens",
                        y: str = "max_num_seqs", z: str = "output_throughput_tok_s",
                        levels: int = 10):
    """Contour of a metric over two settings (rows of :func:`evaluate_policies`).

    Needs at least three distinct (x, y) points not on one line; when several
    rows share an (x, y) (e.g. several policies), filter ``df`` first.
    Returns the ``ax``.
    """
    if not isinstance(df, pd.DataFrame) or len(df) == 0:
        raise InputError("df must be a non-empty DataFrame from evaluate_policies")
    for c in (x, y, z):
        if c not in df.columns:
            raise InputError(f"column {c!r} not in the table (columns: {list(df.columns)})")
    if df.duplicated([x, y]).any():
        raise InputError(f"several rows share the same ({x}, {y}); filter df (e.g. by policy) "
                         "first")
    if df[x].nunique() < 2 or df[y].nunique() < 2:
        raise InputError(f"a contour needs at least two distinct values of {x} and of {y}")
    ax = _get_ax(ax)
    piv = df.pivot(index=y, columns=x, values=z).sort_index().sort_index(axis=1)
    cs = ax.contourf(piv.columns.to_numpy(float), piv.index.to_numpy(float),
                     piv.to_numpy(float), levels=levels)
    ax.figure.colorbar(cs, ax=ax, label=z.replace("_", " "))
    ax.set_xlabel(x.replace("_", " "))
    ax.set_ylabel(y.replace("_", " "))
    return ax
