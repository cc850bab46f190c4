"""``perfmodel fit --run-sd / --run-traces`` and ``predict --interval``: the run-level term."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]
CPU = REPO / "data" / "vllm-cpu" / "llama-small"
TRACE, OTHERS = CPU / "mixed-r1.csv", [CPU / "mixed-r2.csv", CPU / "closed_loop-r1.csv"]


@pytest.fixture(scope="module")
def fits(tmp_path_factory):
    """The same trace fitted without a run term, with --run-sd 0.04 and with --run-traces."""
    from perfmodel.cli.main import main

    if not all(p.exists() for p in [TRACE, *OTHERS]):
        pytest.skip(f"the vLLM-CPU traces of {CPU} are not in this checkout")
    d = tmp_path_factory.mktemp("runterm")
    out = {}
    for name, extra in (("none", []), ("sd", ["--run-sd", "0.04"]),
                        ("traces", ["--run-traces", *OTHERS])):
        out[name] = d / f"{name}.json"
        assert main(["fit", str(TRACE), "-o", str(out[name]), "--starts", "2", *map(str, extra)]) == 0
    return out


def _predict(run, fit, tmp_path, level="0.9"):
    out = tmp_path / f"{Path(fit).stem}-{level}.csv"
    rc, stdout, err = run(["predict", fit, CPU / "mixed-r3.csv", "-o", out, "--interval", level,
                           "--json"])
    assert rc == 0, err
    return pd.read_csv(out), json.loads(stdout)["interval"], err


def test_run_term_is_stored_used_and_said(fits, run, tmp_path):
    none, iv0, err0 = _predict(run, fits["none"], tmp_path)
    sd, iv1, err1 = _predict(run, fits["sd"], tmp_path)
    _, iv2, _ = _predict(run, fits["traces"], tmp_path)
    assert iv0["run_term"] is None and "no run-level term" in err0
    assert iv1["run_term"] == {"sd": 0.04, "source": "run-sd", "n_runs": None}
    assert "N(0, 0.04^2), given by --run-sd" in err1 and "N(0, 0.04^2)" in iv1["description"]
    r = iv2["run_term"]
    assert r["source"] == "run-traces" and r["n_runs"] == 2
    assert set(r["ratios"]) == {str(p) for p in OTHERS} and 0 < r["sd"] < 0.5
    assert "estimated from 2 runs the fit did not see" in iv2["description"]
    # the same fit and calibration: the point prediction is unchanged, the interval wider
    np.testing.assert_array_equal(none["predicted_ms"], sd["predicted_ms"])
    assert np.all(sd["upper_ms"] - sd["lower_ms"] > none["upper_ms"] - none["lower_ms"])
    cal = json.loads(fits["sd"].read_text())["interval_calibration"]
    cal0 = json.loads(fits["none"].read_text())["interval_calibration"]
    assert cal.pop("run_term")["sd"] == 0.04 and cal == cal0


def test_run_sd_zero_predicts_the_intervals_of_no_term(fits, run, tmp_path):
    zero = tmp_path / "zero.json"
    assert run(["fit", TRACE, "-o", zero, "--starts", "2", "--run-sd", "0"])[0] == 0
    a, _, _ = _predict(run, fits["none"], tmp_path)
    b, iv, _ = _predict(run, zero, tmp_path)
    assert iv["run_term"]["sd"] == 0 and "no run-level term" in iv["description"]
    pd.testing.assert_frame_equal(a, b)


@pytest.mark.parametrize("argv, message", [
    (["--run-sd", "-1"], "run_sd"),
    (["--run-sd", "nan"], "run_sd"),
    (["--run-sd", "0.1", "--run-traces", str(OTHERS[0]), str(OTHERS[1])], "not allowed with"),
    (["--run-traces", str(OTHERS[0])], ">= 2 runs"),
    (["--run-traces", str(TRACE), str(OTHERS[0])], "fit's own trace"),
    (["--run-traces", str(OTHERS[0]), str(OTHERS[0])], "twice"),
    (["--run-sd", "0.1", "--intervals", "none"], "--intervals conformal"),
    (["--run-sd", "0.1", "--run-column", "phase"], "within-run calibration"),
])
def test_bad_run_term_input_exits_2_with_one_line(run, tmp_path, argv, message):
    if not all(p.exists() for p in [TRACE, *OTHERS]):
        pytest.skip(f"the vLLM-CPU traces of {CPU} are not in this checkout")
    trace = TRACE
    if "--run-column" in argv:  # a trace with two runs in a column
        trace = tmp_path / "two.csv"
        d = pd.read_csv(TRACE)
        d.assign(phase=np.where(np.arange(len(d)) < len(d) // 2, "a", "b")).to_csv(trace,
                                                                                  index=False)
    out = tmp_path / "bad.json"
    rc, _, err = run(["fit", trace, "-o", out, "--starts", "1", *argv])
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_predict_adds_a_run_term_to_a_fit_without_one(fits, run, tmp_path):
    """``predict --run-sd`` on a fit stored without a term gives the intervals of a fit stored
    with that term (FIT.json untouched); ``--run-traces`` estimates it from other runs."""
    stored, iv_stored, _ = _predict(run, fits["sd"], tmp_path)
    before = fits["none"].read_bytes()
    out = tmp_path / "override.csv"
    rc, stdout, err = run(["predict", fits["none"], CPU / "mixed-r3.csv", "-o", out,
                           "--interval", "0.9", "--run-sd", "0.04", "--json"])
    assert rc == 0, err
    iv = json.loads(stdout)["interval"]
    assert iv["run_term"] == iv_stored["run_term"] and "given by --run-sd" in err
    pd.testing.assert_frame_equal(pd.read_csv(out), stored)
    assert fits["none"].read_bytes() == before
    out2 = tmp_path / "override2.csv"
    rc, stdout, err = run(["predict", fits["none"], CPU / "mixed-r3.csv", "-o", out2,
                           "--interval", "0.9", "--run-traces", *OTHERS, "--json"])
    assert rc == 0, err
    assert json.loads(stdout)["interval"]["run_term"]["n_runs"] == 2


@pytest.mark.parametrize("argv, message", [
    (["--run-sd", "0.04"], "give --interval"),
    (["--interval", "0.9", "--interval-method", "model", "--run-sd", "0.04"], "conformal"),
    (["--interval", "0.9", "--run-sd", "-0.1"], "run_sd"),
    (["--interval", "0.9", "--run-traces", str(CPU / "mixed-r3.csv"), str(OTHERS[0])],
     "predicted trace"),
    (["--interval", "0.9", "--run-traces", str(TRACE), str(OTHERS[0])], "fit's own trace"),
])
def test_bad_predict_run_term_exits_2_with_one_line(fits, run, tmp_path, argv, message):
    out = tmp_path / "bad.csv"
    rc, _, err = run(["predict", fits["none"], CPU / "mixed-r3.csv", "-o", out, *argv])
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_predict_run_term_needs_a_stored_calibration(run, tmp_path):
    if not TRACE.exists():
        pytest.skip(f"the vLLM-CPU traces of {CPU} are not in this checkout")
    bare = tmp_path / "bare.json"
    assert run(["fit", TRACE, "-o", bare, "--starts", "1", "--intervals", "none"])[0] == 0
    out = tmp_path / "bad.csv"
    rc, _, err = run(["predict", bare, CPU / "mixed-r3.csv", "-o", out, "--interval", "0.9",
                      "--run-sd", "0.04"])
    assert rc == 2 and "no interval calibration" in err and not out.exists()
