"""Tests of perfmodel.decisions.step_context: constants and the context assumption of a decision."""
from __future__ import annotations

import numpy as np
import pytest

from perfmodel.core.model import get_model
from perfmodel.data.features import CONTEXT_KEYS, uniform_batch_features
from perfmodel.decisions.step_context import check_constants, context_assumption, fill_features
from perfmodel.errors import InputError


@pytest.mark.parametrize("features, message", [
    ([1], "features must be a dict of constants, got list"),
    ({"B": 1}, "features must not set 'B' or 'S' (they are searched)"),
    ({"x": "a"}, "features['x'] must be a number, got 'a'"),
    ({"x": None}, "features['x'] must be a number, got None"),
    ({"x": float("inf")}, "features['x'] must be finite, got inf"),
    ({"x": float("nan")}, "features['x'] must be finite, got nan"),
    ({"context_tokens": -1}, "features['context_tokens'] must be >= 0, got -1"),
])
def test_bad_constants_are_named(features, message):
    with pytest.raises(InputError) as e:
        check_constants(features)
    assert str(e.value) == message


def test_constants_are_floats():
    assert check_constants(None) == {}
    out = check_constants({"decode_ctx": np.int64(3), "context_tokens": "12.5"})
    assert out == {"decode_ctx": 3.0, "context_tokens": 12.5}
    assert all(type(v) is float for v in out.values())


def test_fill_features_order_of_precedence():
    """Given by name > implied by context_tokens > 0; context_tokens itself is dropped."""
    requires = get_model("seed_ctx_mono").requires
    need = [k for k in requires if k in CONTEXT_KEYS]
    assert len(need) >= 2
    B, S = np.array([4.0, 16.0]), np.array([8.0, 512.0])
    implied = uniform_batch_features(B, S / B, np.full(2, 300.0))
    f = fill_features({"B": B, "S": S}, requires, {"context_tokens": 300.0, need[0]: 7.0})
    assert "context_tokens" not in f
    assert np.array_equal(f[need[0]], [7.0, 7.0])
    for k in need[1:]:
        assert np.allclose(f[k], implied[k])
    zero = fill_features({"B": B, "S": S}, requires, {})
    assert all(np.array_equal(zero[k], [0.0, 0.0]) for k in need)


def test_context_assumption_rules():
    ctx = get_model("seed_ctx_mono").requires
    assert context_assumption(("B", "S"), {})["rule"] == "the model has no context terms"
    a = context_assumption(ctx, {"context_tokens": 300.0})
    assert a["context_aware"] and a["context_tokens"] == 300.0 and "300 cached" in a["rule"]
    z = context_assumption(ctx, {})
    assert z["context_tokens"] is None and "are 0" in z["rule"] and z["constants"] == []
