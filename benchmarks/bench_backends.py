"""Benchmark: a bootstrap and a capacity sweep on loky workers and on a Dask LocalCluster.

Two cases, each run three ways: in-process, ``--workers`` loky processes,
and a Dask ``LocalCluster`` of ``--workers`` processes with one thread each
(started before the timing):

``bootstrap``
    fits ``seed_id`` to ``data/example/example_trace.csv`` and bootstraps it
    (``--n-boot`` pairs resamples);
``capacity``
    :func:`perfmodel.decisions.capacity.capacity` of that fit (rate mode,
    ``--replications`` searches for the interval, each under its own
    parameter draw, step noise and arrival schedule) for a workload of 200
    requests (prompts uniform 64-512 tokens, outputs uniform 16-128).

Prints each time with the load average (the machine may be shared) and
whether the result is identical to the in-process one (it must be: every
task is seeded by its index).
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

from perfmodel.core.fit import fit_model
from perfmodel.data.trace import read_trace
from perfmodel.decisions.capacity import capacity
from perfmodel.decisions.requests_workload import SLO, workload_from_lengths
from perfmodel.decisions.simulate import EngineConfig
from perfmodel.stats.uncertainty import bootstrap

EXAMPLE = Path(__file__).resolve().parents[1] / "data" / "example" / "example_trace.csv"


def _cases(fit, a):
    """name -> (run(**backend keywords), comparable value of a result)."""
    w = workload_from_lengths("uniform:64,512", "uniform:16,128", 200, seed=0)
    slo = SLO.parse("ttft_p99=500,tpot_p99=50")
    eng = EngineConfig(max_num_seqs=32, max_num_batched_tokens=512)
    return {
        "bootstrap": (lambda **kw: bootstrap(fit, n_boot=a.n_boot, seed=1, **kw),
                      lambda b: b.samples),
        "capacity": (lambda **kw: capacity(fit, w, slo, engine=eng,
                                           replications=a.replications, rel_tol=0.05, seed=1,
                                           **kw),
                     lambda d: np.array(d["interval"]["values"])),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-boot", type=int, default=200)
    ap.add_argument("--replications", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--only", choices=["bootstrap", "capacity"])
    a = ap.parse_args(argv)
    from dask.distributed import LocalCluster

    fit = fit_model(read_trace(EXAMPLE), "seed_id")
    cases = _cases(fit, a)
    if a.only:
        cases = {a.only: cases[a.only]}
    print(f"{'case':<10} {'run':<26} {'s':>7} {'ratio':>6} {'identical':>9}  load average")
    with LocalCluster(n_workers=a.workers, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster:
        for case, (run, value) in cases.items():
            runs = {}
            for name, kw in (("in-process", {}), (f"loky x{a.workers}", {"n_jobs": a.workers}),
                             (f"dask LocalCluster x{a.workers}",
                              {"backend": "dask", "scheduler": cluster.scheduler_address})):
                load = os.getloadavg()
                t0 = time.perf_counter()
                res = run(**kw)
                runs[name] = (time.perf_counter() - t0, value(res), load)
            base, ref = runs["in-process"][0], runs["in-process"][1]
            for name, (sec, v, load) in runs.items():
                print(f"{case:<10} {name:<26} {sec:>7.1f} {base / sec:>6.2f} "
                      f"{np.array_equal(v, ref)!s:>9}  " + " ".join(f"{x:.2f}" for x in load),
                      flush=True)


if __name__ == "__main__":
    main()
