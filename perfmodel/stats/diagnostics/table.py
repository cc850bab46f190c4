"""All residual diagnostics as one table (:func:`residual_table`).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from perfmodel.errors import InputError
from perfmodel.stats.diagnostics._common import (
    SHAPIRO_MAX_N,
    _resid,
    _vector,
)
from perfmodel.stats.diagnostics.heteroscedasticity import breusch_pagan, white_test
from perfmodel.stats.diagnostics.normality import anderson_darling, jarque_bera, shapiro_wilk
from perfmodel.stats.diagnostics.time_order import durbin_watson, ljung_box, trend_test

_NULL = {
    "Shapiro-Wilk": "residuals are normal",
    "Jarque-Bera": "skewness 0, kurtosis 3 (normal)",
    "Anderson-Darling": "residuals are normal",
    "Breusch-Pagan": "variance does not depend on B, S",
    "Breusch-Pagan (F)": "variance does not depend on B, S",
    "White": "variance does not depend on B, S, squares, product",
    "Durbin-Watson": "no lag-1 autocorrelation (time order)",
    "Ljung-Box": "no autocorrelation up to the lag (time order)",
    "Trend": "no linear drift against time order",
}


def _unpack(resid: Any, B: Any, S: Any, order: Any):
    """Accept arrays, a features mapping, or a FitResult-like object."""
    if hasattr(resid, "residuals") and not isinstance(resid, (np.ndarray, pd.Series, list)):
        obj = resid
        resid = obj.residuals
        feats = None
        for attr in ("features", "feats"):
            cand = getattr(obj, attr, None)
            if isinstance(cand, Mapping):
                feats = cand
                break
        if feats is not None:
            if B is None:
                B = feats.get("B")
            if S is None:
                S = feats.get("S")
            if order is None:
                order = feats.get("order")
    if isinstance(B, Mapping):
        feats = B
        B = feats.get("B")
        if S is None:
            S = feats.get("S")
        if order is None:
            order = feats.get("order")
    return resid, B, S, order


def residual_table(
    resid: Any,
    B: Any = None,
    S: Any = None,
    order: Any = None,
    *,
    alpha: float = 0.05,
    lags: int | None = None,
    white: bool = False,
    max_n: int = SHAPIRO_MAX_N,
    seed: int = 0,
) -> pd.DataFrame:
    """All residual tests of one fit as a table, one row per test.

    Problem: one call that answers "are these residuals what the fit assumes?"
    for a report or the ``perfmodel diagnose`` command.

    Parameters
    ----------
    resid : array_like (n,), or an object with ``.residuals``
        Residuals ``T - T_hat``. A FitResult-like object is accepted: its
        ``.residuals`` are used, and ``B``/``S``/``order`` default to the keys
        ``'B'``, ``'S'``, ``'order'`` of its ``.features`` (or ``.feats``)
        mapping when it has one.
    B, S : array_like (n,), optional
        Batch size and total tokens per step, the Breusch-Pagan (and White)
        regressors. ``B`` may also be a features mapping with keys ``'B'``
        and ``'S'`` (``perfmodel.data.trace.step_features``). Without them the
        heteroscedasticity rows are skipped.
    order : array_like (n,), optional
        Time of each step (step index or timestamp). Residuals are sorted by
        it (stably) for Durbin-Watson and Ljung-Box, and the trend is fitted
        against it. Default: the residuals are taken to be in time order.
    alpha : float, default 0.05
        Level for the ``verdict`` column.
    lags : int, optional
        Ljung-Box lag (see :func:`ljung_box`).
    white : bool, default False
        Add White's test.
    max_n, seed : int
        Shapiro-Wilk subsample size and seed (see :func:`shapiro_wilk`).

    Returns
    -------
    pandas.DataFrame
        Columns ``test``, ``statistic``, ``pvalue``, ``df``, ``null``
        (the null hypothesis), ``verdict`` (``'reject'`` when
        ``pvalue < alpha``, else ``'not rejected'``; ``'n/a'`` when the test
        could not run), ``note`` (e.g. the subsample, the DW approximation,
        why a test was skipped). ``attrs['alpha']`` and ``attrs['n']`` are set.

    Notes
    -----
    Each row is the function of this module of the same name, so it is
    verified as they are. A test that cannot run on these data (e.g.
    Breusch-Pagan when B and S are both constant) gives a row with NaN and
    the reason, never a silent omission.
    """
    resid, B, S, order = _unpack(resid, B, S, order)
    e = _resid(resid, min_n=8)
    n = e.size
    if not (isinstance(alpha, (int, float)) and 0 < alpha < 1):
        raise InputError(f"`alpha` must be in (0, 1), got {alpha!r}")
    if (B is None) != (S is None):
        raise InputError("give both `B` and `S` (or neither)")
    exog = None
    if B is not None:
        exog = {"B": _vector(B, "B", n=n), "S": _vector(S, "S", n=n)}
    if order is not None:
        t_ = _vector(order, "order", n=n)
        perm = np.argsort(t_, kind="stable")
        e_time, t_sorted, time_note = e[perm], t_[perm], "sorted by `order`"
    else:
        e_time, t_sorted, time_note = e, None, "row order taken as time order"
    rows = [*_normality_rows(alpha, e, max_n, seed), *_variance_rows(alpha, e, exog, white),
            *_time_rows(alpha, e_time, t_sorted, time_note, lags)]
    out = pd.DataFrame(rows, columns=["test", "statistic", "pvalue", "df", "null", "verdict",
                                      "note"])
    out.attrs["alpha"] = float(alpha)
    out.attrs["n"] = n
    return out


def _not_run(test: str, note: str) -> dict:
    """The row of a test that could not run: NaN and the reason."""
    return {"test": test, "statistic": np.nan, "pvalue": np.nan, "df": np.nan,
            "null": _NULL[test], "verdict": "n/a", "note": note}


def _row(alpha, test, fn, stat, p, df=np.nan, note="") -> dict:
    """One row: run ``fn()`` and read its statistic, p-value, df and note from the result."""
    try:
        r = fn()
    except InputError as exc:
        return _not_run(test, str(exc))
    pv = float(p(r))
    return {
        "test": test, "statistic": float(stat(r)), "pvalue": pv,
        "df": float(df(r)) if callable(df) else df, "null": _NULL[test],
        "verdict": "reject" if pv < alpha else "not rejected",
        "note": note(r) if callable(note) else note,
    }


def _normality_rows(alpha, e, max_n, seed) -> list[dict]:
    """Shapiro-Wilk, Jarque-Bera and Anderson-Darling."""
    return [
        _row(alpha, "Shapiro-Wilk", lambda: shapiro_wilk(e, max_n=max_n, seed=seed),
             lambda r: r.statistic, lambda r: r.pvalue,
             note=lambda r: (f"seeded subsample of {r.n_used} of {r.n} (seed {seed})"
                             if r.subsampled else "")),
        _row(alpha, "Jarque-Bera", lambda: jarque_bera(e), lambda r: r.statistic,
             lambda r: r.pvalue, df=2.0,
             note=lambda r: f"skew {r.skew:.3g}, kurtosis {r.kurtosis:.3g}"),
        _row(alpha, "Anderson-Darling", lambda: anderson_darling(e), lambda r: r.statistic,
             lambda r: r.pvalue, note="p-value: D'Agostino & Stephens (1986)"),
    ]


def _variance_rows(alpha, e, exog, white) -> list[dict]:
    """Breusch-Pagan (LM and F) and, with ``white``, White's test; 'n/a' rows without B, S."""
    if exog is None:
        return [_not_run(test, "B and S not given")
                for test in ("Breusch-Pagan", "Breusch-Pagan (F)") + (("White",) if white else ())]
    rows = [
        _row(alpha, "Breusch-Pagan", lambda: breusch_pagan(e, exog, robust=True),
             lambda r: r.lm, lambda r: r.lm_pvalue, df=lambda r: r.df,
             note=lambda r: "Koenker studentised LM on 1 + " + " + ".join(r.regressors)),
        _row(alpha, "Breusch-Pagan (F)", lambda: breusch_pagan(e, exog, robust=True),
             lambda r: r.f, lambda r: r.f_pvalue, df=lambda r: r.df,
             note=lambda r: f"F({r.df}, {r.n - r.df - 1})"),
    ]
    if white:
        rows.append(_row(alpha, "White", lambda: white_test(e, exog), lambda r: r.lm,
                         lambda r: r.lm_pvalue, df=lambda r: r.df))
    return rows


def _time_rows(alpha, e_time, t_sorted, time_note, lags) -> list[dict]:
    """Durbin-Watson, Ljung-Box and the trend, on the residuals in time order."""
    return [
        _row(alpha, "Durbin-Watson", lambda: durbin_watson(e_time), lambda r: r.statistic,
             lambda r: r.pvalue,
             note=lambda r: f"rho {r.rho:.3g}; p-value large-sample normal approx.; {time_note}"),
        _row(alpha, "Ljung-Box", lambda: ljung_box(e_time, lags), lambda r: r.statistic,
             lambda r: r.pvalue, df=lambda r: r.lags,
             note=lambda r: f"lags 1..{r.lags}; {time_note}"),
        _row(alpha, "Trend", lambda: trend_test(e_time, t_sorted), lambda r: r.t,
             lambda r: r.pvalue, df=lambda r: r.n - 2,
             note=lambda r: f"slope {r.slope:.4g} per time unit (t statistic)"),
    ]
