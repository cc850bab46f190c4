"""Workloads and the closed-/open-loop simulations: Poisson arrivals, per-request
prompt and output lengths, :func:`simulate_closed_loop`, :func:`simulate_open_loop`.
"""
from __future__ import annotations

from dataclasses import fields

import numpy as np

from perfmodel._checks import check_int_range, check_positive
from perfmodel.decisions.simulate._common import _check_model, _per_request
from perfmodel.decisions.simulate.engine import EngineConfig, _engine
from perfmodel.decisions.simulate.events import _run
from perfmodel.decisions.simulate.results import SimulationResult, _result
from perfmodel.errors import InputError

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
    With a client round trip (``engine.response_delay_ms``,
    ``engine.request_intake_ms``) the client issues it when it sees the
    finish, and the engine can schedule it only after the intake.
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
    run = _run(model, cfg, Ps, Os, concurrency=C, seed=seed, keep_steps=keep_steps,
               max_steps=max_steps)
    extra = {"mode": "closed_loop", "num_requests": N, "concurrency": C,
                 "prompt_tokens": _scalar_or_list(Ps), "output_tokens": _scalar_or_list(Os), "seed": seed}
    return _result(run, cfg, extra)


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
    run = _run(model, cfg, Ps, Os, arrivals, seed=seed, keep_steps=keep_steps,
               max_steps=max_steps)
    extra = {"mode": "open_loop", "num_requests": N, "rate": None if rate is None else float(rate),
                 "prompt_tokens": _scalar_or_list(Ps), "output_tokens": _scalar_or_list(Os), "seed": seed}
    return _result(run, cfg, extra)


def _workload(N: int, prompt_tokens, output_tokens, engine, values: tuple):
    """Per-request prompt and output lengths and the engine settings, checked.

    ``values`` are the engine keyword arguments in :class:`EngineConfig`'s field order.
    """
    Ps = _per_request("prompt_tokens", prompt_tokens, N)
    Os = _per_request("output_tokens", output_tokens, N)
    names = [f.name for f in fields(EngineConfig)][:len(values)]
    cfg = _engine(engine, **dict(zip(names, values, strict=True)))
    _check_fits(cfg, Ps, Os)
    return Ps, Os, cfg


def _scalar_or_list(a: np.ndarray):
    return int(a[0]) if np.all(a == a[0]) else a.tolist()


def _check_fits(cfg: EngineConfig, Ps: np.ndarray, Os: np.ndarray | None = None):
    if cfg.num_gpu_blocks is not None and Os is not None:
        # a request holds at most P + O - 1 computed tokens (its last token is never computed)
        need = -(-(Ps + Os - 1) // cfg.block_size)
        if need.max() > cfg.num_gpu_blocks:
            k = int(np.argmax(need))
            raise InputError(f"request {k} (prompt {int(Ps[k])}, output {int(Os[k])} tokens) needs "
                             f"{int(need[k])} KV blocks but the KV cache has num_gpu_blocks="
                             f"{cfg.num_gpu_blocks} of {cfg.block_size} tokens")
    if not cfg.enable_chunked_prefill and Ps.max() > cfg.max_num_batched_tokens:
        raise InputError(f"prompt_tokens up to {int(Ps.max())} exceed max_num_batched_tokens="
                         f"{cfg.max_num_batched_tokens} without chunked prefill: such a prompt "
                         "can never be scheduled")
