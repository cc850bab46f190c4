"""Tests of perfmodel.core.scale: one definition of each fit scale, checked against the fit itself."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from perfmodel.core import fit as fitmod
from perfmodel.core.fit import fit_model
from perfmodel.core.model import get_model
from perfmodel.core.scale import ABSOLUTE, LOG, SCALES, WEIGHT, FitScale, get_scale, scale_of
from perfmodel.core.synthetic import default_truth, simulate_trace
from perfmodel.errors import InputError

NAMES = list(SCALES)


def _y_mu(n=50, seed=0):
    rng = np.random.default_rng(seed)
    mu = rng.uniform(5, 100, n)
    return mu * np.exp(rng.normal(0, 0.05, n)), mu


@pytest.mark.parametrize("name", NAMES)
def test_inverse_rebuilds_the_data(name):
    y, mu = _y_mu()
    s = get_scale(name)
    np.testing.assert_allclose(s.inverse(mu, s.residual(y, mu)), y, rtol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_jacobian_factor_is_minus_the_derivative_of_the_residual(name):
    y, mu = _y_mu()
    s = get_scale(name)
    h = 1e-6 * mu
    d = (s.residual(y, mu + h) - s.residual(y, mu - h)) / (2 * h)
    np.testing.assert_allclose(-d, s.jacobian_factor(mu, y), rtol=1e-7)
    J = np.column_stack([np.ones_like(mu), mu])
    np.testing.assert_allclose(s.jacobian(J, mu, y), J * s.jacobian_factor(mu, y)[:, None],
                               rtol=1e-15)
    # a new step: y = mu
    np.testing.assert_allclose(s.jacobian_factor(mu), s.jacobian_factor(mu, mu))


@pytest.mark.parametrize("name", NAMES)
def test_regression_residual_is_the_scale_residual(name):
    """sqrt(w) (func - target), what fit_curve minimises, is minus the scale's residual."""
    s = get_scale(name)
    m = get_model("seed_id")
    rng = np.random.default_rng(1)
    f = {"B": rng.integers(1, 64, 40).astype(float), "S": rng.integers(64, 2048, 40).astype(float)}
    th = m.clip(np.array(list(default_truth("seed_id").values())))
    mu = m.predict(th, f)
    y = mu * np.exp(rng.normal(0, 0.1, mu.size))
    func, jac = s.regression(m._predict, m._jacobian)
    w = s.weights(y)
    sw = 1.0 if w is None else np.sqrt(w)
    np.testing.assert_allclose(sw * (func(th, f) - s.target(y)), -s.residual(y, mu),
                               rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(s.link(mu), func(th, f), rtol=1e-15)
    # the regression's Jacobian times sqrt(w) is the Jacobian on the fit scale
    np.testing.assert_allclose(sw * jac(th, f) if w is None else sw[:, None] * jac(th, f),
                               s.jacobian(m.jacobian(th, f), mu, y), rtol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_the_fit_defines_the_scale(name):
    """The RSS fit_model reports is the sum of the scale's squared residuals."""
    df = simulate_trace("seed_id", default_truth("seed_id"), 300, noise="multiplicative",
                        sigma=0.05, seed=3)
    fit = fit_model(df, relative=name, n_starts=2)
    assert scale_of(fit) is SCALES[name]
    e = SCALES[name].residual(fit.y, fit.fitted)
    assert float(e @ e) == pytest.approx(fit.rss, rel=1e-10)
    assert fitmod.RELATIVE == tuple(SCALES)


def test_weight_means_the_error_relative_to_the_measured_time():
    y, mu = np.array([13.0]), np.array([10.0])
    assert WEIGHT.residual(y, mu)[0] == pytest.approx(3.0 / 13.0, rel=1e-15)
    assert LOG.residual(y, mu)[0] == pytest.approx(np.log(1.3), rel=1e-15)
    assert ABSOLUTE.residual(y, mu)[0] == pytest.approx(3.0)
    np.testing.assert_allclose(WEIGHT.weights(y), 1.0 / 169.0)
    np.testing.assert_allclose(WEIGHT.weights(y, np.array([2.0])), 2.0 / 169.0)
    assert LOG.weights(y) is None and ABSOLUTE.weights(y) is None


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dof", [None, 7])
def test_quantile_and_cdf_invert_each_other(name, dof):
    s = get_scale(name)
    mu, sd = np.array([10.0, 50.0, 200.0]), np.array([0.02, 0.1, 0.2])
    if name == "absolute":
        sd = sd * mu
    for q in (0.05, 0.5, 0.9, 0.99):
        t = s.quantile(mu, sd, q, dof)
        np.testing.assert_allclose(s.cdf(t, mu, sd, dof), q, rtol=1e-10)
    np.testing.assert_allclose(s.quantile(mu, sd, 0.5, dof), mu, rtol=1e-15)
    assert np.all(np.diff([s.quantile(mu, sd, q, dof) for q in (0.1, 0.5, 0.9)], axis=0) > 0)


def test_log_quantile_is_the_lognormal_quantile():
    mu, sd = 20.0, 0.07
    for q in (0.1, 0.5, 0.95):
        ref = stats.lognorm(s=sd, scale=mu).ppf(q)
        assert LOG.quantile(mu, sd, q) == pytest.approx(ref, rel=1e-12)
    assert LOG.mean(mu, sd) == pytest.approx(stats.lognorm(s=sd, scale=mu).mean(), rel=1e-12)
    # with dof, the Student t quantile on the log scale
    assert LOG.quantile(mu, sd, 0.95, 5) == pytest.approx(mu * np.exp(stats.t.ppf(0.95, 5) * sd))


def test_weight_quantile_and_mean_against_monte_carlo():
    """T = mu / (1 - e), e ~ N(0, sd^2): the distribution the weight fit's residual implies."""
    rng = np.random.default_rng(0)
    mu, sd = 30.0, 0.08
    T = mu / (1 - rng.normal(0, sd, 400_000))
    for q in (0.05, 0.5, 0.95):
        assert WEIGHT.quantile(mu, sd, q) == pytest.approx(np.quantile(T, q), rel=2e-3)
    # second-order mean, error O(sd^4)
    assert WEIGHT.mean(mu, sd) == pytest.approx(T.mean(), rel=5 * sd**4 + 1e-3)
    # past the pole the quantile is infinite and the inverse too
    assert WEIGHT.quantile(mu, 0.6, 0.99)[()] == np.inf
    assert WEIGHT.inverse(mu, 1.0)[()] == np.inf


def test_predictive_sd_adds_the_residual_variance():
    np.testing.assert_allclose(LOG.predictive_sd([0.0, 9e-4, -1e-20], 16e-4), [0.04, 0.05, 0.04])


@pytest.mark.parametrize("call,needle", [
    (lambda: get_scale("sqrt"), "relative 'sqrt' is not one of"),
    (lambda: scale_of(object()), "options"),
    (lambda: LOG.residual([1.0, -1.0], [1.0, 1.0]), "y must be finite and > 0"),
    (lambda: WEIGHT.residual([1.0], [0.0]), "mu must be finite and > 0"),
    (lambda: ABSOLUTE.residual([1.0, np.nan], [1.0, 1.0]), "y must be finite"),
    (lambda: LOG.residual([1.0, 2.0], [1.0, 2.0, 3.0]), "broadcast"),
    (lambda: LOG.inverse([1.0], ["a"]), "e must be numeric"),
    (lambda: LOG.quantile(1.0, 0.1, 1.0), "q must be a probability"),
    (lambda: LOG.quantile(1.0, -0.1, 0.5), "sd must be >= 0"),
    (lambda: LOG.quantile(1.0, 0.1, 0.5, dof=0), "dof"),
    (lambda: LOG.cdf(-1.0, 1.0, 0.1), "y must be finite and > 0"),
    (lambda: LOG.jacobian(np.ones((3, 2)), np.ones(2)), "J must be"),
    (lambda: LOG.regression(1, 2), "callables"),
    (lambda: WEIGHT.weights([1.0, 2.0], [1.0]), "base weights"),
    (lambda: LOG.predictive_sd(0.1, -1.0), "s2 must be >= 0"),
])
def test_bad_input_raises_input_error(call, needle):
    with pytest.raises(InputError, match=needle):
        call()


def test_scales_table_and_cli_choices():
    from perfmodel.cli.main import build_parser

    assert list(SCALES) == ["log", "weight", "absolute"]
    assert all(isinstance(s, FitScale) for s in SCALES.values())
    assert get_scale(LOG) is LOG
    p = build_parser()
    sub = next(a for a in p._actions if a.dest == "command").choices
    fit_rel = next(a for a in sub["fit"]._actions if a.dest == "relative")
    assert list(fit_rel.choices) == [n for n, s in SCALES.items() if s.relative]
    cmp_rel = next(a for a in sub["compare"]._actions if a.dest == "relative")
    assert list(cmp_rel.choices) == list(SCALES)
