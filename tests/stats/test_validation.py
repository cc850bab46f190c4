"""Tests of perfmodel.stats.validation: split properties (no leak, expanding windows),
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

from perfmodel.errors import InputError
from perfmodel.stats import baselines as bl
from perfmodel.stats import validation as va


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


def test_fold_groups_rules():
    sched = pd.DataFrame({"batch_size": [2, 2, 2, 2], "total_tokens": [5, 5, 5, 5],
                          "chunk_sizes": ["1;4", "4;1", "1;4", "1;4"],
                          "context_lens": ["7;0", "0;7", "0;7", "7;0"],
                          "config": ["a", "b", "c", "d"]})
    # rows 0 and 1 are one step with the requests listed in another order; 2 differs
    g = va.fold_groups(sched)
    assert g[0] == g[1] == g[3] != g[2]
    assert list(g) == [0, 0, 1, 0]  # numbered by first row
    # without per-request columns, (B, S) is the schedule
    assert len(set(va.fold_groups(sched.drop(columns=["chunk_sizes", "context_lens"])))) == 1
    # config links different schedules
    assert len(set(va.fold_groups(sched.assign(config="x")))) == 1
    # time blocks: a trace with `step` and no `config` is time-ordered
    tr = pd.DataFrame({"step": np.arange(10)[::-1], "batch_size": np.arange(1, 11),
                       "total_tokens": np.arange(1, 11)})
    assert va.is_time_ordered(tr) and not va.is_time_ordered(tr.assign(config="a"))
    assert not va.is_time_ordered(tr.drop(columns="step"))
    g = va.fold_groups(tr, block=4)  # steps 0-3, 4-7, 8-9 (rows in reverse time order)
    assert list(g) == [0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
    assert len(set(va.fold_groups(tr, time_ordered=False))) == 10
    # blocks are counted within each run (`replicate`)
    two = pd.concat([tr.assign(replicate="r1"), tr.assign(replicate="r2", batch_size=tr.batch_size + 20,
                                                          total_tokens=tr.total_tokens + 20)])
    g2 = va.fold_groups(two, block=5)
    assert len(set(g2)) == 4 and len(set(g2[:10]) & set(g2[10:])) == 0
    with pytest.raises(InputError, match="`block` must be an integer"):
        va.fold_groups(tr, block=0)
    with pytest.raises(InputError, match="`time_ordered` must be"):
        va.fold_groups(tr, time_ordered="yes")
    with pytest.raises(InputError, match="column `config` is missing"):
        va.fold_groups(sched.assign(config=[None, "a", "b", "c"]))
    with pytest.raises(InputError, match="column `replicate` is missing"):
        va.fold_groups(tr.assign(replicate=[None] + ["r"] * 9))
    with pytest.raises(InputError, match="column `step` must hold whole numbers"):
        va.fold_groups(tr.assign(step=tr.step + 0.5))
    # blocks follow step numbers, so replicate runs stay aligned when steps are dropped
    rep = pd.concat([tr.assign(replicate="r1"), tr.assign(replicate="r2")], ignore_index=True)
    kept = rep.drop(index=[0, 12]).reset_index(drop=True)  # steps 9 of r1 and 7 of r2
    g3 = va.fold_groups(kept, block=4)
    assert len(set(g3)) == 3
    # without `step`, ranks within the run (timestamp order)
    ts = tr.drop(columns="step").assign(timestamp=np.arange(10.0)[::-1])
    assert list(va.fold_groups(ts, block=4)) == [0, 0, 1, 1, 1, 1, 2, 2, 2, 2]


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
    sp = va.make_folds(df, "grouped", k=5, seed=0)
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


# ---------------------------------------------------------------- the fold engine
def _random_trace(data, time_ordered):
    """A small trace with replicated configurations, identical steps under other configurations,
    requests listed in different orders, and up to three runs."""
    n = data.draw(st.integers(6, 70), label="n")
    n_sched = data.draw(st.integers(2, 12), label="n_sched")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    pool = []
    for _ in range(n_sched):
        b = int(rng.integers(1, 4))
        pool.append((rng.integers(1, 4, b), rng.integers(0, 3, b)))
    rows = []
    for i in range(n):
        c, x = pool[int(rng.integers(n_sched))]
        p = rng.permutation(c.size)
        rows.append({"batch_size": c.size, "total_tokens": int(c.sum()),
                     "chunk_sizes": ";".join(map(str, c[p])),
                     "context_lens": ";".join(map(str, x[p])),
                     "replicate": f"r{int(rng.integers(3))}", "step": i,
                     "config": f"c{int(rng.integers(n // 2 + 1))}"})
    df = pd.DataFrame(rows)
    if time_ordered:
        df = df.drop(columns="config")
    df["step"] = rng.permutation(n) + 5  # rows out of time order
    df["duration_ms"] = 1.0 + rng.random(n)
    if data.draw(st.booleans(), label="gaps"):  # steps dropped (as notebook 11 drops contended ones)
        df = df.iloc[rng.permutation(n)[: max(6, n // 2)]].reset_index(drop=True)
    return df


def _canonical(df):
    """Brute-force schedule identity: B, S and the sorted (chunk, context) pairs."""
    out = []
    for b, s, c, x in zip(df.batch_size, df.total_tokens, df.chunk_sizes, df.context_lens):
        pairs = sorted(zip(map(int, c.split(";")), map(int, x.split(";"))))
        out.append((int(b), int(s), tuple(pairs)))
    return out


def _positions(df):
    """Run and position in time: the step number from the trace's first step."""
    return df["replicate"].to_numpy(), df["step"].to_numpy() - df["step"].min()


def _union_find(df, block, time_ordered):
    n = len(df)
    parent = list(range(n))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    keys = [_canonical(df)]
    if "config" in df.columns:
        keys.append(list(df["config"]))
    if time_ordered:
        run, pos = _positions(df)
        keys.append(list(zip(run, pos // block)))
    for key in keys:
        first = {}
        for i, v in enumerate(key):
            if v in first:
                parent[find(i)] = find(first[v])
            else:
                first[v] = i
    return np.array([find(i) for i in range(n)])


@given(data=st.data(), time_ordered=st.booleans(), block=st.integers(1, 8))
@settings(max_examples=150, deadline=None)
def test_fold_groups_equal_a_brute_force_union_find(data, time_ordered, block):
    df = _random_trace(data, time_ordered)
    g = va.fold_groups(df, block=block)
    ref = _union_find(df, block, time_ordered)
    # the same partition: each label of one maps to exactly one label of the other
    assert pd.crosstab(g, ref).gt(0).sum(axis=1).eq(1).all()
    assert pd.crosstab(g, ref).gt(0).sum(axis=0).eq(1).all()


@given(data=st.data(), time_ordered=st.booleans(), block=st.integers(1, 8),
       k=st.integers(2, 5), seed=st.integers(0, 2**32 - 1),
       scheme=st.sampled_from(["grouped", "blocked", "expanding", "extrapolate"]))
@settings(max_examples=300, deadline=None)
def test_make_folds_never_leak(data, time_ordered, block, k, seed, scheme):
    df = _random_trace(data, time_ordered)
    try:
        splits = va.make_folds(df, scheme, k, seed, block=block, quantile=0.6)
    except InputError as e:  # too few groups, nothing above the quantile, nothing left to train
        assert any(w in str(e) for w in ("exceeds", "need more groups", "no training step",
                                         "too short", "nothing to extrapolate", "quantile of any",
                                         "distinct cut points", "no training steps"))
        return
    groups = va.fold_groups(df, block=block, time_ordered=time_ordered and scheme != "extrapolate")
    sched = np.array([hash(c) for c in _canonical(df)])
    run, pos = _positions(df)
    for tr, te in splits:
        assert tr.size and te.size and not set(tr) & set(te)
        assert np.array_equal(tr, np.sort(tr)) and np.array_equal(te, np.sort(te))
        assert not set(groups[tr]) & set(groups[te])  # no group on both sides
        assert not set(sched[tr]) & set(sched[te])  # no identical step on both sides
        if "config" in df.columns:
            assert not set(df["config"].to_numpy()[tr]) & set(df["config"].to_numpy()[te])
        if time_ordered and scheme != "extrapolate":  # no neighbours on both sides
            for i in te:
                near = tr[(run[tr] == run[i]) & (np.abs(pos[tr] - pos[i]) < block)]
                assert near.size == 0, (i, near)
    if scheme in ("grouped", "blocked"):  # a partition into test sets
        assert np.array_equal(np.sort(np.concatenate([te for _, te in splits])),
                              np.arange(len(df)))
    if scheme == "blocked":  # groups dealt in time order: each fold's groups start later
        t = df["step"].to_numpy()
        first = pd.Series(t).groupby(groups).transform("min").to_numpy()
        for (_, a), (_, b) in itertools.pairwise(splits):
            assert first[a].max() < first[b].min()


def test_make_folds_schemes_on_a_time_ordered_trace():
    n = 200
    df = pd.DataFrame({"step": np.arange(n), "batch_size": np.arange(1, n + 1),
                       "total_tokens": np.arange(1, n + 1) * 3, "duration_ms": 1.0})
    # grouped: whole 25-step blocks, training purged within 25 steps of a test step
    for tr, te in va.make_folds(df, "grouped", k=4, seed=1):
        assert set(np.unique(te // 25).tolist()) == {b for b in range(8) if (te // 25 == b).any()}
        assert all(np.sum(te // 25 == b) == 25 for b in np.unique(te // 25))
        d = np.abs(tr[:, None] - te[None, :]).min(axis=1)
        assert d.min() >= 25
    # purge=False keeps the complement
    for tr, te in va.make_folds(df, "grouped", k=4, seed=1, purge=False):
        assert tr.size + te.size == n
    # blocked: 4 contiguous folds of 50 steps, 24 training steps purged at each inner edge
    bl_ = va.make_folds(df, "blocked", k=4)
    assert [(te.min(), te.max()) for _, te in bl_] == [(0, 49), (50, 99), (100, 149), (150, 199)]
    assert [tr.size for tr, _ in bl_] == [150 - 24, 150 - 48, 150 - 48, 150 - 24]
    # expanding: the test windows of time_series_splits, the last 24 training steps purged
    ex = va.make_folds(df, "expanding", k=3)
    ref = va.time_series_splits(n, 3)
    for (tr, te), (rtr, rte) in zip(ex, ref):
        assert np.array_equal(te, rte) and np.array_equal(tr, rtr[:-24])
    # extrapolation is by value: no time purge
    (tr, te), = va.make_folds(df, "extrapolate", quantile=0.8, columns="total_tokens")
    assert tr.size + te.size == n and df.total_tokens[te].min() > df.total_tokens[tr].max()
    # random ignores groups (the leaky reference)
    rnd = va.make_folds(df, "random", k=5, seed=3)
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(rnd, va.grouped_kfold(np.arange(n), 5, 3)))
    with pytest.raises(InputError, match="no training step left"):
        va.make_folds(df, "grouped", k=2, block=150)
    with pytest.raises(InputError, match="`scheme` must be one of"):
        va.make_folds(df, "loo")
    with pytest.raises(InputError, match="`k` must be an integer"):
        va.make_folds(df, "grouped", k=1)
    with pytest.raises(InputError, match="`purge` must be"):
        va.make_folds(df, purge=1)
    with pytest.raises(InputError, match="`seed` must be an integer"):
        va.make_folds(df, seed=0.5)
    with pytest.raises(InputError, match="`columns` must be"):
        va.make_folds(df, "extrapolate", columns=[])
    with pytest.raises(InputError, match="exceeds the number of distinct groups"):
        va.make_folds(df.iloc[:30], "grouped", k=3)


def test_make_folds_extrapolate_drops_training_steps_of_a_test_configuration():
    df = pd.DataFrame({"batch_size": [1, 1, 2, 2, 8], "total_tokens": [10, 10, 30, 20, 900],
                       "config": ["a", "a", "b", "z", "z"], "duration_ms": 1.0})
    (tr, te), = va.make_folds(df, "extrapolate", quantile=0.8, columns=["total_tokens"])
    assert list(te) == [4] and list(tr) == [0, 1, 2]  # row 3 shares config z with the test step
    # and transitively: row 2 is row 3's step under another configuration
    (tr, te), = va.make_folds(df.assign(total_tokens=[10, 10, 20, 20, 900]), "extrapolate",
                              quantile=0.8, columns=["total_tokens"])
    assert list(tr) == [0, 1]
    # several columns: a column with nothing above its quantile is skipped
    (tr, te), = va.make_folds(df.assign(batch_size=1), "extrapolate", quantile=0.8)
    assert list(te) == [4]


def test_old_engines_agree_now():
    """Identical steps filed under different configurations (as Splitwise does) split the
    former engines: validation grouped by `config`, compare by config and schedule. Both now
    get their folds from make_folds."""
    from perfmodel.stats import compare as cmp

    df = make_trace(200, seed=4, noise=0.05)
    twin = df.iloc[[0, 1]].assign(config="twin")  # step 0 again under another name
    df = pd.concat([df, twin], ignore_index=True)
    ref = va.make_folds(df, "grouped", k=5, seed=2)
    via_compare = cmp._splits(df, "grouped", 5, 2, 0.8, None)
    assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
               for a, b in zip(ref, via_compare))
    tab = va.cross_validate(df, bl.LinearBS, "grouped", k=5, seed=2, by_regime=False)
    folds = tab[tab.fold.isin(range(5))]
    assert list(folds.n_test) == [te.size for _, te in ref]
    assert list(folds.n_train) == [tr.size for tr, _ in ref]
    # the twin rows sit with configuration 0's replicates
    g = va.fold_groups(df)
    assert len(set(g[(df["config"] == df.loc[0, "config"]) | (df["config"] == "twin")])) == 1
    for a, b in zip(cmp._splits(df, "time", 3, 0, 0.8, None), va.make_folds(df, "expanding", 3)):
        assert np.array_equal(a[1], b[1])
    for a, b in zip(cmp._splits(df, "extrapolate", 5, 0, 0.7, None),
                    va.make_folds(df, "extrapolate", quantile=0.7)):
        assert np.array_equal(a[1], b[1])


def test_expanding_follows_time_not_row_order():
    rng = np.random.default_rng(0)
    df = make_trace(120).assign(step=rng.permutation(120))
    for tr, te in va.make_folds(df, "expanding", k=3):
        assert df["step"].to_numpy()[tr].max() < df["step"].to_numpy()[te].min()


def test_decorrelation_lag_equals_statsmodels_acf_and_fits_the_default_block():
    from pathlib import Path

    from statsmodels.tsa.stattools import acf

    from perfmodel.data.trace import read_trace

    rng = np.random.default_rng(1)
    e = rng.standard_normal(600)
    x = np.convolve(e, np.ones(12) / 12, mode="same")  # moving average: correlated to lag ~11
    df = pd.DataFrame({"step": np.arange(600), "batch_size": 1, "total_tokens": 1,
                       "duration_ms": np.exp(x)})
    r = acf(x, nlags=40, fft=False)
    assert va.decorrelation_lag(df) == int(np.flatnonzero(r < va.DECORRELATION_THRESHOLD)[0])
    assert va.decorrelation_lag(df, threshold=0.5) == int(np.flatnonzero(r < 0.5)[0])
    # rows out of order and split into runs: each run in its own time order
    two = pd.concat([df.assign(replicate="a"), df.assign(replicate="b")]).sample(frac=1,
                                                                                random_state=0)
    assert va.decorrelation_lag(two) == va.decorrelation_lag(df)
    # the committed vLLM-CPU mixed traces of llama-small decorrelate within the default block
    root = Path(__file__).resolve().parents[2] / "data" / "vllm-cpu" / "llama-small"
    lags = [va.decorrelation_lag(read_trace(root / f"mixed-r{i}.csv")) for i in (1, 2, 3)]
    assert lags == [17, 17, 17] and max(lags) <= va.DEFAULT_BLOCK
    with pytest.raises(InputError, match="`threshold` must be"):
        va.decorrelation_lag(df, threshold=1.0)
    with pytest.raises(InputError, match="stays >= "):
        va.decorrelation_lag(df, threshold=-0.9, max_lag=3)
    with pytest.raises(InputError, match="constant step times"):
        va.decorrelation_lag(df.assign(duration_ms=1.0))


def test_cross_validate_gives_the_same_scores_on_two_workers():
    from perfmodel.core.synthetic import simulate_trace

    df = simulate_trace(n=300, noise="multiplicative", seed=8)
    a = va.cross_validate(df, lambda: bl.get_baseline("linear"), "random", k=3)
    b = va.cross_validate(df, lambda: bl.get_baseline("linear"), "random", k=3, n_jobs=2)
    pd.testing.assert_frame_equal(a, b)
    with pytest.raises(InputError, match="backend must be one of"):
        va.cross_validate(df, lambda: bl.get_baseline("linear"), "random", k=3,
                          backend="spark")
