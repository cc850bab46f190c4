"""Tests of perfmodel.decisions.sla and inversion, predictor: exact integer answers, quantiles, frontier."""
from __future__ import annotations

import argparse
import json
import math

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from perfmodel.cli.sla import add_sla_arguments, sla_command
from perfmodel.core.fit import fit_model
from perfmodel.core.model import get_model
from perfmodel.core.results import FitResult
from perfmodel.decisions.sla import (
    Predictor,
    frontier,
    max_batch,
    max_tokens,
    max_tokens_quantile,
    plot_frontier,
    recommend_token_budget,
)
from perfmodel.errors import InputError
from perfmodel.stats.predictive import PredictiveDistribution

TRUE = np.array([5.0, 2.0, 0.05, 0.3, 0.01, 0.1, 0.002])  # seed_id
SIGMA = 0.05  # log-normal step noise of the synthetic trace


def _trace(n=600, seed=0, theta=TRUE, sigma=SIGMA):
    rng = np.random.default_rng(seed)
    B = rng.integers(1, 64, n)
    S = B + rng.integers(0, 2048, n)
    T = get_model("seed_id").predict(theta, {"B": B, "S": S}) * np.exp(rng.normal(0, sigma, n))
    return pd.DataFrame({"batch_size": B, "total_tokens": S, "duration_ms": T})


@pytest.fixture(scope="module")
def fit():
    return fit_model(_trace(), "seed_id", n_starts=3)


FIT = fit_model(_trace(), "seed_id", n_starts=3)  # for hypothesis (no function fixtures)


def T_of(f, B, S):
    return float(f.predict({"B": np.array([B], float), "S": np.array([S], float)})[0])


class Linear:
    """A generic (non-FitResult) step model: T = 1 + 0.1 B + 0.01 S."""

    def predict(self, f):
        return 1.0 + 0.1 * np.asarray(f["B"], float) + 0.01 * np.asarray(f["S"], float)


# ---------------------------------------------------------------------------
# deterministic inversion
# ---------------------------------------------------------------------------

def test_rising_from_is_integer_argmin(fit):
    B = 4
    S = np.arange(1, 400)
    t = fit.predict({"B": np.full(S.size, B, float), "S": S.astype(float)})
    a = max_tokens(fit, B, 1e6, s_max=4096)
    # smallest S from which T never falls again (integers)
    d = np.diff(t)
    expect = int(S[np.nonzero(d < 0)[0][-1] + 1])
    assert a.rising_from == expect
    assert abs(a.rising_from - fit.model.rising_from(fit.values, B)) <= 0.02 * expect + 1


def test_max_tokens_matches_brute_force(fit):
    for B, target in [(1, 80.0), (4, 50.0), (16, 30.0), (64, 60.0), (8, 200.0)]:
        a = max_tokens(fit, B, target)
        S = np.arange(B, 20000)
        t = fit.predict({"B": np.full(S.size, B, float), "S": S.astype(float)})
        rising = S >= max(a.rising_from, B)
        ok = S[rising & (t <= target)]
        assert a.feasible
        assert a.max_total_tokens == ok.max()
        assert a.predicted_ms == pytest.approx(T_of(fit, B, a.max_total_tokens))


@settings(max_examples=60, deadline=None)
@given(B=st.integers(1, 256), target=st.floats(1.0, 2000.0))
def test_property_sla_bracket(B, target):
    a = max_tokens(FIT, B, target)
    assert a.search_from == max(a.rising_from, B)
    if a.feasible:
        S = a.max_total_tokens
        assert S >= B and S >= min(a.rising_from, S)
        assert T_of(FIT, B, S) <= target
        assert a.capped or T_of(FIT, B, S + 1) > target
    else:
        assert a.max_total_tokens is None
        # the smallest predicted time on the allowed domain exceeds the target
        lo = max(a.rising_from, B)
        assert T_of(FIT, B, lo) > target
        assert "infeasible" in a.reason


@settings(max_examples=40, deadline=None)
@given(B=st.integers(1, 128), t1=st.floats(5.0, 500.0), t2=st.floats(5.0, 500.0))
def test_property_monotone_in_target(B, t1, t2):
    lo, hi = sorted((t1, t2))
    a, b = max_tokens(FIT, B, lo), max_tokens(FIT, B, hi)
    if a.feasible:
        assert b.feasible and b.max_total_tokens >= a.max_total_tokens
    if not b.feasible:
        assert not a.feasible


@settings(max_examples=30, deadline=None)
@given(B=st.integers(1, 128), target=st.floats(5.0, 500.0), q=st.floats(0.5, 0.995))
def test_property_quantile_bracket(B, target, q):
    a = max_tokens_quantile(FIT, B, target, q)
    p = Predictor(FIT, q=q)
    if a.feasible:
        S = a.max_total_tokens
        assert p.quantile({"B": [B], "S": [S]})[0] <= target
        assert a.capped or p.quantile({"B": [B], "S": [S + 1]})[0] > target
        assert a.prob_meets >= q - 1e-9
        point = max_tokens(FIT, B, target)
        assert point.feasible and point.max_total_tokens >= S
    else:
        assert p.quantile({"B": [B], "S": [max(a.rising_from, B)]})[0] > target


@settings(max_examples=30, deadline=None)
@given(B=st.integers(-1000, 0), T=st.floats(-1e6, 0.0), q=st.one_of(
    st.floats(-10.0, 0.0), st.floats(1.0, 10.0)))
def test_property_bad_arguments_named(B, T, q):
    with pytest.raises(InputError, match="batch_size"):
        max_tokens(FIT, B, 10.0)
    with pytest.raises(InputError, match="target_ms"):
        max_tokens(FIT, 4, T)
    with pytest.raises(InputError, match="q must be"):
        max_tokens_quantile(FIT, 4, 10.0, q)


def test_infeasible_target_flagged(fit):
    a = max_tokens(fit, 4, 1.0)
    assert not a.feasible and a.max_total_tokens is None
    assert a.predicted_ms > 1.0
    assert "infeasible" in a.reason and "below the smallest" in a.reason


def test_cap_flagged():
    a = max_tokens(Linear(), 2, 1e9, s_max=1000)
    assert a.feasible and a.capped and a.max_total_tokens == 1000


def test_context_features_held_constant():
    from types import SimpleNamespace

    m = get_model("seed_ctx")
    th = np.concatenate([TRUE, [1e-5, 1e-3]])
    f = SimpleNamespace(model=m, predict=lambda d: m.predict(th, d))
    base = max_tokens(f, 16, 60.0)
    # without context features the context terms are 0: same answer as seed_id
    assert base.max_total_tokens == max_tokens(_Seed(), 16, 60.0).max_total_tokens
    ctx = max_tokens(f, 16, 60.0, features={"decode_ctx": 5000.0})
    assert ctx.max_total_tokens < base.max_total_tokens
    S = ctx.max_total_tokens
    t = lambda s: m.predict(th, {"B": [16], "S": [s], "attn_prefill": [0.0],
                                 "decode_ctx": [5000.0]})[0]
    assert t(S) <= 60.0 < t(S + 1)


class _Seed:
    def predict(self, d):
        return get_model("seed_id").predict(TRUE, {"B": d["B"], "S": d["S"]})


def test_generic_predictor_exact():
    # T = 1 + 0.1 B + 0.01 S <= T*  <=>  S <= (T* - 1 - 0.1 B) / 0.01
    for B, T in [(1, 5.0), (10, 20.0), (3, 2.0)]:
        a = max_tokens(Linear(), B, T)
        expect = math.floor((T - 1 - 0.1 * B) / 0.01 + 1e-9)
        if expect >= B:
            assert a.max_total_tokens == expect
        else:
            assert not a.feasible


@pytest.mark.parametrize("call, match", [
    (lambda f: max_tokens(f, 0, 10.0), "batch_size"),
    (lambda f: max_tokens(f, 2.5, 10.0), "batch_size"),
    (lambda f: max_tokens(f, True, 10.0), "batch_size"),
    (lambda f: max_tokens(f, 4, 0.0), "target_ms"),
    (lambda f: max_tokens(f, 4, -3.0), "target_ms"),
    (lambda f: max_tokens(f, 4, float("nan")), "target_ms"),
    (lambda f: max_tokens(f, 4, 10.0, s_max=2), "s_max"),
    (lambda f: max_tokens_quantile(f, 4, 10.0, 0.0), "q must be"),
    (lambda f: max_tokens_quantile(f, 4, 10.0, 1.0), "q must be"),
    (lambda f: max_tokens_quantile(f, 4, 10.0, 1.5), "q must be"),
    (lambda f: max_tokens_quantile(f, 0, 10.0, 0.9), "batch_size"),
    (lambda f: max_tokens_quantile(f, 4, 10.0, 0.9, method="mc"), "method"),
    (lambda f: max_tokens_quantile(f, 4, 10.0, 0.9, method="bootstrap"), "boot_samples"),
    (lambda f: max_batch(f, 0, 10.0), "total_tokens"),
    (lambda f: max_batch(f, 10, -1.0), "target_ms"),
    (lambda f: frontier(f, [1, 0], 10.0), "batch_sizes"),
    (lambda f: recommend_token_budget(f, 0.0), "itl_slo_ms"),
    (lambda f: recommend_token_budget(f, 10.0, q=1.0), "q must be"),
    (lambda f: recommend_token_budget(f, 10.0, cover="x"), "cover"),
    (lambda f: max_tokens(object(), 4, 10.0), "predict"),
    (lambda f: max_tokens_quantile(Linear(), 4, 10.0, 0.9), "FitResult"),
    (lambda f: max_tokens(f, 4, 10.0, features={"S": 3}), "features"),
])
def test_bad_arguments(fit, call, match):
    with pytest.raises(InputError, match=match):
        call(fit)


# ---------------------------------------------------------------------------
# converse
# ---------------------------------------------------------------------------

def test_max_batch_bracket_and_brute_force(fit):
    for S, target in [(512, 50.0), (2048, 60.0), (64, 40.0), (128, 25.0)]:
        a = max_batch(fit, S, target)
        B = np.arange(1, S + 1)
        t = fit.predict({"B": B.astype(float), "S": np.full(B.size, S, float)})
        ok = B[(B >= a.rising_from) & (t <= target)]
        if ok.size:
            assert a.feasible and a.max_batch_size == ok.max()
            assert a.max_batch_size <= S
            if not a.capped:
                assert T_of(fit, a.max_batch_size + 1, S) > target
        else:
            assert not a.feasible and a.max_batch_size is None


def test_max_batch_capped_at_S(fit):
    a = max_batch(fit, 8, 1e4)
    assert a.feasible and a.capped and a.max_batch_size == 8


# ---------------------------------------------------------------------------
# uncertainty
# ---------------------------------------------------------------------------

def test_delta_quantile_by_hand(fit):
    B, S, q = 8.0, 700.0, 0.9
    f = {"B": np.array([B]), "S": np.array([S])}
    m = fit.model
    th = fit.values
    g = np.zeros(th.size)
    for i in range(th.size):  # numerical gradient of log T wrt the parameters
        h = 1e-6 * max(abs(th[i]), 1e-8)
        tp, tm = th.copy(), th.copy()
        tp[i] += h
        tm[i] -= h
        g[i] = (np.log(m.predict(tp, f)[0]) - np.log(m.predict(tm, f)[0])) / (2 * h)
    C = np.nan_to_num(fit.cov)
    sd = math.sqrt(g @ C @ g + fit.rss / fit.dof)
    yhat = m.predict(th, f)[0]
    expect = yhat * math.exp(stats.t.ppf(q, fit.dof) * sd)
    p = Predictor(fit, q=q)
    assert p.quantile(f)[0] == pytest.approx(expect, rel=1e-6)
    assert p.prob_below(f, expect)[0] == pytest.approx(q, abs=1e-9)
    assert Predictor(fit, q=0.5).quantile(f)[0] == pytest.approx(yhat, rel=1e-12)


@pytest.mark.parametrize("relative", ["absolute", "weight"])
def test_delta_quantile_other_scales(relative):
    f = fit_model(_trace(n=300, seed=2), "seed_id", relative=relative, n_starts=2)
    p = Predictor(f, q=0.9)
    feats = {"B": np.array([4.0, 32.0]), "S": np.array([300.0, 3000.0])}
    yhat = f.predict(feats)
    qv = p.quantile(feats)
    assert np.all(qv > yhat)
    assert np.allclose(p.prob_below(feats, qv[0])[0], 0.9, atol=1e-9)
    sd = PredictiveDistribution(f).spread(feats).sd_new  # on the fit's scale
    z = stats.t.ppf(0.9, f.dof)
    if relative == "absolute":
        assert np.allclose(qv, yhat + z * sd, rtol=1e-12)
    else:
        # the weight fit's residual is (y - mu)/y, so a new step is mu/(1 - e)
        # (perfmodel.core.scale); this used to be mu (1 + z sd), the first-order version
        assert np.allclose(qv, yhat / (1 - z * sd), rtol=1e-12)
        assert np.all(qv > yhat * (1 + z * sd))
        assert np.all(sd >= np.sqrt(f.rss / f.dof) * (1 - 1e-12))
    a = max_tokens_quantile(f, 8, 60.0, 0.9)
    assert a.feasible and a.predicted_q_ms <= 60.0


def test_quantile_answers_are_conservative_and_bracketed(fit):
    B, target = 8, 60.0
    a = max_tokens(fit, B, target)
    prev = a.max_total_tokens
    assert max_tokens_quantile(fit, B, target, 0.5).max_total_tokens == prev
    p = Predictor(fit, q=0.95)
    for q in (0.6, 0.8, 0.95, 0.99):
        b = max_tokens_quantile(fit, B, target, q)
        assert b.feasible and b.max_total_tokens <= prev
        prev = b.max_total_tokens
        assert b.prob_meets >= q - 1e-12
        pq = Predictor(fit, q=q)
        S = b.max_total_tokens
        f0 = {"B": [B], "S": [S]}
        f1 = {"B": [B], "S": [S + 1]}
        assert pq.quantile(f0)[0] <= target < pq.quantile(f1)[0]
    assert p.q == 0.95


def test_quantile_coverage_against_truth():
    # Fitted on data with known log-normal noise SIGMA: at S*_q the true P(T <= T*) equals q
    # up to the error of the fitted curve, which the delta method's parameter part bounds:
    # |z_true - z_q| <~ 3 sd_param / SIGMA (plus the error of s against SIGMA).
    f = fit_model(_trace(n=3000, seed=5), "seed_id", n_starts=3)
    assert math.sqrt(f.rss / f.dof) == pytest.approx(SIGMA, rel=0.05)
    for B, target, q in [(8, 60.0, 0.9), (32, 80.0, 0.95), (2, 70.0, 0.8), (16, 45.0, 0.5)]:
        a = max_tokens_quantile(f, B, target, q)
        feats = {"B": np.array([B], float), "S": np.array([a.max_total_tokens], float)}
        true_T = get_model("seed_id").predict(TRUE, feats)[0]
        z_true = (math.log(target) - math.log(true_T)) / SIGMA
        sd = PredictiveDistribution(f).spread(feats).sd_new
        sd_param = math.sqrt(max(sd[0] ** 2 - f.rss / f.dof, 0.0))
        tol = 3 * sd_param / SIGMA + 0.1
        assert abs(z_true - stats.norm.ppf(q)) <= tol
        assert a.prob_meets >= q


def test_bootstrap_close_to_delta(fit):
    rng = np.random.default_rng(3)
    C = np.nan_to_num(fit.cov)
    samples = rng.multivariate_normal(fit.values, C, size=400)
    d = max_tokens_quantile(fit, 8, 60.0, 0.9)
    b = max_tokens_quantile(fit, 8, 60.0, 0.9, method="bootstrap", boot_samples=samples,
                            n_draws=20000)
    assert b.method == "bootstrap"
    assert b.max_total_tokens == pytest.approx(d.max_total_tokens, rel=0.03)
    # deterministic given the seed
    b2 = max_tokens_quantile(fit, 8, 60.0, 0.9, method="bootstrap", boot_samples=samples,
                             n_draws=20000)
    assert b2 == b
    # a fit read back from JSON has no residuals: normal residuals, said so
    fj = FitResult.from_json(fit.to_json())
    b3 = max_tokens_quantile(fj, 8, 60.0, 0.9, method="bootstrap", boot_samples=samples)
    assert "N(0, rss/dof)" in b3.reason
    with pytest.raises(InputError, match="shape"):
        max_tokens_quantile(fit, 8, 60.0, 0.9, method="bootstrap", boot_samples=samples[:, :3])


# ---------------------------------------------------------------------------
# frontier
# ---------------------------------------------------------------------------

def test_frontier_matches_single_answers(fit):
    Bs = [1, 2, 4, 8, 16, 32, 64, 128]
    df = frontier(fit, Bs, 40.0)
    for _, r in df.iterrows():
        a = max_tokens(fit, int(r["batch_size"]), 40.0)
        assert bool(r["feasible"]) == a.feasible
        if a.feasible:
            assert int(r["max_total_tokens"]) == a.max_total_tokens
            assert r["tokens_per_s"] == pytest.approx(1000 * a.max_total_tokens / a.predicted_ms)
        else:
            assert pd.isna(r["max_total_tokens"])
    dq = frontier(fit, Bs, 40.0, q=0.9)
    assert {"predicted_q_ms", "prob_meets", "q"} <= set(dq.columns)
    ok = dq["feasible"]
    assert (dq.loc[ok, "max_total_tokens"] <= df.loc[ok, "max_total_tokens"]).all()
    ax = plot_frontier(dq)
    assert ax.get_xlabel().startswith("batch size")
    with pytest.raises(InputError, match="frontier"):
        plot_frontier(pd.DataFrame({"a": [1]}))


# ---------------------------------------------------------------------------
# CLI helper
# ---------------------------------------------------------------------------

def _parse(argv):
    p = argparse.ArgumentParser()
    add_sla_arguments(p)
    return p.parse_args(argv)


def test_sla_command_modes(fit, tmp_path):
    path = tmp_path / "fit.json"
    fit.to_json(path)
    fj = FitResult.from_json(path)
    text, d = sla_command(_parse([str(path), "--target-ms", "50", "--batch-size", "4"]))
    assert d["mode"] == "max_tokens"
    assert d["max_total_tokens"] == max_tokens(fj, 4, 50.0).max_total_tokens
    assert "max tokens at B=4" in text
    text, d = sla_command(_parse([str(path), "--target-ms", "50", "--batch-size", "4",
                                  "--quantile", "0.9"]))
    assert d["q"] == 0.9
    assert d["max_total_tokens"] == max_tokens_quantile(fj, 4, 50.0, 0.9).max_total_tokens
    text, d = sla_command(_parse([str(path), "--target-ms", "50", "--total-tokens", "512"]))
    assert d["mode"] == "max_batch" and d["max_batch_size"] >= 1
    text, d = sla_command(_parse([str(path), "--target-ms", "40", "--frontier",
                                  "--batch-sizes", "1,4,16"]))
    assert d["mode"] == "frontier" and len(d["rows"]) == 3
    text, d = sla_command(_parse([str(path), "--target-ms", "40", "--recommend"]))
    assert d["mode"] == "recommend" and "--max-num-batched-tokens" in text
    for _, dd in [sla_command(_parse([str(path), "--target-ms", "1", "--batch-size", "4"]))]:
        assert dd["feasible"] is False
    json.dumps(d)
    with pytest.raises(InputError, match="q must be"):
        sla_command(_parse([str(path), "--target-ms", "50", "--batch-size", "4",
                            "--quantile", "1.5"]))
    with pytest.raises(InputError, match="batch-size"):
        sla_command(_parse([str(path), "--target-ms", "50"]))
    with pytest.raises(InputError, match="bootstrap-samples"):
        sla_command(_parse([str(path), "--target-ms", "50", "--batch-size", "4",
                            "--quantile", "0.9", "--method", "bootstrap"]))
    # --method conformal needs the fit's interval calibration, and says so
    with pytest.raises(InputError, match="interval calibration"):
        sla_command(_parse([str(path), "--target-ms", "50", "--batch-size", "4",
                            "--quantile", "0.95", "--method", "conformal"]))


def test_context_tokens_imply_uniform_step_features():
    """features={'context_tokens': X}: a step at (B, S) is B requests of S/B tokens on X cached."""
    from perfmodel.data.features import uniform_batch_features

    m = get_model("seed_ctx_mono")

    class Ctx:
        model = m

        def predict(self, f):
            return m.predict(np.ones(m.n_params) * 0.5, f)

    pred = Predictor(Ctx(), features={"context_tokens": 300.0})
    B, S = np.array([4.0, 16.0]), np.array([4.0, 512.0])
    want = m.predict(np.ones(m.n_params) * 0.5, uniform_batch_features(B, S / B, np.full(2, 300.0)))
    assert np.allclose(pred.point({"B": B, "S": S}), want)
    a = pred.context_assumption
    assert a["context_aware"] and a["context_tokens"] == 300.0 and "S/B" in a["rule"]
    assert not Predictor(Ctx()).context_assumption["context_tokens"]
    with pytest.raises(InputError, match="context_tokens"):
        Predictor(Ctx(), features={"context_tokens": -1})


def test_conformal_quantile_is_the_calibrated_intervals_upper_end():
    """method='conformal': the q-quantile is the upper end of the stored conformal interval at
    level 2q - 1, the answer is bracketed on it, and on data with known noise it meets the
    target about as often as q says; levels not stored are refused by name."""
    import copy

    from perfmodel.stats.intervals import calibrate_intervals, conformal_interval

    df = _trace(n=1500, seed=7)
    f = copy.copy(fit_model(df, "seed_id", n_starts=2))
    f.interval_calibration = calibrate_intervals(f, df, n_starts=1)
    B, target, q = 8, 60.0, 0.95
    a = max_tokens_quantile(f, B, target, q, method="conformal")
    assert a.feasible and a.method == "conformal" and math.isnan(a.prob_meets)
    assert "conformal" in a.reason
    p = Predictor(f, q=q, method="conformal")
    S = a.max_total_tokens
    assert p.quantile({"B": [B], "S": [S]})[0] <= target < p.quantile({"B": [B], "S": [S + 1]})[0]
    # the quantile is conformal_interval's upper end for the same steps
    steps = pd.DataFrame({"batch_size": [B, B], "total_tokens": [S, S + 1]})
    iv = conformal_interval(f, steps, 2 * q - 1)
    np.testing.assert_allclose(p.quantile({"B": [B, B], "S": [S, S + 1]}), iv.upper, rtol=1e-12)
    # conservative against the median answer, and near q against the known noise at S*
    assert S <= max_tokens(f, B, target).max_total_tokens
    true_T = get_model("seed_id").predict(TRUE, {"B": np.array([B], float),
                                                  "S": np.array([S], float)})[0]
    p_true = stats.norm.cdf((math.log(target) - math.log(true_T)) / SIGMA)
    assert abs(p_true - q) < 0.04
    with pytest.raises(InputError, match="2q - 1 = 0.4"):
        Predictor(f, q=0.7, method="conformal")
    with pytest.raises(InputError, match="interval calibration"):
        Predictor(fit_model(df, "seed_id", n_starts=1), q=0.95, method="conformal")
    with pytest.raises(InputError, match="method must be one of"):
        Predictor(f, q=0.95, method="magic")


def test_cli_method_auto_uses_the_calibrated_quantile_when_the_fit_stores_it(tmp_path):
    """perfmodel sla --quantile q: with a fit that stores level 2q - 1 the default (auto) inverts
    on the calibrated quantile, without one on the delta method; the answer names its method."""
    import copy

    from perfmodel.stats.intervals import calibrate_intervals

    df = _trace(n=900, seed=11)
    plain = fit_model(df, "seed_id", n_starts=2)
    cal = copy.copy(plain)
    cal.interval_calibration = calibrate_intervals(cal, df, n_starts=1)
    for f, name, want in ((plain, "plain.json", "delta"), (cal, "cal.json", "conformal")):
        path = tmp_path / name
        f.to_json(path)
        _, d = sla_command(_parse([str(path), "--target-ms", "60", "--batch-size", "8",
                                   "--quantile", "0.95"]))
        assert d["method"] == want
        ref = max_tokens_quantile(FitResult.from_json(path), 8, 60.0, 0.95, method=want)
        assert d["max_total_tokens"] == ref.max_total_tokens
    # a level the calibration does not store falls back to the delta method
    _, d = sla_command(_parse([str(tmp_path / "cal.json"), "--target-ms", "60", "--batch-size",
                               "8", "--quantile", "0.7"]))
    assert d["method"] == "delta"
