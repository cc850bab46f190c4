"""scripts/coverage_study.py: how the settings of a merged study are recorded."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "coverage_study.py"


def _script():
    spec = importlib.util.spec_from_file_location("coverage_study", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(plan, R, wall):
    return {"plan": plan, "R": R, "n_boot": 199, "wall_seconds": wall}


def test_merged_settings_record_the_replicates_of_the_run_that_ran_each_scenario():
    merged = _script()._merged_settings
    old = {"R": 500, "n_boot": 199, "n": 300, "seed": 0, "wall_seconds": 100.0}
    summary = pd.DataFrame({"scenario": ["gaussian", "ar1"]})
    first = merged(old, _run({"heavy_tails": ["HC3"]}, 250, 50.0), summary)
    assert first["R"] == {"gaussian": 500, "ar1": 500, "heavy_tails": 250}
    assert first["wall_seconds"] == 150.0 and len(first["runs"]) == 2
    # the same scenario rerun at R = 500: every scenario now has 500, one number again
    summary2 = pd.DataFrame({"scenario": ["gaussian", "ar1", "heavy_tails"]})
    second = merged(first, _run({"heavy_tails": ["HC3"]}, 500, 60.0), summary2)
    assert second["R"] == 500 and second["n_boot"] == 199
    assert second["wall_seconds"] == 210.0 and len(second["runs"]) == 3
    assert second["scenarios"] == ["gaussian", "ar1", "heavy_tails"]
