"""Tests of perfmodel.stats.uncertainty: intervals, bootstrap, bands (synthetic data with known truth)."""
from __future__ import annotations

import json
import sys

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import perfmodel.core.fit as fitmod
from perfmodel.core.fit import fit_model
from perfmodel.core.results import FitResult
from perfmodel.core.synthetic import default_truth, simulate_trace
from perfmodel.errors import FitError, InputError
from perfmodel.stats import uncertainty as U

TRUTH = {**default_truth("seed_id"), "a_0": 1.0, "tau_S": 0.02}


@pytest.fixture(scope="module")
def logfit():
    df = simulate_trace("seed_id", TRUTH, 300, noise="multiplicative", sigma=0.02, seed=11)
    return fit_model(df, relative="log"), df


@pytest.fixture(scope="module")
def absfit():
    df = simulate_trace("seed_id", TRUTH, 300, noise="gaussian", sigma=0.5, seed=5)
    return fit_model(df, relative="absolute"), df


# ---------------------------------------------------------------------------
# covariance and sandwich intervals
# ---------------------------------------------------------------------------

def test_covariance_intervals_match_conf_int_and_contain_estimate(logfit):
    fit, _ = logfit
    ci = U.covariance_intervals(fit, 0.05)
    ref = fit.conf_int(0.05)
    for name in fit.param_names:
        assert ci.loc[name, "lower"] == pytest.approx(ref[name][0], rel=1e-14)
        assert ci.loc[name, "upper"] == pytest.approx(ref[name][1], rel=1e-14)
    assert np.all(ci["lower"] < ci["estimate"]) and np.all(ci["estimate"] < ci["upper"])
    # a 99% interval is wider than a 95% one
    wide = U.covariance_intervals(fit, 0.01)
    assert np.all(wide["upper"] - wide["lower"] > ci["upper"] - ci["lower"])


@pytest.mark.parametrize("kind", ["HC0", "HC3", "HAC"])
def test_sandwich_matches_statsmodels_on_a_linear_model(kind):
    sm = pytest.importorskip("statsmodels.api")
    rng = np.random.default_rng(0)
    n = 200
    X = np.column_stack([np.ones(n), rng.uniform(0, 10, n), rng.normal(0, 3, n)])
    e = rng.normal(0, 1, n) * (1 + X[:, 1] / 3)
    e = np.convolve(e, [1.0, 0.6], mode="same")  # some autocorrelation for HAC
    y = X @ [1.0, 2.0, -0.5] + e
    ols = sm.OLS(y, X)
    if kind == "HAC":
        ref = ols.fit(cov_type="HAC", cov_kwds={"maxlags": 4}).cov_params()
        got = U.sandwich_cov(X, ols.fit().resid, "HAC", maxlags=4)
    else:
        ref = ols.fit(cov_type=kind).cov_params()
        got = U.sandwich_cov(X, ols.fit().resid, kind)
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-14)


def test_robust_covariance_intervals_contain_estimate(absfit):
    fit, _ = absfit
    for kind in ("HC3", "HAC"):
        ci = U.covariance_intervals(fit, cov_type=kind)
        assert np.all(ci["lower"] < ci["estimate"]) and np.all(ci["estimate"] < ci["upper"])
        assert ci.attrs["cov_type"] == kind


# ---------------------------------------------------------------------------
# profile likelihood
# ---------------------------------------------------------------------------

def test_profile_core_reproduces_t_interval_of_a_linear_model():
    """For a linear model the F-profile interval is exactly the t interval."""
    sm = pytest.importorskip("statsmodels.api")
    rng = np.random.default_rng(3)
    n = 60
    X = np.column_stack([np.ones(n), rng.uniform(0, 5, n)])
    y = X @ [2.0, 0.7] + rng.normal(0, 0.4, n)
    res = sm.OLS(y, X).fit()
    ref = res.conf_int(0.05)
    theta = res.params.copy()
    rss0 = float(res.ssr)
    s2 = rss0 / (n - 2)
    q = stats.f.ppf(0.95, 1, n - 2)

    def func(t, x):
        return x @ t

    def jac(t, x):
        return x

    for j in range(2):
        lo = U._profile_core(func, jac, X, y, None, theta, np.full(2, -np.inf),
                             np.full(2, np.inf), j, float(res.bse[j]),
                             lambda r: (r - rss0) / s2 - q, -1)
        hi = U._profile_core(func, jac, X, y, None, theta, np.full(2, -np.inf),
                             np.full(2, np.inf), j, float(res.bse[j]),
                             lambda r: (r - rss0) / s2 - q, +1)
        assert lo[0] == pytest.approx(ref[j, 0], rel=1e-6)
        assert hi[0] == pytest.approx(ref[j, 1], rel=1e-6)


def test_profile_intervals_contain_estimate_and_agree_with_covariance(logfit):
    fit, _ = logfit
    prof = U.profile_intervals(fit)
    cov = U.covariance_intervals(fit)
    assert np.all(prof["lower"] < prof["estimate"]) and np.all(prof["estimate"] < prof["upper"])
    # a well-determined model: the profile is close to the Wald interval
    ratio = (prof["upper"] - prof["lower"]) / (cov["upper"] - cov["lower"])
    assert np.all((ratio > 0.8) & (ratio < 1.25)), ratio
    chi = U.profile_intervals(fit, params=["tau_0"], threshold="chi2")
    assert chi.loc["tau_0", "lower"] < fit.params["tau_0"] < chi.loc["tau_0", "upper"]
    assert np.isnan(chi.loc["a_0", "lower"])  # not profiled


def test_profile_rise_is_quadratic_near_the_estimate_and_crosses_at_the_profile_ends(logfit):
    """Near a well-determined estimate the profile rise is ((c - theta)/se)^2 (the linear
    approximation), and at the ends of the F-profile interval it equals the F quantile."""
    fit, _ = logfit
    th, se = fit.params["tau_0"], fit.stderrs["tau_0"]
    r = U.profile_rise(fit, "tau_0", [th, th - 0.5 * se, th + 0.5 * se, th + 4 * se])
    assert r["rise"].iloc[0] == pytest.approx(0.0, abs=1e-6)
    assert r["rise"].iloc[1:3].to_numpy() == pytest.approx([0.25, 0.25], rel=0.15)
    assert list(r["excluded"]) == [False, False, False, True]
    assert r["threshold"].to_numpy() == pytest.approx(np.full(4, stats.f.ppf(0.95, 1, fit.dof)))
    ends = U.profile_intervals(fit, params=["tau_0"]).loc["tau_0", ["lower", "upper"]]
    at_ends = U.profile_rise(fit, "tau_0", ends.to_numpy(float))
    assert at_ends["rise"].to_numpy() == pytest.approx(at_ends["threshold"].to_numpy(), rel=1e-3)


def test_profile_rise_params_are_the_pinned_refits(logfit):
    """Each row's params hold the pinned value in its place, the estimate at the estimate, and
    their objective (the fit's log-scale residual sum of squares) rises by exactly the row's
    rise: a model at that point of the profile."""
    fit, _ = logfit
    names = list(fit.param_names)
    j = names.index("tau_0")
    th, se = fit.params["tau_0"], fit.stderrs["tau_0"]
    r = U.profile_rise(fit, "tau_0", [th, th + 3 * se])
    p0, p1 = r["params"]
    assert p0 == pytest.approx(np.asarray(fit.values, float), rel=1e-5)
    assert p1[j] == pytest.approx(th + 3 * se)
    assert not np.allclose(np.delete(p1, j), np.delete(p0, j))  # the others re-optimised
    y = np.asarray(fit.y, float)
    rss = lambda p: float(np.sum((np.log(fit.model.predict(p, fit.features)) - np.log(y)) ** 2))
    s2 = rss(p0) / (fit.n - len(names))
    assert (rss(p1) - rss(p0)) / s2 == pytest.approx(r["rise"].iloc[1], rel=1e-3)


def test_profile_rise_rejects_bad_input(logfit):
    fit, df = logfit
    with pytest.raises(InputError, match="param 'P_max'"):
        U.profile_rise(fit, "P_max", [1.0])
    with pytest.raises(InputError, match="values"):
        U.profile_rise(fit, "tau_0", [])
    with pytest.raises(InputError, match="values"):
        U.profile_rise(fit, "tau_0", [np.nan])
    with pytest.raises(InputError, match="bounds of k_B"):
        U.profile_rise(fit, "k_B", [-1.0])
    with pytest.raises(InputError, match="alpha"):
        U.profile_rise(fit, "tau_0", [1.0], alpha=2.0)
    hub = fit_model(df, relative="log", loss="huber", n_starts=1)
    with pytest.raises(InputError, match="squared loss"):
        U.profile_rise(hub, "tau_0", [1.0])


def test_profile_rejects_robust_loss_and_unknown_params(logfit):
    fit, df = logfit
    with pytest.raises(InputError, match="params"):
        U.profile_intervals(fit, params=["P_max"])
    hub = fit_model(df, relative="log", loss="huber", n_starts=1)
    with pytest.raises(InputError, match="squared loss"):
        U.profile_intervals(hub)


# ---------------------------------------------------------------------------
# percentile / BCa against scipy
# ---------------------------------------------------------------------------

def test_bca_matches_scipy_bootstrap_on_the_mean():
    x = np.random.default_rng(1).lognormal(0, 0.8, 40)  # skewed: BCa differs from percentile
    res = stats.bootstrap((x,), np.mean, n_resamples=2000, method="BCa",
                          confidence_level=0.9, rng=np.random.default_rng(2))
    dist = res.bootstrap_distribution
    jack = np.array([np.delete(x, i).mean() for i in range(x.size)])
    lo, hi, _z0, a = U.bca_interval(x.mean(), dist[:, None], jack[:, None], alpha=0.1)
    assert lo[0] == pytest.approx(res.confidence_interval.low, rel=1e-12)
    assert hi[0] == pytest.approx(res.confidence_interval.high, rel=1e-12)
    assert a[0] > 0  # right-skewed data: positive acceleration
    pct = stats.bootstrap((x,), np.mean, n_resamples=2000, method="percentile",
                          confidence_level=0.9, rng=np.random.default_rng(2))
    plo, phi_ = U.percentile_interval(pct.bootstrap_distribution[:, None], 0.1)
    assert plo[0] == pytest.approx(pct.confidence_interval.low, rel=1e-12)
    assert phi_[0] == pytest.approx(pct.confidence_interval.high, rel=1e-12)


def test_studentized_matches_arch_on_the_same_resamples():
    arch_bs = pytest.importorskip("arch.bootstrap")
    x = np.random.default_rng(1).lognormal(0, 0.8, 40)
    bs = arch_bs.IIDBootstrap(x, seed=3)
    ci = bs.conf_int(np.mean, reps=500, method="studentized", size=0.9,
                     std_err_func=lambda m, x: np.array([x.std() / np.sqrt(len(x))]))
    res, stud, base = bs._results, bs._studentized_results, bs._base
    se_star = (res - base) / stud
    sd = np.sqrt(((res - res.mean(0)) ** 2).mean(0))  # arch scales by the bootstrap sd
    lo, hi, used = U.studentized_interval(base, sd, res, se_star, 0.1)
    assert lo[0] == pytest.approx(ci[0, 0], rel=1e-12)
    assert hi[0] == pytest.approx(ci[1, 0], rel=1e-12)
    assert used[0] == 500


def test_studentized_bootstrap_on_a_fit(absfit):
    fit, _ = absfit
    b = U.bootstrap(fit, n_boot=40, scheme="wild", method="studentized", seed=0)
    assert b.se_type == "HC3" and b.se_samples.shape == b.samples.shape
    hc3 = U.covariance_intervals(fit, cov_type="HC3")
    np.testing.assert_allclose(b.se_hat, hc3["stderr"], rtol=1e-10)
    assert np.all(b.lower < fit.values) and np.all(fit.values < b.upper)
    assert np.all(b.lower >= fit.model.lower)
    with pytest.raises(InputError, match="se_type is only used by method 'studentized'"):
        U.bootstrap(fit, n_boot=5, se_type="HC3")


def test_bca_degenerate_gives_nan():
    lo, hi, z0, _ = U.bca_interval([0.0], np.ones((50, 1)), np.linspace(0, 1, 10)[:, None])
    assert np.isnan(lo[0]) and np.isnan(hi[0]) and not np.isfinite(z0[0])


# ---------------------------------------------------------------------------
# bootstrap
# ---------------------------------------------------------------------------

def test_bootstrap_seeded_reproducible_and_contains_estimate(logfit):
    fit, _ = logfit
    a = U.bootstrap(fit, n_boot=40, scheme="pairs", seed=3)
    b = U.bootstrap(fit, n_boot=40, scheme="pairs", seed=3)
    c = U.bootstrap(fit, n_boot=40, scheme="pairs", seed=4)
    np.testing.assert_array_equal(a.samples, b.samples)
    assert not np.array_equal(a.samples, c.samples)
    assert a.n_failed == 0 and a.samples.shape == (40, 7)
    assert np.all(a.lower < fit.values) and np.all(fit.values < a.upper)


def test_bootstrap_same_result_with_two_workers(logfit):
    fit, _ = logfit
    a = U.bootstrap(fit, n_boot=16, scheme="wild", seed=9)
    b = U.bootstrap(fit, n_boot=16, scheme="wild", seed=9, n_jobs=2)
    np.testing.assert_allclose(a.samples, b.samples, rtol=1e-12)


@pytest.mark.parametrize("scheme", ["residual", "wild", "block"])
def test_bootstrap_schemes_run_and_bracket_estimate(absfit, scheme):
    fit, _ = absfit
    b = U.bootstrap(fit, n_boot=40, scheme=scheme, seed=1)
    assert b.n_failed == 0
    assert np.all(b.lower <= fit.values) and np.all(fit.values <= b.upper)
    sd_ratio = b.stderr / fit.stderr
    assert np.all((sd_ratio > 0.4) & (sd_ratio < 2.5)), sd_ratio
    if scheme == "block":
        assert b.block_length >= 1 and "Politis" in b.block_length_rule
    if scheme == "wild":
        assert b.wild_weights == "rademacher"


def test_failed_fits_are_counted_and_listed(logfit, monkeypatch):
    fit, _ = logfit
    real = fitmod.fit_model
    calls = {"n": 0}

    def flaky(*args, **kw):
        calls["n"] += 1
        if calls["n"] % 3 == 0:
            raise FitError("forced failure")
        return real(*args, **kw)

    monkeypatch.setattr(fitmod, "fit_model", flaky)
    b = U.bootstrap(fit, n_boot=30, seed=0)
    assert b.n_failed == 10
    assert b.samples.shape[0] == 20
    assert [i for i, _ in b.failures] == [2, 5, 8, 11, 14, 17, 20, 23, 26, 29]
    assert all("forced failure" in r for _, r in b.failures)
    assert b.to_dict()["n_failed"] == 10

    def broken(*args, **kw):
        raise FitError("always")

    monkeypatch.setattr(fitmod, "fit_model", broken)
    with pytest.raises(FitError, match="all 5 resample fits failed"):
        U.bootstrap(fit, n_boot=5)


def test_nonconverged_fit_counts_as_failure(logfit, monkeypatch):
    fit, _ = logfit
    real = fitmod.fit_model

    def unconverged(*args, **kw):
        r = real(*args, **kw)
        r.success = False
        r.message = "the maximum number of function evaluations is exceeded"
        return r

    monkeypatch.setattr(fitmod, "fit_model", unconverged)
    with pytest.raises(FitError, match="maximum number of function evaluations"):
        U.bootstrap(fit, n_boot=3)


def test_bca_bootstrap_runs_with_grouped_jackknife(logfit):
    fit, _ = logfit
    b = U.bootstrap(fit, n_boot=60, method="bca", seed=2, jackknife_groups=20)
    assert b.jackknife["n_groups"] == 20 and "grouped" in b.jackknife["kind"]
    assert np.all(np.isfinite(b.acceleration)) and np.all(np.abs(b.acceleration) < 0.5)
    assert np.all(b.lower < b.upper)


# ---------------------------------------------------------------------------
# blocks
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("block", ["circular", "stationary"])
def test_block_indices_keep_blocks_contiguous(block):
    n, L = 101, 7.0
    idx = U.block_indices(n, L, block=block, rng=np.random.default_rng(0))
    assert idx.shape == (n,) and idx.min() >= 0 and idx.max() < n
    step_is_next = (np.diff(idx) % n) == 1
    if block == "circular":
        # positions k*L .. k*L+L-1 form one block of consecutive rows (mod n)
        within = np.ones(n - 1, bool)
        within[np.arange(int(L) - 1, n - 1, int(L))] = False
        assert np.all(step_is_next[within])
    else:
        # a block break happens with probability 1/L: about n/L breaks over many draws
        breaks = [np.sum((np.diff(U.block_indices(n, L, block=block, rng=s)) % n) != 1)
                  for s in range(200)]
        assert np.mean(breaks) == pytest.approx((n - 1) / L, rel=0.15)


def test_optimal_block_length_arch_and_fallback_agree_on_ar1(monkeypatch):
    rng = np.random.default_rng(0)
    e = np.zeros(4000)
    z = rng.standard_normal(4000)
    for t in range(1, e.size):
        e[t] = 0.6 * e[t - 1] + z[t]
    pytest.importorskip("arch")
    b_arch, rule = U.optimal_block_length(e, "stationary")
    assert "arch" in rule
    monkeypatch.setitem(sys.modules, "arch.bootstrap", None)  # import fails -> fallback
    b_fb, rule_fb = U.optimal_block_length(e, "stationary")
    assert "AR(1)" in rule_fb
    assert 0.5 < b_fb / b_arch < 2.0
    iid, _ = U.optimal_block_length(rng.standard_normal(4000), "circular")
    assert iid < b_fb


# ---------------------------------------------------------------------------
# serialisation, report, checks
# ---------------------------------------------------------------------------

def test_to_dict_is_json_safe_and_feeds_fit_report(logfit):
    fit, _ = logfit
    b = U.bootstrap(fit, n_boot=20, seed=0)
    d = b.to_dict()
    for k in ("scheme", "n_boot", "n_failed", "method", "param_names", "lower", "upper"):
        assert k in d
    json.dumps(d, allow_nan=False)
    back = U.BootstrapResult.from_dict(b.to_dict(include_samples=True))
    np.testing.assert_allclose(back.samples, b.samples)
    import copy

    f2 = U.attach_bootstrap(copy.deepcopy(fit), b)
    assert "[[Bootstrap]] pairs x 20 (0 failed), percentile intervals" in f2.fit_report()
    again = FitResult.from_json(f2.to_json())
    assert again.provenance["bootstrap"]["upper"] == d["upper"]


def test_input_checks_name_the_problem(logfit):
    fit, df = logfit
    with pytest.raises(InputError, match="scheme must be one of"):
        U.bootstrap(fit, n_boot=10, scheme="jackknife")
    with pytest.raises(InputError, match="n_boot must be an integer >= 2"):
        U.bootstrap(fit, n_boot=1)
    with pytest.raises(InputError, match="block_length is only used by scheme 'block'"):
        U.bootstrap(fit, n_boot=10, block_length=5)
    bare = FitResult.from_json(fit.to_json())
    with pytest.raises(InputError, match="carries no data"):
        U.bootstrap(bare, n_boot=10)
    # ... but the trace can be passed
    b = U.bootstrap(bare, df, n_boot=5, seed=0)
    assert b.samples.shape == (5, 7)
    with pytest.raises(InputError, match="alpha"):
        U.covariance_intervals(fit, alpha=1.5)


# ---------------------------------------------------------------------------
# bands
# ---------------------------------------------------------------------------

def _grid(S):
    S = np.asarray(S, float)
    return {"B": np.full(S.shape, 8.0), "S": S}


def test_bands_widen_away_from_the_data(logfit):
    fit, df = logfit
    s_max = df["total_tokens"].max()
    g = _grid([256.0, 512.0, 8 * s_max, 32 * s_max])
    cb = U.confidence_band(fit, g)
    rel = np.log(cb["upper"] / cb["lower"]).to_numpy()
    assert rel[2] > rel[1] and rel[3] > rel[2]
    assert np.all((cb["lower"] < cb["fit"]) & (cb["fit"] < cb["upper"]))
    pb = U.prediction_band(fit, g)
    assert np.all(pb["lower"] < cb["lower"]) and np.all(pb["upper"] > cb["upper"])
    # prediction band on the log scale: about +/- t*s inside the data
    s = np.sqrt(fit.rss / fit.dof)
    assert np.log(pb["upper"][0] / pb["fit"][0]) == pytest.approx(1.968 * s, rel=0.1)


def test_absolute_fit_band_and_dataframe_grid(absfit):
    fit, _ = absfit
    grid = pd.DataFrame({"batch_size": [4, 4, 4], "total_tokens": [64, 1024, 65536]})
    cb = U.confidence_band(fit, grid)
    width = (cb["upper"] - cb["lower"]).to_numpy()
    assert width[2] > width[1]
    assert list(cb.columns[:2]) == ["B", "S"]


def test_delta_and_bootstrap_bands_agree_on_well_specified_problem(logfit):
    fit, df = logfit
    boot = U.bootstrap(fit, n_boot=199, scheme="residual", seed=1)
    g = _grid(np.geomspace(16, df["total_tokens"].quantile(0.9), 6))
    d = U.confidence_band(fit, g)
    b = U.confidence_band(fit, g, method="bootstrap", boot=boot)
    ratio = np.log(b["upper"] / b["lower"]) / np.log(d["upper"] / d["lower"])
    assert np.all((ratio > 0.6) & (ratio < 1.6)), ratio
    pd_ = U.prediction_band(fit, g)
    pb = U.prediction_band(fit, g, method="bootstrap", boot=boot, seed=0)
    ratio = np.log(pb["upper"] / pb["lower"]) / np.log(pd_["upper"] / pd_["lower"])
    assert np.all((ratio > 0.8) & (ratio < 1.25)), ratio
    with pytest.raises(InputError, match="needs boot"):
        U.confidence_band(fit, g, method="bootstrap")


def test_relative_weight_fit_bootstrap_and_bands():
    df = simulate_trace("seed_id", TRUTH, 300, noise="heteroscedastic", sigma=0.6, seed=2)
    fit = fit_model(df, relative="weight", n_starts=2)
    b = U.bootstrap(fit, n_boot=30, scheme="wild", wild_weights="mammen", seed=0)
    assert b.n_failed == 0 and b.wild_weights == "mammen"
    assert np.all(b.lower <= fit.values) and np.all(fit.values <= b.upper)
    g = _grid([64.0, 512.0])
    cb, pb = U.confidence_band(fit, g), U.prediction_band(fit, g)
    assert np.all(pb["upper"] - pb["lower"] > cb["upper"] - cb["lower"])


def test_bootstrap_endpoint_mc_range_flags_endpoints_set_by_a_few_resamples():
    """A heavy upper tail (fits wandering along a flat direction) leaves the upper end undetermined."""
    from perfmodel.stats.uncertainty import BootstrapResult

    rng = np.random.default_rng(0)
    n = 49
    tight = rng.normal(10.0, 0.5, n)                     # well determined both ends
    heavy = np.concatenate([rng.normal(4.0, 0.3, n - 4), [40.0, 90.0, 300.0, 1000.0]])
    samples = np.column_stack([tight, heavy])
    lower, upper = np.percentile(samples, [2.5, 97.5], axis=0)
    b = BootstrapResult(param_names=["a", "k_B"], estimate=np.array([10.0, 4.0]),
                        samples=samples, lower=lower, upper=upper, method="percentile",
                        scheme="pairs", n_boot=n, n_failed=0, failures=[], alpha=0.05, seed=0,
                        relative="log", loss="linear")
    r = b.endpoint_mc_range()
    srt = np.sort(heavy)
    # q n = 47.8 +- 1.96 sqrt(49 0.975 0.025) = +-2.1: order statistics 45 .. 48 (0-based)
    assert r.loc["k_B", "upper_hi"] == srt[48] and r.loc["k_B", "upper_lo"] == srt[45]
    assert r.loc["a", "lower_lo"] <= lower[0] <= r.loc["a", "lower_hi"]
    nd = b.undetermined()
    assert nd.loc["k_B", "upper"] and not nd.loc["k_B", "lower"]
    assert not nd.loc["a"].any()
    with pytest.raises(InputError, match="level"):
        b.endpoint_mc_range(level=1.5)
    # every resample at a bound: a zero-width interval that is perfectly determined
    zero = BootstrapResult(param_names=["a_0"], estimate=np.zeros(1), samples=np.zeros((n, 1)),
                           lower=np.zeros(1), upper=np.zeros(1), method="percentile",
                           scheme="pairs", n_boot=n, n_failed=0, failures=[], alpha=0.05,
                           seed=0, relative="log", loss="linear")
    assert not zero.undetermined().to_numpy().any()
    # an endpoint whose Monte Carlo range exceeds the endpoint itself is not a number to print,
    # even inside a wide interval (range 3..15 around an upper end of about 10; width ~1000)
    s = np.concatenate([np.linspace(-1000.0, 2.0, n - 4), [3.0, 8.0, 12.0, 15.0]])
    lo_, hi_ = np.percentile(s, [2.5, 97.5])
    wide = BootstrapResult(param_names=["k"], estimate=np.ones(1), samples=s[:, None],
                           lower=np.array([lo_]), upper=np.array([hi_]), method="percentile",
                           scheme="pairs", n_boot=n, n_failed=0, failures=[], alpha=0.05,
                           seed=0, relative="log", loss="linear")
    r = wide.endpoint_mc_range().loc["k"]
    assert r["upper_hi"] - r["upper_lo"] > hi_ and r["upper_hi"] - r["upper_lo"] < 0.5 * (hi_ - lo_)
    assert wide.undetermined().loc["k", "upper"] and not wide.undetermined().loc["k", "lower"]


# ---------------------------------------------------------------------------
# clustered data: CR1 covariance and the cluster bootstrap
# ---------------------------------------------------------------------------


def test_cr1_matches_statsmodels_cluster_covariance_on_a_linear_model():
    sm = pytest.importorskip("statsmodels.api")
    rng = np.random.default_rng(2)
    n, G = 240, 30
    g = rng.integers(0, G, n)
    X = np.column_stack([np.ones(n), rng.uniform(0, 10, n)])
    y = X @ [1.0, 2.0] + rng.normal(0, 1, G)[g] + rng.normal(0, 0.5, n)
    ref = sm.OLS(y, X).fit(cov_type="cluster", cov_kwds={"groups": g})
    got = U.sandwich_cov(X, y - X @ ref.params, "CR1", groups=g)
    np.testing.assert_allclose(got, ref.cov_params(), rtol=1e-10, atol=1e-14)
    with pytest.raises(InputError, match="groups"):
        U.sandwich_cov(X, y - X @ ref.params, "CR1")


@pytest.fixture(scope="module")
def clustered():
    # 40 configurations replicated 10 times; log-scale configuration effect with ICC 0.8
    base = simulate_trace("seed_id", TRUTH, 40, noise="none", seed=21)
    g = np.repeat(np.arange(40), 10)
    df = base.iloc[g].reset_index(drop=True)
    df["step"] = np.arange(400)
    df["config"] = [f"c{k}" for k in g]
    rng = np.random.default_rng(22)
    df["duration_ms"] *= np.exp(rng.normal(0, 0.04, 40)[g] + rng.normal(0, 0.02, 400))
    return fit_model(df, relative="log", n_starts=2), df


def test_cluster_robust_intervals_are_wider_than_iid_ones_on_clustered_noise(clustered):
    fit, df = clustered
    cr1 = U.covariance_intervals(fit, cov_type="CR1", data=df, groups="config")
    hc0 = U.covariance_intervals(fit, cov_type="HC0", data=df)
    free = np.isfinite(cr1["stderr"]) & np.isfinite(hc0["stderr"])
    assert free.sum() >= 3
    assert np.median(cr1["stderr"][free] / hc0["stderr"][free]) > 1.5  # design effect ~ 8


def test_cluster_bootstrap_agrees_with_cr1_and_exceeds_pairs(clustered):
    fit, df = clustered
    cl = U.bootstrap(fit, df, n_boot=150, scheme="cluster", groups="config", seed=1)
    pr = U.bootstrap(fit, df, n_boot=150, scheme="pairs", seed=1)
    cr1 = U.covariance_intervals(fit, cov_type="CR1", data=df, groups="config")
    names = [n for n in ("tau_0", "a_1", "tau_B") if n not in fit.at_bound + fit.unidentified]
    idx = [fit.param_names.index(n) for n in names]

    def spread(b):  # robust sd: a few resamples of 40 clusters leave a_1 barely determined
        q75, q25 = np.percentile(b.samples[:, idx], [75, 25], axis=0)
        return (q75 - q25) / 1.349

    ratio_cr1 = spread(cl) / cr1["stderr"].to_numpy()[idx]
    assert np.all((ratio_cr1 > 0.5) & (ratio_cr1 < 2.0)), ratio_cr1
    assert np.median(spread(cl) / spread(pr)) > 1.5
    assert any("whole clusters" in n for n in cl.notes)


def test_cluster_scheme_needs_groups_and_only_it_takes_them(logfit):
    fit, df = logfit
    with pytest.raises(InputError, match="groups"):
        U.bootstrap(fit, df, n_boot=5, scheme="cluster")
    with pytest.raises(InputError, match="groups"):
        U.bootstrap(fit, df, n_boot=5, scheme="pairs", groups=np.zeros(len(df)))
    with pytest.raises(InputError, match="labels"):
        U.bootstrap(fit, df, n_boot=5, scheme="cluster", groups=[0, 1])


# bootstrap at scale: lazy seeds, Dask backend
# ---------------------------------------------------------------------------

def test_bootstrap_huge_n_boot_allocates_nothing_up_front(logfit, monkeypatch):
    """n_boot = 10**9: the resample seeds are drawn lazily, so stopping after a few
    resamples has used a few kB, not the ~45 MB/s of spawning every seed first."""
    import importlib
    import tracemalloc

    bmod = importlib.import_module("perfmodel.stats.uncertainty.bootstrap")

    fit, _ = logfit
    calls = []
    real = bmod._boot_task

    def few(job, item):
        calls.append(item[0])
        if len(calls) > 3:
            raise KeyboardInterrupt
        return real(job, item)

    monkeypatch.setattr(bmod, "_boot_task", few)
    tracemalloc.start()
    with pytest.raises(KeyboardInterrupt):
        U.bootstrap(fit, n_boot=10**9, seed=2)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert calls == [0, 1, 2, 3]
    assert peak < 20e6


def test_bootstrap_on_a_dask_local_cluster_equals_loky(logfit, local_cluster):
    fit, _ = logfit
    a = U.bootstrap(fit, n_boot=12, scheme="pairs", seed=9, method="bca", jackknife_groups=4)
    b = U.bootstrap(fit, n_boot=12, scheme="pairs", seed=9, method="bca", jackknife_groups=4,
                    backend="dask", scheduler=local_cluster.scheduler_address)
    np.testing.assert_array_equal(a.samples, b.samples)
    np.testing.assert_array_equal(a.lower, b.lower)
    np.testing.assert_array_equal(a.upper, b.upper)


def test_bootstrap_refuses_an_unknown_backend(logfit):
    fit, _ = logfit
    with pytest.raises(InputError, match="backend must be one of"):
        U.bootstrap(fit, n_boot=4, backend="spark")


def test_quantile_mc_range_brackets_the_order_statistic():
    # 40 draws, q = 0.05: q n = 2, half = 1.96 sqrt(40 .05 .95) = 2.70 -> ranks 0 and 5
    s = np.arange(40.0)[::-1]
    lo, hi = U.quantile_mc_range(s, 0.05)
    assert (lo, hi) == (0.0, 5.0)
    lo, hi = U.quantile_mc_range(s, 0.95)          # q n = 38 -> ranks 35 and 39 (clipped)
    assert (lo, hi) == (35.0, 39.0)
    lo2, hi2 = U.quantile_mc_range(np.c_[s, 2 * s], 0.05)   # column-wise
    assert list(lo2) == [0.0, 0.0] and list(hi2) == [5.0, 10.0]
    for bad in ({"q": 0.0}, {"q": 1.2}, {"level": 1.0}):
        with pytest.raises(InputError, match="quantile_mc_range"):
            U.quantile_mc_range(s, **{"q": 0.05, **bad})
    with pytest.raises(InputError, match="quantile_mc_range"):
        U.quantile_mc_range(np.empty(0), 0.05)


def test_quantile_mc_range_holds_the_true_quantile_as_the_binomial_count_says():
    # the range [x_(lo), x_(hi)] (0-based ranks) holds the true q-quantile exactly when the
    # count of draws below it, binomial(n, q), lies in [lo + 1, hi]; checked on 2000 sets of
    # standard normal draws against that probability (3 Monte Carlo s.e.): for 40 draws at
    # q = 0.05 the range starts at the smallest draw and holds it only ~86 % of the time,
    # for 400 draws about the nominal 95 %
    rng = np.random.default_rng(3)
    true = stats.norm.ppf(0.05)
    for n, lo_rank, hi_rank in ((40, 0, 5), (400, 11, 29)):
        lo_rank_seen, hi_rank_seen = U.quantile_mc_range(np.arange(float(n)), 0.05)
        assert (lo_rank_seen, hi_rank_seen) == (lo_rank, hi_rank)
        p = stats.binom.cdf(hi_rank, n, 0.05) - stats.binom.cdf(lo_rank, n, 0.05)
        held = np.mean([lo <= true <= hi for lo, hi in
                        (U.quantile_mc_range(rng.normal(size=n), 0.05) for _ in range(2000))])
        assert abs(held - p) < 3 * np.sqrt(p * (1 - p) / 2000), (n, held, p)


def test_share_below_counts_ties_half():
    s = np.array([1.0, 2.0, 2.0, 3.0])
    assert U.share_below(s, 2.0) == pytest.approx((1 + 3) / 8)
    assert U.share_below(s, 0.0) == 0.0 and U.share_below(s, 9.0) == 1.0
    two = U.share_below(np.c_[s, s + 1], [2.0, np.nan])
    assert two[0] == pytest.approx(0.5) and np.isnan(two[1])
    with pytest.raises(InputError, match="share_below"):
        U.share_below(np.empty(0), 1.0)
