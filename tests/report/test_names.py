"""Tests of perfmodel.report.names: one prose name per registered model and baseline."""
from __future__ import annotations

import pytest

from perfmodel.core.model import MODELS, RECOMMENDED
from perfmodel.decisions.simulate.engine import POLICIES
from perfmodel.errors import InputError
from perfmodel.report.names import POLICY_PROSE_NAMES, PROSE_NAMES, policy_prose_name, prose_name
from perfmodel.stats.baselines import BASELINES


def test_every_registered_candidate_has_a_distinct_prose_name():
    names = [*MODELS, *BASELINES]
    missing = [n for n in names if n not in PROSE_NAMES]
    assert not missing, f"no prose name for {missing}"
    prose = [PROSE_NAMES[n] for n in names]
    assert len(set(prose)) == len(prose), "two candidates share a prose name"
    assert not any("_" in p for p in prose), "a prose name keeps an identifier's underscore"


def test_prose_name_marks_the_model_of_record():
    rec = RECOMMENDED["context"]
    assert prose_name(rec, record=rec) == f"model of record ({PROSE_NAMES[rec]})"
    assert prose_name("linear", record=rec) == "linear"
    assert prose_name("constant_throughput") == "constant throughput"


@pytest.mark.parametrize("bad", ["no_such_model", 3, None])
def test_prose_name_rejects_unknown_names(bad):
    with pytest.raises(InputError):
        prose_name(bad)


def test_every_batching_policy_has_a_distinct_prose_name():
    assert set(POLICY_PROSE_NAMES) == set(POLICIES)
    prose = [policy_prose_name(p) for p in POLICIES]
    assert len(set(prose)) == len(prose) and not any("_" in p for p in prose)
    for bad in ("decode-first", None):
        with pytest.raises(InputError, match="policy"):
            policy_prose_name(bad)
