"""Residual diagnostics for a fitted step-latency model.

Problem: after fitting ``T(B, S)`` we must know whether the residuals
``e = T - T_hat`` behave as the fit's standard errors assume (normal,
homoscedastic, uncorrelated in time, without drift). The core set
(docs/model.md, Evaluation) is Shapiro-Wilk, Breusch-Pagan on B and S,
Durbin-Watson and a linear trend test against time order; this module adds
Jarque-Bera, Anderson-Darling, Ljung-Box and (optionally) White's test, and
:func:`residual_table` returns all of them as one table.

Each test returns a small :class:`~typing.NamedTuple` (``statistic``,
``pvalue`` and what else it needs). Every function checks its input first and
raises :class:`perfmodel.errors.InputError` naming the argument.

Verification (``tests/stats/test_diagnostics.py``): every statistic and p-value
equals the statsmodels/scipy function called directly on the same residuals
to a relative 1e-10; Breusch-Pagan, Durbin-Watson and Ljung-Box also match
values computed with R (``lmtest::bptest``, ``car::durbinWatsonTest``,
``stats::Box.test``) as recorded in statsmodels' own test suite, and
Shapiro-Wilk matches the worked example scipy's test suite takes from the
original paper.

Note: ``stats.linregress(range(n), resid)[:2]``, a common shortcut for a trend
test, returns the slope and the *intercept*, not a p-value; :func:`trend_test` returns the
slope's t statistic and two-sided p-value.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
from scipy import stats

from perfmodel._checks import check_int_range, check_vector, rows_text
from perfmodel.errors import InputError

__all__ = [
    "AndersonResult",
    "BreuschPaganResult",
    "DurbinWatsonResult",
    "JarqueBeraResult",
    "LjungBoxResult",
    "ShapiroResult",
    "TrendResult",
    "WhiteResult",
    "anderson_darling",
    "breusch_pagan",
    "durbin_watson",
    "jarque_bera",
    "ljung_box",
    "residual_table",
    "shapiro_wilk",
    "trend_test",
    "white_test",
]

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

    @property
    def statistic(self) -> float:
        """The LM statistic (alias, so every result has ``statistic``)."""
        return self.lm

    @property
    def pvalue(self) -> float:
        """The LM p-value (alias)."""
        return self.lm_pvalue


class WhiteResult(NamedTuple):
    """White's LM and F statistics and p-values, and the LM degrees of freedom."""

    lm: float
    lm_pvalue: float
    f: float
    f_pvalue: float
    df: int
    n: int
    regressors: tuple[str, ...]

    @property
    def statistic(self) -> float:
        """The LM statistic (alias)."""
        return self.lm

    @property
    def pvalue(self) -> float:
        """The LM p-value (alias)."""
        return self.lm_pvalue


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

    @property
    def statistic(self) -> float:
        """The slope's t statistic (alias)."""
        return self.t


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


# ----------------------------------------------------------------------------
# normality
# ----------------------------------------------------------------------------
def shapiro_wilk(resid: Any, max_n: int = SHAPIRO_MAX_N, seed: int = 0) -> ShapiroResult:
    """Shapiro-Wilk test of normality of the residuals.

    Problem: are the residuals a sample from a normal distribution, as the
    t-based covariance intervals assume?

    Null hypothesis: the residuals are i.i.d. normal (any mean and variance).
    ``statistic`` W lies in (0, 1]; values near 1 agree with normality; a small
    ``pvalue`` (e.g. < 0.05) is evidence against it. With thousands of
    residuals the test rejects for departures too small to matter: read W and
    the QQ plot (:func:`perfmodel.plotting.qq_plot`) along with the p-value.

    Above ``max_n`` (5,000) residuals scipy's p-value is not accurate (scipy
    warns), so the test runs on a seeded random subsample of ``max_n``
    residuals drawn without replacement; ``n_used`` and ``subsampled`` say so.
    :func:`jarque_bera` and :func:`anderson_darling` use the full sample.

    Parameters
    ----------
    resid : array_like, shape (n,)
        Residuals, n >= 3, finite, not constant.
    max_n : int, default 5000
        Largest sample passed to :func:`scipy.stats.shapiro`, 3..5000.
    seed : int, default 0
        Seed of the subsample (``numpy.random.default_rng(seed)``).

    Returns
    -------
    ShapiroResult
        ``statistic``, ``pvalue``, ``n``, ``n_used``, ``subsampled``.

    Notes
    -----
    Verified against :func:`scipy.stats.shapiro` on the same (sub)sample to
    1e-10, and against the worked example (n = 25, W = 0.83467,
    p = 0.000914) that scipy's test suite takes from the original paper.

    Examples
    --------
    >>> import numpy as np
    >>> shapiro_wilk(np.random.default_rng(1).normal(size=200)).pvalue > 0.05
    True
    """
    e = _resid(resid, min_n=3)
    max_n = check_int_range("`max_n`", max_n, 3, SHAPIRO_MAX_N)
    n = e.size
    subsampled = n > max_n
    if subsampled:
        idx = np.sort(np.random.default_rng(seed).choice(n, size=int(max_n), replace=False))
        e = e[idx]
        if np.ptp(e) == 0:
            raise InputError("the Shapiro-Wilk subsample of `resid` is constant")
    res = stats.shapiro(e)
    return ShapiroResult(float(res.statistic), float(res.pvalue), n, e.size, subsampled)


def jarque_bera(resid: Any) -> JarqueBeraResult:
    """Jarque-Bera test of normality from sample skewness and kurtosis.

    Problem: a normality test valid for any number of residuals (it is
    asymptotic, so use it for n in the hundreds or more).

    Null hypothesis: skewness 0 and kurtosis 3 (as for a normal distribution).
    ``statistic`` = n/6 (skew^2 + (kurt - 3)^2 / 4) is chi-square(2) under the
    null; large values (small ``pvalue``) mean skewed or heavy-tailed
    residuals. ``kurtosis`` is the plain (not excess) kurtosis: 3 for normal.

    Parameters
    ----------
    resid : array_like, shape (n,)
        Residuals, n >= 3, finite, not constant.

    Returns
    -------
    JarqueBeraResult
        ``statistic``, ``pvalue``, ``skew``, ``kurtosis``, ``n``.

    Notes
    -----
    Verified against :func:`scipy.stats.jarque_bera` and
    :func:`statsmodels.stats.stattools.jarque_bera` (statistic, p-value,
    skewness, kurtosis) to 1e-10.
    """
    e = _resid(resid, min_n=3)
    res = stats.jarque_bera(e)
    skew = float(stats.skew(e))
    kurt = float(stats.kurtosis(e, fisher=False))
    return JarqueBeraResult(float(res.statistic), float(res.pvalue), skew, kurt, e.size)


def _ad_normal_pvalue(a2: float, n: int) -> float:
    """P-value of A^2 for the normal with estimated mean and variance.

    D'Agostino and Stephens (1986), Goodness-of-Fit Techniques, table 4.9:
    modified statistic A*^2 = A^2 (1 + 0.75/n + 2.25/n^2), piecewise
    exponential fits; the same formula as statsmodels' ``normal_ad``.
    """
    a = a2 * (1.0 + 0.75 / n + 2.25 / n**2)
    if a < 0.2:
        return float(1.0 - np.exp(-13.436 + 101.14 * a - 223.73 * a**2))
    if a < 0.34:
        return float(1.0 - np.exp(-8.318 + 42.796 * a - 59.938 * a**2))
    if a < 0.6:
        return float(np.exp(0.9177 - 4.279 * a - 1.38 * a**2))
    if a <= 13.0:
        return float(np.exp(1.2937 - 5.709 * a + 0.0186 * a**2))
    return 0.0  # below 4.95e-31


def anderson_darling(resid: Any) -> AndersonResult:
    """Anderson-Darling test of normality (mean and variance estimated).

    Problem: a normality test on the full sample that weighs the tails more
    than Shapiro-Wilk's subsample can, with a continuous p-value.

    Null hypothesis: the residuals are i.i.d. normal. ``statistic`` A^2 grows
    with the distance between the empirical and the fitted normal CDF, tails
    weighted most; a small ``pvalue`` is evidence against normality.

    Parameters
    ----------
    resid : array_like, shape (n,)
        Residuals, n >= 8, finite, not constant.

    Returns
    -------
    AndersonResult
        ``statistic``, ``pvalue``, ``n``.

    Notes
    -----
    The statistic is :func:`scipy.stats.anderson` (``dist='norm'``). Its
    p-value is not scipy's: scipy 1.17 interpolates a table and clips the
    p-value to [0.01, 0.15]; here it comes from D'Agostino & Stephens (1986,
    table 4.9), continuous, 0 when A*^2 > 13 (p < 5e-31).
    Verified: statistic equal to scipy's and to statsmodels'
    ``anderson_statistic`` to 1e-10, p-value equal to statsmodels'
    ``normal_ad`` to 1e-10. (statsmodels' own statistic overflows to inf for
    very non-normal samples, where scipy's, used here, stays finite.)
    """
    e = _resid(resid, min_n=8)
    try:
        res = stats.anderson(e, dist="norm", method="interpolate")  # scipy >= 1.17
    except TypeError:  # older scipy: no `method`
        res = stats.anderson(e, dist="norm")
    a2 = float(res.statistic)
    return AndersonResult(a2, _ad_normal_pvalue(a2, e.size), e.size)


# ----------------------------------------------------------------------------
# heteroscedasticity
# ----------------------------------------------------------------------------
def breusch_pagan(resid: Any, exog: Any, robust: bool = True) -> BreuschPaganResult:
    """Breusch-Pagan test: does the residual variance depend on the regressors?

    Problem: step-time noise often grows with S (long prefill steps); an
    unweighted fit then gives wrong standard errors. The residuals are
    tested against B and S (docs/model.md, Evaluation).

    The squared residuals are regressed on a constant plus the columns of
    ``exog`` (e.g. B and S). Null hypothesis: homoscedasticity, the variance
    does not depend on them. ``lm`` is n R^2 of that regression (Koenker's
    studentised form, ``robust=True``, valid without normal errors) or half
    its explained sum of squares on e^2/mean(e^2) (the original form,
    ``robust=False``, assumes normal errors); chi-square with ``df`` degrees of
    freedom under the null. ``f`` is the F statistic of the same auxiliary
    regression (better size in small samples). Small p-values mean the spread
    of the residuals changes with the regressors: weight the fit or fit
    relative error.

    Parameters
    ----------
    resid : array_like, shape (n,)
        Residuals, finite, not constant.
    exog : array_like (n,) or (n, k), DataFrame or mapping name -> array
        The variance regressors, without the constant (added here; constant
        columns are dropped). Columns that are linear combinations of earlier
        ones (e.g. S == B on a decode-only trace) are dropped, so ``df`` is the
        true rank; ``regressors`` names those kept.
    robust : bool, default True
        Koenker's studentised statistic (True) or the original one (False).

    Returns
    -------
    BreuschPaganResult
        ``lm``, ``lm_pvalue``, ``f``, ``f_pvalue``, ``df``, ``n``, ``robust``,
        ``regressors``; ``statistic``/``pvalue`` alias ``lm``/``lm_pvalue``.

    Notes
    -----
    Verified against :func:`statsmodels.stats.diagnostic.het_breuschpagan`
    (all four numbers) on [1, exog] to 1e-10, and against R's
    ``lmtest::bptest`` (studentised 0.709924388395087, p 0.701199952134347;
    original 1.302014063483341, p 0.5215203247110649) for the growth-rate
    regression on statsmodels' macrodata recorded in statsmodels' test suite.
    Regressors are standardised before the auxiliary regression, which leaves
    the statistics unchanged and keeps it well conditioned at large S.
    """
    e = _resid(resid, min_n=3)
    if not isinstance(robust, (bool, np.bool_)):
        raise InputError(f"`robust` must be True or False, got {robust!r}")
    x, names = _regressors(exog, e.size, "exog")
    xc, kept = _full_rank(x, names, "exog")
    if e.size <= xc.shape[1]:
        raise InputError(
            f"`resid` has {e.size} values: Breusch-Pagan on {xc.shape[1]} columns needs more"
        )
    from statsmodels.stats.diagnostic import het_breuschpagan

    lm, lmp, f, fp = het_breuschpagan(e, xc, robust=bool(robust))
    return BreuschPaganResult(
        float(lm), float(lmp), float(f), float(fp), xc.shape[1] - 1, e.size, bool(robust), kept
    )


def white_test(resid: Any, exog: Any) -> WhiteResult:
    """White's test: does the residual variance depend on the regressors,
    their squares or their products?

    Problem: a heteroscedasticity test that also catches variance depending
    non-linearly on B and S (e.g. largest in the middle of the range).

    Null hypothesis: homoscedasticity. e^2 is regressed on a constant, the
    regressors, their squares and cross products; ``lm`` = n R^2 is
    chi-square(``df``) under the null; ``f`` is the auxiliary F statistic.

    Parameters
    ----------
    resid : array_like, shape (n,)
    exog : array_like (n,) or (n, k), DataFrame or mapping name -> array
        Regressors without the constant, as in :func:`breusch_pagan`.

    Returns
    -------
    WhiteResult
        ``lm``, ``lm_pvalue``, ``f``, ``f_pvalue``, ``df``, ``n``,
        ``regressors``; ``statistic``/``pvalue`` alias ``lm``/``lm_pvalue``.

    Notes
    -----
    Verified against :func:`statsmodels.stats.diagnostic.het_white` on
    [1, exog] to 1e-10. ``df`` is the rank of the auxiliary design minus one
    (statsmodels' ``df_model``), so duplicated terms are not counted.
    """
    e = _resid(resid, min_n=3)
    x, names = _regressors(exog, e.size, "exog")
    xc, kept = _full_rank(x, names, "exog")
    k = xc.shape[1]
    n_aux = k * (k + 1) // 2
    if e.size <= n_aux:
        raise InputError(
            f"`resid` has {e.size} values: White's test on {n_aux} auxiliary columns needs more"
        )
    from statsmodels.regression.linear_model import OLS

    i0, i1 = np.triu_indices(k)
    aux = OLS(e**2, xc[:, i0] * xc[:, i1]).fit()
    lm = e.size * aux.rsquared
    df = round(aux.df_model)
    return WhiteResult(
        float(lm),
        float(stats.chi2.sf(lm, df)),
        float(aux.fvalue),
        float(aux.f_pvalue),
        df,
        e.size,
        kept,
    )


# ----------------------------------------------------------------------------
# time order
# ----------------------------------------------------------------------------
def durbin_watson(resid: Any) -> DurbinWatsonResult:
    """Durbin-Watson test for lag-1 autocorrelation of time-ordered residuals.

    Problem: consecutive engine steps share machine state (caches, contention,
    clock drift), so residuals may be correlated in time, which makes i.i.d.
    standard errors too small.

    ``statistic`` d = sum (e_t - e_{t-1})^2 / sum e_t^2, in [0, 4]; about 2
    means no lag-1 correlation, towards 0 positive, towards 4 negative
    correlation; ``rho`` = 1 - d/2 is the lag-1 correlation it implies.
    Null hypothesis: no lag-1 autocorrelation. ``pvalue`` is two-sided from
    the large-sample normal law sqrt(n) (1 - d/2) ~ N(0, 1); it ignores the
    design matrix (the exact Durbin-Watson bounds need it), so read it as
    approximate when n is below a few hundred.

    Parameters
    ----------
    resid : array_like, shape (n,)
        Residuals in time order (sort by step or timestamp first), n >= 3.

    Returns
    -------
    DurbinWatsonResult
        ``statistic``, ``pvalue``, ``rho``, ``n``.

    Notes
    -----
    Verified: ``statistic`` against
    :func:`statsmodels.stats.stattools.durbin_watson` to 1e-10 and against R's
    ``car::durbinWatsonTest`` values recorded in statsmodels' test suite
    (e.g. 1.95298958377419 on its 20-value series).
    """
    e = _resid(resid, min_n=3)
    d = float(np.sum(np.diff(e) ** 2) / np.sum(e**2))
    rho = 1.0 - d / 2.0
    z = np.sqrt(e.size) * rho
    return DurbinWatsonResult(d, float(2.0 * stats.norm.sf(abs(z))), rho, e.size)


def ljung_box(resid: Any, lags: int | None = None) -> LjungBoxResult:
    """Ljung-Box portmanteau test for autocorrelation up to ``lags``.

    Problem: Durbin-Watson sees only lag 1; periodic effects (e.g. a
    scheduler cycle) show at longer lags.

    Null hypothesis: the residual autocorrelations at lags 1..``lags`` are all
    zero. ``statistic`` Q = n (n + 2) sum_k r_k^2 / (n - k) is chi-square with
    ``lags`` degrees of freedom under the null; a small ``pvalue`` means some
    autocorrelation. Residuals are demeaned first.

    Parameters
    ----------
    resid : array_like, shape (n,)
        Residuals in time order, n >= 4.
    lags : int, optional
        Largest lag, 1 <= lags < n. Default ``min(10, n // 5)`` (at least 1),
        statsmodels' default.

    Returns
    -------
    LjungBoxResult
        ``statistic``, ``pvalue``, ``lags``, ``n``.

    Notes
    -----
    Verified against :func:`statsmodels.stats.diagnostic.acorr_ljungbox` to
    1e-10 and against R's ``Box.test(type = "Ljung-Box", lag = 4)``
    (5.23587172795227, p 0.263940335284713) on the macrodata regression
    residuals recorded in statsmodels' test suite.
    """
    e = _resid(resid, min_n=4)
    if lags is None:
        lags = max(1, min(10, e.size // 5))
    lags = check_int_range("`lags`", lags, 1, e.size - 1)
    from statsmodels.stats.diagnostic import acorr_ljungbox

    out = acorr_ljungbox(e, lags=[int(lags)], return_df=True)
    return LjungBoxResult(
        float(out["lb_stat"].iloc[0]), float(out["lb_pvalue"].iloc[0]), int(lags), e.size
    )


def trend_test(resid: Any, order: Any = None) -> TrendResult:
    """Linear trend of the residuals against time order (docs/model.md, Evaluation).

    Problem: a drifting host (data/README.md, Noise floor and drift) shows as
    residuals that rise or fall over the trace.

    OLS of the residuals on [1, order]. Null hypothesis: slope 0 (no linear
    drift). ``slope`` is in residual units (ms) per unit of ``order``; ``t`` is
    slope / stderr and ``pvalue`` its two-sided Student-t p-value with n - 2
    degrees of freedom.

    Parameters
    ----------
    resid : array_like, shape (n,)
        Residuals, n >= 3.
    order : array_like, shape (n,), optional
        Time of each residual (step index or timestamp). Default: row order
        0..n-1.

    Returns
    -------
    TrendResult
        ``slope``, ``intercept``, ``stderr``, ``t``, ``pvalue``, ``n``;
        ``statistic`` aliases ``t``.

    Notes
    -----
    Verified against :func:`scipy.stats.linregress` (slope, intercept,
    stderr, p-value) and statsmodels ``OLS`` (t value) to 1e-10. The shortcut
    ``linregress(...)[:2]`` returns slope and intercept, not a p-value.
    """
    e = _resid(resid, min_n=3)
    t_ = np.arange(e.size, dtype=float) if order is None else _vector(order, "order", n=e.size)
    if np.ptp(t_) == 0:
        raise InputError("`order` is constant: no time order to test a trend against")
    res = stats.linregress(t_, e)
    t_stat = res.slope / res.stderr if res.stderr > 0 else np.inf * np.sign(res.slope)
    return TrendResult(
        float(res.slope),
        float(res.intercept),
        float(res.stderr),
        float(t_stat),
        float(res.pvalue),
        e.size,
    )


# ----------------------------------------------------------------------------
# the table
# ----------------------------------------------------------------------------
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

    rows: list[dict] = []

    def add(test, fn, stat, p, df=np.nan, note=""):
        try:
            r = fn()
        except InputError as exc:
            rows.append({"test": test, "statistic": np.nan, "pvalue": np.nan, "df": np.nan,
                             "null": _NULL[test], "verdict": "n/a", "note": str(exc)})
            return
        pv = float(p(r))
        rows.append({
            "test": test, "statistic": float(stat(r)), "pvalue": pv,
            "df": float(df(r)) if callable(df) else df, "null": _NULL[test],
            "verdict": "reject" if pv < alpha else "not rejected",
            "note": note(r) if callable(note) else note,
        })

    add("Shapiro-Wilk", lambda: shapiro_wilk(e, max_n=max_n, seed=seed),
        lambda r: r.statistic, lambda r: r.pvalue,
        note=lambda r: (f"seeded subsample of {r.n_used} of {r.n} (seed {seed})"
                        if r.subsampled else ""))
    add("Jarque-Bera", lambda: jarque_bera(e), lambda r: r.statistic, lambda r: r.pvalue,
        df=2.0, note=lambda r: f"skew {r.skew:.3g}, kurtosis {r.kurtosis:.3g}")
    add("Anderson-Darling", lambda: anderson_darling(e), lambda r: r.statistic,
        lambda r: r.pvalue, note="p-value: D'Agostino & Stephens (1986)")
    if exog is not None:
        add("Breusch-Pagan", lambda: breusch_pagan(e, exog, robust=True),
            lambda r: r.lm, lambda r: r.lm_pvalue, df=lambda r: r.df,
            note=lambda r: "Koenker studentised LM on 1 + " + " + ".join(r.regressors))
        add("Breusch-Pagan (F)", lambda: breusch_pagan(e, exog, robust=True),
            lambda r: r.f, lambda r: r.f_pvalue, df=lambda r: r.df,
            note=lambda r: f"F({r.df}, {r.n - r.df - 1})")
        if white:
            add("White", lambda: white_test(e, exog), lambda r: r.lm, lambda r: r.lm_pvalue,
                df=lambda r: r.df)
    else:
        for test in ("Breusch-Pagan", "Breusch-Pagan (F)") + (("White",) if white else ()):
            rows.append({"test": test, "statistic": np.nan, "pvalue": np.nan, "df": np.nan,
                             "null": _NULL[test], "verdict": "n/a", "note": "B and S not given"})
    add("Durbin-Watson", lambda: durbin_watson(e_time), lambda r: r.statistic,
        lambda r: r.pvalue,
        note=lambda r: f"rho {r.rho:.3g}; p-value large-sample normal approx.; {time_note}")
    add("Ljung-Box", lambda: ljung_box(e_time, lags), lambda r: r.statistic, lambda r: r.pvalue,
        df=lambda r: r.lags, note=lambda r: f"lags 1..{r.lags}; {time_note}")
    add("Trend", lambda: trend_test(e_time, t_sorted), lambda r: r.t, lambda r: r.pvalue,
        df=lambda r: r.n - 2, note=lambda r: f"slope {r.slope:.4g} per time unit (t statistic)")
    out = pd.DataFrame(rows, columns=["test", "statistic", "pvalue", "df", "null", "verdict",
                                      "note"])
    out.attrs["alpha"] = float(alpha)
    out.attrs["n"] = n
    return out
