"""The engine-agnostic step driver of :mod:`perfmodel.data.collect.vllm_collector`.

:func:`drive` feeds a seeded workload to an engine through a small adapter
(add, abort, counts, step) and records one row per step, so it is tested without
vLLM on a fake engine (``tests/data/test_collect.py``).
"""
from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import pandas as pd

from perfmodel.data.collect import machine_state
from perfmodel.data.collect.workloads import (
    EngineView,
    RequestSpec,
    Workload,
)
from perfmodel.errors import InputError


# ----------------------------------------------------------------------------------------
# Engine-agnostic driver
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StepSched:
    """The batch a model run computed: request ids, chunk sizes, prior context."""

    req_ids: tuple[str, ...]
    chunk_sizes: tuple[int, ...]
    context_lens: tuple[int, ...]


@dataclass
class StepResult:
    """What one engine step did: its batch (None if no model run), its timings, outputs.

    ``outputs`` lists ``(name, num_output_tokens_so_far, finished)`` per request
    that produced tokens in the step, ``name`` being the workload's request name.
    """

    sched: StepSched | None
    forward_ms: float = float("nan")
    sample_ms: float = float("nan")
    outputs: list[tuple[str, int, bool]] = field(default_factory=list)


class EngineAdapter(Protocol):
    """The engine operations :func:`drive` needs."""

    def add(self, spec: RequestSpec) -> str: ...
    def abort_all(self) -> None: ...
    def counts(self) -> tuple[int, int]: ...  # (unfinished, waiting)
    def set_token_budget(self, budget: int | None) -> None: ...
    def step(self) -> StepResult: ...


@dataclass
class DriveResult:
    """Rows in the trace schema, per-request timing log, and run bookkeeping."""

    rows: list[dict[str, Any]]
    requests: dict[str, dict[str, Any]]
    engine_steps: int
    empty_steps: int
    stopped_by: str
    start_time: float
    end_time: float


def drive(adapter: EngineAdapter, workload: Workload, steps: int | None, *,
          prompt_lens: dict[str, int] | None = None, clock=time.time,
          abort_at_end: bool = True) -> DriveResult:
    """Run ``workload`` on ``adapter`` and record one row per model run.

    Before each engine step the workload sees the step index, the unfinished
    and waiting counts and the requests that finished in the previous step; its
    new requests are added and its token budget applied. The loop ends when the
    workload is done, ``steps`` rows are recorded, or nothing is left to run.
    Requests still in flight at the end are aborted (``abort_at_end``) so the
    engine is empty for what runs next in the same process.

    A request is a decode in a step when its chunk is one token and its prior
    context covers its prompt; every other request is a prefill (chunk).
    """
    if not isinstance(workload, Workload):
        raise InputError(f"argument 'workload' must be a Workload, got {type(workload).__name__}")
    if steps is not None and (not isinstance(steps, int) or steps < 1):
        raise InputError(f"argument 'steps' must be a positive integer or None, got {steps!r}")
    rows: list[dict[str, Any]] = []
    requests: dict[str, dict[str, Any]] = {}
    plen = prompt_lens if prompt_lens is not None else {}
    finished: tuple[str, ...] = ()
    engine_steps = empty = 0
    stopped_by = "workload_done"
    start = clock()
    while True:
        if steps is not None and len(rows) >= steps:
            stopped_by = "steps"
            break
        unfinished, waiting = adapter.counts()
        view = EngineView(engine_steps, unfinished, waiting, finished)
        if workload.done(view):
            break
        for spec in workload.next_requests(view):
            adapter.add(spec)
            plen[spec.name] = spec.prompt_len
            requests[spec.name] = _request_record(spec, clock(), engine_steps)
        if adapter.counts()[0] == 0:
            stopped_by = "idle"  # the workload added nothing and nothing is running
            break
        adapter.set_token_budget(workload.token_budget(engine_steps))
        ts = clock()
        s0 = machine_state.snapshot()
        result = adapter.step()
        s1 = machine_state.snapshot()
        t_end = clock()
        load = machine_state.loadavg_1min()
        finished = _record_outputs(result.outputs, requests, t_end, engine_steps)
        sched = result.sched
        if sched is None or sum(sched.chunk_sizes) == 0:
            empty += 1
        else:
            rows.append(_step_row(engine_steps, ts, sched, result, plen, (s0, s1), load))
        engine_steps += 1
    end = clock()
    if abort_at_end:
        adapter.abort_all()
    return DriveResult(rows, requests, engine_steps, empty, stopped_by, start, end)


def _request_record(spec: RequestSpec, arrival_time: float, step: int) -> dict[str, Any]:
    """The timing log entry of a request added before engine step ``step``."""
    return {"name": spec.name, "prompt_len": spec.prompt_len, "max_tokens": spec.max_tokens,
            "arrival_time": arrival_time, "arrival_step": step,
            "first_token_time": None, "first_token_step": None,
            "finish_time": None, "finish_step": None, "output_tokens": 0}


def _record_outputs(outputs, requests: dict[str, dict[str, Any]], t_end: float,
                    step: int) -> tuple[str, ...]:
    """Log first-token and finish times of ``outputs``; return the requests that finished."""
    done_now = []
    for name, ntok, fin in outputs:
        rec = requests.get(name)
        if rec is None:
            continue
        if ntok > 0 and rec["first_token_time"] is None:
            rec["first_token_time"], rec["first_token_step"] = t_end, step
        rec["output_tokens"] = max(rec["output_tokens"], ntok)
        if fin and rec["finish_time"] is None:
            rec["finish_time"], rec["finish_step"] = t_end, step
            done_now.append(name)
    return tuple(done_now)


def _step_row(step: int, ts: float, sched: StepSched, result: StepResult,
              plen: dict[str, int], snaps, load) -> dict[str, Any]:
    """One trace row: the batch of a model run, its timings and the machine state around it.

    ``snaps`` are the :func:`machine_state.snapshot` before and after the step.
    """
    s0, s1 = snaps
    dec = sum(1 for r, c, x in zip(sched.req_ids, sched.chunk_sizes, sched.context_lens)
              if c == 1 and x >= plen.get(r, 0))
    fwd, smp = result.forward_ms, result.sample_ms
    return {
        "step": step, "timestamp": round(ts, 6),
        "batch_size": len(sched.chunk_sizes), "total_tokens": sum(sched.chunk_sizes),
        "duration_ms": (fwd if math.isfinite(fwd) else 0.0)
        + (smp if math.isfinite(smp) else 0.0),
        "chunk_sizes": ";".join(map(str, sched.chunk_sizes)),
        "context_lens": ";".join(map(str, sched.context_lens)),
        "num_decode": dec, "num_prefill": len(sched.chunk_sizes) - dec,
        "forward_ms": fwd, "sample_ms": smp,
        "step_ms": (s1.wall_s - s0.wall_s) * 1e3,
        "cpu_ms": (s1.cpu_s - s0.cpu_s) * 1e3,
        "involuntary_switches": (s1.involuntary_switches - s0.involuntary_switches
                                 if s0.involuntary_switches >= 0 else -1),
        "loadavg": load,
    }


def schedule_signature(df: pd.DataFrame) -> str:
    """SHA-256 of a trace's schedule: (batch_size, chunk_sizes, context_lens) per step.

    Two runs of one workload with one seed on one engine configuration must
    give the same signature; timings do not enter it. Rows are taken in the
    order of ``step`` when that column exists, else in file order.
    """
    if not isinstance(df, pd.DataFrame):
        raise InputError(f"argument 'df' must be a pandas DataFrame, got {type(df).__name__}")
    need = ["batch_size", "chunk_sizes", "context_lens"]
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise InputError(f"schedule_signature needs column(s) {missing}; trace has "
                         f"{list(df.columns)}")
    d = df.sort_values("step", kind="stable") if "step" in df.columns else df
    h = hashlib.sha256()
    for b, c, x in zip(d["batch_size"], d["chunk_sizes"], d["context_lens"]):
        h.update(f"{int(b)}|{str(c).strip()}|{str(x).strip()}\n".encode())
    return h.hexdigest()
