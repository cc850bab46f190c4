"""Tests of perfmodel.stats.diagnostics (and the diagnostic plots of perfmodel.plotting).

Each statistic is compared with statsmodels/scipy called directly on the same
residuals (relative 1e-10), and with published values where they exist: R
results recorded in statsmodels' test suite (lmtest::bptest, car::durbinWatsonTest,
Box.test) and the Shapiro-Wilk example scipy's suite takes from the original paper.
"""
from __future__ import annotations

import warnings
from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
from numpy.testing import assert_allclose
from scipy import stats
from statsmodels.regression.linear_model import OLS
from statsmodels.stats import diagnostic as smd
from statsmodels.stats.stattools import durbin_watson as sm_dw
from statsmodels.stats.stattools import jarque_bera as sm_jb
from statsmodels.tools.tools import add_constant

from perfmodel import plotting
from perfmodel.errors import InputError
from perfmodel.stats import diagnostics as dg

RTOL = 1e-10


def _design(n, rng):
    B = rng.integers(1, 64, n).astype(float)
    S = B + rng.integers(0, 4000, n)
    return B, S


def _ar1(n, phi, rng):
    e = rng.normal(size=n)
    for i in range(1, n):
        e[i] += phi * e[i - 1]
    return e


@pytest.fixture(scope="module")
def cases():
    """Residual sets with known structure: iid, heteroscedastic, heavy-tailed, AR(1)."""
    rng = np.random.default_rng(20240611)
    n = 400
    B, S = _design(n, rng)
    return {
        "iid": (rng.normal(size=n), B, S),
        "hetero": (rng.normal(size=n) * (0.2 + S / 1000.0), B, S),
        "t3": (rng.standard_t(3, size=n), B, S),
        "ar1": (_ar1(n, 0.6, rng), B, S),
    }


CASES = ["iid", "hetero", "t3", "ar1"]


# ---------------------------------------------------------------- normality
@pytest.mark.parametrize("case", CASES)
def test_shapiro_matches_scipy(cases, case):
    e, _, _ = cases[case]
    r = dg.shapiro_wilk(e)
    ref = stats.shapiro(e)
    assert_allclose([r.statistic, r.pvalue], [ref.statistic, ref.pvalue], rtol=RTOL)
    assert (r.n, r.n_used, r.subsampled) == (e.size, e.size, False)


def test_shapiro_published_example():
    # Worked example from the original paper, as recorded in scipy's test suite
    # (scipy/stats/tests/test_morestats.py, TestShapiro.test_basic, x4):
    # W = 0.83467 (4 decimals), p = 0.000914 (5 decimals).
    x4 = [0.139, 0.157, 0.175, 0.256, 0.344, 0.413, 0.503, 0.577, 0.614,
          0.655, 0.954, 1.392, 1.557, 1.648, 1.690, 1.994, 2.174, 2.206,
          3.245, 3.510, 3.571, 4.354, 4.980, 6.084, 8.351]
    r = dg.shapiro_wilk(x4)
    assert abs(r.statistic - 0.83467) < 0.5e-4
    assert abs(r.pvalue - 0.000914) < 0.5e-5


def test_shapiro_subsamples_above_5000_without_warning():
    rng = np.random.default_rng(3)
    e = rng.standard_t(5, size=7321)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # scipy warns above 5000: we must not reach it
        r = dg.shapiro_wilk(e, seed=11)
    assert (r.n, r.n_used, r.subsampled) == (7321, 5000, True)
    idx = np.sort(np.random.default_rng(11).choice(7321, size=5000, replace=False))
    ref = stats.shapiro(e[idx])
    assert_allclose([r.statistic, r.pvalue], [ref.statistic, ref.pvalue], rtol=RTOL)
    assert dg.shapiro_wilk(e, seed=11) == r
    assert dg.shapiro_wilk(e, seed=12).statistic != r.statistic


def test_shapiro_max_n_argument():
    e = np.random.default_rng(0).normal(size=300)
    r = dg.shapiro_wilk(e, max_n=100)
    assert r.n_used == 100 and r.subsampled
    for bad in (2, 5001, 10.0, True):
        with pytest.raises(InputError, match="max_n"):
            dg.shapiro_wilk(e, max_n=bad)


@pytest.mark.parametrize("case", CASES)
def test_jarque_bera_matches_scipy_and_statsmodels(cases, case):
    e, _, _ = cases[case]
    r = dg.jarque_bera(e)
    ref = stats.jarque_bera(e)
    jb, jbp, skew, kurt = sm_jb(e)
    assert_allclose([r.statistic, r.pvalue], [ref.statistic, ref.pvalue], rtol=RTOL)
    assert_allclose([r.statistic, r.pvalue, r.skew, r.kurtosis], [jb, jbp, skew, kurt],
                    rtol=RTOL)


@pytest.mark.parametrize("case", CASES + ["uniform", "small"])
def test_anderson_matches_scipy_and_statsmodels(cases, case):
    rng = np.random.default_rng(5)
    if case == "uniform":
        e = rng.uniform(size=60)
    elif case == "small":
        e = rng.normal(size=12)
    else:
        e = cases[case][0]
    r = dg.anderson_darling(e)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy 1.17 FutureWarning without `method`
        a2_scipy = stats.anderson(e, dist="norm").statistic
    with np.errstate(divide="ignore"):
        a2_sm, p_sm = smd.normal_ad(np.asarray(e))
    assert_allclose(r.statistic, a2_scipy, rtol=RTOL)
    # independent log-space evaluation of A^2 = -n - mean((2i-1)(log F_i + log(1-F_{n+1-i})))
    z = np.sort((e - np.mean(e)) / np.std(e, ddof=1))
    i = np.arange(1, z.size + 1)
    a2 = -z.size - np.mean((2 * i - 1) * (stats.norm.logcdf(z) + stats.norm.logsf(z[::-1])))
    assert_allclose(r.statistic, a2, rtol=RTOL)
    if case == "t3":
        # statsmodels computes log(1 - F) and overflows to inf for a far outlier
        assert np.isinf(a2_sm) and np.isfinite(r.statistic) and r.pvalue < 1e-30
    else:
        assert_allclose(r.statistic, a2_sm, rtol=RTOL)
        assert_allclose(r.pvalue, p_sm, rtol=RTOL, atol=1e-300)


def test_anderson_pvalue_branches_and_extremes():
    # The four branches of D'Agostino & Stephens' formula meet continuously
    # (to the table's rounding) and extreme samples give p = 0, not NaN.
    n = 10**6
    for a in (0.2, 0.34, 0.6):
        lo, hi = dg._ad_normal_pvalue(a - 1e-9, n), dg._ad_normal_pvalue(a + 1e-9, n)
        assert abs(lo - hi) < 2e-3
    e = np.random.default_rng(1).exponential(size=6000) ** 3
    r = dg.anderson_darling(e)
    assert np.isfinite(r.statistic) and r.pvalue == 0.0


# ---------------------------------------------------------------- heteroscedasticity
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("robust", [True, False])
def test_breusch_pagan_matches_statsmodels(cases, case, robust):
    e, B, S = cases[case]
    r = dg.breusch_pagan(e, np.column_stack([B, S]), robust=robust)
    ref = smd.het_breuschpagan(e, add_constant(np.column_stack([B, S])), robust=robust)
    assert_allclose([r.lm, r.lm_pvalue, r.f, r.f_pvalue], ref, rtol=RTOL)
    assert (r.df, r.n, r.robust, r.regressors) == (2, e.size, robust, ("x0", "x1"))
    assert (r.statistic, r.pvalue) == (r.lm, r.lm_pvalue)


def test_breusch_pagan_R_reference_macrodata():
    # R lmtest::bptest on the growth-rate regression of statsmodels' macrodata, as
    # recorded in statsmodels/stats/tests/test_diagnostic.py (TestDiagnosticG):
    # studentize=TRUE: BP = 0.709924388395087, p = 0.701199952134347;
    # studentize=FALSE: BP = 1.302014063483341, p = 0.5215203247110649.
    from statsmodels.datasets import macrodata

    d = macrodata.load_pandas().data
    y = 400 * np.diff(np.log(d["realinv"].to_numpy()))
    g = 400 * np.diff(np.log(d["realgdp"].to_numpy()))
    lint = d["realint"].to_numpy()[:-1]
    res = OLS(y, add_constant(np.c_[g, lint])).fit()
    assert_allclose(res.params, [-9.48167277465485, 4.3742216647032, -0.613996969478989],
                    rtol=1e-12)
    r = dg.breusch_pagan(res.resid, {"gdp_growth": g, "realint": lint})
    assert_allclose([r.lm, r.lm_pvalue], [0.709924388395087, 0.701199952134347], rtol=1e-10)
    r0 = dg.breusch_pagan(res.resid, {"gdp_growth": g, "realint": lint}, robust=False)
    assert_allclose([r0.lm, r0.lm_pvalue], [1.302014063483341, 0.5215203247110649],
                    rtol=1e-10)
    assert r.regressors == ("gdp_growth", "realint")


def test_breusch_pagan_detects_variance_growing_with_S(cases):
    e, B, S = cases["hetero"]
    assert dg.breusch_pagan(e, {"B": B, "S": S}).lm_pvalue < 1e-6


def test_breusch_pagan_drops_collinear_and_constant_columns():
    # decode-only trace: S == B, so [1, B, S] has rank 2; a constant column adds nothing
    rng = np.random.default_rng(2)
    B = rng.integers(1, 128, 300).astype(float)
    e = rng.normal(size=300) * (1 + B / 50)
    r = dg.breusch_pagan(e, {"B": B, "S": B.copy(), "k": np.full(300, 7.0)})
    ref = smd.het_breuschpagan(e, add_constant(B))
    assert r.df == 1 and r.regressors == ("B",)
    assert_allclose([r.lm, r.lm_pvalue, r.f, r.f_pvalue], ref, rtol=RTOL)
    with pytest.raises(InputError, match="exog.*no non-constant"):
        dg.breusch_pagan(e, np.ones((300, 2)))


@pytest.mark.parametrize("case", CASES)
def test_white_matches_statsmodels(cases, case):
    e, B, S = cases[case]
    r = dg.white_test(e, {"B": B, "S": S})
    ref = smd.het_white(e, add_constant(np.column_stack([B, S])))
    assert_allclose([r.lm, r.lm_pvalue, r.f, r.f_pvalue], ref, rtol=RTOL)
    assert r.df == 5


# ---------------------------------------------------------------- time order
@pytest.mark.parametrize("case", CASES)
def test_durbin_watson_matches_statsmodels(cases, case):
    e = cases[case][0]
    r = dg.durbin_watson(e)
    assert_allclose(r.statistic, sm_dw(e), rtol=RTOL)
    assert_allclose(r.rho, 1 - r.statistic / 2, rtol=RTOL)
    z = np.sqrt(e.size) * (1 - r.statistic / 2)
    assert_allclose(r.pvalue, 2 * stats.norm.sf(abs(z)), rtol=RTOL)


def test_durbin_watson_R_reference():
    # R car::durbinWatsonTest values recorded in statsmodels/stats/tests/test_statstools.py
    x = np.array([-0.1184, -1.3403, 0.0063, -0.612, -0.3869, -0.2313, -2.8485, -0.2167,
                  0.4153, 1.8492, -0.3706, 0.9726, -0.1501, -0.0337, -1.4423, 1.2489,
                  0.9182, -0.2331, -0.6182, 0.183])
    assert_allclose(dg.durbin_watson(x).statistic, 1.95298958377419, rtol=1e-13)
    assert_allclose(dg.durbin_watson(x**2).statistic, 1.848802400319998, rtol=1e-13)
    assert_allclose(dg.durbin_watson(x[1:] + 0.5 * x[:-1]).statistic, 1.09897993228779,
                    rtol=1e-13)


def test_durbin_watson_detects_ar1(cases):
    r = dg.durbin_watson(cases["ar1"][0])
    assert r.pvalue < 1e-6 and 0.45 < r.rho < 0.75
    assert dg.durbin_watson(cases["iid"][0]).pvalue > 0.01


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("lags", [None, 1, 4, 20])
def test_ljung_box_matches_statsmodels(cases, case, lags):
    e = cases[case][0]
    r = dg.ljung_box(e, lags)
    ref = smd.acorr_ljungbox(e, lags=lags or 10, return_df=True).iloc[-1]
    assert_allclose([r.statistic, r.pvalue], [ref["lb_stat"], ref["lb_pvalue"]], rtol=RTOL)
    assert r.lags == (lags or 10)


def test_ljung_box_R_reference_macrodata():
    # R: Box.test(residuals(fm), lag = 4, type = "Ljung-Box") -> 5.23587172795227,
    # p = 0.263940335284713 (statsmodels/stats/tests/test_diagnostic.py, TestDiagnosticG)
    from statsmodels.datasets import macrodata

    d = macrodata.load_pandas().data
    y = 400 * np.diff(np.log(d["realinv"].to_numpy()))
    g = 400 * np.diff(np.log(d["realgdp"].to_numpy()))
    res = OLS(y, add_constant(np.c_[g, d["realint"].to_numpy()[:-1]])).fit()
    r = dg.ljung_box(res.resid, 4)
    assert_allclose([r.statistic, r.pvalue], [5.23587172795227, 0.263940335284713],
                    rtol=1e-10)


@pytest.mark.parametrize("case", CASES)
def test_trend_matches_scipy_and_statsmodels(cases, case):
    e = cases[case][0]
    rng = np.random.default_rng(4)
    for order in (None, np.cumsum(rng.exponential(0.05, e.size))):
        t = np.arange(e.size, dtype=float) if order is None else order
        r = dg.trend_test(e, order)
        lr = stats.linregress(t, e)
        ols = OLS(e, add_constant(t)).fit()
        assert_allclose([r.slope, r.intercept, r.stderr, r.pvalue],
                        [lr.slope, lr.intercept, lr.stderr, lr.pvalue], rtol=RTOL)
        assert_allclose([r.t, r.pvalue], [ols.tvalues[1], ols.pvalues[1]], rtol=RTOL)


def test_trend_detects_drift():
    rng = np.random.default_rng(8)
    e = rng.normal(size=500) + 0.004 * np.arange(500)
    r = dg.trend_test(e)
    assert r.pvalue < 1e-6 and abs(r.slope - 0.004) < 0.001


# ---------------------------------------------------------------- the table
def test_residual_table_rows_and_verdicts(cases):
    e, B, S = cases["hetero"]
    tab = dg.residual_table(e, B, S, white=True)
    assert list(tab["test"]) == ["Shapiro-Wilk", "Jarque-Bera", "Anderson-Darling",
                                 "Breusch-Pagan", "Breusch-Pagan (F)", "White",
                                 "Durbin-Watson", "Ljung-Box", "Trend"]
    assert ((tab["pvalue"] < 0.05) == (tab["verdict"] == "reject")).all()
    row = tab.set_index("test")
    assert_allclose(row.loc["Breusch-Pagan", "statistic"],
                    smd.het_breuschpagan(e, add_constant(np.c_[B, S]))[0], rtol=RTOL)
    assert row.loc["Breusch-Pagan", "verdict"] == "reject"
    assert_allclose(row.loc["Durbin-Watson", "statistic"], sm_dw(e), rtol=RTOL)
    assert tab.attrs == {"alpha": 0.05, "n": e.size}
    strict = dg.residual_table(e, B, S, alpha=1e-12)
    assert ((strict["pvalue"] < 1e-12) == (strict["verdict"] == "reject")).all()
    assert (strict["verdict"] == "reject").sum() < (tab["verdict"] == "reject").sum()


def test_residual_table_order_sorts_time_tests(cases):
    e, B, S = cases["ar1"]
    perm = np.random.default_rng(0).permutation(e.size)
    shuffled = dg.residual_table(e[perm], B[perm], S[perm], order=perm).set_index("test")
    direct = dg.residual_table(e, B, S).set_index("test")
    for test in ("Durbin-Watson", "Ljung-Box", "Trend"):
        assert_allclose(shuffled.loc[test, "statistic"], direct.loc[test, "statistic"],
                        rtol=1e-12)
    unsorted = dg.residual_table(e[perm], B[perm], S[perm]).set_index("test")
    assert unsorted.loc["Durbin-Watson", "pvalue"] > 1e-3 > direct.loc["Durbin-Watson",
                                                                         "pvalue"]


def test_residual_table_accepts_fitresult_like_and_features(cases):
    e, B, S = cases["iid"]
    ref = dg.residual_table(e, B, S)
    fit = SimpleNamespace(residuals=e, features={"B": B, "S": S})
    assert ref.equals(dg.residual_table(fit))
    assert ref.equals(dg.residual_table(e, {"B": B, "S": S}))


def test_residual_table_marks_tests_that_cannot_run():
    e = np.random.default_rng(1).normal(size=50)
    tab = dg.residual_table(e, np.full(50, 4.0), np.full(50, 4096.0)).set_index("test")
    assert tab.loc["Breusch-Pagan", "verdict"] == "n/a"
    assert "no non-constant column" in tab.loc["Breusch-Pagan", "note"]
    assert np.isnan(tab.loc["Breusch-Pagan", "pvalue"])
    assert dg.residual_table(e).set_index("test").loc["Breusch-Pagan", "note"] == \
        "B and S not given"


# ---------------------------------------------------------------- input checks
def test_nan_resid_names_argument_and_rows():
    e = np.random.default_rng(0).normal(size=30)
    e[[3, 17]] = np.nan
    for fn in (dg.shapiro_wilk, dg.jarque_bera, dg.anderson_darling, dg.durbin_watson,
               dg.ljung_box, dg.trend_test):
        with pytest.raises(InputError, match=r"`resid`.*rows \[3, 17\] \(2 of 30\)"):
            fn(e)


def test_mismatched_lengths_and_short_inputs():
    rng = np.random.default_rng(0)
    e = rng.normal(size=30)
    with pytest.raises(InputError, match="`exog` has 29 rows, expected 30"):
        dg.breusch_pagan(e, rng.normal(size=(29, 2)))
    with pytest.raises(InputError, match=r"`exog\['S'\]` has length 10"):
        dg.breusch_pagan(e, {"B": rng.normal(size=30), "S": rng.normal(size=10)})
    with pytest.raises(InputError, match="`order` has length 5"):
        dg.trend_test(e, np.arange(5))
    with pytest.raises(InputError, match="`S` has length 3"):
        dg.residual_table(e, e, e[:3])
    with pytest.raises(InputError, match="at least 3"):
        dg.shapiro_wilk([1.0, 2.0])
    with pytest.raises(InputError, match="at least 8"):
        dg.anderson_darling(np.arange(5.0))
    with pytest.raises(InputError, match="constant"):
        dg.jarque_bera(np.ones(20))
    with pytest.raises(InputError, match="`lags`"):
        dg.ljung_box(e, 30)
    with pytest.raises(InputError, match="1-D"):
        dg.durbin_watson(np.ones((4, 4)))
    with pytest.raises(InputError, match="`robust`"):
        dg.breusch_pagan(e, e, robust="yes")
    with pytest.raises(InputError, match="both `B` and `S`"):
        dg.residual_table(e, B=e)


# ---------------------------------------------------------------- plots (Agg)
def test_plots_take_and_return_ax(cases):
    e, _B, S = cases["t3"]
    fig, axes = plt.subplots(1, 3)
    try:
        assert plotting.qq_plot(e, ax=axes[0]) is axes[0]
        assert plotting.residuals_vs(S, e, ax=axes[1], xlabel="S (tokens)") is axes[1]
        assert plotting.acf_plot(e, ax=axes[2], lags=20) is axes[2]
        assert axes[1].get_xlabel() == "S (tokens)"
        # QQ points are the ordered standardised residuals against normal quantiles
        y = axes[0].lines[0].get_ydata()
        z = np.sort((e - e.mean()) / e.std(ddof=1))
        assert_allclose(y, z, rtol=1e-12)
        # ACF bars equal statsmodels' acf at lags 1..20
        from matplotlib.collections import LineCollection
        from statsmodels.tsa.stattools import acf

        bars = next(c for c in axes[2].collections if isinstance(c, LineCollection))
        ys = [seg[1][1] for seg in bars.get_segments()]
        assert_allclose(ys, acf(e, nlags=20)[1:], rtol=1e-10)
    finally:
        plt.close(fig)
    ax = plotting.qq_plot(e)
    assert ax.figure is not None
    plt.close(ax.figure)
    with pytest.raises(InputError, match="`x` has length"):
        plotting.residuals_vs(S[:5], e)
    with pytest.raises(InputError, match="`ax`"):
        plotting.qq_plot(e, ax="not an axes")


def test_qq_reference_is_identity_for_standardised_and_quartile_line_otherwise(cases):
    e, _B, _S = cases["t3"]
    fig, axes = plt.subplots(1, 2)
    try:
        plotting.qq_plot(e, ax=axes[0])
        ref = axes[0].lines[1]
        assert_allclose(ref.get_ydata(), ref.get_xdata(), rtol=0, atol=0)
        plotting.qq_plot(e * 5.0 + 3.0, ax=axes[1], standardize=False)
        ref = axes[1].lines[1]
        slope = np.diff(ref.get_ydata())[0] / np.diff(ref.get_xdata())[0]
        assert slope > 2.0  # the quartile line follows the raw scale, not y = x
    finally:
        plt.close(fig)


def test_log_axis_ticks_labels_a_short_log_axis():
    fig, ax = plt.subplots()
    try:
        ax.bar([0, 1, 2], [4.0, 11.0, 55.0])
        ax.set_yscale("log")
        ax.set_ylim(3.0, 70.0)
        assert plotting.log_axis_ticks(ax) is ax
        assert_allclose(ax.get_yticks(), [5.0, 10.0, 20.0, 50.0])
        labels = [ax.yaxis.get_major_formatter()(v, i) for i, v in enumerate(ax.get_yticks())]
        assert labels == ["5", "10", "20", "50"]
        with pytest.raises(InputError, match="`axis`"):
            plotting.log_axis_ticks(ax, axis="z")
        ax.set_yscale("linear")
        ax.set_ylim(-1.0, 1.0)
        with pytest.raises(InputError, match="positive finite limits"):
            plotting.log_axis_ticks(ax)
    finally:
        plt.close(fig)


def _tick_labels(axis):
    return [axis.get_major_formatter()(v, i) for i, v in enumerate(axis.get_majorticklocs())]


def test_log_axis_ticks_plain_decades_and_powers_of_two():
    fig, ax = plt.subplots()
    try:
        # a long decade axis, every third decade labelled, exponents written plainly
        ax.semilogy([1, 2], [1e-15, 1.0])
        ax.set_ylim(3e-16, 3.0)
        plotting.log_axis_ticks(ax, steps=(1,), every=3)
        assert_allclose(ax.get_yticks(), [1e-15, 1e-12, 1e-9, 1e-6, 1e-3, 1.0])
        assert _tick_labels(ax.yaxis) == ["1e-15", "1e-12", "1e-9", "1e-6", "0.001", "1"]
        assert_allclose(ax.yaxis.get_minorticklocs(),
                        [1e-14, 1e-13, 1e-11, 1e-10, 1e-8, 1e-7, 1e-5, 1e-4, 1e-2, 1e-1])
        assert ax.yaxis.get_minor_formatter()(1e-14, 0) == ""
        # base 2: every power of two in plain digits, no $2^{k}$
        ax.set_xscale("log", base=2)
        ax.set_xlim(0.9, 300)
        plotting.log_axis_ticks(ax, "x", base=2)
        assert_allclose(ax.get_xticks(), [1, 2, 4, 8, 16, 32, 64, 128, 256])
        assert _tick_labels(ax.xaxis) == ["1", "2", "4", "8", "16", "32", "64", "128", "256"]
        plotting.log_axis_ticks(ax, "x", base=2, every=2)
        assert _tick_labels(ax.xaxis) == ["1", "4", "16", "64", "256"]
        # large decades
        ax.set_xscale("log", base=10)
        ax.set_xlim(50, 2e6)
        plotting.log_axis_ticks(ax, "x", steps=(1,))
        assert _tick_labels(ax.xaxis) == ["100", "1000", "10000", "100000", "1e6"]
        fig.canvas.draw()
        assert not any("$" in t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels())
        for bad in ({"base": 3}, {"base": True}, {"steps": (0.5,)}, {"steps": (1, 10)},
                    {"steps": ()}, {"steps": "a"}, {"every": 0}, {"every": 1.5}):
            with pytest.raises(InputError):
                plotting.log_axis_ticks(ax, "x", **bad)
    finally:
        plt.close(fig)
