"""Tests of perfmodel.decisions.factors on synthetic fixed-S slices with known drivers."""
from __future__ import annotations

import argparse
import json

import numpy as np
import pandas as pd
import pytest

from perfmodel.cli.factors import add_factors_arguments, factors_command
from perfmodel.decisions.factors import (
    secondary_factors,
    step_factor_table,
)
from perfmodel.errors import InputError

S_FIX = 4096
NOISE = 1.0


def _slice(n=600, seed=0, S=S_FIX):
    """Steps of S tokens; duration = 100 + 0.5 B + 0.004 chunk_sd + noise (sd 1 ms)."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        b = int(rng.integers(6, 16))
        nd = int(rng.integers(0, b - 1))  # decodes, at least one prefill
        npf = b - nd
        w = rng.dirichlet(np.full(npf, 0.7))
        pre = np.maximum(1, np.floor(w * (S - nd))).astype(int)
        pre[0] += S - nd - pre.sum()
        if pre[0] < 1:  # pragma: no cover - rare rounding
            continue
        c = np.concatenate([np.ones(nd, int), pre])
        x = rng.integers(0, 3000, b)
        rows.append((c, x))
    c_sd = np.array([c.std() for c, _ in rows])
    B = np.array([len(c) for c, _ in rows])
    signal = 100 + 0.5 * B + 0.004 * c_sd
    y = signal + rng.normal(0, NOISE, len(rows))
    df = pd.DataFrame({
        "batch_size": B, "total_tokens": [int(c.sum()) for c, _ in rows],
        "duration_ms": y,
        "chunk_sizes": [";".join(map(str, c)) for c, _ in rows],
        "context_lens": [";".join(map(str, x)) for _, x in rows],
    })
    return df, signal


class Oracle:
    """A 'fitted model' that predicts the true signal of the slice."""

    def __init__(self, df, signal):
        self.map = dict(zip(df["chunk_sizes"], signal))
        self.model_name = "oracle"

    def predict(self, d):
        return np.array([self.map[c] for c in d["chunk_sizes"]])


@pytest.fixture(scope="module")
def data():
    return _slice()


@pytest.fixture(scope="module")
def result(data):
    df, signal = data
    return secondary_factors(df, S_FIX, fit=Oracle(df, signal), n_estimators=60, seed=1)


def test_summary_statistics(data, result):
    df, _ = data
    y = df["duration_ms"]
    assert result.n_steps == len(df)
    assert result.mean_ms == pytest.approx(y.mean())
    assert result.sd_ms == pytest.approx(y.std(ddof=1))
    assert result.cv == pytest.approx(y.std(ddof=1) / y.mean())


def test_features_per_step(data):
    df, _ = data
    f = step_factor_table(df.head(3))
    c = np.array(df["chunk_sizes"].iloc[0].split(";"), int)
    x = np.array(df["context_lens"].iloc[0].split(";"), int)
    r = f.iloc[0]
    assert r["num_requests"] == c.size
    assert r["chunk_sd"] == pytest.approx(c.std())
    assert r["max_chunk"] == c.max()
    assert r["ctx_max"] == x.max() and r["ctx_sum"] == x.sum()
    assert r["num_decode"] == (c == 1).sum() and r["num_prefill"] == (c > 1).sum()


def test_drivers_found(result):
    corr = result.correlations
    # number of requests and chunk spread drive the time; contexts do not
    top2 = set(result.importance.index[:2])
    assert "num_requests" in top2
    assert abs(corr.loc["num_requests", "pearson_r"]) > 0.5
    # chunk spread: the second driver, correlated positively
    assert corr.loc["chunk_sd", "pearson_r"] > 0.2
    assert corr.loc["num_requests", "spearman_p"] < 1e-10


def test_random_forest_r2_near_truth(data, result):
    df, _ = data
    y = df["duration_ms"].to_numpy()
    r2_true = 1 - NOISE**2 / y.var()
    assert result.rf_cv_r2 == pytest.approx(r2_true, abs=0.1)
    assert result.rf_oob_r2 == pytest.approx(r2_true, abs=0.1)


def test_model_explains_variance(data, result):
    df, signal = data
    y = df["duration_ms"].to_numpy()
    expect = 1 - np.sum((y - signal) ** 2) / np.sum((y - y.mean()) ** 2)
    assert result.model_r2 == pytest.approx(expect, rel=1e-9)
    assert result.model_name == "oracle"
    assert abs(result.model_bias_ms) < 0.2
    # the factors add nothing beyond a model that knows the signal
    assert result.residual_rf_cv_r2 < 0.05


def test_by_requests_table(data, result):
    df, _ = data
    g = df.groupby("batch_size")["duration_ms"]
    t = result.by_requests
    assert t.index.tolist() == sorted(df["batch_size"].unique())
    assert np.allclose(t["mean_ms"], g.mean().to_numpy())
    assert np.allclose(t["sd_ms"], g.std().to_numpy())
    assert t["n"].tolist() == g.count().tolist()


def test_report_and_json(result):
    text = result.report()
    assert f"S = {S_FIX}" in text and "random forest" in text and "requests" in text
    json.dumps(result.to_dict())


def test_tolerance_and_other_steps_ignored(data):
    df, _ = data
    other, _ = _slice(n=80, seed=9, S=1000)
    near, _ = _slice(n=40, seed=3, S=4100)
    both = pd.concat([df, other, near], ignore_index=True)
    r0 = secondary_factors(both, S_FIX, n_estimators=20)
    assert r0.n_steps == len(df)
    r1 = secondary_factors(both, S_FIX, tol=4, n_estimators=20)
    assert r1.n_steps == len(df) + len(near)


def test_machine_state_used_but_not_cpu_time(data):
    df, _ = data
    rng = np.random.default_rng(4)
    d2 = df.assign(cpu_ms=df["duration_ms"] * 0.99, loadavg=rng.uniform(0, 2, len(df)))
    r = secondary_factors(d2, S_FIX, n_estimators=20)
    assert "loadavg" in r.correlations.index
    assert "cpu_ms" not in r.correlations.index  # measured over the step itself: leakage


def test_deterministic_given_seed(data):
    df, _ = data
    a = secondary_factors(df, S_FIX, n_estimators=20, seed=3).to_dict()
    b = secondary_factors(df, S_FIX, n_estimators=20, seed=3).to_dict()
    assert a == b


def test_without_chunk_lists(data):
    df, _ = data
    r = secondary_factors(df[["batch_size", "total_tokens", "duration_ms"]], S_FIX,
                          n_estimators=20)
    assert list(r.correlations.index) == ["num_requests"]
    assert any("no chunk_sizes" in n for n in r.notes)


def test_bad_arguments(data):
    df, _ = data
    with pytest.raises(InputError, match=r"tokens=4000, tol=0: 0 steps selected.*S=4096"):
        secondary_factors(df, 4000)
    with pytest.raises(InputError, match="tokens must be"):
        secondary_factors(df, 0)
    with pytest.raises(InputError, match="tol must be"):
        secondary_factors(df, S_FIX, tol=-1)
    with pytest.raises(InputError, match="duration_ms"):
        secondary_factors(df.drop(columns="duration_ms"), S_FIX)
    with pytest.raises(InputError, match="DataFrame"):
        secondary_factors([1, 2], S_FIX)
    with pytest.raises(InputError, match="predict"):
        secondary_factors(df, S_FIX, fit=object(), n_estimators=20)


def test_factors_command(data, tmp_path):
    df, _ = data
    path = tmp_path / "trace.csv"
    df.to_csv(path, index=False)
    p = argparse.ArgumentParser()
    add_factors_arguments(p)
    args = p.parse_args([str(path), "--tokens", str(S_FIX), "--n-estimators", "20"])
    text, d = factors_command(args)
    assert d["n_steps"] == len(df) and d["tokens"] == S_FIX
    assert "correlation" in text
    json.dumps(d)
