"""Benchmark: time and peak memory of ``perfmodel fit`` on a fleet-size trace.

Writes (once; reused when present) a synthetic trace of ``--rows`` steps
(default 5,000,000) drawn with :func:`perfmodel.core.synthetic.simulate_trace`
in blocks of 250,000 steps (seed = block index, steps renumbered), in two
forms: with the per-request ``chunk_sizes``/``context_lens`` columns and
without them.  Then runs ``python -m perfmodel fit TRACE -o OUT --force`` on
each in a fresh process and reports its wall time and peak resident memory
(``ru_maxrss`` of the child), next to the machine's load average (the
machine may be shared: read the times with it).  Optionally converts the
traces to Parquet (``perfmodel convert``) and times the fit on those too.

The traces go to ``--dir`` (default ``/tmp/perfmodel-bench``): they are
hundreds of MB, never commit them.  Not a test: targets (issue text of the
hardening work) are <= 20 s and <= 1.5 GB for 5,000,000 steps with context.

Usage::

    python -m benchmarks.bench_large_trace            # or: python benchmarks/bench_large_trace.py
    python benchmarks/bench_large_trace.py --rows 1000000 --parquet
    python benchmarks/bench_large_trace.py --trace a.parquet --trace b.csv   # given files
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BLOCK = 250_000


def make_traces(rows: int, folder: Path) -> tuple[Path, Path]:
    """Write ``ctx_<rows>.csv`` and ``noctx_<rows>.csv`` in ``folder`` (once)."""
    ctx, noctx = folder / f"ctx_{rows}.csv", folder / f"noctx_{rows}.csv"
    if ctx.exists() and noctx.exists():
        return ctx, noctx
    from perfmodel.core.synthetic import simulate_trace

    folder.mkdir(parents=True, exist_ok=True)
    tmp_ctx, tmp_no = ctx.with_suffix(".part"), noctx.with_suffix(".part")
    done = 0
    with open(tmp_ctx, "w") as fc, open(tmp_no, "w") as fn:
        for block in range((rows + BLOCK - 1) // BLOCK):
            n = min(BLOCK, rows - done)
            df = simulate_trace(n=n, noise="multiplicative", seed=block)
            df["step"] += done
            df["timestamp"] += 0.0 if done == 0 else float(block)
            df.to_csv(fc, index=False, header=block == 0)
            df.drop(columns=["chunk_sizes", "context_lens"]).to_csv(fn, index=False,
                                                                    header=block == 0)
            done += n
            print(f"  wrote {done} rows", file=sys.stderr)
    tmp_ctx.replace(ctx)
    tmp_no.replace(noctx)
    return ctx, noctx


def run_child(argv: list[str]) -> tuple[float, float, int, float]:
    """Run ``python -m perfmodel ARGV`` -> (wall s, peak RSS MB of that child, exit code,
    CPU s of that child: user + system, less sensitive to a shared machine than wall)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "perfmodel", *argv],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = proc.stderr.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)  # the rusage of this one child
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if proc.returncode and err.strip():
        print(err.strip().splitlines()[-1], file=sys.stderr)
    return wall, usage.ru_maxrss / 1024.0, proc.returncode, usage.ru_utime + usage.ru_stime


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "perfmodel-bench")
    ap.add_argument("--parquet", action="store_true", help="also convert and time Parquet")
    ap.add_argument("--only", choices=["ctx", "noctx"], help="time one trace only")
    ap.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                    help="further arguments of perfmodel fit (e.g. --bootstrap 10)")
    ap.add_argument("--trace", type=Path, action="append", default=[],
                    help="time the fit of this trace file instead (repeatable; no generation)")
    a = ap.parse_args(argv)
    if a.trace:
        traces = {p.name: p for p in a.trace}
        a.dir.mkdir(parents=True, exist_ok=True)
        a.parquet = a.only = None
    else:
        ctx, noctx = make_traces(a.rows, a.dir)
        traces = {"ctx": ctx, "noctx": noctx}
    if a.only:
        traces = {a.only: traces[a.only]}
    if a.parquet:
        for k, p in list(traces.items()):
            pq = p.with_suffix(".parquet")
            if not pq.exists():
                wall, peak, rc, _ = run_child(["convert", str(p), "-o", str(pq)])
                print(f"convert {p.name}: {wall:.1f} s, peak {peak:.0f} MB, exit {rc}", flush=True)
            traces[k + "-parquet"] = pq
    print(f"{'trace':<22} {'MB':>7} {'wall s':>7} {'CPU s':>6} {'peak MB':>8} {'exit':>4}  "
          "load average", flush=True)
    for name, p in traces.items():
        load = os.getloadavg()
        wall, peak, rc, cpu = run_child(["fit", str(p), "-o", str(a.dir / f"fit_{name}.json"),
                                         "--force", "--json", *a.extra])
        size = p.stat().st_size / 1e6
        print(f"{name:<22} {size:>7.0f} {wall:>7.1f} {cpu:>6.1f} {peak:>8.0f} {rc:>4}  "
              + " ".join(f"{v:.2f}" for v in load), flush=True)


if __name__ == "__main__":
    main()
