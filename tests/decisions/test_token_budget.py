"""Tests of perfmodel.decisions.token_budget: the step-level token-budget diagnostic."""
from __future__ import annotations

import json

import numpy as np
import pytest

from perfmodel.decisions import sla
from perfmodel.decisions.inversion import max_tokens_quantile
from perfmodel.decisions.predictor import Predictor
from perfmodel.decisions.token_budget import (
    DIAGNOSTIC_LABEL,
    RULES,
    recommend_token_budget,
)
from perfmodel.errors import InputError


@pytest.fixture(scope="module")
def fit(seed_id_fit):
    return seed_id_fit


def test_recommend_full_step(fit):
    r = recommend_token_budget(fit, 40.0, 0.95)
    assert r["feasible"]
    M, K = r["max_num_seqs"], r["max_num_batched_tokens"]
    assert K >= M
    assert K == max_tokens_quantile(fit, M, 40.0, 0.95).max_total_tokens
    assert r["prob_meets_slo"] >= 0.95
    assert r["predicted_q_ms"] <= 40.0
    best = max((row for row in r["table"] if row["feasible"]), key=lambda x: x["tokens_per_s"])
    assert best["max_num_seqs"] == M
    assert r["worst_case"]["batch_size"] <= M
    json.dumps(r)


def test_recommend_all_batch_sizes_covers_every_b(fit):
    r = recommend_token_budget(fit, 150.0, 0.9, cover="all_batch_sizes",
                               max_num_seqs_grid=(1, 4, 16, 64))
    assert r["feasible"]
    M, K = r["max_num_seqs"], r["max_num_batched_tokens"]
    p = Predictor(fit, q=0.9)
    qb = p.quantile({"B": np.arange(1, M + 1, dtype=float), "S": np.full(M, float(K))})
    assert qb.max() <= 150.0
    assert r["worst_case"]["predicted_q_ms"] <= 150.0


def test_recommend_infeasible(fit):
    r = recommend_token_budget(fit, 2.0, 0.95)
    assert not r["feasible"] and r["max_num_batched_tokens"] is None
    assert "infeasible" in r["reason"]


def test_all_batch_sizes_budget_is_within_the_full_step_budget(fit):
    full = recommend_token_budget(fit, 150.0, 0.9, max_num_seqs_grid=(1, 4, 16, 64))
    every = recommend_token_budget(fit, 150.0, 0.9, cover="all_batch_sizes",
                                   max_num_seqs_grid=(1, 4, 16, 64))
    assert full["rule"] == RULES["full_step"] and every["rule"] == RULES["all_batch_sizes"]
    for a, b in zip(full["table"], every["table"]):
        assert a["max_num_seqs"] == b["max_num_seqs"]
        if b["feasible"]:  # a stricter cover never allows more tokens at the same M
            assert a["feasible"] and b["max_num_batched_tokens"] <= a["max_num_batched_tokens"]


@pytest.mark.parametrize("cover", ["full_step", "all_batch_sizes"])
def test_infeasible_answer_says_why_for_each_cover(fit, cover):
    r = recommend_token_budget(fit, 2.0, 0.95, cover=cover, max_num_seqs_grid=[2, 8])
    assert not r["feasible"] and r["max_num_seqs"] is None
    assert r["reason"].startswith("infeasible: no max_num_seqs in [2, 8] meets the SLO 2 ms")
    assert all(not row["feasible"] and row["reason"] for row in r["table"])
    assert r["label"] == DIAGNOSTIC_LABEL and "note" not in r
    if cover == "full_step":
        assert "the smallest 0.95-quantile of a full step over the grid" in r["reason"]
    else:
        assert r["table"][0]["reason"] in r["reason"]


def test_grid_as_an_integer_and_the_caution_on_small_steps(fit):
    r = recommend_token_budget(fit, 40.0, 0.9, max_num_seqs_grid=16)
    assert [row["max_num_seqs"] for row in r["table"]] == [16]
    wc = r["worst_case"]
    q = Predictor(fit, q=0.9).quantile({"B": [float(wc["batch_size"])],
                                        "S": [float(r["max_num_batched_tokens"])]})
    assert wc["predicted_q_ms"] == pytest.approx(float(q[0]), rel=1e-12)
    assert ("caution" in r["reason"]) == (wc["predicted_q_ms"] > 40.0)


@pytest.mark.parametrize("kw, match", [
    ({"itl_slo_ms": 0.0}, "itl_slo_ms must be a positive finite number of ms, got 0.0"),
    ({"q": 1.0}, r"q must be a probability in \(0, 1\), got 1.0"),
    ({"cover": "x"}, "cover must be 'full_step' or 'all_batch_sizes', got 'x'"),
    ({"max_num_seqs_grid": []}, "max_num_seqs_grid is empty"),
    ({"max_num_seqs_grid": [4, 0]}, "max_num_seqs_grid must be an integer >= 1, got 0"),
    ({"max_num_seqs_grid": [4, 64], "s_max": 32}, "s_max=32 is below the largest max_num_seqs 64"),
])
def test_bad_arguments_are_named(fit, kw, match):
    kw = {"itl_slo_ms": 40.0, **kw}
    with pytest.raises(InputError, match=match):
        recommend_token_budget(fit, kw.pop("itl_slo_ms"), **kw)


def test_gathered_by_sla():
    assert sla.recommend_token_budget is recommend_token_budget
    assert sla.DIAGNOSTIC_LABEL is DIAGNOSTIC_LABEL
