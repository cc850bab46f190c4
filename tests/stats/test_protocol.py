"""Tests of perfmodel.stats.protocol: every scheme leak-free, the leak check can fail,
transfer and the cluster-bootstrap ratio interval."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfmodel.errors import InputError
from perfmodel.stats import protocol as pr
from perfmodel.stats import validation as va

ROOT = Path(__file__).resolve().parents[2]


def engine_trace(n=600, runs=3, seed=0):
    """Same-seed replicate runs of a time-ordered engine trace (identical schedules across
    runs), with a slowly moving schedule so that neighbouring steps are alike."""
    rng = np.random.default_rng(seed)
    rows = []
    base = []
    b = 4
    for i in range(n):
        b = int(np.clip(b + rng.integers(-1, 2), 1, 12))
        chunks = [1] * b
        if rng.random() < 0.3:
            chunks[0] = int(rng.integers(2, 300))
        ctx = [int(rng.integers(0, 2000)) for _ in range(b)]
        base.append((chunks, ctx))
    for r in range(runs):
        for i, (ch, ctx) in enumerate(base):
            S = sum(ch)
            rows.append({"step": i, "replicate": f"r{r}", "batch_size": len(ch),
                         "total_tokens": S, "chunk_sizes": ";".join(map(str, ch)),
                         "context_lens": ";".join(map(str, ctx)),
                         "duration_ms": (2 + 0.3 * len(ch) + 0.01 * S)
                         * np.exp(0.03 * rng.standard_normal())})
    return pd.DataFrame(rows)


def sweep_trace(n_cfg=120, reps=3, seed=1):
    """A designed sweep: configurations repeated; some identical steps under other configs."""
    rng = np.random.default_rng(seed)
    rows = []
    for c in range(n_cfg):
        B = int(rng.integers(1, 8))
        S = B + int(rng.choice([0, 0, 16, 512]))
        for _ in range(reps):
            rows.append({"config": f"c{c}", "batch_size": B, "total_tokens": S,
                         "duration_ms": (1 + 0.2 * B + 0.01 * S) * np.exp(
                             0.05 * rng.standard_normal())})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("scheme,block", [("blocked25", 25), ("blocked100", 100)])
def test_blocked_schemes_are_leak_free(scheme, block):
    df = engine_trace()
    sp = pr.protocol_folds(df, scheme, k=5)
    rep = pr.leak_report(df, sp, block=block)
    assert pr.is_leak_free(rep), rep
    assert (rep["n_test"] > 0).all() and (rep["n_train"] > 0).all()
    # every step is tested once
    te = np.concatenate([t for _, t in sp])
    assert np.array_equal(np.sort(te), np.arange(len(df)))


def test_grouped_and_extrapolate_on_a_sweep_are_leak_free():
    df = sweep_trace()
    assert pr.schemes_for(df) == ("grouped", "extrapolate")
    for scheme in ("grouped", "extrapolate"):
        rep = pr.leak_report(df, pr.protocol_folds(df, scheme, k=5))
        assert pr.is_leak_free(rep), (scheme, rep)
    # identical steps filed under different configs exist, so grouping by config alone leaks
    by_config = va.grouped_kfold(df["config"].to_numpy(), 5)
    assert pr.leak_report(df, by_config)["schedule"].sum() > 0


def test_the_leak_check_catches_random_folds():
    df = engine_trace()
    rep = pr.leak_report(df, va.make_folds(df, "random", 5), block=25)
    assert rep["schedule"].sum() > 0 and rep["time"].sum() > 0
    assert not pr.is_leak_free(rep)


def test_transfer_trains_on_other_workloads_without_shared_schedules():
    a = engine_trace(n=200, runs=1, seed=2).assign(workload="sweeps")
    b = engine_trace(n=200, runs=2, seed=3).assign(workload="mixed")
    b["replicate"] = "m" + b["replicate"]
    dup = a.iloc[:5].assign(workload="mixed", replicate="m9")  # steps also in the sweeps
    df = pd.concat([a, b, dup], ignore_index=True)
    (tr, te), = pr.protocol_folds(df, "transfer", test="mixed")
    assert set(df["workload"].iloc[te]) == {"mixed"} and set(df["workload"].iloc[tr]) == {"sweeps"}
    assert tr.size <= 195  # the five shared schedules left training
    assert pr.is_leak_free(pr.leak_report(df, [(tr, te)]))
    with pytest.raises(InputError, match="unknown workload"):
        pr.protocol_folds(df, "transfer", test="nope")
    with pytest.raises(InputError, match="time-ordered"):
        pr.protocol_folds(sweep_trace(), "blocked25")


def test_ratio_interval_matches_a_direct_loop_and_widens_with_clustering():
    rng = np.random.default_rng(0)
    n_c, per = 60, 20
    c = np.repeat(np.arange(n_c), per)
    f = np.abs(rng.normal(0.05, 0.01, c.size))
    shared = rng.normal(0, 0.03, n_c)[c]  # cluster effect in the model's errors
    m = np.abs(0.08 + shared + rng.normal(0, 0.01, c.size))
    r, lo, hi = pr.ratio_interval(m, f, c, n_boot=400, seed=3)
    assert r == pytest.approx(m.mean() / f.mean())
    # the same percentile interval by a plain loop over resampled clusters
    rng2 = np.random.default_rng(3)
    draws = rng2.integers(0, n_c, size=(400, n_c))
    sm = np.bincount(c, m)
    sf = np.bincount(c, f)
    boots = [sm[d].sum() / sf[d].sum() for d in draws]
    assert (lo, hi) == pytest.approx(tuple(np.quantile(boots, [0.05, 0.95])))
    # resampling single steps (each its own cluster) understates the spread
    _, lo1, hi1 = pr.ratio_interval(m, f, np.arange(c.size), n_boot=400, seed=3)
    assert hi1 - lo1 < 0.6 * (hi - lo)


@pytest.mark.parametrize("model", ["llama-small", "llama-tiny"])
def test_real_vllm_cpu_folds_are_leak_free(model):
    from perfmodel.data.trace import read_trace

    files = sorted((ROOT / "data" / "vllm-cpu" / model).glob("mixed-r*.csv"))
    if len(files) < 2:
        pytest.skip(f"no committed vLLM-CPU mixed replicates for {model}")
    df = pd.concat([read_trace(f).assign(replicate=f.stem) for f in files], ignore_index=True)
    for scheme, block in (("blocked25", 25), ("blocked100", 100)):
        rep = pr.leak_report(df, pr.protocol_folds(df, scheme, k=5), block=block)
        assert pr.is_leak_free(rep), (scheme, rep)


# ---------------------------------------------------------------- paired differences
def _paired_errors(rng, n_c=40, per=10, delta=0.01, shared_sd=0.05):
    """Errors of two candidates on the same clustered steps: a shared cluster difficulty
    (positively correlated errors) and a known mean difference ``delta``."""
    c = np.repeat(np.arange(n_c), per)
    hard = np.abs(rng.normal(0.08, shared_sd, n_c))[c]
    ref = hard + 0.005 * np.abs(rng.standard_normal(c.size))
    err = ref + delta + 0.005 * rng.standard_normal(c.size)
    return err, ref, c


def test_paired_difference_interval_covers_the_known_difference():
    """Over repeated draws the 90 % paired interval covers the true difference (1 point) at
    about its level, the point estimate is the pooled MAPE difference, and the test rejects."""
    covered, ps = 0, []
    for s in range(60):
        err, ref, c = _paired_errors(np.random.default_rng(s))
        d, lo, hi, p = pr.paired_difference(err, ref, c, n_boot=300, seed=s)
        assert d == pytest.approx(100 * (err.mean() - ref.mean()))
        covered += lo <= 1.0 <= hi
        ps.append(p)
    assert 0.75 <= covered / 60 <= 1.0
    assert max(ps) < 0.01


@pytest.mark.parametrize("n_c", [5, 40])  # exact flips / random flips
def test_paired_difference_of_identical_candidates_is_zero_with_p_one(n_c):
    err, _, c = _paired_errors(np.random.default_rng(1), n_c=n_c)
    d, lo, hi, p = pr.paired_difference(err, err.copy(), c, n_boot=200)
    assert d == 0 and lo <= 0 <= hi and p == 1.0


def test_paired_interval_is_narrower_than_unpaired_for_correlated_errors():
    """Pairing is real: with a shared cluster difficulty the paired interval is several
    times narrower than resampling the two candidates independently."""
    err, ref, c = _paired_errors(np.random.default_rng(2))
    _, lo, hi, _ = pr.paired_difference(err, ref, c, n_boot=500, seed=0)
    _, ulo, uhi, _ = pr.paired_difference(err, ref, c, n_boot=500, seed=0, paired=False)
    assert hi - lo < 0.3 * (uhi - ulo)
    assert ulo < 0 < uhi and lo > 0  # the unpaired one does not resolve the difference


def test_paired_interval_widens_when_errors_are_clustered():
    """Resampling the clusters, not the steps: when the candidates' difference varies from
    cluster to cluster (a cluster-level effect), the interval over the true clusters is
    several times wider than the one that treats every step as its own cluster, and it
    still covers the known mean difference (1 point)."""
    rng = np.random.default_rng(4)
    c = np.repeat(np.arange(30), 50)
    ref = np.abs(rng.normal(0.08, 0.03, 30))[c] + 0.002 * rng.random(c.size)
    err = ref + 0.01 + rng.normal(0, 0.02, 30)[c] + 0.002 * rng.standard_normal(c.size)
    err += 0.01 - (err - ref).mean()  # the known difference exactly
    _, lo, hi, _ = pr.paired_difference(err, ref, c, n_boot=800, seed=0)
    _, slo, shi, _ = pr.paired_difference(err, ref, np.arange(c.size), n_boot=800, seed=0)
    assert hi - lo > 3 * (shi - slo)
    assert lo <= 1.0 <= hi


def test_paired_difference_exact_sign_flip_p_and_checks():
    # 5 clusters all worse: only the identity and the all-flipped signs reach |sum|: 2 / 2**5
    err, ref, c = _paired_errors(np.random.default_rng(3), n_c=5)
    assert pr.paired_difference(err, ref, c)[3] == pytest.approx(2 / 32)
    # NaN rows (no prediction) are left out of both candidates
    err2 = err.copy()
    err2[:10] = np.nan
    d = pr.paired_difference(err2, ref, c)[0]
    assert d == pytest.approx(100 * (err[10:].mean() - ref[10:].mean()))
    assert np.isnan(pr.paired_difference(np.full(3, np.nan), ref[:3], c[:3])).all()
    with pytest.raises(InputError, match="differ in length"):
        pr.paired_difference(err, ref[:-1], c)
    with pytest.raises(InputError, match="level"):
        pr.paired_difference(err, ref, c, level=90)
