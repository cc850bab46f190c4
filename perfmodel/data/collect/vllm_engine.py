"""vLLM in this process: environment, engine, timing wrappers and the adapter.

What is timed is described in :mod:`perfmodel.data.collect.vllm_collector`.
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import tempfile
import time
from pathlib import Path
from typing import Any

from perfmodel._io import atomic_write_text, json_safe
from perfmodel.data.collect.driver import (
    StepResult,
    StepSched,
)
from perfmodel.data.collect.outputs import json_value
from perfmodel.data.collect.workloads import (
    RequestSpec,
    Workload,
)
from perfmodel.errors import InputError

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
