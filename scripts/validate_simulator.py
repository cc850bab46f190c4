"""Validate the continuous-batching simulator against the committed closed-loop runs.

For each model size and each closed-loop run ``closed_loop-rN`` under
``data/vllm-cpu/<model>/``:

1. *own steps*: fit the step model on the run's own step trace and simulate
   the run (isolates the scheduler and overhead logic from host drift);
2. *back-to-back mixed*: fit on the ``calib-pre`` mixed trace collected in
   the same engine process just before the loop, and simulate the run
   (and, for comparison, on the longer ``mixed-r1`` trace of an earlier
   engine process);
   report beside the error the run's step-time bias against that model
   (median ratio of measured to predicted step time) and the host drift
   measured between the ``calib-pre`` and ``calib-post`` traces (the same
   schedule, run just before and just after the loop).

Writes ``build/studies/simulator_validation.csv`` (and prints it).
Usage: ``python scripts/validate_simulator.py [--data data/vllm-cpu] [--out FILE] [--force]``
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from perfmodel.core.fit import fit_model
from perfmodel.core.model import default_for
from perfmodel.core.results import atomic_write_text
from perfmodel.data.trace import read_trace
from perfmodel.decisions.simulate import validate_closed_loop


def validate(data: Path, model: str = "auto") -> pd.DataFrame:
    rows = []
    for summ in sorted(data.glob("*/closed_loop-r*.summary.json")):
        run = summ.name.replace(".summary.json", "")
        trace_p = summ.with_name(run + ".csv")
        calib_p = summ.with_name(run + ".calib-pre.csv")
        summary = json.loads(summ.read_text())
        trace = read_trace(trace_p)
        name = default_for(trace) if model == "auto" else model
        drift = None
        post_p = summ.with_name(run + ".calib-post.csv")
        if calib_p.exists() and post_p.exists():
            # same schedule before and after the loop: the run-level drift of the host
            pre, post = read_trace(calib_p), read_trace(post_p)
            if len(pre) == len(post):
                r = np.log(post["duration_ms"].to_numpy() / pre["duration_ms"].to_numpy())
                drift = float(np.exp(np.median(r)) - 1)
        sources = [("own steps", trace)]
        if calib_p.exists():
            sources.append(("back-to-back mixed", read_trace(calib_p)))
        mixed_p = summ.parent / "mixed-r1.csv"
        if mixed_p.exists():
            sources.append(("mixed-r1 (earlier process)", read_trace(mixed_p)))
        for label, fit_df in sources:
            fit = fit_model(fit_df, name, n_starts=4)
            v = validate_closed_loop(fit, trace, summary)
            c = v.comparison
            rows.append({
                "model_size": summ.parent.name, "run": run, "fitted_on": label, "model": name,
                "measured_tok_s": c["output_throughput_tok_s"]["measured"],
                "simulated_tok_s": c["output_throughput_tok_s"]["simulated"],
                "err_throughput": c["output_throughput_tok_s"]["rel_error"],
                "measured_median_e2e_s": c["median_e2e_s"]["measured"],
                "simulated_median_e2e_s": c["median_e2e_s"]["simulated"],
                "err_median_e2e": c["median_e2e_s"]["rel_error"],
                "step_overhead_ms": v.step_overhead_ms,
                "step_time_bias": v.step_time_bias,
                "drift_pre_to_post": drift,
            })
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=Path("data/vllm-cpu"))
    ap.add_argument("--out", type=Path, default=Path("build/studies/simulator_validation.csv"))
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args(argv)
    df = validate(a.data)
    if df.empty:
        print(f"validate_simulator: no closed-loop runs under {a.data}", file=sys.stderr)
        return 2
    a.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(a.out, df.to_csv(index=False), force=a.force)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(df.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
