"""Tests of perfmodel.validation: split properties (no leak, expanding windows),
regimes, extrapolation split, metrics against scikit-learn, cross_validate."""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose
from sklearn import metrics as skm
from sklearn.model_selection import TimeSeriesSplit

from perfmodel import baselines as bl
from perfmodel import validation as va
from perfmodel.errors import InputError


def make_trace(n=240, seed=0, noise=0.0):
    """Synthetic trace, T = 2 + 0.3 B + 0.01 S (x lognormal noise), configs of 4 replicates."""
    rng = np.random.default_rng(seed)
    B = rng.integers(1, 40, n // 4).repeat(4)
    extra = rng.choice([0, 0, 5, 200, 3000], n // 4).repeat(4)
    S = B + extra
    T = (2 + 0.3 * B + 0.01 * S) * np.exp(rng.normal(0, noise, n) if noise else 0)
    return pd.DataFrame({"step": np.arange(n), "batch_size": B, "total_tokens": S,
                         "duration_ms": T, "config": np.repeat(np.arange(n // 4), 4).astype(str)})


# ---------------------------------------------------------------- time series
@pytest.mark.parametrize("n,k,ts,gap", [(100, 5, None, 0), (103, 4, 7, 2), (50, 3, None, 3),
                                        (20, 2, 5, 0)])
def test_time_series_splits_equal_sklearn(n, k, ts, gap):
    ours = va.time_series_splits(n, k, ts, gap=gap)
    ref = list(TimeSeriesSplit(k, test_size=ts, gap=gap).split(np.zeros(n)))
    assert len(ours) == len(ref)
    for (a, b), (c, d) in zip(ours, ref):
        assert np.array_equal(a, c) and np.array_equal(b, d)


@given(n=st.integers(10, 400), k=st.integers(1, 8), ts=st.integers(1, 30),
       mt=st.integers(1, 50), gap=st.integers(0, 5))
@settings(max_examples=150, deadline=None)
def test_expanding_windows_grow_and_precede_tests(n, k, ts, mt, gap):
    last = n - gap - ts
    if last < mt or k > last - mt + 1:
        with pytest.raises(InputError):
            va.time_series_splits(n, k, ts, mt, gap=gap)
        return
    sp = va.time_series_splits(n, k, ts, mt, gap=gap)
    assert len(sp) == k
    sizes = [tr.size for tr, _ in sp]
    assert sizes[0] == mt and all(a < b for a, b in itertools.pairwise(sizes))
    for tr, te in sp:
        assert np.array_equal(tr, np.arange(tr.size))  # expanding from the first step
        assert te.size == ts and te[0] == tr.size + gap and te[-1] == te[0] + ts - 1
    if k >= 2:
        assert sp[-1][1][-1] == n - 1  # the last window ends at the last step


def test_seed_algorithm_every_cut_point():
    # docs/model.md, Evaluation: t = min_train .. n - test_size, step 1
    sp = va.time_series_splits(30, n_splits=21, test_size=5, min_train=5)
    assert [tr.size for tr, _ in sp] == list(range(5, 26))


def test_time_series_splits_with_order_column():
    rng = np.random.default_rng(0)
    t = rng.permutation(60).astype(float)
    sp = va.time_series_splits(60, 3, 10, order=t)
    for tr, te in sp:
        assert t[tr].max() < t[te].min()
        assert np.array_equal(np.sort(t[tr]), np.arange(tr.size))


def test_time_series_splits_input_errors():
    with pytest.raises(InputError, match="`n_splits`"):
        va.time_series_splits(50, 0)
    with pytest.raises(InputError, match="too short"):
        va.time_series_splits(10, 4, 5)
    with pytest.raises(InputError, match="exceeds n"):
        va.time_series_splits(10, 1, 5, 8)
    with pytest.raises(InputError, match="`order` must be 10 finite"):
        va.time_series_splits(10, 2, 2, order=np.arange(9))


# ---------------------------------------------------------------- grouped k-fold
@given(groups=st.lists(st.integers(0, 12), min_size=2, max_size=120),
       k=st.integers(2, 6), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=200, deadline=None)
def test_grouped_kfold_no_leak_property(groups, k, seed):
    g = np.array(groups)
    if k > np.unique(g).size:
        with pytest.raises(InputError, match="exceeds the number of distinct groups"):
            va.grouped_kfold(g, k, seed)
        return
    sp = va.grouped_kfold(g, k, seed)
    assert len(sp) == k
    tests = np.concatenate([te for _, te in sp])
    assert np.array_equal(np.sort(tests), np.arange(g.size))  # a partition
    for tr, te in sp:
        assert te.size > 0
        assert not set(g[tr]) & set(g[te])  # no group on both sides
        assert np.array_equal(np.sort(np.concatenate([tr, te])), np.arange(g.size))


def test_grouped_kfold_seeded_and_balanced():
    g = np.repeat(np.arange(40), 5)
    a = va.grouped_kfold(g, 5, seed=1)
    b = va.grouped_kfold(g, 5, seed=1)
    c = va.grouped_kfold(g, 5, seed=2)
    assert all(np.array_equal(x[1], y[1]) for x, y in zip(a, b))
    assert not all(np.array_equal(x[1], y[1]) for x, y in zip(a, c))
    assert {te.size for _, te in a} == {40}
    with pytest.raises(InputError, match="missing labels"):
        va.grouped_kfold(np.array([1.0, np.nan, 2.0]), 2)


def test_default_groups():
    df = make_trace(40)
    assert np.array_equal(va.default_groups(df), df["config"].to_numpy())
    bs = va.default_groups(df.drop(columns="config"))
    assert bs[0] == f"{df.batch_size[0]}|{df.total_tokens[0]}"
    sched = pd.DataFrame({"batch_size": [2, 2, 2], "total_tokens": [5, 5, 5],
                          "chunk_sizes": ["1;4", "1;4", "4;1"],
                          "context_lens": ["0;0", "0;0", "0;0"]})
    g = va.default_groups(sched, by="schedule")
    assert g[0] == g[1] != g[2]
    assert len(set(va.default_groups(sched, by="bs"))) == 1
    with pytest.raises(InputError, match="no `config` column"):
        va.default_groups(sched, by="config")


# ---------------------------------------------------------------- regimes, extrapolation
def test_regime_labels():
    df = pd.DataFrame({
        "batch_size":   [8, 2, 2, 1, 4, 10],
        "total_tokens": [8, 65, 40, 2, 100, 10 + 300],
        "chunk_sizes": ["1;1;1;1;1;1;1;1", "1;64", "1;39", "2", "25;25;25;25",
                        "1;1;1;1;1;1;1;1;1;301"],
        "context_lens": ["1"] * 6,
    })
    lab = va.regime(df)
    assert list(lab) == ["decode-only", "prefill-heavy", "mixed", "prefill-heavy",
                         "prefill-heavy", "mixed"]
    assert list(lab.cat.categories) == list(va.REGIMES)
    assert list(va.regime(df, prefill_ratio=20)) == ["decode-only", "prefill-heavy",
                                                     "prefill-heavy", "prefill-heavy",
                                                     "prefill-heavy", "prefill-heavy"]
    # without per-request data only S/B decides; num_decode takes precedence over chunks
    no_chunks = df.drop(columns=["chunk_sizes", "context_lens"])
    assert list(va.regime(no_chunks))[3:5] == ["mixed", "mixed"]
    assert va.regime(no_chunks.assign(num_decode=[8, 1, 1, 0, 0, 9]))[3] == "prefill-heavy"
    with pytest.raises(InputError, match="prefill_ratio"):
        va.regime(df, prefill_ratio=1)


def test_extrapolation_split():
    df = make_trace(200, seed=3)
    [(tr, te)] = va.extrapolation_split(df, "total_tokens", 0.7)
    S = df.total_tokens.to_numpy()
    assert S[tr].max() < S[te].min()
    assert np.array_equal(np.sort(np.concatenate([tr, te])), np.arange(200))
    [(trb, teb)] = va.extrapolation_split(df, column="batch_size", quantile=0.5)
    assert df.batch_size.to_numpy()[teb].min() > df.batch_size.to_numpy()[trb].max()
    with pytest.raises(InputError, match="nothing to extrapolate"):
        va.extrapolation_split(df.assign(x=1.0), "x", 0.5)
    with pytest.raises(InputError, match="`column` 'nope'"):
        va.extrapolation_split(df, "nope")


# ---------------------------------------------------------------- metrics
@given(seed=st.integers(0, 10**6), n=st.integers(2, 200))
@settings(max_examples=60, deadline=None)
def test_metrics_equal_sklearn(seed, n):
    rng = np.random.default_rng(seed)
    y = rng.lognormal(2, 1, n)
    yhat = y * rng.lognormal(0, 0.2, n) + rng.normal(0, 0.5, n)
    m = va.metrics(y, yhat)
    assert m["n"] == n
    assert_allclose(m["R2"], skm.r2_score(y, yhat), rtol=1e-10)
    assert_allclose(m["RMSE"], np.sqrt(skm.mean_squared_error(y, yhat)), rtol=1e-10)
    assert_allclose(m["MAE"], skm.mean_absolute_error(y, yhat), rtol=1e-10)
    assert_allclose(m["MAPE"], 100 * skm.mean_absolute_percentage_error(y, yhat), rtol=1e-10)


def test_metrics_edge_cases_and_errors():
    assert np.isnan(va.metrics([3.0], [2.0])["R2"])
    assert np.isnan(va.metrics([3.0, 3.0], [2.0, 4.0])["R2"])
    with pytest.raises(InputError, match="`y` has 3 values but `yhat` has 2"):
        va.metrics([1, 2, 3], [1, 2])
    with pytest.raises(InputError, match=r"`yhat` has non-finite values at rows \[1\]"):
        va.metrics([1, 2, 3], [1, np.nan, 3])
    with pytest.raises(InputError, match="MAPE is undefined"):
        va.metrics([0.0, 2.0], [1.0, 2.0])


# ---------------------------------------------------------------- cross-validation
def test_cross_validate_recovers_known_model_in_every_fold():
    df = make_trace(240)
    sp = va.time_series_splits(len(df), 4)
    tab = va.cross_validate(df, lambda: bl.get_baseline("linear"), sp)
    folds = tab[tab.fold.isin(range(4))]
    assert set(folds.regime) <= {"all", *va.REGIMES}
    assert (folds.RMSE < 1e-9).all() and (folds.MAPE < 1e-9).all()
    assert list(tab.model.unique()) == ["linear"]
    allrows = folds[folds.regime == "all"]
    assert list(allrows.n_test) == [sp[i][1].size for i in range(4)]
    assert list(allrows.n_train) == [sp[i][0].size for i in range(4)]


def test_cross_validate_summary_rows_and_coefficients():
    df = make_trace(400, seed=5, noise=0.05)
    sp = va.grouped_kfold(va.default_groups(df), k=5, seed=0)
    fitted = []

    def make():
        m = bl.LinearBS()
        fitted.append(m)
        return m

    tab = va.cross_validate(df, make, sp)
    # each fold's fit recovers the known coefficients (2, 0.3, 0.01) to within noise
    for m in fitted:
        assert_allclose(m.coef_, [2, 0.3, 0.01], rtol=0.15)
    folds = tab[(tab.fold != "mean") & (tab.fold != "pooled")]
    for r in ("all",) + va.REGIMES:
        sub = folds[folds.regime == r]
        if sub.empty:
            continue
        mean = tab[(tab.fold == "mean") & (tab.regime == r)].iloc[0]
        assert_allclose(mean[["R2", "RMSE", "MAE", "MAPE"]].to_numpy(float),
                        sub[["R2", "RMSE", "MAE", "MAPE"]].mean().to_numpy(float), rtol=1e-12)
        assert mean.n == sub.n.sum()
    # pooled = metrics of all out-of-fold predictions together
    y, p = [], []
    for m, (tr, te) in zip(fitted, sp):
        y.append(df.duration_ms.to_numpy()[te])
        p.append(m.predict(df.iloc[te]))
    ref = va.metrics(np.concatenate(y), np.concatenate(p))
    pooled = tab[(tab.fold == "pooled") & (tab.regime == "all")].iloc[0]
    assert_allclose(pooled[["R2", "RMSE", "MAE", "MAPE"]].to_numpy(float),
                    [ref["R2"], ref["RMSE"], ref["MAE"], ref["MAPE"]], rtol=1e-12)


def test_cross_validate_extrapolation_and_by_regime_off():
    df = make_trace(240, seed=2, noise=0.02)
    tab = va.cross_validate(df, lambda: bl.get_baseline("poly3"),
                            va.extrapolation_split(df), by_regime=False)
    assert set(tab.regime) == {"all"} and list(tab.fold) == [0, "mean", "pooled"]


def test_cross_validate_records_or_raises_failures():
    df = make_trace(80)

    class Flaky:
        name = "flaky"
        calls = 0

        def fit(self, d):
            Flaky.calls += 1
            if Flaky.calls == 2:
                raise RuntimeError("did not converge")
            self.m = bl.LinearBS().fit(d)
            # a model whose fit returns None still works

        def predict(self, d):
            return self.m.predict(d)

    sp = va.time_series_splits(len(df), 3)
    tab = va.cross_validate(df, Flaky, sp, errors="record")
    failed = tab[tab.error != ""]
    assert len(failed) == 1 and failed.fold.iloc[0] == 1
    assert "RuntimeError: did not converge" in failed.error.iloc[0]
    assert np.isnan(failed.RMSE.iloc[0])
    mean = tab[(tab.fold == "mean") & (tab.regime == "all")].iloc[0]
    assert mean.n == sp[0][1].size + sp[2][1].size
    Flaky.calls = 0
    with pytest.raises(RuntimeError, match="did not converge"):
        va.cross_validate(df, Flaky, sp)


def test_cross_validate_input_errors():
    df = make_trace(40)
    sp = va.time_series_splits(len(df), 2)
    with pytest.raises(InputError, match="`make_model` must be a callable"):
        va.cross_validate(df, bl.LinearBS(), sp)
    with pytest.raises(InputError, match="split 0: test indices outside"):
        va.cross_validate(df, bl.LinearBS, [(np.arange(5), np.array([50]))])
    with pytest.raises(InputError, match="empty test set"):
        va.cross_validate(df, bl.LinearBS, [(np.arange(5), np.array([], int))])
    with pytest.raises(InputError, match="`errors`"):
        va.cross_validate(df, bl.LinearBS, sp, errors="ignore")
    with pytest.raises(InputError, match=r"lacks column\(s\) \['duration_ms'\]"):
        va.cross_validate(df.drop(columns="duration_ms"), bl.LinearBS, sp)
