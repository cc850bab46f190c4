"""Shared pieces of :mod:`perfmodel.stats.uncertainty`: the scheme/method names,
argument checks and the fit's data and scale.
"""
from __future__ import annotations

from collections.abc import Mapping
from numbers import Integral, Real

import numpy as np
import pandas as pd

from perfmodel._checks import nonpositive_rows_text
from perfmodel._parallel import one_blas_thread  # noqa: F401 - defined once, there
from perfmodel.core.scale import scale_of
from perfmodel.errors import InputError

SCHEMES = ("pairs", "residual", "wild", "block", "cluster")
METHODS = ("percentile", "bca", "studentized")
#: the standard error each scheme studentizes with (method="studentized")
SE_TYPES = {"pairs": "HC3", "residual": "classical", "wild": "HC3", "block": "HAC",
            "cluster": "CR1"}
BLOCKS = ("stationary", "circular")
WILD_WEIGHTS = ("rademacher", "mammen")
COV_TYPES = ("classical", "HC0", "HC3", "HAC", "CR1")


# ---------------------------------------------------------------------------
# argument checks
# ---------------------------------------------------------------------------

def _raise(problems: list[str], where: str) -> None:
    if problems:
        raise InputError(f"{where}: " + "; ".join(problems))


def _check_fit(fit, where: str) -> None:
    need = ("values", "param_names", "cov", "options", "fitted_model_name", "dof")
    missing = [a for a in need if not hasattr(fit, a)]
    if missing:
        raise InputError(f"{where}: fit must be a perfmodel FitResult (missing {missing}), "
                         f"got {type(fit).__name__}")
    try:
        scale_of(fit)
    except InputError as exc:
        raise InputError(f"{where}: fit.options['relative']: {exc}") from None


def _alpha_problem(alpha) -> list[str]:
    if isinstance(alpha, bool) or not isinstance(alpha, Real) or not 0 < float(alpha) < 1:
        return [f"alpha must be a number in (0, 1), got {alpha!r}"]
    return []


def _int_problem(name, value, lo) -> list[str]:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < lo:
        return [f"{name} must be an integer >= {lo}, got {value!r}"]
    return []


def _choice_problem(name, value, allowed) -> list[str]:
    if value not in allowed:
        return [f"{name} must be one of {list(allowed)}, got {value!r}"]
    return []


# ---------------------------------------------------------------------------
# the fit's data and scale
# ---------------------------------------------------------------------------

def _fit_data(fit, data, y, where: str):
    """Features (dict of the model's keys), y, in time order where known.

    ``data=None`` uses the rows the fit was made on (``fit.features``,
    ``fit.y``, in their original row order).  A DataFrame is validated,
    put in time order (:func:`perfmodel.data.trace.time_order`) and filtered by the
    fit's outlier window.  A feature dict needs ``y``.
    """
    model = fit.model
    if data is None:
        if getattr(fit, "features", None) is None or getattr(fit, "y", None) is None:
            raise InputError(f"{where}: the fit carries no data (a FitResult read from JSON?): "
                             "pass the trace as data")
        feats = model.check_features(fit.features)
        yy = np.asarray(fit.y, float).ravel()
    elif isinstance(data, pd.DataFrame):
        from perfmodel.data.trace import step_features, time_order, validate_trace

        if y is not None:
            raise InputError(f"{where}: y is only for a feature dict; a trace DataFrame gives "
                             "its own duration_ms")
        df = validate_trace(data)
        df = df.iloc[time_order(df)]
        feats = model.check_features(step_features(df))
        yy = df["duration_ms"].to_numpy(float)
        win = fit.options.get("outlier_window")
        if win:
            keep = (yy >= win[0]) & (yy <= win[1])
            feats = {k: v[keep] for k, v in feats.items()}
            yy = yy[keep]
    elif isinstance(data, Mapping):
        if y is None:
            raise InputError(f"{where}: y is required when data is a feature dict")
        feats = model.check_features(data)
        yy = np.asarray(y, float).ravel()
    else:
        raise InputError(f"{where}: data must be None, a step-trace DataFrame or a feature dict, "
                         f"got {type(data).__name__}")
    n = len(next(iter(feats.values())))
    if yy.shape != (n,):
        raise InputError(f"{where}: y has {yy.size} values but the features have {n} rows")
    bad = nonpositive_rows_text(yy)
    if bad:
        raise InputError(f"{where}: step times must be finite and > 0: {bad}")
    if n <= fit.model.n_params:
        raise InputError(f"{where}: {n} steps for {fit.model.n_params} parameters")
    return feats, yy


def _fit_groups(fit, data, groups, n: int, where: str) -> np.ndarray:
    """Cluster labels aligned with the rows :func:`_fit_data` returns.

    ``groups``: a column name of the trace ``data``, or one label per row of
    ``data`` (of the fit's own rows when ``data`` is None), in their given
    order; a trace's labels follow its rows into time order and through the
    fit's outlier window, as :func:`_fit_data` moves them.
    """
    if isinstance(data, pd.DataFrame):
        from perfmodel.data.trace import time_order, validate_trace

        df = validate_trace(data)
        if isinstance(groups, str):
            if groups not in df.columns:
                raise InputError(f"{where}: groups column {groups!r} is not in the trace")
            g = df[groups].to_numpy()
        else:
            g = np.asarray(groups).ravel()
            if g.size != len(df):
                raise InputError(f"{where}: groups has {g.size} labels for {len(df)} rows")
        order = time_order(df)
        g = g[order]
        win = fit.options.get("outlier_window")
        if win:
            yy = df["duration_ms"].to_numpy(float)[order]
            g = g[(yy >= win[0]) & (yy <= win[1])]
    else:
        if isinstance(groups, str):
            raise InputError(f"{where}: groups as a column name needs a trace DataFrame as data")
        g = np.asarray(groups).ravel()
    if g.size != n:
        raise InputError(f"{where}: groups has {g.size} labels for the {n} fitted rows")
    if pd.isna(pd.Series(g)).any():
        raise InputError(f"{where}: groups has missing labels")
    codes = pd.factorize(g)[0]
    if codes.max() < 1:
        raise InputError(f"{where}: groups must hold at least 2 clusters")
    return codes


def _free_mask(fit) -> np.ndarray:
    return np.array([n not in set(fit.at_bound) | set(getattr(fit, "unidentified", []))
                     for n in fit.param_names])


def _leverage(Jf: np.ndarray) -> np.ndarray:
    """Diagonal of the hat matrix of the columns of ``Jf`` (columns scaled first)."""
    norms = np.linalg.norm(Jf, axis=0)
    norms[norms == 0] = 1.0
    q, _ = np.linalg.qr(Jf / norms)
    return np.clip(np.einsum("ij,ij->i", q, q), 0.0, 0.999)
