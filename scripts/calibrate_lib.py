"""Calibrate step models from LLM-Inference-Bench request latencies; score held-out configurations.

For every (hardware, device count, model) of the vLLM rows on A100 and H100
in ``LLM-Inference-Bench/Plots/All_results.csv`` (static batches of ``B``
requests with ``L`` input = ``L`` output tokens; llama.cpp's inconsistent
rows are not vLLM and are dropped anyway by ``consistent_only=True``), and
for each step-model member (default ``seed_ctx_mono`` and ``seed_id``):

* ``in_sample``: calibrate on all rows (:func:`perfmodel.stats.calibrate.
  calibrate_from_requests`), request-latency MAPE on the same rows;
* ``extrapolate_B_L``: train on ``B <= 32`` and ``L <= 1024``, test on the
  rest (every row with ``B = 64`` or ``L = 2048``);
* ``extrapolate_L``: train on ``L <= 1024``, test on ``L = 2048``;
* ``extrapolate_B``: train on ``B <= 32``, test on ``B = 64``;
* ``kfold5``: grouped 5-fold over the ``(B, L)`` configurations (replicates
  stay together), pooled out-of-fold MAPE.

Writes ``build/studies/lib_calibration.csv`` (one row per group, member and
split: ``n_train``, ``n_test``, ``mape_train`` = MAPE of the fit on its own
rows, ``mape_heldout``, ``note``) and prints a per-hardware summary.
Groups with fewer than 10 rows or fewer than 3 batch sizes or lengths are
listed with a note and not fitted.

Usage: ``python scripts/calibrate_lib.py [--members seed_ctx_mono seed_id]
[--n-starts 4] [--out build/studies/lib_calibration.csv]``
(needs the public data: ``PERFMODEL_DATA_MIRROR`` or the network).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from perfmodel.core.model import RECOMMENDED
from perfmodel.core.results import atomic_write_text
from perfmodel.data.datasets import load_llm_inference_bench
from perfmodel.errors import InputError
from perfmodel.stats.calibrate import (
    calibrate_from_requests,
    grouped_kfold_requests,
    heldout_evaluation,
)

HARDWARE = ("Nvidia A100 GPU", "Nvidia H100 GPU")
GROUP = ["hardware", "num_hardware", "model"]
SPLITS = {
    "extrapolate_B_L": lambda g: ((g["B"] <= 32) & (g["L"] <= 1024)).to_numpy(),
    "extrapolate_L": lambda g: (g["L"] <= 1024).to_numpy(),
    "extrapolate_B": lambda g: (g["B"] <= 32).to_numpy(),
}
COLUMNS = ["hardware", "num_hardware", "model", "member", "split", "n_train", "n_test",
           "mape_train", "mape_heldout", "note"]


def _row(key, member, split, n_train=0, n_test=0, mape_train=np.nan, mape_heldout=np.nan,
         note=""):
    return dict(zip(GROUP, key), member=member, split=split, n_train=n_train, n_test=n_test,
                mape_train=mape_train, mape_heldout=mape_heldout, note=note)


def calibrate_group(key, g: pd.DataFrame, member: str, *, n_starts: int, k: int,
                    seed: int) -> list[dict]:
    out = []
    fit = calibrate_from_requests(g, member, seed=seed, n_starts=n_starts)
    split_note = any("c_attn + 3 c_kv" in w for w in fit.warnings)
    out.append(_row(key, member, "in_sample", len(g), 0, fit.mape, np.nan,
                    "prefill/decode attention split not identified (only c_attn + 3 c_kv)"
                    if split_note else ""))
    for split, rule in SPLITS.items():
        mask = rule(g)
        if mask.all() or not mask.any():
            out.append(_row(key, member, split, int(mask.sum()), int((~mask).sum()),
                            note="no rows on one side"))
            continue
        try:
            r = heldout_evaluation(g, mask, member, seed=seed, n_starts=n_starts)
        except InputError as e:
            out.append(_row(key, member, split, int(mask.sum()), int((~mask).sum()),
                            note=f"not fitted: {e}"))
            continue
        out.append(_row(key, member, split, r.n_train, r.n_test, r.mape_train, r.mape_test))
    try:
        cv = grouped_kfold_requests(g, member, k=k, seed=seed, n_starts=n_starts)
        out.append(_row(key, member, f"kfold{k}", round(len(g) * (k - 1) / k), len(g),
                        cv.mape_train, cv.mape_test,
                        note=f"{cv.n_configs} configurations; n_train is per fold (approx.), "
                             "n_test pooled"))
    except InputError as e:
        out.append(_row(key, member, f"kfold{k}", note=f"not fitted: {e}"))
    return out


def run(members, *, n_starts: int = 4, k: int = 5, seed: int = 0, min_rows: int = 10,
        log=print) -> pd.DataFrame:
    df = load_llm_inference_bench(framework="vLLM", hardware=list(HARDWARE),
                                  consistent_only=True)
    rows = []
    for key, g in df.groupby(GROUP, sort=True):
        g = g.reset_index(drop=True)
        if len(g) < min_rows or g["B"].nunique() < 3 or g["L"].nunique() < 3:
            for member in members:
                rows.append(_row(key, member, "in_sample", len(g), 0,
                                 note=f"skipped: {len(g)} rows, {g['B'].nunique()} batch sizes, "
                                      f"{g['L'].nunique()} lengths (need >= {min_rows}, 3, 3)"))
            log(f"skip {key}: {len(g)} rows")
            continue
        for member in members:
            res = calibrate_group(key, g, member, n_starts=n_starts, k=k, seed=seed)
            rows.extend(res)
            txt = ", ".join(f"{r['split']} {r['mape_heldout']:.1f}" for r in res[1:])
            log(f"{key[0][7:]} x{key[1]} {key[2]:<32} {member:<14} in-sample "
                f"{res[0]['mape_train']:.1f}% | held-out: {txt}")
    return pd.DataFrame(rows, columns=COLUMNS)


def summary(table: pd.DataFrame) -> pd.DataFrame:
    t = table.copy()
    t["value"] = np.where(t["split"] == "in_sample", t["mape_train"], t["mape_heldout"])
    t = t[t["value"].notna()]
    t["ok10"] = t["value"] <= 10.0
    return (t.groupby(["hardware", "member", "split"])
            .agg(groups=("value", "size"), median_mape=("value", "median"),
                 max_mape=("value", "max"), share_le_10pct=("ok10", "mean"))
            .round(2).reset_index())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--members", nargs="+",
                    default=[RECOMMENDED["context"], RECOMMENDED["no_context"]])
    ap.add_argument("--n-starts", type=int, default=4)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("build/studies/lib_calibration.csv"))
    a = ap.parse_args(argv)
    table = run(a.members, n_starts=a.n_starts, k=a.k, seed=a.seed)
    atomic_write_text(a.out, table.to_csv(index=False, float_format="%.4g"), force=True,
                      make_parents=True)
    with pd.option_context("display.width", 200, "display.max_rows", 200):
        print(summary(table).to_string(index=False))
    print(f"wrote {a.out} ({len(table)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
