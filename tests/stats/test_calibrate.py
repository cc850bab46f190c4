"""Tests of perfmodel.stats.calibrate: step models calibrated from static-batch request latencies."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfmodel.core.model import get_model
from perfmodel.decisions.simulate import batch_features
from perfmodel.errors import InputError
from perfmodel.stats.calibrate import (
    calibrate_from_requests,
    grouped_kfold_requests,
    heldout_evaluation,
    integrate_jacobian,
    integrate_predict,
    predict_requests,
    static_batch_steps,
)

# a seed_id theta of realistic size (ms): 6 ms fixed, 0.02 ms/token at saturation
THETA_ID = np.array([6.0, 0.02, 0.02, 0.1, 0.5, 0.02, 1e-4])
# seed_ctx_mono: the same core plus attention and KV-read costs
THETA_MONO = np.array([6.0, 0.02, 0.1, 0.5, 0.02, 1e-4, 2e-7, 2e-4, 0.0])


def _rows(Bs=(1, 2, 4, 8, 16, 32, 64), Ls=(8, 16, 32, 64, 128, 256)):
    B, L = np.meshgrid(Bs, Ls, indexing="ij")
    return pd.DataFrame({"B": B.ravel(), "L": L.ravel()})


def _synthetic(theta, model, **kw):
    rows = _rows(**kw)
    rows["latency_s"] = predict_requests(theta, rows, model) / 1000.0
    return rows


# ---------------------------------------------------------------------------
# the integral
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("b,l", [(1, 1), (3, 1), (1, 5), (4, 6), (7, 2)])
def test_static_batch_steps_match_batch_features(b, l):
    steps, starts = static_batch_steps([2, b], [3, l])
    assert starts.tolist() == [0, 3]
    assert len(steps["B"]) == 3 + l
    for k in range(l):
        chunks = [l] * b if k == 0 else [1] * b
        ctx = [0] * b if k == 0 else [l + k - 1] * b
        ref = batch_features(chunks, ctx)
        for key, v in ref.items():
            assert steps[key][3 + k] == pytest.approx(float(v[0]), rel=1e-12, abs=1e-12), (key, k)


def test_integral_equals_a_loop_over_steps():
    m = get_model("seed_ctx_mono")
    B, L = np.array([1, 5, 16]), np.array([4, 1, 9])
    steps, starts = static_batch_steps(B, L)
    got = integrate_predict(m, THETA_MONO, steps, starts)
    for r, (b, l) in enumerate(zip(B, L)):
        tot = 0.0
        for k in range(l):
            f = batch_features([l] * b if k == 0 else [1] * b,
                               [0] * b if k == 0 else [l + k - 1] * b)
            tot += float(m.predict(THETA_MONO, f)[0])
        assert got[r] == pytest.approx(tot, rel=1e-12)


@pytest.mark.parametrize("name,theta", [("seed_id", THETA_ID), ("seed_ctx_mono", THETA_MONO)])
def test_integrated_jacobian_equals_finite_differences(name, theta):
    m = get_model(name)
    th = np.array(theta, float)
    th[th == 0] = 1e-5  # c_kv_mixed: a generic point off the bound
    steps, starts = static_batch_steps([1, 4, 32, 64], [16, 3, 64, 1])
    J = integrate_jacobian(m, th, steps, starts)
    assert J.shape == (4, m.n_params)
    T = integrate_predict(m, th, steps, starts)
    for j in range(m.n_params):
        # central differences: truncation ~ (h/theta)^2 = 1e-8, round-off ~ eps T / h
        h = 1e-4 * abs(th[j])
        up, dn = th.copy(), th.copy()
        up[j] += h
        dn[j] -= h
        fd = (integrate_predict(m, up, steps, starts) - integrate_predict(m, dn, steps, starts)) / (2 * h)
        tol = 1e-6 * np.abs(fd) + 20 * np.finfo(float).eps * T / h
        assert np.all(np.abs(J[:, j] - fd) <= tol), (m.param_names[j], J[:, j], fd)
    # the ctx-mixed term is structurally invisible to static batches
    if name == "seed_ctx_mono":
        assert np.all(J[:, m.param_names.index("c_kv_mixed")] == 0)


# ---------------------------------------------------------------------------
# recovery on synthetic rows
# ---------------------------------------------------------------------------

def _probe_steps():
    """Prefill and decode steps over a grid, inside and beyond the calibration rows."""
    pre = [batch_features([l] * b) for b in (1, 3, 16, 64) for l in (8, 100, 256)]
    dec = [batch_features([1] * b, [c] * b) for b in (1, 3, 16, 64) for c in (8, 200, 500)]
    return {k: np.concatenate([f[k] for f in pre + dec]) for k in pre[0]}


def test_recovers_seed_id_step_predictions():
    rows = _synthetic(THETA_ID, "seed_id")
    fit = calibrate_from_requests(rows, "seed_id", seed=0)
    assert fit.model_name == "seed_id" and fit.param_names == get_model("seed_id").param_names
    assert fit.mape < 1e-4
    probe = _probe_steps()
    truth = get_model("seed_id").predict(THETA_ID, probe)
    np.testing.assert_allclose(fit.predict(probe), truth, rtol=1e-4)
    np.testing.assert_allclose(fit.values, THETA_ID, rtol=1e-2)
    assert fit.options["target"] == "static_batch_requests"
    assert fit.n == len(rows) and fit.fitted.shape == (len(rows),)


def test_seed_ctx_mono_predicts_unseen_static_batches_and_flags_the_attention_split():
    rows = _synthetic(THETA_MONO, "seed_ctx_mono")
    fit = calibrate_from_requests(rows, "seed_ctx_mono", seed=1)
    assert fit.mape < 1e-3
    assert fit.options["fixed"] == {"c_kv_mixed": 0.0}
    assert fit.options["invisible"] == ["c_kv_mixed"]
    assert "c_kv_mixed" in fit.unidentified and fit.params["c_kv_mixed"] == 0.0
    assert any("c_attn + 3 c_kv" in w for w in fit.warnings)
    # static batches far outside the rows are predicted, whatever the split
    far = pd.DataFrame({"B": [3, 128, 100], "L": [1000, 512, 7]})
    truth = predict_requests(THETA_MONO, far, "seed_ctx_mono")
    np.testing.assert_allclose(predict_requests(fit, far), truth, rtol=1e-3)
    comb = fit.params["c_attn"] + 3 * fit.params["c_kv"]
    assert comb == pytest.approx(THETA_MONO[6] + 3 * THETA_MONO[7], rel=1e-2)


def test_seed_ctx_mono_recovers_step_predictions_with_the_prefill_attention_held():
    rows = _synthetic(THETA_MONO, "seed_ctx_mono")
    fit = calibrate_from_requests(rows, "seed_ctx_mono", seed=1, fixed={"c_attn": THETA_MONO[6]})
    assert fit.options["fixed"] == {"c_attn": THETA_MONO[6], "c_kv_mixed": 0.0}
    assert not any("c_attn + 3 c_kv" in w for w in fit.warnings)
    probe = _probe_steps()
    truth = get_model("seed_ctx_mono").predict(THETA_MONO, probe)
    np.testing.assert_allclose(fit.predict(probe), truth, rtol=1e-3)


def test_fit_round_trips_through_json(tmp_path):
    from perfmodel.core.results import FitResult

    rows = _synthetic(THETA_ID, "seed_id", Bs=(1, 4, 16, 64), Ls=(8, 32, 128))
    fit = calibrate_from_requests(rows, "seed_id", n_starts=2)
    back = FitResult.from_json(fit.to_json())
    np.testing.assert_allclose(back.values, fit.values)
    np.testing.assert_allclose(predict_requests(back, rows), predict_requests(fit, rows))
    assert back.options["fixed"] == {}


def test_heldout_and_kfold_on_synthetic_rows_predict_unseen_configurations():
    rows = _synthetic(THETA_ID, "seed_id")
    train = ((rows["B"] <= 16) & (rows["L"] <= 64)).to_numpy()
    res = heldout_evaluation(rows, train, "seed_id", n_starts=2)
    assert res.n_train == int(train.sum()) and res.n_test == int((~train).sum())
    assert res.mape_test < 1e-2
    # replicates of one configuration never straddle a fold
    rep = pd.concat([rows, rows.assign(latency_s=rows["latency_s"] * 1.01)], ignore_index=True)
    cv = grouped_kfold_requests(rep, "seed_id", k=4, seed=3, n_starts=1)
    cfg = rep["B"].astype(str) + "/" + rep["L"].astype(str)
    assert (pd.Series(cv.fold).groupby(cfg.to_numpy()).nunique() == 1).all()
    assert sorted(set(cv.fold.tolist())) == [0, 1, 2, 3]
    # half the rows are 1% slow: the out-of-fold error is about 0.5%, not 0
    assert np.all(np.isfinite(cv.pred_ms)) and 0.3 < cv.mape_test < 1.0


# ---------------------------------------------------------------------------
# input validation
# ---------------------------------------------------------------------------

@pytest.fixture
def good_rows():
    return _synthetic(THETA_ID, "seed_id", Bs=(1, 4, 16), Ls=(8, 32, 64))


def test_missing_column_is_named(good_rows):
    with pytest.raises(InputError, match="latency_s"):
        calibrate_from_requests(good_rows.drop(columns="latency_s"))
    with pytest.raises(InputError, match=r"\['L'\]"):
        predict_requests(THETA_ID, good_rows.drop(columns="L"), "seed_id")


@pytest.mark.parametrize("col,value", [("B", 0), ("L", 0), ("B", 2.5), ("L", np.nan)])
def test_bad_batch_or_length_names_the_column(good_rows, col, value):
    bad = good_rows.astype({col: float})
    bad.loc[[2, 5], col] = value
    with pytest.raises(InputError, match=rf"column '{col}'.*2 rows \(first \[2, 5\]\)"):
        calibrate_from_requests(bad, "seed_id")


def test_other_bad_inputs(good_rows):
    bad = good_rows.copy()
    bad.loc[0, "latency_s"] = 0.0
    with pytest.raises(InputError, match="latency_s"):
        calibrate_from_requests(bad)
    with pytest.raises(InputError, match="pandas DataFrame"):
        calibrate_from_requests(good_rows.to_dict())
    with pytest.raises(InputError, match="'model' has 2 values"):
        calibrate_from_requests(good_rows.assign(model=["a", "b"] * 4 + ["a"]))
    with pytest.raises(InputError, match="consistent"):
        calibrate_from_requests(good_rows.assign(consistent=[True] * 8 + [False]))
    with pytest.raises(InputError, match="seed_id"):
        calibrate_from_requests(good_rows, "seed")
    with pytest.raises(InputError, match="unknown model"):
        calibrate_from_requests(good_rows, "nope")
    with pytest.raises(InputError, match="fixed.*unknown parameters \\['c_x'\\]"):
        calibrate_from_requests(good_rows, "seed_id", fixed={"c_x": 1.0})
    with pytest.raises(InputError, match=r"fixed\['tau_B'\] = -1.0 is outside"):
        calibrate_from_requests(good_rows, "seed_id", fixed={"tau_B": -1})
    with pytest.raises(InputError, match="n_starts"):
        calibrate_from_requests(good_rows, n_starts=0)
    with pytest.raises(InputError, match="only 5 request rows"):
        calibrate_from_requests(good_rows.iloc[:5], "seed_id")
    with pytest.raises(InputError, match="train_mask"):
        heldout_evaluation(good_rows, np.ones(len(good_rows), bool), "seed_id")
    with pytest.raises(InputError, match="k must be"):
        grouped_kfold_requests(good_rows, "seed_id", k=1)
    with pytest.raises(InputError, match="model is required"):
        predict_requests(THETA_ID, good_rows)


# ---------------------------------------------------------------------------
# the public data (mirror)
# ---------------------------------------------------------------------------

def test_calibration_on_llm_inference_bench_vllm_h100(fetch_or_skip):
    from perfmodel.data.datasets import load_llm_inference_bench

    fetch_or_skip("llm-inference-bench/all_results")
    df = load_llm_inference_bench(framework="vLLM", hardware="Nvidia H100 GPU",
                                  model="meta-llama/Meta-Llama-3-8B", consistent_only=True)
    g = df[df["num_hardware"] == 1]
    assert len(g) >= 15
    fit = calibrate_from_requests(g, "seed_ctx_mono", n_starts=2)
    assert np.isfinite(fit.mape) and fit.mape < 10.0
    assert np.all(np.isfinite(fit.values))
    # a step prediction is a sensible decode time for an 8B model on one H100 (ms)
    t = fit.predict(batch_features([1] * 16, [1000] * 16))[0]
    assert 3.0 < t < 30.0


def test_an_ablation_without_a_saturation_rate_is_refused_by_name():
    rows = pd.DataFrame({"B": [1, 1, 8, 8], "L": [64, 256, 64, 256],
                         "latency_s": [0.1, 0.3, 0.2, 0.5]})
    with pytest.raises(InputError, match="seed_ctx_mono_nokb.*k_B"):
        calibrate_from_requests(rows, "seed_ctx_mono_nokb")
