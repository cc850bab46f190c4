"""Is a latency model adequate? Lack-of-fit, nested-model and information criteria.

Problem
-------
A model that reaches a low in-sample error can still be missing structure.
Where replicates exist, the pure-error lack-of-fit F test separates the part
of the residual sum of squares that replicates cannot explain (noise) from
the part a better model could (lack of fit).  Between nested members of the
family (``seed_id`` inside ``seed_gamma``, ``seed_ctx``, ``seed_attn``,
``seed_attn_kv``...), the extra-sum-of-squares F test and the Gaussian
likelihood-ratio test say whether the added terms earn their parameters;
AIC/BIC rank non-nested ones.  A trend of the residuals against context
length or chunk-size spread points at the term that is missing.

All statistics are computed on the scale the model was fitted on
(:mod:`perfmodel.core.scale`): for a fit with ``relative='log'`` (the default)
the residuals are ``log T - log T_hat`` and the "responses" are ``log T``;
for ``'weight'`` the residuals are ``(T - T_hat)/T``, i.e. responses ``T``
with weights ``1/T^2`` (a weighted lack-of-fit test); for ``'absolute'``,
``T - T_hat`` in ms.

Each test returns a small named tuple and states its null hypothesis.
Verified against statsmodels (``anova_lm`` on nested OLS models,
``OLSResults.compare_f_test`` / ``compare_lr_test``, OLS slope p-values)
and against a published lack-of-fit example (SAS/STAT's replicated
response-surface data, F = 22.0689, p = 0.0151209); see
``tests/stats/test_adequacy.py``.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
from scipy import stats

from perfmodel._checks import check_int_range, check_probability
from perfmodel.core.scale import scale_of
from perfmodel.errors import InputError

__all__ = [
    "LackOfFitResult",
    "NestedTestResult",
    "TrendCheck",
    "compare_nested",
    "fit_lack_of_fit",
    "fit_scale_residuals",
    "information_criteria",
    "information_table",
    "lack_of_fit",
    "likelihood_ratio_test",
    "nested_f_test",
    "residual_trend",
    "residual_trends",
]


class LackOfFitResult(NamedTuple):
    """Pure-error lack-of-fit F test.

    Null hypothesis: the model's mean function is right (the residual
    variation beyond the replicate scatter is noise).  A small ``pvalue``
    says the model misses structure that replicates prove is there.
    ``bias_sd_ratio``: the effect size, how many replicate standard
    deviations the model's systematic error per group amounts to.
    """

    F: float
    pvalue: float
    df_lof: int
    df_pe: int
    ss_lof: float
    ss_pe: float
    sse: float
    n: int
    n_groups: int

    @property
    def statistic(self) -> float:
        return self.F

    @property
    def ms_lof(self) -> float:
        return self.ss_lof / self.df_lof

    @property
    def ms_pe(self) -> float:
        return self.ss_pe / self.df_pe

    @property
    def bias_sd_ratio(self) -> float:
        """Effect size of the lack of fit: ``sqrt(max(F - 1, 0) / r)``, ``r = n / n_groups``.

        With ``r`` replicates per group, ``E[MS_LOF] = sigma^2 + r sigma_b^2``
        (``sigma`` the replicate sd, ``sigma_b`` the sd of the model's error
        in the group means) and ``E[MS_PE] = sigma^2``, so this estimates
        ``sigma_b / sigma``: near 0 when the fit's error is small beside
        the replicate scatter, above 1 when it exceeds it, whatever the
        number of groups (the F test's p-value says only whether it is
        resolved).  Exact in expectation for balanced replicates; ``r``
        is the mean group size otherwise (singleton groups included).
        ``F < 1`` gives 0.  Verified on simulated designs with known
        ``sigma_b / sigma``, balanced and unbalanced with singletons
        (tests/stats/test_adequacy.py).
        """
        if not math.isfinite(self.F):
            return self.F
        return math.sqrt(max(self.F - 1.0, 0.0) * self.n_groups / self.n)

    def bias_sd_ratio_interval(self, level: float = 0.9) -> tuple[float, float]:
        """Confidence interval for :attr:`bias_sd_ratio` (``sigma_b / sigma``).

        Problem: the effect size is one draw; with few groups (Splitwise has
        about 15 configurations per phase) it is uncertain.  Treating the
        groups' errors as random, ``MS_LOF ~ (sigma^2 + r sigma_b^2)
        chi^2_{df_lof} / df_lof`` independent of ``MS_PE ~ sigma^2
        chi^2_{df_pe} / df_pe``, so ``F / (1 + r rho^2)`` is F(df_lof, df_pe)
        distributed (``rho = sigma_b / sigma``), the one-way random-effects
        interval for a variance ratio (e.g. Searle, Casella & McCulloch,
        *Variance Components*, 1992, ch. 3).  Inverting it gives ``rho^2`` within
        ``[(F / F_{1-a/2} - 1) / r, (F / F_{a/2} - 1) / r]``, clipped at 0,
        ``r = n / n_groups``.  Exact for balanced groups and fitted values that
        do not come from the same data; with ``p`` fitted parameters the
        fitted values absorb some of the error (``df_lof = c - p``) and the
        interval is approximate, as is the point estimate.  Verified by
        simulation: its coverage on balanced designs with known ``rho``
        (tests/stats/test_adequacy.py).

        Returns
        -------
        (lower, upper) : the ratio's interval (0 where the bound clips)
        """
        level = check_probability("level", level)
        if not math.isfinite(self.F):
            return (math.nan, math.nan)
        a = 1.0 - level
        r = self.n / self.n_groups
        f_hi = stats.f.ppf(1 - a / 2, self.df_lof, self.df_pe)
        f_lo = stats.f.ppf(a / 2, self.df_lof, self.df_pe)
        ratio = lambda q: math.sqrt(max(self.F / q - 1.0, 0.0) / r)
        return (ratio(f_hi), ratio(f_lo))


class NestedTestResult(NamedTuple):
    """F and likelihood-ratio tests of a restricted model inside a full one.

    Null hypothesis: the extra parameters of the full model are zero (the
    restricted model is enough).  ``F``, ``pvalue_f``: the extra sum of
    squares test, F(df_diff, df_full); ``lr``, ``pvalue_lr``: the Gaussian
    likelihood ratio ``n log(RSS_r / RSS_f)``, chi-square with ``df_diff``.
    """

    F: float
    pvalue_f: float
    lr: float
    pvalue_lr: float
    df_diff: int
    df_full: int
    rss_restricted: float
    rss_full: float
    n: int


class TrendCheck(NamedTuple):
    """OLS slope of residuals on one variable (with intercept).

    Null hypothesis: slope 0 (the residuals do not trend with the variable).
    ``slope`` is in residual units per unit of the variable; ``pvalue`` is
    the two-sided t test with n - 2 degrees of freedom.
    """

    variable: str
    slope: float
    stderr: float
    t: float
    pvalue: float
    n: int


def _vec(x, name, n=None, *, positive=False) -> np.ndarray:
    try:
        a = np.asarray(x, dtype=float).ravel()
    except (TypeError, ValueError):
        raise InputError(f"{name} must be numeric") from None
    if a.size == 0:
        raise InputError(f"{name} is empty")
    if n is not None and a.size != n:
        raise InputError(f"{name} has {a.size} values, expected {n}")
    bad = ~np.isfinite(a) | ((a <= 0) if positive else False)
    if np.any(bad):
        rows = np.flatnonzero(bad)
        what = "finite and > 0" if positive else "finite"
        raise InputError(f"{name} must be {what}: {rows.size} bad values (first rows "
                         f"{rows[:5].tolist()})")
    return a


def _int(v, name, lo):
    return check_int_range(name, v, lo)


# ---------------------------------------------------------------------------
def lack_of_fit(y, yhat, groups, n_params: int, weights=None) -> LackOfFitResult:
    """Pure-error lack-of-fit F test (weighted least squares with ``weights``).

    ``SSE = sum w (y - yhat)^2`` splits into the pure error
    ``SS_PE = sum_g sum_i w_gi (y_gi - mean_g)^2`` (``mean_g`` the weighted
    group mean, the weighted least-squares fit of one mean per group;
    ``n - c`` degrees of freedom, ``c`` groups of identical inputs) and the
    lack of fit ``SS_LOF = SSE - SS_PE`` (``c - p`` degrees of freedom);
    ``F = (SS_LOF / (c - p)) / (SS_PE / (n - c))``.  Without weights, ``w = 1``.

    Parameters
    ----------
    y, yhat : array_like (n,), responses and fitted values on the fitted
        scale (``log T`` and ``log T_hat`` for a log fit; ``T`` and ``T_hat``
        with ``weights = 1/T^2`` for a weight fit)
    groups : array_like (n,), the replicate group (configuration) of each row
    n_params : number of fitted parameters ``p``
    weights : array_like (n,) of positive weights, or None

    Returns
    -------
    LackOfFitResult

    Notes
    -----
    Verified against statsmodels ``anova_lm(ols(y ~ x), ols(y ~ C(x)))``
    and against the SAS/STAT replicated example (F = 22.0689,
    p = 0.0151209); the weighted test against statsmodels
    ``WLS(...).compare_f_test`` of the line inside one mean per group.  For a non-linear model the F distribution is the usual
    large-sample approximation.
    """
    y = _vec(y, "y")
    yhat = _vec(yhat, "yhat", y.size)
    g = np.asarray(groups)
    if g.shape != (y.size,):
        raise InputError(f"groups has shape {g.shape}, expected ({y.size},)")
    if pd.isna(g).any():
        raise InputError(f"groups has {int(pd.isna(g).sum())} missing labels")
    p = _int(n_params, "n_params", 1)
    w = 1.0 if weights is None else _vec(weights, "weights", y.size, positive=True)
    codes, uniq = pd.factorize(pd.Series(g).astype(str))
    c = uniq.size
    n = y.size
    if not n > c:
        raise InputError(f"lack_of_fit needs replicates: {n} rows in {c} groups (no pure error)")
    if not c > p:
        raise InputError(f"lack_of_fit needs more groups ({c}) than parameters ({p})")
    sums = np.bincount(codes, weights=w * y, minlength=c)
    cnt = np.bincount(codes, minlength=c) if weights is None else \
        np.bincount(codes, weights=w, minlength=c)
    mean = sums / cnt
    ss_pe = float(np.sum(w * (y - mean[codes]) ** 2))
    sse = float(np.sum(w * (y - yhat) ** 2))
    ss_lof = max(sse - ss_pe, 0.0)
    df_lof, df_pe = c - p, n - c
    if ss_pe <= 0:
        F = math.inf if ss_lof > 0 else math.nan
        pv = 0.0 if ss_lof > 0 else math.nan
    else:
        F = (ss_lof / df_lof) / (ss_pe / df_pe)
        pv = float(stats.f.sf(F, df_lof, df_pe))
    return LackOfFitResult(float(F), pv, df_lof, df_pe, ss_lof, ss_pe, sse, n, c)


def _measured_and_fitted(fit, df) -> tuple[np.ndarray, np.ndarray]:
    """(measured, predicted) step times in ms of a FitResult on a trace."""
    from perfmodel.data.trace import validate_trace

    if not hasattr(fit, "predict") or not hasattr(fit, "options"):
        raise InputError(f"fit must be a FitResult, got {type(fit).__name__}")
    d = validate_trace(df)
    return d["duration_ms"].to_numpy(float), np.asarray(fit.predict(d), float)


def fit_scale_residuals(fit, df) -> tuple[np.ndarray, np.ndarray]:
    """(responses, fitted values) of a FitResult on ``df`` on the scale it regressed.

    ``log T``, ``log T_hat`` for ``relative='log'``; ``T``, ``T_hat`` (ms) for
    ``'absolute'`` and for ``'weight'``, whose residual is ``(T - T_hat)/T``:
    these responses with the weights ``1/T^2`` (:func:`fit_lack_of_fit`
    applies them; :meth:`perfmodel.core.scale.FitScale.residual` gives the
    residuals).
    """
    scale = scale_of(fit)
    y, yhat = _measured_and_fitted(fit, df)
    return scale.target(y), scale.link(yhat)


def fit_lack_of_fit(fit, df, groups=None) -> LackOfFitResult:
    """:func:`lack_of_fit` of a FitResult on the trace it was fitted to.

    ``groups`` defaults to ``df['config']`` (rows sharing a configuration
    are replicates); the test uses the fit's scale and weights (log for
    ``relative='log'``; ``T`` with weights ``1/T^2`` for ``'weight'``, so
    that SSE is the fit's RSS).
    """
    if groups is None:
        if "config" not in df.columns:
            raise InputError("fit_lack_of_fit: df has no 'config' column; pass groups")
        groups = df["config"].astype(str).to_numpy()
    scale = scale_of(fit)
    y, yhat = _measured_and_fitted(fit, df)
    return lack_of_fit(scale.target(y), scale.link(yhat), groups, fit.n_params,
                       weights=scale.weights(y))


# ---------------------------------------------------------------------------
def nested_f_test(rss_restricted: float, df_restricted: int, rss_full: float,
                  df_full: int) -> tuple[float, float]:
    """Extra-sum-of-squares F test of nested least-squares models.

    ``F = ((RSS_r - RSS_f) / (df_r - df_f)) / (RSS_f / df_f)`` with ``df`` the
    residual degrees of freedom (n - parameters).  Returns ``(F, pvalue)``.
    Verified against statsmodels ``anova_lm`` and ``compare_f_test``.
    """
    rr = _vec([rss_restricted], "rss_restricted", positive=True)[0]
    rf = _vec([rss_full], "rss_full", positive=True)[0]
    dr = _int(df_restricted, "df_restricted", 1)
    dff = _int(df_full, "df_full", 1)
    if dr <= dff:
        raise InputError(f"df_restricted ({dr}) must exceed df_full ({dff}): the restricted "
                         "model has fewer parameters")
    F = ((rr - rf) / (dr - dff)) / (rf / dff)
    return float(F), float(stats.f.sf(F, dr - dff, dff))


def likelihood_ratio_test(rss_restricted: float, rss_full: float, n: int,
                          df_diff: int) -> tuple[float, float]:
    """Gaussian likelihood-ratio test of nested least-squares models.

    ``LR = n log(RSS_r / RSS_f)`` (twice the log-likelihood gain with the
    error variance profiled out), chi-square with ``df_diff`` degrees of
    freedom.  Returns ``(LR, pvalue)``.  Verified against statsmodels
    ``compare_lr_test``.
    """
    rr = _vec([rss_restricted], "rss_restricted", positive=True)[0]
    rf = _vec([rss_full], "rss_full", positive=True)[0]
    n = _int(n, "n", 2)
    k = _int(df_diff, "df_diff", 1)
    lr = n * math.log(rr / rf)
    return float(lr), float(stats.chi2.sf(lr, k))


def compare_nested(restricted, full) -> NestedTestResult:
    """F and LR tests of two FitResults of nested models fitted to the same steps.

    Uses each fit's RSS on its fitted scale and the *nominal* parameter
    counts (parameters at a bound still count), so ``df_diff`` is the number
    of added parameters.  When the null puts added parameters on the
    boundary of the box (``gamma = 0``, ``c_kv = 0``), the chi-square and F
    reference distributions are conservative (the true null distribution is
    a mixture with a point mass at 0).
    """
    for nm, f in (("restricted", restricted), ("full", full)):
        if not all(hasattr(f, a) for a in ("rss", "n", "n_params", "options")):
            raise InputError(f"{nm} must be a FitResult, got {type(f).__name__}")
    if restricted.n != full.n:
        raise InputError(f"the fits used different steps (n = {restricted.n} and {full.n})")
    ro, fo = restricted.options.get("relative"), full.options.get("relative")
    if ro != fo:
        raise InputError(f"the fits used different residual scales ({ro!r} and {fo!r})")
    k = full.n_params - restricted.n_params
    if k < 1:
        raise InputError(f"the full model ({full.model_name}, {full.n_params} parameters) must "
                         f"have more parameters than the restricted one "
                         f"({restricted.model_name}, {restricted.n_params})")
    n = full.n
    # a full model whose optimiser stopped above the restricted optimum is reported as no gain
    rss_f = min(full.rss, restricted.rss)
    F, pf = nested_f_test(restricted.rss, n - restricted.n_params, rss_f, n - full.n_params)
    lr, pl = likelihood_ratio_test(restricted.rss, rss_f, n, k)
    return NestedTestResult(F, pf, lr, pl, k, n - full.n_params, float(restricted.rss),
                            float(rss_f), int(n))


# ---------------------------------------------------------------------------
def information_criteria(rss: float, n: int, k: int) -> tuple[float, float]:
    """Gaussian AIC and BIC up to a constant: ``n log(RSS/n) + 2k`` and ``+ k log n``.

    The same convention as statsmodels OLS up to the constant
    ``n (1 + log 2 pi)`` (identical differences between models fitted to the
    same responses; tested).
    """
    r = _vec([rss], "rss", positive=True)[0]
    n = _int(n, "n", 1)
    k = _int(k, "k", 0)
    ll = n * math.log(r / n)
    return float(ll + 2 * k), float(ll + k * math.log(n))


def information_table(fits: Mapping[str, Any]) -> pd.DataFrame:
    """AIC/BIC table of FitResults fitted to the same steps on the same scale.

    Columns: ``model``, ``n``, ``k`` (nominal parameters), ``rss``, ``aic``,
    ``bic``, ``delta_aic``, ``delta_bic`` (to the best), ``akaike_weight``;
    sorted by AIC.
    """
    if not isinstance(fits, Mapping) or not fits:
        raise InputError("fits must be a non-empty mapping of name -> FitResult")
    ns = {f.n for f in fits.values()}
    if len(ns) != 1:
        raise InputError(f"the fits used different numbers of steps: {sorted(ns)}")
    rows = []
    for name, f in fits.items():
        a, b = information_criteria(f.rss, f.n, f.n_params)
        rows.append({"model": name, "n": f.n, "k": f.n_params, "rss": f.rss, "aic": a, "bic": b})
    t = pd.DataFrame(rows).sort_values("aic", kind="stable").reset_index(drop=True)
    t["delta_aic"] = t["aic"] - t["aic"].min()
    t["delta_bic"] = t["bic"] - t["bic"].min()
    w = np.exp(-0.5 * t["delta_aic"])
    t["akaike_weight"] = w / w.sum()
    return t


# ---------------------------------------------------------------------------
def residual_trend(resid, x, variable: str = "x") -> TrendCheck:
    """OLS of the residuals on ``[1, x]`` (statsmodels): slope, its t test and p-value.

    Null hypothesis: no linear trend of the residuals in ``x``.  Verified
    against :func:`scipy.stats.linregress`.
    """
    import statsmodels.api as sm

    e = _vec(resid, "resid")
    xv = _vec(x, variable, e.size)
    if e.size < 3:
        raise InputError(f"residual_trend needs at least 3 residuals, got {e.size}")
    if np.ptp(xv) == 0:
        raise InputError(f"{variable} is constant: no trend to test")
    r = sm.OLS(e, sm.add_constant(xv, has_constant="add")).fit()
    return TrendCheck(str(variable), float(r.params[1]), float(r.bse[1]), float(r.tvalues[1]),
                      float(r.pvalues[1]), int(e.size))


#: variables the residual-trend check uses when the trace has them
TREND_VARIABLES = ("ctx_sum", "ctx_max", "chunk_sd", "attn_prefill", "decode_ctx", "B", "S")


def residual_trends(fit, df, variables=TREND_VARIABLES) -> pd.DataFrame:
    """Residual trends of a FitResult against context length, chunk spread, B and S.

    Residuals on the fit's scale (:meth:`perfmodel.core.scale.FitScale.residual`:
    ``log T - log T_hat`` for a log fit, ``(T - T_hat)/T`` for a weight fit);
    each variable from :func:`perfmodel.data.trace.step_features` that the trace
    has and that is not constant.  Returns a DataFrame of
    :class:`TrendCheck` rows (``variable``, ``slope``, ``stderr``, ``t``,
    ``pvalue``, ``n``).
    """
    from perfmodel.data.trace import step_features, validate_trace

    d = validate_trace(df)
    feats = step_features(d)
    e = scale_of(fit).residual(*_measured_and_fitted(fit, d))
    rows = []
    for v in variables:
        if v in feats and np.ptp(feats[v]) > 0:
            rows.append(residual_trend(e, feats[v], v)._asdict())
    return pd.DataFrame(rows, columns=list(TrendCheck._fields))
