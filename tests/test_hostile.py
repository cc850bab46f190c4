"""Hostile inputs: one test per class of bad input a realistic user can give.

Each test attacks the tool the way a user could by accident (a wrong path, a
sentinel value, a hand-edited FIT.json, a signal) and checks the documented
answer (README, "What bad input gets"): exit status 2 and one line naming the
problem, nothing written that was not asked for, nothing replaced that was not
a regular output file.  The classes that already held before the hardening are
kept here too, so that they keep holding.
"""
from __future__ import annotations

import bz2
import gzip
import json
import os
import stat
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfmodel.cli.main import main
from perfmodel.errors import InputError

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "data" / "example" / "example_trace.csv"


def run(args, capsys):
    """Run the CLI in-process; return (exit status, stdout, stderr)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rc = main([str(a) for a in args])
    out = capsys.readouterr()
    leaked = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    return rc, out.out, out.err + "".join(f"\nWARNING {m}" for m in leaked)


def one_line_error(rc, err, *words):
    """Exit 2, exactly one line on stderr, naming every word in ``words``."""
    assert rc == 2, err
    lines = [ln for ln in err.strip().splitlines() if ln]
    assert len(lines) == 1, err
    assert lines[0].startswith("perfmodel: error:"), err
    for w in words:
        assert w.lower() in lines[0].lower(), (w, err)


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    """A 300-step trace without context columns (fits in well under a second)."""
    p = tmp_path_factory.mktemp("hostile") / "t.csv"
    df = pd.read_csv(EXAMPLE, usecols=["batch_size", "total_tokens", "duration_ms"]).head(300)
    df.to_csv(p, index=False)
    return p


@pytest.fixture(scope="module")
def fit_json(trace, tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("hostile-fit") / "fit.json"
    assert main(["fit", str(trace), "-o", str(p), "--model", "seed_id", "--starts", "2",
                 "--json"]) == 0
    return p


def edited_fit(fit_json: Path, tmp_path: Path, edit) -> Path:
    d = json.loads(fit_json.read_text())
    edit(d)
    p = tmp_path / "edited.json"
    p.write_text(json.dumps(d))
    return p


def small_trace(tmp_path: Path, name: str = "s.csv", **cols) -> Path:
    base = {"batch_size": [1, 2, 4, 8, 16, 3], "total_tokens": [1, 40, 300, 900, 2000, 77],
            "duration_ms": [5.0, 6.1, 9.0, 15.2, 30.5, 6.6]}
    base.update(cols)
    p = tmp_path / name
    pd.DataFrame(base).to_csv(p, index=False)
    return p


# ---------------------------------------------------------------------------
# outputs
# ---------------------------------------------------------------------------

def test_special_file_output_refused_even_with_force(trace, tmp_path, capsys):
    """Holds: a FIFO target is refused and stays a FIFO (as /dev/null or /dev/full would)."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    rc, _, err = run(["fit", trace, "-o", fifo, "--force"], capsys)
    one_line_error(rc, err, "FIFO")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_existing_output_kept_without_force(trace, tmp_path, capsys):
    """Holds: an existing output is not replaced without --force."""
    out = tmp_path / "f.json"
    out.write_text("keep me")
    rc, _, err = run(["fit", trace, "-o", out], capsys)
    one_line_error(rc, err, "--force")
    assert out.read_text() == "keep me"


@pytest.mark.parametrize("cmd", ["fit", "predict", "compare"])
def test_output_that_is_an_input_refused_even_with_force(cmd, trace, fit_json, tmp_path, capsys):
    """The output is the trace (or FIT.json) the command reads: refused, input intact."""
    t = tmp_path / "in.csv"
    t.write_bytes(trace.read_bytes())
    before = t.read_bytes()
    if cmd == "fit":
        args = ["fit", t, "-o", t, "--force", "--starts", "2"]
    elif cmd == "predict":
        f = tmp_path / "fit.json"
        f.write_bytes(fit_json.read_bytes())
        args = ["predict", f, t, "-o", f, "--force"]
        before = f.read_bytes()
        t = f
    else:
        args = ["compare", t, "-o", t, "--force", "--models", "seed_id", "--baselines", "",
                "--starts", "1", "-k", "2"]
    rc, _, err = run(args, capsys)
    one_line_error(rc, err, "input")
    assert t.read_bytes() == before


def test_output_hard_link_to_input_refused(trace, tmp_path, capsys):
    """Same inode under another name is the same file."""
    t = tmp_path / "in.csv"
    t.write_bytes(trace.read_bytes())
    alias = tmp_path / "alias.json"
    os.link(t, alias)
    rc, _, err = run(["fit", t, "-o", alias, "--force", "--starts", "2"], capsys)
    one_line_error(rc, err, "input")
    assert t.read_bytes() == trace.read_bytes()


def test_create_without_force_is_atomic(tmp_path, monkeypatch):
    """A writer that creates the target between our check and our final rename wins.

    The final step of a write without ``force`` must fail if the name exists
    at that moment (no check-then-rename race), leaving the other file intact.
    """
    from perfmodel import _io

    target = tmp_path / "out.txt"
    real_replace, real_link = os.replace, getattr(os, "link", None)

    def other_writer_first(fn):
        def wrapped(src, dst, *a, **k):
            if Path(dst) == target and not target.exists():
                target.write_text("other writer")
            return fn(src, dst, *a, **k)
        return wrapped

    monkeypatch.setattr(_io.os, "replace", other_writer_first(real_replace))
    if real_link is not None:
        monkeypatch.setattr(_io.os, "link", other_writer_first(real_link))
    with pytest.raises(InputError, match="exists"):
        _io.atomic_write_text(target, "mine")
    assert target.read_text() == "other writer"
    assert not list(tmp_path.glob(".out.txt.*"))


def test_output_mode_follows_umask(tmp_path):
    """Holds: a new output has 0o666 less the umask, like any other tool's output."""
    from perfmodel._io import atomic_write_text

    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "a.txt", "x")
        os.umask(0o002)
        atomic_write_text(tmp_path / "b.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "a.txt").st_mode) == 0o644
    assert stat.S_IMODE(os.stat(tmp_path / "b.txt").st_mode) == 0o664


_SIGNAL_SCRIPT = r"""
import os, signal, sys, time
sig = getattr(signal, sys.argv[1])
# a job started in the background by a non-interactive shell inherits SIGINT ignored, and
# Python then installs no KeyboardInterrupt handler; a terminal's Ctrl-C reaches one that has it
signal.signal(signal.SIGINT, signal.default_int_handler)
real_fdopen = os.fdopen

class Slow:
    def __init__(self, fh):
        self._fh = fh
    def write(self, data):
        n = self._fh.write(data)
        self._fh.flush()
        os.kill(os.getpid(), sig)
        time.sleep(5)
        return n
    def __getattr__(self, name):
        return getattr(self._fh, name)
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return self._fh.__exit__(*exc)

os.fdopen = lambda *a, **k: Slow(real_fdopen(*a, **k))
from perfmodel.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_signal_during_write_leaves_no_temporary_file(sig, trace, tmp_path):
    """Ctrl-C (holds) and SIGTERM: the temporary file is removed and one line says so."""
    out = tmp_path / "f.json"
    proc = subprocess.run(
        [sys.executable, "-c", _SIGNAL_SCRIPT, sig, "fit", str(trace), "-o", str(out),
         "--starts", "2"],
        capture_output=True, text=True, cwd=REPO, timeout=120, check=False)
    assert proc.returncode in (130, 143), (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("perfmodel:"), proc.stderr
    assert not out.exists()
    assert not list(tmp_path.glob(".f.json.*")), list(tmp_path.iterdir())


def test_kill_9_leftovers_documented():
    """kill -9 cannot be caught: the README says which leftovers to delete."""
    readme = (REPO / "README.md").read_text()
    assert ".NAME.*.tmp" in readme and "kill -9" in readme


# ---------------------------------------------------------------------------
# trace content
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("col,value", [
    ("batch_size", "18446744073709551615"),
    ("batch_size", "1e19"),
    ("total_tokens", "18446744073709551615"),
    ("total_tokens", "9223372036854775808"),
    ("total_tokens", "1e19"),
])
def test_huge_integer_counts_refused_as_integers(col, value, fit_json, tmp_path, capsys):
    """B or S above the documented maximum: refused, naming column, row and value (no wrap)."""
    p = tmp_path / "big.csv"
    rows = {"batch_size": ["1", "2"], "total_tokens": ["1", "40"], "duration_ms": ["5", "6"]}
    rows[col][1] = value
    pd.DataFrame(rows).to_csv(p, index=False)
    rc, _, err = run(["fit", p, "-o", tmp_path / "f.json"], capsys)
    one_line_error(rc, err, col, "row 1", "maximum")
    assert not (tmp_path / "f.json").exists()
    rc, _, err = run(["predict", fit_json, p, "-o", tmp_path / "p.csv"], capsys)
    one_line_error(rc, err, col)
    assert not (tmp_path / "p.csv").exists()


def test_huge_integer_counts_refused_in_library():
    from perfmodel.data.trace import validate_trace

    df = pd.DataFrame({"B": [1, 2], "S": [1, 2 ** 62], "T": [5.0, 6.0]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(InputError, match="total_tokens.*maximum"):
            validate_trace(df)


@pytest.mark.parametrize("col", ["context_lens", "chunk_sizes", "step", "num_decode"])
def test_huge_integer_lists_and_counts_refused(col, tmp_path, capsys):
    """Per-request lists and the other count columns have the same maximum."""
    big = str(2 ** 50)
    df = pd.DataFrame({"batch_size": [1, 2], "total_tokens": [1, 2], "duration_ms": [5.0, 6.0],
                       "chunk_sizes": ["1", "1;1"], "context_lens": ["3", "4;5"],
                       "step": [0, 1], "num_decode": [1, 2], "num_prefill": [0, 0]})
    if col == "chunk_sizes":
        df["total_tokens"] = [1, 2 ** 50 + 1]
        df[col] = ["1", f"1;{big}"]
    elif col == "context_lens":
        df[col] = ["3", f"4;{big}"]
    else:
        df[col] = df[col].astype(object)
        df.loc[1, col] = big
    p = tmp_path / "big.csv"
    df.to_csv(p, index=False)
    rc, _, err = run(["fit", p, "-o", tmp_path / "f.json"], capsys)
    one_line_error(rc, err, col, "maximum")


@pytest.mark.parametrize("ext,opener", [(".csv", open), (".csv.gz", gzip.open),
                                        (".csv.bz2", bz2.open), (".tsv.gz", gzip.open)])
def test_duplicate_columns_refused_in_every_compression(ext, opener, tmp_path, capsys):
    sep = "\t" if ".tsv" in ext else ","
    p = tmp_path / f"dup{ext}"
    with opener(p, "wt") as fh:
        fh.write(sep.join(["batch_size", "total_tokens", "duration_ms", "batch_size"]) + "\n")
        fh.write(sep.join(["1", "1", "5", "2"]) + "\n")
        fh.write(sep.join(["2", "9", "6", "3"]) + "\n")
    rc, _, err = run(["fit", p, "-o", tmp_path / "f.json"], capsys)
    one_line_error(rc, err, "duplicate", "batch_size")


def test_duplicate_columns_refused_in_jsonl(tmp_path, capsys):
    """JSON Lines with a key twice: the last silently wins in json; refuse instead."""
    p = tmp_path / "dup.jsonl"
    p.write_text('{"batch_size": 1, "total_tokens": 1, "duration_ms": 5, "batch_size": 2}\n'
                 '{"batch_size": 2, "total_tokens": 9, "duration_ms": 6, "batch_size": 3}\n')
    rc, _, err = run(["fit", p, "-o", tmp_path / "f.json"], capsys)
    one_line_error(rc, err, "duplicate", "batch_size")


def test_identical_rows_refused(tmp_path, capsys):
    p = tmp_path / "same.csv"
    pd.DataFrame({"batch_size": [4] * 50, "total_tokens": [64] * 50,
                  "duration_ms": [10.0] * 50}).to_csv(p, index=False)
    rc, _, err = run(["fit", p, "-o", tmp_path / "f.json"], capsys)
    one_line_error(rc, err, "every row identical")
    assert not (tmp_path / "f.json").exists()


def test_sub_microsecond_durations_refused(tmp_path, capsys):
    p = small_trace(tmp_path, duration_ms=[1e-300, 2e-300, 3e-300, 1e-299, 5e-300, 2e-300])
    rc, _, err = run(["fit", p, "-o", tmp_path / "f.json"], capsys)
    one_line_error(rc, err, "below 1 microsecond", "duration_ms")


def test_degenerate_trace_fitted_with_explicit_option(tmp_path, capsys):
    """--allow-degenerate turns the refusal into a fit (which then warns)."""
    p = tmp_path / "same.csv"
    rng = np.random.default_rng(0)
    pd.DataFrame({"batch_size": [4] * 50, "total_tokens": [64] * 50,
                  "duration_ms": 10.0 + rng.normal(0, 0.1, 50)}).to_csv(p, index=False)
    rc, _, err = run(["fit", p, "-o", tmp_path / "f.json", "--starts", "1"], capsys)
    one_line_error(rc, err, "single (B, S)")
    rc, _, err = run(["fit", p, "-o", tmp_path / "f.json", "--starts", "1",
                      "--allow-degenerate", "--model", "seed_id"], capsys)
    assert rc == 0, err


def test_compare_refuses_a_trace_too_small(tmp_path, capsys):
    p = small_trace(tmp_path)
    pd.read_csv(p).head(2).to_csv(p, index=False)
    rc, _, err = run(["compare", p, "-o", tmp_path / "c.csv", "--models", "seed_id",
                      "--baselines", "poly3", "--starts", "1"], capsys)
    one_line_error(rc, err, "steps")


def test_compare_marks_models_with_too_few_training_steps_not_fitted():
    """A model with more parameters than training steps is "not fitted", never "ok"."""
    from perfmodel.stats.compare import compare

    rng = np.random.default_rng(1)
    B = rng.integers(1, 64, 18)
    S = B + rng.integers(0, 2000, 18)
    df = pd.DataFrame({"batch_size": B, "total_tokens": S,
                       "duration_ms": 5 + 0.01 * S + 0.1 * B + rng.normal(0, 0.05, 18)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = compare(df, models="", baselines="poly3,linear", k=2, cv="grouped", n_starts=1)
    st = dict(zip(t["name"], t["status"]))
    assert st["poly3"].startswith("not fitted"), st
    assert st["linear"] == "ok", st


def test_zst_trace_names_the_missing_package(tmp_path, capsys):
    p = tmp_path / "t.csv.zst"
    p.write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 32)
    rc, _, err = run(["fit", p, "-o", tmp_path / "f.json"], capsys)
    assert rc == 2
    assert "parquet" not in err.lower(), err


def test_negative_random_state_names_the_option(trace, tmp_path, capsys):
    rc, _, err = run(["fit", trace, "-o", tmp_path / "f.json", "--random-state", "-1"], capsys)
    one_line_error(rc, err, "--random-state")


def test_non_utf8_bootstrap_samples_names_the_file(fit_json, tmp_path, capsys):
    p = tmp_path / "samples.csv"
    p.write_bytes(b"\xff\xfe\x00bad\xff\n\x80\x81\n")
    rc, _, err = run(["sla", fit_json, "--target-ms", "50", "--batch-size", "8",
                      "--quantile", "0.9", "--method", "bootstrap",
                      "--bootstrap-samples", p], capsys)
    one_line_error(rc, err, "--bootstrap-samples", "samples.csv")


@pytest.mark.parametrize("content", ["B,S,T\n1,1,nan\n2,9,6\n", "B,S,T\n1,1,-1e308\n2,9,6\n",
                                     "B,S,T\n1,1e400,5\n2,9,6\n"])
def test_no_numpy_warning_before_an_error(content, tmp_path, capsys):
    p = tmp_path / "w.csv"
    p.write_text(content)
    rc, _, err = run(["fit", p, "-o", tmp_path / "f.json"], capsys)
    one_line_error(rc, err)


@pytest.mark.parametrize("content,word", [
    ("B,S\n1,1\n", "duration_ms"),              # holds: a missing column is named
    ("B,S,T\n0,1,5\n2,9,6\n", "B < 1"),          # holds: impossible step
    ("B,S,T\n1,1,5\n2,x,6\n", "non-numeric"),    # holds: text in a number column
])
def test_classic_bad_content_still_one_line(content, word, tmp_path, capsys):
    p = tmp_path / "c.csv"
    p.write_text(content)
    rc, _, err = run(["fit", p, "-o", tmp_path / "f.json"], capsys)
    one_line_error(rc, err, word)


def test_binary_garbage_trace_one_line(tmp_path, capsys):
    """Holds: random bytes under a .csv name give one line."""
    p = tmp_path / "g.csv"
    p.write_bytes(bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8)))
    rc, _, err = run(["fit", p, "-o", tmp_path / "f.json"], capsys)
    one_line_error(rc, err)


# ---------------------------------------------------------------------------
# library entry points
# ---------------------------------------------------------------------------

def _feats(n=40, seed=0):
    rng = np.random.default_rng(seed)
    B = rng.integers(1, 64, n).astype(float)
    S = B + rng.integers(0, 2000, n)
    y = 5 + 0.01 * S + 0.1 * B
    return {"B": B, "S": S}, y


def _trace_df(n=40):
    f, y = _feats(n)
    return pd.DataFrame({"batch_size": f["B"].astype(int), "total_tokens": f["S"].astype(int),
                         "duration_ms": y})


def _bad_call(case):
    from perfmodel.core.fit import fit_model

    f, y = _feats()
    df = _trace_df()
    if case == "nan_feature":
        f["B"][3] = np.nan
        return lambda: fit_model(f, "seed_id", y=y, n_starts=1), "B"
    if case == "negative_feature":
        f["S"][3] = -5
        return lambda: fit_model(f, "seed_id", y=y, n_starts=1), "S"
    if case == "string_seed":
        return lambda: fit_model(df, "seed_id", seed="abc", n_starts=1), "seed"
    if case == "outlier_window_text":
        return lambda: fit_model(df, "seed_id", outlier_window="ab", n_starts=1), "outlier_window"
    if case == "outlier_window_short":
        return lambda: fit_model(df, "seed_id", outlier_window=(1,), n_starts=1), "outlier_window"
    if case == "tol":
        return lambda: fit_model(df, "seed_id", tol=-1, n_starts=1), "tol"
    if case == "x_scale":
        return lambda: fit_model(df, "seed_id", x_scale="bogus", n_starts=1), "x_scale"
    if case == "multistart_subsample":
        return (lambda: fit_model(df, "seed_id", multistart_subsample=0, n_starts=1),
                "multistart_subsample")
    if case == "string_y":
        return lambda: fit_model(f, "seed_id", y="fast", n_starts=1), "y"
    if case == "zero_weights":
        return lambda: fit_model(df, "seed_id", weights=np.zeros(40), n_starts=1), "weights"
    if case == "tukey_c":
        return lambda: fit_model(df, "seed_id", loss="tukey", tukey_c=0, n_starts=1), "tukey_c"
    if case == "complex_column":
        bad = df.assign(duration_ms=df["duration_ms"] + 1j)
        return lambda: fit_model(bad, "seed_id", n_starts=1), "duration_ms"
    if case == "datetime_column":
        bad = df.assign(batch_size=pd.to_datetime(df["batch_size"], unit="s"))
        return lambda: fit_model(bad, "seed_id", n_starts=1), "batch_size"
    raise AssertionError(case)


@pytest.mark.parametrize("case", [
    "nan_feature", "negative_feature", "string_seed", "outlier_window_text",
    "outlier_window_short", "tol", "x_scale", "multistart_subsample", "string_y",
    "zero_weights", "tukey_c", "complex_column", "datetime_column"])
def test_fit_model_bad_arguments_raise_input_error(case):
    call, name = _bad_call(case)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(InputError) as e:
            call()
    assert name in str(e.value), str(e.value)


# ---------------------------------------------------------------------------
# FIT.json
# ---------------------------------------------------------------------------

def _set_param(d, name, value):
    d["values"][d["param_names"].index(name)] = value


@pytest.mark.parametrize("case,edit,words", [
    ("negative", lambda d: _set_param(d, "tau_S", -1.0), ["tau_S", "bound"]),
    ("k_zero", lambda d: _set_param(d, "k_B", 0.0), ["k_B", "bound"]),
    ("k_huge", lambda d: _set_param(d, "k_S", 1e308), ["k_S", "bound"]),
    ("short_values", lambda d: d.update(values=d["values"][:3]), ["values", "3"]),
    ("small_cov", lambda d: d.update(cov=[[1.0]]), ["cov"]),
    ("missing_optimizer", lambda d: d.pop("optimizer"), ["optimizer", "missing"]),
    ("null_options", lambda d: d.update(options=None), ["options"]),
    ("unknown_version", lambda d: d.update(format_version=99), ["format_version", "99"]),
    ("string_value", lambda d: _set_param(d, "tau_0", "fast"), ["values"]),
    ("bad_calibration", lambda d: d.update(interval_calibration=[1, 2]),
     ["interval_calibration"]),
])
def test_bad_fit_json_refused(case, edit, words, fit_json, trace, tmp_path, capsys):
    f = edited_fit(fit_json, tmp_path, edit)
    for args in (["report", f], ["predict", f, trace, "-o", tmp_path / "p.csv", "--json"],
                 ["sla", f, "--target-ms", "50", "--batch-size", "8"]):
        rc, _, err = run(args, capsys)
        one_line_error(rc, err, *words)
    assert not (tmp_path / "p.csv").exists()


def test_fit_json_has_a_format_version(fit_json):
    from perfmodel.core.results import FIT_FORMAT_VERSION

    assert json.loads(fit_json.read_text())["format_version"] == FIT_FORMAT_VERSION


def test_fit_json_without_version_loads_as_version_1(fit_json, tmp_path, capsys):
    """Files written before FIT.json was versioned load after the same checks."""
    f = edited_fit(fit_json, tmp_path, lambda d: d.pop("format_version", None))
    rc, _, err = run(["report", f], capsys)
    assert rc == 0, err


def test_fit_json_with_interval_calibration_loads(fit_json, tmp_path, capsys):
    """An ``interval_calibration`` dict is accepted (its contents are checked where used)."""
    f = edited_fit(fit_json, tmp_path, lambda d: d.update(interval_calibration={"q": 0.9}))
    rc, _, err = run(["report", f], capsys)
    assert rc == 0, err


def test_fit_json_not_json_one_line(tmp_path, capsys):
    """Holds: a FIT.json that is not JSON gives one line."""
    f = tmp_path / "f.json"
    f.write_text("{not json")
    rc, _, err = run(["report", f], capsys)
    one_line_error(rc, err, "JSON")
