#!/usr/bin/env python3
"""The evaluation protocol on every real dataset with replicates, written as CSV.

For each dataset (the H200 harness trace ``data/gpu``, the vLLM-CPU traces
under ``data/vllm-cpu/<model>``, the Splitwise groups with and without the
rows excluded by inspection) this script runs
:func:`perfmodel.stats.compare.compare` on every protocol scheme that
applies (:mod:`perfmodel.stats.protocol`: grouped, 25- and 100-step blocks,
cross-workload transfer, extrapolation), the nested-CV selection of the
model of record (:func:`perfmodel.stats.selection.nested_select`) and the
ablation of the saturation core on steps >= 10 ms, and writes under
``--out`` (default ``build/protocol``):

- ``compare_<dataset>_<scheme>.csv`` -- one comparison table each;
- ``summary.csv`` -- per (dataset, scheme, candidate): held-out MAPE, the
  median-oracle floor, the ratio with its 90 % cluster-bootstrap interval,
  the lack-of-fit F test p-value;
- ``nested.csv`` -- per (dataset, scheme, outer fold, candidate): inner and
  outer MAPE, the choice (``--nested-only``: this file alone);
- ``ablation.csv`` -- held-out MAPE by step-time band (< 10 ms, >= 10 ms) of
  the saturation members and their non-negative linear ablation.

Usage::

    nice -n 10 python scripts/evaluate_protocol.py [--only gpu vllm-cpu splitwise]
        [--starts 1] [--k 5] [--nested-k 3] [--boot 500]
    # the selection of the model of record alone, stored for the paper (notebook 18)
    nice -n 10 python scripts/evaluate_protocol.py --nested-only --out paper/results/nested
    # the confirmation traces (collected after the model of record was frozen)
    python scripts/evaluate_protocol.py --cpu-root data/vllm-cpu-confirmation \
        --only vllm-cpu --skip-nested --out build/confirmation
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfmodel._io import atomic_write_text
from perfmodel.core.model import MODELS, RECOMMENDED
from perfmodel.errors import PerfmodelError
from perfmodel.stats.compare import DEFAULT_MODELS, _needs_context, compare
from perfmodel.stats.protocol import schemes_for
from perfmodel.stats.protocol_runs import engine_run_tasks, read_engine_runs, summary_rows
from perfmodel.stats.selection import nested_select

#: members compared in every table (the rest of the registry enters the nested selection):
#: three alternatives and the model of record
TABLE_MODELS = ("seed_id", "seed_ctx", "seed_attn_kv", RECOMMENDED["context"])


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def gpu_trace() -> tuple[pd.DataFrame, dict]:
    """The H200 trace and the roofline's arguments from its metadata."""
    from perfmodel.data.trace import read_trace
    from perfmodel.stats.baselines import HARDWARE_PEAKS

    df = read_trace(ROOT / "data" / "gpu" / "trace.csv")
    meta = json.loads((ROOT / "data" / "gpu" / "trace.meta.json").read_text())
    tf, bw = HARDWARE_PEAKS[meta["gpu_name"]]
    return df, {"roofline": {"model_config": meta["model_config"], "peak_tflops": tf,
                             "peak_tbps": bw}}


def datasets(only, cpu_root: Path | None = None):
    """(label, loader) pairs: loader() -> list of (scheme-label, df, compare kwargs).

    ``cpu_root``: the folder of vLLM-CPU model folders (default ``data/vllm-cpu``;
    ``data/vllm-cpu-confirmation`` for the confirmation traces collected after the
    model of record was frozen).
    """
    out = []
    if (ROOT / "data" / "gpu" / "trace.csv").exists():
        out.append(("gpu", _gpu_tasks))
    cpu = cpu_root or ROOT / "data" / "vllm-cpu"
    for mdir in sorted(d for d in cpu.iterdir() if d.is_dir()) if cpu.is_dir() else []:
        out.append((f"vllm-cpu_{mdir.name}", lambda m=mdir: _cpu_tasks(m)))
    out.append(("splitwise", _splitwise_tasks))
    return [(lab, f) for lab, f in out if not only or any(lab.startswith(o) for o in only)]


def _gpu_tasks():
    df, kw = gpu_trace()
    base = {"baselines": ["linear", "poly2", "constant_throughput", "distserve",
                          "splitwise_interp", "nnls_ctx", "roofline", "random_forest"],
            "baseline_kwargs": kw}
    return [("gpu", s, df, base) for s in schemes_for(df)]


def _cpu_tasks(mdir):
    return engine_run_tasks(read_engine_runs(mdir), f"vllm-cpu_{mdir.name}")


def _splitwise_tasks():
    from perfmodel.data.datasets import splitwise_steps

    tasks = []
    for drop in (True, False):
        sw = splitwise_steps(drop_excluded=drop)
        for (m, h, tp), g in sw.groupby(["model", "hardware", "tp"]):
            g = g.drop(columns=[c for c in ("excluded",) if c in g.columns])
            lab = f"splitwise_{m}_{h}_tp{tp}" + ("" if drop else "_all-rows")
            for s in (schemes_for(g) if drop else ("grouped",)):
                tasks.append((lab, s, g.reset_index(drop=True), {}))
    return tasks


def _ablation(label, scheme, df, tab):
    y = df.reset_index(drop=True)["duration_ms"].to_numpy(float)
    pred = tab.attrs["predictions"]
    rows = []
    for name in pred.columns:
        p = pred[name].to_numpy(float)
        for band, sel in (("< 10 ms", y < 10), (">= 10 ms", y >= 10), ("all", y > 0)):
            m = sel & np.isfinite(p)
            if m.sum() >= 10:
                rows.append({"dataset": label, "scheme": scheme, "name": name, "band": band,
                             "n": int(m.sum()),
                             "MAPE": 100 * float(np.mean(np.abs(y[m] - p[m]) / y[m]))})
    return rows


def _write(df: pd.DataFrame, path: Path) -> None:
    atomic_write_text(path, df.to_csv(index=False), force=True)


def _merge(path: Path, new: list[dict], labels: set[str]) -> pd.DataFrame:
    new_df = pd.DataFrame(new)
    if path.exists():
        old = pd.read_csv(path)
        old = old[~old["dataset"].isin(labels)]
        new_df = pd.concat([old, new_df], ignore_index=True)
    return new_df


def _nested(lab, scheme, df, args) -> list[dict]:
    """The nested-CV selection among DEFAULT_MODELS on one (dataset, scheme), as rows."""
    ctx = "chunk_sizes" in df.columns
    cands = [m for m in DEFAULT_MODELS if ctx or not _needs_context(m, "model")]
    try:
        ns = nested_select(df, cands, scheme, k_outer=args.nested_k, k_inner=args.nested_k,
                           n_starts=args.starts,
                           progress=lambda m, lab=lab: log(f"{lab} nested: {m}"))
    except PerfmodelError as e:
        log(f"{lab} nested: failed: {e}")
        return []
    ns.insert(0, "dataset", lab)
    ns.insert(1, "scheme", scheme)
    return ns.to_dict("records")


def run_dataset(label, loader, args, out):
    summary, ablation, nested = [], [], []
    labels = set()
    tasks = loader()
    for lab, scheme, df, kw in tasks:
        labels.add(lab)
        if args.nested_only:
            if scheme in ("grouped", "blocked25") and not lab.endswith("_all-rows"):
                nested += _nested(lab, scheme, df, args)
            continue
        t0 = time.time()
        ctx = "chunk_sizes" in df.columns
        models = [m for m in TABLE_MODELS if ctx or not _needs_context(m, "model")]
        kw = {"cv": scheme, **kw}
        in_sample = scheme in ("grouped", "blocked25")
        try:
            tab = compare(df, models=models, k=args.k, n_starts=args.starts,
                          in_sample=in_sample, n_boot=args.boot, **kw)
        except PerfmodelError as e:
            log(f"{lab} {scheme}: failed: {e}")
            continue
        tab.insert(0, "dataset", lab)
        tab.insert(1, "scheme", scheme)
        fname = scheme.replace(":", "_").replace("->", "-to-")
        _write(tab, out / f"compare_{lab}_{fname}.csv")
        summary += summary_rows(lab, scheme, tab)
        if ctx and scheme in ("grouped", "blocked25", "transfer:sweeps->mixed"):
            ablation += _ablation(lab, scheme, df, tab)
        best = tab[tab["MAPE"].notna()].sort_values("MAPE").head(3)
        log(f"{lab} {scheme}: floor {tab['noise_floor'].iloc[0]:.3g}; best "
            + ", ".join(f"{r['name']} {r['MAPE']:.2f}" for _, r in best.iterrows())
            + f" ({time.time() - t0:.0f} s)")
        if scheme in ("grouped", "blocked25") and not args.skip_nested \
                and not lab.endswith("_all-rows"):
            nested += _nested(lab, scheme, df, args)
    for name, rows in (("summary", summary), ("ablation", ablation), ("nested", nested)):
        if rows:
            _write(_merge(out / f"{name}.csv", rows, labels), out / f"{name}.csv")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--out", default=str(ROOT / "build" / "protocol"))
    ap.add_argument("--starts", type=int, default=1)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--nested-k", type=int, default=3)
    ap.add_argument("--boot", type=int, default=500)
    ap.add_argument("--skip-nested", action="store_true")
    ap.add_argument("--nested-only", action="store_true",
                    help="only the nested-CV selection (nested.csv), no comparison tables")
    ap.add_argument("--cpu-root", type=Path, default=None,
                    help="folder of vLLM-CPU model folders (default data/vllm-cpu)")
    args = ap.parse_args(argv)
    if args.nested_only and args.skip_nested:
        ap.error("--nested-only and --skip-nested exclude each other")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log(f"model of record: {dict(RECOMMENDED)}; registry: {list(MODELS)}")
    sel = datasets(args.only, args.cpu_root)
    if not sel:
        log("no dataset matched")
        return 1
    t0, load0 = time.time(), os.getloadavg()[0]
    started = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
    for label, loader in sel:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            run_dataset(label, loader, args, out)
    settings = {"only": args.only, "starts": args.starts, "k": args.k,
                "nested_k": args.nested_k, "boot": args.boot, "nested_only": args.nested_only,
                "skip_nested": args.skip_nested,
                "cpu_root": str(args.cpu_root or "data/vllm-cpu"), "started_utc": started,
                "wall_seconds": round(time.time() - t0, 1),
                "load_average_1min_start_end": [round(load0, 2), round(os.getloadavg()[0], 2)],
                "cpu_count": os.cpu_count(), "niceness": os.nice(0),
                "blas_threads": {k: os.environ.get(k) for k in
                                 ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}}
    atomic_write_text(out / "settings.json", json.dumps(settings, indent=2) + "\n", force=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
