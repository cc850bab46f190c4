"""Benchmark: the bootstrap of one fit on loky workers and on a Dask LocalCluster.

Fits ``seed_id`` to ``data/example/example_trace.csv`` and bootstraps it
(``--n-boot`` pairs resamples) three ways: in-process, ``--workers`` loky
processes, and a Dask ``LocalCluster`` of ``--workers`` processes with one
thread each (started before the timing).  Prints each time with the load
average (the machine may be shared) and whether the resample parameters are
identical to the in-process ones (they must be: per-task seeds).
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

from perfmodel.core.fit import fit_model
from perfmodel.data.trace import read_trace
from perfmodel.stats.uncertainty import bootstrap

EXAMPLE = Path(__file__).resolve().parents[1] / "data" / "example" / "example_trace.csv"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-boot", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args(argv)
    from dask.distributed import LocalCluster

    fit = fit_model(read_trace(EXAMPLE), "seed_id")
    runs = {}
    with LocalCluster(n_workers=a.workers, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster:
        for name, kw in (("in-process", {}), (f"loky x{a.workers}", {"n_jobs": a.workers}),
                         (f"dask LocalCluster x{a.workers}",
                          {"backend": "dask", "scheduler": cluster.scheduler_address})):
            load = os.getloadavg()
            t0 = time.perf_counter()
            b = bootstrap(fit, n_boot=a.n_boot, seed=1, **kw)
            runs[name] = (time.perf_counter() - t0, b, load)
    ref = runs["in-process"][1].samples
    print(f"{'run':<24} {'s':>7} {'identical':>9}  load average")
    for name, (sec, b, load) in runs.items():
        print(f"{name:<24} {sec:>7.1f} {np.array_equal(b.samples, ref)!s:>9}  "
              + " ".join(f"{v:.2f}" for v in load))


if __name__ == "__main__":
    main()
