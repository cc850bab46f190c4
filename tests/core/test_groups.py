"""Tests of perfmodel.core.groups: per-group fits, the same on one and two workers."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfmodel.core.fit import fit_model
from perfmodel.core.groups import fit_groups
from perfmodel.core.synthetic import simulate_trace
from perfmodel.errors import InputError


def test_each_group_gets_its_own_fit_on_any_worker_count():
    parts = [simulate_trace(n=150, noise="multiplicative", sigma=0.02, seed=s).assign(source=k)
             for s, k in ((1, "a"), (2, "b"))]
    df = pd.concat(parts, ignore_index=True)
    one = fit_groups(df, model="seed_id", n_starts=2)
    two = fit_groups(df, model="seed_id", n_starts=2, n_jobs=2)
    assert one[None] == {} and sorted(k for k in one if k) == ["a", "b"]
    ref = fit_model(parts[0].drop(columns=["source"]), "seed_id", n_starts=2)
    np.testing.assert_array_equal(one["a"].values, ref.values)
    for k in ("a", "b"):
        np.testing.assert_array_equal(one[k].values, two[k].values)
    with pytest.raises(InputError, match="no group column"):
        fit_groups(df, by="deployment")
