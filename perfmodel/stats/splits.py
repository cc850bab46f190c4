"""Building blocks of the fold engine: k-fold over labels, time-series windows, a value cut.

Problem: the splits of :func:`perfmodel.stats.folds.make_folds` (the one fold
engine) are made of three simple splitters, each usable on its own on
labels or positions:

- :func:`grouped_kfold` -- k-fold in which no group is on both sides;
- :func:`time_series_splits` -- expanding training window, fixed test
  window (docs/model.md, Evaluation);
- :func:`extrapolation_split` -- train below a quantile of a column, test
  above it.

Each returns a list of ``(train_idx, test_idx)`` pairs of sorted integer
positions (``df.iloc``).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from perfmodel._checks import check_int_range
from perfmodel._checks import rows_text as _rows
from perfmodel.data.trace import check_step_columns as _check_trace
from perfmodel.errors import InputError

__all__ = ["Split", "extrapolation_split", "grouped_kfold", "time_series_splits"]

Split = tuple[np.ndarray, np.ndarray]

def _int(v: Any, name: str, lo: int, hi: int | None = None) -> int:
    return check_int_range(f"`{name}`", v, lo, hi)



def time_series_splits(
    n: int,
    n_splits: int = 5,
    test_size: int | None = None,
    min_train: int | None = None,
    *,
    order: Any = None,
    gap: int = 0,
) -> list[Split]:
    """Expanding-window, fixed-test-window splits for a time-ordered trace.

    docs/model.md, Evaluation: for cut points t, train on steps 1..t and test on the
    next ``test_size`` steps; report the mean error over folds. Here the
    ``n_splits`` cut points run evenly from ``min_train`` to
    ``n - gap - test_size``, so the first fold trains on ``min_train`` steps
    and the last test window ends at the last step (with ``n_splits=1``: one
    fold, trained on ``min_train`` steps). With the defaults the
    test windows are consecutive and do not overlap, and the splits equal
    scikit-learn's ``TimeSeriesSplit(n_splits, test_size=..., gap=...)``.
    When more cut points are asked for than fit without overlap, test windows
    overlap (``n_splits = n - gap - test_size - min_train + 1`` steps t by 1).

    Parameters
    ----------
    n : int
        Number of steps.
    n_splits : int, default 5
        Number of folds, >= 1.
    test_size : int, optional
        Steps per test window; default ``(n - min_train - gap) // n_splits``,
        or ``n // (n_splits + 1)`` when ``min_train`` is also None
        (scikit-learn's default, which ignores ``gap``).
    min_train : int, optional
        Training steps of the first fold; default ``n - gap - n_splits*test_size``.
    order : array_like (n,), optional
        Time of each row (step or timestamp) when rows are not in time order:
        the splits are then made on rows sorted by it (stably) and returned as
        positions of the original rows.
    gap : int, default 0
        Steps skipped between training and test window (to keep short-range
        correlated neighbours out of the test).

    Returns
    -------
    list of (train_idx, test_idx)
        Positional indices; every train index precedes every test index in
        time, and training windows grow.
    """
    n = _int(n, "n", 2)
    n_splits = _int(n_splits, "n_splits", 1)
    gap = _int(gap, "gap", 0)
    test_size, min_train, last = _windows(n, n_splits, test_size, min_train, gap)
    if order is None:
        perm = np.arange(n)
    else:
        t = np.asarray(order, dtype=float)
        if t.shape != (n,) or not np.isfinite(t).all():
            raise InputError(f"`order` must be {n} finite numbers, got shape {t.shape}")
        perm = np.argsort(t, kind="stable")
    if n_splits == 1:
        cuts = [min_train]
    else:
        cuts = [min_train + round(k * (last - min_train) / (n_splits - 1))
                for k in range(n_splits)]
    out = []
    for c in cuts:
        out.append((np.sort(perm[:c]), np.sort(perm[c + gap:c + gap + test_size])))
    return out


def _windows(n: int, n_splits: int, test_size: Any, min_train: Any,
             gap: int) -> tuple[int, int, int]:
    """``(test_size, min_train, last cut point)`` of :func:`time_series_splits`, checked."""
    if test_size is None:
        if min_train is None:
            test_size = n // (n_splits + 1)
        else:
            test_size = (n - _int(min_train, "min_train", 1) - gap) // n_splits
        if test_size < 1:
            raise InputError(f"n={n} is too short for {n_splits} splits (gap {gap})")
    test_size = _int(test_size, "test_size", 1)
    if min_train is None:
        min_train = n - gap - n_splits * test_size
        if min_train < 1:
            raise InputError(
                f"n={n} is too short for {n_splits} test windows of {test_size} (gap {gap}); "
                "lower n_splits or test_size, or give min_train (windows then overlap)")
    min_train = _int(min_train, "min_train", 1)
    last = n - gap - test_size  # last cut point
    if last < min_train:
        raise InputError(
            f"min_train ({min_train}) + gap ({gap}) + test_size ({test_size}) exceeds n ({n})")
    if n_splits > last - min_train + 1:
        raise InputError(
            f"`n_splits` ({n_splits}) exceeds the {last - min_train + 1} distinct cut points "
            f"between min_train ({min_train}) and n - gap - test_size ({last})")
    return test_size, min_train, last


def grouped_kfold(groups: Any, k: int = 5, seed: int = 0) -> list[Split]:
    """K-fold splits in which no group is in both training and test set.

    Groups (configurations) are shuffled with ``seed`` and assigned, largest
    first, to the fold with the fewest rows so far, so folds hold whole groups
    and have near-equal sizes.

    Parameters
    ----------
    groups : array_like, shape (n,)
        Group label of each row (see :func:`fold_groups`).
    k : int, default 5
        Number of folds, 2 <= k <= number of distinct groups.
    seed : int, default 0
        Seed of the shuffle (ties in size are broken at random).

    Returns
    -------
    list of (train_idx, test_idx)
        Each row is in exactly one test set; train is the complement.
    """
    g = np.asarray(groups)
    if g.ndim != 1 or g.size == 0:
        raise InputError(f"`groups` must be a non-empty 1-D array, got shape {g.shape}")
    isna = pd.isna(g)
    if np.any(isna):
        raise InputError(f"`groups` has missing labels at {_rows(np.asarray(isna), range(g.size))}")
    uniq, inv, counts = np.unique(g, return_inverse=True, return_counts=True)
    k = _int(k, "k", 2)
    if k > uniq.size:
        raise InputError(f"`k` ({k}) exceeds the number of distinct groups ({uniq.size}): a fold "
                         "holds whole groups (a configuration, an identical schedule or a time "
                         f"block), so give k <= {uniq.size} (-k on the command line) or more steps")
    rng = np.random.default_rng(seed)
    perm = rng.permutation(uniq.size)
    order = perm[np.argsort(-counts[perm], kind="stable")]
    load = np.zeros(k, dtype=np.int64)
    fold_of = np.empty(uniq.size, dtype=np.int64)
    for gi in order:
        f = int(np.argmin(load))
        fold_of[gi] = f
        load[f] += counts[gi]
    row_fold = fold_of[inv]
    idx = np.arange(g.size)
    return [(idx[row_fold != f], idx[row_fold == f]) for f in range(k)]



def extrapolation_split(df: pd.DataFrame, column: str = "total_tokens",
                        quantile: float = 0.8) -> list[Split]:
    """Train below a quantile of a column, test above it.

    Problem: capacity planning asks for T at larger S or B than measured; a
    model that only interpolates (polynomial, forest) fails here.

    Rows with ``column`` <= the ``quantile``-quantile form the training set,
    rows above it the test set.

    Parameters
    ----------
    df : DataFrame
        A step trace.
    column : str, default 'total_tokens'
        A numeric column, e.g. 'total_tokens' or 'batch_size'.
    quantile : float, default 0.8
        In (0, 1).

    Returns
    -------
    list with one (train_idx, test_idx)
        A list, so it can be passed as ``splits`` to :func:`cross_validate`.
    """
    _check_trace(df, need_y=False)
    if not isinstance(column, str) or column not in df.columns:
        raise InputError(f"`column` {column!r} is not a column of `df`")
    if not isinstance(quantile, (int, float)) or not 0 < quantile < 1:
        raise InputError(f"`quantile` must be in (0, 1), got {quantile!r}")
    x = pd.to_numeric(df[column], errors="coerce").to_numpy(dtype=float)
    if not np.isfinite(x).all():
        raise InputError(f"column `{column}` has missing values at "
                         f"{_rows(~np.isfinite(x), df.index)}")
    thr = np.quantile(x, quantile)
    train = np.flatnonzero(x <= thr)
    test = np.flatnonzero(x > thr)
    if test.size == 0:
        raise InputError(f"no row of `{column}` lies above its {quantile} quantile ({thr:g}): "
                         "nothing to extrapolate to")
    return [(train, test)]


