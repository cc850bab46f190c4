"""The replay validation table on the published LLMServingSim runs."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfmodel.data.datasets import ENV_MIRROR
from perfmodel.decisions import replay_validation as V
from perfmodel.errors import InputError

HAVE = (Path(os.environ.get(ENV_MIRROR, "/nonexistent")) / "llmservingsim").is_dir()
needs_mirror = pytest.mark.skipif(
    not HAVE, reason=f"the LLMServingSim files are not in the mirror (set {ENV_MIRROR})")


def test_bad_input():
    with pytest.raises(InputError, match="columns"):
        V.validation_wide(pd.DataFrame({"run": [1]}))
    with pytest.raises(InputError, match="pairs"):
        V.validation_table([("RTX4090",)])
    with pytest.raises(InputError, match="variants"):
        V.replay_run("RTX4090", "Llama-3.1-8B", variants={})
    with pytest.raises(InputError, match="keep_steps"):
        V.fit_vs_lookup(object(), None, None)


@needs_mirror
def test_peer_statistics_match_its_printed_summary():
    from perfmodel.data.datasets.llmservingsim import list_serving_runs, serving_run_dir

    for hw, model in list_serving_runs().itertuples(index=False):
        st = V.peer_stats(serving_run_dir(hw, model))      # raises when they disagree
        assert st["tpot_ms"]["mean"] > 0


@needs_mirror
def test_table_on_the_rtxpro6000_llama_run():
    variants = {"perfmodel": V.VARIANTS["perfmodel"]}
    tab, det = V.validation_table([("RTXPRO6000", "Llama-3.1-8B")], variants)
    assert set(tab["source"]) == {V.MEASURED, V.PEER, "perfmodel"}
    assert len(tab) == 3 * 3 * 2                        # sources x metrics x statistics
    meas = tab[tab.source == V.MEASURED].set_index(["metric", "stat"])["value_ms"]
    ours = tab[tab.source == "perfmodel"].set_index(["metric", "stat"])
    # errors are against the measured value
    err = 100 * (ours["value_ms"] / meas - 1)
    assert np.allclose(err, ours["error_pct"])
    # the target of the replay on this run: TPOT and latency means within 5 %, TTFT within 10 %
    assert abs(ours.loc[("TPOT", "mean"), "error_pct"]) <= 5
    assert abs(ours.loc[("latency", "mean"), "error_pct"]) <= 5
    assert abs(ours.loc[("TTFT", "mean"), "error_pct"]) <= 10
    look = det["RTXPRO6000 / Llama-3.1-8B"]["fit_vs_lookup"]
    assert look["n_steps"] > 1000 and 0.8 < look["all"]["time_ratio"] < 1.2
    wide = V.validation_wide(tab)
    assert len(wide) == 6 and "err LLMServingSim (%)" in wide
