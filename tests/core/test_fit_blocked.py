"""The blocked (large-trace) solver against fit_curve and the ordinary fit_model path."""
import numpy as np
import pytest

from perfmodel.core import fit_blocked
from perfmodel.core.fit import _Problem, fit_curve, fit_model
from perfmodel.core.synthetic import simulate_trace
from perfmodel.errors import InputError

TOL = 1e-8  # fit_model's default xtol = ftol = gtol


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 997 rows, so that every pass folds many blocks (and a ragged last one)."""
    monkeypatch.setattr(fit_blocked, "BLOCK_ROWS", 997)


def _exp_problem(n=5000, seed=0):
    rng = np.random.default_rng(seed)
    x = {"x": rng.uniform(0, 5, n)}
    y = 3.0 * (1 - np.exp(-0.7 * x["x"])) + 0.05 * rng.standard_normal(n)
    y[::50] += 1.0  # outliers, for the robust losses

    def func(t, f):
        return t[0] * (1 - np.exp(-t[1] * f["x"]))

    def jac(t, f):
        e = np.exp(-t[1] * f["x"])
        return np.column_stack([1 - e, t[0] * f["x"] * e])

    return _Problem(func=func, jac=jac, x=x, y=y, weights=rng.uniform(0.5, 2, n),
                    bounds=(np.array([0.0, 0.0]), np.array([10.0, 0.6])), tol=1e-12,
                    max_nfev=None, x_scale="jac")


@pytest.mark.parametrize("loss", ["linear", "huber", "soft_l1", "cauchy"])
def test_blocked_solve_matches_fit_curve(small_blocks, loss):
    # the upper bound 0.6 < 0.7 holds k at a bound: the projected step must keep it there
    prob = _exp_problem()
    ref = prob.solve([1.0, 0.3], loss=loss, f_scale=0.1)
    got = fit_blocked.blocked_solve(prob, [1.0, 0.3], loss=loss, f_scale=0.1)
    assert got.success
    np.testing.assert_array_equal(got.at_bound, ref.at_bound)
    assert got.at_bound[1]
    # both stop at tol = 1e-12 relative: the optimum agrees far inside 1e-6
    np.testing.assert_allclose(got.params, ref.params, rtol=1e-6)
    np.testing.assert_allclose(got.cost, ref.cost, rtol=1e-10)
    np.testing.assert_allclose(got.rss, ref.rss, rtol=1e-6)  # not the minimised sum (robust)
    # the covariance from the triangular factor equals the SVD-of-J covariance
    free = ~ref.at_bound
    np.testing.assert_allclose(got.cov[np.ix_(free, free)], ref.cov[np.ix_(free, free)],
                               rtol=1e-6)
    assert got.jac.shape == (2, 2)


def test_blocked_covariance_equals_ols_for_a_linear_model(small_blocks):
    rng = np.random.default_rng(3)
    x = {"x": np.linspace(0, 1, 4000)}
    y = 1 + 2 * x["x"] + 0.1 * rng.standard_normal(4000)
    prob = _Problem(func=lambda t, f: t[0] + t[1] * f["x"],
                    jac=lambda t, f: np.column_stack([np.ones_like(f["x"]), f["x"]]),
                    x=x, y=y, weights=None, bounds=(np.full(2, -np.inf), np.full(2, np.inf)),
                    tol=1e-12, max_nfev=None, x_scale="jac")
    got = fit_blocked.blocked_solve(prob, [0.0, 0.0])
    X = np.column_stack([np.ones(4000), x["x"]])
    beta, rss, *_ = np.linalg.lstsq(X, y, rcond=None)
    np.testing.assert_allclose(got.params, beta, rtol=1e-10)
    np.testing.assert_allclose(got.cov, rss[0] / 3998 * np.linalg.inv(X.T @ X), rtol=1e-8)
    ref = fit_curve(prob.func, x, y, [0.0, 0.0])
    np.testing.assert_allclose(got.residuals, ref.residuals, rtol=0, atol=1e-9)


N = 20_001


@pytest.fixture(scope="module")
def trace():
    return simulate_trace(n=N, noise="multiplicative", seed=3).drop(
        columns=["chunk_sizes", "context_lens"])


@pytest.mark.parametrize("loss", ["linear", "huber"])
def test_just_above_the_threshold_agrees_with_the_ordinary_path(trace, loss):
    ordinary = fit_model(trace, "seed_id", loss=loss, large_rows=None)
    large = fit_model(trace, "seed_id", loss=loss, large_rows=N - 1)
    assert large.success and ordinary.success
    assert large.unidentified == ordinary.unidentified
    assert large.at_bound == ordinary.at_bound
    # Both stop when the cost falls by less than tol (relative), so each cost is
    # within ~tol * cost of the minimum; with s^2 = 2 cost / dof a cost excess
    # of tol * cost moves a parameter by at most sqrt(tol * dof) standard errors
    # (quadratic model of the cost), and two such fits by twice that.
    bound = 2 * np.sqrt(TOL * ordinary.dof)
    z = np.abs(large.values - ordinary.values) / ordinary.stderr
    assert np.all(z <= bound), (z, bound)
    np.testing.assert_allclose(large.stderr, ordinary.stderr, rtol=1e-3)
    np.testing.assert_allclose(large.rss, ordinary.rss, rtol=2 * TOL)


def test_below_the_threshold_the_path_is_the_ordinary_one(trace):
    a = fit_model(trace.iloc[:3000], "seed_id")
    b = fit_model(trace.iloc[:3000], "seed_id", large_rows=None)
    np.testing.assert_array_equal(a.values, b.values)
    np.testing.assert_array_equal(a.cov, b.cov)


@pytest.mark.parametrize("bad", [0, -5, 2.5, "big"])
def test_large_rows_is_checked(trace, bad):
    with pytest.raises(InputError, match="large_rows"):
        fit_model(trace.iloc[:100], "seed_id", large_rows=bad)
