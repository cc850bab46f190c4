"""Step-overhead estimation and comparison of a simulation with a measured run
(:func:`estimate_step_overhead`, :func:`compare_to_run`, :func:`validate_closed_loop`).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from perfmodel.decisions.simulate._common import _check_model
from perfmodel.decisions.simulate.results import SimulationResult
from perfmodel.decisions.simulate.workload import simulate_closed_loop
from perfmodel.errors import InputError

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
    #: run_speed_ratio - 1 (total measured / predicted step time) on the run's trace: the
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
    ``step_time_bias``: :func:`perfmodel.stats.run_level.run_speed_ratio` less 1
    (total measured over total predicted mean step time of the trace's steps, - 1), i.e. how much slower (positive) the run's steps were
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
        from perfmodel.stats.run_level import run_speed_ratio

        try:
            bias = run_speed_ratio(model, trace) - 1.0
        except InputError:  # no step with a usable measured and predicted time
            bias = None
    return ValidationResult(sim, comp, est, float(step_overhead_ms),
                            {**need, **overrides, "policy": policy}, bias)
