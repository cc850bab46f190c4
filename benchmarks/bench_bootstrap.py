"""Benchmark: 1,000 bootstrap resamples of a 5,000-step synthetic trace.

Times :func:`perfmodel.stats.uncertainty.bootstrap` (pairs scheme, percentile
intervals, warm starts from the full-data fit, one start per resample) with
``--jobs`` joblib workers, and, in the same process, ``--singles``
sequential single fits of the full trace from a cold start
(``fit_model(..., n_starts=1)``: the seed heuristic start, no ``x0``), with
BLAS limited to one thread as in the bootstrap's joblib workers (on a loaded
2-core machine OpenBLAS threads make each small fit several times slower).
Prints both wall times and their ratio (bootstrap / singles); the target is
a bootstrap of <= 30 s on the 2-core development machine.  The machine is
shared: absolute times drift with its load, the ratio less so.

Trace: :func:`perfmodel.core.synthetic.simulate_trace` of ``seed_id`` at its
default truth, 5,000 steps, 3% multiplicative noise, seed 0; log-scale fit.

Usage::

    python benchmarks/bench_bootstrap.py [--n-boot 1000] [--n 5000] [--jobs 2] [--singles 1000]
"""
from __future__ import annotations

import argparse
import os
import time

from threadpoolctl import threadpool_limits

from perfmodel.core.fit import fit_model
from perfmodel.core.synthetic import simulate_trace
from perfmodel.data.trace import step_features
from perfmodel.stats.uncertainty import bootstrap


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--singles", type=int, default=1000)
    ap.add_argument("--scheme", default="pairs")
    a = ap.parse_args(argv)

    df = simulate_trace("seed_id", n=a.n, noise="multiplicative", sigma=0.03, seed=0)
    feats = step_features(df)
    feats = {k: feats[k] for k in ("B", "S")}
    y = df["duration_ms"].to_numpy(float)
    t0 = time.perf_counter()
    fit = fit_model(feats, "seed_id", y=y, relative="log")
    t_full = time.perf_counter() - t0

    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}", flush=True)
    print(f"trace: {a.n} steps; full fit (8 starts) {t_full:.2f} s", flush=True)
    t0 = time.perf_counter()
    boot = bootstrap(fit, n_boot=a.n_boot, scheme=a.scheme, seed=0, n_jobs=a.jobs)
    t_boot = time.perf_counter() - t0
    print(f"bootstrap: {a.n_boot} resamples ({a.scheme}, n_jobs={a.jobs}) in {t_boot:.2f} s "
          f"({1e3 * t_boot / a.n_boot:.1f} ms per resample), {boot.n_failed} failed; "
          f"target <= 30 s: {'met' if t_boot <= 30 else 'NOT met'}", flush=True)

    t0 = time.perf_counter()
    with threadpool_limits(limits=1):  # as in the bootstrap's workers
        for _ in range(a.singles):
            fit_model(feats, "seed_id", y=y, relative="log", n_starts=1)
    t_single = time.perf_counter() - t0
    print(f"single fits: {a.singles} sequential cold fits (n_starts=1) in {t_single:.2f} s "
          f"({1e3 * t_single / a.singles:.1f} ms each)")
    print(f"ratio: bootstrap wall / sequential singles wall = {t_boot / t_single:.3f} "
          f"(per fit {(t_boot / a.n_boot) / (t_single / a.singles):.3f}); "
          f"load average now {os.getloadavg()[0]:.2f}")

if __name__ == "__main__":
    main()
