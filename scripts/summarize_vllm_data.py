"""Summarise the committed vLLM-CPU traces: coverage, noise floor, contention, closed-loop runs.

Derived output (regenerated, never edited by hand): ``data/vllm-cpu/summary.json``
and ``paper/tables/vllm_cpu_summary.csv``; also refreshes ``data/SHA256SUMS``
(sha256 of every committed file under ``data/``) with ``--checksums``.

Usage: ``python scripts/summarize_vllm_data.py [--checksums]``
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from perfmodel.core.results import atomic_write_text
from perfmodel.data.collect.machine_state import flag_contended_run
from perfmodel.data.datasets import sha256_file
from perfmodel.data.noise import replicate_floor
from perfmodel.data.trace import read_trace, step_features

DATA = Path("data")
VLLM = DATA / "vllm-cpu"


def checksums() -> str:
    lines = []
    for p in sorted(DATA.rglob("*")):
        if p.is_file() and p.name != "SHA256SUMS":
            lines.append(f"{sha256_file(p)}  {p.relative_to(DATA)}")
    return "\n".join(lines) + "\n"


def summarize() -> tuple[dict, pd.DataFrame]:
    out: dict = {}
    rows = []
    for mdir in sorted(p for p in VLLM.iterdir() if p.is_dir()):
        m = {}
        reps = []
        for csv in sorted(mdir.glob("*.csv")):
            name = csv.name[:-4]
            df = read_trace(csv)
            meta_p = csv.with_name(name + ".meta.json")
            meta = json.loads(meta_p.read_text()) if meta_p.exists() else None
            flagged = flag_contended_run(df, meta) if "cpu_ms" in df else None
            f = step_features(df)
            ctx = f.get("ctx_max", np.zeros(len(df)))
            row = {
                "model": mdir.name, "trace": name, "steps": len(df),
                "B_min": int(f["B"].min()), "B_max": int(f["B"].max()),
                "S_min": int(f["S"].min()), "S_max": int(f["S"].max()),
                "ctx_max": int(ctx.max()) if len(ctx) else 0,
                "median_ms": float(df["duration_ms"].median()),
                "contended_share": None if flagged is None else float(flagged["contended"].mean()),
            }
            rows.append(row)
            if name.startswith("mixed-r"):
                d = df.copy()
                d["replicate"] = name
                reps.append(d)
        if len(reps) >= 2:
            allr = pd.concat(reps, ignore_index=True)
            nf = replicate_floor(allr, key="step", by=None)
            m["noise_floor"] = nf.to_dict()
        runs = []
        for summ in sorted(mdir.glob("closed_loop-r*.summary.json")):
            s = json.loads(summ.read_text())
            runs.append({"run": summ.name.split(".")[0],
                         "output_tokens_per_s": s.get("output_tokens_per_s"),
                         "median_e2e_ms": (s.get("e2e_ms") or {}).get("p50"),
                         "median_ttft_ms": (s.get("ttft_ms") or {}).get("p50")})
        m["closed_loop"] = runs
        out[mdir.name] = m
    table = pd.DataFrame(rows)
    out["total_steps"] = int(table["steps"].sum()) if len(table) else 0
    return out, table


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checksums", action="store_true", help="rewrite data/SHA256SUMS")
    a = ap.parse_args(argv)
    if not VLLM.is_dir():
        print(f"summarize_vllm_data: {VLLM} does not exist", file=sys.stderr)
        return 2
    summary, table = summarize()
    atomic_write_text(VLLM / "summary.json", json.dumps(summary, indent=2) + "\n", force=True)
    Path("paper/tables").mkdir(parents=True, exist_ok=True)
    atomic_write_text(Path("paper/tables/vllm_cpu_summary.csv"), table.to_csv(index=False), force=True)
    if a.checksums:
        atomic_write_text(DATA / "SHA256SUMS", checksums(), force=True)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.to_string(index=False))
    print(json.dumps({k: v for k, v in summary.items() if k != "total_steps"}, indent=1)[:4000])
    print("total steps:", summary["total_steps"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
