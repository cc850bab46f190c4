"""``perfmodel collect vllm``: collect a step trace from an in-process vLLM engine
(:mod:`perfmodel.data.collect`)."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from perfmodel._io import json_safe
from perfmodel.cli.common import add_random_state_argument
from perfmodel.data.collect import vllm_collector
from perfmodel.data.collect.vllm_collector import (
    DEFAULT_KV_CACHE_BYTES,
    collect_summary,
    json_value,
)
from perfmodel.data.collect.workloads import WORKLOADS
from perfmodel.errors import InputError

__all__ = ["add_collect_parser", "add_vllm_arguments", "run_collect"]


def _parse_param(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise InputError(f"argument '--param' must be KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


_JSON_HELP = "print the final summary (files written, rows) as one JSON object"


def add_vllm_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``collect vllm`` options to ``p``."""
    p.add_argument("--model-config", required=True,
                   help="config.json path, or a shipped name: llama-tiny, llama-small, llama-mid")
    p.add_argument("--workload", required=True, choices=sorted(WORKLOADS))
    p.add_argument("--steps", type=int, default=None,
                   help="steps to record (closed_loop: optional safety cap)")
    add_random_state_argument(p, "the workload and of vLLM's sampler (same seed, same schedule)")
    p.add_argument("-o", "--output", required=True, help="trace CSV to write")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="workload parameter (value parsed as JSON), repeatable")
    p.add_argument("--calibration-steps", type=int, default=0,
                   help="closed_loop: mixed calibration steps before and after")
    p.add_argument("--warmup-steps", type=int, default=0)
    p.add_argument("--enforce-eager", action="store_true",
                   help="skip torch.compile (faster start, slower steps)")
    p.add_argument("--kv-cache-bytes", type=int, default=DEFAULT_KV_CACHE_BYTES)
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--cache-dir", default=None, help="default $PERFMODEL_CACHE_DIR or "
                   "~/.cache/perfmodel")
    p.add_argument("--force", action="store_true", help="overwrite existing outputs")
    # default SUPPRESS: an engine sub-parser must not reset 'perfmodel collect --json vllm ...'
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=_JSON_HELP)
    p.set_defaults(func=run_collect)
    return p


def add_collect_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``collect`` (with the engine sub-command ``vllm``) to a CLI's subparsers.

    ``--json`` is accepted before or after the engine name.
    """
    collect = subparsers.add_parser("collect", help="collect step traces from a real engine")
    collect.add_argument("--json", action="store_true", help=_JSON_HELP)
    sub = collect.add_subparsers(dest="engine", required=True)
    add_vllm_arguments(sub.add_parser("vllm", help="in-process vLLM engine"))
    return collect


def run_collect(args: argparse.Namespace) -> int:
    """Run ``collect vllm`` from parsed arguments; return the exit status.

    Input errors print one line (``perfmodel: error: ...``) to stderr and return 2.
    With ``args.json`` the final summary (:func:`collect_summary`) is printed as JSON.
    """
    try:
        params = dict(_parse_param(kv) for kv in args.param)
        # looked up on each call, so that a test can replace the engine run
        paths = vllm_collector.collect_vllm(
            args.model_config, args.workload, args.steps, args.seed, args.output,
            force=args.force, calibration_steps=args.calibration_steps,
            warmup_steps=args.warmup_steps, enforce_eager=args.enforce_eager,
            kv_cache_bytes=args.kv_cache_bytes, max_model_len=args.max_model_len,
            temperature=args.temperature, cache_dir=args.cache_dir, **params)
    except InputError as exc:
        msg = " ".join(str(exc).split())  # one line, as every perfmodel error
        print(f"perfmodel: error: {msg}", file=sys.stderr)
        return 2
    summary = collect_summary(paths, model_config=args.model_config, workload=args.workload,
                              steps=args.steps, seed=args.seed)
    if getattr(args, "json", False):
        print(json.dumps(json_safe(summary, fallback=json_value), indent=2))
    else:
        for role, p in paths.items():
            n = summary["rows"].get(role)  # trace files only
            print(f"{role}: {p}" + (f" ({n} rows)" if n is not None else ""))
    return 0
