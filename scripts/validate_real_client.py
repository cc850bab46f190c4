#!/usr/bin/env python3
"""Request-level validation against the real client: `vllm serve` + `vllm bench serve`.

Problem: a step model is only useful for decisions if the requests it is
meant to serve come out as predicted.  This script takes a series of real
runs collected by ``scripts/collect_vllm_serve.sh`` (one folder per run with
the engine-side step log ``steps.csv`` and the client's ``bench.json``), fits
the model of record (``perfmodel.core.model.default_for``) on the step log of
ONE run (``--train``), estimates the per-step time outside the model run from
that same log (``estimate_step_overhead``, consecutive step starts), and then,
for every other run, replays the client's own requests (lengths and arrival
times from ``bench.json``; the measured timings are ignored) through the
simulator with the run's engine limits, and compares TTFT / TPOT / latency
(p50, p99), output throughput and goodput (requests within every SLO limit
per second) with what the client measured.  It also asks
:func:`perfmodel.decisions.capacity.capacity` for the highest request rate
meeting the SLO (with its interval) and lists which measured rates met it.

Writes ``--out`` (JSON) and prints a table.  Usage::

    python scripts/validate_real_client.py data/vllm-serve/llama-small-20261126 \\
        --train repeat-1 --slo ttft_p99=1000,tpot_p99=50 --out build/real_client.json
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfmodel._io import atomic_write_text, json_safe
from perfmodel.core.fit import fit_model
from perfmodel.core.model import default_for
from perfmodel.data.requests import load_workload
from perfmodel.data.trace import read_trace
from perfmodel.decisions.capacity import capacity
from perfmodel.decisions.requests_workload import SLO, Workload
from perfmodel.decisions.simulate import EngineConfig, simulate_open_loop
from perfmodel.decisions.simulate.results import latency_stats
from perfmodel.decisions.simulate.validation import estimate_step_overhead

METRICS = ("ttft_ms", "tpot_ms", "latency_ms")


#: vLLM 0.32's defaults for `vllm serve` on a CPU with one worker (its
#: ``EngineArgs.get_batch_defaults``: OPENAI_API_SERVER, world size 1), used when a
#: run's server command sets no limit
VLLM_CPU_SERVE_DEFAULTS = {"max_num_seqs": 128, "max_num_batched_tokens": 2048}


def run_limits(run_dir: Path) -> dict[str, int]:
    """The server's scheduler limits of a run: its command's flags, else vLLM's defaults."""
    meta = json.loads((run_dir / "meta.json").read_text())
    cmd = meta.get("server_command") or ""
    cmd = " ".join(cmd) if isinstance(cmd, list) else str(cmd)
    log = (run_dir / "server.log").read_text(errors="replace") if (
        run_dir / "server.log").is_file() else ""
    out = {}
    for key in ("max_num_seqs", "max_num_batched_tokens"):
        m = re.search(rf"--{key.replace('_', '-')}[ =](\d+)", cmd) or re.search(
            rf"{key}=(\d+)", log)
        out[key] = int(m.group(1)) if m else VLLM_CPU_SERVE_DEFAULTS[key]
    return out


def attained(ttft, tpot, slo: SLO) -> np.ndarray:
    ok = np.ones(len(ttft), bool)
    if slo.ttft_ms is not None:
        ok &= np.asarray(ttft, float) <= slo.ttft_ms
    if slo.tpot_ms is not None:
        t = np.asarray(tpot, float)
        ok &= ~(t > slo.tpot_ms)  # NaN TPOT (one output token) meets it
    return ok


def goodput(arrival_s, latency_ms, ok) -> float:
    span = float(np.max(arrival_s + latency_ms / 1000.0) - np.min(arrival_s))
    return float(ok.sum() / span)


def replay_run(fit, work, engine: EngineConfig, slo: SLO) -> dict:
    sim = simulate_open_loop(fit, prompt_tokens=work["prompt_tokens"].to_numpy(),
                             output_tokens=work["output_tokens"].to_numpy(),
                             arrival_times=work["arrival_s"].to_numpy(), engine=engine,
                             keep_steps=False)
    r = sim.requests
    pred = sim.latency_stats()
    ok_p = attained(r["ttft_s"] * 1000.0, r["tpot_ms"], slo)
    meas = latency_stats(work["ttft_ms"], work["tpot_ms"], work["latency_ms"])
    ok_m = attained(work["ttft_ms"], work["tpot_ms"], slo)
    arr = work["arrival_s"].to_numpy()
    out = {"n": len(work)}
    for m in METRICS:
        for q in ("p50", "p99"):
            p, v = pred[m][q], meas[m][q]
            out[f"{m}_{q}"] = {"measured": v, "predicted": p,
                               "error": None if not v else (p - v) / v}
    thr_m = float(work["output_tokens"].sum() / (float(np.max(arr + work["latency_ms"] / 1e3))
                                                  - float(arr.min())))
    out["output_tok_s"] = {"measured": thr_m, "predicted": sim.output_throughput_tok_s,
                           "error": (sim.output_throughput_tok_s - thr_m) / thr_m}
    gm = goodput(arr, work["latency_ms"].to_numpy(), ok_m)
    gp = goodput(arr, r["e2e_s"].to_numpy() * 1000.0, ok_p)
    out["goodput_req_s"] = {"measured": gm, "predicted": gp, "error": (gp - gm) / gm if gm else None}
    out["attainment"] = {"measured": float(ok_m.mean()), "predicted": float(ok_p.mean())}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("series", type=Path, help="folder of run folders (steps.csv + bench.json)")
    ap.add_argument("--train", required=True, help="run whose step log the model is fitted on")
    ap.add_argument("--slo", default="ttft_p99=1000,tpot_p99=50")
    ap.add_argument("--replications", type=int, default=20)
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "real_client.json")
    args = ap.parse_args(argv)
    slo = SLO.parse(args.slo)
    runs = sorted(d for d in args.series.iterdir() if (d / "bench.json").is_file())
    train = args.series / args.train
    steps = read_trace(train / "steps.csv")
    model = default_for(steps)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = fit_model(steps, model=model)
    overhead = float(estimate_step_overhead(steps, method="timestamp").overhead_ms)
    print(f"fit {model} on {train.name} ({len(steps)} steps); step overhead {overhead:.2f} ms")
    result = {"train": train.name, "model": model, "n_steps": len(steps),
              "step_overhead_ms": overhead, "slo": args.slo, "runs": {}}
    for d in runs:
        lim = run_limits(d)
        work = load_workload(d / "bench.json")
        eng = EngineConfig(max_num_seqs=int(lim["max_num_seqs"]),
                           max_num_batched_tokens=int(lim["max_num_batched_tokens"]),
                           policy="fcfs", step_overhead_ms=overhead)
        res = replay_run(fit, work, eng, slo)
        res["engine"] = {"max_num_seqs": eng.max_num_seqs,
                         "max_num_batched_tokens": eng.max_num_batched_tokens}
        res["held_out"] = d.name != train.name
        result["runs"][d.name] = res
        e = {k: res[k]["error"] for k in res if isinstance(res[k], dict) and "error" in res[k]}
        print(f"{d.name:>18}: " + "  ".join(f"{k} {100 * v:+.0f}%" for k, v in e.items()
                                            if v is not None))
    # capacity: the highest Poisson rate meeting the SLO, on the training run's request lengths
    wt = load_workload(train / "bench.json")
    wl = Workload(prompt_tokens=wt["prompt_tokens"].to_numpy(),
                  output_tokens=wt["output_tokens"].to_numpy())
    eng = EngineConfig(**run_limits(train), policy="fcfs", step_overhead_ms=overhead)
    cap = capacity(fit, wl, slo, mode="rate", engine=eng, replications=args.replications)
    result["capacity"] = {"max_rate": cap.get("max_rate"), "interval": cap.get("interval")}
    print(f"capacity: {cap.get('max_rate')} req/s, interval {cap.get('interval')}")
    atomic_write_text(args.out, json.dumps(json_safe(result), indent=1), force=True,
                      make_parents=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
