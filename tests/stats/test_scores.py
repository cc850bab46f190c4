"""Tests of perfmodel.stats.scores: regime labels and metrics against scikit-learn."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose
from sklearn import metrics as skm

from perfmodel.errors import InputError
from perfmodel.stats import scores as sc


# ---------------------------------------------------------------- regimes, extrapolation
def test_regime_labels():
    df = pd.DataFrame({
        "batch_size":   [8, 2, 2, 1, 4, 10],
        "total_tokens": [8, 65, 40, 2, 100, 10 + 300],
        "chunk_sizes": ["1;1;1;1;1;1;1;1", "1;64", "1;39", "2", "25;25;25;25",
                        "1;1;1;1;1;1;1;1;1;301"],
        "context_lens": ["1"] * 6,
    })
    lab = sc.regime(df)
    assert list(lab) == ["decode-only", "prefill-heavy", "mixed", "prefill-heavy",
                         "prefill-heavy", "mixed"]
    assert list(lab.cat.categories) == list(sc.REGIMES)
    assert list(sc.regime(df, prefill_ratio=20)) == ["decode-only", "prefill-heavy",
                                                     "prefill-heavy", "prefill-heavy",
                                                     "prefill-heavy", "prefill-heavy"]
    # without per-request data only S/B decides; num_decode takes precedence over chunks
    no_chunks = df.drop(columns=["chunk_sizes", "context_lens"])
    assert list(sc.regime(no_chunks))[3:5] == ["mixed", "mixed"]
    assert sc.regime(no_chunks.assign(num_decode=[8, 1, 1, 0, 0, 9]))[3] == "prefill-heavy"
    with pytest.raises(InputError, match="prefill_ratio"):
        sc.regime(df, prefill_ratio=1)




# ---------------------------------------------------------------- metrics
@given(seed=st.integers(0, 10**6), n=st.integers(2, 200))
@settings(max_examples=60, deadline=None)
def test_metrics_equal_sklearn(seed, n):
    rng = np.random.default_rng(seed)
    y = rng.lognormal(2, 1, n)
    yhat = y * rng.lognormal(0, 0.2, n) + rng.normal(0, 0.5, n)
    m = sc.metrics(y, yhat)
    assert m["n"] == n
    assert_allclose(m["R2"], skm.r2_score(y, yhat), rtol=1e-10)
    assert_allclose(m["RMSE"], np.sqrt(skm.mean_squared_error(y, yhat)), rtol=1e-10)
    assert_allclose(m["MAE"], skm.mean_absolute_error(y, yhat), rtol=1e-10)
    assert_allclose(m["MAPE"], 100 * skm.mean_absolute_percentage_error(y, yhat), rtol=1e-10)


def test_metrics_edge_cases_and_errors():
    assert np.isnan(sc.metrics([3.0], [2.0])["R2"])
    assert np.isnan(sc.metrics([3.0, 3.0], [2.0, 4.0])["R2"])
    with pytest.raises(InputError, match="`y` has 3 values but `yhat` has 2"):
        sc.metrics([1, 2, 3], [1, 2])
    with pytest.raises(InputError, match=r"`yhat` has non-finite values at rows \[1\]"):
        sc.metrics([1, 2, 3], [1, np.nan, 3])
    with pytest.raises(InputError, match="MAPE is undefined"):
        sc.metrics([0.0, 2.0], [1.0, 2.0])




def test_robust_metrics_mdape_and_rmsle():
    rng = np.random.default_rng(0)
    y = rng.uniform(1, 50, 101)
    yhat = y * np.exp(rng.normal(0, 0.2, y.size))
    m = sc.robust_metrics(y, yhat)
    assert m["MdAPE"] == pytest.approx(100 * np.median(np.abs(y - yhat) / y))
    assert m["RMSLE"] == pytest.approx(np.sqrt(np.mean((np.log(yhat) - np.log(y)) ** 2)))
    # one wild step moves the MAPE, hardly the MdAPE
    wild = yhat.copy()
    wild[0] = 100 * y[0]
    assert sc.metrics(y, wild)["MAPE"] > 5 * sc.metrics(y, yhat)["MAPE"]
    assert sc.robust_metrics(y, wild)["MdAPE"] == pytest.approx(m["MdAPE"], rel=0.05)
    assert np.isnan(sc.robust_metrics(y, -yhat)["RMSLE"])
    with pytest.raises(InputError, match="zero"):
        sc.robust_metrics(np.zeros(3), np.ones(3))
