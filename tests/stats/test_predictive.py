"""Tests of perfmodel.stats.predictive: one predictive distribution behind bands and SLA answers."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from perfmodel.core.fit import fit_model
from perfmodel.core.model import get_model
from perfmodel.core.results import FitResult
from perfmodel.core.synthetic import default_truth, simulate_trace
from perfmodel.decisions import sla
from perfmodel.errors import InputError
from perfmodel.stats import uncertainty as U
from perfmodel.stats.predictive import MIN_SAMPLES, PredictiveDistribution

TRUTH = default_truth("seed_id")
SIGMA = 0.05
PTS = {"B": np.array([1.0, 8.0, 32.0, 64.0]), "S": np.array([1.0, 300.0, 1200.0, 2048.0])}


def _trace(n=1500, seed=7):
    return simulate_trace("seed_id", TRUTH, n, noise="multiplicative", sigma=SIGMA, seed=seed)


@pytest.fixture(scope="module")
def fits():
    df = _trace()
    return {rel: fit_model(df, relative=rel, n_starts=2) for rel in ("log", "weight", "absolute")}


def _boot(fit, n=200, seed=3):
    """A BootstrapResult of normal parameter samples around the fit (no refits)."""
    rng = np.random.default_rng(seed)
    S = rng.multivariate_normal(fit.values, np.nan_to_num(fit.cov), size=n)
    return U.BootstrapResult(list(fit.param_names), fit.values, S, fit.values, fit.values,
                             "percentile", "pairs", n, 0, [], 0.05, 0,
                             fit.options["relative"], "linear")


# ---------------------------------------------------------------------------
# the band and the SLA quantile are one number
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("rel", ["log", "weight", "absolute"])
def test_band_upper_at_090_is_the_sla_095_quantile_delta(fits, rel):
    fit = fits[rel]
    a = sla.max_tokens_quantile(fit, 8, 40.0, 0.95)
    assert a.feasible
    point = {"B": [8.0], "S": [float(a.max_total_tokens)]}
    band = U.prediction_band(fit, point, alpha=0.10)
    assert band["upper"].iloc[0] == pytest.approx(a.predicted_q_ms, rel=1e-10, abs=0)
    # and everywhere on a grid, through the Predictor the searches use
    up = PredictiveDistribution(fit).band(PTS, 0.90).upper
    np.testing.assert_allclose(up, sla.Predictor(fit, q=0.95).quantile(PTS), rtol=1e-10)
    lo = U.prediction_band(fit, PTS, alpha=0.10)["lower"]
    np.testing.assert_allclose(lo, sla.Predictor(fit, q=0.05).quantile(PTS), rtol=1e-10)


@pytest.mark.parametrize("rel", ["log", "weight"])
def test_band_upper_at_090_is_the_sla_095_quantile_bootstrap(fits, rel):
    fit = fits[rel]
    boot = _boot(fit)
    a = sla.max_tokens_quantile(fit, 8, 40.0, 0.95, method="bootstrap", boot_samples=boot.samples)
    point = {"B": [8.0], "S": [float(a.max_total_tokens)]}
    band = U.prediction_band(fit, point, alpha=0.10, method="bootstrap", boot=boot)
    assert band["upper"].iloc[0] == pytest.approx(a.predicted_q_ms, rel=1e-10, abs=0)
    q = sla.Predictor(fit, q=0.95, method="bootstrap", boot_samples=boot.samples).quantile(PTS)
    np.testing.assert_allclose(PredictiveDistribution(fit, boot).band(PTS, 0.9).upper, q,
                               rtol=1e-10)


def test_confidence_band_is_the_mean_band(fits):
    fit = fits["log"]
    b = PredictiveDistribution(fit).band(PTS, 0.95)
    cb = U.confidence_band(fit, PTS)
    np.testing.assert_allclose(cb["lower"], b.mean_lower, rtol=1e-14)
    np.testing.assert_allclose(cb["upper"], b.mean_upper, rtol=1e-14)
    assert np.all(b.lower < b.mean_lower) and np.all(b.upper > b.mean_upper)


# ---------------------------------------------------------------------------
# known truth
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("rel", ["log", "weight"])
def test_quantile_against_the_known_lognormal_truth(fits, rel):
    """The trace is mu_true * exp(0.05 z): its q-quantile is mu_true exp(0.05 z_q)."""
    fit = fits[rel]
    d = PredictiveDistribution(fit)
    mu_true = get_model("seed_id").predict(list(TRUTH.values()), PTS)
    sd_mean = d.spread(PTS).sd_mean
    for q in (0.5, 0.9, 0.95, 0.99):
        est = d.quantile(PTS, q)
        true_q = mu_true * np.exp(SIGMA * stats.norm.ppf(q))
        # the fitted curve is off by about sd_mean; s estimates SIGMA to ~ 1/sqrt(2n)
        tol = 4 * sd_mean + abs(stats.norm.ppf(q)) * SIGMA * (4 / math.sqrt(2 * fit.n) + 0.02)
        assert np.all(np.abs(np.log(est / true_q)) <= tol), (q, np.log(est / true_q), tol)
        # the true probability that a new step meets the estimated quantile
        p_true = stats.norm.cdf(np.log(est / mu_true) / SIGMA)
        assert np.all(np.abs(p_true - q) <= 0.02 + 4 * sd_mean / SIGMA * stats.norm.pdf(
            stats.norm.ppf(q))), (q, p_true)


def test_absolute_fit_of_lognormal_steps_is_wider_at_long_steps(fits):
    """An absolute fit has one sd in ms: too wide for short steps, too narrow for long ones."""
    d = PredictiveDistribution(fits["absolute"])
    mu_true = get_model("seed_id").predict(list(TRUTH.values()), PTS)
    p = stats.norm.cdf(np.log(d.quantile(PTS, 0.95) / mu_true) / SIGMA)
    assert p[0] > 0.99 and p[-1] < 0.95


# ---------------------------------------------------------------------------
# the distribution itself
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("rel", ["log", "weight", "absolute"])
def test_delta_quantile_cdf_median_mean(fits, rel):
    fit = fits[rel]
    d = PredictiveDistribution(fit)
    np.testing.assert_allclose(d.median(PTS), fit.predict(PTS), rtol=1e-15)
    for q in (0.1, 0.9):
        t = d.quantile(PTS, q)
        np.testing.assert_allclose(d.cdf(PTS, t), q, rtol=1e-9)
    s = d.spread(PTS)
    np.testing.assert_allclose(d.mean(PTS), d.scale.mean(s.center, s.sd_new), rtol=1e-15)
    assert np.all(s.sd_new >= math.sqrt(fit.rss / fit.dof) * (1 - 1e-12))
    assert d.method == "delta" and d.n_samples == 0


def test_bootstrap_close_to_delta_and_seeded(fits):
    fit = fits["log"]
    boot = _boot(fit, n=400)
    d, b = PredictiveDistribution(fit), PredictiveDistribution(fit, boot, n_draws=20000)
    np.testing.assert_allclose(b.quantile(PTS, 0.9), d.quantile(PTS, 0.9), rtol=0.01)
    np.testing.assert_allclose(b.median(PTS), d.median(PTS), rtol=0.01)
    np.testing.assert_allclose(b.mean(PTS), d.mean(PTS), rtol=0.01)
    np.testing.assert_allclose(b.cdf(PTS, b.quantile(PTS, 0.9)), 0.9, atol=2e-3)
    again = PredictiveDistribution(fit, boot, n_draws=20000)
    np.testing.assert_array_equal(again.quantile(PTS, 0.9), b.quantile(PTS, 0.9))
    band = b.band(PTS, 0.9)
    assert np.all(band.mean_lower < band.fit) and np.all(band.fit < band.mean_upper)
    assert b.n_samples == 400 and "centred" in b.noise_source


def test_bootstrap_residual_rule():
    df = _trace(n=300, seed=2)
    fit = fit_model(df, relative="weight", n_starts=2)
    boot = _boot(fit)
    d = PredictiveDistribution(fit, boot)
    # the fit's residuals, centred, variance rss/dof
    e = d._eps
    assert abs(e.mean()) < 0.1 * e.std()
    assert e.std() == pytest.approx(math.sqrt(fit.rss / fit.dof), rel=0.1)
    # a fit read from JSON has none: normal residuals, said so
    bare = FitResult.from_json(fit.to_json())
    assert "N(0, rss/dof)" in PredictiveDistribution(bare, boot).note
    # residuals given are used as given
    given = PredictiveDistribution(fit, boot, residuals=np.array([0.01, 0.01]))
    assert np.all(given._eps == 0.01) and given.noise_source == "the residuals given"


def test_unidentified_parameters_contribute_no_variance(fits):
    fit = FitResult.from_json(fits["log"].to_json())  # a copy
    fit.y, fit.fitted = fits["log"].y, fits["log"].fitted
    j = fit.param_names.index("k_S")
    fit.unidentified = ["k_S"]
    fit.cov[j, :] = np.nan
    fit.cov[:, j] = np.nan
    d = PredictiveDistribution(fit)
    band = d.band(PTS, 0.95)
    assert np.all(np.isfinite(band.lower)) and np.all(np.isfinite(band.mean_upper))
    assert "k_S" in d.note and d.unidentified == ["k_S"]
    C = np.nan_to_num(fit.cov)
    J = fit.model.jacobian(fit.values, PTS) / fit.predict(PTS)[:, None]
    np.testing.assert_allclose(d.spread(PTS).sd_mean ** 2, np.einsum("ij,jk,ik->i", J, C, J),
                               rtol=1e-12)
    cb = U.confidence_band(fit, PTS)  # used to be NaN with an unidentified parameter
    assert np.all(np.isfinite(cb["lower"])) and cb.attrs["unidentified"] == ["k_S"]
    # bootstrap: the unidentified column is held at the estimate
    boot = _boot(fits["log"])
    wild = boot.samples.copy()
    wild[:, j] *= np.exp(np.random.default_rng(0).normal(0, 2, len(wild)))
    a, b = PredictiveDistribution(fit, boot.samples), PredictiveDistribution(fit, wild)
    np.testing.assert_array_equal(a.quantile(PTS, 0.95), b.quantile(PTS, 0.95))


@pytest.mark.parametrize("call,needle", [
    (lambda f: PredictiveDistribution(object()), "needs a FitResult"),
    (lambda f: PredictiveDistribution(f).quantile(PTS, 1.0), "q must be"),
    (lambda f: PredictiveDistribution(f).quantile(PTS, [0.5, 0.9]), "one probability"),
    (lambda f: PredictiveDistribution(f).band(PTS, 95), "level"),
    (lambda f: PredictiveDistribution(f).cdf(PTS, -1.0), "t must be finite and > 0"),
    (lambda f: PredictiveDistribution(f).cdf(PTS, [1.0, 2.0]), "one value per row"),
    (lambda f: PredictiveDistribution(f).center([1, 2]), "feats must be"),
    (lambda f: PredictiveDistribution(f, np.ones((30, 3))), "shape"),
    (lambda f: PredictiveDistribution(f, np.ones((MIN_SAMPLES - 1, 7))), "at least"),
    (lambda f: PredictiveDistribution(f, np.ones((30, 7)), n_draws=0), "n_draws"),
    (lambda f: PredictiveDistribution(f, np.ones((30, 7)), seed=-1), "seed"),
    (lambda f: PredictiveDistribution(f, np.ones((30, 7)), residuals=[1.0]), "at least 2"),
])
def test_bad_input_raises_input_error(fits, call, needle):
    with pytest.raises(InputError, match=needle):
        call(fits["log"])


def test_mean_step_time_factor_is_the_lognormal_mean_and_one_without_bias(fits):
    from perfmodel.stats.predictive import MeanStepTime, mean_step_model

    log_fit = fits["log"]
    m = MeanStepTime(log_fit)
    s = math.sqrt(log_fit.rss / log_fit.dof)
    e = np.random.default_rng(0).normal(0.0, s, 400_000)
    assert m.factor == pytest.approx(float(np.mean(np.exp(e))), rel=2e-4)  # Monte Carlo
    assert m.factor > 1.0
    feats = {"B": np.array([1.0, 8.0]), "S": np.array([16.0, 512.0])}
    np.testing.assert_allclose(m.predict(feats), m.factor * log_fit.predict(feats), rtol=1e-15)
    assert m.model is log_fit.model and m.n == log_fit.n  # every other attribute is the fit's
    assert MeanStepTime(fits["absolute"]).factor == 1.0
    assert mean_step_model(m) is m
    assert isinstance(mean_step_model(log_fit), MeanStepTime)

    class Constant:
        def predict(self, feats):
            return np.full(len(feats["B"]), 10.0)

    c = Constant()
    assert mean_step_model(c) is c  # not a fit: nothing says it predicts a median
    with pytest.raises(InputError, match="FitResult"):
        MeanStepTime(c)


def test_simulated_steps_last_the_mean_step_time(fits):
    from perfmodel.decisions.simulate import simulate_closed_loop
    from perfmodel.stats.predictive import MeanStepTime

    log_fit = fits["log"]
    kw = {"num_requests": 12, "concurrency": 4, "prompt_tokens": 32, "output_tokens": 8}
    a = simulate_closed_loop(log_fit, **kw)
    b = simulate_closed_loop(MeanStepTime(log_fit), **kw)
    assert a.requests.equals(b.requests)  # the simulator applies the factor itself
    f = MeanStepTime(log_fit).factor
    steps = a.steps
    np.testing.assert_allclose(steps["duration_ms"].to_numpy(),
                               f * log_fit.predict({"B": steps["batch_size"].to_numpy(float),
                                                    "S": steps["total_tokens"].to_numpy(float)}),
                               rtol=1e-12)


def test_mean_step_time_without_residual_dof_is_the_median(fits):
    from types import SimpleNamespace

    from perfmodel.stats.predictive import MeanStepTime, mean_step_model

    f = fits["log"]
    exact = SimpleNamespace(model=f.model, values=f.values, cov=f.cov, rss=0.0, dof=0,
                            options=f.options, param_names=f.param_names, predict=f.predict)
    m = mean_step_model(exact)  # a fit with no residual variance: nothing to correct
    assert isinstance(m, MeanStepTime) and m.factor == 1.0


def test_delta_spread_warns_where_the_covariance_is_near_singular(fits):
    """A parameter covariance blown up along an undetermined direction (as a stored study once
    met: median band widths of 1e152) is flagged, not silently turned into a band."""
    import copy
    import warnings

    f = fits["log"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the well-determined fit: no warning
        PredictiveDistribution(f).spread(PTS)
    wild = copy.copy(f)
    wild.cov = np.asarray(f.cov, float) * 1e20
    with pytest.warns(RuntimeWarning, match="not determined"):
        PredictiveDistribution(wild).spread(PTS)
