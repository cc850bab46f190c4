"""Tests of perfmodel.data.trace_features: step features against hand-computed values, time order."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfmodel.data import trace_features
from perfmodel.data.trace_features import has_context, step_features, time_order
from perfmodel.data.trace_read import read_trace
from perfmodel.data.trace_validate import validate_trace
from perfmodel.errors import InputError


def test_step_features_hand_computed(good_frame):
    f = step_features(validate_trace(good_frame()))
    # row 0: one prefill chunk 7 at context 0
    # row 1: chunks (3, 1, 1) at contexts (10, 20, 0)
    # row 2: two decodes at contexts 4 and 9
    # row 3: prefill 9 at 0, decode at 30
    np.testing.assert_array_equal(f["B"], [1, 3, 2, 2])
    np.testing.assert_array_equal(f["S"], [7, 5, 2, 10])
    np.testing.assert_array_equal(f["ctx_sum"], [0, 30, 13, 30])
    np.testing.assert_array_equal(f["ctx_max"], [0, 20, 9, 30])
    # attn = sum c (ctx + c/2): 7*3.5; 3*11.5 + 20.5 + 0.5; 4.5 + 9.5; 9*4.5 + 30.5
    np.testing.assert_allclose(f["attn"], [24.5, 55.5, 14.0, 71.0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(f["attn_prefill"], [24.5, 34.5, 0.0, 40.5], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(f["decode_ctx"], [0, 20, 13, 30])
    np.testing.assert_array_equal(f["prefill_sq"], [49, 9, 0, 81])
    # population sd: [7] -> 0; [3,1,1] -> sqrt(8/9); [1,1] -> 0; [9,1] -> 4
    np.testing.assert_allclose(f["chunk_sd"], [0, np.sqrt(8 / 9), 0, 4], rtol=0, atol=1e-12)
    for v in f.values():
        assert v.dtype == np.float64


def test_step_features_matches_a_plain_loop_on_random_steps():
    rng = np.random.default_rng(5)
    rows = []
    for _ in range(300):
        b = int(rng.integers(1, 9))
        c = rng.integers(1, 50, size=b) * (rng.random(b) < 0.4) + 1
        x = rng.integers(0, 1000, size=b)
        rows.append((b, int(c.sum()), ";".join(map(str, c)), ";".join(map(str, x))))
    df = pd.DataFrame(rows, columns=["batch_size", "total_tokens", "chunk_sizes", "context_lens"])
    f = step_features(df)
    for i, (_, _, cs, xs) in enumerate(rows):
        c = np.array(cs.split(";"), float)
        x = np.array(xs.split(";"), float)
        assert f["ctx_sum"][i] == x.sum() and f["ctx_max"][i] == x.max()
        assert f["attn"][i] == pytest.approx(np.sum(c * (x + c / 2)), rel=1e-14)
        assert f["decode_ctx"][i] == x[c == 1].sum()
        assert f["prefill_sq"][i] == np.sum(c[c > 1] ** 2)
        assert f["chunk_sd"][i] == pytest.approx(np.std(c), rel=1e-12, abs=1e-12)


def test_step_features_without_lists_and_errors():
    f = step_features(pd.DataFrame({"batch_size": [1, 2], "total_tokens": [3, 4]}))
    assert set(f) == {"B", "S"}
    with pytest.raises(InputError, match=r"missing columns \['total_tokens'\]"):
        step_features(pd.DataFrame({"batch_size": [1]}))
    bad = pd.DataFrame({"batch_size": [2], "total_tokens": [2], "chunk_sizes": ["1"],
                        "context_lens": ["0"]})
    with pytest.raises(InputError, match="different from batch_size in 1 row"):
        step_features(bad)


def test_has_context(good_frame):
    df = good_frame()
    assert has_context(df)
    assert not has_context(df.drop(columns=["context_lens"]))
    df.loc[0, "context_lens"] = None
    assert not has_context(df)


def test_time_order_prefers_step_then_timestamp_then_rows():
    df = pd.DataFrame({"step": [2, 0, 1], "timestamp": [0.0, 1.0, 2.0]})
    assert time_order(df).tolist() == [1, 2, 0]
    assert time_order(df.drop(columns=["step"])).tolist() == [0, 1, 2]
    assert time_order(pd.DataFrame({"timestamp": [3.0, 1.0, 2.0]})).tolist() == [1, 2, 0]
    assert time_order(pd.DataFrame({"x": [5, 4]})).tolist() == [0, 1]
    with pytest.raises(InputError, match="column 'step'"):
        time_order(pd.DataFrame({"step": [1, None]}))


@pytest.mark.parametrize("lists", ["arrow", "text"])
def test_blockwise_features_equal_the_whole_trace(tmp_path, monkeypatch, lists):
    """Blocks of whole steps give the same bits as one pass (Arrow lists and text lists)."""
    pytest.importorskip("pyarrow", reason="Arrow list columns need pyarrow (perfmodel[parquet])")
    from perfmodel.core.synthetic import simulate_trace  # a test may import any layer

    p = tmp_path / "t.csv"
    simulate_trace(n=600, noise="multiplicative", seed=4).to_csv(p, index=False)
    df = read_trace(p, lists=lists)
    whole = step_features(df, counts_keys=True)
    calls = []
    kernel = trace_features.request_features
    monkeypatch.setattr(trace_features, "FEATURE_BLOCK", 7)
    monkeypatch.setattr(trace_features, "request_features",
                        lambda *a, **k: calls.append(1) or kernel(*a, **k))
    blocks = step_features(df, counts_keys=True)
    assert len(calls) > 1  # the trace really went through in blocks
    assert set(blocks) == set(whole)
    for k in whole:
        np.testing.assert_array_equal(whole[k], blocks[k])


@pytest.mark.parametrize("lists", ["arrow", "text"])
def test_step_features_keys_keeps_the_same_bits_of_the_named_features(tmp_path, lists):
    pytest.importorskip("pyarrow", reason="Arrow list columns need pyarrow (perfmodel[parquet])")
    from perfmodel.core.synthetic import simulate_trace  # a test may import any layer

    p = tmp_path / "t.csv"
    simulate_trace(n=300, noise="multiplicative", seed=2).to_csv(p, index=False)
    df = read_trace(p, lists=lists)
    every = step_features(df, counts_keys=True)
    for keys in (("B", "S"), ("S", "attn_prefill", "ctx_sum"), ("n_decode",)):
        some = step_features(df, counts_keys=True, keys=keys)
        assert set(some) == set(keys)
        for k in keys:
            np.testing.assert_array_equal(some[k], every[k])
    no_lists = df.drop(columns=["chunk_sizes", "context_lens"])
    assert set(step_features(no_lists, keys=("B", "attn"))) == {"B"}
    with pytest.raises(InputError, match="keys must be a collection"):
        step_features(df, keys="attn")
