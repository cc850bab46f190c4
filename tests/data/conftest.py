"""Shared fixtures of the step-trace tests (``tests/data/test_trace*.py``).

* ``good_frame()`` returns a fresh small valid trace with per-request lists
  and extra columns;
* ``error_of(df, **kw)`` returns the message of the
  :class:`~perfmodel.errors.InputError` that ``validate_trace(df, **kw)`` raises
  (the test fails if it raises none).
"""
from __future__ import annotations

import pandas as pd
import pytest

from perfmodel.data.trace_validate import validate_trace
from perfmodel.errors import InputError


def _good_frame(n: int = 4) -> pd.DataFrame:
    """A small valid trace with lists and extras."""
    rows = [
        # B, S, T, chunks, contexts
        (1, 7, 12.5, "7", "0"),
        (3, 5, 8.0, "3;1;1", "10;20;0"),
        (2, 2, 6.0, "1;1", "4;9"),
        (2, 10, 9.5, "9;1", "0;30"),
    ][:n]
    return pd.DataFrame({
        "step": range(n),
        "batch_size": [r[0] for r in rows],
        "total_tokens": [r[1] for r in rows],
        "duration_ms": [r[2] for r in rows],
        "chunk_sizes": [r[3] for r in rows],
        "context_lens": [r[4] for r in rows],
        "forward_ms": [1.0, 2.0, 3.0, 4.0][:n],
        "config": ["a", "a", "b", "b"][:n],
    })


def _error_of(df, **kw) -> str:
    with pytest.raises(InputError) as ei:
        validate_trace(df, **kw)
    return str(ei.value)


@pytest.fixture
def good_frame():
    """``good_frame(n=4) -> DataFrame``: a new valid trace on every call."""
    return _good_frame


@pytest.fixture
def error_of():
    """``error_of(df, **kw) -> str``: the message ``validate_trace`` refuses ``df`` with."""
    return _error_of
