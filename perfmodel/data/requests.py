"""Request files: the workload of a serving run (and what was measured) as one table.

Problem
-------
A replay of a serving run needs, per request, its prompt length, its output
length and its arrival time; when the run was measured, also its time to
first token (TTFT), time per output token (TPOT) and latency, to compare
against.  Users hold these in three shapes, all read here into one table:

* a vLLM / LLMServingSim run's ``requests.jsonl`` (one JSON object a line:
  ``input_toks``, ``output_toks``, ``arrival_time`` in epoch seconds and, when
  measured, ``queued_ts``, ``first_token_ts``, ``last_token_ts`` in monotonic
  seconds; the format of LLMServingSim's ``bench/examples/*/vllm/``);
* a ``vllm bench serve --save-result --save-detailed`` result JSON
  (lists ``input_lens``, ``output_lens``, ``ttfts``, ``itls``, optional
  ``latencies``, ``start_times``, ``errors``; times in seconds);
* a CSV with the column names of the table below.

Definitions (those of the run files)
------------------------------------
``TTFT = first_token_ts - queued_ts``, ``latency = last_token_ts -
queued_ts``, ``TPOT = (last_token_ts - first_token_ts) / (output_toks - 1)``
(undefined, NaN, for one output token).  For a bench result file TTFT is
``ttfts``, latency is ``latencies`` (or ``ttft + sum(itls)`` when absent)
and TPOT ``(latency - ttft) / (output_lens - 1)``, vLLM's own definition.

The table
---------
``prompt_tokens``, ``output_tokens`` (int >= 1), ``arrival_s`` (seconds after
the first arrival, sorted as in the file), and when measured ``ttft_ms``,
``tpot_ms``, ``latency_ms``; plus ``request_id`` when the file names one.
``df.attrs['source']`` names the format, ``df.attrs['dropped']`` counts
failed requests left out (bench files).

:func:`load_run_dir` also reads a run folder's engine settings
(``vllm/meta.json``, ``config.json``).  Checked against hand-written files in
``tests/data/test_requests.py`` and against the three LLMServingSim runs
(their ``validation/summary.txt`` means) when the mirror is present.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perfmodel.errors import InputError

__all__ = ["MEASURED_COLUMNS", "WORKLOAD_COLUMNS", "load_run_dir", "load_workload"]

#: columns every workload table has
WORKLOAD_COLUMNS: tuple[str, ...] = ("prompt_tokens", "output_tokens", "arrival_s")
#: measured per-request outcomes, present when the file holds them (ms)
MEASURED_COLUMNS: tuple[str, ...] = ("ttft_ms", "tpot_ms", "latency_ms")


def load_workload(path) -> pd.DataFrame:
    """Read a request file (``requests.jsonl``, bench result JSON or CSV) into one table.

    Parameters
    ----------
    path : str or Path
        ``*.jsonl`` (one request a line), ``*.json`` (a ``vllm bench serve``
        result with ``--save-detailed``) or ``*.csv`` (columns as in the
        module docstring).

    Returns
    -------
    pandas.DataFrame
        :data:`WORKLOAD_COLUMNS`, and :data:`MEASURED_COLUMNS` when measured.

    Raises
    ------
    InputError
        A missing or unreadable file, an unknown suffix, missing fields or
        lengths below 1.
    """
    p = Path(path)
    if not p.is_file():
        raise InputError(f"request file {str(p)!r} does not exist or is not a file")
    suffix = p.suffix.lower()
    if suffix == ".jsonl":
        df = _from_jsonl(p)
    elif suffix == ".json":
        df = _from_bench(p)
    elif suffix == ".csv":
        df = _from_csv(p)
    else:
        raise InputError(f"request file {p.name!r}: unknown format {suffix!r} (expected a "
                         ".jsonl request file, a vllm bench serve .json result or a .csv)")
    return _finish(df, p)


def _read_json(p: Path):
    try:
        return json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{p.name}: not readable JSON ({e})") from None


def _from_jsonl(p: Path) -> pd.DataFrame:
    rows = []
    try:
        lines = p.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{p.name}: not readable ({e})") from None
    for k, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise InputError(f"{p.name} line {k}: not JSON ({e.msg})") from None
    if not rows or not all(isinstance(r, dict) for r in rows):
        raise InputError(f"{p.name}: expected one JSON object per line")
    raw = pd.DataFrame(rows)
    need = ["input_toks", "output_toks", "arrival_time"]
    missing = [c for c in need if c not in raw]
    if missing:
        raise InputError(f"{p.name}: missing fields {missing} (a request file needs "
                         "input_toks, output_toks and arrival_time)")
    out = pd.DataFrame({"prompt_tokens": raw["input_toks"], "output_tokens": raw["output_toks"],
                        "arrival_s": raw["arrival_time"]})
    if "request_id" in raw:
        out.insert(0, "request_id", raw["request_id"].astype(str))
    ts = ["queued_ts", "first_token_ts", "last_token_ts"]
    if all(c in raw for c in ts):
        q, f, last = (_numeric(raw[c], p.name, c) for c in ts)
        n = _numeric(raw["output_toks"], p.name, "output_toks")
        out["ttft_ms"] = (f - q) * 1000.0
        out["latency_ms"] = (last - q) * 1000.0
        with np.errstate(invalid="ignore", divide="ignore"):
            out["tpot_ms"] = np.where(n > 1, (last - f) / np.maximum(n - 1, 1) * 1000.0, np.nan)
    out.attrs["source"] = "requests.jsonl"
    return out


def _from_bench(p: Path) -> pd.DataFrame:
    d = _read_json(p)
    if not isinstance(d, dict):
        raise InputError(f"{p.name}: expected a JSON object (a vllm bench serve result)")
    need = ["input_lens", "output_lens", "start_times"]
    missing = [k for k in need if k not in d]
    if missing:
        raise InputError(f"{p.name}: missing {missing}; save the bench result with "
                         "--save-result --save-detailed (vLLM versions that record start_times)")
    n = len(d["input_lens"])
    for k in ("output_lens", "start_times", "ttfts", "latencies", "itls", "errors"):
        if k in d and (not isinstance(d[k], list) or len(d[k]) != n):
            raise InputError(f"{p.name}: {k} has {len(d[k]) if isinstance(d[k], list) else 'no'} "
                             f"items, input_lens has {n}")
    out = pd.DataFrame({"prompt_tokens": d["input_lens"], "output_tokens": d["output_lens"],
                        "arrival_s": d["start_times"]})
    ok = np.ones(n, dtype=bool)
    if "errors" in d:
        ok &= np.array([not e for e in d["errors"]], dtype=bool)
    ok &= pd.to_numeric(out["output_tokens"], errors="coerce").fillna(0).to_numpy() > 0
    if "ttfts" in d:
        ttft = _numeric(pd.Series(d["ttfts"], dtype=object), p.name, "ttfts")
        if "latencies" in d:
            lat = _numeric(pd.Series(d["latencies"], dtype=object), p.name, "latencies")
        elif "itls" in d:
            lat = ttft + np.array([float(np.sum(x)) if x else 0.0 for x in d["itls"]])
        else:
            lat = np.full(n, np.nan)
        o = pd.to_numeric(out["output_tokens"], errors="coerce").to_numpy(float)
        out["ttft_ms"] = ttft * 1000.0
        out["latency_ms"] = lat * 1000.0
        with np.errstate(invalid="ignore", divide="ignore"):
            out["tpot_ms"] = np.where(o > 1, (lat - ttft) / np.maximum(o - 1, 1) * 1000.0, np.nan)
    dropped = int((~ok).sum())
    out = out[ok].reset_index(drop=True)
    if out.empty:
        raise InputError(f"{p.name}: no successful request (every one has an error or no output)")
    out.attrs["source"] = "vllm bench serve result"
    out.attrs["dropped"] = dropped
    return out


def _from_csv(p: Path) -> pd.DataFrame:
    try:
        raw = pd.read_csv(p)
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise InputError(f"{p.name}: not a readable CSV ({e})") from None
    missing = [c for c in WORKLOAD_COLUMNS if c not in raw]
    if missing:
        raise InputError(f"{p.name}: missing columns {missing} (a request CSV needs "
                         f"{list(WORKLOAD_COLUMNS)})")
    keep = [c for c in ("request_id", *WORKLOAD_COLUMNS, *MEASURED_COLUMNS) if c in raw]
    out = raw[keep].copy()
    out.attrs["source"] = "csv"
    return out


def _numeric(s: pd.Series, name: str, col: str) -> np.ndarray:
    v = pd.to_numeric(s, errors="coerce").to_numpy(float)
    bad = ~np.isfinite(v)
    if bad.any():
        raise InputError(f"{name}: {col} has {int(bad.sum())} missing or non-numeric values, "
                         f"first at rows {np.nonzero(bad)[0][:5].tolist()}")
    return v


def _finish(df: pd.DataFrame, p: Path) -> pd.DataFrame:
    """Check the lengths and arrivals; arrivals relative to the first one."""
    attrs = dict(df.attrs)
    for col in ("prompt_tokens", "output_tokens"):
        v = _numeric(df[col], p.name, col)
        bad = (v < 1) | (v != np.round(v))
        if bad.any():
            raise InputError(f"{p.name}: {col} must be integers >= 1; {int(bad.sum())} bad "
                             f"values, first at rows {np.nonzero(bad)[0][:5].tolist()}")
        df[col] = v.astype(np.int64)
    a = _numeric(df["arrival_s"], p.name, "arrival_s")
    df["arrival_s"] = a - a.min()
    for col in MEASURED_COLUMNS:
        if col in df:
            df[col] = pd.to_numeric(df[col], errors="coerce").astype(float)
    df = df.reset_index(drop=True)
    df.attrs = {**attrs, "path": str(p)}
    return df


# ---------------------------------------------------------------------------
# run folders (vllm/meta.json, vllm/requests.jsonl, config.json)
# ---------------------------------------------------------------------------

def load_run_dir(run_dir) -> tuple[dict[str, Any], pd.DataFrame]:
    """The engine settings and the workload of a serving-run folder.

    Problem: a published run (LLMServingSim's ``bench/examples/<hw>/<model>/``
    layout) spreads its set-up over ``vllm/meta.json`` (vLLM's engine
    arguments and, when logged, the KV cache it resolved) and ``config.json``
    (GPU memory per device, ``mem_util``, instances); this gathers what a
    replay needs.

    Returns
    -------
    settings : dict
        ``model``, ``max_num_seqs``, ``max_num_batched_tokens``,
        ``long_prefill_token_threshold``, ``max_num_partial_prefills``,
        ``enable_chunked_prefill``, ``policy`` (vLLM's scheduling policy),
        ``tensor_parallel_size``, ``data_parallel_size``,
        ``enable_expert_parallel``, ``dtype``, ``block_size``,
        ``gpu_memory_utilization``, ``gpu_memory_bytes`` (``device_total_memory_bytes``
        when logged, else ``config.json``'s ``mem_size`` read as GiB),
        ``num_gpu_blocks`` (logged by vLLM, else None), ``vllm_version``.
        vLLM's defaults fill what ``meta.json`` does not say (``resolved_config``
        takes precedence over ``engine_kwargs``); ``settings['defaulted']``
        lists those keys.
    workload : DataFrame from :func:`load_workload` of ``vllm/requests.jsonl``
    """
    d = Path(run_dir)
    if not d.is_dir():
        raise InputError(f"run folder {str(d)!r} does not exist or is not a folder")
    meta_p, req_p, cfg_p = d / "vllm" / "meta.json", d / "vllm" / "requests.jsonl", d / "config.json"
    for f in (meta_p, req_p):
        if not f.is_file():
            raise InputError(f"run folder {d.name!r}: missing {f.relative_to(d)}")
    meta = _read_json(meta_p)
    cluster = _read_json(cfg_p) if cfg_p.is_file() else {}
    if not isinstance(meta, dict) or not isinstance(cluster, dict):
        raise InputError(f"run folder {d.name!r}: meta.json and config.json must be JSON objects")
    return _settings(meta, cluster, d.name), load_workload(req_p)


#: vLLM's defaults for settings a run's meta.json may leave out (vLLM V1 engine arguments)
_VLLM_DEFAULTS = {"max_num_seqs": 256, "max_num_batched_tokens": 2048,
                  "long_prefill_token_threshold": 0, "max_num_partial_prefills": 1,
                  "enable_chunked_prefill": True, "policy": "fcfs", "tensor_parallel_size": 1,
                  "data_parallel_size": 1, "enable_expert_parallel": False, "dtype": "bfloat16",
                  "block_size": 16, "gpu_memory_utilization": 0.9}


def _settings(meta: dict, cluster: dict, name: str) -> dict[str, Any]:
    kw = meta.get("engine_kwargs") or {}
    res = meta.get("resolved_config") or {}
    sched, cache = res.get("scheduler_config") or {}, res.get("cache_config") or {}
    par = res.get("parallel_config") or {}
    kv = meta.get("kv_cache") or {}
    inst = [i for node in cluster.get("nodes", []) for i in node.get("instances", [])]
    first = inst[0] if inst else {}
    npu = first.get("npu_mem") or {}
    sources = (sched, cache, par, kv, kw)
    out: dict[str, Any] = {"model": meta.get("model") or kw.get("model") or first.get("model_name")}
    defaulted = []
    for key, default in _VLLM_DEFAULTS.items():
        value = next((s[key] for s in sources if s.get(key) is not None), None)
        if value is None and key == "gpu_memory_utilization" and npu.get("mem_util") is not None:
            value = npu["mem_util"]
        if value is None:
            value, _ = default, defaulted.append(key)
        out[key] = value
    if not out["model"]:
        raise InputError(f"run folder {name!r}: meta.json names no model")
    hw = meta.get("hardware") or {}
    if hw.get("device_total_memory_bytes"):
        out["gpu_memory_bytes"] = int(hw["device_total_memory_bytes"])
    elif npu.get("mem_size"):
        out["gpu_memory_bytes"] = int(float(npu["mem_size"]) * 2**30)
    else:
        out["gpu_memory_bytes"] = None
    out["num_gpu_blocks"] = kv.get("num_gpu_blocks") or cache.get("num_gpu_blocks")
    out["num_instances"] = len(inst) or int(out["data_parallel_size"])
    out["vllm_version"] = meta.get("vllm_version")
    out["defaulted"] = defaulted
    for key in ("max_num_seqs", "max_num_batched_tokens", "tensor_parallel_size",
                "data_parallel_size", "block_size"):
        if not isinstance(out[key], int) or out[key] < 1:
            raise InputError(f"run folder {name!r}: {key} must be an integer >= 1, got {out[key]!r}")
    return out
