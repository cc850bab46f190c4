"""Token budget by simulated goodput: the ranking, the interval bookkeeping, bad input."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfmodel.core.fit import fit_model
from perfmodel.core.model import get_model
from perfmodel.decisions.capacity import evaluate_load, with_limits
from perfmodel.decisions.requests_workload import SLO, workload_from_lengths
from perfmodel.decisions.simulate import EngineConfig
from perfmodel.decisions.token_budget import DIAGNOSTIC_LABEL, recommend_token_budget
from perfmodel.decisions.tune import tune_token_budget
from perfmodel.errors import InputError

THETA = np.array([2.0, 1.0, 0.02, 1.0, 0.5, 0.1, 0.02])  # seed_id, ms


@pytest.fixture(scope="module")
def fit():
    rng = np.random.default_rng(1)
    B = rng.integers(1, 48, 400)
    S = B + rng.integers(0, 800, 400)
    T = get_model("seed_id").predict(THETA, {"B": B, "S": S}) * np.exp(rng.normal(0, 0.03, 400))
    return fit_model(pd.DataFrame({"batch_size": B, "total_tokens": S, "duration_ms": T}),
                     "seed_id", n_starts=2)


W = workload_from_lengths("uniform:32,96", "uniform:8,24", 80, seed=2)
SLO_ = SLO.parse("ttft_p95=400,tpot_p95=30")


def test_goodput_ranking_matches_independent_simulations(fit):
    """At a rate one sequence at a time cannot serve, max_num_seqs = 1 must lose."""
    d = tune_token_budget(fit, W, SLO_, objective="goodput", load=20.0,
                          max_num_seqs_grid=(1, 8, 32), max_num_batched_tokens_grid=(64, 512),
                          engine=EngineConfig(max_num_seqs=1, max_num_batched_tokens=64),
                          replications=3, noise=False)
    rec = d["recommended"]
    assert rec["max_num_seqs"] > 1
    table = {(r["max_num_seqs"], r["max_num_batched_tokens"]): r["objective"] for r in d["table"]}
    assert set(table) == {(1, 64), (1, 512), (8, 64), (8, 512), (32, 64), (32, 512)}
    # each objective is evaluate_load's goodput with the fitted parameters, same arrivals
    from perfmodel.decisions.capacity import StepModelDraw

    for (m, k), v in table.items():
        e = evaluate_load(StepModelDraw(fit, noise=False), W, SLO_, 20.0,
                          engine=with_limits(EngineConfig(), m, k), arrival_seed=0)
        assert v == pytest.approx(e["goodput_req_s"])
    assert rec["objective"] == max(table.values())
    base = d["baseline"]
    assert (base["max_num_seqs"], base["max_num_batched_tokens"]) == (1, 64)
    assert base["gain"] == pytest.approx(rec["objective"] - table[(1, 64)])
    assert base["gain"] > 0
    assert 0.0 <= rec["prob_best"] <= 1.0
    assert rec["interval"]["lower"] <= rec["interval"]["upper"]


def test_capacity_objective_and_no_interval(fit):
    d = tune_token_budget(fit, W, SLO_, max_num_seqs_grid=(4, 16),
                          max_num_batched_tokens_grid=(128,), replications=0, noise=False,
                          engine=EngineConfig(max_num_seqs=4, max_num_batched_tokens=128))
    assert d["objective"]["name"] == "capacity"
    assert d["recommended"]["interval"] is None and d["recommended"]["prob_best"] is None
    assert d["baseline"]["gain_interval"] is None
    assert all(r["objective"] >= 0 for r in d["table"])


@pytest.mark.parametrize("kw, match", [
    ({"objective": "goodput"}, "needs load"),
    ({"objective": "speed"}, "objective"),
    ({"max_num_seqs_grid": (64,), "max_num_batched_tokens_grid": (32,)}, "no candidate"),
])
def test_bad_input(fit, kw, match):
    with pytest.raises(InputError, match=match):
        tune_token_budget(fit, W, SLO_, replications=0, **kw)


def test_step_level_rule_is_labelled_a_diagnostic(fit):
    d = recommend_token_budget(fit, 40.0, 0.95, max_num_seqs_grid=(1, 8))
    assert d["label"] == DIAGNOSTIC_LABEL and "diagnostic" in d["label"]
    assert d["assumed_context"]["context_aware"] is False


def test_replications_are_identical_in_process_and_on_dask(fit):
    """Each draw is one task seeded by its index: a Dask LocalCluster of 2 processes gives
    the in-process table."""
    pytest.importorskip("dask.distributed", reason="dask[distributed] is not installed")
    kw = {"objective": "goodput", "load": 20.0, "max_num_seqs_grid": (1, 8),
          "max_num_batched_tokens_grid": (256,), "replications": 3, "seed": 4}
    ref = tune_token_budget(fit, W, SLO_, **kw)
    dask = tune_token_budget(fit, W, SLO_, backend="dask", n_jobs=2, **kw)
    assert dask["table"] == ref["table"] and dask["recommended"] == ref["recommended"]
    assert dask["baseline"] == ref["baseline"]
    assert any(r["interval"]["lower"] < r["interval"]["upper"] for r in ref["table"])
