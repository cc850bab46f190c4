"""``perfmodel replay``: replay a serving run's requests through the simulator.

Problem
-------
Does a step model predict what a real deployment measured: time to first
token, time per output token and request latency?  ``replay`` takes a run's
requests (arrival times, prompt and output lengths), the engine settings
(from the run folder and/or options), a step model (a fit, or a layer-profile
bundle composed into one), simulates the engine (vLLM V1 scheduling, KV-cache
blocks, preemption, data-parallel replicas; :mod:`perfmodel.decisions.simulate`)
and prints the predicted metrics; when the request file holds measured
timestamps, also the measured ones and the relative error per statistic.
The prediction never reads the measured timings.
"""
from __future__ import annotations

import argparse
import time
from dataclasses import fields
from pathlib import Path

import pandas as pd

from perfmodel._io import atomic_write_text
from perfmodel.cli.common import (
    add_random_state_argument,
    add_run_level_arguments,
    run_level_sd,
)
from perfmodel.decisions.replay import fit_for_run, run_engine_settings, run_parallelism
from perfmodel.decisions.simulate import (
    POLICIES,
    ROUTINGS,
    EngineConfig,
    latency_stats,
    simulate_open_loop,
)
from perfmodel.errors import InputError

__all__ = ["add_replay_arguments", "replay_command"]

_METRICS = ("ttft_ms", "tpot_ms", "latency_ms")
_CHOICES = {"policy": POLICIES, "routing": ROUTINGS}


def add_replay_arguments(parser) -> None:
    """Add ``perfmodel replay`` options; the engine options are EngineConfig's fields."""
    parser.add_argument("source", metavar="RUN_DIR|REQUESTS",
                        help="a run folder (vllm/meta.json, vllm/requests.jsonl, config.json), "
                             "a requests.jsonl, a vllm bench serve result .json or a .csv")
    g = parser.add_mutually_exclusive_group(required=True)
    g.add_argument("--fit", metavar="FIT.json", help="step model written by perfmodel fit")
    g.add_argument("--profile", metavar="BUNDLE_DIR",
                   help="layer-profile bundle to compose the step model from (needs "
                        "--model-config)")
    parser.add_argument("--model-config", metavar="MODEL.json",
                        help="the model's architecture config (composition; KV-cache size)")
    parser.add_argument("--tp", type=int, default=None,
                        help="tensor-parallel degree (default: the run's, else 1)")
    for f in fields(EngineConfig):
        flag = "--" + f.name.replace("_", "-")
        if isinstance(f.default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None)
        elif f.name in _CHOICES:
            parser.add_argument(flag, choices=_CHOICES[f.name], default=None)
        else:
            kind = float if isinstance(f.default, float) else int
            parser.add_argument(flag, type=kind, default=None,
                                help=f"EngineConfig.{f.name} (default: the run's, else "
                                     f"{'fcfs' if f.name == 'policy' else f.default})")
    parser.add_argument("--gpu-memory-gib", type=float, default=None,
                        help="GPU memory for the KV-cache size (default: the run's)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=None,
                        help="vLLM's --gpu-memory-utilization (default: the run's, else 0.9)")
    parser.add_argument("--activation-reserve-gib", type=float, default=0.0,
                        help="memory vLLM keeps besides weights and KV (default 0: upper bound)")
    parser.add_argument("--interval-replications", type=int, default=0, metavar="R",
                        help="replays for a prediction interval of every statistic: each with "
                             "parameters drawn from the fit, step noise and, with --run-sd, a "
                             "run-level speed factor (default 0: no interval)")
    add_run_level_arguments(parser)
    parser.add_argument("--level", type=float, default=0.9,
                        help="interval level (default 0.9)")
    add_random_state_argument(parser, "the interval's draws")
    parser.add_argument("-o", "--output", metavar="PER_REQUEST.csv",
                        help="write the per-request predictions (refused if it exists)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing output")


def _model(args, settings: dict, work: pd.DataFrame, engine: dict):
    """The step model and a description of where it came from."""
    if args.fit:
        from perfmodel.core.results import FitResult

        p = Path(args.fit)
        if not p.is_file():
            raise InputError(f"fit {args.fit!r} does not exist")
        fit = FitResult.from_json(p)
        return fit, {"source": "fit", "path": str(p), "model": fit.model_name}
    if not args.model_config:
        raise InputError("--profile needs --model-config MODEL.json")
    fit, info = fit_for_run(args.profile, args.model_config, work, engine, tp=settings["tp"],
                            ep=settings["ep"])
    return fit, {"source": "profile", "path": str(args.profile), "model": fit.model_name,
                 **(info or {})}


def _read_source(src: str):
    from perfmodel.data.requests import load_run_dir, load_workload

    p = Path(src)
    if p.is_dir():
        return load_run_dir(p)
    return {}, load_workload(p)


def _engine_settings(args, run: dict, work: pd.DataFrame) -> tuple[dict, dict]:
    """EngineConfig keywords (options > run folder > replay defaults) and KV notes."""
    overrides = {f.name: getattr(args, f.name) for f in fields(EngineConfig)
                 if getattr(args, f.name, None) is not None}
    return run_engine_settings(
        run, args.model_config, overrides=overrides,
        gpu_memory_bytes=args.gpu_memory_gib * 2**30 if args.gpu_memory_gib else None,
        gpu_memory_utilization=args.gpu_memory_utilization, tp=args.tp,
        activation_reserve_bytes=args.activation_reserve_gib * 2**30)


def _errors(pred: dict, meas: dict) -> dict:
    out = {}
    for m in _METRICS:
        out[m] = {k: (None if meas[m][k] in (None, 0) or pred[m][k] is None
                      else (pred[m][k] - meas[m][k]) / meas[m][k]) for k in pred[m]}
    return out


def replay_command(args) -> tuple[str, dict]:
    """Run ``perfmodel replay``; return (text, JSON-safe dict)."""
    from perfmodel.cli.common import check_output

    out_path = check_output(args.output, args.force) if args.output else None
    if args.interval_replications < 0 or args.interval_replications == 1:
        raise InputError(f"--interval-replications must be 0 (no interval) or >= 2, got "
                         f"{args.interval_replications}")
    if (args.run_sd is not None or args.run_traces) and not args.interval_replications:
        raise InputError("--run-sd / --run-traces need --interval-replications R (the interval "
                         "they widen)")
    run, work = _read_source(args.source)
    tp, ep = run_parallelism(run, args.tp)
    settings = {"tp": tp, "ep": ep}
    kw, kv = _engine_settings(args, run, work)
    t0 = time.perf_counter()
    fit, model_info = _model(args, settings, work, kw)
    t_model = time.perf_counter() - t0
    engine = EngineConfig(**kw)
    t1 = time.perf_counter()
    sim = simulate_open_loop(fit, prompt_tokens=work["prompt_tokens"].to_numpy(),
                             output_tokens=work["output_tokens"].to_numpy(),
                             arrival_times=work["arrival_s"].to_numpy(), engine=engine,
                             keep_steps=False)
    t_sim = time.perf_counter() - t1
    pred = sim.latency_stats()
    obj = {**pred, "output_throughput_tok_s": sim.output_throughput_tok_s,
           "num_preemptions": int(sim.requests["num_preemptions"].sum()),
           "model": model_info["model"], "num_requests": len(work), "n_steps": sim.n_steps,
           "assumptions": {"engine": engine.as_dict(), "kv_cache": {
               **kv, "num_gpu_blocks": engine.num_gpu_blocks,
               "peak_blocks_used": sim.config.get("kv_peak_blocks")},
               "step_overhead_ms": engine.step_overhead_ms, "tensor_parallel_size": settings["tp"],
               "expert_parallel_size": settings["ep"],
               "step_model": model_info, "source": str(args.source),
               "request_source": work.attrs.get("source"),
               "not_modelled": ["prefix caching", "asynchronous scheduling",
                                "detokenisation and client/network time"]},
           "timing_s": {"step_model": t_model, "simulation": t_sim}}
    measured = all(m in work for m in _METRICS)
    if measured:
        meas = latency_stats(work["ttft_ms"], work["tpot_ms"], work["latency_ms"])
        arr, fin = work["arrival_s"].to_numpy(), work["arrival_s"] + work["latency_ms"] / 1000.0
        obj["measured"] = {**meas, "output_throughput_tok_s": float(
            work["output_tokens"].sum() / (float(fin.max()) - float(arr.min())))}
        obj["relative_error"] = _errors(pred, meas)
    if args.interval_replications:
        from perfmodel.decisions.capacity import run_level_text
        from perfmodel.decisions.run_intervals import replay_interval

        run_sd, run_est = run_level_sd(args, fit)
        iv = replay_interval(fit, work, engine, run_sd=run_sd,
                             replications=args.interval_replications, level=args.level,
                             seed=args.seed)
        obj["interval"] = {**iv, "run_level": run_level_text(run_sd), "run_level_estimate": run_est,
                           "sources": "parameters drawn from the fit, step noise on its scale"}
    if out_path is not None:
        _write_csv(out_path, sim, work, args.force)
        obj["output"] = str(out_path)
    return _text(obj, measured), obj


def _write_csv(path, sim, work: pd.DataFrame, force: bool):
    r = sim.requests
    df = pd.DataFrame({
        "request_id": work["request_id"] if "request_id" in work else r["request_id"],
        "arrival_s": r["arrival_s"], "prompt_tokens": r["prompt_tokens"],
        "output_tokens": r["output_tokens"], "ttft_ms": r["ttft_s"] * 1000.0,
        "tpot_ms": r["tpot_ms"], "latency_ms": r["e2e_s"] * 1000.0,
        "num_preemptions": r["num_preemptions"], "replica": r["replica"]})
    for m in _METRICS:
        if m in work:
            df[f"measured_{m}"] = work[m].to_numpy()
    atomic_write_text(path, df.to_csv(index=False), force=force)


def _span(d: dict) -> str:
    """``lower-upper`` of an interval, 3 digits each."""
    return "n/a" if d["lower"] is None else f"{d['lower']:.3g}-{d['upper']:.3g}"


def _text(obj: dict, measured: bool) -> str:
    a = obj["assumptions"]
    e = a["engine"]
    kvb = a["kv_cache"]
    lines = [(f"replayed {obj['num_requests']} requests with step model {obj['model']} "
             f"({a['step_model']['source']}), {obj['n_steps']} steps"),
             (f"engine: policy {e['policy']}, max_num_seqs {e['max_num_seqs']}, "
             f"max_num_batched_tokens {e['max_num_batched_tokens']}, data parallel "
             f"{e['data_parallel_size']} ({e['routing']}), step overhead "
             f"{e['step_overhead_ms']:.3g} ms"),
             (f"KV cache: {kvb['num_gpu_blocks'] or 'unlimited'} blocks of {e['block_size']} "
             f"tokens ({kvb['num_gpu_blocks_source']}), peak used {kvb['peak_blocks_used']}"),
             ""]
    head = f"{'':14s}" + "".join(f"{k:>11s}" for k in ("mean", "p50", "p90", "p95", "p99"))
    lines.append(head)

    def row(label, d):
        return f"{label:14s}" + "".join(f"{'n/a' if v is None else f'{v:.4g}':>11s}"
                                         for v in d.values())

    for m in _METRICS:
        lines.append(row(f"{m} pred", obj[m]))
        if measured:
            lines.append(row(f"{m} meas", obj["measured"][m]))
            lines.append(f"{m + ' err':14s}" + "".join(
                f"{'n/a' if v is None else f'{100 * v:+.1f}%':>11s}"
                for v in obj["relative_error"][m].values()))
    iv = obj.get("interval")
    if iv:
        lines.append(f"{100 * iv['level']:g} % interval over {iv['replications']} replays "
                     f"(run-level term: {iv['run_level']})")
        for m in _METRICS:
            lines.append(f"{m + ' int':14s}" + "".join(f"{_span(d):>11s}" for d in iv[m].values()))
    lines.append("")
    lines.append(f"output throughput {obj['output_throughput_tok_s']:.4g} tokens/s"
                 + (f" (measured {obj['measured']['output_throughput_tok_s']:.4g})"
                    if measured else ""))
    lines.append(f"preemptions {obj['num_preemptions']}")
    return "\n".join(lines)
