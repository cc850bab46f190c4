""":class:`SimulationResult`: per-request and per-step tables of a simulation.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from perfmodel.decisions.simulate.engine import EngineConfig

_STEP_COLUMNS = ["step", "start_s", "end_s", "batch_size", "total_tokens", "num_decode",
                 "num_prefill", "chunk_sizes", "context_lens", "request_ids", "duration_ms",
                 "step_ms", "num_running", "num_waiting", "replica"]


#: the statistics :func:`latency_stats` reports, and their quantile levels
STAT_LEVELS = {"mean": None, "p50": 0.50, "p90": 0.90, "p95": 0.95, "p99": 0.99}


def latency_stats(ttft_ms, tpot_ms, latency_ms) -> dict[str, dict[str, float | None]]:
    """Mean and p50/p90/p95/p99 of per-request TTFT, TPOT and latency (ms).

    NaN values (TPOT of one-token outputs, unfinished requests) are left out;
    quantiles are numpy's default (linear interpolation), as ``vllm bench
    serve`` reports them.  A metric with no value gives None.
    """
    out = {}
    for name, v in (("ttft_ms", ttft_ms), ("tpot_ms", tpot_ms), ("latency_ms", latency_ms)):
        a = np.asarray(v, dtype=float)
        a = a[np.isfinite(a)]
        out[name] = {k: (None if not a.size else float(a.mean()) if q is None
                         else float(np.quantile(a, q))) for k, q in STAT_LEVELS.items()}
    return out


@dataclass
class SimulationResult:
    """Output of a simulation: per-request timings, the step log and the summary.

    Attributes
    ----------
    requests : DataFrame, one row per request: ``request_id, arrival_s,
        prompt_tokens, output_tokens, admitted_s, first_token_s, finish_s,
        ttft_s, tpot_ms, e2e_s``; ``arrival_s`` is the send time and
        ``first_token_s`` / ``finish_s`` are when the client sees the token
        (step end + ``response_delay_ms``), ``admitted_s`` is the engine's
    steps : DataFrame in the step-trace schema (``batch_size, total_tokens,
        chunk_sizes, context_lens, duration_ms`` = predicted model run, plus
        ``step_ms`` = overhead + model run, ``start_s``, ``end_s``,
        ``request_ids``, ``num_running``/``num_waiting`` after scheduling);
        empty when ``keep_steps=False``
    n_steps : int
    config : dict of the scheduler and workload settings
    step_summary : dict, ``mean_batch_size``, ``mean_total_tokens`` (per replica-step)
        and ``mean_step_ms``, kept also when ``keep_steps=False``
    """

    requests: pd.DataFrame
    steps: pd.DataFrame
    n_steps: int
    config: dict[str, Any] = field(default_factory=dict)
    step_summary: dict[str, float] = field(default_factory=dict)

    @property
    def makespan_s(self) -> float:
        r = self.requests
        return float(r["finish_s"].max() - r["arrival_s"].min())

    @property
    def output_throughput_tok_s(self) -> float:
        return float(self.requests["output_tokens"].sum() / self.makespan_s)

    def latency_stats(self) -> dict[str, dict[str, float | None]]:
        """:func:`latency_stats` of the simulated requests (TTFT, TPOT, latency in ms)."""
        r = self.requests
        return latency_stats(r["ttft_s"] * 1000.0, r["tpot_ms"], r["e2e_s"] * 1000.0)

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
        else:
            out.update(self.step_summary)
        out["config"] = {k: (v if not isinstance(v, np.generic) else v.item())
                         for k, v in self.config.items()}
        return out


def _result(run, cfg: EngineConfig, extra: dict) -> SimulationResult:
    """The SimulationResult of :func:`.events._run`'s output."""
    st, log, starts, model_ms, step_ms, arr_sorted = run
    ends = starts + step_ms / 1000.0
    arr = st.arrival.copy()
    issued = st.issue_step >= 0
    arr[issued] = ends[st.issue_step[issued]]
    arr[np.isnan(arr)] = 0.0                    # closed loop: the first requests, at time 0
    resp = cfg.response_delay_ms / 1000.0       # the client sees a token this much later

    def at(times, idx):
        out = np.full(idx.size, np.nan)
        ok = idx >= 0
        out[ok] = times[idx[ok]]
        return out

    first, fin = at(ends, st.first_step), at(ends, st.finish_step)
    if resp:
        arr[issued] += resp                     # a closed-loop client re-issues when it sees
        first += resp                           # the previous request's last token
        fin += resp
    O = st.O
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(O > 1, (fin - first) / np.maximum(O - 1, 1) * 1000.0, np.nan)
    df = pd.DataFrame({
        "request_id": np.arange(O.size), "arrival_s": arr,
        "prompt_tokens": st.P, "output_tokens": O,
        "admitted_s": at(starts, st.admit_step), "first_token_s": first, "finish_s": fin,
        "ttft_s": first - arr, "tpot_ms": tpot, "e2e_s": fin - arr,
        "num_preemptions": st.npre, "replica": st.replica,
    })
    steps = _steps(log, starts, ends, model_ms, step_ms, arr_sorted)
    rows, sum_b, sum_s = st.step_sums
    summary = ({"mean_batch_size": sum_b / rows, "mean_total_tokens": sum_s / rows,
                "mean_step_ms": float(step_ms.mean())} if rows else {})
    return SimulationResult(requests=df, steps=steps, n_steps=int(starts.size),
                            step_summary=summary,
                            config={**cfg.as_dict(), **extra,
                                    "kv_peak_blocks": st.kv_peak_blocks,
                                    "num_preemptions": int(st.npre.sum())})


def _steps(log, starts, ends, model_ms, step_ms, arr_sorted) -> pd.DataFrame:
    if not log:
        return pd.DataFrame(columns=_STEP_COLUMNS)
    s = np.fromiter((r[0] for r in log), np.int64, len(log))
    routed = np.fromiter((r[7] for r in log), np.int64, len(log))
    # arrivals during a block that no step could have admitted are queued at its end;
    # count them as waiting from their arrival on (none with data parallelism: see .events)
    late = np.searchsorted(arr_sorted, starts[s], side="right") - routed if arr_sorted.size \
        else np.zeros(len(log), np.int64)
    rows = {
        "step": s, "start_s": starts[s], "end_s": ends[s],
        "batch_size": [r[2].size for r in log], "total_tokens": [int(r[2].sum()) for r in log],
        "num_decode": [int(np.count_nonzero(r[2] == 1)) for r in log],
        "num_prefill": [int(np.count_nonzero(r[2] > 1)) for r in log],
        "chunk_sizes": [";".join(map(str, r[2].tolist())) for r in log],
        "context_lens": [";".join(map(str, r[3].tolist())) for r in log],
        "request_ids": [";".join(map(str, r[4].tolist())) for r in log],
        "duration_ms": model_ms[s], "step_ms": step_ms[s],
        "num_running": [r[5] for r in log],
        "num_waiting": np.asarray([r[6] for r in log]) + np.maximum(late, 0),
        "replica": [r[1] for r in log],
    }
    return pd.DataFrame(rows, columns=_STEP_COLUMNS)
