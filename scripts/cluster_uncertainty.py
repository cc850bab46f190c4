#!/usr/bin/env python3
"""Parameter intervals that respect configurations: pairs vs cluster bootstrap on Splitwise.

For each Splitwise (model, GPU, TP) group this script fits the recommended
model (:func:`perfmodel.core.model.default_for`), measures the intraclass
correlation of the fit-scale residuals within the fold engine's groups
(configuration + identical schedule, :func:`perfmodel.stats.validation.fold_groups`)
and its design effect (:func:`perfmodel.stats.uncertainty.intraclass_correlation`),
and compares 95 % parameter intervals:

* pairs bootstrap (steps resampled) vs cluster bootstrap (whole groups
  resampled), percentile, ``--n-boot`` resamples each, same seed;
* HC3 vs CR1 (cluster-robust) covariance intervals.

It prints one row per (group, parameter) with both widths and their ratio
(cluster / pairs, CR1 / HC3; parameters at a bound or unidentified have no
covariance interval) and a summary of the ratios; ``--out`` writes the rows.

Usage::

    nice python scripts/cluster_uncertainty.py [--n-boot 199] [--out FILE]
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def one_group(label: str, df: pd.DataFrame, n_boot: int, seed: int) -> pd.DataFrame:
    from perfmodel.core.fit import fit_model
    from perfmodel.core.model import default_for
    from perfmodel.core.scale import scale_of
    from perfmodel.stats import uncertainty as U
    from perfmodel.stats.validation import fold_groups

    df = df.reset_index(drop=True)
    fit = fit_model(df, default_for(df), n_starts=4)
    groups = fold_groups(df)
    resid = scale_of(fit).residual(df["duration_ms"].to_numpy(float), fit.predict(df))
    cs = U.intraclass_correlation(resid, groups)
    pairs = U.bootstrap(fit, df, n_boot=n_boot, scheme="pairs", seed=seed).intervals()
    clus = U.bootstrap(fit, df, n_boot=n_boot, scheme="cluster", groups=groups,
                       seed=seed).intervals()
    hc3 = U.covariance_intervals(fit, cov_type="HC3", data=df)
    cr1 = U.covariance_intervals(fit, cov_type="CR1", data=df, groups=groups)

    def width(d):
        return (d["upper"] - d["lower"]).to_numpy(float)

    out = pd.DataFrame({"group": label, "parameter": fit.param_names,
                        "estimate": fit.values, "pairs_width": width(pairs),
                        "cluster_width": width(clus), "HC3_width": width(hc3),
                        "CR1_width": width(cr1)})
    out["cluster/pairs"] = out["cluster_width"] / out["pairs_width"]
    out["CR1/HC3"] = out["CR1_width"] / out["HC3_width"]
    out["icc"], out["design_effect"], out["n_groups"] = cs.icc, cs.design_effect, cs.n_groups
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-boot", type=int, default=199)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    from perfmodel.data.datasets import splitwise_steps

    sw = splitwise_steps()
    rows = []
    for (m, h, tp), g in sw.groupby(["model", "hardware", "tp"]):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rows.append(one_group(f"{m}/{h}/tp{tp}", g, a.n_boot, a.seed))
    t = pd.concat(rows, ignore_index=True)
    with pd.option_context("display.width", 220, "display.max_rows", None):
        print(t.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
        per = t.groupby("group")[["icc", "design_effect", "n_groups"]].first()
        print("\nresidual ICC and design effect per group:\n"
              + per.to_string(float_format=lambda v: f"{v:.3g}"))
    for col in ("cluster/pairs", "CR1/HC3"):
        r = t[col].replace([np.inf, -np.inf], np.nan).dropna()
        print(f"{col}: n = {len(r)}, min {r.min():.3g}, median {r.median():.3g}, "
              f"max {r.max():.3g}")
    if a.out:
        from perfmodel._io import atomic_write_text

        atomic_write_text(a.out, t.to_csv(index=False), force=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
