#!/usr/bin/env python3
"""Freeze the real-client confirmation protocol before its runs are collected.

The run-level term of the request-level intervals (``docs/decisions.md``, "The
run-level term") was designed after the replicated series had been seen, so
checking it on that series is a development check.  This script writes down,
before a new series is collected, everything the confirmation uses:

* the model of record, fitted on the training run (its parameters are stored so
  that a later change of the fit is detected);
* the run-level sd, from the step logs of every run of the earlier series
  except the training run (:func:`perfmodel.decisions.run_intervals.series_run_spread`);
* the replay interval settings (replications, level, seed, SLO);
* the capacity answer and its 90 % interval, with and without the run-level
  term, for the earlier series' request set and the training run's limits;
* the acceptance rules: how many of the new runs' statistics must fall inside
  their 90 % interval (a one-sided binomial bound), and which outcome each
  planned request rate is predicted to have (meets the SLO target below the
  capacity interval, misses it above it, no prediction inside it).

The output is a JSON file that is committed before the collection starts;
``notebooks/19_real_client_confirmation.ipynb`` reads it and checks the new
series against it without recomputing anything it fixes.  Usage::

    python scripts/freeze_real_client_protocol.py --out data/vllm-serve/confirmation-protocol.json
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfmodel._io import atomic_write_text, json_safe
from perfmodel.data.requests import load_workload
from perfmodel.decisions import real_client as rc
from perfmodel.decisions.capacity import capacity
from perfmodel.decisions.confirmation import min_inside
from perfmodel.decisions.requests_workload import SLO, Workload
from perfmodel.decisions.run_intervals import series_run_spread
from perfmodel.errors import InputError


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--train-series", default="data/vllm-serve/llama-small-20261126")
    p.add_argument("--train", default="repeat-1")
    p.add_argument("--spread-series", nargs="+",
                   default=["data/vllm-serve/llama-small-20261126",
                            "data/vllm-serve/llama-small-replicates"],
                   help="series whose runs (except the training run) give the run-level sd")
    p.add_argument("--workload-run", default="data/vllm-serve/llama-small-replicates/repeat-1",
                   help="run whose request lengths the capacity answer uses")
    p.add_argument("--series", default="data/vllm-serve/llama-small-confirmation",
                   help="the series to be collected (must not exist yet)")
    p.add_argument("--rates", type=float, nargs="+", default=[3, 4, 5, 6, 7, 8],
                   help="planned open-loop rates (req/s) with the training run's limits")
    p.add_argument("--slo", default="ttft_p99=1000,tpot_p99=50")
    p.add_argument("--replications", type=int, default=100)
    p.add_argument("--capacity-replications", type=int, default=40)
    p.add_argument("--level", type=float, default=0.9)
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    try:
        if Path(a.series).exists():
            raise InputError(f"{a.series} exists: the protocol must be frozen before collection")
        troot = Path(a.train_series)
        fit, steps, overhead = rc.fit_run(troot / a.train)
        delays = rc.client_delays(troot / a.train, steps, overhead)
        extra = [s for s in a.spread_series if Path(s).resolve() != troot.resolve()]
        if len(extra) == len(a.spread_series):
            raise InputError("--spread-series must include the training series")
        spread = series_run_spread(troot, a.train, extra_series=extra)
        slo = SLO.parse(a.slo)
        rw = load_workload(Path(a.workload_run) / "bench.json")
        work = Workload(prompt_tokens=rw["prompt_tokens"].to_numpy(),
                        output_tokens=rw["output_tokens"].to_numpy())
        eng, _ = rc.replay_settings(Path(a.workload_run), overhead, delays)
        caps = {}
        for name, sd in (("with_run_term", spread["sd"]), ("without_run_term", 0.0)):
            c = capacity(fit, work, slo, engine=eng, replications=a.capacity_replications,
                         level=a.level, seed=a.seed, run_sd=sd)
            caps[name] = {"max_rate": c["max_rate"], "lower": c["interval"]["lower"],
                          "upper": c["interval"]["upper"], "run_sd": sd}
        iv = caps["with_run_term"]
        plan = {f"{r:g}": ("meets" if r < iv["lower"] else "misses" if r > iv["upper"]
                                else "no prediction") for r in a.rates}
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    commit = subprocess.run(["git", "rev-parse", "HEAD"], check=False, cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    n_planned = len(a.rates)
    out = {
        "purpose": "confirmation of the run-level term and the capacity interval on a real-client "
                   "series collected after this file was committed",
        "frozen_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "code_commit": commit,
        "series": a.series,
        "model": {"train_series": a.train_series, "train": a.train, "name": fit.model_name,
                  "params": dict(zip(fit.param_names, map(float, fit.values))),
                  "n_steps": len(steps), "step_overhead_ms": float(overhead)},
        "run_level": {"sd": spread["sd"], "n_runs": spread["n_runs"],
                      "mean_log_ratio": spread["mean_log_ratio"],
                      "ratio_min": float(min(spread["ratios"].values())),
                      "ratio_max": float(max(spread["ratios"].values())),
                      "rule": spread["rule"], "series": a.spread_series},
        "replay": {"replications": a.replications, "level": a.level, "seed": a.seed,
                   "slo": a.slo, "function": "perfmodel.decisions.run_intervals.series_intervals"},
        "capacity": {"workload_run": a.workload_run, "n_requests": len(rw),
                     "replications": a.capacity_replications, "seed": a.seed,
                     "attainment_target": slo.attainment, **caps},
        "acceptance": {
            "interval_statistics": ["ttft_ms_p50", "tpot_ms_p50", "latency_ms_p50",
                                    "tpot_ms_p99", "attainment"],
            "alpha": a.alpha,
            "min_inside_rule": "largest k with P(Binomial(n, level) < k) <= alpha, n = runs "
                               "of the series; computed for the n actually collected",
            "min_inside_if_all_planned_runs": {str(n): min_inside(n, a.level, a.alpha)
                                               for n in range(n_planned, n_planned + 12)},
            "rate_outcomes_rule": "every open-loop run of the series with the training run's "
                                  "limits, by its request rate (req/s): 'meets' = its measured "
                                  "share within the SLO >= the target, 'misses' = below it",
            "rate_outcomes": plan,
        },
    }
    atomic_write_text(Path(a.out), json.dumps(json_safe(out), indent=1) + "\n")
    print(f"run-level sd {spread['sd']:.4f} from {spread['n_runs']} runs; capacity "
          + "; ".join(f"{k}: {v['max_rate']:.2f} [{v['lower']:.2f}, {v['upper']:.2f}]"
                      for k, v in caps.items()))
    print("planned rates:", plan)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
