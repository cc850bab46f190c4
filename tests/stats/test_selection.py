"""Tests of perfmodel.stats.selection: nested cross-validation chooses by the inner
(training-only) folds and scores the choice on the outer test folds."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfmodel.errors import InputError
from perfmodel.stats.selection import nested_select


def sweep(n_cfg=60, reps=2, seed=0):
    """A replicated sweep with a mildly saturating T(B, S) and 2 % log-normal noise."""
    rng = np.random.default_rng(seed)
    B = rng.integers(1, 64, n_cfg)
    S = B + rng.choice([0, 0, 64, 512, 2048], n_cfg)
    T = (2 + 0.05 * B + 0.004 * S) * (1 + 0.5 * np.exp(-S / 50))
    rows = []
    for i in range(n_cfg):
        for _ in range(reps):
            rows.append({"config": f"c{i}", "batch_size": int(B[i]), "total_tokens": int(S[i]),
                         "duration_ms": T[i] * np.exp(0.02 * rng.standard_normal())})
    return pd.DataFrame(rows)


def test_nested_selection_chooses_inside_the_training_folds():
    df = sweep()
    res = nested_select(df, ["seed_id", "seed_gamma"], "grouped", k_outer=3, k_inner=2,
                        n_starts=1)
    assert sorted(res["fold"].unique()) == [0, 1, 2]
    for _, g in res.groupby("fold"):
        assert g["chosen"].sum() == 1
        # the winner is the lowest inner (training-only) MAPE, whatever its outer score
        assert g.loc[g["chosen"], "inner_mape"].iloc[0] == g["inner_mape"].min()
        assert (g["n_train"] + g["n_test"] <= len(df)).all()
    assert res["outer_mape"].notna().all()
    with pytest.raises(InputError, match="two or more"):
        nested_select(df, ["seed_id"])
    with pytest.raises(InputError, match="k-fold scheme"):
        nested_select(df, ["seed_id", "seed_gamma"], "extrapolate")
