"""``perfmodel fit --sibling-traces``: other traces' held-out scores in the interval calibration."""
from __future__ import annotations

import json

import numpy as np
import pytest

from perfmodel.core.synthetic import simulate_trace

REPS = 4


def _write_group(path, seed, n_configs=14):
    """A replicated benchmark: ``n_configs`` configurations of REPS steps sharing one log error."""
    rng = np.random.default_rng(seed)
    base = simulate_trace("seed_id", n=n_configs, noise="none", seed=seed)
    d = base.loc[base.index.repeat(REPS)].reset_index(drop=True)
    eff = np.repeat(0.08 * rng.standard_normal(n_configs), REPS)
    d["duration_ms"] = d["duration_ms"] * np.exp(eff + 0.01 * rng.standard_normal(len(d)))
    d["config"] = [f"c{i // REPS}" for i in range(len(d))]
    d.to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def groups(tmp_path_factory):
    d = tmp_path_factory.mktemp("siblings")
    return [_write_group(d / f"group{s}.csv", s) for s in range(1, 5)]


def test_siblings_are_fitted_scored_pooled_and_said(groups, run, tmp_path):
    own, *sibs = groups
    alone, pooled = tmp_path / "alone.json", tmp_path / "pooled.json"
    assert run(["fit", own, "-o", alone, "--model", "seed_id", "--starts", "1"])[0] == 0
    rc, _, err = run(["fit", own, "-o", pooled, "--model", "seed_id", "--starts", "1",
                      "--sibling-traces", *sibs])
    assert rc == 0, err
    assert "pooled with the held-out scores of 3 sibling trace(s) (42 configurations)" in err
    cal = json.loads(pooled.read_text())["interval_calibration"]
    cal0 = json.loads(alone.read_text())["interval_calibration"]
    assert cal["siblings"]["labels"] == [str(p) for p in sibs]
    assert cal["siblings"]["n_clusters"] == [14, 14, 14]
    assert all(v > 0 for v in cal["siblings"]["spread_ratio"])
    prov = json.loads(pooled.read_text())["provenance"]["sibling_traces"]
    assert list(prov) == [str(p) for p in sibs] and all(len(h) == 64 for h in prov.values())
    assert cal["pools"]["*|*"]["n_clusters"] == 4 * cal0["pools"]["*|*"]["n_clusters"] == 56
    i = cal["levels"].index(0.9)
    assert cal0["pools"]["*|*"]["normal_tail"][i] and not cal["pools"]["*|*"]["normal_tail"][i]
    rc, out, err = run(["predict", pooled, own, "-o", tmp_path / "p.csv", "--interval", "0.9",
                        "--json"])
    assert rc == 0 and "3 sibling trace(s)" in json.loads(out)["interval"]["description"]


@pytest.mark.parametrize("extra, needle", [
    (["--sibling-traces", "OWN"], "includes the fit's own trace"),
    (["--sibling-traces", "SIB", "SIB"], "names a step log twice"),
    (["--sibling-traces", "missing.csv"], "does not exist"),
    (["--sibling-traces", "COPY"], "same content as the fit's own trace"),
    (["--sibling-traces", "SIB", "--absolute"], "absolute"),
    (["--sibling-traces", "SIB", "--intervals", "none"], "need --intervals conformal"),
    (["--sibling-traces", "SIB", "--interval-calibration", "across-runs",
      "--run-column", "config"], "within-run calibration"),
])
def test_bad_sibling_arguments_exit_2_and_write_nothing(groups, run, tmp_path, extra, needle):
    own, sib = groups[0], groups[1]
    copy = tmp_path / "copy_of_own.csv"
    copy.write_bytes(own.read_bytes())
    args = [str(own) if a == "OWN" else str(sib) if a == "SIB" else str(copy) if a == "COPY" else
            str(tmp_path / a) if a == "missing.csv" else a for a in extra]
    out = tmp_path / "fit.json"
    rc, _, err = run(["fit", own, "-o", out, "--model", "seed_id", "--starts", "1", *args])
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()
