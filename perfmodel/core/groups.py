"""Per-group fits: one model per deployment of a fleet, fitted in parallel.

Problem
-------
A trace set (:func:`perfmodel.data.trace_set.read_trace_set`) holds the steps
of many deployments, told apart by a column (``source``: one file each).
:func:`fit_groups` fits :func:`perfmodel.core.fit.fit_model` to each group
separately through :func:`perfmodel._parallel.map_tasks` (local cores or a
Dask cluster); each fit is seeded with the same ``seed``, so the fits do not
depend on the backend or the worker count.
"""
from __future__ import annotations

from functools import partial

import pandas as pd

from perfmodel._parallel import map_tasks
from perfmodel.core.fit import fit_model
from perfmodel.errors import FitError, InputError

__all__ = ["fit_groups"]


def _fit_one(model, options, item):
    name, df = item
    try:
        return name, fit_model(df, model, **options), None
    except (FitError, InputError) as e:
        return name, None, f"{type(e).__name__}: {e}"


def fit_groups(df, by: str = "source", model: str = "seed_id", *, n_jobs: int = 1,
               backend: str = "loky", scheduler: str | None = None, **options) -> dict:
    """Fit ``model`` to every group of ``df`` (rows with one value of column ``by``).

    Parameters
    ----------
    df : pandas.DataFrame
        Step traces of several groups (e.g. from ``read_trace_set``).
    by : str, default 'source'
        The group column.
    model : str
        A model of :mod:`perfmodel.core.model` (the same for every group).
    n_jobs, backend, scheduler
        :func:`perfmodel._parallel.map_tasks`.
    **options
        Passed to :func:`perfmodel.core.fit.fit_model` (``seed``, ``loss``, ...).

    Returns
    -------
    dict
        ``{group: FitResult}`` in group order, and under the key ``None`` a
        dict ``{group: reason}`` of the groups whose fit failed (empty when
        none did).

    Raises
    ------
    InputError
        ``df`` is not a DataFrame or lacks the column ``by``.
    """
    if not isinstance(df, pd.DataFrame):
        raise InputError(f"fit_groups takes a pandas DataFrame, got {type(df).__name__}")
    if by not in df.columns:
        raise InputError(f"fit_groups: no group column {by!r} (columns: {list(df.columns)[:12]})")
    groups = [(str(k), g.drop(columns=[by]).reset_index(drop=True))
              for k, g in df.groupby(by, sort=True)]
    res = map_tasks(partial(_fit_one, model, options), groups, n_jobs=n_jobs, backend=backend,
                    scheduler=scheduler)
    out: dict = {name: fit for name, fit, _ in res if fit is not None}
    out[None] = {name: why for name, _, why in res if why is not None}
    return out
