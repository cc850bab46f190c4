"""Tests of perfmodel.stats.baselines: known coefficients recovered from synthetic traces,
agreement with statsmodels least squares, the shared interface, input checks."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from numpy.testing import assert_allclose
from sklearn.exceptions import NotFittedError

from perfmodel.errors import InputError
from perfmodel.stats import baselines as bl


def make_trace(n=300, seed=0, decode_only=False):
    """Synthetic step trace with per-request chunks and contexts (no durations)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        nd = int(rng.integers(1, 24))
        npf = 0 if decode_only else int(rng.integers(0, 3))
        ch = [1] * nd + [int(rng.integers(2, 600)) for _ in range(npf)]
        ctx = [int(rng.integers(1, 3000)) for _ in range(nd)] + \
              [int(rng.integers(0, 1500)) for _ in range(npf)]
        perm = rng.permutation(len(ch))
        ch, ctx = [ch[j] for j in perm], [ctx[j] for j in perm]
        rows.append({"step": i, "batch_size": len(ch), "total_tokens": sum(ch),
                     "chunk_sizes": ";".join(map(str, ch)),
                     "context_lens": ";".join(map(str, ctx))})
    return pd.DataFrame(rows)


ROOF_CFG = {"hidden_size": 64, "intermediate_size": 256, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "vocab_size": 1000}


@pytest.fixture(scope="module")
def trace():
    return make_trace()


def test_request_features_by_hand():
    df = pd.DataFrame({"batch_size": [3, 1], "total_tokens": [102, 7],
                       "chunk_sizes": ["1;100;1", "7"], "context_lens": ["10;0;30", 5]})
    f = bl._request_features(df)
    assert_allclose(f["ctx_sum"], [40, 5])
    assert_allclose(f["ctx_max"], [30, 5])
    assert_allclose(f["attn"], [1 * 10.5 + 100 * 50 + 1 * 30.5, 7 * (5 + 3.5)])
    assert_allclose(f["decode_ctx"], [40, 0])
    assert_allclose(f["prefill_sq"], [10000, 49])
    assert_allclose(f["chunk_sd"], [np.std([1, 100, 1]), 0])
    assert_allclose(f["n_decode"], [2, 0])
    assert_allclose(f["s_prefill"], [100, 7])


def test_request_features_match_trace_step_features(trace):
    trace_mod = pytest.importorskip("perfmodel.data.trace", reason="perfmodel.data.trace not written yet")
    if not hasattr(trace_mod, "step_features"):
        pytest.skip("perfmodel.data.trace has no step_features yet")
    df = trace.assign(duration_ms=1.0)
    ref = trace_mod.step_features(df)
    mine = bl._request_features(df)
    for k in ("ctx_sum", "ctx_max", "attn", "decode_ctx", "prefill_sq", "chunk_sd"):
        assert_allclose(mine[k], ref[k], rtol=1e-12, err_msg=k)


def test_request_features_reject_bad_rows():
    df = pd.DataFrame({"batch_size": [2, 2, 2, 2], "total_tokens": [5, 5, 5, 5],
                       "chunk_sizes": ["1;4", "1;3", "x;4", "1;4"],
                       "context_lens": ["0;0", "0;0", "0;0", "0"]})
    # one message lists every problem found
    with pytest.raises(InputError, match=r"not ';'-joined integers: fails at rows \[2\] "
                                         r"\(1 of 4\); .*must each list.*rows \[3\]"):
        bl._request_features(df)
    with pytest.raises(InputError, match=r"must each list `batch_size`.*rows \[3\]"):
        bl._request_features(df.iloc[[0, 1, 3]])
    with pytest.raises(InputError, match=r"must sum to `total_tokens`.*rows \[1\]"):
        bl._request_features(df.iloc[[0, 1]])


def test_linear_recovers_known_coefficients(trace):
    df = trace.assign(duration_ms=2.5 + 0.3 * trace.batch_size + 0.012 * trace.total_tokens)
    m = bl.LinearBS().fit(df)
    assert m.fit(df) is m
    assert_allclose(list(m.params_.values()), [2.5, 0.3, 0.012], rtol=1e-10)
    assert_allclose(m.predict(df), df.duration_ms, rtol=1e-10)
    assert m.n_params == 3 and m.rank_ == 3


@pytest.mark.parametrize("relative", [False, True])
def test_linear_equals_statsmodels(trace, relative):
    rng = np.random.default_rng(1)
    T = (2.5 + 0.3 * trace.batch_size + 0.012 * trace.total_tokens) * \
        np.exp(rng.normal(0, 0.1, len(trace)))
    df = trace.assign(duration_ms=T)
    X = sm.add_constant(df[["batch_size", "total_tokens"]].to_numpy(float))
    ref = (sm.WLS(T, X, weights=1 / T**2) if relative else sm.OLS(T, X)).fit()
    m = bl.LinearBS(relative=relative).fit(df)
    assert_allclose(m.coef_, ref.params, rtol=1e-9)


@pytest.mark.parametrize("degree", [2, 3])
def test_polynomial_fits_polynomial_truth_and_equals_ols(trace, degree):
    B, S = trace.batch_size.to_numpy(float), trace.total_tokens.to_numpy(float)
    truth = 3 + 0.2 * B + 0.01 * S + 1e-3 * B * B + 2e-6 * S * S - 1e-5 * B * S
    if degree == 3:
        truth = truth + 1e-9 * S**3
    m = bl.get_baseline(f"poly{degree}").fit(trace.assign(duration_ms=truth))
    assert m.n_params == {2: 6, 3: 10}[degree] and m.name == f"poly{degree}"
    new = make_trace(50, seed=9)
    Bn, Sn = new.batch_size.to_numpy(float), new.total_tokens.to_numpy(float)
    tn = 3 + 0.2 * Bn + 0.01 * Sn + 1e-3 * Bn**2 + 2e-6 * Sn**2 - 1e-5 * Bn * Sn + \
        (1e-9 * Sn**3 if degree == 3 else 0)
    assert_allclose(m.predict(new), tn, rtol=1e-8)
    # with noise: same predictions as OLS on the raw monomials
    y = truth * np.exp(np.random.default_rng(2).normal(0, 0.05, B.size))
    mons = [B**i * S**j for i in range(degree + 1) for j in range(degree + 1 - i)]
    X = np.column_stack(mons)
    ref = sm.OLS(y, X).fit()
    m.fit(trace.assign(duration_ms=y))
    assert_allclose(m.predict(trace), ref.fittedvalues, rtol=1e-7)


def test_constant_throughput_recovers_P_and_bounds_it(trace):
    S = trace.total_tokens.to_numpy(float)
    m = bl.ConstantThroughput().fit(trace.assign(duration_ms=4.0 + S / 250.0))
    assert_allclose([m.params_["a"], m.P_], [4.0, 250.0], rtol=1e-10)
    assert m.n_params == 2
    # T falling with S: the unconstrained slope is negative, the fit puts 1/P = 0
    m2 = bl.ConstantThroughput().fit(trace.assign(duration_ms=100.0 - S / 1e3))
    assert m2.params_["inv_P"] == 0.0 and m2.P_ == np.inf
    assert_allclose(m2.params_["a"], np.mean(100.0 - S / 1e3), rtol=1e-10)


def test_distserve_recovers_known_coefficients(trace):
    f = bl._request_features(trace)
    T = 3 + 0.02 * f["s_prefill"] + 1e-5 * f["prefill_sq"] + 1e-3 * f["decode_ctx"] + \
        0.1 * f["n_decode"]
    m = bl.get_baseline("distserve").fit(trace.assign(duration_ms=T))
    assert_allclose(list(m.params_.values()), [3, 0.02, 1e-5, 1e-3, 0.1], rtol=1e-9)
    assert m.rank_ == 5 and m.n_params == 5


def test_distserve_needs_request_columns_and_reports_rank(trace):
    df = trace.assign(duration_ms=1.0 + 0.01 * trace.total_tokens)
    with pytest.raises(InputError, match="lacks column.*chunk_sizes"):
        bl.DistServe().fit(df.drop(columns=["chunk_sizes"]))
    dec = make_trace(100, seed=3, decode_only=True)
    f = bl._request_features(dec)
    m = bl.DistServe().fit(dec.assign(duration_ms=2 + 1e-3 * f["decode_ctx"] + 0.1 * f["n_decode"]))
    assert m.rank_ == 3
    assert m.params_["b_prefill_tokens"] == 0 and m.params_["c_prefill_sq"] == 0
    assert_allclose(m.params_["d_decode_ctx"], 1e-3, rtol=1e-9)


def test_random_forest_seeded_and_uses_context(trace):
    f = bl._request_features(trace)
    T = 5 + 0.01 * trace.total_tokens.to_numpy() + 2e-3 * f["ctx_sum"]
    df = trace.assign(duration_ms=T)
    m1 = bl.get_baseline("random_forest", n_estimators=50).fit(df)
    m2 = bl.get_baseline("random_forest", n_estimators=50).fit(df)
    assert_allclose(m1.predict(df), m2.predict(df), rtol=0)
    assert m1.n_params is None
    assert m1.features_[:2] == ("B", "S") and "ctx_sum" in m1.features_
    imp = m1.feature_importances_
    assert abs(sum(imp.values()) - 1) < 1e-9
    plain = bl.RandomForest(n_estimators=50).fit(df.drop(columns=["chunk_sizes",
                                                                  "context_lens"]))
    assert plain.features_ == ("B", "S")
    with pytest.raises(InputError, match="context_lens"):
        m1.predict(df.drop(columns=["context_lens"]))
    rel = bl.RandomForest(n_estimators=50, relative=True).fit(df)
    assert (rel.predict(df) > 0).all()
    r2 = 1 - np.sum((m1.predict(df) - T) ** 2) / np.sum((T - T.mean()) ** 2)
    assert r2 > 0.9


def test_relative_fit_weights_errors_by_one_over_T(trace):
    # Relative fitting minimises sum ((T - That)/T)^2: its relative error is no larger
    rng = np.random.default_rng(4)
    T = (1 + 0.05 * trace.total_tokens.to_numpy(float)) * np.exp(rng.normal(0, 0.3, len(trace)))
    df = trace.assign(duration_ms=T)
    for name in ("linear", "poly2", "constant_throughput", "distserve"):
        abs_fit = bl.get_baseline(name).fit(df).predict(df)
        rel_fit = bl.get_baseline(name, relative=True).fit(df).predict(df)
        assert np.sum(((T - rel_fit) / T) ** 2) <= np.sum(((T - abs_fit) / T) ** 2) + 1e-9
        assert np.sum((T - abs_fit) ** 2) <= np.sum((T - rel_fit) ** 2) + 1e-9


def test_registry_and_interface(trace):
    df = trace.assign(duration_ms=1 + 0.01 * trace.total_tokens)
    extra = {"random_forest": {"n_estimators": 10},
             "roofline": {"model_config": ROOF_CFG, "peak_tflops": 1.0, "peak_tbps": 1.0},
             "trained_roofline": {"model_config": ROOF_CFG}}
    for name in bl.BASELINES:
        m = bl.get_baseline(name, **extra.get(name, {}))
        assert m.name == name
        with pytest.raises(NotFittedError):
            m.predict(df)
        assert m.fit(df) is m
        p = m.predict(df.iloc[:7])
        assert isinstance(p, np.ndarray) and p.shape == (7,)
    with pytest.raises(InputError, match="unknown baseline 'spline'"):
        bl.get_baseline("spline")
    with pytest.raises(InputError, match="bad argument for baseline 'linear'"):
        bl.get_baseline("linear", degree=3)
    with pytest.raises(InputError, match="`degree` must be 2 or 3"):
        bl.Polynomial(degree=4).fit(df)
    with pytest.raises(InputError, match="`relative`"):
        bl.LinearBS(relative="log").fit(df)


def test_trace_input_checks(trace):
    df = trace.assign(duration_ms=1.0)
    with pytest.raises(InputError, match=r"lacks column\(s\) \['duration_ms'\]"):
        bl.LinearBS().fit(trace)
    bad = df.copy()
    bad.loc[[4, 9], "duration_ms"] = np.nan
    with pytest.raises(InputError, match=r"`duration_ms` has missing.*rows \[4, 9\] \(2 of 300\)"):
        bl.LinearBS().fit(bad)
    bad = df.copy()
    bad.loc[5, "total_tokens"] = 0
    with pytest.raises(InputError, match=r"`total_tokens` must be >= `batch_size`.*rows \[5\]"):
        bl.LinearBS().fit(bad)
    bad = df.copy()
    bad.loc[6, "duration_ms"] = -1.0
    with pytest.raises(InputError, match=r"`duration_ms` must be > 0.*rows \[6\]"):
        bl.ConstantThroughput().fit(bad)
    with pytest.raises(InputError, match="must be a pandas DataFrame"):
        bl.LinearBS().fit(df.to_numpy())
    m = bl.LinearBS().fit(df)
    with pytest.raises(InputError, match=r"lacks column\(s\) \['batch_size'\]"):
        m.predict(df.drop(columns=["batch_size"]))


def test_trace_check_reports_every_problem_in_one_message(trace):
    bad = trace.assign(duration_ms=1.0)
    bad.loc[2, "batch_size"] = np.nan
    bad.loc[7, "total_tokens"] = 0
    bad.loc[[8, 11], "duration_ms"] = 0.0
    with pytest.raises(InputError) as info:
        bl.LinearBS().fit(bad)
    msg = str(info.value)
    assert "`batch_size` has missing or non-numeric values at rows [2] (1 of 300)" in msg
    assert "`total_tokens` must be >= `batch_size`; fails at rows [7] (1 of 300)" in msg
    assert "`duration_ms` must be > 0; fails at rows [8, 11] (2 of 300)" in msg


# ---------------------------------------------------------------- peers and the ablation
def test_nnls_ctx_recovers_known_coefficients_and_keeps_them_non_negative(trace):
    f = bl._request_features(trace)
    B = trace["batch_size"].to_numpy(float)
    S = trace["total_tokens"].to_numpy(float)
    mixed = (f["attn_prefill"] > 0).astype(float)
    truth = [2.0, 0.05, 0.01, 2e-6, 1e-4, 3e-5]
    T = truth[0] + truth[1] * B + truth[2] * S + truth[3] * f["attn_prefill"] + \
        truth[4] * f["ctx_sum"] + truth[5] * f["ctx_sum"] * mixed
    m = bl.get_baseline("nnls_ctx", relative=True).fit(trace.assign(duration_ms=T))
    assert_allclose(list(m.params_.values()), truth, rtol=1e-6)
    # a time that falls with B: least squares would give c_B < 0, NNLS puts it at 0
    m2 = bl.get_baseline("nnls_ctx").fit(trace.assign(duration_ms=50 - 0.5 * B + 0.01 * S))
    assert m2.params_["c_B"] == 0.0 and min(m2.params_.values()) >= 0


def test_splitwise_interp_is_exact_on_knots_and_linear_between():
    S = np.array([1, 2, 4, 100, 200, 400])
    B = np.array([1, 2, 4, 1, 2, 2])  # three decode steps (S == B), three prefill
    T = np.array([1.0, 1.5, 2.5, 10.0, 20.0, 30.0])
    df = pd.DataFrame({"batch_size": B, "total_tokens": S, "duration_ms": T})
    m = bl.get_baseline("splitwise_interp").fit(df)
    assert_allclose(m.predict(df), T)
    q = pd.DataFrame({"batch_size": [3, 1, 1], "total_tokens": [3, 150, 600]})
    # decode S=3 between knots 2 and 4; prefill 150 between 100 and 200; 600 extrapolated
    assert_allclose(m.predict(q), [2.0, 15.0, 40.0])


def test_roofline_is_affine_in_the_roof_and_needs_its_description(trace):
    cfg = ROOF_CFG
    m = bl.get_baseline("roofline", model_config=cfg, peak_tflops=1e-3, peak_tbps=1e-3)
    roof = m.roof_ms(trace)
    assert (roof > 0).all()
    m.fit(trace.assign(duration_ms=0.5 + 2.0 * roof))
    assert_allclose([m.params_["a"], m.params_["b"]], [0.5, 2.0], rtol=1e-6)
    # by hand for one step: FLOPs bound with these peaks
    one = trace.iloc[[0]]
    f = bl._request_features(one)
    p_layer = 64 * (2 * 64 + 2 * 32) + 3 * 64 * 256
    flops = 2 * (2 * one["total_tokens"].iloc[0] * p_layer + 4 * 64 * f["attn"][0]) + \
        2 * one["batch_size"].iloc[0] * 64 * 1000
    nbytes = 2 * (2 * p_layer + 64 * 1000) + 2 * 2 * 2 * 32 * (f["ctx_sum"][0]
                                                               + one["total_tokens"].iloc[0])
    assert m.roof_ms(one)[0] == pytest.approx(1e3 * max(flops / 1e9, nbytes / 1e9))
    with pytest.raises(InputError, match="model_config"):
        bl.get_baseline("roofline").fit(trace.assign(duration_ms=1.0))


@pytest.mark.parametrize("relative", [False, True])
def test_trained_roofline_recovers_known_peaks(trace, relative):
    m0 = bl.TrainedRoofline(model_config=ROOF_CFG)
    F, M = m0._design(trace, bl.check_step_columns(trace, need_y=False)).T
    # ceilings with the ridge inside the data: some steps compute-bound, some memory-bound
    pi = np.median(F / M) * 1e6   # FLOP/ms
    beta = 1e6                    # byte/ms
    T = 0.3 + np.maximum(F / pi, M / beta)
    comp = F / pi > M / beta
    assert 0.2 < comp.mean() < 0.8
    m = bl.get_baseline("trained_roofline", model_config=ROOF_CFG, relative=relative)
    m.fit(trace.assign(duration_ms=T))
    assert_allclose(list(m.params_.values()), [0.3, 1 / pi, 1 / beta], rtol=1e-5)
    assert m.peak_tflops_ == pytest.approx(pi * 1e3 / 1e12, rel=1e-5)
    assert m.peak_tbps_ == pytest.approx(beta * 1e3 / 1e12, rel=1e-5)
    assert_allclose(m.predict(trace.iloc[:9]), T[:9], rtol=1e-6)
    # the same counts as the calibrated roofline: at its fitted peaks (efficiency 1) the two agree
    rl = bl.get_baseline("roofline", model_config=ROOF_CFG, peak_tflops=m.peak_tflops_,
                         peak_tbps=m.peak_tbps_)
    assert_allclose(rl.roof_ms(trace) + m.params_["a"], m.predict(trace), rtol=1e-6)


def test_trained_roofline_noisy_memory_bound_and_inputs(trace):
    m0 = bl.TrainedRoofline(model_config=ROOF_CFG, bytes_per_element=4)
    F, M = m0._design(trace, bl.check_step_columns(trace, need_y=False)).T
    rng = np.random.default_rng(1)
    # every step memory-bound (compute ceiling far away): the bandwidth is recovered within the
    # noise; the compute ceiling binds on few steps (where it fits the noise)
    beta = 2e5
    T = (1.0 + M / beta) * np.exp(rng.normal(0, 0.01, len(trace)))
    m = bl.TrainedRoofline(model_config=ROOF_CFG, bytes_per_element=4, relative=True)
    m.fit(trace.assign(duration_ms=T))
    assert m.params_["inv_beta"] == pytest.approx(1 / beta, rel=0.02)
    assert np.mean(m.params_["inv_pi"] * F > m.params_["inv_beta"] * M) < 0.1
    assert min(m.params_.values()) >= 0
    with pytest.raises(InputError, match="model_config"):
        bl.TrainedRoofline().fit(trace.assign(duration_ms=1.0))
    with pytest.raises(InputError, match="bytes_per_element"):
        bl.TrainedRoofline(model_config=ROOF_CFG, bytes_per_element=0).fit(
            trace.assign(duration_ms=1.0))
    with pytest.raises(InputError, match="context_lens"):
        bl.TrainedRoofline(model_config=ROOF_CFG).fit(
            trace.drop(columns="context_lens").assign(duration_ms=1.0))
    with pytest.raises(NotFittedError):
        bl.TrainedRoofline(model_config=ROOF_CFG).predict(trace)
