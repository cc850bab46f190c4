"""Out-of-sample validation of step-latency models: splits, regimes, scores.

Problem: an in-sample R^2 says little about a model meant for prediction,
extrapolation and capacity planning. Seed 003 (11.1) asks for time-series
cross-validation (expanding training window, fixed test window, mean error
over folds) and partitioned evaluation (decode-only, mixed, large prefill);
replicate steps of one configuration must not sit in both training and test
sets, and extrapolation must be tested on data beyond the training range.

Split generators return a list of ``(train_idx, test_idx)`` pairs of sorted
integer positions (``df.iloc``); :func:`cross_validate` runs any model with
``fit(df) -> self`` and ``predict(df) -> ndarray`` (the baselines of
:mod:`perfmodel.baselines`, the lead's model wrapper) over them and scores
each fold, overall and by regime with :func:`metrics`.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from perfmodel._checks import check_int_range
from perfmodel._checks import rows_text as _rows
from perfmodel.errors import InputError
from perfmodel.features import row_reduce
from perfmodel.trace import check_step_columns as _check_trace
from perfmodel.trace import parse_list_column

__all__ = [
    "REGIMES",
    "cross_validate",
    "default_groups",
    "extrapolation_split",
    "grouped_kfold",
    "metrics",
    "regime",
    "time_series_splits",
]

Split = tuple[np.ndarray, np.ndarray]

#: Regime labels, in the order tables list them.
REGIMES = ("decode-only", "mixed", "prefill-heavy")


def _int(v: Any, name: str, lo: int, hi: int | None = None) -> int:
    return check_int_range(f"`{name}`", v, lo, hi)


# ----------------------------------------------------------------------------
# splits
# ----------------------------------------------------------------------------
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

    Seed 003 (11.1): for cut points t, train on steps 1..t and test on the
    next ``test_size`` steps; report the mean error over folds. Here the
    ``n_splits`` cut points run evenly from ``min_train`` to
    ``n - gap - test_size``, so the first fold trains on ``min_train`` steps
    and the last test window ends at the last step (with ``n_splits=1``: one
    fold, trained on ``min_train`` steps). With the defaults the
    test windows are consecutive and do not overlap, and the splits equal
    scikit-learn's ``TimeSeriesSplit(n_splits, test_size=..., gap=...)``.
    When more cut points are asked for than fit without overlap, test windows
    overlap (the seed's algorithm steps t by 1).

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


def default_groups(df: pd.DataFrame, by: str = "auto") -> np.ndarray:
    """Group label of each step, for :func:`grouped_kfold`.

    Replicates of one configuration must fall on one side of a split, or
    cross-validation measures replicate noise instead of prediction error.

    Parameters
    ----------
    df : DataFrame
        A step trace.
    by : {'auto', 'config', 'bs', 'schedule'}
        'config': the ``config`` column (dataset group id). 'bs': the pair
        (batch_size, total_tokens). 'schedule': the whole per-request
        schedule, (``chunk_sizes``, ``context_lens``) as written. 'auto':
        'config' when the column exists, else 'bs'.

    Returns
    -------
    ndarray of str, shape (n,)
    """
    _check_trace(df, need_y=False)
    if by not in ("auto", "config", "bs", "schedule"):
        raise InputError(f"`by` must be 'auto', 'config', 'bs' or 'schedule', got {by!r}")
    if by == "auto":
        by = "config" if "config" in df.columns else "bs"
    if by == "config":
        if "config" not in df.columns:
            raise InputError("`df` has no `config` column; use by='bs' or 'schedule'")
        g = df["config"]
        if g.isna().any():
            raise InputError(f"column `config` is missing at {_rows(g.isna().to_numpy(), df.index)}")
        return g.astype(str).to_numpy()
    if by == "bs":
        return (df["batch_size"].astype("int64").astype(str) + "|"
                + df["total_tokens"].astype("int64").astype(str)).to_numpy()
    missing = [c for c in ("chunk_sizes", "context_lens") if c not in df.columns]
    if missing:
        raise InputError(f"by='schedule' needs column(s) {missing}")
    return (df["chunk_sizes"].astype(str) + "|" + df["context_lens"].astype(str)).to_numpy()


def grouped_kfold(groups: Any, k: int = 5, seed: int = 0) -> list[Split]:
    """K-fold splits in which no group is in both training and test set.

    Groups (configurations) are shuffled with ``seed`` and assigned, largest
    first, to the fold with the fewest rows so far, so folds hold whole groups
    and have near-equal sizes.

    Parameters
    ----------
    groups : array_like, shape (n,)
        Group label of each row (see :func:`default_groups`).
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
        raise InputError(f"`k` ({k}) exceeds the number of distinct groups ({uniq.size})")
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


def regime(df: pd.DataFrame, prefill_ratio: float = 32.0) -> pd.Series:
    """Label each step 'decode-only', 'mixed' or 'prefill-heavy'.

    MODEL.md asks for evaluation by regime (decode-only S ~ B, mixed, large
    prefill). Definitions, in this order:

    - 'decode-only': S == B, i.e. every request computes one token (since
      each chunk is >= 1 and the chunks sum to S). A one-token prefill chunk
      is indistinguishable from a decode token and counts as decode.
    - 'prefill-heavy': S / B >= ``prefill_ratio`` (default 32 tokens per
      request on average), or the step has no decode request: ``num_decode``
      == 0 when that column exists, else every chunk in ``chunk_sizes`` > 1
      when that column exists.
    - 'mixed': everything else.

    Parameters
    ----------
    df : DataFrame
        A step trace (``batch_size``, ``total_tokens``).
    prefill_ratio : float, default 32
        Threshold on S / B, > 1.

    Returns
    -------
    pandas.Series
        Categorical with categories :data:`REGIMES`, index of ``df``.
    """
    f = _check_trace(df, need_y=False)
    if not isinstance(prefill_ratio, (int, float)) or not prefill_ratio > 1:
        raise InputError(f"`prefill_ratio` must be a number > 1, got {prefill_ratio!r}")
    B, S = f["B"], f["S"]
    decode = S == B
    no_decode = np.zeros(len(df), bool)
    if "num_decode" in df.columns:
        nd = pd.to_numeric(df["num_decode"], errors="coerce").to_numpy(dtype=float)
        no_decode = nd == 0
    elif "chunk_sizes" in df.columns:
        col = parse_list_column(df["chunk_sizes"])
        smallest = row_reduce(col.flat.astype(float), col.counts, "min")
        no_decode = col.ok & (col.counts > 0) & (smallest > 1)
    heavy = ~decode & ((S / B >= prefill_ratio) | no_decode)
    lab = np.where(decode, REGIMES[0], np.where(heavy, REGIMES[2], REGIMES[1]))
    return pd.Series(pd.Categorical(lab, categories=list(REGIMES)), index=df.index,
                     name="regime")


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


# ----------------------------------------------------------------------------
# scores
# ----------------------------------------------------------------------------
def metrics(y: Any, yhat: Any) -> dict[str, float]:
    """R^2, RMSE, MAE and MAPE (percent) of predictions.

    R^2 = 1 - sum (y - yhat)^2 / sum (y - mean y)^2 (NaN when y is constant
    or n < 2, where scikit-learn returns 0 or 1 by convention);
    RMSE, MAE in the units of y (ms); MAPE = 100 mean |y - yhat| / |y|
    (y must be non-zero). Verified equal to scikit-learn's ``r2_score``,
    ``root_mean_squared_error``, ``mean_absolute_error`` and
    ``100 * mean_absolute_percentage_error`` (tests).

    Returns
    -------
    dict
        Keys ``'n'``, ``'R2'``, ``'RMSE'``, ``'MAE'``, ``'MAPE'``.
    """
    a = np.asarray(y, dtype=float).ravel()
    b = np.asarray(yhat, dtype=float).ravel()
    if a.size == 0:
        raise InputError("`y` is empty")
    if a.size != b.size:
        raise InputError(f"`y` has {a.size} values but `yhat` has {b.size}")
    for arr, nm in ((a, "y"), (b, "yhat")):
        bad = ~np.isfinite(arr)
        if bad.any():
            raise InputError(f"`{nm}` has non-finite values at {_rows(bad, range(arr.size))}")
    if (a == 0).any():
        raise InputError(f"`y` is zero at {_rows(a == 0, range(a.size))}: MAPE is undefined")
    r = a - b
    sst = np.sum((a - a.mean()) ** 2)
    return {
        "n": int(a.size),
        "R2": float(1.0 - np.sum(r**2) / sst) if a.size >= 2 and sst > 0 else float("nan"),
        "RMSE": float(np.sqrt(np.mean(r**2))),
        "MAE": float(np.mean(np.abs(r))),
        "MAPE": float(100.0 * np.mean(np.abs(r) / np.abs(a))),
    }


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


def cross_validate(
    df: pd.DataFrame,
    make_model: Callable[[], Any],
    splits: Sequence[Split],
    by_regime: bool = True,
    *,
    prefill_ratio: float = 32.0,
    errors: str = "raise",
) -> pd.DataFrame:
    """Fit a fresh model on each training set and score it on the test set.

    Parameters
    ----------
    df : DataFrame
        Step trace with ``duration_ms``; split indices are positions in it.
    make_model : callable
        ``make_model()`` returns an unfitted object with ``fit(df) -> self``
        and ``predict(df) -> ndarray`` (e.g. ``lambda: get_baseline('linear')``).
    splits : list of (train_idx, test_idx)
        From :func:`time_series_splits`, :func:`grouped_kfold`,
        :func:`extrapolation_split`, or any other source.
    by_regime : bool, default True
        Also score each regime (:func:`regime`) present in a test set.
    prefill_ratio : float, default 32
        Passed to :func:`regime`.
    errors : {'raise', 'record'}
        On an exception in ``fit``/``predict``: re-raise it, or record the
        fold with NaN scores and the message in ``error`` (never dropped).

    Returns
    -------
    DataFrame
        One row per (fold, regime) with columns ``model``, ``fold``,
        ``regime`` ('all' or a regime label), ``n_train``, ``n_test``, ``n``
        (scored rows), ``R2``, ``RMSE``, ``MAE``, ``MAPE``, ``error``. Then the
        summary rows: ``fold == 'mean'`` (mean of the fold scores, seed 003's
        "mean(error_t)"; ``n`` the total scored) and ``fold == 'pooled'``
        (scores of all out-of-fold predictions together; a row in several
        test windows counts each time).
    """
    data = _check_trace(df, need_y=True)
    if not callable(make_model):
        raise InputError(f"`make_model` must be a callable returning an unfitted model, "
                         f"got {type(make_model).__name__}")
    if errors not in ("raise", "record"):
        raise InputError(f"`errors` must be 'raise' or 'record', got {errors!r}")
    sp = _check_splits(splits, len(df))
    y = data["T"]
    labels = regime(df, prefill_ratio).to_numpy() if by_regime else None
    rows: list[dict] = []
    pooled_y: list[np.ndarray] = []
    pooled_p: list[np.ndarray] = []
    pooled_lab: list[np.ndarray] = []
    model_name = None
    nanm = {"R2": np.nan, "RMSE": np.nan, "MAE": np.nan, "MAPE": np.nan}
    for i, (tr, te) in enumerate(sp):
        model = make_model()
        model_name = model_name or str(getattr(model, "name", type(model).__name__))
        base = {"model": model_name, "fold": i, "n_train": int(tr.size), "n_test": int(te.size)}
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
            rows.append({**base, "regime": "all", "n": 0, **nanm,
                         "error": f"{type(exc).__name__}: {exc}"})
            continue
        m = metrics(y[te], pred)
        rows.append({**base, "regime": "all", **m, "error": ""})
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
    table = pd.DataFrame(rows)
    cols = ["model", "fold", "regime", "n_train", "n_test", "n", "R2", "RMSE", "MAE", "MAPE",
            "error"]
    table = table.reindex(columns=cols)
    summary = []
    ok = table[table["error"] == ""]
    for r in ("all",) + (REGIMES if labels is not None else ()):
        sub = ok[ok["regime"] == r]
        if sub.empty:
            continue
        summary.append({"model": model_name, "fold": "mean", "regime": r,
                        "n_train": np.nan, "n_test": np.nan, "n": int(sub["n"].sum()),
                        **{k: float(sub[k].mean()) for k in nanm}, "error": ""})
    if pooled_y:
        py, pp = np.concatenate(pooled_y), np.concatenate(pooled_p)
        summary.append({"model": model_name, "fold": "pooled", "regime": "all",
                        "n_train": np.nan, "n_test": np.nan, **metrics(py, pp), "error": ""})
        if labels is not None:
            pl = np.concatenate(pooled_lab)
            for r in REGIMES:
                sel = pl == r
                if sel.any():
                    summary.append({"model": model_name, "fold": "pooled", "regime": r,
                                    "n_train": np.nan, "n_test": np.nan,
                                    **metrics(py[sel], pp[sel]), "error": ""})
    out = pd.concat([table, pd.DataFrame(summary, columns=cols)], ignore_index=True)
    out["fold"] = out["fold"].astype(object)
    return out.astype({"n_train": "Int64", "n_test": "Int64", "n": "Int64"})
