"""The cross-validation loop: fit a fresh model per fold, score it overall and by regime.

Problem: docs/model.md (Evaluation) reports the mean error over folds and
the error by regime. :func:`cross_validate` runs any model with
``fit(df) -> self`` and ``predict(df) -> ndarray`` (the baselines of
:mod:`perfmodel.stats.baselines`, the model family's wrapper) over the
splits of the fold engine (:func:`perfmodel.stats.folds.make_folds`) or
given splits, and scores each fold, overall and by regime
(:func:`perfmodel.stats.scores.regime`, :func:`perfmodel.stats.scores.metrics`),
then the mean over folds and the pooled out-of-fold predictions.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from perfmodel._parallel import map_tasks
from perfmodel.data.trace import check_step_columns as _check_trace
from perfmodel.errors import InputError
from perfmodel.stats.folds import make_folds
from perfmodel.stats.scores import REGIMES, metrics, regime
from perfmodel.stats.splits import Split

__all__ = ["cross_validate"]


def _check_splits(splits: Any, n: int) -> list[Split]:
    if isinstance(splits, tuple) and len(splits) == 2 and np.ndim(splits[0]) == 1:
        splits = [splits]
    try:
        out = [(np.asarray(tr, dtype=np.int64), np.asarray(te, dtype=np.int64))
               for tr, te in splits]
    except (TypeError, ValueError):
        raise InputError("`splits` must be a list of (train_idx, test_idx) integer arrays") \
            from None
    if not out:
        raise InputError("`splits` is empty")
    for i, (tr, te) in enumerate(out):
        if tr.size == 0 or te.size == 0:
            raise InputError(f"split {i} has an empty {'train' if tr.size == 0 else 'test'} set")
        for a, nm in ((tr, "train"), (te, "test")):
            if a.min() < 0 or a.max() >= n:
                raise InputError(f"split {i}: {nm} indices outside [0, {n - 1}]")
    return out


def _fold_task(df: pd.DataFrame, make_model: Callable[[], Any], errors: str, item):
    """One fold of :func:`cross_validate` -> ``(model name, predictions or None, error or None)``."""
    _, (tr, te) = item
    model = make_model()
    name = str(getattr(model, "name", type(model).__name__))
    try:
        fitted = model.fit(df.iloc[tr])
        fitted = model if fitted is None else fitted
        pred = np.asarray(fitted.predict(df.iloc[te]), dtype=float).ravel()
        if pred.size != te.size:
            raise InputError(f"predict returned {pred.size} values for {te.size} rows")
        if not np.isfinite(pred).all():
            raise InputError(f"predict returned {int((~np.isfinite(pred)).sum())} "
                             "non-finite values")
    except Exception as exc:
        if errors == "raise":
            raise
        return name, None, f"{type(exc).__name__}: {exc}"
    return name, pred, None


def cross_validate(
    df: pd.DataFrame,
    make_model: Callable[[], Any],
    splits: Sequence[Split] | str = "grouped",
    by_regime: bool = True,
    *,
    k: int = 5,
    seed: int = 0,
    prefill_ratio: float = 32.0,
    errors: str = "raise",
    n_jobs: int = 1,
    backend: str = "loky",
    scheduler: str | None = None,
) -> pd.DataFrame:
    """Fit a fresh model on each training set and score it on the test set.

    Parameters
    ----------
    df : DataFrame
        Step trace with ``duration_ms``; split indices are positions in it.
    make_model : callable
        ``make_model()`` returns an unfitted object with ``fit(df) -> self``
        and ``predict(df) -> ndarray`` (e.g. ``lambda: get_baseline('linear')``).
    splits : str or list of (train_idx, test_idx), default 'grouped'
        A scheme of :func:`make_folds` (run with ``k`` and ``seed`` and its
        defaults; call :func:`make_folds` for other options), or the splits
        themselves.
    by_regime : bool, default True
        Also score each regime (:func:`regime`) present in a test set.
    k, seed : int
        Passed to :func:`make_folds` when ``splits`` is a scheme name.
    prefill_ratio : float, default 32
        Passed to :func:`regime`.
    errors : {'raise', 'record'}
        On an exception in ``fit``/``predict``: re-raise it, or record the
        fold with NaN scores and the message in ``error`` (never dropped).
    n_jobs, backend, scheduler
        The folds are fitted in parallel by :func:`perfmodel._parallel.map_tasks`
        (``'loky'`` local cores or ``'dask'``); the scores do not depend on them.

    Returns
    -------
    DataFrame
        One row per (fold, regime) with columns ``model``, ``fold``,
        ``regime`` ('all' or a regime label), ``n_train``, ``n_test``, ``n``
        (scored rows), ``R2``, ``RMSE``, ``MAE``, ``MAPE``, ``error``. Then the
        summary rows: ``fold == 'mean'`` (mean of the fold scores: the
        mean error over folds; ``n`` the total scored) and ``fold == 'pooled'``
        (scores of all out-of-fold predictions together; a row in several
        test windows counts each time). ``out.attrs['predictions']`` holds
        the out-of-fold prediction of each row of ``df`` (ndarray (n,),
        NaN where no successful fold tested the row; a row in several test
        windows keeps the last one), for paired comparisons of two models on
        the same held-out steps
        (:func:`perfmodel.stats.protocol.paired_difference`); verified equal
        to a direct fit-and-predict loop over the splits (tests).
    """
    data = _check_trace(df, need_y=True)
    if not callable(make_model):
        raise InputError(f"`make_model` must be a callable returning an unfitted model, "
                         f"got {type(make_model).__name__}")
    if errors not in ("raise", "record"):
        raise InputError(f"`errors` must be 'raise' or 'record', got {errors!r}")
    if isinstance(splits, str):
        splits = make_folds(df, splits, k, seed)
    sp = _check_splits(splits, len(df))
    labels = regime(df, prefill_ratio).to_numpy() if by_regime else None
    folds = map_tasks(partial(_fold_task, df, make_model, errors), list(enumerate(sp)),
                      backend=backend, n_jobs=n_jobs, scheduler=scheduler)
    rows, model_name, pooled = _fold_rows(sp, folds, data["T"], labels)
    table = pd.DataFrame(rows).reindex(columns=_COLUMNS)
    summary = _summary_rows(table, model_name, pooled, labels is not None)
    out = pd.concat([table, pd.DataFrame(summary, columns=_COLUMNS)], ignore_index=True)
    out["fold"] = out["fold"].astype(object)
    out = out.astype({"n_train": "Int64", "n_test": "Int64", "n": "Int64"})
    oof = np.full(len(df), np.nan)
    for (_, te), (_, pred, _) in zip(sp, folds, strict=True):
        if pred is not None:
            oof[te] = pred
    out.attrs["predictions"] = oof
    return out


#: columns of the table of :func:`cross_validate`
_COLUMNS = ["model", "fold", "regime", "n_train", "n_test", "n", "R2", "RMSE", "MAE", "MAPE",
            "error"]
#: the scores of :func:`perfmodel.stats.scores.metrics` (NaN for a failed fold)
_NAN_SCORES = {"R2": np.nan, "RMSE": np.nan, "MAE": np.nan, "MAPE": np.nan}


def _fold_rows(sp: list[Split], folds: list, y: np.ndarray, labels: np.ndarray | None):
    """Rows of each fold's scores -> ``(rows, model name, (y, predictions, labels) pooled)``.

    One row per fold ('all') and, with ``labels``, one per regime present in
    its test set; a failed fold gets NaN scores and its message.
    """
    rows: list[dict] = []
    pooled_y: list[np.ndarray] = []
    pooled_p: list[np.ndarray] = []
    pooled_lab: list[np.ndarray] = []
    model_name = None
    for (i, (tr, te)), (name, pred, err) in zip(enumerate(sp), folds, strict=True):
        model_name = model_name or name
        base = {"model": model_name, "fold": i, "n_train": int(tr.size), "n_test": int(te.size)}
        if err is not None:
            rows.append({**base, "regime": "all", "n": 0, **_NAN_SCORES, "error": err})
            continue
        rows.append({**base, "regime": "all", **metrics(y[te], pred), "error": ""})
        pooled_y.append(y[te])
        pooled_p.append(pred)
        if labels is not None:
            lt = labels[te]
            pooled_lab.append(lt)
            for r in REGIMES:
                sel = lt == r
                if sel.any():
                    rows.append({**base, "regime": r, **metrics(y[te][sel], pred[sel]),
                                 "error": ""})
    return rows, model_name, (pooled_y, pooled_p, pooled_lab)


def _summary_rows(table: pd.DataFrame, model_name: str | None, pooled, by_regime: bool):
    """The 'mean' rows (mean of the fold scores) and 'pooled' rows (all out-of-fold predictions)."""
    pooled_y, pooled_p, pooled_lab = pooled
    summary = []
    ok = table[table["error"] == ""]
    for r in ("all",) + (REGIMES if by_regime else ()):
        sub = ok[ok["regime"] == r]
        if sub.empty:
            continue
        summary.append({"model": model_name, "fold": "mean", "regime": r,
                        "n_train": np.nan, "n_test": np.nan, "n": int(sub["n"].sum()),
                        **{k: float(sub[k].mean()) for k in _NAN_SCORES}, "error": ""})
    if not pooled_y:
        return summary
    py, pp = np.concatenate(pooled_y), np.concatenate(pooled_p)
    summary.append({"model": model_name, "fold": "pooled", "regime": "all",
                    "n_train": np.nan, "n_test": np.nan, **metrics(py, pp), "error": ""})
    if by_regime:
        pl = np.concatenate(pooled_lab)
        for r in REGIMES:
            sel = pl == r
            if sel.any():
                summary.append({"model": model_name, "fold": "pooled", "regime": r,
                                "n_train": np.nan, "n_test": np.nan,
                                **metrics(py[sel], pp[sel]), "error": ""})
    return summary
