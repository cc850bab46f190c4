"""Embarrassingly parallel work on local cores or a Dask cluster: one place for the backend.

Problem
-------
Bootstrap resamples, cross-validation folds, per-group fits and simulator
sweeps are many independent tasks.  :func:`map_tasks` runs ``func(task)`` for
every task and returns the results in task order, through joblib:

``'loky'`` (default)
    local worker processes (``n_jobs=1``: in this process, no joblib).
``'dask'``
    a Dask distributed cluster through joblib's Dask backend: the scheduler
    at ``scheduler`` (e.g. ``'tcp://host:8786'``), or a ``LocalCluster`` of
    processes on this machine (one thread each) when none is given.

Results do not depend on the backend or the number of workers as long as a
task draws its random numbers only from a stream derived from its index
(:func:`task_seed`), never from worker state.  Tasks are consumed lazily, in
chunks, so a billion tasks never sit in memory at once (only their results
do, as they arrive).

Every task runs with one BLAS/OpenMP thread (:func:`one_blas_thread`): the
tasks are small and several run at once.

Examples
--------
>>> map_tasks(abs, [-1, 2, -3])
[1, 2, 3]
>>> task_seed(7, 2).generate_state(1) == np.random.SeedSequence(7).spawn(3)[2].generate_state(1)
array([ True])
"""
from __future__ import annotations

import contextlib
import itertools
import sys
from collections.abc import Callable, Iterable, Iterator
from numbers import Integral
from typing import Any

import numpy as np

from perfmodel.errors import InputError

__all__ = ["BACKENDS", "check_backend", "dask_client", "map_tasks", "one_blas_thread",
           "task_seed", "task_seeds"]

#: the parallel backends :func:`map_tasks` accepts
BACKENDS: tuple[str, ...] = ("loky", "dask")

#: seconds to wait for a Dask scheduler given by address
CONNECT_TIMEOUT_S = 30

#: tasks per chunk sent to a worker, at most (a chunk's results come back together)
MAX_CHUNK = 64


def one_blas_thread():
    """Limit BLAS/OpenMP to one thread: the per-task problems are small
    (e.g. n x p least squares, p <= 9) and on a loaded machine OpenBLAS's
    spinning threads make each fit several times slower (measured: 26 ms vs
    190-500 ms for one 5,000-step fit at load 4.5 on 2 cores)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        return contextlib.nullcontext()
    return threadpool_limits(limits=1)


def task_seed(seed: int, index: int) -> np.random.SeedSequence:
    """The random stream of task ``index`` of a run seeded with ``seed``.

    Equal to ``numpy.random.SeedSequence(seed).spawn(index + 1)[index]`` (the
    ``index``-th spawned child), computed without spawning the others, so a
    task's stream depends on its index only (not on the worker, the backend,
    or how many tasks there are).
    """
    if isinstance(seed, bool) or not isinstance(seed, Integral) or seed < 0:
        raise InputError(f"seed must be an integer >= 0, got {seed!r}")
    if isinstance(index, bool) or not isinstance(index, Integral) or index < 0:
        raise InputError(f"index must be an integer >= 0, got {index!r}")
    return np.random.SeedSequence(int(seed), spawn_key=(int(index),))


def task_seeds(seed: int, n: int, start: int = 0) -> Iterator[tuple[int, np.random.SeedSequence]]:
    """Lazily yield ``(index, task_seed(seed, index))`` for ``index`` in ``start .. n-1``."""
    return ((i, task_seed(seed, i)) for i in range(start, n))


def check_backend(backend: Any, scheduler: Any = None) -> str:
    """Check a backend name (and a scheduler address, which only ``'dask'`` takes)."""
    if backend not in BACKENDS:
        raise InputError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")
    if scheduler is not None:
        if backend != "dask":
            raise InputError(f"a scheduler address is only used by backend 'dask', got backend "
                             f"{backend!r}")
        if not isinstance(scheduler, str) or not scheduler.strip():
            raise InputError(f"scheduler must be an address like 'tcp://host:8786', got "
                             f"{scheduler!r}")
    return backend


def _run_chunk(func: Callable, chunk: list) -> list:
    with one_blas_thread():
        return [func(t) for t in chunk]


def _chunks(tasks: Iterable, size: int) -> Iterator[list]:
    it = iter(tasks)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


@contextlib.contextmanager
def dask_client(scheduler: str | None, n_workers: int | None):
    """A Dask client on ``scheduler``, or on a LocalCluster of ``n_workers`` processes with
    one thread each (closed after); the client is the default one inside the ``with``."""
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError as e:
        raise InputError(f"backend 'dask' needs dask[distributed] ({e}); "
                         "pip install 'dask[distributed]'") from None
    if scheduler is not None:
        try:
            client = Client(scheduler, timeout=CONNECT_TIMEOUT_S)
        except OSError as e:
            raise InputError(f"cannot reach the Dask scheduler {scheduler!r} within "
                             f"{CONNECT_TIMEOUT_S} s: {e}") from None
        with client:
            yield client
        return
    with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        yield client


def map_tasks(func: Callable[[Any], Any], tasks: Iterable, *, backend: str = "loky",
              n_jobs: int = 1, scheduler: str | None = None, total: int | None = None,
              chunk_size: int | None = None, progress: bool = False,
              desc: str | None = None) -> list:
    """Apply ``func`` to every task, in parallel; return the results in task order.

    Problem: one way to run independent tasks on local cores or on a cluster
    (module docstring), with results identical across backends.

    Parameters
    ----------
    func : callable
        ``func(task) -> result``; must be picklable for ``n_jobs != 1`` or
        ``'dask'`` (a module-level function or a ``functools.partial`` of one).
    tasks : iterable
        Consumed lazily, chunk by chunk (a generator of any length is fine).
    backend : {'loky', 'dask'}
    n_jobs : int, default 1
        joblib workers (``-1``: all cores; for ``'dask'``, ignored: every
        worker of the cluster).  ``n_jobs=1`` with ``'loky'`` runs in this
        process.
    scheduler : str, optional
        ``'dask'`` only: the scheduler address; ``None`` starts a LocalCluster
        (``n_jobs`` workers when ``n_jobs > 1``, else Dask's default) for the
        duration of the call.
    total : int, optional
        Number of tasks (for the progress bar and the chunk size); taken
        from ``len(tasks)`` when it has one.
    chunk_size : int, optional
        Tasks per chunk sent to a worker; default about ``total / (8 workers)``,
        at most :data:`MAX_CHUNK`.
    progress : bool, default False
        A tqdm progress bar on standard error; it stays off when standard
        error is not a terminal.
    desc : str, optional
        The bar's label.

    Returns
    -------
    list
        ``[func(t) for t in tasks]``.

    Raises
    ------
    InputError
        Bad arguments; backend ``'dask'`` without ``dask[distributed]``
        installed or with an unreachable scheduler.
    """
    if not callable(func):
        raise InputError(f"func must be callable, got {type(func).__name__}")
    check_backend(backend, scheduler)
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, Integral) or n_jobs == 0:
        raise InputError(f"n_jobs must be a non-zero integer (joblib convention), got {n_jobs!r}")
    if total is None and hasattr(tasks, "__len__"):
        total = len(tasks)
    if chunk_size is not None and (isinstance(chunk_size, bool) or
                                   not isinstance(chunk_size, Integral) or chunk_size < 1):
        raise InputError(f"chunk_size must be an integer >= 1, got {chunk_size!r}")
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc=desc, disable=None if progress else True, file=sys.stderr)
    out: list = []
    try:
        if backend == "loky" and n_jobs == 1:
            with one_blas_thread():
                for t in tasks:
                    out.append(func(t))
                    bar.update(1)
            return out
        if backend == "loky":
            ctx = contextlib.nullcontext()
        else:
            ctx = dask_client(scheduler, n_jobs if n_jobs > 1 else None)
        with ctx as client:
            _run_joblib(func, tasks, out, bar, backend=backend, n_jobs=n_jobs, client=client,
                        total=total, chunk_size=chunk_size)
        return out
    finally:
        bar.close()


def _run_joblib(func, tasks, out, bar, *, backend, n_jobs, client, total, chunk_size):
    import joblib

    if client is not None:
        workers = max(1, len(client.scheduler_info().get("workers", {})))
        config = joblib.parallel_config(backend="dask", n_jobs=-1)
    else:
        workers = max(1, joblib.effective_n_jobs(n_jobs))
        config = joblib.parallel_config(backend="loky", n_jobs=n_jobs)
    if chunk_size is None:
        chunk_size = MAX_CHUNK if total is None else min(MAX_CHUNK,
                                                         max(1, -(-total // (8 * workers))))
    with config:
        gen = joblib.Parallel(return_as="generator", batch_size=1,
                              pre_dispatch="2*n_jobs")(
            joblib.delayed(_run_chunk)(func, c) for c in _chunks(tasks, chunk_size))
        for res in gen:
            out.extend(res)
            bar.update(len(res))
