"""Tests of perfmodel.stats.splits: expanding windows (against scikit-learn's
TimeSeriesSplit), grouped k-fold without leaks, the extrapolation split."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.model_selection import TimeSeriesSplit

from perfmodel.errors import InputError
from perfmodel.stats import splits as spl


# ---------------------------------------------------------------- time series
@pytest.mark.parametrize("n,k,ts,gap", [(100, 5, None, 0), (103, 4, 7, 2), (50, 3, None, 3),
                                        (20, 2, 5, 0)])
def test_time_series_splits_equal_sklearn(n, k, ts, gap):
    ours = spl.time_series_splits(n, k, ts, gap=gap)
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
            spl.time_series_splits(n, k, ts, mt, gap=gap)
        return
    sp = spl.time_series_splits(n, k, ts, mt, gap=gap)
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
    sp = spl.time_series_splits(30, n_splits=21, test_size=5, min_train=5)
    assert [tr.size for tr, _ in sp] == list(range(5, 26))


def test_time_series_splits_with_order_column():
    rng = np.random.default_rng(0)
    t = rng.permutation(60).astype(float)
    sp = spl.time_series_splits(60, 3, 10, order=t)
    for tr, te in sp:
        assert t[tr].max() < t[te].min()
        assert np.array_equal(np.sort(t[tr]), np.arange(tr.size))


def test_time_series_splits_input_errors():
    with pytest.raises(InputError, match="`n_splits`"):
        spl.time_series_splits(50, 0)
    with pytest.raises(InputError, match="too short"):
        spl.time_series_splits(10, 4, 5)
    with pytest.raises(InputError, match="exceeds n"):
        spl.time_series_splits(10, 1, 5, 8)
    with pytest.raises(InputError, match="`order` must be 10 finite"):
        spl.time_series_splits(10, 2, 2, order=np.arange(9))


# ---------------------------------------------------------------- grouped k-fold
@given(groups=st.lists(st.integers(0, 12), min_size=2, max_size=120),
       k=st.integers(2, 6), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=200, deadline=None)
def test_grouped_kfold_no_leak_property(groups, k, seed):
    g = np.array(groups)
    if k > np.unique(g).size:
        with pytest.raises(InputError, match=rf"exceeds the number of distinct groups "
                           rf"\({np.unique(g).size}\).*give k <= {np.unique(g).size}"):
            spl.grouped_kfold(g, k, seed)
        return
    sp = spl.grouped_kfold(g, k, seed)
    assert len(sp) == k
    tests = np.concatenate([te for _, te in sp])
    assert np.array_equal(np.sort(tests), np.arange(g.size))  # a partition
    for tr, te in sp:
        assert te.size > 0
        assert not set(g[tr]) & set(g[te])  # no group on both sides
        assert np.array_equal(np.sort(np.concatenate([tr, te])), np.arange(g.size))


def test_grouped_kfold_seeded_and_balanced():
    g = np.repeat(np.arange(40), 5)
    a = spl.grouped_kfold(g, 5, seed=1)
    b = spl.grouped_kfold(g, 5, seed=1)
    c = spl.grouped_kfold(g, 5, seed=2)
    assert all(np.array_equal(x[1], y[1]) for x, y in zip(a, b))
    assert not all(np.array_equal(x[1], y[1]) for x, y in zip(a, c))
    assert {te.size for _, te in a} == {40}
    with pytest.raises(InputError, match="missing labels"):
        spl.grouped_kfold(np.array([1.0, np.nan, 2.0]), 2)




def test_extrapolation_split(synthetic_trace):
    df = synthetic_trace(200, seed=3)
    [(tr, te)] = spl.extrapolation_split(df, "total_tokens", 0.7)
    S = df.total_tokens.to_numpy()
    assert S[tr].max() < S[te].min()
    assert np.array_equal(np.sort(np.concatenate([tr, te])), np.arange(200))
    [(trb, teb)] = spl.extrapolation_split(df, column="batch_size", quantile=0.5)
    assert df.batch_size.to_numpy()[teb].min() > df.batch_size.to_numpy()[trb].max()
    with pytest.raises(InputError, match="nothing to extrapolate"):
        spl.extrapolation_split(df.assign(x=1.0), "x", 0.5)
    with pytest.raises(InputError, match="`column` 'nope'"):
        spl.extrapolation_split(df, "nope")


