"""NIST StRD non-linear regression report for perfmodel.core.fit.fit_curve.

Fits each of the 27 problems from both NIST starting points (analytic
Jacobians from :mod:`perfmodel.core.nist`, xtol = ftol = gtol = 1e-15) and prints,
per (problem, start): difficulty, the minimum log relative error (LRE,
McCullough 1998) of the parameters and of the standard errors against the
certified values, the RSS LRE, function evaluations, and pass/fail (pass:
parameter LRE >= 6 and standard-error LRE >= 4), then the number passing
from each start.

Usage::

    PERFMODEL_DATA_MIRROR=../shared/data/external python benchmarks/nist_report.py [--csv out.csv]
"""
from __future__ import annotations

import argparse
import sys

import pandas as pd

from perfmodel.core import nist

PARAM_DIGITS = 6.0
STDERR_DIGITS = 4.0


def report() -> pd.DataFrame:
    """One row per (problem, start) with the LREs and the verdict."""
    rows = []
    for name in nist.PROBLEMS:
        prob = nist.load_problem(name)
        for start in (1, 2):
            c = nist.solve(prob, start)
            rows.append({
                "problem": name, "difficulty": prob.difficulty, "start": start,
                "min_param_lre": round(c.min_param_lre, 1),
                "min_stderr_lre": round(c.min_stderr_lre, 1),
                "rss_lre": round(c.rss_lre, 1), "nfev": c.fit.nfev, "status": c.fit.status,
                "result": "pass" if c.passed(PARAM_DIGITS, STDERR_DIGITS) else "FAIL"})
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", help="also write the table to this CSV file")
    args = ap.parse_args(argv)
    df = report()
    with pd.option_context("display.max_rows", None, "display.width", 120):
        print(df.to_string(index=False))
    print()
    for start in (1, 2):
        sub = df[df["start"] == start]
        n_pass = int((sub["result"] == "pass").sum())
        failed = ", ".join(sub.loc[sub["result"] != "pass", "problem"]) or "none"
        print(f"start {start}: {n_pass}/{len(sub)} pass (param LRE >= {PARAM_DIGITS:g}, "
              f"stderr LRE >= {STDERR_DIGITS:g}); failing: {failed}")
    if args.csv:
        df.to_csv(args.csv, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
