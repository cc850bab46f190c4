"""Tests of perfmodel.stats.folds, the fold engine: leak-free groups (against a
brute-force union-find), folds that never leak, the schemes, the decorrelation lag."""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.errors import InputError
from perfmodel.stats import baselines as bl
from perfmodel.stats import crossval as cvl
from perfmodel.stats import folds as fo
from perfmodel.stats import schedule_key as sk
from perfmodel.stats import splits as spl


def test_fold_groups_rules():
    sched = pd.DataFrame({"batch_size": [2, 2, 2, 2], "total_tokens": [5, 5, 5, 5],
                          "chunk_sizes": ["1;4", "4;1", "1;4", "1;4"],
                          "context_lens": ["7;0", "0;7", "0;7", "7;0"],
                          "config": ["a", "b", "c", "d"]})
    # rows 0 and 1 are one step with the requests listed in another order; 2 differs
    g = fo.fold_groups(sched)
    assert g[0] == g[1] == g[3] != g[2]
    assert list(g) == [0, 0, 1, 0]  # numbered by first row
    # without per-request columns, (B, S) is the schedule
    assert len(set(fo.fold_groups(sched.drop(columns=["chunk_sizes", "context_lens"])))) == 1
    # config links different schedules
    assert len(set(fo.fold_groups(sched.assign(config="x")))) == 1
    # time blocks: a trace with `step` and no `config` is time-ordered
    tr = pd.DataFrame({"step": np.arange(10)[::-1], "batch_size": np.arange(1, 11),
                       "total_tokens": np.arange(1, 11)})
    assert fo.is_time_ordered(tr) and not fo.is_time_ordered(tr.assign(config="a"))
    assert not fo.is_time_ordered(tr.drop(columns="step"))
    g = fo.fold_groups(tr, block=4)  # steps 0-3, 4-7, 8-9 (rows in reverse time order)
    assert list(g) == [0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
    assert len(set(fo.fold_groups(tr, time_ordered=False))) == 10
    # blocks are counted within each run (`replicate`)
    two = pd.concat([tr.assign(replicate="r1"), tr.assign(replicate="r2", batch_size=tr.batch_size + 20,
                                                          total_tokens=tr.total_tokens + 20)])
    g2 = fo.fold_groups(two, block=5)
    assert len(set(g2)) == 4 and len(set(g2[:10]) & set(g2[10:])) == 0
    with pytest.raises(InputError, match="`block` must be an integer"):
        fo.fold_groups(tr, block=0)
    with pytest.raises(InputError, match="`time_ordered` must be"):
        fo.fold_groups(tr, time_ordered="yes")
    with pytest.raises(InputError, match="column `config` is missing"):
        fo.fold_groups(sched.assign(config=[None, "a", "b", "c"]))
    with pytest.raises(InputError, match="column `replicate` is missing"):
        fo.fold_groups(tr.assign(replicate=[None] + ["r"] * 9))
    with pytest.raises(InputError, match="column `step` must hold whole numbers"):
        fo.fold_groups(tr.assign(step=tr.step + 0.5))
    # blocks follow step numbers, so replicate runs stay aligned when steps are dropped
    rep = pd.concat([tr.assign(replicate="r1"), tr.assign(replicate="r2")], ignore_index=True)
    kept = rep.drop(index=[0, 12]).reset_index(drop=True)  # steps 9 of r1 and 7 of r2
    g3 = fo.fold_groups(kept, block=4)
    assert len(set(g3)) == 3
    # without `step`, ranks within the run (timestamp order)
    ts = tr.drop(columns="step").assign(timestamp=np.arange(10.0)[::-1])
    assert list(fo.fold_groups(ts, block=4)) == [0, 0, 1, 1, 1, 1, 2, 2, 2, 2]



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
    g = fo.fold_groups(df, block=block)
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
        splits = fo.make_folds(df, scheme, k, seed, block=block, quantile=0.6)
    except InputError as e:  # too few groups, nothing above the quantile, nothing left to train
        assert any(w in str(e) for w in ("exceeds", "need more groups", "no training step",
                                         "too short", "nothing to extrapolate", "quantile of any",
                                         "distinct cut points", "no training steps"))
        return
    groups = fo.fold_groups(df, block=block, time_ordered=time_ordered and scheme != "extrapolate")
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
    for tr, te in fo.make_folds(df, "grouped", k=4, seed=1):
        assert set(np.unique(te // 25).tolist()) == {b for b in range(8) if (te // 25 == b).any()}
        assert all(np.sum(te // 25 == b) == 25 for b in np.unique(te // 25))
        d = np.abs(tr[:, None] - te[None, :]).min(axis=1)
        assert d.min() >= 25
    # purge=False keeps the complement
    for tr, te in fo.make_folds(df, "grouped", k=4, seed=1, purge=False):
        assert tr.size + te.size == n
    # blocked: 4 contiguous folds of 50 steps, 24 training steps purged at each inner edge
    bl_ = fo.make_folds(df, "blocked", k=4)
    assert [(te.min(), te.max()) for _, te in bl_] == [(0, 49), (50, 99), (100, 149), (150, 199)]
    assert [tr.size for tr, _ in bl_] == [150 - 24, 150 - 48, 150 - 48, 150 - 24]
    # expanding: the test windows of time_series_splits, the last 24 training steps purged
    ex = fo.make_folds(df, "expanding", k=3)
    ref = spl.time_series_splits(n, 3)
    for (tr, te), (rtr, rte) in zip(ex, ref):
        assert np.array_equal(te, rte) and np.array_equal(tr, rtr[:-24])
    # extrapolation is by value: no time purge
    (tr, te), = fo.make_folds(df, "extrapolate", quantile=0.8, columns="total_tokens")
    assert tr.size + te.size == n and df.total_tokens[te].min() > df.total_tokens[tr].max()
    # random ignores groups (the leaky reference)
    rnd = fo.make_folds(df, "random", k=5, seed=3)
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(rnd, spl.grouped_kfold(np.arange(n), 5, 3)))
    with pytest.raises(InputError, match="no training step left"):
        fo.make_folds(df, "grouped", k=2, block=150)
    with pytest.raises(InputError, match="`scheme` must be one of"):
        fo.make_folds(df, "loo")
    with pytest.raises(InputError, match="`k` must be an integer"):
        fo.make_folds(df, "grouped", k=1)
    with pytest.raises(InputError, match="`purge` must be"):
        fo.make_folds(df, purge=1)
    with pytest.raises(InputError, match="`seed` must be an integer"):
        fo.make_folds(df, seed=0.5)
    with pytest.raises(InputError, match="`columns` must be"):
        fo.make_folds(df, "extrapolate", columns=[])
    with pytest.raises(InputError, match="exceeds the number of distinct groups"):
        fo.make_folds(df.iloc[:30], "grouped", k=3)


def test_make_folds_extrapolate_drops_training_steps_of_a_test_configuration():
    df = pd.DataFrame({"batch_size": [1, 1, 2, 2, 8], "total_tokens": [10, 10, 30, 20, 900],
                       "config": ["a", "a", "b", "z", "z"], "duration_ms": 1.0})
    (tr, te), = fo.make_folds(df, "extrapolate", quantile=0.8, columns=["total_tokens"])
    assert list(te) == [4] and list(tr) == [0, 1, 2]  # row 3 shares config z with the test step
    # and transitively: row 2 is row 3's step under another configuration
    (tr, te), = fo.make_folds(df.assign(total_tokens=[10, 10, 20, 20, 900]), "extrapolate",
                              quantile=0.8, columns=["total_tokens"])
    assert list(tr) == [0, 1]
    # several columns: a column with nothing above its quantile is skipped
    (tr, te), = fo.make_folds(df.assign(batch_size=1), "extrapolate", quantile=0.8)
    assert list(te) == [4]


def test_old_engines_agree_now(synthetic_trace):
    """Identical steps filed under different configurations (as Splitwise does) split the
    former engines: validation grouped by `config`, compare by config and schedule. Both now
    get their folds from make_folds."""
    from perfmodel.stats import compare as cmp

    df = synthetic_trace(200, seed=4, noise=0.05)
    twin = df.iloc[[0, 1]].assign(config="twin")  # step 0 again under another name
    df = pd.concat([df, twin], ignore_index=True)
    ref = fo.make_folds(df, "grouped", k=5, seed=2)
    via_compare = cmp._splits(df, "grouped", 5, 2, 0.8, None)
    assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
               for a, b in zip(ref, via_compare))
    tab = cvl.cross_validate(df, bl.LinearBS, "grouped", k=5, seed=2, by_regime=False)
    folds = tab[tab.fold.isin(range(5))]
    assert list(folds.n_test) == [te.size for _, te in ref]
    assert list(folds.n_train) == [tr.size for tr, _ in ref]
    # the twin rows sit with configuration 0's replicates
    g = fo.fold_groups(df)
    assert len(set(g[(df["config"] == df.loc[0, "config"]) | (df["config"] == "twin")])) == 1
    for a, b in zip(cmp._splits(df, "time", 3, 0, 0.8, None), fo.make_folds(df, "expanding", 3)):
        assert np.array_equal(a[1], b[1])
    for a, b in zip(cmp._splits(df, "extrapolate", 5, 0, 0.7, None),
                    fo.make_folds(df, "extrapolate", quantile=0.7)):
        assert np.array_equal(a[1], b[1])


def test_expanding_follows_time_not_row_order(synthetic_trace):
    rng = np.random.default_rng(0)
    df = synthetic_trace(120).assign(step=rng.permutation(120))
    for tr, te in fo.make_folds(df, "expanding", k=3):
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
    assert fo.decorrelation_lag(df) == int(np.flatnonzero(r < fo.DECORRELATION_THRESHOLD)[0])
    assert fo.decorrelation_lag(df, threshold=0.5) == int(np.flatnonzero(r < 0.5)[0])
    # rows out of order and split into runs: each run in its own time order
    two = pd.concat([df.assign(replicate="a"), df.assign(replicate="b")]).sample(frac=1,
                                                                                random_state=0)
    assert fo.decorrelation_lag(two) == fo.decorrelation_lag(df)
    # the committed vLLM-CPU mixed traces of llama-small decorrelate within the default block
    root = Path(__file__).resolve().parents[2] / "data" / "vllm-cpu" / "llama-small"
    lags = [fo.decorrelation_lag(read_trace(root / f"mixed-r{i}.csv")) for i in (1, 2, 3)]
    assert lags == [17, 17, 17] and max(lags) <= fo.DEFAULT_BLOCK
    with pytest.raises(InputError, match="`threshold` must be"):
        fo.decorrelation_lag(df, threshold=1.0)
    with pytest.raises(InputError, match="stays >= "):
        fo.decorrelation_lag(df, threshold=-0.9, max_lag=3)
    with pytest.raises(InputError, match="constant step times"):
        fo.decorrelation_lag(df.assign(duration_ms=1.0))




def _schedule_key_reference(df):
    """The former per-row implementation of ``folds._schedule_key``, kept as the reference."""
    from perfmodel.data.trace import parse_list_column

    base = (df["batch_size"].astype("int64").astype(str) + "|"
            + df["total_tokens"].astype("int64").astype(str)).to_numpy(dtype=object)
    cols = [c for c in ("chunk_sizes", "context_lens") if c in df.columns]
    if cols:
        lists = [parse_list_column(df[c]) for c in cols]
        parsed = [(np.split(lc.flat, np.cumsum(lc.counts)[:-1]), lc.ok) for lc in lists]
        key = np.empty(len(df), dtype=object)
        for i in range(len(df)):
            parts = [p[0][i] for p in parsed]
            ok = all(p[1][i] for p in parsed) and len({a.size for a in parts}) == 1
            if ok:
                srt = np.lexsort(parts[::-1])
                tail = ";".join(",".join(map(str, a[srt].tolist())) for a in parts)
            else:
                tail = "raw:" + "|".join(str(df[c].iat[i]) for c in cols)
            key[i] = base[i] + "|" + tail
        base = key
    return pd.factorize(base)[0].astype(np.int64)


def _messy_lists(data, n):
    """Cells in random order with repeats, some unparsable or of unequal length."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    pool_c = [[1], [2], [1, 2], [2, 1], [1, 1, 2], [3, 1], [5, 5], []]
    pool_x = [[0], [7], [0, 7], [7, 0], [0, 0, 7], [7, 1], [9, 9], []]
    cs, xs = [], []
    for _ in range(n):
        i = rng.integers(len(pool_c))
        j = i if rng.random() < 0.8 else rng.integers(len(pool_x))
        c, x = list(pool_c[i]), list(pool_x[j])
        perm = rng.permutation(len(c))
        if len(c) == len(x):
            c, x = [c[p] for p in perm], [x[p] for p in perm]
        cs.append(";".join(map(str, c)) if rng.random() > 0.05 else "oops")
        xs.append(";".join(map(str, x)) if rng.random() > 0.05 else None)
    return cs, xs


@given(data=st.data(), n=st.integers(1, 60), which=st.sampled_from(["both", "chunk", "none"]))
@settings(max_examples=150, deadline=None)
def test_schedule_key_equals_the_per_row_reference(data, n, which):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="rng"))
    cs, xs = _messy_lists(data, n)
    df = pd.DataFrame({"batch_size": rng.integers(1, 3, n), "total_tokens": rng.integers(2, 4, n)})
    if which != "none":
        df["chunk_sizes"] = pd.Series(cs, dtype=object)
    if which == "both":
        df["context_lens"] = pd.Series(xs, dtype=object)
    np.testing.assert_array_equal(fo._schedule_key(df), _schedule_key_reference(df))


def test_schedule_key_splits_a_hash_collision(monkeypatch):
    """Rows whose hashes agree but whose requests differ still get different codes."""
    df = pd.DataFrame({"batch_size": [2, 2, 2, 2], "total_tokens": [2, 2, 2, 2],
                       "chunk_sizes": ["1;1", "1;1", "1;1", "1;1"],
                       "context_lens": ["3;4", "5;6", "4;3", "6;5"]})
    monkeypatch.setattr(sk, "_splitmix", lambda x: np.zeros_like(x))  # every hash collides
    np.testing.assert_array_equal(fo._schedule_key(df), [0, 1, 0, 1])
    np.testing.assert_array_equal(fo._schedule_key(df), _schedule_key_reference(df))


def _committed_traces():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "data"
    paths = sorted(root.glob("vllm-cpu/*/*.csv")) + [root / "gpu" / "trace.csv"]
    paths += sorted((root / "example").glob("*.csv"))
    return [p for p in paths if p.exists()]


@pytest.mark.parametrize("lists", ["text", "arrow"])
def test_schedule_key_and_folds_equal_the_reference_on_committed_traces(lists, monkeypatch):
    from perfmodel.data.trace import read_trace

    paths = _committed_traces()
    if not paths:
        pytest.skip("no committed trace under data/ in this checkout")
    checked = 0
    for p in paths:
        try:
            df = read_trace(p, lists=lists, require_duration=False, allow_degenerate=True)
        except InputError:  # not a step trace (e.g. a calibration table)
            continue
        new = fo._schedule_key(df)
        np.testing.assert_array_equal(new, _schedule_key_reference(df), err_msg=str(p))
        g_new = fo.fold_groups(df)
        with monkeypatch.context() as m:
            m.setattr(fo, "_schedule_key", _schedule_key_reference)
            g_ref = fo.fold_groups(df)
        np.testing.assert_array_equal(g_new, g_ref, err_msg=str(p))
        checked += 1
    assert checked >= 3


def test_make_folds_with_runs_never_train_on_the_run_they_test():
    n = 300  # three same-seed runs of 100 steps: identical schedules, step numbers 0..99
    df = pd.DataFrame({"step": np.tile(np.arange(100), 3),
                       "batch_size": np.tile(np.arange(1, 101), 3),
                       "total_tokens": np.tile(np.arange(1, 101) * 3, 3), "duration_ms": 1.0,
                       "replicate": np.repeat(["a", "b", "c"], 100)})
    runs = df["replicate"].to_numpy()
    groups = fo.fold_groups(df)
    for scheme in ("blocked", "grouped", "random"):
        splits = fo.make_folds(df, scheme, k=4, runs=runs)
        tested = np.concatenate([te for _, te in splits])
        assert np.array_equal(np.sort(tested), np.arange(n))  # every step tested once
        for tr, te in splits:
            assert len(set(runs[te])) == 1 and runs[te[0]] not in set(runs[tr])
            if scheme != "random":  # no twin (same schedule, other run) in training
                assert not set(groups[tr]) & set(groups[te])
    with pytest.raises(InputError, match=">= 2 runs"):
        fo.make_folds(df, "blocked", k=4, runs=np.full(n, "a"))
    with pytest.raises(InputError, match="one run label per row"):
        fo.make_folds(df, "blocked", k=4, runs=runs[:10])
    with pytest.raises(InputError, match="missing"):
        fo.make_folds(df, "blocked", k=4, runs=np.where(np.arange(n) < 5, None, runs))
    with pytest.raises(InputError, match="extrapolate"):
        fo.make_folds(df, "extrapolate", runs=runs)


@given(data=st.data(), time_ordered=st.booleans(), block=st.integers(1, 8),
       k=st.integers(2, 5), seed=st.integers(0, 2**32 - 1),
       scheme=st.sampled_from(["grouped", "blocked", "expanding"]))
@settings(max_examples=150, deadline=None)
def test_make_folds_with_runs_are_the_plain_folds_divided_by_run(data, time_ordered, block, k,
                                                                  seed, scheme):
    df = _random_trace(data, time_ordered)
    runs = df["replicate"].to_numpy()
    try:
        plain = fo.make_folds(df, scheme, k, seed, block=block)
        split = fo.make_folds(df, scheme, k, seed, block=block, runs=runs)
    except InputError as e:  # too few groups or runs, nothing left to train
        assert any(w in str(e) for w in ("exceeds", "need more groups", "no training step",
                                         "too short", ">= 2 runs", "run other than"))
        return
    expect = []
    for tr, te in plain:
        for r in np.unique(runs[te]):
            expect.append((tr[runs[tr] != r], te[runs[te] == r]))
    assert len(split) == len(expect)
    for (tr, te), (etr, ete) in zip(sorted(split, key=lambda s: s[1][0]),
                                    sorted(expect, key=lambda s: s[1][0])):
        assert np.array_equal(tr, etr) and np.array_equal(te, ete)
        assert len(set(runs[te])) == 1 and not set(runs[tr]) & set(runs[te])


def test_make_folds_with_the_groups_given_is_make_folds_computing_them():
    from perfmodel.core.synthetic import simulate_trace  # a test may import any layer
    from perfmodel.stats.folds import fold_groups, make_folds

    d = simulate_trace(n=400, noise="multiplicative", seed=8)
    g = fold_groups(d, block=10)
    for scheme in ("grouped", "blocked", "expanding"):
        a = make_folds(d, scheme, k=3, block=10)
        b = make_folds(d, scheme, k=3, block=10, groups=g)
        assert len(a) == len(b)
        for (ta, ea), (tb, eb) in zip(a, b):
            np.testing.assert_array_equal(ta, tb)
            np.testing.assert_array_equal(ea, eb)
    with pytest.raises(InputError, match="one integer group per step"):
        make_folds(d, "grouped", k=3, groups=g[:-1])


def test_ngroups_are_the_codes_of_a_pandas_grouping():
    """Pairwise factorisation numbers row tuples as groupby(sort=False).ngroup() does."""
    from perfmodel.stats.schedule_key import _ngroups

    rng = np.random.default_rng(9)
    n = 2000
    parts = [rng.integers(-1, 4, n), rng.integers(0, 3, n),
             rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64) % 5 * (2**61)]
    frame = pd.DataFrame({i: p for i, p in enumerate(parts)})
    want = frame.groupby(list(frame.columns), sort=False).ngroup().to_numpy()
    got = _ngroups(parts)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.int64 and got[0] == 0 and np.all(np.diff(np.maximum.accumulate(got)) <= 1)
    np.testing.assert_array_equal(_ngroups([parts[0]]), pd.factorize(parts[0])[0])


def test_time_blocks_are_the_fold_engines_blocks_alone():
    from perfmodel.stats.folds import fold_groups, time_blocks

    df = pd.DataFrame({"batch_size": [1] * 7, "total_tokens": [1] * 7,
                       "duration_ms": np.arange(1.0, 8.0),
                       "step": [10, 11, 12, 13, 14, 15, 16]})
    assert time_blocks(df, block=3).tolist() == [0, 0, 0, 1, 1, 1, 2]
    # two runs (replicate column): blocks restart per run
    two = df.assign(replicate=["a", "a", "a", "a", "b", "b", "b"], step=[0, 1, 2, 3, 0, 1, 2])
    assert time_blocks(two, block=2).tolist() == [0, 0, 1, 1, 2, 2, 3]
    # every time block sits inside one leak-free group (rule 3 of fold_groups)
    g = fold_groups(df, time_ordered=True, block=3)
    for b in np.unique(time_blocks(df, block=3)):
        assert len(set(g[time_blocks(df, block=3) == b])) == 1
    with pytest.raises(InputError, match="block"):
        time_blocks(df, block=0)
