"""Shared fixtures of the decision tests: a seed_id fit on a synthetic trace with known truth."""
from __future__ import annotations

import pytest

from perfmodel.core.fit import fit_model
from perfmodel.core.synthetic import simulate_trace

#: seed_id parameters of the synthetic trace (those of tests/decisions/test_sla.py)
SEED_ID_TRUTH = (5.0, 2.0, 0.05, 0.3, 0.01, 0.1, 0.002)


@pytest.fixture(scope="session")
def seed_id_fit():
    """A seed_id fit on 600 synthetic steps with 5% log-normal noise."""
    df = simulate_trace("seed_id", SEED_ID_TRUTH, n=600, noise="multiplicative", sigma=0.05,
                        seed=0)
    return fit_model(df, "seed_id", n_starts=3)
