"""``perfmodel simulate --request-intake-ms / --response-delay-ms``: the client round trip."""
from __future__ import annotations

import json

import pytest


def _sim(run, fit_json, *extra):
    rc, out, err = run(["simulate", fit_json, "--num-requests", 6, "--concurrency", 1,
                        "--prompt-tokens", 16, "--output-tokens", 4, "--json", *extra])
    return rc, (json.loads(out) if rc == 0 else None), err


def test_round_trip_adds_to_every_request_of_a_single_client(run, fit_json):
    rc, base, _ = _sim(run, fit_json)
    assert rc == 0 and base["config"]["request_intake_ms"] == 0.0
    rc, d, _ = _sim(run, fit_json, "--request-intake-ms", 5, "--response-delay-ms", 2)
    assert rc == 0
    assert d["config"]["request_intake_ms"] == 5.0 and d["config"]["response_delay_ms"] == 2.0
    # one client, so the engine never batches: each request's TTFT and latency grow by 7 ms,
    # and the makespan by 6 x 7 ms
    assert d["median_ttft_s"] - base["median_ttft_s"] == pytest.approx(0.007, abs=1e-9)
    assert d["median_e2e_s"] - base["median_e2e_s"] == pytest.approx(0.007, abs=1e-9)
    assert d["makespan_s"] - base["makespan_s"] == pytest.approx(0.042, abs=1e-9)
    assert d["mean_tpot_ms"] == pytest.approx(base["mean_tpot_ms"], rel=1e-12)


def test_negative_delay_exits_2_naming_the_option(run, fit_json):
    rc, _, err = _sim(run, fit_json, "--response-delay-ms", -1)
    assert rc == 2 and "response_delay_ms" in err and len(err.strip().splitlines()) == 1
