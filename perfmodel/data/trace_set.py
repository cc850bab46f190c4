"""A set of traces (one Parquet file per deployment), read as one DataFrame for per-group fits.

Problem
-------
A fleet writes one trace per deployment (model, GPU, engine settings).
:func:`read_trace_set` reads every Parquet file of a folder or glob pattern,
validates each with :func:`perfmodel.data.trace.read_trace` (typed reader,
``lists='arrow'``), and stacks them with a ``source`` column naming the file
(its stem), the group for per-group fits
(:func:`perfmodel.core.groups.fit_groups`).  With ``backend='dask'`` the
files are read as the partitions of a Dask DataFrame (``dask.dataframe.from_map``,
one partition per file) on a Dask cluster (a scheduler address or a
LocalCluster), so the reading runs where the workers are; the result is the
same frame as with ``'loky'`` (tested in ``tests/data/test_trace_set.py``).
"""
from __future__ import annotations

import glob
from pathlib import Path

import pandas as pd

from perfmodel._parallel import check_backend, dask_client
from perfmodel.data.trace import read_trace
from perfmodel.errors import InputError

__all__ = ["read_trace_set", "trace_files"]

_PARQUET = (".parquet", ".pq")


def trace_files(source) -> list[Path]:
    """The Parquet files of a folder (``*.parquet``, ``*.pq``) or a glob pattern, sorted."""
    if not isinstance(source, (str, Path)):
        raise InputError(f"source must be a folder or a glob pattern, got {type(source).__name__}")
    p = Path(source)
    if p.is_dir():
        files = [f for f in p.iterdir() if f.suffix.lower() in _PARQUET and f.is_file()]
    else:
        files = [Path(f) for f in glob.glob(str(source)) if Path(f).is_file()]
        if any(f.suffix.lower() not in _PARQUET for f in files):
            bad = [str(f) for f in files if f.suffix.lower() not in _PARQUET][:3]
            raise InputError(f"source {str(source)!r} matches files that are not Parquet: {bad} "
                             "(convert them with `perfmodel convert`)")
    if not files:
        raise InputError(f"source {str(source)!r}: no Parquet trace files (*.parquet, *.pq)")
    stems = [f.stem for f in files]
    if len(set(stems)) != len(stems):
        raise InputError(f"source {str(source)!r}: two files share a name stem; each names a "
                         "group and must be unique")
    return sorted(files)


def _read_one(path: str) -> pd.DataFrame:
    df = read_trace(path, lists="arrow")
    df.insert(0, "source", Path(path).stem)
    df.attrs = {}
    return df


def read_trace_set(source, *, backend: str = "loky", scheduler: str | None = None,
                   n_workers: int | None = None) -> pd.DataFrame:
    """Read and validate every Parquet trace of ``source``, stacked with a ``source`` column.

    Parameters
    ----------
    source : str or path
        A folder (its ``*.parquet``/``*.pq`` files) or a glob pattern.
    backend : {'loky', 'dask'}
        ``'loky'``: read in this process, file by file.  ``'dask'``: through
        Dask DataFrame on a Dask cluster (``scheduler``, or a LocalCluster of
        ``n_workers`` processes for the call).
    scheduler : str, optional
        ``'dask'`` only: the scheduler address, e.g. ``'tcp://host:8786'``.
    n_workers : int, optional
        ``'dask'`` without a scheduler: LocalCluster workers (Dask's default).

    Returns
    -------
    pandas.DataFrame
        The files in name order, each validated, ``source`` first; the index
        runs 0..n-1.  ``attrs['files']`` lists the files read.

    Raises
    ------
    InputError
        No Parquet files, a file that is not a valid trace (named), bad backend.
    """
    check_backend(backend, scheduler)
    files = [str(f) for f in trace_files(source)]
    if backend == "loky":
        parts = [_read_one(f) for f in files]
        out = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    else:
        import dask.dataframe as dd

        with dask_client(scheduler, n_workers):
            ddf = dd.from_map(_read_one, files, meta=_read_one(files[0]).iloc[:0])
            out = ddf.compute().reset_index(drop=True)
    out.attrs = {"files": files}
    return out
