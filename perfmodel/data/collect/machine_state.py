"""Per-step machine state, host description, and the contended-step rule.

Problem: on a shared host other processes can inflate a step's time several
fold (data/README.md, Contended steps). The collector therefore records, for each step, the
process CPU time spent during the step (``cpu_ms``, all threads), the number of
involuntary context switches (``involuntary_switches``, a delta) and the
1-minute load average (``loadavg``), and :func:`flag_contended` marks steps
that were probably slowed by other processes. Raw traces are never rewritten:
the flag is added to derived tables only.

Everything here uses the operating system (``time.process_time``,
``resource.getrusage``, ``os.getloadavg``), never the accelerator, so the same
recording works whatever device runs the model.
"""
from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from perfmodel.errors import InputError

try:  # POSIX only; on other systems switches are recorded as missing.
    import resource
except ImportError:  # pragma: no cover - Windows
    resource = None  # type: ignore[assignment]

__all__ = [
    "CONTENDED_DEFAULTS",
    "MachineSnapshot",
    "cpu_info",
    "flag_contended",
    "flag_contended_run",
    "snapshot",
    "thread_info",
]


@dataclass(frozen=True)
class MachineSnapshot:
    """Process CPU time (s), involuntary switches so far, wall clock (s)."""

    cpu_s: float
    involuntary_switches: int
    wall_s: float


def snapshot(thread: bool = False) -> MachineSnapshot:
    """Read the process's CPU time, involuntary context switches and a monotonic clock.

    With ``thread=True`` the CPU time and the switches are those of the
    calling thread only (``time.thread_time``, ``RUSAGE_THREAD`` on Linux):
    reading the whole process's sums over all its threads, which in a process
    with busy threads cost ~0.3 ms per read on this project's host, against
    microseconds for the thread (the step-log plugin reads per step).
    """
    nivcsw = -1
    who = getattr(resource, "RUSAGE_THREAD", None) if thread and resource is not None else None
    if resource is not None:
        nivcsw = int(resource.getrusage(resource.RUSAGE_SELF if who is None else who).ru_nivcsw)
    cpu = time.thread_time() if thread else time.process_time()
    return MachineSnapshot(cpu, nivcsw, time.perf_counter())


def loadavg_1min() -> float:
    """The 1-minute load average, or NaN where the system does not provide it."""
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):
        return float("nan")


def cpu_info() -> dict[str, Any]:
    """CPU model name, flags and core counts, from ``/proc/cpuinfo`` where available."""
    info: dict[str, Any] = {"model_name": platform.processor() or None, "flags": [],
                            "logical_cpus": os.cpu_count(), "machine": platform.machine()}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return info
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not info.get("model_name_set"):
            info["model_name"], info["model_name_set"] = value.strip(), True
        elif key in ("flags", "Features") and not info["flags"]:
            info["flags"] = sorted(value.split())
    info.pop("model_name_set", None)
    return info


def thread_info() -> dict[str, Any]:
    """CPUs this process may run on and the thread-related environment variables."""
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    env = {k: v for k, v in sorted(os.environ.items())
           if k.startswith(("OMP_", "MKL_", "KMP_", "GOMP_", "VLLM_CPU_"))}
    return {"cpu_count": os.cpu_count(), "affinity_cpus": affinity, "env": env}


CONTENDED_DEFAULTS: dict[str, float] = {
    "cpu_ratio_min": 0.8,
    "switch_factor": 3.0,
    "load_margin": 0.5,
}


def flag_contended(df: pd.DataFrame, *, threads: float | None = None,
                   cores: int | None = None, cpu_ratio_min: float = 0.8,
                   switch_rate_max: float | None = None, switch_factor: float = 3.0,
                   load_margin: float = 0.5) -> pd.DataFrame:
    """Return a copy of a collected trace with a boolean ``contended`` column.

    The rule (any of three, each on one step):

    1. **CPU share**: ``cpu_ms / step_ms < cpu_ratio_min * reference``. When the
       step's threads have the cores to themselves, process CPU time grows at
       about ``threads`` times wall time (waiting OpenMP threads spin); another
       process taking a core lowers the ratio. ``reference`` is ``threads``
       when given (the metadata's ``threads.torch_num_threads``), else the
       trace's 90th-percentile ratio (its quiet level). ``step_ms`` (the whole
       engine step, over which ``cpu_ms`` is measured) is used when present,
       else ``duration_ms``. On this 2-core host quiet steps gave ratios
       1.96-2.01 and steps beside another busy process about 1.0.
    2. **Preemption**: involuntary context switches per second of step above
       ``switch_rate_max`` when given, else above ``switch_factor`` times the
       median rate of the steps that pass rule 1 (the kernel took the cores
       away much more often than usual). The switch rate alone does not
       separate quiet from contended steps on a busy host (300-500/s in both
       here), hence the relative default.
    3. **Load**: the 1-minute load average above ``cores + load_margin``
       (someone besides the collector's threads was runnable). It lags by up
       to a minute, so it also flags the tail of a contended period.

    Parameters
    ----------
    df : DataFrame
        A trace with ``cpu_ms`` and ``step_ms`` or ``duration_ms``; the
        ``involuntary_switches`` and ``loadavg`` criteria apply when those
        columns are present. NaN values never flag a step.
    threads : float, optional
        Expected CPU seconds per wall second when uncontended.
    cores : int, optional
        Cores available to the host for the load rule; default ``os.cpu_count()``.
    cpu_ratio_min, switch_rate_max, switch_factor, load_margin : float
        Thresholds as above.

    Returns
    -------
    DataFrame
        A copy of ``df`` with ``contended`` (bool) added; ``df`` is unchanged.
    """
    if not isinstance(df, pd.DataFrame):
        raise InputError(f"argument 'df' must be a pandas DataFrame, got {type(df).__name__}")
    time_col = "step_ms" if "step_ms" in df.columns else "duration_ms"
    missing = [c for c in ("cpu_ms", time_col) if c not in df.columns]
    if missing:
        raise InputError(f"flag_contended needs column(s) {missing}; trace has "
                         f"{list(df.columns)}")
    if threads is not None and not (np.isfinite(threads) and threads > 0):
        raise InputError(f"argument 'threads' must be a positive number, got {threads!r}")
    if cores is None:
        cores = os.cpu_count() or 1
    if not (isinstance(cores, (int, np.integer)) and cores >= 1):
        raise InputError(f"argument 'cores' must be a positive integer, got {cores!r}")
    t = pd.to_numeric(df[time_col], errors="coerce").to_numpy(float)
    bad = np.flatnonzero(~(t > 0) & ~np.isnan(t))
    if bad.size:
        raise InputError(f"column {time_col!r} must be > 0; first offending rows "
                         f"{bad[:5].tolist()} ({bad.size} in all)")
    cpu = pd.to_numeric(df["cpu_ms"], errors="coerce").to_numpy(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = cpu / t
    finite = np.isfinite(ratio)
    reference = threads if threads is not None else (
        float(np.quantile(ratio[finite], 0.9)) if finite.any() else np.nan)
    flag = ratio < cpu_ratio_min * reference  # NaN compares False
    if "involuntary_switches" in df.columns:
        sw = pd.to_numeric(df["involuntary_switches"], errors="coerce").to_numpy(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            rate = np.where(sw >= 0, sw / (t / 1000.0), np.nan)
        limit = switch_rate_max
        if limit is None:
            base = rate[~flag & np.isfinite(rate)]
            limit = switch_factor * float(np.median(base)) if base.size else np.inf
        flag |= rate > limit
    if "loadavg" in df.columns:
        la = pd.to_numeric(df["loadavg"], errors="coerce").to_numpy(float)
        flag |= la > cores + load_margin
    out = df.copy()
    out["contended"] = flag.astype(bool)
    return out


def flag_contended_run(df: pd.DataFrame, meta: dict | None) -> pd.DataFrame:
    """:func:`flag_contended` of a collected run with the run's own threads and cores.

    Problem: the rule's references are the collecting host's (threads per step
    for rule 1, cores for rule 3), and a trace is often read on another
    machine; ``flag_contended``'s default for ``cores`` is the machine reading
    it.  This reads both from the run's metadata (``<trace>.meta.json``, as
    :func:`perfmodel.data.collect` writes it: ``threads.torch_num_threads``
    and ``threads.cpu_count``), so every user of the rule flags the same steps.

    Parameters
    ----------
    df : DataFrame
        A collected trace (see :func:`flag_contended`).
    meta : dict or None
        The run's parsed metadata; None, or a field missing, falls back to
        :func:`flag_contended`'s defaults (the trace's quiet CPU share; this
        machine's cores).

    Returns
    -------
    DataFrame
        A copy of ``df`` with ``contended`` (bool) added.
    """
    if meta is not None and not isinstance(meta, dict):
        raise InputError(f"argument 'meta' must be the run's metadata (a dict) or None, "
                         f"got {type(meta).__name__}")
    threads = (meta or {}).get("threads") or {}
    cores = threads.get("cpu_count")
    return flag_contended(df, threads=threads.get("torch_num_threads"),
                          cores=int(cores) if cores else None)
