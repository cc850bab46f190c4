"""``perfmodel coverage``: held-out coverage of the prediction interval on a trace."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from perfmodel.data.trace import read_trace
from perfmodel.stats.interval_heldout import held_out_coverage, held_out_intervals

EXAMPLE = Path(__file__).resolve().parents[2] / "data" / "example" / "example_trace.csv"

QUICK = ["--starts", "1", "-k", "3"]


def test_coverage_writes_the_per_regime_table_of_the_package(tmp_path, run):
    out = tmp_path / "cov.csv"
    rc, stdout, err = run(["coverage", EXAMPLE, "-o", out, "--levels", "0.8,0.9", *QUICK,
                           "--json"])
    assert rc == 0, err
    obj = json.loads(stdout)
    got = pd.read_csv(out)
    want = held_out_coverage(held_out_intervals(read_trace(EXAMPLE), levels=[0.8, 0.9], k=3,
                                                n_starts=1))
    assert got.columns.tolist() == want.columns.tolist()
    assert got["regime"].tolist() == want["regime"].tolist()
    assert got["coverage"].round(12).tolist() == want["coverage"].round(12).tolist()
    assert obj["levels"] == [0.8, 0.9] and obj["k"] == 3 and obj["n_held_out"] == 2000
    assert obj["scheme"] == "blocked" and obj["model"] == "seed_ctx_mono"  # as perfmodel fit
    assert len(obj["rows"]) == len(got)


def test_coverage_text_names_what_it_does_not_check(tmp_path, run):
    rc, stdout, err = run(["coverage", EXAMPLE, "-o", tmp_path / "c.csv", "--levels", "0.9",
                           *QUICK])
    assert rc == 0, err
    assert "not checked: a shift between runs" in stdout
    assert "regime x level cells within 0.03:" in stdout and "wrote" in stdout
    # the count is set against what a calibrated interval would reach on these cells
    assert "(a calibrated interval: about" in stdout and "p(within)" in stdout


@pytest.mark.parametrize("extra, needle", [
    (["--levels", "0.905"], "not calibrated"),
    (["--levels", "0.9,abc"], "comma-separated"),
    (["--levels", "1.2"], "in (0, 1)"),
    (["-k", "1"], "folds"),
    (["--starts", "0"], "starts"),
    (["--cv", "random"], "invalid choice"),
])
def test_bad_options_exit_2_and_write_nothing(tmp_path, run, extra, needle):
    out = tmp_path / "c.csv"
    rc, _, err = run(["coverage", EXAMPLE, "-o", out, *extra])
    assert rc == 2 and needle in err and not out.exists()
    assert "Traceback" not in err
    # one line: argparse's own errors add its usage line before it
    lines = [x for x in err.strip().splitlines() if not x.startswith("usage:") and x.strip()
             and not x.startswith(" ")]
    assert len(lines) == 1, err


def test_a_trace_without_measured_times_is_refused(tmp_path, run):
    bare = tmp_path / "bare.csv"
    pd.read_csv(EXAMPLE).drop(columns="duration_ms").to_csv(bare, index=False)
    out = tmp_path / "c.csv"
    rc, _, err = run(["coverage", bare, "-o", out])
    assert rc == 2 and "duration_ms" in err and not out.exists()
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_an_existing_output_is_kept_without_force(tmp_path, run):
    out = tmp_path / "c.csv"
    out.write_text("keep\n")
    rc, _, err = run(["coverage", EXAMPLE, "-o", out, *QUICK])
    assert rc == 2 and "--force" in err and out.read_text() == "keep\n"


def test_forward_folds_on_request(tmp_path, run):
    rc, stdout, err = run(["coverage", EXAMPLE, "-o", tmp_path / "f.csv", "--levels", "0.9",
                           "--cv", "expanding", *QUICK, "--json"])
    assert rc == 0, err
    obj = json.loads(stdout)
    assert obj["scheme"] == "expanding" and 0 < obj["n_held_out"] < obj["n_steps"]


def test_coverage_online_adds_the_online_rows_of_the_same_held_out_steps(tmp_path, run):
    from perfmodel.stats.interval_online import online_held_out

    out = tmp_path / "cov.csv"
    rc, stdout, err = run(["coverage", EXAMPLE, "-o", out, "--levels", "0.9", *QUICK,
                           "--cv", "expanding", "--online"])
    assert rc == 0, err
    got = pd.read_csv(out)
    assert got.columns[0] == "method" and set(got["method"]) == {"conformal", "online"}
    steps = held_out_intervals(read_trace(EXAMPLE), levels=[0.9], k=3, n_starts=1,
                               scheme="expanding")
    want = held_out_coverage(online_held_out(steps), method="online")
    mine = got[got["method"] == "online"]
    assert mine["coverage"].round(12).tolist() == want["coverage"].round(12).tolist()
    assert "online:" in stdout and "conformal:" in stdout
