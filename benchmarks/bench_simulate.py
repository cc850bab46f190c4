"""Benchmark: simulated steps/s and requests/s of the array engine vs the per-request loop.

Closed-loop runs at concurrency C = 64 and 256 (so ``B`` is about C), each
with two workloads:

* ``uniform``: every request 256 prompt + 256 output tokens (the case
  ``perfmodel simulate --prompt-tokens --output-tokens`` runs); requests
  move in waves, so most steps are all-decode stretches the engine leaps over;
* ``mixed``: prompts uniform in [32, 512), outputs uniform in [16, 512)
  (seeded): finishes and admissions happen every few steps (at C = 256 almost
  every step), the engine's worst case.

The step model is a :class:`perfmodel.core.results.FitResult` (``seed_ctx_mono``
fitted in-process to a synthetic context-aware trace), vLLM V1 scheduling
(``policy='fcfs'``), default limits (``max_num_seqs`` 256,
``max_num_batched_tokens`` 2048), no KV-cache limit, ``keep_steps=False``.
The reference is the per-request loop (:mod:`perfmodel.decisions.simulate.reference`,
one model call per step), run on fewer requests; both report steps/s, so the
ratio is comparable.  Process CPU time, best of ``--repeats`` (the machine is
shared: read the ratios, absolute rates drift with the load; the load average
is printed before and after).
"""
from __future__ import annotations

import argparse
import os
import time
from functools import partial

import numpy as np
import pandas as pd

from perfmodel.core.fit import fit_model
from perfmodel.decisions.simulate import EngineConfig, simulate_closed_loop
from perfmodel.decisions.simulate.reference import _Req, _run_reference


def step_model():
    """seed_ctx_mono fitted to a synthetic trace with per-request contexts."""
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(400):
        B = int(rng.integers(1, 257))
        n_pre = int(rng.integers(0, 3))
        chunks = [1] * (B - n_pre) + [int(rng.integers(16, 1024)) for _ in range(n_pre)]
        ctx = rng.integers(0, 2048, B).tolist()
        attn = sum(c * (x + c / 2) for c, x in zip(chunks, ctx))
        T = (3.0 + 0.004 * sum(chunks) + 0.02 * B + 2e-7 * attn) * np.exp(rng.normal(0, 0.03))
        rows.append({"batch_size": B, "total_tokens": sum(chunks), "duration_ms": T,
                     "chunk_sizes": ";".join(map(str, chunks)),
                     "context_lens": ";".join(map(str, ctx))})
    return fit_model(pd.DataFrame(rows), "seed_ctx_mono", n_starts=2)


def workload(kind, n, seed=0):
    if kind == "uniform":
        return np.full(n, 256), np.full(n, 256)
    rng = np.random.default_rng(seed)
    return rng.integers(32, 512, n), rng.integers(16, 512, n)


def reference(fit, cfg, C, P, O):
    """Steps of the per-request reference loop on the same closed loop."""
    n = P.size
    first = [_Req(i, 0.0, P[i], O[i]) for i in range(min(C, n))]
    return _run_reference(fit, first, cfg, closed=(n, P, O), seed=0, keep_steps=False,
                          max_steps=None)[2]


def best_of(fn, repeats):
    times, out = [], None
    for _ in range(repeats):
        t0 = time.process_time()
        out = fn()
        times.append(time.process_time() - t0)
    return min(times), out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=8000, help="requests per array-engine run")
    ap.add_argument("--reference-requests", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    fit = step_model()
    cfg = EngineConfig(policy="fcfs")
    print("load average (1, 5, 15 min): {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))
    print(f"{'C':>4} {'workload':>8} {'steps':>7} {'steps/s':>9} {'req/s':>8} "
          f"{'ref steps/s':>11} {'ratio':>6}")
    for C in (64, 256):
        for kind in ("uniform", "mixed"):
            P, O = workload(kind, args.requests)
            t, r = best_of(partial(simulate_closed_loop, fit, args.requests, C, P, O,
                                   engine=cfg, keep_steps=False), args.repeats)
            n_ref = args.reference_requests
            t_ref, n_steps_ref = best_of(partial(reference, fit, cfg, C, P[:n_ref], O[:n_ref]), 1)
            rate, rate_ref = r.n_steps / t, n_steps_ref / t_ref
            print(f"{C:>4} {kind:>8} {r.n_steps:>7} {rate:>9.0f} {args.requests / t:>8.0f} "
                  f"{rate_ref:>11.0f} {rate / rate_ref:>6.1f}")
    print("load average (1, 5, 15 min): {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))

if __name__ == "__main__":
    main()
