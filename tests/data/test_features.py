"""Tests of perfmodel.data.features: the one step-feature kernel.

The ``_old_*`` functions are verbatim copies of the three implementations the
kernel replaced (``trace.step_features``, ``simulate.batch_features``,
``baselines._request_features``, arithmetic part), kept as frozen references:
the kernel must give bit-identical numbers on the example trace and on the
batches a simulation schedules.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfmodel.data import features, trace
from perfmodel.data.features import (
    CONTEXT_KEYS,
    COUNT_KEYS,
    batch_features,
    request_features,
    row_reduce,
    uniform_batch_features,
)
from perfmodel.decisions import simulate
from perfmodel.errors import InputError
from perfmodel.stats import baselines

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "data" / "example" / "example_trace.csv"


# ---------------------------------------------------------------------------
# frozen references: the code the kernel replaced
# ---------------------------------------------------------------------------

def _old_row_reduce(values, counts, rows, how):
    n = len(counts)
    if how == "sum":
        return np.bincount(rows, weights=values, minlength=n)
    out = np.zeros(n, dtype=float)
    nz = counts > 0
    if nz.any():
        starts = (np.cumsum(counts) - counts)[nz]
        f = np.minimum if how == "min" else np.maximum
        out[nz] = f.reduceat(values, starts)
    return out


def _old_trace_features(B, S, c_flat, x_flat, counts):
    """trace.step_features after parsing (perfmodel/data/trace.py, before features.py)."""
    feats = {"B": B, "S": S}
    n = len(counts)
    rows = np.repeat(np.arange(n), counts)
    c = c_flat.astype(float)
    x = x_flat.astype(float)
    pre = c > 1
    pair = c * (x + c / 2.0)
    mean_c = np.bincount(rows, weights=c, minlength=n) / counts
    dev = c - mean_c[rows]
    feats.update(
        ctx_sum=np.bincount(rows, weights=x, minlength=n),
        ctx_max=_old_row_reduce(x, counts, rows, "max"),
        attn=np.bincount(rows, weights=pair, minlength=n),
        attn_prefill=np.bincount(rows, weights=np.where(pre, pair, 0.0), minlength=n),
        decode_ctx=np.bincount(rows, weights=np.where(c == 1, x, 0.0), minlength=n),
        prefill_sq=np.bincount(rows, weights=np.where(pre, c * c, 0.0), minlength=n),
        chunk_sd=np.sqrt(np.bincount(rows, weights=dev * dev, minlength=n) / counts),
    )
    return feats


def _old_batch_features(chunk_sizes, context_lens):
    """simulate.batch_features (perfmodel/decisions/simulate.py, before features.py)."""
    c = np.asarray(chunk_sizes, dtype=float).ravel()
    x = np.asarray(context_lens, float).ravel()
    pre = c > 1
    pair = c * (x + c / 2.0)
    one = lambda v: np.array([float(v)])
    return {
        "B": one(c.size),
        "S": one(c.sum()),
        "ctx_sum": one(x.sum()),
        "ctx_max": one(x.max()),
        "attn": one(pair.sum()),
        "attn_prefill": one(pair[pre].sum()),
        "decode_ctx": one(x[c == 1].sum()),
        "prefill_sq": one((c[pre] ** 2).sum()),
        "chunk_sd": one(c.std()),
    }


def _old_baseline_features(c_parts, x_parts):
    """baselines._request_features, every row valid (perfmodel/stats/baselines.py, before)."""
    counts = np.array([p.size for p in c_parts], dtype=np.int64)
    c = np.concatenate(c_parts).astype(float)
    x = np.concatenate(x_parts).astype(float)
    m = counts.size
    r = np.repeat(np.arange(m), counts)

    def rsum(w):
        return np.bincount(r, weights=w, minlength=m)

    dec = c == 1
    mean_c = rsum(c) / counts
    cmax = np.full(m, -np.inf)
    np.maximum.at(cmax, r, x)
    return {
        "ctx_sum": rsum(x),
        "ctx_max": cmax,
        "attn": rsum(c * (x + c / 2.0)),
        "decode_ctx": rsum(np.where(dec, x, 0.0)),
        "prefill_sq": rsum(np.where(dec, 0.0, c * c)),
        "chunk_sd": np.sqrt(rsum((c - mean_c[r]) ** 2) / counts),
        "n_decode": rsum(dec.astype(float)),
        "s_prefill": rsum(np.where(dec, 0.0, c)),
    }


def _old_uniform(Bs, chunk, ctx):
    """calibrate.static_batch_steps' feature dict (perfmodel/stats/calibrate.py, before)."""
    pair = chunk * (ctx + chunk / 2.0)
    is_pre = chunk > 1
    return {
        "B": Bs, "S": Bs * chunk, "ctx_sum": Bs * ctx, "ctx_max": ctx, "attn": Bs * pair,
        "attn_prefill": np.where(is_pre, Bs * pair, 0.0),
        "decode_ctx": np.where(is_pre, 0.0, Bs * ctx),
        "prefill_sq": np.where(is_pre, Bs * chunk * chunk, 0.0),
        "chunk_sd": np.zeros_like(Bs),
    }


def _same_bits(a, b) -> bool:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a.shape == b.shape and np.array_equal(a.view(np.int64), b.view(np.int64))


def _lists(df):
    c = [trace.parse_int_list(v) for v in df["chunk_sizes"]]
    x = [trace.parse_int_list(v) for v in df["context_lens"]]
    return c, x


@pytest.fixture(scope="module")
def example():
    return trace.read_trace(EXAMPLE)


@pytest.fixture(scope="module")
def simulated_batches():
    """Every (chunk_sizes, context_lens) batch a short open-loop simulation schedules
    (read from its step log)."""
    class Linear:
        def predict(self, f):
            return 1.0 + 0.01 * np.asarray(f["S"]) + 1e-5 * np.asarray(f["ctx_sum"])

    rng = np.random.default_rng(3)
    n = 120
    r = simulate.simulate_open_loop(Linear(), prompt_tokens=rng.integers(16, 700, n),
                                    output_tokens=rng.integers(2, 200, n), rate=400.0,
                                    num_requests=n, seed=1, max_num_seqs=48,
                                    max_num_batched_tokens=512)
    seen = [(np.array(trace.parse_int_list(c), dtype=np.int64),
             np.array(trace.parse_int_list(x), dtype=np.int64))
            for c, x in zip(r.steps["chunk_sizes"], r.steps["context_lens"])]
    assert len(seen) > 100 and max(c.size for c, _ in seen) >= 16
    return seen


# ---------------------------------------------------------------------------
# bit-identical to the replaced implementations
# ---------------------------------------------------------------------------

def test_step_features_of_the_example_trace_bit_identical_to_the_old_code(example):
    c, x = _lists(example)
    counts = np.array([p.size for p in c], dtype=np.int64)
    B = example["batch_size"].to_numpy(float)
    S = example["total_tokens"].to_numpy(float)
    ref = _old_trace_features(B, S, np.concatenate(c), np.concatenate(x), counts)
    got = trace.step_features(example)
    assert list(got) == list(ref) == ["B", "S", *CONTEXT_KEYS]
    for k in ref:
        assert _same_bits(got[k], ref[k]), k
    kern = request_features(np.concatenate(c), np.concatenate(x), counts)
    for k in CONTEXT_KEYS:
        assert _same_bits(kern[k], ref[k]), k
    assert _same_bits(kern["B"], B) and _same_bits(kern["S"], S)


def test_baseline_features_of_the_example_trace_bit_identical_to_the_old_code(example):
    c, x = _lists(example)
    ref = _old_baseline_features(c, x)
    got = baselines._request_features(example)
    for k in ref:
        assert _same_bits(got[k], ref[k]), k


def test_simulated_batches_bit_identical_to_the_old_code(simulated_batches):
    """Every key but chunk_sd bit-identical; chunk_sd to a few ulp (see below)."""
    n_sd_differ = 0
    for c, x in simulated_batches:
        ref = _old_batch_features(c, x)
        got = batch_features(c, x)
        assert list(got) == list(ref)
        for k in ref:
            if k == "chunk_sd":
                # the old code summed the squared deviations with numpy's pairwise sum
                # (np.std); the kernel sums them in request order like trace.step_features
                np.testing.assert_allclose(got[k], ref[k], rtol=4e-16 * c.size, atol=0)
                n_sd_differ += not _same_bits(got[k], ref[k])
            else:
                assert _same_bits(got[k], ref[k]), k
    assert n_sd_differ < len(simulated_batches)


def test_a_batch_alone_equals_its_row_in_a_trace(simulated_batches):
    """One definition: a step gets the same bits alone and among other steps."""
    c = np.concatenate([a for a, _ in simulated_batches])
    x = np.concatenate([b for _, b in simulated_batches])
    counts = [a.size for a, _ in simulated_batches]
    many = request_features(c, x, counts)
    for i, (a, b) in enumerate(simulated_batches[:200]):
        one = batch_features(a, b)
        for k in one:
            assert _same_bits(one[k], many[k][i : i + 1]), k


def test_uniform_batches_match_the_old_code_and_the_kernel():
    rng = np.random.default_rng(0)
    Bs = rng.integers(1, 64, 300).astype(float)
    chunk = np.where(rng.random(300) < 0.3, rng.integers(2, 512, 300), 1).astype(float)
    ctx = rng.integers(0, 4000, 300).astype(float)
    got = uniform_batch_features(Bs, chunk, ctx)
    ref = _old_uniform(Bs, chunk, ctx)
    assert list(got) == list(ref)
    for k in ref:
        assert _same_bits(got[k], ref[k]), k
    counts = Bs.astype(np.int64)
    kern = request_features(np.repeat(chunk, counts), np.repeat(ctx, counts), counts)
    for k in ref:
        assert _same_bits(kern[k], got[k]), k


# ---------------------------------------------------------------------------
# the kernel itself
# ---------------------------------------------------------------------------

def test_hand_computed_step_and_count_keys():
    f = request_features([512, 1, 1, 3], [0, 30, 7, 10], counts_keys=True)
    assert list(f) == ["B", "S", *CONTEXT_KEYS, *COUNT_KEYS]
    got = {k: float(v[0]) for k, v in f.items()}
    assert got == {
        "B": 4.0, "S": 517.0, "ctx_sum": 47.0, "ctx_max": 30.0,
        "attn": 512 * 256 + 30.5 + 7.5 + 3 * 11.5, "attn_prefill": 512 * 256 + 3 * 11.5,
        "decode_ctx": 37.0, "prefill_sq": 512.0**2 + 9.0,
        "chunk_sd": pytest.approx(np.std([512, 1, 1, 3]), rel=1e-15),
        "n_decode": 2.0, "n_prefill": 2.0, "s_prefill": 515.0, "max_chunk": 512.0,
    }


def test_ragged_rows_and_empty_rows():
    with np.errstate(invalid="ignore"):  # 0/0: the mean chunk of an empty step
        f = request_features([5, 1, 2, 2], [1, 2, 3, 4], [1, 0, 3], counts_keys=True)
    assert np.isnan(f["chunk_sd"][1])
    np.testing.assert_array_equal(f["B"], [1, 0, 3])
    np.testing.assert_array_equal(f["S"], [5, 0, 5])
    np.testing.assert_array_equal(f["ctx_max"], [1, 0, 4])
    np.testing.assert_array_equal(f["n_decode"], [0, 0, 1])
    np.testing.assert_array_equal(f["max_chunk"], [5, 0, 2])


def test_row_reduce():
    v = np.array([3.0, 1.0, 4.0, 1.0, 5.0])
    counts = np.array([2, 0, 3])
    np.testing.assert_array_equal(row_reduce(v, counts, "sum"), [4, 0, 10])
    np.testing.assert_array_equal(row_reduce(v, counts, "min"), [1, 0, 1])
    np.testing.assert_array_equal(row_reduce(v, counts, "max"), [3, 0, 5])
    with pytest.raises(InputError, match="how must be one of"):
        row_reduce(v, counts, "mean")


def test_batch_features_checks_its_input():
    with pytest.raises(InputError, match="chunk_sizes is empty"):
        batch_features([])
    with pytest.raises(InputError, match="chunk_sizes must be integers >= 1"):
        batch_features([0, 3])
    with pytest.raises(InputError, match="context_lens has 1 items"):
        batch_features([1, 2], [0])
    with pytest.raises(InputError, match="context_lens must be integers >= 0"):
        batch_features([1, 2], [0, -1])
    assert batch_features([4, 1])["ctx_sum"][0] == 0.0


def test_context_keys_is_the_one_list():
    """The models and tables that name context features take them from CONTEXT_KEYS."""
    from perfmodel.core import model

    assert features.CONTEXT_KEYS == ("ctx_sum", "ctx_max", "attn", "attn_prefill",
                                     "decode_ctx", "prefill_sq", "chunk_sd")
    for m in model.MODELS.values():
        assert set(m.requires) <= {"B", "S", *CONTEXT_KEYS}
    f = trace.step_features(pd.DataFrame({"batch_size": [2], "total_tokens": [5],
                                          "chunk_sizes": ["4;1"], "context_lens": ["0;9"]}))
    assert tuple(f)[2:] == CONTEXT_KEYS

