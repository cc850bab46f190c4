"""The diagnostics' result types and argument checks (see :mod:`perfmodel.stats.diagnostics`).
"""
from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from perfmodel._checks import check_vector, rows_text
from perfmodel.errors import InputError

#: scipy.stats.shapiro's p-value is accurate only up to this many observations.
SHAPIRO_MAX_N = 5000


# ----------------------------------------------------------------------------
# result types
# ----------------------------------------------------------------------------
class ShapiroResult(NamedTuple):
    """Shapiro-Wilk W, its p-value, and how many residuals entered the test."""

    statistic: float
    pvalue: float
    n: int
    n_used: int
    subsampled: bool


class JarqueBeraResult(NamedTuple):
    """Jarque-Bera statistic, p-value, sample skewness and (non-excess) kurtosis."""

    statistic: float
    pvalue: float
    skew: float
    kurtosis: float
    n: int


class AndersonResult(NamedTuple):
    """Anderson-Darling A^2 for normality (mean, variance estimated) and p-value."""

    statistic: float
    pvalue: float
    n: int


def _alias(field: str, doc: str) -> property:
    """A read-only property that returns the field ``field`` (``statistic``/``pvalue`` aliases)."""
    return property(operator.attrgetter(field), doc=doc)


#: Shared by the two LM tests (Breusch-Pagan, White): ``statistic`` and ``pvalue`` aliases.
_LM_STATISTIC = _alias("lm", "The LM statistic (alias, so every result has ``statistic``).")
_LM_PVALUE = _alias("lm_pvalue", "The LM p-value (alias).")


class BreuschPaganResult(NamedTuple):
    """Breusch-Pagan LM and F statistics, p-values, regressors used."""

    lm: float
    lm_pvalue: float
    f: float
    f_pvalue: float
    df: int
    n: int
    robust: bool
    regressors: tuple[str, ...]

    statistic = _LM_STATISTIC
    pvalue = _LM_PVALUE


class WhiteResult(NamedTuple):
    """White's LM and F statistics and p-values, and the LM degrees of freedom."""

    lm: float
    lm_pvalue: float
    f: float
    f_pvalue: float
    df: int
    n: int
    regressors: tuple[str, ...]

    statistic = _LM_STATISTIC
    pvalue = _LM_PVALUE


class DurbinWatsonResult(NamedTuple):
    """Durbin-Watson d, its large-sample p-value, lag-1 correlation implied."""

    statistic: float
    pvalue: float
    rho: float
    n: int


class LjungBoxResult(NamedTuple):
    """Ljung-Box Q up to ``lags``, its chi-square p-value, lags and n."""

    statistic: float
    pvalue: float
    lags: int
    n: int


class TrendResult(NamedTuple):
    """OLS of residuals on time order: slope, its t statistic and p-value."""

    slope: float
    intercept: float
    stderr: float
    t: float
    pvalue: float
    n: int

    statistic = _alias("t", "The slope's t statistic (alias).")


# ----------------------------------------------------------------------------
# input checks
# ----------------------------------------------------------------------------
def _vector(x: Any, name: str, *, min_n: int = 1, n: int | None = None) -> np.ndarray:
    """Return ``x`` as a finite 1-D float array or raise InputError naming ``name``."""
    return check_vector(f"`{name}`", x, min_n=min_n, n=n)


def _resid(resid: Any, min_n: int, name: str = "resid") -> np.ndarray:
    """As :func:`_vector`, and refuse a constant vector (nothing to test)."""
    return check_vector(f"`{name}`", resid, min_n=min_n, nonconstant=True)


def _regressors(exog: Any, n: int, name: str) -> tuple[np.ndarray, tuple[str, ...]]:
    """Non-constant regressor columns of ``exog`` (constant columns are removed)."""
    if exog is None:
        raise InputError(f"`{name}` is required, got None")
    if isinstance(exog, Mapping):
        names = tuple(str(k) for k in exog)
        cols = [_vector(v, f"{name}[{k!r}]", n=n) for k, v in exog.items()]
        if not cols:
            raise InputError(f"`{name}` is empty")
        x = np.column_stack(cols)
    else:
        if isinstance(exog, pd.DataFrame):
            names = tuple(str(c) for c in exog.columns)
        elif isinstance(exog, pd.Series):
            names = (str(exog.name) if exog.name is not None else "x0",)
        else:
            names = None
        try:
            x = np.asarray(exog, dtype=float)
        except (TypeError, ValueError) as exc:
            raise InputError(f"`{name}` must be numeric: {exc}") from None
        if x.ndim == 1:
            x = x[:, None]
        if x.ndim != 2:
            raise InputError(f"`{name}` must be 1-D or 2-D, got shape {x.shape}")
        if x.shape[0] != n:
            raise InputError(
                f"`{name}` has {x.shape[0]} rows, expected {n} (the length of `resid`)"
            )
        bad = ~np.isfinite(x).all(axis=1)
        if bad.any():
            raise InputError(f"`{name}` has non-finite values (NaN or inf) at {rows_text(bad)}")
        if names is None:
            names = tuple(f"x{j}" for j in range(x.shape[1]))
    keep = np.ptp(x, axis=0) > 0
    return x[:, keep], tuple(nm for nm, k in zip(names, keep) if k)


def _full_rank(x: np.ndarray, names: tuple[str, ...], name: str):
    """Constant + a maximal linearly independent subset of the columns of ``x``.

    Columns are standardised first (this changes no test statistic: the
    constant is in the model, and R^2 is invariant to affine maps of the
    regressors) and a column is kept only if it adds to the rank.
    """
    if x.shape[1] == 0:
        raise InputError(f"`{name}` has no non-constant column: no variance function to test")
    z = (x - x.mean(axis=0)) / x.std(axis=0)
    cols = [np.ones(x.shape[0])]
    kept = []
    for j in range(z.shape[1]):
        trial = np.column_stack(cols + [z[:, j]])
        if np.linalg.matrix_rank(trial) == trial.shape[1]:
            cols.append(z[:, j])
            kept.append(names[j])
    return np.column_stack(cols), tuple(kept)
