#!/usr/bin/env python3
"""Coverage study: the share of 95% intervals that cover the true parameters.

Runs :func:`perfmodel.stats.coverage.run_study` (design, truth, noise level,
scenarios, methods and the fit scale of each noise type are documented in
:mod:`perfmodel.stats.coverage`) and writes to ``--out-dir``:

* ``coverage_summary.csv`` -- coverage, Monte Carlo standard error, R,
  undefined intervals, median relative width, seconds per replicate, per
  (scenario, method, parameter) and ``parameter = all``;
* ``coverage_table.tex`` -- the method x noise table (booktabs ``tabular``,
  cells ``coverage (MC s.e.)``, the a-priori recommended method marked);
* ``coverage_replicates.csv.gz`` -- every replicate interval (with
  ``--replicates``);
* ``coverage_settings.json`` -- settings, truth, wall time.

The full run of the first four scenarios (default: R = 500, n = 300 steps,
199 bootstrap resamples, 2 workers) takes about 20 minutes on the 2-core
development machine; run it with ``nice -n 10``.  The four later scenarios
(misspecified, heavy_tails, clustered, ar1_design) took 19 minutes at
R = 50 and 99 resamples on the same machine under load (``--plan`` runs a
subset).  The stored ``heavy_tails`` and ``clustered`` rows (R = 500, 199
resamples) took 23 minutes at ``nice -n 10`` beside other work (an earlier
R = 250 run of the same plan took 22 minutes at a 1-minute load average of
5-8 on 2 cores; every run is listed in ``coverage_settings.json``).  The stored
``misspecified`` and ``ar1_design`` rows (R = 500, 199 resamples) took 57 minutes at
``nice -n 10`` beside a full CI run.
``--merge-summary paper/results`` merges such a part into the stored summary.  ``--small`` is the test-sized run (R = 20).

Usage::

    nice -n 10 python scripts/coverage_study.py [--reps 500] [--jobs 2] [--out-dir results/coverage]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from perfmodel.errors import InputError
from perfmodel.report.tables import coverage_tex
from perfmodel.stats.coverage import (
    GOAL,
    RECOMMENDED,
    SCENARIOS,
    coverage_table,
    merge_summaries,
    run_study,
    summarize,
)


def _merged_settings(old: dict, this_run: dict, old_summary) -> dict:
    """Settings of a stored summary merged with this run's: the shared settings (seed, n,
    sigma, truth, ...) stay; ``runs`` lists every run (the stored one described by its
    scenarios and settings when it predates this list); ``R`` / ``n_boot`` become
    per-scenario maps when the runs differ; ``wall_seconds`` sums the runs."""
    runs = old.get("runs")
    if runs is None:
        runs = [{"scenarios": list(dict.fromkeys(old_summary["scenario"])),
                 **{k: old[k] for k in ("R", "n", "n_boot", "seed", "n_jobs", "wall_seconds",
                                        "merged_with", "plan_this_run") if k in old},
                 "note": "stored before runs were listed; wall_seconds is the last part only"}]
    runs = [*runs, this_run]
    settings = {k: v for k, v in old.items()
                if k not in ("runs", "merged_with", "plan_this_run", "wall_seconds")}
    for k in ("R", "n_boot"):
        # per scenario, the run that ran it last; one number when every scenario agrees
        vals = {sc: r[k] for r in runs for sc in (r.get("scenarios") or r["plan"])}
        settings[k] = next(iter(vals.values())) if len(set(vals.values())) == 1 else vals
    settings["scenarios"] = list(dict.fromkeys([*old_summary["scenario"], *this_run["plan"]]))
    settings["runs"] = runs
    settings["wall_seconds"] = sum(float(r.get("wall_seconds", 0.0)) for r in runs)
    return settings


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=500, help="replicates per noise type (default 500)")
    ap.add_argument("--n", type=int, default=300, help="steps per simulated trace (default 300)")
    ap.add_argument("--n-boot", type=int, default=199, help="bootstrap resamples (default 199)")
    ap.add_argument("--jobs", type=int, default=2, help="joblib workers (default 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out-dir", default="results/coverage")
    ap.add_argument("--replicates", action="store_true", help="also write every replicate")
    ap.add_argument("--small", action="store_true", help="test-sized run: 20 replicates")
    ap.add_argument("--plan", nargs="+", metavar="SCENARIO:M1,M2",
                    help="run only these (scenario, methods), e.g. ar1:boot-block-t")
    ap.add_argument("--merge", metavar="REPLICATES_CSV",
                    help="combine with an earlier run's coverage_replicates.csv.gz (same seed, "
                         "n, n_boot): its rows for the (scenario, method) pairs run now are "
                         "replaced; the summary covers both")
    ap.add_argument("--merge-summary", metavar="DIR",
                    help="combine with a stored summary (DIR/coverage_summary.csv and "
                         "coverage_settings.json, e.g. paper/results) whose replicates were not "
                         "kept: its rows for the (scenario, method) pairs run now are replaced; "
                         "the settings list every run (plan, R, resamples, start, wall time)")
    ap.add_argument("--progress", action="store_true")
    a = ap.parse_args(argv)
    plan = None
    if a.plan:
        try:
            plan = {k: tuple(v.split(",")) for k, v in (x.split(":", 1) for x in a.plan)}
        except ValueError:
            print(f"error: --plan items must be SCENARIO:M1,M2, got {a.plan}", file=sys.stderr)
            return 2
    reps = 20 if a.small else a.reps
    if a.merge and a.merge_summary:
        print("error: --merge and --merge-summary exclude each other", file=sys.stderr)
        return 2
    if a.merge_summary and not all(Path(a.merge_summary, f).is_file() for f in
                                   ("coverage_summary.csv", "coverage_settings.json")):
        print(f"error: --merge-summary {a.merge_summary} lacks coverage_summary.csv or "
              "coverage_settings.json", file=sys.stderr)
        return 2
    if a.merge_summary:
        stored = json.loads(Path(a.merge_summary, "coverage_settings.json").read_text())
        for k, v in (("n", a.n), ("seed", a.seed)):
            if stored.get(k) != v:
                print(f"error: --merge-summary: {k} = {v} differs from the stored "
                      f"{stored.get(k)}; the runs would not be one study", file=sys.stderr)
                return 2
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    try:
        rec = run_study(plan, R=reps, n=a.n, n_boot=a.n_boot, seed=a.seed, n_jobs=a.jobs,
                        progress=a.progress)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    wall = time.perf_counter() - t0
    settings = dict(rec.attrs)
    if a.merge:
        import pandas as pd

        old = pd.read_csv(a.merge)
        ran = set(zip(rec["scenario"], rec["method"]))
        keep = [(sc, m) not in ran for sc, m in zip(old["scenario"], old["method"])]
        rec = pd.concat([old[keep], rec], ignore_index=True)
        order = {sc: i for i, sc in enumerate(SCENARIOS)}
        rec = rec.sort_values(["scenario", "rep"], key=lambda c: c.map(order)
                              if c.name == "scenario" else c, kind="stable")
        settings["merged_with"] = str(a.merge)
        settings["plan_this_run"] = settings.pop("plan")
    summ = summarize(rec)
    this_run = {"plan": settings.get("plan", settings.get("plan_this_run")), "R": reps,
                "n": a.n, "n_boot": a.n_boot, "seed": a.seed, "n_jobs": a.jobs,
                "started_utc": started, "wall_seconds": wall,
                "load_average_1min_start_end": [load0, os.getloadavg()[0]],
                "cpu_count": os.cpu_count()}
    if a.merge_summary:
        import pandas as pd

        old = pd.read_csv(Path(a.merge_summary, "coverage_summary.csv"))
        summ = merge_summaries(old, summ)
        settings = _merged_settings(stored, this_run, old)
        wall = settings.pop("wall_seconds")
    summ.to_csv(out / "coverage_summary.csv", index=False, float_format="%.6g")
    (out / "coverage_table.tex").write_text(
        "% Generated by scripts/coverage_study.py; do not edit.\n" + coverage_tex(summ))
    if a.replicates:
        rec.to_csv(out / "coverage_replicates.csv.gz", index=False, float_format="%.8g")
    settings.update(wall_seconds=wall, recommended=RECOMMENDED, goal=list(GOAL))
    if not a.merge_summary:
        settings.setdefault("runs", [this_run])
    (out / "coverage_settings.json").write_text(json.dumps(settings, indent=2, default=str) + "\n")

    import pandas as pd

    with pd.option_context("display.width", 250, "display.max_columns", 20):
        print(coverage_table(summ).to_string(index=False))
    print()
    for sc, m in RECOMMENDED.items():
        row = summ[(summ.scenario == sc) & (summ.method == m) & (summ.parameter == "all")]
        if len(row):
            r = row.iloc[0]
            per = summ[(summ.scenario == sc) & (summ.method == m) & (summ.parameter != "all")]
            print(f"recommended {sc:>15}: {m:<12} coverage {r.coverage:.3f} +/- {r.mcse:.3f} "
                  f"(parameters {per.coverage.min():.3f}..{per.coverage.max():.3f}; "
                  f"{int(per.in_goal.sum())}/{len(per)} in [{GOAL[0]}, {GOAL[1]}])")
    print(f"\nR = {reps}, n = {a.n}, n_boot = {a.n_boot}, jobs = {a.jobs}: wall {wall:.0f} s; "
          f"wrote {out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
