"""The perfmodel command: success paths and bad input (exit 2, one line, nothing lost)."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfmodel.cli.main import main

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "data" / "example" / "example_trace.csv"


def test_fit_writes_json_and_report(tmp_path, run):
    out = tmp_path / "f.json"
    rc, stdout, err = run(["fit", EXAMPLE, "-o", out, "--model", "seed"])
    assert rc == 0, err
    assert "[[Variables]]" in stdout and "not identifiable" in stdout
    d = json.loads(out.read_text())
    assert d["model"] == "seed" and d["fitted_model"] == "seed_id"
    assert len(d["provenance"]["trace_sha256"]) == 64
    rc, stdout, _ = run(["report", out])
    assert rc == 0 and "[[Fit Statistics]]" in stdout


def test_fit_json_output_is_machine_readable(tmp_path, run):
    rc, stdout, _ = run(["fit", EXAMPLE, "-o", tmp_path / "f.json", "--json", "--loss", "huber"])
    assert rc == 0
    d = json.loads(stdout)
    assert d["options"]["loss"] == "huber" and d["statistics"]["n"] == 2000


def test_predict_keeps_every_column_and_adds_prediction(fit_json, tmp_path, run):
    out = tmp_path / "pred.csv"
    rc, _, err = run(["predict", fit_json, EXAMPLE, "-o", out])
    assert rc == 0, err
    src, got = pd.read_csv(EXAMPLE), pd.read_csv(out)
    assert list(got.columns) == list(src.columns) + ["predicted_ms"]
    assert np.all(got["predicted_ms"] > 0)


def test_predict_works_without_measured_times(fit_json, tmp_path, run):
    t = tmp_path / "plan.csv"
    pd.DataFrame({"batch_size": [1, 8, 32], "total_tokens": [1, 512, 2048]}).to_csv(t, index=False)
    rc, _, err = run(["predict", fit_json, t, "-o", tmp_path / "o.csv"])
    assert rc == 0, err


def test_sla_json_is_self_consistent(fit_json, run):
    rc, stdout, _ = run(["sla", fit_json, "--batch-size", 8, "--target-ms", 40, "--json"])
    assert rc == 0
    d = json.loads(stdout)
    assert d["batch_size"] == 8 and d["target_ms"] == 40
    assert d["max_total_tokens"] is not None and d["predicted_ms"] <= 40


def test_sla_infeasible_target_says_so(fit_json, run):
    rc, stdout, _ = run(["sla", fit_json, "--batch-size", 8, "--target-ms", 0.5, "--json"])
    assert rc == 0
    assert json.loads(stdout)["max_total_tokens"] is None



@pytest.mark.parametrize("target", [40, 0.5])  # feasible and infeasible
def test_sla_text_and_json_state_the_same_search_start(fit_json, run, target):
    """rising_from is the model's (below B here); the search starts at max(B, rising_from)."""
    argv = ["sla", fit_json, "--batch-size", 16, "--target-ms", target]
    rc, text, _ = run(argv)
    assert rc == 0
    rc, stdout, _ = run([*argv, "--json"])
    assert rc == 0
    d = json.loads(stdout)
    assert d["rising_from"] < 16, "the case of the bug: the model rises from below B"
    assert d["search_from"] == max(16, d["rising_from"]) == 16
    stated = f"search from S={d['search_from']} = max(B=16, rising_from={d['rising_from']})"
    assert stated in text and stated in d["reason"]
    assert "rising branch from S=16" not in text


def test_sla_frontier_and_max_batch_report_search_from(fit_json, run):
    rc, stdout, _ = run(["sla", fit_json, "--frontier", "--batch-sizes", "1,16,64",
                         "--target-ms", 40, "--json"])
    assert rc == 0
    rows = json.loads(stdout)["rows"]
    assert [r["search_from"] for r in rows] == [max(b, r["rising_from"])
                                               for b, r in zip((1, 16, 64), rows)]
    rc, stdout, _ = run(["sla", fit_json, "--total-tokens", 256, "--target-ms", 20, "--json"])
    assert rc == 0
    d = json.loads(stdout)
    assert d["search_from"] == d["rising_from"]
    assert f"search from B={d['search_from']} = rising_from" in d["reason"]

def test_diagnose_prints_the_residual_table(fit_json, run):
    rc, stdout, err = run(["diagnose", fit_json, EXAMPLE, "--json"])
    assert rc == 0, err
    names = " ".join(t["test"] for t in json.loads(stdout)["tests"]).lower()
    assert "shapiro" in names and "breusch" in names and "durbin" in names


@pytest.mark.parametrize("flag,scale", [(["--relative", "weight"], "weight"),
                                        (["--absolute"], "absolute"), ([], "log")])
def test_diagnose_tests_residuals_on_the_fit_scale(flag, scale, tmp_path, capsys, run):
    from perfmodel.core.results import FitResult
    from perfmodel.core.scale import SCALES
    from perfmodel.data.trace import read_trace, step_features
    from perfmodel.stats.diagnostics import residual_table

    f = tmp_path / "f.json"
    assert main(["fit", str(EXAMPLE), "-o", str(f), "--model", "seed_id", "--starts", "2",
                 *flag]) == 0
    capsys.readouterr()
    rc, stdout, err = run(["diagnose", f, EXAMPLE, "--json"])
    assert rc == 0, err
    d = json.loads(stdout)
    assert d["residual_scale"] == scale and d["residual"] == SCALES[scale].residual_text
    # the residuals tested are the fit's own: (T - T_hat)/T for a weight fit
    df = read_trace(EXAMPLE)  # already in time order
    e = SCALES[scale].residual(df["duration_ms"].to_numpy(float),
                               FitResult.from_json(f).predict(df))
    feats = step_features(df)
    ref = residual_table(e, feats["B"], feats["S"], order=np.arange(len(e)))
    assert [t["statistic"] for t in d["tests"]] == pytest.approx(
        ref["statistic"].tolist(), rel=1e-9, nan_ok=True)
    rc, text, _ = run(["diagnose", f, EXAMPLE])
    assert f"on the fit's scale, {scale}" in text


@pytest.mark.parametrize("content,needle", [
    ("batch_size,total_tokens\n1,2\n", "duration_ms"),
    ("batch_size,total_tokens,duration_ms\n1,2,abc\n", "duration_ms"),
    ("batch_size,total_tokens,duration_ms\n4,2,3.0\n", "total_tokens"),
    ("batch_size,total_tokens,duration_ms\n", "empty"),
])
def test_bad_trace_exits_2_with_one_line(tmp_path, run, content, needle):
    bad = tmp_path / "bad.csv"
    bad.write_text(content)
    out = tmp_path / "fit.json"
    rc, _stdout, err = run(["fit", bad, "-o", out])
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith("perfmodel: error:")
    assert needle in err
    assert "Traceback" not in err and not out.exists()


def test_existing_output_is_never_overwritten_without_force(fit_json, tmp_path, run):
    out = tmp_path / "keep.csv"
    out.write_text("precious\n")
    rc, _, err = run(["predict", fit_json, EXAMPLE, "-o", out])
    assert rc == 2 and "--force" in err and out.read_text() == "precious\n"
    rc, _, _ = run(["predict", fit_json, EXAMPLE, "-o", out, "--force"])
    assert rc == 0 and "predicted_ms" in out.read_text()


def test_a_failing_fit_leaves_an_existing_output_intact(tmp_path, run):
    out = tmp_path / "fit.json"
    out.write_text("old")
    bad = tmp_path / "bad.csv"
    bad.write_text("batch_size,total_tokens,duration_ms\n1,1,-5\n")
    rc, _, _ = run(["fit", bad, "-o", out, "--force"])
    assert rc == 2 and out.read_text() == "old"


@pytest.mark.parametrize("args,needle", [
    (["fit"], "required"),
    (["fit", "x.csv", "-o", "y.json", "--model", "nope"], "invalid choice"),
    (["report", "/nonexistent/fit.json"], "does not exist"),
    (["sla", "/nonexistent/fit.json", "--batch-size", "1", "--target-ms", "1"], "does not exist"),
])
def test_usage_errors_exit_2(run, args, needle):
    rc, _, err = run(args)
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_sla_bad_arguments_exit_2(fit_json, run):
    rc, _, err = run(["sla", fit_json, "--batch-size", 0, "--target-ms", 10])
    assert rc == 2 and "batch" in err.lower()
    rc, _, err = run(["sla", fit_json, "--batch-size", 4, "--target-ms", -1])
    assert rc == 2 and "target" in err.lower()


def test_module_entry_point_runs():
    r = subprocess.run([sys.executable, "-m", "perfmodel", "--version"], capture_output=True,
                       text=True, check=False)
    assert r.returncode == 0 and "perfmodel" in r.stdout


def _help(argv, capsys) -> str:
    """The --help text of a sub-command (argparse exits 0 after printing it)."""
    with pytest.raises(SystemExit) as e:
        main([*argv, "--help"])
    assert e.value.code == 0
    return " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("command", ["sla", "simulate"])
def test_help_names_the_real_output_option_of_fit(command, capsys):
    text = _help([command], capsys)
    assert "fit --out" not in text
    assert "perfmodel fit -o/--output" in text
    # the option named there exists
    fit_help = _help(["fit"], capsys)
    assert "-o OUTPUT, --output OUTPUT" in fit_help and "--out " not in fit_help


def test_parser_has_every_sub_command_in_order_with_its_shared_options(capsys):
    """build_parser assembles one small function per group; the parser is the same whole."""
    from perfmodel.cli.main import _MODULE_COMMANDS, build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    module_names = [c[0] for c in _MODULE_COMMANDS]
    assert list(sub.choices) == ["fit", "report", "predict", "diagnose", *module_names, "collect"]
    top = _help([], capsys)
    for name, text, shared, *_ in _MODULE_COMMANDS:
        h = _help([name], capsys)
        assert h.startswith(f"usage: perfmodel {name} "), name
        assert f"{name} {text}" in top, name
        assert "--json " in h, name
        assert ("-o OUTPUT, --output OUTPUT" in h) == bool(shared.get("out")), name
        if shared.get("fit_arg"):
            assert "FIT.json" in h, name
    for name in ("fit", "predict"):
        assert "-o OUTPUT, --output OUTPUT" in _help([name], capsys)
    assert "--relative" in _help(["fit"], capsys) and "--ci-method" in _help(["fit"], capsys)
    assert "--interval-method" in _help(["predict"], capsys)



# -- --random-state (was --seed, which also named the model --model seed) --------------------
RANDOM_STATE_COMMANDS = [["fit"], ["compare"], ["simulate"], ["factors"], ["collect", "vllm"],
                         ["capacity"], ["tune"]]


@pytest.mark.parametrize("command", RANDOM_STATE_COMMANDS, ids=" ".join)
def test_help_offers_random_state_and_hides_seed(command, capsys):
    text = _help(command, capsys)
    assert "--random-state N" in text and "random seed of" in text
    assert "--seed" not in text


def test_no_subcommand_shows_seed_in_help(capsys):
    from perfmodel.cli.main import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for name in sub.choices:
        assert "--seed" not in _help([name], capsys), name


def test_random_state_and_deprecated_seed_set_the_same_seed(tmp_path, run):
    fit = tmp_path / "f.json"
    rc, stdout, err = run(["fit", EXAMPLE, "-o", fit, "--model", "seed_id", "--starts", 2,
                           "--random-state", 5, "--json"])
    assert rc == 0 and err == ""
    assert json.loads(stdout)["options"]["seed"] == 5
    rc, stdout, err = run(["fit", EXAMPLE, "-o", fit, "--force", "--model", "seed_id",
                           "--starts", 2, "--seed", 5, "--json"])
    assert rc == 0 and json.loads(stdout)["options"]["seed"] == 5
    assert err.strip() == "perfmodel: warning: --seed is deprecated, use --random-state"
    base = ["simulate", fit, "--num-requests", 20, "--rate", 5, "--prompt-tokens", 32,
            "--output-tokens", 8, "--json"]
    outs = {}
    for opt in ("--random-state", "--seed"):
        rc, stdout, _ = run([*base, opt, 3])
        assert rc == 0
        outs[opt] = json.loads(stdout)
    assert outs["--random-state"] == outs["--seed"]
    rc, stdout, _ = run([*base, "--random-state", 4])
    assert rc == 0 and json.loads(stdout)["makespan_s"] != outs["--seed"]["makespan_s"]


def test_random_state_must_be_an_integer(tmp_path, run):
    rc, _, err = run(["fit", EXAMPLE, "-o", tmp_path / "f.json", "--random-state", "x"])
    assert rc == 2 and "--random-state: must be an integer >= 0" in err
    assert len(err.strip().splitlines()) == 1


def test_auto_model_is_the_registry_default(capsys):
    import pandas as pd

    from perfmodel.cli.main import resolve_model
    from perfmodel.core.model import RECOMMENDED

    bs = pd.DataFrame({"batch_size": [1], "total_tokens": [3]})
    assert resolve_model("auto", bs) == RECOMMENDED["no_context"] == "seed_id"
    ctx = bs.assign(chunk_sizes=["3"], context_lens=["0"])
    assert resolve_model("auto", ctx) == RECOMMENDED["context"] == "seed_ctx_mono"
    assert resolve_model("seed_gamma", ctx) == "seed_gamma"
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert ("default: auto = seed_ctx_mono when the trace has chunk_sizes and context_lens, "
            "else seed_id") in text


def test_an_output_that_is_not_a_regular_file_is_refused_before_fitting(tmp_path, run):
    real = tmp_path / "real.json"
    real.write_text("keep\n")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    rc, _, err = run(["fit", EXAMPLE, "-o", link, "--force", "--model", "seed_id"])
    assert rc == 2 and "is a symbolic link, not a regular file" in err
    assert real.read_text() == "keep\n" and link.is_symlink()


def test_predict_interval_adds_bounds_and_names_its_method(fit_json, tmp_path, run):
    out = tmp_path / "pred.csv"
    rc, _, err = run(["predict", fit_json, EXAMPLE, "-o", out, "--interval", "0.9"])
    assert rc == 0, err
    got = pd.read_csv(out)
    assert list(got.columns[-4:]) == ["predicted_ms", "lower_ms", "upper_ms", "interval_regime"]
    assert np.all(got["lower_ms"] <= got["predicted_ms"])
    assert np.all(got["predicted_ms"] <= got["upper_ms"])
    assert "interval 0.9: conformal" in err  # perfmodel fit stores a calibration by default
    # each step's calibration regime: the one rule of interval_regimes on the fit's thresholds
    from perfmodel.core.results import FitResult
    from perfmodel.data.trace import read_trace
    from perfmodel.stats.intervals import interval_regimes

    fit = FitResult.from_json(Path(fit_json))
    src = read_trace(EXAMPLE)
    phase, length = interval_regimes(
        src, fit.predict(src), fit.interval_calibration["regime_rule"]["length_thresholds_ms"])
    assert got["interval_regime"].tolist() == [f"{a}|{b}" for a, b in zip(phase, length)]
    assert got["interval_regime"].nunique() > 1
    assert "interval_calibration" in json.loads(Path(fit_json).read_text())


def test_predict_online_interval_is_the_package_online_interval(fit_json, tmp_path, run):
    from perfmodel.core.results import FitResult
    from perfmodel.data.trace import read_trace
    from perfmodel.stats.interval_online import online_interval

    out = tmp_path / "online.csv"
    rc, stdout, err = run(["predict", fit_json, EXAMPLE, "-o", out, "--interval", "0.9",
                           "--interval-method", "online", "--json"])
    assert rc == 0, err
    got = pd.read_csv(out)
    want = online_interval(FitResult.from_json(Path(fit_json)), read_trace(EXAMPLE), 0.9)
    assert np.allclose(got["lower_ms"], want.lower, rtol=1e-12)
    assert np.allclose(got["upper_ms"], want.upper, rtol=1e-12)
    obj = json.loads(stdout)["interval"]
    assert obj["method"] == "online" and "BEFORE it" in obj["description"]
    assert "check" in obj  # the trace has measured times: its coverage is tallied
    # without measured times there is nothing to learn from: one line, exit 2, no file
    bare = tmp_path / "bare.csv"
    read_trace(EXAMPLE).drop(columns="duration_ms").to_csv(bare, index=False)
    rc, _, err = run(["predict", fit_json, bare, "-o", tmp_path / "no.csv", "--interval",
                      "0.9", "--interval-method", "online"])
    assert rc == 2 and "measured" in err and not (tmp_path / "no.csv").exists()
    # the method without a level, or with a run-level term it would not use: refused
    rc, _, err = run(["predict", fit_json, EXAMPLE, "-o", tmp_path / "no.csv",
                      "--interval-method", "online"])
    assert rc == 2 and "give --interval LEVEL" in err and len(err.strip().splitlines()) == 1
    rc, _, err = run(["predict", fit_json, EXAMPLE, "-o", tmp_path / "no.csv", "--interval",
                      "0.9", "--interval-method", "online", "--run-sd", "0.05"])
    assert rc == 2 and "not to --interval-method online" in err
    assert not (tmp_path / "no.csv").exists()


def test_predict_check_sets_the_other_calibrated_interval_beside_it(fit_json, tmp_path, run):
    """On measured steps, the check of the stored interval is followed by the online
    interval's coverage of the same steps and vice versa; the tallies are the package's."""
    from perfmodel.core.results import FitResult
    from perfmodel.core.synthetic import simulate_trace
    from perfmodel.data.trace import read_trace
    from perfmodel.stats.interval_coverage import interval_check
    from perfmodel.stats.interval_online import online_interval
    from perfmodel.stats.intervals import conformal_interval

    other = tmp_path / "other.csv"
    simulate_trace("seed_id", n=400, noise="multiplicative", seed=11).to_csv(other, index=False)
    fit, df = FitResult.from_json(Path(fit_json)), read_trace(other)
    mu = fit.predict(df)
    for method, make, said in (("conformal", online_interval, "the online interval"),
                               ("online", conformal_interval, "the stored conformal interval")):
        rc, stdout, err = run(["predict", fit_json, other, "-o", tmp_path / f"{method}.csv",
                               "--interval", "0.9", "--interval-method", method, "--json"])
        assert rc == 0, err
        got = json.loads(stdout)["interval"]["check_other"]
        want = interval_check(df, mu, make(fit, df, 0.9))
        assert got["method"] == make(fit, df, 0.9).method != method
        assert np.allclose(pd.DataFrame(got["regimes"])["coverage"], want["coverage"])
        rc, stdout, _ = run(["predict", fit_json, other, "-o", tmp_path / f"{method}.csv",
                             "--interval", "0.9", "--interval-method", method, "--force"])
        last = stdout.strip().splitlines()[-1]
        share = want.loc[want["regime"] == "all", "coverage"].item()
        assert last.startswith(f"for comparison, {said}") and f"all steps {share:.3f}" in last
    # the default (auto: the stored interval) gets the comparison too, held out and labelled so
    rc, stdout, err = run(["predict", fit_json, other, "-o", tmp_path / "auto.csv", "--interval",
                           "0.9", "--json"])
    obj = json.loads(stdout)["interval"]
    assert rc == 0 and obj["method"] == "conformal" and obj["check_other"]["method"] == "online"
    assert obj["check_other"]["in_sample"] is False and obj["check_other"]["tolerance"] == 0.03
    # on the fit's own trace both tallies say IN SAMPLE
    rc, stdout, err = run(["predict", fit_json, EXAMPLE, "-o", tmp_path / "own.csv", "--interval",
                           "0.9"])
    assert rc == 0 and stdout.strip().splitlines()[-1].startswith(
        "for comparison, the online interval") and "(IN SAMPLE)" in stdout.splitlines()[-1]
    # beside the model band, or a stored interval with a run-level term (given here or stored
    # by fit --run-sd): no comparison
    termed = tmp_path / "termed.json"
    assert run(["fit", EXAMPLE, "-o", termed, "--model", "seed_id", "--starts", "2",
                "--run-sd", "0.05"])[0] == 0
    for fit_, extra in ((fit_json, ["--interval-method", "model"]), (fit_json, ["--run-sd", "0.05"]),
                        (termed, [])):
        rc, stdout, err = run(["predict", fit_, other, "-o", tmp_path / "x.csv", "--force",
                               "--interval", "0.9", "--json", *extra])
        assert rc == 0, err
        assert "check" in json.loads(stdout)["interval"]
        assert "check_other" not in json.loads(stdout)["interval"]
    # a comparison that cannot be made (two runs' step counters in one trace: the online
    # interval refuses them) is a note on stderr; the predictions and the first check stand
    two = pd.concat([df, df], ignore_index=True)
    two["step"] = np.r_[np.arange(len(df)), np.arange(len(df))]
    two.to_csv(tmp_path / "two.csv", index=False)
    rc, stdout, err = run(["predict", fit_json, tmp_path / "two.csv", "-o", tmp_path / "two_p.csv",
                           "--interval", "0.9", "--json"])
    assert rc == 0 and (tmp_path / "two_p.csv").exists()
    assert "no comparison with the online interval" in err and "'step' repeats" in err
    obj = json.loads(stdout)["interval"]
    assert "check" in obj and "check_other" not in obj


def test_predict_interval_checks_coverage_where_the_trace_has_measured_times(fit_json,
                                                                            tmp_path, run):
    from perfmodel.core.results import FitResult
    from perfmodel.core.synthetic import simulate_trace
    from perfmodel.data.trace import read_trace
    from perfmodel.stats.interval_coverage import interval_check
    from perfmodel.stats.intervals import prediction_interval

    # the fit's own trace: the tally is stated as in-sample, in words and in the JSON
    rc, stdout, err = run(["predict", fit_json, EXAMPLE, "-o", tmp_path / "own.csv",
                           "--interval", "0.9", "--json"])
    assert rc == 0, err
    assert json.loads(stdout)["interval"]["check"]["in_sample"] is True
    rc, stdout, err = run(["predict", fit_json, EXAMPLE, "-o", tmp_path / "own2.csv",
                           "--interval", "0.9"])
    assert "coverage of the 0.9 interval" in stdout and "IN SAMPLE" in stdout
    assert "regime x level cells within 0.03:" in stdout and "p(within)" in stdout
    # steps the fit never saw (another simulated trace): the tally of interval_check
    other = tmp_path / "other.csv"
    simulate_trace("seed_id", n=400, noise="multiplicative", seed=11).to_csv(other, index=False)
    rc, stdout, err = run(["predict", fit_json, other, "-o", tmp_path / "o.csv", "--interval",
                           "0.9", "--json"])
    assert rc == 0, err
    check = json.loads(stdout)["interval"]["check"]
    assert check["in_sample"] is False and check["tolerance"] == 0.03
    fit, df = FitResult.from_json(Path(fit_json)), read_trace(other)
    want = interval_check(df, fit.predict(df), prediction_interval(fit, df, 0.9))
    got = pd.DataFrame(check["regimes"])
    assert got["regime"].tolist() == want["regime"].tolist()
    assert np.allclose(got["coverage"], want["coverage"]) and got["n"].tolist() == want["n"].tolist()
    assert np.allclose(got["p_within"], want["p_within"])
    assert got.loc[got["regime"] == "all", "n"].item() == len(df) == 400
    # no measured times: predictions only, no tally
    bare = tmp_path / "bare.csv"
    pd.read_csv(EXAMPLE).drop(columns="duration_ms").to_csv(bare, index=False)
    rc, stdout, err = run(["predict", fit_json, bare, "-o", tmp_path / "b.csv", "--interval",
                           "0.9", "--json"])
    assert rc == 0, err
    assert "check" not in json.loads(stdout)["interval"]


def test_predict_skips_the_online_comparison_above_its_step_cap(fit_json, tmp_path, run,
                                                                monkeypatch):
    import perfmodel.cli.main as cli_main

    monkeypatch.setattr(cli_main, "OTHER_CHECK_MAX_STEPS", 10)
    rc, stdout, err = run(["predict", fit_json, EXAMPLE, "-o", tmp_path / "p.csv", "--interval",
                           "0.9", "--json"])
    assert rc == 0 and "no comparison with the online interval" in err and "more than 10" in err
    assert "check_other" not in json.loads(stdout)["interval"]
    # the cap is on the online interval's loop: beside the online interval the stored one stays
    rc, stdout, err = run(["predict", fit_json, EXAMPLE, "-o", tmp_path / "q.csv", "--interval",
                           "0.9", "--interval-method", "online", "--json"])
    assert rc == 0 and json.loads(stdout)["interval"]["check_other"]["method"] == "conformal"


def test_predict_check_knows_each_run_of_a_multi_run_fit(tmp_path, run):
    from perfmodel.core.synthetic import simulate_trace

    runs = []
    for i in (1, 2):
        p = tmp_path / f"run{i}.csv"
        simulate_trace("seed_id", n=300, noise="multiplicative", seed=20 + i).to_csv(p, index=False)
        runs.append(p)
    fit = tmp_path / "f.json"
    assert run(["fit", *runs, "-o", fit, "--model", "seed_id", "--starts", "2"])[0] == 0
    assert isinstance(json.loads(fit.read_text())["provenance"]["trace_sha256"], list)
    rc, stdout, err = run(["predict", fit, runs[1], "-o", tmp_path / "p.csv", "--interval",
                           "0.9", "--json"])
    assert rc == 0, err
    assert json.loads(stdout)["interval"]["check"]["in_sample"] is True


def test_predict_writes_its_predictions_when_the_check_cannot_be_made(fit_json, tmp_path, run):
    # a config column with gaps: no clusters for the design effect, so no check; the
    # predictions are still the command's result
    d = pd.read_csv(EXAMPLE)
    d["config"] = ["c1", None] * (len(d) // 2)
    src = tmp_path / "gaps.csv"
    d.to_csv(src, index=False)
    out = tmp_path / "p.csv"
    rc, stdout, err = run(["predict", fit_json, src, "-o", out, "--interval", "0.9", "--json"])
    assert rc == 0, err
    assert "no coverage check of the interval" in err and "config" in err
    assert "check" not in json.loads(stdout)["interval"] and len(pd.read_csv(out)) == len(d)


def test_predict_interval_without_calibration_states_the_model_band(tmp_path, run):
    fit = tmp_path / "f.json"
    assert run(["fit", EXAMPLE, "-o", fit, "--model", "seed_id", "--intervals", "none"])[0] == 0
    assert "interval_calibration" not in json.loads(fit.read_text())
    rc, stdout, err = run(["predict", fit, EXAMPLE, "-o", tmp_path / "p.csv", "--interval",
                           "0.8", "--json"])
    assert rc == 0, err
    assert json.loads(stdout)["interval"]["method"] == "model"
    assert "interval 0.8: model" in err
    rc, _, err = run(["predict", fit, EXAMPLE, "-o", tmp_path / "q.csv", "--interval", "0.8",
                      "--interval-method", "conformal"])
    assert rc == 2 and "interval_calibration" in err and not (tmp_path / "q.csv").exists()


@pytest.mark.parametrize("level,needle", [("1.5", "level"), ("0", "level"), ("abc", "invalid"),
                                          ("0.905", "not calibrated")])
def test_predict_bad_interval_exits_2_with_one_line(fit_json, tmp_path, run, level, needle):
    out = tmp_path / "p.csv"
    rc, _, err = run(["predict", fit_json, EXAMPLE, "-o", out, "--interval", level])
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


# -- request-level decisions: capacity, tune; sla's workload context ----------------------
CTX_TRACE = REPO / "data" / "vllm-cpu" / "llama-small" / "mixed-r1.csv"


@pytest.fixture(scope="module")
def ctx_fit_json(tmp_path_factory):
    if not CTX_TRACE.exists():
        pytest.skip(f"{CTX_TRACE} is not in this checkout")
    p = tmp_path_factory.mktemp("ctxfit") / "fit.json"
    assert main(["fit", str(CTX_TRACE), "-o", str(p), "--starts", "2", "--json"]) == 0
    return p


CAP = ["--slo", "ttft_p99=1000,tpot_p99=50", "--prompt-tokens", "uniform:64,192",
       "--output-tokens", "uniform:32,96", "--num-requests", "60", "--max-num-seqs", "32",
       "--max-num-batched-tokens", "768"]


def test_capacity_json_keys_and_interval(ctx_fit_json, run):
    rc, stdout, err = run(["capacity", ctx_fit_json, *CAP, "--replications", "3", "--rel-tol",
                           "0.05", "--json"])
    assert rc == 0, err
    d = json.loads(stdout)
    assert {"max_rate", "interval", "slo", "attainment_curve", "assumptions"} <= set(d)
    assert d["interval"]["lower"] <= d["interval"]["upper"] and len(d["interval"]["values"]) == 3
    vals = sorted(d["interval"]["values"])      # 3 replications: ranks 0-1 and 2-2 (clipped)
    assert d["interval"]["lower_mc_range"] == vals[:2]
    assert d["interval"]["upper_mc_range"] == [vals[2], vals[2]]
    assert d["slo"]["ttft_ms"] == 1000 and d["slo"]["attainment"] == 0.99
    assert d["assumptions"]["model"] == "seed_ctx_mono"
    assert d["assumptions"]["engine"]["max_num_batched_tokens"] == 768
    assert d["assumptions"]["workload"]["num_requests"] == 60
    assert d["assumptions"]["run_level"].startswith("none")
    rc, stdout, err = run(["capacity", ctx_fit_json, *CAP, "--replications", "3", "--rel-tol",
                           "0.05", "--run-sd", "0.05", "--json"])
    assert rc == 0, err
    assert "N(0, 0.05^2)" in json.loads(stdout)["interval"]["sources"]["run_level"]
    assert "not resampled" in json.loads(stdout)["interval"]["sources"]["requests"]
    rc, stdout, err = run(["capacity", ctx_fit_json, *CAP, "--replications", "3", "--rel-tol",
                           "0.05"])
    assert rc == 0, err
    assert "over 3 replications; another 3 could move its ends within" in stdout
    rc, stdout, err = run(["capacity", ctx_fit_json, *CAP, "--replications", "2", "--rel-tol",
                           "0.05", "--resample-requests", "--json"])
    assert rc == 0, err
    assert "with replacement" in json.loads(stdout)["interval"]["sources"]["requests"]
    # the sd estimated from other runs' step logs (two vLLM-CPU traces of the same model)
    others = [str(CTX_TRACE.with_name(n)) for n in ("mixed-r2.csv", "mixed-r3.csv")]
    rc, stdout, err = run(["capacity", ctx_fit_json, *CAP, "--replications", "2", "--rel-tol",
                           "0.05", "--run-traces", *others, "--json"])
    assert rc == 0, err
    est = json.loads(stdout)["assumptions"]["run_level_estimate"]
    assert est["n_runs"] == 2 and 0 < est["sd"] < 0.5 and set(est["ratios"]) == set(others)
    rc, stdout, err = run(["capacity", ctx_fit_json, *CAP, "--mode", "concurrency",
                           "--replications", "0"])
    assert rc == 0, err
    assert stdout.startswith("max concurrency: ") and "attainment" in stdout


def test_tune_text_names_the_recommendation(ctx_fit_json, run):
    rc, stdout, err = run(["tune", ctx_fit_json, *CAP, "--seqs-grid", "8,32", "--tokens-grid",
                           "768", "--objective", "goodput", "--load", "4", "--replications", "2"])
    assert rc == 0, err
    assert stdout.startswith("recommended: --max-num-seqs ") and "gain" in stdout


@pytest.mark.parametrize("argv, message", [
    (["--slo", "ttft_p99=500"], "missing workload"),
    (["--slo", "ttft_p99=500", "--prompt-tokens", "128"], "missing workload"),
    (["--slo", "speed=5", "--prompt-tokens", "8", "--output-tokens", "8"], "METRIC"),
    (["--slo", "ttft=5", "--prompt-tokens", "normal:8", "--output-tokens", "8"],
     "--prompt-tokens"),
    (["--slo", "ttft=5", "--workload", "/nonexistent.json"], "does not exist"),
    (["--slo", "ttft=5", "--prompt-tokens", "8", "--output-tokens", "8", "--max-num-seqs", "0"],
     "max_num_seqs"),
    (["--slo", "ttft=5", "--prompt-tokens", "8", "--output-tokens", "8", "--run-sd", "-1"],
     "run_sd"),
    (["--slo", "ttft=5", "--prompt-tokens", "8", "--output-tokens", "8", "--run-traces",
      str(CTX_TRACE.with_name("mixed-r2.csv"))], ">= 2 runs"),
    (["--slo", "ttft=5", "--prompt-tokens", "8", "--output-tokens", "8", "--run-sd", "0.1",
      "--run-traces", str(CTX_TRACE), str(CTX_TRACE)], "not allowed with"),
    (["--slo", "ttft=5", "--prompt-tokens", "8", "--output-tokens", "8", "--run-traces",
      str(CTX_TRACE), str(CTX_TRACE.with_name("mixed-r2.csv"))], "fit's own trace"),
    (["--slo", "ttft=5", "--prompt-tokens", "8", "--output-tokens", "8", "--scheduler",
      "tcp://h:8786"], "only used by backend 'dask'"),
])
def test_capacity_bad_input_exits_2(ctx_fit_json, run, argv, message):
    rc, _, err = run(["capacity", ctx_fit_json, *argv, "--replications", "0"])
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_sla_with_a_context_aware_fit_needs_the_context(ctx_fit_json, run):
    rc, _, err = run(["sla", ctx_fit_json, "--batch-size", 8, "--target-ms", 120])
    assert rc == 2 and "--context-tokens" in err and "--workload" in err
    rc, stdout, err = run(["sla", ctx_fit_json, "--batch-size", 8, "--target-ms", 120,
                           "--context-tokens", 0, "--json"])
    assert rc == 0, err
    d0 = json.loads(stdout)
    rc, stdout, _ = run(["sla", ctx_fit_json, "--batch-size", 8, "--target-ms", 120,
                         "--context-tokens", 1000, "--json"])
    d1 = json.loads(stdout)
    a = d1["assumed_context"]
    assert a["context_tokens"] == 1000 and a["model"] == "seed_ctx_mono" and a["context_aware"]
    # more cached context per request makes each step slower: fewer tokens fit the target
    assert d1["max_total_tokens"] < d0["max_total_tokens"]


def test_sla_recommend_is_labelled_a_diagnostic(fit_json, run):
    rc, stdout, err = run(["sla", fit_json, "--recommend", "--target-ms", 40])
    assert rc == 0, err
    assert stdout.startswith("diagnostic only") and "perfmodel tune" in stdout
    assert "assumed context: the model has no context terms" in stdout


def _bench_file(tmp_path, n=40):
    rng = np.random.default_rng(0)
    d = {"input_lens": rng.integers(64, 192, n).tolist(),
         "output_lens": rng.integers(32, 96, n).tolist(),
         "start_times": np.sort(rng.uniform(100.0, 110.0, n)).tolist()}
    p = tmp_path / "bench.json"
    p.write_text(json.dumps(d))
    return p, d


def test_capacity_and_sla_read_a_bench_result_file(ctx_fit_json, tmp_path, run):
    p, d = _bench_file(tmp_path)
    rc, stdout, err = run(["capacity", ctx_fit_json, "--slo", "ttft_p99=1000,tpot_p99=50",
                           "--workload", p, "--num-requests", 80, "--replications", 0,
                           "--rel-tol", 0.05, "--json"])
    assert rc == 0, err
    w = json.loads(stdout)["assumptions"]["workload"]
    assert w["kind"] == "file" and w["num_requests"] == 80
    assert w["resampled"]["from_requests"] == 40
    lo, hi = min(d["input_lens"]), max(d["input_lens"])
    assert lo <= w["prompt_tokens_range"][0] <= w["prompt_tokens_range"][1] <= hi
    # the file's own requests and recorded arrivals (start times 100-110 s, recorded at 4 req/s)
    rc, stdout, err = run(["capacity", ctx_fit_json, "--slo", "ttft_p99=1000,tpot_p99=50",
                           "--workload", p, "--recorded-arrivals", 4, "--replications", 0,
                           "--rel-tol", 0.05, "--json"])
    assert rc == 0, err
    assert "given schedule" in json.loads(stdout)["assumptions"]["arrivals"]
    base = ["capacity", ctx_fit_json, "--slo", "ttft_p99=1000", "--workload", p,
            "--replications", 0]
    for extra, message in ((["--recorded-arrivals", 4, "--num-requests", 80], "no --num-requests"),
                           (["--recorded-arrivals", 0], "positive request rate")):
        rc, _, err = run([*base, *extra])
        assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, err
    rc, stdout, err = run(["sla", ctx_fit_json, "--batch-size", 8, "--target-ms", 120,
                           "--workload", p, "--json"])
    assert rc == 0, err
    a = json.loads(stdout)["assumed_context"]
    want = np.mean(d["input_lens"]) + np.mean(d["output_lens"]) / 2
    assert a["context_tokens"] == pytest.approx(want) and "--workload" in a["source"]


# ---------------------------------------------------------------------------
# convert (Parquet for large traces) and the parallel backend options
# ---------------------------------------------------------------------------

def test_convert_writes_parquet_that_fits_like_the_csv(tmp_path, run):
    pytest.importorskip("pyarrow", reason="convert needs pyarrow (perfmodel[parquet])")
    pq = str(tmp_path / "t.parquet")
    rc, stdout, err = run(["convert", EXAMPLE, "-o", pq, "--json"])
    assert rc == 0, err
    assert json.loads(stdout)["rows"] == len(pd.read_csv(EXAMPLE))
    fits = []
    for src in (EXAMPLE, pq):
        out = str(tmp_path / (Path(src).stem + Path(src).suffix[1:] + ".json"))
        rc, _, err = run(["fit", src, "-o", out, "--model", "seed_id", "--starts", "1"])
        assert rc == 0, err
        fits.append(json.loads(Path(out).read_text())["values"])
    assert fits[0] == fits[1]
    rc, _, err = run(["convert", EXAMPLE, "-o", str(tmp_path / "t.csv")])
    assert rc == 2 and "must end in '.parquet'" in err
    rc, _, err = run(["convert", EXAMPLE, "-o", pq])
    assert rc == 2 and "exists" in err


def test_fit_refuses_a_scheduler_without_the_dask_backend(tmp_path, run):
    out = tmp_path / "f.json"
    rc, _, err = run(["fit", EXAMPLE, "-o", str(out), "--scheduler", "tcp://127.0.0.1:8786"])
    assert rc == 2 and "only used by backend 'dask'" in err and not out.exists()


def _two_runs(tmp_path):
    import pandas as pd

    d = pd.read_csv(EXAMPLE)
    a, b = tmp_path / "run-a.csv", tmp_path / "run-b.csv"
    d.to_csv(a, index=False)
    d.assign(duration_ms=d["duration_ms"] * 1.1).to_csv(b, index=False)  # a run-level shift
    return a, b


def test_fit_of_several_traces_calibrates_across_runs_and_predict_says_so(tmp_path, run):
    a, b = _two_runs(tmp_path)
    fit = tmp_path / "f.json"
    assert run(["fit", a, b, "-o", fit, "--model", "seed_id", "--starts", "1"])[0] == 0
    d = json.loads(fit.read_text())
    assert d["interval_calibration"]["runs"] == {
        "calibration": "across-runs", "column": "run", "n_runs": 2, "labels": ["run-a", "run-b"]}
    assert d["provenance"]["trace"] == [str(a), str(b)]
    rc, stdout, err = run(["predict", fit, a, "-o", tmp_path / "p.csv", "--interval", "0.9",
                           "--json"])
    assert rc == 0 and "calibrated across runs (2 runs" in err
    assert json.loads(stdout)["interval"]["calibration"]["n_runs"] == 2
    # within-run on request: the same traces pooled, no run-to-run shift in the scores; FIT.json
    # and predict still say how many runs were pooled
    assert run(["fit", a, b, "-o", tmp_path / "w.json", "--model", "seed_id", "--starts", "1",
                "--interval-calibration", "within-run"])[0] == 0
    w = json.loads((tmp_path / "w.json").read_text())["interval_calibration"]
    assert w["runs"] == {"calibration": "within-run", "n_runs": 2}
    rc, _, err = run(["predict", tmp_path / "w.json", a, "-o", tmp_path / "pw.csv",
                      "--interval", "0.9"])
    assert rc == 0 and "within the pooled steps of 2 runs" in err


def test_fit_of_one_trace_calibrates_within_the_run(fit_json):
    cal = json.loads(Path(fit_json).read_text())["interval_calibration"]
    assert cal["runs"] == {"calibration": "within-run", "n_runs": 1}


def test_across_run_calibration_refuses_one_run(tmp_path, run):
    import pandas as pd

    a, b = _two_runs(tmp_path)
    one = tmp_path / "one.csv"
    pd.read_csv(EXAMPLE).assign(run="r1").to_csv(one, index=False)
    cases = [([EXAMPLE, "--interval-calibration", "across-runs"], "needs several runs"),
             ([one, "--run-column", "run"], ">= 2 runs"),
             ([EXAMPLE, "--run-column", "nope"], "lacks"),
             ([a, b, "--run-column", "run"], "ONE trace")]
    for i, (args, needle) in enumerate(cases):
        out = tmp_path / f"bad{i}.json"
        rc, _, err = run(["fit", *args, "-o", out, "--model", "seed_id", "--starts", "1"])
        assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1, err
        assert not out.exists()


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_fit_without_intervals_is_fit_model_of_the_trace_bit_for_bit(tmp_path, run, fmt):
    """perfmodel fit frees the frame before the fit: its FIT.json is still fit_model(df)'s."""
    from perfmodel._io import json_safe
    from perfmodel.cli.main import resolve_model
    from perfmodel.core.fit import fit_model
    from perfmodel.data.trace import read_trace

    trace = EXAMPLE
    if fmt == "parquet":
        pytest.importorskip("pyarrow", reason="Parquet needs pyarrow (perfmodel[parquet])")
        trace = tmp_path / "t.parquet"
        assert run(["convert", EXAMPLE, "-o", trace])[0] == 0
    out = tmp_path / "f.json"
    rc, _, err = run(["fit", trace, "-o", out, "--intervals", "none", "--starts", "3"])
    assert rc == 0, err
    got = json.loads(out.read_text())
    df = read_trace(trace, lists="arrow")
    o = got["options"]
    res = fit_model(df, resolve_model("auto", df), loss=o["loss"], relative=o["relative"],
                    n_starts=3, seed=o["seed"], scale=o["scale"])
    want = json.loads(json.dumps(json_safe(res.summary())))
    for d in (got, want):
        for k in ("created", "trace", "trace_sha256"):
            d["provenance"].pop(k, None)
    assert got == want


def test_fit_calibration_on_the_cut_frame_is_the_library_calibration_of_the_whole(tmp_path, run):
    """perfmodel fit calibrates on the fold groups, the fit's features and a frame cut to the
    columns the calibration reads: the same bits as calibrate_intervals on the whole trace."""
    from perfmodel.core.fit import fit_model
    from perfmodel.data.trace import read_trace
    from perfmodel.stats.intervals import calibrate_intervals

    trace = tmp_path / "t.csv"
    d = pd.read_csv(EXAMPLE).iloc[:600]
    d["note"] = "unread"  # a column the calibration does not read
    d.to_csv(trace, index=False)
    out = tmp_path / "f.json"
    rc, _, err = run(["fit", trace, "-o", out, "--model", "seed_ctx_mono", "--starts", "2",
                      "--seed", "3"])
    assert rc == 0, err
    whole = read_trace(trace)
    assert "context_lens" in whole.columns
    fit = fit_model(whole, "seed_ctx_mono", n_starts=2, seed=3)
    want = calibrate_intervals(fit, whole, seed=3, n_starts=2)
    got = json.loads(out.read_text())["interval_calibration"]
    assert json.dumps(got, sort_keys=True) == json.dumps(json.loads(json.dumps(want)),
                                                         sort_keys=True)
