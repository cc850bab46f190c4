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

Modules: :mod:`perfmodel.data.collect.driver` (the engine-agnostic driver),
:mod:`perfmodel.data.collect.outputs` (model configs, output paths, writers,
metadata) and :mod:`perfmodel.data.collect.vllm_engine` (environment, engine,
timing wrappers, adapter); this module holds the entry point
:func:`collect_vllm` and re-exports their public names, as before the split.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from perfmodel.data.collect.driver import (
    DriveResult,
    EngineAdapter,
    StepResult,
    StepSched,
    drive,
    schedule_signature,
)
from perfmodel.data.collect.outputs import (
    TRACE_COLUMNS,
    _rows_to_df,
    build_metadata,
    closed_loop_summary,
    output_paths,
    resolve_model_config,
    write_csv_atomic,
    write_json_atomic,
)
from perfmodel.data.collect.outputs import json_value as json_value  # noqa: PLC0414 (re-export)
from perfmodel.data.collect.vllm_engine import (
    DEFAULT_KV_CACHE_BYTES,
    VllmAdapter,
    _engine_args,
    _model_folder,
    _prepare_environment,
    _start_engine,
    default_cache_dir,
    reproduce_command,
)
from perfmodel.data.collect.vllm_engine import ENGINE_DEFAULTS as ENGINE_DEFAULTS  # noqa: PLC0414
from perfmodel.data.collect.workloads import WORKLOADS, Mixed, Workload, make_workload
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
