"""Time packed ragged engine steps of a random-weight Llama-style decoder.

Problem: measure the step latency T(B, S) of an LLM serving engine on a GPU
without an engine: one step runs B requests, request i with a chunk of
``c_i`` new tokens whose attention reads its ``ctx_i`` cached tokens plus,
causally, its own chunk; S = sum_i c_i. This module supplies

* :class:`LlamaConfig` / :func:`load_config` -- the decoder's dimensions;
* :func:`plan_step` -- the host-side layout of one packed step;
* :class:`KVCache`, :class:`LlamaStepModel` -- a compact Llama decoder
  (RMSNorm, rotary embeddings, GQA attention, SwiGLU MLP) that runs a step;
* :func:`generate_schedule`, :func:`replicate_order` -- a seeded workload;
* :func:`collect` -- warm-up, one CUDA-event timing per step, CSV + metadata;
* :func:`noise_floor` -- the per-step noise floor from replicated configs.

Packing. All S tokens go through the linear layers as one ``(S, hidden)``
tensor. The KV cache is one preallocated pool per layer of ``max_kv_tokens``
slots; within a step, request i owns the contiguous slab
``[cu_k[i], cu_k[i+1])`` of length ``ctx_i + c_i`` (a per-request cache with a
contiguous block table): its first ``ctx_i`` slots hold the cached context and
the step writes the chunk's new keys/values after them. Attention then runs
per request over its slab, in one of two backends:

``"flash_varlen"`` (GPU)
    PyTorch's bundled FlashAttention-2 variable-length kernel
    (``torch.ops.aten._flash_attention_forward`` with cumulative sequence
    lengths; causal masking aligned bottom-right, native GQA): one launch per
    layer for the whole ragged batch, cost proportional to
    sum_i c_i * (ctx_i + c_i), as in vLLM's FlashAttention backend but without
    paging.
``"sdpa"`` (CPU reference, GPU fallback)
    ``torch.nn.functional.scaled_dot_product_attention``: one call per
    prefill chunk (c_i > 1) with an explicit causal-with-offset mask, plus one
    padded batched call for all decode rows (c_i == 1), whose keys/values are
    gathered into a ``(B_dec, max ctx)`` tensor with a padding mask. GQA is
    folded into the query length (the ``group`` query heads sharing a KV head
    become rows), so no key/value is repeated.

The equivalence of a packed step with running each request alone, and of a
chunked prefill with a one-shot prefill, is checked in
``tests/data/test_collect_torch.py`` in float32 (max abs difference < 1e-5); on the
GPU :func:`collect` first checks both backends against SDPA's math kernel on a
one-layer copy of the model (:func:`check_backends`) and uses ``flash_varlen``
only if it agrees, else ``sdpa``.

Modules: :mod:`.config` (:class:`LlamaConfig`), :mod:`.plan` (:func:`plan_step`),
:mod:`.model` (:class:`KVCache`, :class:`LlamaStepModel`), :mod:`.workload`
(the schedule) and :mod:`.noise` (:func:`noise_floor`) -- only :mod:`.model`
and this module need torch; this module holds :func:`collect` and
:func:`check_backends` and re-exports every name, as before the split.
"""
from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from perfmodel._io import sha256_file
from perfmodel.data.collect_torch.config import LlamaConfig, load_config
from perfmodel.data.collect_torch.model import ATTN_BACKENDS, KVCache, LlamaStepModel
from perfmodel.data.collect_torch.noise import noise_floor
from perfmodel.data.collect_torch.plan import StepPlan, plan_step
from perfmodel.data.collect_torch.workload import (
    StepConfig,
    WorkloadParams,
    generate_schedule,
    replicate_order,
)
from perfmodel.errors import InputError

__all__ = [
    "ATTN_BACKENDS",
    "TRACE_COLUMNS",
    "KVCache",
    "LlamaConfig",
    "LlamaStepModel",
    "StepConfig",
    "StepPlan",
    "WorkloadParams",
    "check_backends",
    "collect",
    "generate_schedule",
    "load_config",
    "noise_floor",
    "plan_step",
    "replicate_order",
]

TRACE_COLUMNS = [
    "step", "timestamp", "replicate", "config", "phase", "batch_size", "total_tokens",
    "num_decode", "num_prefill", "chunk_sizes", "context_lens", "duration_ms", "step_ms",
    "cpu_ms", "involuntary_switches", "loadavg", "hardware", "model", "source",
]


# --------------------------------------------------------------------------- collection
def _shape_class(s: StepConfig) -> tuple[str, int, int]:
    return (s.phase, int(math.log2(max(1, s.total_tokens))),
            int(math.log2(max(1, max(a + b for a, b in zip(s.chunk_sizes, s.context_lens))))))


def _nvidia_smi(query: str) -> str:
    try:
        r = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv"],
                           check=False, capture_output=True, text=True, timeout=15)
        return r.stdout.strip()
    except Exception as e:  # noqa: BLE001 -- diagnostics only
        return f"unavailable: {e}"


def check_backends(config: LlamaConfig, *, dtype=torch.bfloat16, device="cuda",
                   seed: int = 0) -> dict:
    """Check the attention backends against SDPA's math kernel on one mixed step.

    Problem: the GPU backends cannot be tested on a CPU, so before timing
    this runs a one-layer copy of ``config`` (own weights and KV cache) on a
    ragged step with decodes, a fresh chunk and a chunk with prior context,
    through ``sdpa`` restricted to the math kernel (the reference), ``sdpa``
    with PyTorch's default kernel choice, and ``flash_varlen``. For each it
    reports the largest per-row relative L2 difference of the hidden states
    from the reference (or the exception). One layer keeps the rounding of
    ``dtype`` small (bf16: ~1e-3..1e-2) next to a masking or layout error
    (order 1e-1 and above).

    Returns dict(rel_err={backend: float | None}, errors={backend: str | None},
    choice=backend to use or None, tolerance).
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel

    small = dataclasses.replace(config, num_hidden_layers=1,
                                vocab_size=min(config.vocab_size, 4096))
    model = LlamaStepModel(small, dtype=dtype, device=device, seed=seed + 7)
    chunks = [1, 1, 1, 37, 64, 1]
    ctxs = [130, 999, 5, 0, 300, 2047]
    toks = np.random.default_rng(seed).integers(0, small.vocab_size, sum(chunks))
    outs, errors = {}, {}
    for name in ("math", "sdpa", "flash_varlen"):
        cache = KVCache(small, 8192, dtype=dtype, device=device, seed=seed + 3)
        try:
            if name == "math":
                with sdpa_kernel([SDPBackend.MATH]):
                    outs[name] = model.step(chunks, ctxs, toks, cache, "sdpa")[0].double()
            else:
                outs[name] = model.step(chunks, ctxs, toks, cache, name)[0].double()
            errors[name] = None
        except Exception as e:  # noqa: BLE001 -- any failure rules the backend out
            errors[name] = f"{type(e).__name__}: {e}"[:500]
    rel = {}
    if "math" in outs:
        ref = outs["math"]
        for name in ("sdpa", "flash_varlen"):
            if name in outs:
                r = ((outs[name] - ref).norm(dim=1) / ref.norm(dim=1)).max()
                rel[name] = float(r) if torch.isfinite(r) else float("inf")
            else:
                rel[name] = None
    tol = max(2e-2, 3 * (rel.get("sdpa") or 0.0))
    choice = None
    for name in ("flash_varlen", "sdpa"):
        if rel.get(name) is not None and rel[name] < tol:
            choice = name
            break
    return {"rel_err": rel, "errors": errors, "choice": choice, "tolerance": tol,
            "step": {"chunk_sizes": chunks, "context_lens": ctxs}}


def collect(config: LlamaConfig, params: WorkloadParams, out_dir: str | os.PathLike, *,
            replicates: int = 3, device: str = "cuda", dtype: str = "bfloat16",
            backend: str = "auto", max_seconds: float = 300.0, warmup_steps: int = 10,
            warmup_all: bool = False, warmup_max_seconds: float = 60.0,
            flush_every: int = 100, progress_every: int = 250, basename: str = "trace",
            config_path: str | None = None, log=print) -> dict:
    """Warm up, then time every step of the replicated schedule; write CSV + metadata.

    Each row is one step measured once: CUDA events recorded around the
    step's metadata preparation (token ids, positions, cumulative lengths,
    KV write slots, packed into one pinned buffer) and its host-to-device
    copy, the forward pass (embedding,
    layers, final norm, last-token logits) and nothing else; ``step_ms`` is
    the host wall time of the same region plus the synchronisation, ``cpu_ms``
    the process CPU time. Before timing, one untimed step of every shape
    class (phase, log2 S, log2 max slab) runs, largest first, after
    ``warmup_steps`` generic ones; with ``warmup_all`` every configuration
    then runs once untimed (for at most ``warmup_max_seconds``), so that
    first-seen GEMM shapes do not slow replicate 1. Rows are appended to
    ``<basename>.csv`` every ``flush_every`` steps and the metadata JSON is
    rewritten at start and end, so a killed run still leaves data. Stops
    early (status 'time_limit') once ``max_seconds`` of timing have passed.

    Returns the metadata dict.

    The steps are in the helpers below, in the order they run:
    :func:`_check_collect_args`, :func:`_start_meta`, :func:`_choose_backend`,
    :class:`_StepRunner` (one step, timed or not), :func:`_warm_up`,
    :func:`_timed_steps` and :func:`_finish_meta`.
    """
    _check_collect_args(config, params, dtype=dtype, backend=backend, replicates=replicates,
                        max_seconds=max_seconds)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    csv_path, meta_path = out / f"{basename}.csv", out / f"{basename}.meta.json"
    t_start = time.perf_counter()
    dev = torch.device(device)
    is_cuda = dev.type == "cuda"
    tdtype = getattr(torch, dtype)

    schedule = generate_schedule(params)
    order = replicate_order(len(schedule), replicates, params.seed)
    log(f"[collect] schedule: {len(schedule)} configs x {replicates} replicates "
        f"= {len(order)} steps")
    meta = _start_meta(config, params, dev=dev, dtype=dtype, config_path=config_path,
                       replicates=replicates, max_seconds=max_seconds)
    meta_path.write_text(json.dumps(meta, indent=2))

    model = LlamaStepModel(config, dtype=tdtype, device=dev, seed=params.seed)
    cache = KVCache(config, params.max_kv_tokens, dtype=tdtype, device=dev, seed=params.seed + 1)
    if is_cuda:
        torch.cuda.synchronize(dev)
        meta["gpu"]["memory_allocated_after_init"] = torch.cuda.memory_allocated(dev)
    log(f"[collect] model {config.name}: {config.n_params() / 1e9:.2f} G params, KV pool "
        f"{cache.nbytes() / 2**30:.1f} GiB, init {time.perf_counter() - t_start:.1f} s")
    backend = _choose_backend(config, backend, meta, meta_path, dtype=tdtype, dev=dev,
                              seed=params.seed, log=log)

    run_one = _StepRunner(model, cache, config, backend, dev, seed=params.seed)
    hw = meta["gpu_name"] or platform.processor() or "cpu"
    meta["warmup"] = _warm_up(run_one, schedule, warmup_steps=warmup_steps,
                              warmup_all=warmup_all, warmup_max_seconds=warmup_max_seconds)
    log(f"[collect] warm-up: {meta['warmup']['shape_classes']} shape classes + "
        f"{meta['warmup']['all_configs_pass']} configs in {meta['warmup']['seconds']} s")
    n_rows, status, t0 = _timed_steps(
        run_one, schedule, order, csv_path, hw=hw, model_name=config.name, backend=backend,
        max_seconds=max_seconds, flush_every=flush_every, progress_every=progress_every, log=log)
    _finish_meta(meta, csv_path, t0=t0, t_start=t_start, status=status, n_rows=n_rows, dev=dev)
    meta_path.write_text(json.dumps(meta, indent=2))
    log(f"[collect] done: {n_rows} rows, status {status}, {meta['timing_seconds']} s timing")
    return meta


def _check_collect_args(config, params, *, dtype, backend, replicates, max_seconds) -> None:
    """:func:`collect`'s argument checks (InputError naming the argument)."""
    if not isinstance(config, LlamaConfig) or not isinstance(params, WorkloadParams):
        raise InputError("collect: config must be a LlamaConfig and params WorkloadParams")
    if dtype not in ("bfloat16", "float16", "float32"):
        raise InputError(f"collect: dtype={dtype!r} not in ('bfloat16', 'float16', 'float32')")
    if backend not in ("auto",) + ATTN_BACKENDS:
        raise InputError(f"collect: backend={backend!r} not in {('auto',) + ATTN_BACKENDS}")
    if not (isinstance(replicates, int) and replicates >= 1):
        raise InputError(f"collect: replicates={replicates!r} must be an integer >= 1")
    if not max_seconds > 0:
        raise InputError(f"collect: max_seconds={max_seconds!r} must be > 0")


def _start_meta(config: LlamaConfig, params: WorkloadParams, *, dev, dtype: str,
                config_path: str | None, replicates: int, max_seconds: float) -> dict:
    """The metadata written before the model is built (environment, GPU, workload)."""
    is_cuda = dev.type == "cuda"
    meta = {
        "status": "running",
        "source": "perfmodel.data.collect_torch",
        "created_unix": time.time(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if is_cuda else None,
        "device": str(dev),
        "gpu_name": torch.cuda.get_device_name(dev) if is_cuda else None,
        "dtype": dtype,
        "model_config": dataclasses.asdict(config),
        "model_config_path": config_path,
        "n_params": config.n_params(),
        "workload": params.to_dict(),
        "replicates": replicates,
        "max_seconds": max_seconds,
        "columns": TRACE_COLUMNS,
    }
    if is_cuda:
        prop = torch.cuda.get_device_properties(dev)
        meta["gpu"] = {"name": prop.name, "total_memory_bytes": prop.total_memory,
                       "multi_processor_count": prop.multi_processor_count,
                       "capability": f"{prop.major}.{prop.minor}",
                       "nvidia_smi_start": _nvidia_smi(
                           "name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,"
                           "power.limit,temperature.gpu,memory.used,memory.total")}
    return meta


def _choose_backend(config: LlamaConfig, backend: str, meta: dict, meta_path: Path, *,
                    dtype, dev, seed: int, log) -> str:
    """The attention backend: on a GPU checked first (:func:`check_backends`); recorded in meta.

    With ``backend='auto'`` a GPU gets the check's choice (no backend passing:
    the metadata says so and RuntimeError), a CPU ``'sdpa'``.
    """
    check = None
    if dev.type == "cuda":
        check = check_backends(config, dtype=dtype, device=dev, seed=seed)
        if backend == "auto":
            if check["choice"] is None:
                meta["status"] = "failed_backend_check"
                meta["backend_check"] = check
                meta_path.write_text(json.dumps(meta, indent=2))
                raise RuntimeError(f"collect: no attention backend passed the check: {check}")
            backend = check["choice"]
    elif backend == "auto":
        backend = "sdpa"
    meta["attn_backend"] = backend
    meta["backend_check"] = check
    log(f"[collect] attention backend: {backend}; check: {check}")
    return backend


class _StepRunner:
    """Runs one step of a :class:`StepConfig`: untimed (warm-up) or timed (one trace row).

    Token ids come from one generator seeded ``[seed, 12345]``, shared by the
    warm-up and the timed steps in the order they run.
    """

    def __init__(self, model: LlamaStepModel, cache: KVCache, config: LlamaConfig,
                 backend: str, dev, *, seed: int):
        self.model, self.cache, self.config, self.backend = model, cache, config, backend
        self.is_cuda = dev.type == "cuda"
        self.rng_tok = np.random.default_rng([seed, 12345])
        self.sync = (lambda: torch.cuda.synchronize(dev)) if self.is_cuda else (lambda: None)

    def __call__(self, s: StepConfig, timed: bool):
        model, cache, backend, is_cuda = self.model, self.cache, self.backend, self.is_cuda
        plan = plan_step(s.chunk_sizes, s.context_lens, max_kv_tokens=cache.capacity,
                         max_position=self.config.max_position_embeddings)
        toks = self.rng_tok.integers(0, self.config.vocab_size, plan.total_tokens)
        if not timed:
            model.forward(plan, model.device_meta(plan, toks, backend), cache, backend)
            return None
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        c0 = time.process_time()
        w0 = time.perf_counter()
        if is_cuda:
            ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            ev0.record()
        d = model.device_meta(plan, toks, backend)
        model.forward(plan, d, cache, backend)
        if is_cuda:
            ev1.record()
            ev1.synchronize()
        w1 = time.perf_counter()
        c1 = time.process_time()
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        dur = ev0.elapsed_time(ev1) if is_cuda else (w1 - w0) * 1e3
        return {"duration_ms": dur, "step_ms": (w1 - w0) * 1e3, "cpu_ms": (c1 - c0) * 1e3,
                    "involuntary_switches": ru1.ru_nivcsw - ru0.ru_nivcsw, "w0": w0}


def _warm_up(run_one: _StepRunner, schedule: list[StepConfig], *, warmup_steps: int,
             warmup_all: bool, warmup_max_seconds: float) -> dict:
    """Untimed steps: generic ones, then one per shape class, largest first (then, with
    ``warmup_all``, every config once within ``warmup_max_seconds``); the meta entry."""
    t_w = time.perf_counter()
    for i in range(min(warmup_steps, len(schedule))):
        run_one(schedule[(i * 7919) % len(schedule)], timed=False)
    classes: dict = {}
    for s in schedule:
        classes.setdefault(_shape_class(s), s)
    for key in sorted(classes, key=lambda k: (-k[1], -k[2], k[0])):
        run_one(classes[key], timed=False)
    run_one.sync()
    n_all = 0
    if warmup_all:                      # every config once, untimed, within a time cap
        t_a = time.perf_counter()
        for s in schedule:
            if time.perf_counter() - t_a > warmup_max_seconds:
                break
            run_one(s, timed=False)
            n_all += 1
        run_one.sync()
    return {"generic_steps": min(warmup_steps, len(schedule)),
            "shape_classes": len(classes), "all_configs_pass": n_all,
            "seconds": round(time.perf_counter() - t_w, 3)}


def _timed_steps(run_one: _StepRunner, schedule: list[StepConfig], order, csv_path: Path, *,
                 hw: str, model_name: str, backend: str, max_seconds: float, flush_every: int,
                 progress_every: int, log) -> tuple[int, str, float]:
    """Time every step of ``order`` into ``csv_path`` (flushed every ``flush_every`` rows).

    Returns (rows written, status ``'complete'`` or ``'time_limit'``, the
    ``perf_counter`` time the timing started).
    """
    n_rows, buf, status = 0, [], "complete"
    t0 = time.perf_counter()
    with open(csv_path, "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(TRACE_COLUMNS)
        f.flush()
        for k, (rep, idx) in enumerate(order):
            if time.perf_counter() - t0 > max_seconds:
                status = "time_limit"
                log(f"[collect] time limit {max_seconds} s reached after {k} steps")
                break
            s = schedule[idx]
            r = run_one(s, timed=True)
            c = np.asarray(s.chunk_sizes)
            buf.append([k, round(r["w0"] - t0, 6), rep + 1, s.config_id, s.phase, s.batch_size,
                        s.total_tokens, int((c == 1).sum()), int((c > 1).sum()),
                        ";".join(map(str, s.chunk_sizes)), ";".join(map(str, s.context_lens)),
                        f"{r['duration_ms']:.5f}", f"{r['step_ms']:.5f}", f"{r['cpu_ms']:.4f}",
                        r["involuntary_switches"], f"{os.getloadavg()[0]:.2f}", hw, model_name,
                        f"torch-harness/{backend}"])
            n_rows += 1
            if len(buf) >= flush_every:
                wr.writerows(buf)
                f.flush()
                buf = []
            if progress_every and (k + 1) % progress_every == 0:
                el = time.perf_counter() - t0
                log(f"[collect] {k + 1}/{len(order)} steps, {el:.1f} s, "
                    f"last {s.config_id} B={s.batch_size} S={s.total_tokens} "
                    f"{r['duration_ms']:.3f} ms")
        wr.writerows(buf)
    return n_rows, status, t0


def _finish_meta(meta: dict, csv_path: Path, *, t0: float, t_start: float, status: str,
                 n_rows: int, dev) -> None:
    """Add the run's end to ``meta``: times, status, rows, the CSV's hash, GPU state, noise."""
    meta["timing_seconds"] = round(time.perf_counter() - t0, 3)
    meta["total_seconds"] = round(time.perf_counter() - t_start, 3)
    meta["status"] = status
    meta["rows"] = n_rows
    meta["csv"] = csv_path.name
    meta["csv_sha256"] = sha256_file(csv_path)
    if dev.type == "cuda":
        meta["gpu"]["max_memory_allocated"] = torch.cuda.max_memory_allocated(dev)
        meta["gpu"]["nvidia_smi_end"] = _nvidia_smi(
            "clocks.sm,clocks.mem,power.draw,temperature.gpu,memory.used")
    try:
        meta["noise_floor"] = noise_floor(pd.read_csv(csv_path))
    except Exception as e:  # noqa: BLE001 -- summary only
        meta["noise_floor"] = {"error": f"{type(e).__name__}: {e}"}
