"""Adequacy statistics checked against statsmodels and a published lack-of-fit example."""
import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
import statsmodels.formula.api as smf
from scipy import stats
from statsmodels.stats.anova import anova_lm

from perfmodel.errors import InputError
from perfmodel.stats import adequacy as aq

# SAS/STAT replicated example (also reproduced in Mathematica): 12 runs, 5 factors,
# one centre point replicated 4 times; linear model in x1..x5.
# Published lack-of-fit test: F = 22.0689, p = 0.0151209 (3 and 3 degrees of freedom).
SAS = np.array([
    [1, 10.0, 1.0, 100, 140, 6.0, 37.5], [2, 10.0, 1.0, 120, 180, 3.0, 28.5],
    [3, 10.0, 2.0, 100, 180, 3.0, 40.4], [4, 10.0, 2.0, 120, 140, 6.0, 48.2],
    [5, 15.0, 1.0, 100, 180, 6.0, 50.7], [6, 15.0, 1.0, 120, 140, 3.0, 28.9],
    [7, 15.0, 2.0, 100, 140, 3.0, 43.5], [8, 15.0, 2.0, 120, 180, 6.0, 64.5],
    [9, 12.5, 1.5, 110, 160, 4.5, 39.0], [9, 12.5, 1.5, 110, 160, 4.5, 40.3],
    [9, 12.5, 1.5, 110, 160, 4.5, 38.7], [9, 12.5, 1.5, 110, 160, 4.5, 39.7]])


def test_lack_of_fit_published_example():
    X = sm.add_constant(SAS[:, 1:6])
    y = SAS[:, 6]
    r = sm.OLS(y, X).fit()
    res = aq.lack_of_fit(y, r.fittedvalues, SAS[:, 0], n_params=6)
    assert res.F == pytest.approx(22.0689, abs=5e-5)
    assert res.pvalue == pytest.approx(0.0151209, abs=5e-8)
    assert (res.df_lof, res.df_pe, res.n_groups) == (3, 3, 9)
    # hand check of the pieces: pure error from the 4 centre runs only
    centre = y[SAS[:, 0] == 9]
    assert res.ss_pe == pytest.approx(np.sum((centre - centre.mean()) ** 2))
    assert res.ss_lof + res.ss_pe == pytest.approx(r.ssr)


def test_lack_of_fit_equals_anova_of_line_against_group_means():
    rng = np.random.default_rng(0)
    x = np.repeat(np.arange(1.0, 9.0), 4)
    y = 1 + 0.5 * x + 0.08 * x**2 + rng.normal(0, 0.2, x.size)
    d = pd.DataFrame({"x": x, "y": y})
    line = smf.ols("y ~ x", d).fit()
    means = smf.ols("y ~ C(x)", d).fit()
    ref = anova_lm(line, means)
    res = aq.lack_of_fit(y, line.fittedvalues, x, n_params=2)
    assert res.F == pytest.approx(ref["F"].iloc[1], rel=1e-10)
    assert res.pvalue == pytest.approx(ref["Pr(>F)"].iloc[1], rel=1e-8)
    assert res.pvalue < 1e-3  # the curvature is detected
    # a correct quadratic model shows no lack of fit at this sample size
    quad = smf.ols("y ~ x + I(x**2)", d).fit()
    assert aq.lack_of_fit(y, quad.fittedvalues, x, n_params=3).pvalue > 0.01


def test_weighted_lack_of_fit_equals_wls_f_test_of_line_against_group_means():
    """The weight scale's test: WLS of the line inside WLS of one mean per group."""
    rng = np.random.default_rng(2)
    x = np.repeat(np.arange(1.0, 9.0), 4)
    y = (1 + 0.5 * x + 0.08 * x**2) * np.exp(rng.normal(0, 0.05, x.size))
    w = 1.0 / y**2
    line = sm.WLS(y, sm.add_constant(x), weights=w).fit()
    means = sm.WLS(y, pd.get_dummies(x).to_numpy(float), weights=w).fit()
    F, p, _ = means.compare_f_test(line)  # self is the unrestricted model
    res = aq.lack_of_fit(y, line.fittedvalues, x, n_params=2, weights=w)
    assert res.F == pytest.approx(F, rel=1e-10)
    assert res.pvalue == pytest.approx(p, rel=1e-8)
    assert res.sse == pytest.approx(line.ssr, rel=1e-12)
    assert res.ss_pe == pytest.approx(means.ssr, rel=1e-10)
    with pytest.raises(InputError, match="weights must be finite and > 0"):
        aq.lack_of_fit(y, line.fittedvalues, x, n_params=2, weights=np.zeros_like(y))


def test_weight_fit_adequacy_uses_the_fit_residual():
    """SSE of a weight fit's lack-of-fit test is the fit's RSS; trends use (T - T_hat)/T."""
    from perfmodel.core.fit import fit_model
    from perfmodel.core.scale import WEIGHT

    df = _trace(c_kv=0.0, seed=4)
    fit = fit_model(df, "seed_id", relative="weight", n_starts=2)
    lof = aq.fit_lack_of_fit(fit, df)
    assert lof.sse == pytest.approx(fit.rss, rel=1e-9)
    y, yhat = aq.fit_scale_residuals(fit, df)
    np.testing.assert_allclose(y, df["duration_ms"], rtol=0)
    e = WEIGHT.residual(y, yhat)
    tr = aq.residual_trends(fit, df).set_index("variable")
    ref = aq.residual_trend(e, df["batch_size"].to_numpy(float), "B")
    assert tr.loc["B", "slope"] == pytest.approx(ref.slope, rel=1e-12)


def test_nested_f_and_lr_match_statsmodels():
    rng = np.random.default_rng(1)
    n = 120
    d = pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n), "c": rng.normal(size=n)})
    d["y"] = 1 + d.a + 0.3 * d.b + 0.1 * d.c + rng.normal(0, 1, n)
    small = smf.ols("y ~ a", d).fit()
    big = smf.ols("y ~ a + b + c", d).fit()
    F, p = aq.nested_f_test(small.ssr, int(small.df_resid), big.ssr, int(big.df_resid))
    ref = anova_lm(small, big)
    assert F == pytest.approx(ref["F"].iloc[1], rel=1e-10)
    assert p == pytest.approx(ref["Pr(>F)"].iloc[1], rel=1e-8)
    f2, p2, _ = big.compare_f_test(small)
    assert (F, p) == pytest.approx((f2, p2), rel=1e-10)
    lr, pl = aq.likelihood_ratio_test(small.ssr, big.ssr, n, 2)
    lr2, pl2, df2 = big.compare_lr_test(small)
    assert df2 == 2
    assert (lr, pl) == pytest.approx((lr2, pl2), rel=1e-10)


def test_information_criteria_differences_match_statsmodels():
    rng = np.random.default_rng(2)
    n = 80
    x = rng.uniform(0, 5, n)
    y = 2 + x + 0.2 * x**2 + rng.normal(0, 0.5, n)
    m1 = sm.OLS(y, sm.add_constant(x)).fit()
    m2 = sm.OLS(y, sm.add_constant(np.column_stack([x, x**2]))).fit()
    a1, _b1 = aq.information_criteria(m1.ssr, n, 2)
    a2, b2 = aq.information_criteria(m2.ssr, n, 3)
    # statsmodels counts the same k (constant included) and adds n (1 + log 2 pi)
    const = n * (1 + np.log(2 * np.pi))
    assert a1 + const == pytest.approx(m1.aic, rel=1e-12)
    assert b2 + const == pytest.approx(m2.bic, rel=1e-12)
    assert a2 - a1 == pytest.approx(m2.aic - m1.aic, rel=1e-10)


def test_residual_trend_matches_linregress():
    rng = np.random.default_rng(3)
    x = rng.uniform(0, 1000, 200)
    e = 1e-4 * x + rng.normal(0, 0.05, 200)
    t = aq.residual_trend(e, x, "ctx_sum")
    ref = stats.linregress(x, e)
    assert t.variable == "ctx_sum" and t.n == 200
    assert t.slope == pytest.approx(ref.slope, rel=1e-10)
    assert t.stderr == pytest.approx(ref.stderr, rel=1e-8)
    assert t.pvalue == pytest.approx(ref.pvalue, rel=1e-6)
    assert t.pvalue < 1e-6


def _trace(n_cfg=60, reps=3, c_kv=0.0, seed=0):
    """Replicated synthetic steps from seed_attn_kv with a chosen KV cost (known truth)."""
    from perfmodel.core.model import get_model

    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n_cfg):
        B = int(rng.integers(1, 33))
        pre = rng.random() < 0.4
        chunks = [int(rng.integers(16, 512))] + [1] * (B - 1) if pre else [1] * B
        ctx = rng.integers(0, int(rng.integers(16, 8000)), B).tolist()
        rows.append((B, sum(chunks), ";".join(map(str, chunks)), ";".join(map(str, ctx)),
                     f"cfg{i}"))
    base = pd.DataFrame(rows, columns=["batch_size", "total_tokens", "chunk_sizes",
                                       "context_lens", "config"])
    m = get_model("seed_attn_kv")
    th = {"tau_0": 2.0, "a_0": 0.05, "a_1": 0.01, "k_B": 0.5, "k_S": 0.01, "a_attn": 2e-6,
          "tau_B": 0.02,
              "tau_S": 1e-4, "c_kv": c_kv, "c_kv_mixed": 0.0}
    mu = m.predict(th, base)
    df = base.loc[base.index.repeat(reps)].reset_index(drop=True)
    df["duration_ms"] = np.repeat(mu, reps) * np.exp(0.02 * rng.standard_normal(len(df)))
    return df


def test_compare_nested_on_fits_detects_a_missing_kv_term():
    from perfmodel.core.fit import fit_model

    df = _trace(c_kv=2e-4)
    small = fit_model(df, "seed_id", n_starts=3)
    full = fit_model(df, "seed_attn_kv", n_starts=3)
    t = aq.compare_nested(small, full)
    assert t.df_diff == 3 and t.n == len(df)
    assert t.pvalue_f < 1e-6 and t.pvalue_lr < 1e-6
    # the pure-error lack-of-fit test sees the missing term in seed_id, not in the truth
    lof_small = aq.fit_lack_of_fit(small, df)
    lof_full = aq.fit_lack_of_fit(full, df)
    assert lof_small.pvalue < 1e-6 and lof_full.pvalue > 1e-3
    tr = aq.residual_trends(small, df)
    assert set(tr["variable"]) >= {"ctx_sum", "chunk_sd", "B", "S"}
    assert tr.set_index("variable").loc["ctx_sum", "pvalue"] < 1e-3
    info = aq.information_table({"seed_id": small, "seed_attn_kv": full})
    assert info["model"].iloc[0] == "seed_attn_kv" and info["delta_aic"].iloc[0] == 0
    assert info["akaike_weight"].sum() == pytest.approx(1.0)


def test_input_errors_name_the_problem():
    with pytest.raises(InputError, match="needs replicates"):
        aq.lack_of_fit([1, 2, 3], [1, 2, 3], ["a", "b", "c"], 1)
    with pytest.raises(InputError, match="more groups"):
        aq.lack_of_fit([1, 2, 3, 4], [1, 2, 3, 4], ["a", "a", "b", "b"], 2)
    with pytest.raises(InputError, match="yhat has 2 values"):
        aq.lack_of_fit([1, 2, 3], [1, 2], ["a", "a", "b"], 1)
    with pytest.raises(InputError, match="df_restricted"):
        aq.nested_f_test(2.0, 10, 1.0, 12)
    with pytest.raises(InputError, match="rss_full must be finite and > 0"):
        aq.likelihood_ratio_test(1.0, 0.0, 10, 1)
    with pytest.raises(InputError, match="constant"):
        aq.residual_trend([1.0, 2.0, 3.0], [1.0, 1.0, 1.0], "chunk_sd")
    with pytest.raises(InputError, match="FitResult"):
        aq.compare_nested(object(), object())
    with pytest.raises(InputError, match="non-empty mapping"):
        aq.information_table({})


def _biased_design(rng, repeats, ratio, sigma=0.1):
    """Groups with ``repeats[i]`` replicates of noise sd ``sigma`` around a mean, and a fitted
    value that misses each group's mean by b_g ~ N(0, ratio * sigma): (y, yhat, groups)."""
    c = len(repeats)
    g = np.repeat(np.arange(c), repeats)
    mean = rng.uniform(0, 5, c)
    y = mean[g] + rng.normal(0, sigma, g.size)
    yhat = (mean + rng.normal(0, ratio * sigma, c))[g]
    return y, yhat, g


@pytest.mark.parametrize("ratio", [0.0, 0.5, 1.5])
def test_lack_of_fit_effect_size_recovers_the_bias_sd_over_the_replicate_sd(ratio):
    """Known truth: each group's fitted value misses its mean by b_g ~ N(0, ratio * sigma)."""
    rng = np.random.default_rng(7)
    res = aq.lack_of_fit(*_biased_design(rng, np.full(2000, 3), ratio), n_params=2)
    # sampling sd of the estimate at c = 2000 groups is below 0.04 for these ratios
    assert res.bias_sd_ratio == pytest.approx(ratio, abs=0.12)
    assert res.bias_sd_ratio >= 0


def test_lack_of_fit_effect_size_is_scale_free_in_the_number_of_groups():
    """The same bias ratio gives a larger F with more replicates, not a larger effect size."""
    rng = np.random.default_rng(8)
    sizes = []
    for r in (2, 8):
        c = 1500
        g = np.repeat(np.arange(c), r)
        y = rng.normal(0, 1.0, g.size)
        yhat = rng.normal(0, 1.0, c)[g]
        res = aq.lack_of_fit(y, yhat, g, n_params=1)
        sizes.append((res.F, res.bias_sd_ratio))
    assert sizes[1][0] > 2 * sizes[0][0]  # F grows with the replicates
    assert sizes[0][1] == pytest.approx(1.0, abs=0.12) and sizes[1][1] == pytest.approx(1.0, abs=0.12)


@pytest.mark.parametrize("ratio", [0.5, 1.5])
@pytest.mark.parametrize("design", ["one to five repeats", "half singletons, half three"])
def test_lack_of_fit_effect_size_holds_for_unbalanced_groups(ratio, design):
    """Unequal repeats and singleton groups (no pure error of their own): r = n / groups still
    recovers the known bias-to-replicate sd ratio (simulated, 2000 groups)."""
    rng = np.random.default_rng(3)
    c = 2000
    r = (rng.integers(1, 6, c) if design == "one to five repeats"
         else np.where(rng.random(c) < 0.5, 1, 3))
    res = aq.lack_of_fit(*_biased_design(rng, r, ratio), n_params=2)
    assert res.bias_sd_ratio == pytest.approx(ratio, abs=0.15)


@pytest.mark.parametrize("ratio, c, r", [(0.0, 15, 3), (0.8, 15, 3), (1.5, 40, 2)])
def test_lack_of_fit_effect_size_interval_covers_the_known_ratio_at_its_level(ratio, c, r):
    """Known truth, balanced groups, fitted values that do not come from the data (the case the
    random-effects interval is exact for): over 1000 simulated designs the 0.9 interval holds
    the true ratio in 0.9 of them (3 Monte Carlo s.e.; at ratio 0 the clipped lower end is 0,
    so it holds it whenever the upper end is above 0, in all of them)."""
    rng = np.random.default_rng(11)
    held = []
    for _ in range(1000):
        res = aq.lack_of_fit(*_biased_design(rng, np.full(c, r), ratio), n_params=1)
        lo, hi = res.bias_sd_ratio_interval(0.9)
        assert lo <= res.bias_sd_ratio <= hi
        held.append(lo <= ratio <= hi)
    held = np.mean(held)
    if ratio == 0:
        assert held >= 0.9
    else:
        assert abs(held - 0.9) < 3 * np.sqrt(0.09 / 1000), held
    with pytest.raises(InputError, match="level"):
        res.bias_sd_ratio_interval(1.0)
