"""Regimes of steps and the scores of predictions (R^2, RMSE, MAE, MAPE).

Problem: docs/model.md (Evaluation) asks for held-out errors overall and by
regime (decode-only, mixed, large prefill). :func:`regime` labels each step
of a trace; :func:`metrics` scores predictions against measurements. Both
are used by :func:`perfmodel.stats.crossval.cross_validate`, the
comparison (:mod:`perfmodel.stats.compare`) and the interval study.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from perfmodel._checks import rows_text as _rows
from perfmodel.data.features import row_reduce
from perfmodel.data.trace import check_step_columns as _check_trace
from perfmodel.data.trace import parse_list_column
from perfmodel.errors import InputError

__all__ = ["REGIMES", "metrics", "regime", "robust_metrics"]

#: Regime labels, in the order tables list them.
REGIMES = ("decode-only", "mixed", "prefill-heavy")


def regime(df: pd.DataFrame, prefill_ratio: float = 32.0) -> pd.Series:
    """Label each step 'decode-only', 'mixed' or 'prefill-heavy'.

    Evaluation by regime (decode-only S ~ B, mixed, large prefill;
    docs/model.md, Evaluation). Definitions, in this order:

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
    code = np.where(decode, 0, np.where(heavy, 2, 1)).astype(np.int8)  # no text per step
    return pd.Series(pd.Categorical.from_codes(code, categories=list(REGIMES)), index=df.index,
                     name="regime")



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




def robust_metrics(y: Any, yhat: Any) -> dict[str, float]:
    """MdAPE (percent) and RMSLE of predictions: two scores beside the MAPE.

    MdAPE = 100 median |y - yhat| / |y| is not pulled by a few steps slowed
    by other processes; RMSLE = sqrt(mean (log yhat - log y)^2) weighs over-
    and under-prediction by the same factor alike and is the RMS of the
    residual that the log-scale fits minimise (natural log of the ratio, not
    scikit-learn's ``log1p`` variant, which depends on the unit of ``y``;
    NaN where some ``yhat`` or ``y`` is not positive). Verified against
    ``numpy.median`` of the absolute percentage errors and a direct
    computation (tests).
    """
    a = np.asarray(y, dtype=float).ravel()
    b = np.asarray(yhat, dtype=float).ravel()
    m = metrics(a, b)  # the same input checks
    ape = np.abs(a - b) / np.abs(a)
    pos = np.all(a > 0) and np.all(b > 0)
    return {
        "n": m["n"],
        "MdAPE": float(100.0 * np.median(ape)),
        "RMSLE": float(np.sqrt(np.mean(np.log(b / a) ** 2))) if pos else float("nan"),
    }
