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
      then new admissions FCFS.

  A prefill chunk is also capped by ``long_prefill_token_threshold`` when it
  is positive.  Without chunked prefill, a prompt must fit in the step's
  remaining budget whole or waits.
* KV cache (``num_gpu_blocks``, ``block_size``): blocks allocated as tokens
  are computed; when a running request cannot get its blocks the last running
  request is preempted and later recomputes its tokens (vLLM V1); data-parallel
  replicas (``data_parallel_size``, ``routing``) step in lock step.
  docs/replay.md, Simulator, states the rules and the KV-cache formula
  (:mod:`.kvcache`).
* Client round trip (``request_intake_ms``, ``response_delay_ms``, both 0 by
  default): a request is schedulable that long after its send time, and the
  client sees a token that long after its step ends (first-token and finish
  times are the client's; a closed-loop client re-issues when it sees a
  finish).  docs/replay.md, Client round trip.
* Not modelled: prefix caching, asynchronous scheduling, speculative
  decoding, detokenisation and client/network time beyond those two delays.

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

Modules
-------
:mod:`.engine` (:class:`EngineConfig`), :mod:`.loop` (the array engine's scheduler: KV
cache, preemption, leaps), :mod:`.events` (its event loop: blocks, pricing, arrivals), :mod:`.kvcache` (KV blocks per GPU),
:mod:`.reference` (the per-request loop, kept as an executable specification
for tests and the benchmark), :mod:`.results`
(:class:`SimulationResult`), :mod:`.workload` (arrivals, closed-/open-loop
simulations), :mod:`.validation` (step overhead, comparison with measured
runs), :mod:`.policies` (policy evaluation, Pareto front, plots) and
:mod:`._common` (argument checks, step time of one batch).  Every name is
re-exported here; patch a function in the module that defines it.
"""
from __future__ import annotations

from perfmodel.data.features import batch_features
from perfmodel.decisions.simulate.engine import POLICIES, ROUTINGS, EngineConfig
from perfmodel.decisions.simulate.kvcache import kv_block_bytes, num_gpu_blocks, weight_bytes
from perfmodel.decisions.simulate.policies import (
    evaluate_policies,
    pareto_front,
    plot_policy_contour,
    plot_policy_frontier,
)
from perfmodel.decisions.simulate.results import SimulationResult, latency_stats
from perfmodel.decisions.simulate.validation import (
    SETUP_KEYS,
    OverheadEstimate,
    ValidationResult,
    compare_to_run,
    estimate_step_overhead,
    run_setup,
    validate_closed_loop,
)
from perfmodel.decisions.simulate.workload import (
    poisson_arrivals,
    simulate_closed_loop,
    simulate_open_loop,
)

__all__ = [
    "POLICIES",
    "ROUTINGS",
    "SETUP_KEYS",
    "EngineConfig",
    "OverheadEstimate",
    "SimulationResult",
    "ValidationResult",
    "batch_features",
    "compare_to_run",
    "estimate_step_overhead",
    "evaluate_policies",
    "kv_block_bytes",
    "latency_stats",
    "num_gpu_blocks",
    "pareto_front",
    "plot_policy_contour",
    "plot_policy_frontier",
    "poisson_arrivals",
    "run_setup",
    "simulate_closed_loop",
    "simulate_open_loop",
    "validate_closed_loop",
    "weight_bytes",
]
