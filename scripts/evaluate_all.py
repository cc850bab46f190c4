#!/usr/bin/env python3
"""Honest evaluation of the model family on every real dataset available.

Held-out scores, not in-sample fits, choose the default model and fit scale
(README.md, Model of record); in-sample errors flatter flexible forms. For each dataset found -- Splitwise (one per model/GPU/TP group), the
Sarathi-Serve specimen batches, Vidur's composed steps, the GPU trace in
``data/gpu/`` and any vLLM-CPU traces under ``data/vllm-cpu/`` -- this script:

1. runs :func:`perfmodel.stats.compare.compare` with the evaluation protocol's
   ``grouped`` scheme (:mod:`perfmodel.stats.protocol`, on the fold engine
   :func:`perfmodel.stats.validation.make_folds`: no replicate, identical step
   or -- in the vLLM-CPU engine traces, 25-step blocks -- step within 25 steps
   of a test step in training) and writes
   ``build/studies/compare_<dataset>.csv`` (and ``.tex`` through
   :mod:`perfmodel.report.paperio`);
2. runs the extrapolation split (train at or below the 0.8 quantile of S and
   B, test above) and records the winner;
3. refits the models with absolute (ms) residuals on the same folds, to
   measure how much worse the absolute loss is than the default log loss;
4. runs the adequacy tests (:mod:`perfmodel.stats.adequacy`): pure-error lack of
   fit where replicates exist, nested F / LR tests ``seed_id`` inside
   ``seed_gamma`` and inside ``seed_attn_kv``, AIC/BIC (with the recommended
   ``seed_ctx_mono``, which nests ``seed_id`` only at ``a_0 = 0``), and residual
   trends against context length and chunk spread (lack of fit only where the
   trace has repeated measurements: Vidur's composition is deterministic and
   Sarathi's batches are single runs);

and writes ``build/studies/compare_summary.csv`` (+ ``.tex``) and
``build/studies/adequacy_summary.csv`` (+ ``.tex``): per dataset the noise
floor (the median oracle, :mod:`perfmodel.data.noise`; the mean oracle and the
median CV as labelled diagnostics), the model of record's ratio to it with a
90 % cluster-bootstrap interval, the seed form's held-out MAPE, the best model and its MAPE, each
baseline's, the ratio to the floor and the extrapolation-split winner.

Usage::

    nice -n 10 python scripts/evaluate_all.py [--only NAME ...] [--out build/studies]
        [--starts 4] [--skip-absolute]

``--only`` takes dataset labels (e.g. ``gpu``, ``vidur``, ``sarathi``,
``splitwise_llama2-70b_a100-80gb_tp4``) or prefixes (``splitwise``).
These are exploratory outputs, not paper items (the paper's comparison tables come from
the notebooks, with the one fold protocol), so they go to ``build/`` and are not committed.
Rerunning overwrites the generated tables (they are generated files); the two
summaries keep the rows of datasets not rerun (so ``--only vllm-cpu`` adds the
CPU traces once the lead has collected them).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfmodel.core.model import RECOMMENDED
from perfmodel.errors import PerfmodelError
from perfmodel.stats.compare import compare, load_trace_arg

RECOMMENDED_CTX = RECOMMENDED["context"]
NESTED_CTX = "seed_attn_kv"  # the context-aware member that nests seed_id
RECOMMENDED_BS = RECOMMENDED["no_context"]
SEED_FORM = "seed_id"  # the seed form, fitted through its identifiable parameters


def write_csv(df: pd.DataFrame, path: Path) -> None:
    """Write a generated table atomically (replacing the previous run's)."""
    from perfmodel.core.results import atomic_write_text

    atomic_write_text(path, df.to_csv(index=False), force=True)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def datasets() -> list[tuple[str, callable]]:
    """(label, loader) of every dataset available now."""
    out = []
    try:
        from perfmodel.data.datasets import splitwise_steps

        sw = splitwise_steps()
        for (m, h, tp), _ in sw.groupby(["model", "hardware", "tp"]):
            spec = f"splitwise:{m}/{h}/tp{tp}"
            out.append((f"splitwise_{m}_{h}_tp{tp}", lambda s=spec: load_trace_arg(s)[0]))
    except PerfmodelError as e:
        log(f"splitwise unavailable: {e}")
    out.append(("sarathi", lambda: load_trace_arg("sarathi")[0]))
    out.append(("vidur", lambda: load_trace_arg("vidur")[0]))
    from perfmodel.data.trace import read_trace

    gpu = ROOT / "data" / "gpu" / "trace.csv"
    if gpu.exists():
        out.append(("gpu", lambda p=gpu: read_trace(p)))
    cpu = ROOT / "data" / "vllm-cpu"
    if cpu.is_dir():
        # per model size: the three same-seed mixed replicates (identical schedules), with
        # `replicate` naming the run; the folds keep a step's replicates (identical
        # schedules) and its 25-step block together, the floor matches steps by `step`
        for mdir in sorted(d for d in cpu.iterdir() if d.is_dir()):
            load = mixed_replicates(mdir)
            if load is not None:
                out.append((f"vllm-cpu_{mdir.name}", load))
    return out


def replicate_files(mdir: Path) -> list[Path]:
    """The same-seed mixed replicates of one vLLM-CPU model folder, in order: ``mixed-r<N>.csv``
    (a digit after ``-r``, so no ``.calib-pre`` or other derived file)."""
    return sorted(p for p in Path(mdir).glob("mixed-r[0-9]*.csv") if p.stem[len("mixed-r"):].isdigit())


def mixed_replicates(mdir: Path):
    """Loader of one vLLM-CPU model's same-seed mixed replicates (:func:`replicate_files`, >= 2)
    as one trace with ``replicate`` naming the run, or None when the folder has fewer."""
    from perfmodel.data.trace import read_trace

    reps = replicate_files(mdir)
    if len(reps) < 2:
        return None

    def load(reps=reps):
        parts = []
        for r in reps:
            d = read_trace(r)
            d["replicate"] = r.stem
            parts.append(d)
        return pd.concat(parts, ignore_index=True)
    return load


def _best(table: pd.DataFrame, kind: str | None = None):
    t = table[table["MAPE"].notna()]
    if kind:
        t = t[t["kind"] == kind]
    if t.empty:
        return None, np.nan
    r = t.loc[t["MAPE"].idxmin()]
    return r["name"], float(r["MAPE"])


def _mape(table, name):
    r = table[table["name"] == name]
    return float(r["MAPE"].iloc[0]) if len(r) and pd.notna(r["MAPE"].iloc[0]) else np.nan


def merge_rows(path: Path, rows: list[dict]) -> pd.DataFrame:
    """``rows`` replacing the same datasets' rows of an earlier summary at ``path``."""
    new = pd.DataFrame(rows)
    if path.exists() and not new.empty:
        old = pd.read_csv(path)
        old = old[~old["dataset"].isin(new["dataset"])]
        new = pd.concat([old, new], ignore_index=True)
    return new


def adequacy(df: pd.DataFrame, recommended: str, starts: int, replicated: bool) -> dict:
    """Lack of fit, nested tests, AIC/BIC and residual trends on all steps."""
    from perfmodel.core.fit import fit_model
    from perfmodel.stats import adequacy as aq
    from perfmodel.stats.validation import fold_groups

    names = [SEED_FORM, "seed_gamma"]
    if recommended != SEED_FORM:
        names += [NESTED_CTX, recommended]
    fits = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in names:
            fits[n] = fit_model(df, n, n_starts=starts)
    out: dict = {}
    # pure error needs replicate groups (same configuration or identical step), not time blocks
    groups = fold_groups(df, time_ordered=False)
    if replicated and np.unique(groups).size < len(df):
        for n, f in fits.items():
            try:
                r = aq.fit_lack_of_fit(f, df, groups)
                out[f"lof_F_{n}"], out[f"lof_p_{n}"] = r.F, r.pvalue
                out[f"lof_sd_ratio_{n}"] = float(np.sqrt(r.ms_lof / r.ms_pe)) \
                    if r.ms_pe > 0 else np.nan
            except PerfmodelError as e:
                out[f"lof_note_{n}"] = str(e)
    for full in [n for n in names[1:] if n != RECOMMENDED_CTX]:  # the members nesting seed_id
        t = aq.compare_nested(fits[SEED_FORM], fits[full])
        out[f"F_{SEED_FORM}_in_{full}"], out[f"pF_{SEED_FORM}_in_{full}"] = t.F, t.pvalue_f
        out[f"LR_{SEED_FORM}_in_{full}"], out[f"pLR_{SEED_FORM}_in_{full}"] = t.lr, t.pvalue_lr
    info = aq.information_table(fits)
    for _, r in info.iterrows():
        out[f"aic_{r['model']}"], out[f"bic_{r['model']}"] = r["aic"], r["bic"]
    for n in (SEED_FORM, recommended):
        tr = aq.residual_trends(fits[n], df, variables=("ctx_sum", "chunk_sd", "S", "B"))
        for _, r in tr.iterrows():
            out[f"trend_{r['variable']}_slope_{n}"] = r["slope"]
            out[f"trend_{r['variable']}_p_{n}"] = r["pvalue"]
    out["params_" + recommended] = json.dumps({k: float(f"{v:.4g}") for k, v in
                                               fits[recommended].params.items()})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--out", default=str(ROOT / "build" / "studies"))
    ap.add_argument("--starts", type=int, default=4)
    ap.add_argument("--skip-absolute", action="store_true")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        from perfmodel.report import paperio
    except ImportError:  # pragma: no cover
        paperio = None
    summary, adeq = [], []
    for label, load in datasets():
        if args.only and not any(label == o or label.startswith(o) for o in args.only):
            continue
        t0 = time.time()
        log(f"{label}: loading")
        df = load()
        from perfmodel.data.trace import has_context

        ctx = has_context(df)
        rec = RECOMMENDED_CTX if ctx else RECOMMENDED_BS
        # the vLLM-CPU runs are engine traces: `config` only pairs a step with its replicates,
        # so the folds also keep 25-step time blocks together (perfmodel.stats.validation.fold_groups)
        timed = True if label.startswith("vllm-cpu_") else None
        log(f"{label}: {len(df)} steps, context={ctx}; grouped CV")
        tab = compare(df, cv="grouped", k=5, seed=0, n_starts=args.starts, time_ordered=timed,
                      progress=lambda m, lab=label: log(f"{lab}:   {m}"))
        tab.insert(0, "dataset", label)
        write_csv(tab, out / f"compare_{label}.csv")
        if paperio is not None:
            show = tab[tab["status"] == "ok"][["name", "kind", "n_params", "MAPE",
                                               "MAPE_decode-only", "MAPE_mixed",
                                               "MAPE_prefill-heavy", "RMSE", "aic", "bic",
                                               "ratio_to_floor"]]
            paperio.write_table(show.reset_index(drop=True), f"compare_{label}", folder=out,
                                notebook=None)
        log(f"{label}: extrapolation split")
        ext = compare(df, cv="extrapolate", n_starts=args.starts, in_sample=False,
                      time_ordered=timed)
        ext.insert(0, "dataset", label)
        write_csv(ext, out / f"compare_{label}_extrapolate.csv")
        absm = np.nan
        if not args.skip_absolute:
            log(f"{label}: absolute loss")
            ab = compare(df, models=[SEED_FORM, rec] if rec != SEED_FORM else [SEED_FORM],
                         baselines=[], cv="grouped", k=5, relative="absolute",
                         n_starts=args.starts, in_sample=False, time_ordered=timed)
            absm = _mape(ab, rec)
            abs_seed = _mape(ab, SEED_FORM)
        else:
            abs_seed = np.nan
        nf = tab.attrs["noise_floor"]
        bm, bmape = _best(tab, "model")
        row = {"dataset": label, "n_steps": len(df), "context": ctx,
               "floor_kind": nf["kind"], "noise_floor": nf.get("oracle_median"),
               "diagnostic_mean_oracle_mape": nf.get("oracle_mape"),
               "diagnostic_median_cv_pct": (100 * nf["median_cv"]
                                             if nf.get("median_cv") is not None else None),
               "diagnostic_drift_removed_mean_oracle_mape": nf.get("oracle_mape_drift_removed"),
               "seed_mape": _mape(tab, SEED_FORM), "recommended": rec,
               "recommended_mape": _mape(tab, rec), "best_model": bm, "best_model_mape": bmape}
        for b in tab.loc[tab["kind"] == "baseline", "name"]:
            row[f"{b}_mape"] = _mape(tab, b)
        bb, bbm = _best(tab, "baseline")
        row["best_baseline"], row["best_baseline_mape"] = bb, bbm
        fl = row["noise_floor"]
        row["recommended_ratio_to_floor"] = (row["recommended_mape"] / fl) if fl else None
        rr = tab[tab["name"] == rec]
        row["recommended_ratio_lo"] = float(rr["ratio_lo"].iloc[0]) if len(rr) else np.nan
        row["recommended_ratio_hi"] = float(rr["ratio_hi"].iloc[0]) if len(rr) else np.nan
        row["recommended_lof_p"] = float(rr["lof_p"].iloc[0]) if len(rr) else np.nan
        row["best_ratio_to_floor"] = (bmape / fl) if fl else None
        row["recommended_mape_absolute_loss"] = absm
        row["seed_mape_absolute_loss"] = abs_seed
        w, wm = _best(ext)
        row["extrapolation_winner"], row["extrapolation_winner_mape"] = w, wm
        row["extrapolation_recommended_mape"] = _mape(ext, rec)
        eb, ebm = _best(ext, "baseline")
        row["extrapolation_best_baseline"], row["extrapolation_best_baseline_mape"] = eb, ebm
        summary.append(row)
        log(f"{label}: floor {fl}, seed {row['seed_mape']:.2f}, {rec} "
            f"{row['recommended_mape']:.2f}, best {bm} {bmape:.2f}, best baseline {bb} "
            f"{bbm:.2f}, extrapolation winner {w} ({wm:.2f}); absolute {absm:.2f}")
        try:
            a = adequacy(df, rec, args.starts, nf["kind"] != "none")
            adeq.append({"dataset": label, "recommended": rec, **a})
        except PerfmodelError as e:
            adeq.append({"dataset": label, "recommended": rec, "error": str(e)})
        log(f"{label}: done in {time.time() - t0:.0f} s")
        write_csv(merge_rows(out / "compare_summary.csv", summary), out / "compare_summary.csv")
        write_csv(merge_rows(out / "adequacy_summary.csv", adeq), out / "adequacy_summary.csv")
    if not summary:
        log("no dataset matched")
        return 1
    s = pd.read_csv(out / "compare_summary.csv")
    if paperio is not None:
        cols = ["dataset", "noise_floor", "seed_mape", "recommended_mape",
                "best_model", "best_model_mape", "best_baseline", "best_baseline_mape",
                "recommended_ratio_to_floor", "recommended_ratio_lo", "recommended_ratio_hi",
                "extrapolation_winner"]
        paperio.write_table(s[cols], "compare_summary", folder=out)
    log("summary written to " + str(out / "compare_summary.csv"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
