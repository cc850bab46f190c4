"""The client round trip (``request_intake_ms``, ``response_delay_ms``): schedules by hand."""
from __future__ import annotations

import numpy as np
import pytest

from perfmodel.decisions.simulate import EngineConfig, simulate_closed_loop, simulate_open_loop
from perfmodel.errors import InputError


class Const:
    def predict(self, f):
        return np.full(len(f["B"]), 10.0)


ENG = EngineConfig(max_num_seqs=8, max_num_batched_tokens=256, policy="fcfs",
                   request_intake_ms=5.0, response_delay_ms=2.0)


def _ms(r, col):
    return r.requests[col].to_numpy() * 1000.0


def test_open_loop_intake_and_response_delay_by_hand():
    # request 0 sent at 0: schedulable at 5 ms, prefill 5-15 (client sees it at 17), decodes
    # 15-25, 25-35 (client: 37).  Request 1 sent at 12 ms is schedulable at 17: not in the
    # step starting at 15, admitted at 25, first token 35 (client 37), finish 45 (client 47)
    r = simulate_open_loop(Const(), prompt_tokens=4, output_tokens=[3, 2],
                           arrival_times=[0.0, 0.012], engine=ENG)
    np.testing.assert_allclose(_ms(r, "arrival_s"), [0, 12], atol=1e-9)
    np.testing.assert_allclose(_ms(r, "admitted_s"), [5, 25], atol=1e-9)
    np.testing.assert_allclose(_ms(r, "first_token_s"), [17, 37], atol=1e-9)
    np.testing.assert_allclose(_ms(r, "finish_s"), [37, 47], atol=1e-9)
    np.testing.assert_allclose(_ms(r, "ttft_s"), [17, 25], atol=1e-9)
    np.testing.assert_allclose(r.requests["tpot_ms"], [10, 10], atol=1e-9)
    np.testing.assert_allclose(r.steps["start_s"] * 1000, [5, 15, 25, 35], atol=1e-9)
    # without the round trip: steps from 0; request 1 (at 12) is admitted at 20, first token 30
    z = simulate_open_loop(Const(), prompt_tokens=4, output_tokens=[3, 2],
                           arrival_times=[0.0, 0.012],
                           engine=EngineConfig(max_num_seqs=8, max_num_batched_tokens=256,
                                               policy="fcfs"))
    np.testing.assert_allclose(_ms(z, "ttft_s"), [10, 18], atol=1e-9)


def test_closed_loop_reissues_after_the_round_trip_by_hand():
    # one client: request 0 schedulable at 5, prefill 5-15, decode 15-25, seen at 27; request
    # 1 sent at 27, schedulable at 32, prefill 32-42 (seen 44), decode 42-52 (seen 54)
    r = simulate_closed_loop(Const(), 2, 1, 4, 2, engine=ENG)
    np.testing.assert_allclose(_ms(r, "arrival_s"), [0, 27], atol=1e-9)
    np.testing.assert_allclose(_ms(r, "admitted_s"), [5, 32], atol=1e-9)
    np.testing.assert_allclose(_ms(r, "first_token_s"), [17, 44], atol=1e-9)
    np.testing.assert_allclose(_ms(r, "finish_s"), [27, 54], atol=1e-9)
    np.testing.assert_allclose(_ms(r, "ttft_s"), [17, 17], atol=1e-9)
    assert r.makespan_s == pytest.approx(0.054, abs=1e-12)


def test_closed_loop_arrival_while_the_engine_is_busy():
    # two clients, outputs 2, 5, 2: both prefill 5-15; request 0 finishes at 25 (seen 27),
    # request 2 sent at 27 reaches the scheduler at 32 while request 1 decodes (25-35): it
    # is admitted at 35, first token 45 (seen 47), finish 55 (seen 57); request 1 ends at 55
    r = simulate_closed_loop(Const(), 3, 2, 4, [2, 5, 2], engine=ENG)
    np.testing.assert_allclose(_ms(r, "arrival_s"), [0, 0, 27], atol=1e-9)
    np.testing.assert_allclose(_ms(r, "admitted_s"), [5, 5, 35], atol=1e-9)
    np.testing.assert_allclose(_ms(r, "first_token_s"), [17, 17, 47], atol=1e-9)
    np.testing.assert_allclose(_ms(r, "finish_s"), [27, 57, 57], atol=1e-9)
    np.testing.assert_allclose(_ms(r, "ttft_s"), [17, 17, 20], atol=1e-9)
    assert r.steps["request_ids"].tolist() == ["0;1", "0;1", "1", "1;2", "1;2"]
    np.testing.assert_allclose(r.steps["start_s"] * 1000, [5, 15, 25, 35, 45], atol=1e-9)


def test_zero_delays_change_nothing():
    rng = np.random.default_rng(1)
    P, O = rng.integers(1, 80, 60), rng.integers(1, 30, 60)
    a = EngineConfig(max_num_seqs=8, max_num_batched_tokens=96, policy="fcfs")
    b = EngineConfig(max_num_seqs=8, max_num_batched_tokens=96, policy="fcfs",
                     request_intake_ms=0.0, response_delay_ms=0.0)
    ra, rb = (simulate_closed_loop(Const(), 60, 6, P, O, engine=e) for e in (a, b))
    for col in ("arrival_s", "first_token_s", "finish_s"):
        np.testing.assert_array_equal(ra.requests[col], rb.requests[col])


@pytest.mark.parametrize("name", ["request_intake_ms", "response_delay_ms"])
@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf")])
def test_bad_delays_are_refused_naming_the_option(name, value):
    with pytest.raises(InputError, match=name):
        EngineConfig(**{name: value})
