"""Tests of perfmodel.decisions.batch_filter: the SLA-aware batch filter."""
from __future__ import annotations

import numpy as np
import pytest

from perfmodel.data.features import batch_features
from perfmodel.decisions import sla
from perfmodel.decisions.batch_filter import _trim, schedule_batch_with_sla
from perfmodel.errors import InputError


@pytest.fixture(scope="module")
def fit(seed_id_fit):
    return seed_id_fit


def _pred(fit, chunks):
    return float(fit.predict(batch_features(chunks))[0])


def test_schedule_keeps_a_batch_that_fits(fit):
    d = schedule_batch_with_sla(fit, [1, 1, 1, 100], 1e3)
    assert d.action == "keep" and d.feasible
    assert d.chunk_sizes == [1, 1, 1, 100] and d.dropped == [] and d.tokens_trimmed == 0


def test_schedule_trims_largest_prefill_first(fit):
    reqs = [1, 1, 1, 1, 800, 300]
    sla = 30.0
    d = schedule_batch_with_sla(fit, reqs, sla)
    assert d.action == "trim" and d.feasible and d.dropped == []
    assert d.chunk_sizes[:4] == [1, 1, 1, 1]  # decodes are never trimmed
    assert d.predicted_ms <= sla
    assert sum(d.chunk_sizes) == sum(reqs) - d.tokens_trimmed
    # trimming one token fewer would miss the SLA (fewest tokens removed)
    assert _pred(fit, _trim(np.array(reqs), d.tokens_trimmed - 1)) > sla
    # the largest chunk was cut first: the 300-token chunk is only cut once they are level
    c4, c5 = d.chunk_sizes[4:]
    assert (c5 == 300 and c4 >= 300) or abs(c4 - c5) <= 1


def test_trim_water_filling():
    c = np.array([1, 10, 4, 7])
    assert _trim(c, 0).tolist() == [1, 10, 4, 7]
    assert _trim(c, 3).tolist() == [1, 7, 4, 7]
    assert _trim(c, 4).tolist() == [1, 6, 4, 7]  # at a tie the originally larger loses
    assert _trim(c, 5).tolist() == [1, 6, 4, 6]
    assert _trim(c, 18).tolist() == [1, 1, 1, 1]
    for r in range(19):
        t = _trim(c, r)
        assert t.sum() == c.sum() - r and (t >= 1).all() and (t <= c).all()


def test_schedule_drops_requests_when_tokens_cannot_help(fit):
    # all decodes: no token can be trimmed, so requests are dropped from the end
    n = 200
    sla = _pred(fit, [1] * 150) + 1e-9
    d = schedule_batch_with_sla(fit, [1] * n, sla)
    assert d.action == "drop" and d.feasible
    assert d.kept == list(range(len(d.kept))) and d.dropped == list(range(len(d.kept), n))
    assert d.predicted_ms <= sla
    assert _pred(fit, [1] * (len(d.kept) + 1)) > sla


def test_schedule_infeasible_returns_first_request(fit):
    d = schedule_batch_with_sla(fit, [(1, 10), (500, 0)], 1.0)
    assert not d.feasible and d.action == "infeasible"
    assert d.kept == [0] and d.dropped == [1]
    assert "infeasible" in d.reason


def test_schedule_request_forms_and_errors(fit):
    class Req:
        def __init__(self, n, ctx):
            self.remaining_tokens = n
            self.num_computed_tokens = ctx

    a = schedule_batch_with_sla(fit, [Req(1, 5), Req(64, 0)], 1e3)
    b = schedule_batch_with_sla(fit, [{"chunk": 1, "context": 5}, {"num_tokens": 64}], 1e3)
    c = schedule_batch_with_sla(fit, [(1, 5), (64, 0)], 1e3)
    assert a.chunk_sizes == b.chunk_sizes == c.chunk_sizes == [1, 64]
    assert a.context_lens == [5, 0]
    with pytest.raises(InputError, match=r"requests\[1\]"):
        schedule_batch_with_sla(fit, [1, 0], 10.0)
    with pytest.raises(InputError, match="empty"):
        schedule_batch_with_sla(fit, [], 10.0)
    with pytest.raises(InputError, match="sla_ms"):
        schedule_batch_with_sla(fit, [1], 0)
    with pytest.raises(InputError, match="q must be"):
        schedule_batch_with_sla(fit, [1], 10.0, q=2.0)
    qd = schedule_batch_with_sla(fit, [1, 1, 1, 1, 800, 300], 30.0, q=0.95)
    assert sum(qd.chunk_sizes) <= sum(schedule_batch_with_sla(fit, [1, 1, 1, 1, 800, 300],
                                                              30.0).chunk_sizes)


def test_trim_is_the_fewest_tokens_by_brute_force(fit):
    reqs = np.array([1, 1, 1, 1, 800, 300])
    sla_ms = 30.0
    d = schedule_batch_with_sla(fit, reqs.tolist(), sla_ms)
    values = [_pred(fit, _trim(reqs, r)) for r in range(int((reqs - 1).sum()) + 1)]
    fewest = next(r for r, v in enumerate(values) if v <= sla_ms)
    assert d.tokens_trimmed == fewest


def test_gathered_by_sla():
    assert sla.schedule_batch_with_sla is schedule_batch_with_sla
