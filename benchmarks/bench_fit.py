"""Benchmark: fit time of perfmodel's fitter vs a bare scipy least_squares call.

For n = 1k, 10k, 100k synthetic steps (seed_id truth, 3% multiplicative
noise), times

* ``bare``: ``scipy.optimize.least_squares`` on the same log residuals and
  analytic Jacobian from the same start (trf, x_scale='jac', same tolerances);
* ``perfmodel n_starts=1``: :func:`perfmodel.core.fit.fit_model` from that start
  (validation, median scaling, covariance, FitResult);
* ``perfmodel default``: the CLI default (8 seeded starts).

and prints each as a ratio to ``bare`` measured in the same process (the
machine is shared and noisy: absolute times drift; ratios are what to read).
Best of ``--repeats`` runs each.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from scipy import optimize

from perfmodel.core.fit import fit_model
from perfmodel.core.model import get_model

TRUTH = np.array([5.0, 2.0, 0.05, 0.3, 0.02, 0.05, 0.002])


def problem(n, seed=0):
    rng = np.random.default_rng(seed)
    B = rng.integers(1, 257, n).astype(float)
    S = B + np.round(np.exp(rng.uniform(0, np.log(8192), n)))
    f = {"B": B, "S": S}
    y = get_model("seed_id").predict(TRUTH, f) * np.exp(0.03 * rng.standard_normal(n))
    return f, y


def best_of(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args(argv)
    m = get_model("seed_id")
    print(f"{'n':>8} {'bare s':>9} {'pm(1) s':>9} {'ratio':>6} {'pm(8) s':>9} {'ratio':>6}")
    for n in a.sizes:
        f, y = problem(n)
        x0 = m.initial_guess(f, y)
        ly = np.log(y)

        def bare(f=f, ly=ly, x0=x0):
            return optimize.least_squares(
                lambda t: np.log(m._predict(t, f)) - ly, x0,
                jac=lambda t: m._jacobian(t, f) / m._predict(t, f)[:, None],
                bounds=(m.lower, m.upper), method="trf", x_scale="jac",
                xtol=1e-10, ftol=1e-10, gtol=1e-10, max_nfev=2000)

        tb, rb = best_of(bare, a.repeats)
        t1, r1 = best_of(lambda f=f, y=y, x0=x0: fit_model(f, "seed_id", y=y, n_starts=1, x0=x0),
                         a.repeats)
        t8, _r8 = best_of(lambda f=f, y=y: fit_model(f, "seed_id", y=y), max(1, a.repeats // 2))
        assert abs(r1.rss - 2 * rb.cost) / (2 * rb.cost) < 1e-3, "different optimum"
        print(f"{n:>8} {tb:9.3f} {t1:9.3f} {t1 / tb:6.2f} {t8:9.3f} {t8 / tb:6.2f}")


if __name__ == "__main__":
    main()
