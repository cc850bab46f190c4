"""Shared fixtures of the stats tests."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest


def _synthetic_trace(n=240, seed=0, noise=0.0):
    """Synthetic trace, T = 2 + 0.3 B + 0.01 S (x lognormal noise), configs of 4 replicates."""
    rng = np.random.default_rng(seed)
    B = rng.integers(1, 40, n // 4).repeat(4)
    extra = rng.choice([0, 0, 5, 200, 3000], n // 4).repeat(4)
    S = B + extra
    T = (2 + 0.3 * B + 0.01 * S) * np.exp(rng.normal(0, noise, n) if noise else 0)
    return pd.DataFrame({"step": np.arange(n), "batch_size": B, "total_tokens": S,
                         "duration_ms": T, "config": np.repeat(np.arange(n // 4), 4).astype(str)})


@pytest.fixture
def synthetic_trace():
    """``synthetic_trace(n=240, seed=0, noise=0.0)``: a step trace of configurations with 4
    replicates each, exactly linear in B and S (times lognormal noise of sd ``noise``)."""
    return _synthetic_trace
