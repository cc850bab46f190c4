"""Tests of perfmodel.core.synthetic: determinism, exact truth, noise laws, the example trace.

Tolerances on noise statistics are a fixed number of standard errors at the
sample size used (n = 20,000 steps; seeds fixed, so the tests are
deterministic but not tuned to a lucky seed):

* sample sd ``s`` of i.i.d. noise with excess kurtosis ``kappa``:
  ``se(s)/sigma ~= 0.5 sqrt((2 + kappa)/n)``, 0.50% for Gaussian noise and
  0.61% for Student t with 10 d.o.f. (kappa = 6/(df-4) = 1); we allow 5 se;
* AR(1) with coefficient ``phi``: ``se(s)/sigma ~= 0.5 sqrt(2 (1+phi^2)/(1-phi^2)/n)``
  (0.73% at phi = 0.6) and ``se(r_1) ~= sqrt((1-phi^2)/n)`` (0.0057); 5 se;
* lag-1 autocorrelation of i.i.d. noise: ``se = 1/sqrt(n)`` (0.0071); 5 se.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfmodel.core.model import get_model
from perfmodel.core.synthetic import (
    EXAMPLE_SPEC,
    default_truth,
    make_design,
    simulate_trace,
    write_example_trace,
)
from perfmodel.data.trace import parse_int_list, read_trace, step_features, validate_trace
from perfmodel.errors import InputError

N = 20_000
EXAMPLE = Path(__file__).resolve().parents[2] / "data" / "example" / "example_trace.csv"


@pytest.fixture(scope="module")
def design():
    return make_design(N, seed=11)


@pytest.fixture(scope="module")
def mu(design):
    return get_model("seed_id").predict(default_truth("seed_id"), step_features(design))


def lag1(x):
    x = np.asarray(x) - np.mean(x)
    return float(np.sum(x[1:] * x[:-1]) / np.sum(x * x))


def se_sd(n, kappa=0.0):
    return 0.5 * np.sqrt((2.0 + kappa) / n)


# ---------------------------------------------------------------------------
# design
# ---------------------------------------------------------------------------

def test_design_is_a_valid_trace_with_the_stated_structure(design):
    d = validate_trace(design, require_duration=False)
    assert len(d) == N
    assert d["total_tokens"].max() <= 2048 and d["batch_size"].max() <= 64
    chunks = [parse_int_list(s) for s in d["chunk_sizes"]]
    assert all(int((c == 1).sum()) == k for c, k in zip(chunks, d["num_decode"]))
    assert all(int((c >= 2).sum()) == k for c, k in zip(chunks, d["num_prefill"]))
    dec, mix, pre = (d[d.phase == p] for p in ("decode", "mixed", "prefill"))
    assert (dec.total_tokens == dec.batch_size).all() and (dec.num_prefill == 0).all()
    assert (mix.num_decode >= 1).all() and (mix.num_prefill >= 1).all()
    assert (pre.num_decode == 0).all() and (pre.num_prefill >= 1).all()
    # shares near the default mix 0.5 / 0.35 / 0.15 (binomial se <= 0.0036; 5 se)
    shares = d.phase.value_counts(normalize=True)
    assert shares["decode"] == pytest.approx(0.5, abs=0.018)
    assert shares["mixed"] == pytest.approx(0.35, abs=0.018)
    assert shares["prefill"] == pytest.approx(0.15, abs=0.018)
    # prefill chunks cover the range up to the cap on a log scale
    big = np.concatenate([c[c > 1] for c in chunks])
    assert big.min() == 2 and big.max() > 1024


def test_design_regime_mix_and_caps():
    d = make_design(300, {"decode-only": 1.0}, max_batch=8, token_cap=4, seed=2)
    assert (d.phase == "decode").all() and d.batch_size.max() <= 4
    d = make_design(300, {"prefill-heavy": 1, "mixed": 1}, max_batch=3, token_cap=100, seed=2)
    assert set(d.phase) == {"prefill", "mixed"}
    assert d.total_tokens.max() <= 100 and d.batch_size.max() <= 3


@pytest.mark.parametrize("kwargs,match", [
    ({"n": 0}, "n must be an integer >= 1, got 0"),
    ({"n": 5, "seed": -1}, "seed must be an integer >= 0, got -1"),
    ({"n": 5, "seed": 1.5}, "seed must be an integer"),
    ({"n": 5, "regime_mix": {"decode": 1.0}}, "unknown regimes"),
    ({"n": 5, "regime_mix": {"mixed": 0.0}}, "positive sum"),
    ({"n": 5, "regime_mix": {"mixed": 1.0}, "max_batch": 1}, "'mixed' needs max_batch >= 2"),
])
def test_design_argument_errors(kwargs, match):
    with pytest.raises(InputError, match=match):
        make_design(**kwargs)


# ---------------------------------------------------------------------------
# determinism and exact truth
# ---------------------------------------------------------------------------

def test_same_seed_gives_identical_trace():
    a = simulate_trace("seed_id", n=500, noise="student_t", sigma=0.3, df=4, seed=7)
    b = simulate_trace("seed_id", n=500, noise="student_t", sigma=0.3, df=4, seed=7)
    pd.testing.assert_frame_equal(a, b)
    assert a.attrs["truth"] == b.attrs["truth"]
    c = simulate_trace("seed_id", n=500, noise="student_t", sigma=0.3, df=4, seed=8)
    assert not np.array_equal(a.duration_ms, c.duration_ms)


def test_noise_does_not_change_the_design():
    a = simulate_trace(n=300, noise="gaussian", seed=4)
    b = simulate_trace(n=300, noise="ar1", seed=4)
    d = make_design(300, seed=4)
    for col in ("batch_size", "total_tokens", "chunk_sizes", "context_lens", "phase"):
        assert a[col].tolist() == b[col].tolist() == d[col].tolist()


@pytest.mark.parametrize("name", ["seed_id", "seed", "seed_gamma", "seed_ctx"])
def test_noise_free_trace_equals_model_predict_exactly(name):
    m = get_model(name)
    theta = default_truth(name)
    for kw in ({"noise": "none"}, {"noise": "gaussian", "sigma": 0.0}):
        tr = simulate_trace(name, theta, n=400, seed=3, **kw)
        assert np.array_equal(tr["duration_ms"].to_numpy(), m.predict(theta, step_features(tr)))


def test_truth_is_recorded():
    tr = simulate_trace("seed_id", n=50, noise="heteroscedastic", sigma=0.4, power=0.5, seed=9)
    t = tr.attrs["truth"]
    assert t["model"] == "seed_id" and t["seed"] == 9
    assert t["theta"] == default_truth("seed_id")
    assert t["noise"]["kind"] == "heteroscedastic" and t["noise"]["sigma"] == 0.4
    assert t["noise"]["power"] == 0.5 and t["noise"]["mu_ref"] > 0
    assert t["design"]["n"] == 50
    assert list(tr.columns) == ["step", "timestamp", "batch_size", "total_tokens",
                                "duration_ms", "chunk_sizes", "context_lens", "num_decode",
                                "num_prefill", "phase"]


def test_timestamps_are_back_to_back_step_starts():
    tr = simulate_trace(n=200, noise="multiplicative", seed=1)
    assert tr.timestamp.iloc[0] == 0.0
    np.testing.assert_allclose(np.diff(tr.timestamp), tr.duration_ms.iloc[:-1] / 1000.0,
                               rtol=1e-12, atol=1e-15)


def test_default_sigma_is_five_percent():
    tr = simulate_trace(n=100, noise="gaussian", seed=1)
    mu = get_model("seed_id").predict(default_truth("seed_id"), step_features(tr))
    assert tr.attrs["truth"]["noise"]["sigma"] == pytest.approx(0.05 * np.median(mu))
    assert simulate_trace(n=10, noise="ar1").attrs["truth"]["noise"]["sigma"] == 0.05


# ---------------------------------------------------------------------------
# noise laws
# ---------------------------------------------------------------------------

def test_gaussian_noise_sd_and_independence(design, mu):
    tr = simulate_trace(design=design, noise="gaussian", sigma=0.5, seed=1)
    r = tr.duration_ms.to_numpy() - mu
    assert np.std(r, ddof=1) / 0.5 == pytest.approx(1.0, abs=5 * se_sd(N))
    assert abs(np.mean(r)) < 5 * 0.5 / np.sqrt(N)
    assert abs(lag1(r)) < 5 / np.sqrt(N)


def test_multiplicative_noise_sd_on_log_scale(design, mu):
    tr = simulate_trace(design=design, noise="multiplicative", sigma=0.05, seed=2)
    e = np.log(tr.duration_ms.to_numpy() / mu)
    assert np.std(e, ddof=1) / 0.05 == pytest.approx(1.0, abs=5 * se_sd(N))
    assert abs(np.mean(e)) < 5 * 0.05 / np.sqrt(N)  # mu is the median of T
    assert abs(lag1(e)) < 5 / np.sqrt(N)


def test_student_t_noise_sd_and_heavy_tails(design, mu):
    df = 10.0
    tr = simulate_trace(design=design, noise="student_t", sigma=0.5, df=df, seed=3)
    r = tr.duration_ms.to_numpy() - mu
    kappa = 6.0 / (df - 4.0)
    assert np.std(r, ddof=1) / 0.5 == pytest.approx(1.0, abs=5 * se_sd(N, kappa))
    # excess kurtosis ~ 1 (Gaussian: 0, se ~ sqrt(24/n) = 0.035 there)
    z = (r - r.mean()) / r.std()
    assert np.mean(z**4) - 3.0 > 0.5


def test_heteroscedastic_noise_scales_with_mu(design, mu):
    tr = simulate_trace(design=design, noise="heteroscedastic", sigma=0.5, power=1.0, seed=4)
    spec = tr.attrs["truth"]["noise"]
    assert spec["mu_ref"] == pytest.approx(np.median(mu))
    r = tr.duration_ms.to_numpy() - mu
    scaled = r / (mu / spec["mu_ref"])
    assert np.std(scaled, ddof=1) / 0.5 == pytest.approx(1.0, abs=5 * se_sd(N))
    lo, hi = mu < np.quantile(mu, 0.25), mu > np.quantile(mu, 0.75)
    ratio = np.std(r[hi]) / np.std(r[lo])
    expected = np.sqrt(np.mean(mu[hi] ** 2) / np.mean(mu[lo] ** 2))
    assert ratio == pytest.approx(expected, rel=0.1)  # se of a log sd ratio ~ 0.014 at 5k/5k


def test_ar1_noise_sd_and_lag1_autocorrelation(design, mu):
    phi, s = 0.6, 0.05
    tr = simulate_trace(design=design, noise="ar1", sigma=s, phi=phi, seed=5)
    e = np.log(tr.duration_ms.to_numpy() / mu)
    se_s = 0.5 * np.sqrt(2 * (1 + phi**2) / (1 - phi**2) / N)
    assert np.std(e, ddof=1) / s == pytest.approx(1.0, abs=5 * se_s)
    assert lag1(e) == pytest.approx(phi, abs=5 * np.sqrt((1 - phi**2) / N))


def test_ar1_follows_step_order_not_row_order():
    d = make_design(5000, {"decode-only": 1.0}, seed=6)
    shuffled = d.sample(frac=1.0, random_state=0).reset_index(drop=True)
    tr = simulate_trace(design=shuffled, noise="ar1", sigma=0.05, phi=0.8, seed=6)
    mu = get_model("seed_id").predict(default_truth("seed_id"), step_features(tr))
    e = np.log(tr.duration_ms.to_numpy() / mu)
    by_step = e[np.argsort(tr.step.to_numpy())]
    assert lag1(by_step) == pytest.approx(0.8, abs=5 * np.sqrt((1 - 0.64) / 5000))
    assert abs(lag1(e)) < 5 / np.sqrt(5000)
    ts = tr.timestamp.to_numpy()[np.argsort(tr.step.to_numpy())]
    assert np.all(np.diff(ts) > 0)


def test_t_positive_by_redrawing_large_additive_noise():
    tr = simulate_trace(n=2000, noise="gaussian", sigma=20.0, seed=1)
    assert (tr.duration_ms > 0).all()
    assert tr.attrs["truth"]["noise"]["n_redrawn"] > 0
    small = simulate_trace(n=2000, noise="gaussian", sigma=0.3, seed=1)
    assert small.attrs["truth"]["noise"]["n_redrawn"] == 0


@pytest.mark.parametrize("kwargs,match", [
    ({"noise": "laplace"}, "noise must be one of"),
    ({"noise": "student_t", "df": 2.0}, "df must be > 2"),
    ({"noise": "ar1", "phi": 1.0}, r"phi must be in \(-1.0, 1.0\), got 1.0"),
    ({"noise": "gaussian", "sigma": -1.0}, "sigma must be >= 0"),
    ({"theta": {"tau_0": 1.0}}, "missing parameters"),
    ({"theta": {**default_truth("seed_id"), "tau_0": -1.0}}, "tau_0=-1.0 not in"),
    ({"model": "nope"}, "unknown model 'nope'"),
    ({"design": [1, 2]}, "design must be a DataFrame"),
])
def test_simulate_argument_errors(kwargs, match):
    kw = {"n": 20, "seed": 0}
    kw.update(kwargs)
    model = kw.pop("model", "seed_id")
    with pytest.raises(InputError, match=match):
        simulate_trace(model, **kw)


# ---------------------------------------------------------------------------
# default truth and the example trace
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["seed_id", "seed", "seed_gamma", "seed_ctx"])
def test_default_truth_matches_model_parameters(name):
    m = get_model(name)
    t = default_truth(name)
    assert list(t) == m.param_names
    assert np.all((m.lower <= list(t.values())) & (list(t.values()) <= m.upper))


def test_default_truth_is_realistic_and_seed_equals_seed_id():
    B = np.array([1.0, 8, 64, 1, 4])
    S = np.array([1.0, 8, 64, 2048, 2048])
    f = {"B": B, "S": S}
    t_id = get_model("seed_id").predict(default_truth("seed_id"), f)
    assert np.all((t_id[:3] > 5) & (t_id[:3] < 20))  # decode steps: 5-20 ms
    assert np.all((t_id[3:] > 80) & (t_id[3:] < 250))  # 2,048-token prefill: ~0.1-0.2 s
    t_seed = get_model("seed").predict(default_truth("seed"), f)
    np.testing.assert_allclose(t_seed, t_id, rtol=1e-13)
    with pytest.raises(InputError, match="unknown model"):
        default_truth("nope")


def test_example_trace_regenerates_identically(tmp_path):
    assert EXAMPLE.exists(), "data/example/example_trace.csv is missing"
    committed = read_trace(EXAMPLE)
    fresh = read_trace(write_example_trace(tmp_path / "ex.csv"))
    assert len(committed) == EXAMPLE_SPEC["n"]
    for col in ("step", "batch_size", "total_tokens", "chunk_sizes", "context_lens",
                "num_decode", "num_prefill", "phase"):
        assert committed[col].tolist() == fresh[col].tolist(), col
    for col in ("duration_ms", "timestamp"):
        np.testing.assert_allclose(committed[col], fresh[col], rtol=1e-12, atol=0)
    readme = (EXAMPLE.parent / "README.md").read_text()
    assert "SYNTHETIC" in readme and "python -m perfmodel.core.synthetic" in readme
    # multiplicative noise with sigma 0.05 around the default truth (se 0.0008 at n=2000)
    mu = get_model("seed_id").predict(default_truth("seed_id"), step_features(committed))
    e = np.log(committed.duration_ms.to_numpy() / mu)
    assert np.std(e, ddof=1) == pytest.approx(0.05, abs=5 * 0.05 * se_sd(2000))


def test_write_example_trace_refuses_to_overwrite_when_asked(tmp_path):
    p = tmp_path / "ex.csv"
    p.write_text("keep")
    with pytest.raises(InputError, match="exists"):
        write_example_trace(p, overwrite=False)
    assert p.read_text() == "keep"
    with pytest.raises(InputError, match="does not exist"):
        write_example_trace(tmp_path / "no" / "ex.csv")
