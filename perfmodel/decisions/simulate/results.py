""":class:`SimulationResult`: per-request and per-step tables of a simulation.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from perfmodel.decisions.simulate.engine import EngineConfig, _Req

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
