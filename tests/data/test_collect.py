"""Tests for perfmodel.data.collect: workloads, driver, schedule signature, contention flag,
metadata and CLI. Everything but the last test runs without vLLM, on a fake engine
that schedules like vLLM v1 (running requests first, then waiting ones FCFS, chunked
prefill under a token budget)."""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import shlex

import numpy as np
import pandas as pd
import pytest

from perfmodel.cli.collect import _parse_param, add_collect_parser, run_collect
from perfmodel.data.collect import (
    WORKLOADS,
    drive,
    flag_contended,
    flag_contended_run,
    make_workload,
    output_paths,
    schedule_signature,
)
from perfmodel.data.collect.vllm_collector import (
    TRACE_COLUMNS,
    StepResult,
    StepSched,
    build_metadata,
    closed_loop_summary,
    reproduce_command,
    resolve_model_config,
    write_csv_atomic,
    write_json_atomic,
)
from perfmodel.data.collect.workloads import EngineView
from perfmodel.errors import InputError


class FakeEngine:
    """A deterministic continuous-batching scheduler with vLLM v1's policy, no model."""

    def __init__(self, cap: int, max_num_seqs: int) -> None:
        self.cap, self.max_num_seqs, self.budget = cap, max_num_seqs, cap
        self.running: list[dict] = []
        self.waiting: list[dict] = []
        self.tick = 0.0

    def add(self, spec):
        self.waiting.append({"name": spec.name, "prompt": spec.prompt_len,
                             "max_tokens": spec.max_tokens, "computed": 0, "out": 0})
        return spec.name

    def abort_all(self):
        self.running, self.waiting = [], []

    def counts(self):
        return len(self.running) + len(self.waiting), len(self.waiting)

    def set_token_budget(self, budget):
        self.budget = self.cap if budget is None else min(budget, self.cap)

    def step(self):
        budget, ids, chunks, ctx = self.budget, [], [], []
        for r in self.running:
            if budget <= 0:
                break
            n = min(r["prompt"] + r["out"] - r["computed"], budget)
            if n > 0:
                ids.append(r["name"]), chunks.append(n), ctx.append(r["computed"])
                budget -= n
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            r = self.waiting.pop(0)
            n = min(r["prompt"], budget)
            self.running.append(r)
            ids.append(r["name"]), chunks.append(n), ctx.append(0)
            budget -= n
        outputs = []
        by_name = {r["name"]: r for r in self.running}
        for name, n in zip(ids, chunks):
            r = by_name[name]
            r["computed"] += n
            if r["computed"] >= r["prompt"] + r["out"]:
                r["out"] += 1
                outputs.append((name, r["out"], r["out"] >= r["max_tokens"]))
        done = {n for n, _, f in outputs if f}
        self.running = [r for r in self.running if r["name"] not in done]
        sched = StepSched(tuple(ids), tuple(chunks), tuple(ctx)) if ids else None
        return StepResult(sched, 1.0 + 0.01 * sum(chunks), 0.1, outputs)


def _run(name, seed, steps, **params):
    wl = make_workload(name, seed, steps, **params)
    ov = wl.engine_overrides()
    eng = FakeEngine(ov["max_num_batched_tokens"], ov["max_num_seqs"])
    run = drive(eng, wl, steps)
    return pd.DataFrame(run.rows, columns=TRACE_COLUMNS), run


# -- workloads -----------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_same_seed_same_schedule_different_seed_different(name):
    a, _ = _run(name, 3, 150)
    b, _ = _run(name, 3, 150)
    c, _ = _run(name, 4, 150)
    assert len(a) > 20
    assert schedule_signature(a) == schedule_signature(b)
    if name != "closed_loop":  # fixed lengths: the seed only changes token ids
        assert schedule_signature(a) != schedule_signature(c)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_request_stream_is_deterministic(name):
    def stream(seed):
        wl = make_workload(name, seed, 100)
        out = []
        for k in range(30):
            view = EngineView(k, 0, 0, ())
            out += [(s.name, s.prompt_token_ids[:3], s.max_tokens) for s in wl.next_requests(view)]
        return out
    assert stream(11) == stream(11)
    assert len(stream(11)) > 0


def test_rows_are_consistent_with_schema():
    d, run = _run("mixed", 0, 300)
    chunks = [np.array(s.split(";"), int) for s in d["chunk_sizes"]]
    ctx = [np.array(s.split(";"), int) for s in d["context_lens"]]
    assert all(len(c) == b for c, b in zip(chunks, d["batch_size"]))
    assert all(len(c) == len(x) for c, x in zip(chunks, ctx))
    assert [int(c.sum()) for c in chunks] == d["total_tokens"].tolist()
    assert (d["num_decode"] + d["num_prefill"] == d["batch_size"]).all()
    assert np.allclose(d["duration_ms"], d["forward_ms"] + d["sample_ms"])
    assert (d["total_tokens"] >= d["batch_size"]).all()
    assert run.stopped_by == "steps" and len(d) == 300


def test_mixed_token_budget_varies_and_fills_the_middle():
    d, _ = _run("mixed", 1, 2000, token_cap=512)
    s = d["total_tokens"].to_numpy()
    assert s.max() <= 512
    # octaves [1,2), [2,4), ... [128,256), [256,512]: none empty, none dominant
    share = np.bincount(np.minimum(np.floor(np.log2(s)).astype(int), 8), minlength=9) / len(s)
    assert share.min() > 0.02 and share.max() < 0.25, share
    assert d.groupby(d["step"] // 25)["total_tokens"].max().nunique() > 20  # budget varies


def test_decode_sweep_levels_and_contexts():
    d, run = _run("decode_sweep", 2, 400, levels=[1, 4, 16], prompt_lens=[8, 64])
    dec = d[d["num_prefill"] == 0]
    assert set(dec["batch_size"]) >= {1, 4, 16}
    assert dec["batch_size"].isin([1, 4, 16]).mean() > 0.9  # the rest: staggered prefills
    ctx0 = dec["context_lens"].str.split(";").map(lambda v: int(v[0]))
    assert ctx0.min() >= 8 and ctx0.max() >= 64
    assert run.stopped_by == "workload_done"


def test_prefill_sweep_prior_context_and_multi():
    d, _ = _run("prefill_sweep", 5, 200, token_cap=256, s_min=16, n_points=5)
    assert (d["num_decode"] == 0).all()
    assert d["batch_size"].max() >= 2
    has_ctx = d["context_lens"].str.split(";").map(lambda v: max(map(int, v)) > 0)
    assert has_ctx.any()
    ss = set(d.loc[~has_ctx & (d["batch_size"] == 1), "total_tokens"])
    assert {16, 256} <= ss


def test_fixed_tokens_pins_s_and_varies_b():
    d, _ = _run("fixed_tokens", 7, 600, token_cap=256)
    assert (d["total_tokens"] == 256).mean() > 0.95
    assert d["batch_size"].nunique() > 10


def test_closed_loop_concurrency_and_summary():
    d, run = _run("closed_loop", 0, None, num_requests=10, concurrency=3, prompt_len=8,
                  output_len=5)
    assert d["batch_size"].max() == 3
    summ = closed_loop_summary(run)
    assert summ["num_requests"] == 10 and summ["num_finished"] == 10
    assert summ["output_tokens"] == 50
    assert all(r["first_token_step"] <= r["finish_step"] for r in summ["requests"])
    assert all(r["e2e_ms"] >= r["ttft_ms"] >= 0 for r in summ["requests"])


def test_workload_rejects_bad_parameters():
    with pytest.raises(InputError, match="no parameter"):
        make_workload("mixed", 0, 10, nonsense=1)
    with pytest.raises(InputError, match="prompt_min"):
        make_workload("mixed", 0, 10, prompt_min=10, prompt_max=5)
    with pytest.raises(InputError, match="steps"):
        make_workload("mixed", 0, None)
    with pytest.raises(InputError, match="workload"):
        make_workload("nope", 0, 10)


# -- schedule signature ------------------------------------------------------------------
def test_schedule_signature_ignores_timings_and_sees_schedule():
    df = pd.DataFrame({"step": [0, 1, 2], "batch_size": [1, 2, 2],
                       "chunk_sizes": ["5", "1;4", "1;1"], "context_lens": ["0", "5;0", "6;4"],
                       "duration_ms": [3.0, 4.0, 5.0]})
    sig = schedule_signature(df)
    t = df.assign(duration_ms=[9.0, 9.0, 9.0])
    assert schedule_signature(t) == sig
    assert schedule_signature(df.iloc[::-1]) == sig  # ordered by step
    assert schedule_signature(df.assign(context_lens=["0", "5;0", "6;5"])) != sig
    assert schedule_signature(df.assign(chunk_sizes=["5", "4;1", "1;1"])) != sig
    with pytest.raises(InputError, match="context_lens"):
        schedule_signature(df.drop(columns="context_lens"))


# -- contention flag -----------------------------------------------------------------------
def test_flag_contended_rules():
    df = pd.DataFrame({"step_ms": [100.0] * 6, "duration_ms": [90.0] * 6,
                       "cpu_ms": [200.0, 120.0, 195.0, 198.0, np.nan, 199.0],
                       "involuntary_switches": [10, 10, 50, 10, 10, 12],
                       "loadavg": [1.0, 1.0, 1.0, 3.0, 1.0, 1.0]})
    out = flag_contended(df, threads=2, cores=2)
    # row 1: CPU share 1.2 < 0.8*2; row 2: 500 switches/s > 3 x median 100/s; row 3: load
    assert out["contended"].tolist() == [False, True, True, True, False, False]
    assert "contended" not in df.columns  # the input is not rewritten
    absolute = flag_contended(df, threads=2, cores=2, switch_rate_max=50.0)
    assert absolute["contended"].tolist() == [True, True, True, True, True, True]
    ref = flag_contended(df[["step_ms", "cpu_ms"]], cores=2)  # reference from the trace
    assert ref["contended"].tolist() == [False, True, False, False, False, False]
    with pytest.raises(InputError, match="cpu_ms"):
        flag_contended(df.drop(columns="cpu_ms"))
    with pytest.raises(InputError, match="step_ms"):
        flag_contended(df.assign(step_ms=[1.0, -1.0, 1.0, 1.0, 1.0, 1.0]))
    with pytest.raises(InputError, match="threads"):
        flag_contended(df, threads=0)


def test_flag_contended_run_uses_the_runs_threads_and_cores_not_this_machines():
    df = pd.DataFrame({"step_ms": [100.0] * 4, "cpu_ms": [400.0, 390.0, 250.0, 400.0],
                       "loadavg": [3.0, 3.0, 3.0, 5.0]})
    # collected with 4 threads on 4 cores: row 2 (CPU share 2.5 < 0.8 x 4) and row 3 (load 5 >
    # 4 + 0.5) are contended, whatever machine reads the trace
    meta = {"threads": {"torch_num_threads": 4, "cpu_count": 4}}
    assert flag_contended_run(df, meta)["contended"].tolist() == [False, False, True, True]
    assert flag_contended_run(df, meta)["contended"].tolist() == \
        flag_contended(df, threads=4, cores=4)["contended"].tolist()
    # the same steps read as a 2-core run: every load of 3 or more is contention
    two = {"threads": {"torch_num_threads": 4, "cpu_count": 2}}
    assert flag_contended_run(df, two)["contended"].all()
    # no metadata: flag_contended's own defaults
    assert flag_contended_run(df, None)["contended"].tolist() == \
        flag_contended(df)["contended"].tolist()
    with pytest.raises(InputError, match="metadata"):
        flag_contended_run(df, "meta.json")


# -- files, metadata, CLI ------------------------------------------------------------------
def test_output_paths_and_atomic_writers(tmp_path):
    paths = output_paths(tmp_path / "x" / "closed_loop-r1.csv", "closed_loop", 50)
    assert {p.name for p in paths.values()} == {
        "closed_loop-r1.csv", "closed_loop-r1.meta.json", "closed_loop-r1.summary.json",
        "closed_loop-r1.calib-pre.csv", "closed_loop-r1.calib-pre.meta.json",
        "closed_loop-r1.calib-post.csv", "closed_loop-r1.calib-post.meta.json"}
    assert set(output_paths(tmp_path / "m.csv", "mixed")) == {"trace", "meta"}
    with pytest.raises(InputError, match=".csv"):
        output_paths(tmp_path / "m.parquet", "mixed")
    df = pd.DataFrame({"a": [1, 2]})
    digest = write_csv_atomic(df, paths["trace"])
    assert digest == hashlib.sha256(paths["trace"].read_bytes()).hexdigest()
    write_json_atomic({"k": np.int64(3)}, paths["meta"])
    assert json.loads(paths["meta"].read_text()) == {"k": 3}
    assert not list(paths["trace"].parent.glob("*.tmp"))


def test_metadata_records_provenance(tmp_path):
    d, run = _run("mixed", 9, 50)
    path = tmp_path / "t.csv"
    digest = write_csv_atomic(d, path)
    name, cfg_path, cfg = resolve_model_config("llama-tiny")
    wl = make_workload("mixed", 9, 50)
    meta = build_metadata(trace_path=path, sha256=digest, df=d, run=run, workload=wl,
                          model_name=name, model_config=cfg, model_config_path=cfg_path,
                          engine_args={"dtype": "float32"}, extra={"role": "main"})
    json.dumps(meta, default=str)
    assert meta["rows"] == 50 and meta["seed"] == 9 and meta["sha256"] == digest
    assert meta["schedule_signature"] == schedule_signature(d)
    assert meta["workload"]["name"] == "mixed" and meta["workload"]["params"]["token_cap"] == 512
    assert meta["model"]["config"]["vocab_size"] == 32000
    assert meta["versions"]["python"] and meta["cpu"]["logical_cpus"] >= 1
    assert meta["start_time"] <= meta["end_time"] and meta["role"] == "main"


@pytest.mark.parametrize("name", ["llama-tiny", "llama-small", "llama-mid"])
def test_shipped_model_configs(name):
    _, _, cfg = resolve_model_config(name)
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["vocab_size"] == 32000
    assert cfg["hidden_size"] == cfg["num_attention_heads"] * cfg["head_dim"]
    with pytest.raises(InputError, match="shipped"):
        resolve_model_config("no-such-model")


def _parse(argv):
    parser = argparse.ArgumentParser(prog="perfmodel")
    add_collect_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def test_cli_refuses_to_overwrite(tmp_path, capsys):
    out = tmp_path / "mixed.csv"
    out.write_text("existing\n")
    args = _parse(["collect", "vllm", "--model-config", "llama-tiny", "--workload", "mixed",
                   "--steps", "5", "--random-state", "1", "-o", str(out)])
    assert args.func is run_collect and args.seed == 1
    assert run_collect(args) == 2
    assert "refusing to overwrite" in capsys.readouterr().err
    assert out.read_text() == "existing\n"
    # a sibling output (the metadata) blocks too
    out2 = tmp_path / "d.csv"
    (tmp_path / "d.meta.json").write_text("{}")
    args = _parse(["collect", "vllm", "--model-config", "llama-tiny", "--workload",
                   "decode_sweep", "--steps", "5", "-o", str(out2)])
    assert run_collect(args) == 2 and not out2.exists()


def test_reproduce_command_parses_back():
    cmd = reproduce_command("llama-small", "fixed_tokens", 1000, 4, "data/x/f.csv",
                            warmup_steps=32, token_cap=256, output_max_levels=[4, 16])
    argv = shlex.split(cmd)
    assert argv[:3] == ["perfmodel", "collect", "vllm"]
    assert "--random-state" in argv and "--seed" not in argv
    args = _parse(argv[1:])
    assert (args.model_config, args.workload, args.steps, args.seed, args.output,
            args.warmup_steps, args.enforce_eager) == (
        "llama-small", "fixed_tokens", 1000, 4, "data/x/f.csv", 32, False)
    params = dict(_parse_param(kv) for kv in args.param)
    assert params == {"token_cap": 256, "output_max_levels": [4, 16]}


def test_stored_commands_with_the_deprecated_seed_option_still_parse(capsys):
    """Metadata in data/ records commands with --seed (now --random-state): they still run."""
    from pathlib import Path

    meta_path = (Path(__file__).resolve().parents[2] / "data" / "vllm-cpu" / "llama-small"
                 / "mixed-r1.meta.json")
    meta = json.loads(meta_path.read_text())
    argv = shlex.split(meta["command"])
    assert "--seed" in argv
    args = _parse(argv[1:])
    assert args.seed == meta["seed"] == 1 and args.workload == "mixed"
    assert "--seed is deprecated, use --random-state" in capsys.readouterr().err


def test_cli_rejects_bad_arguments(tmp_path, capsys):
    base = ["collect", "vllm", "--model-config", "llama-tiny", "-o", str(tmp_path / "a.csv")]
    assert run_collect(_parse(base + ["--workload", "mixed"])) == 2  # no --steps
    assert "steps" in capsys.readouterr().err
    assert run_collect(_parse(base + ["--workload", "mixed", "--steps", "5",
                                      "--param", "bogus=1"])) == 2
    assert "bogus" in capsys.readouterr().err
    assert run_collect(_parse(base + ["--workload", "mixed", "--steps", "5",
                                      "--calibration-steps", "10"])) == 2
    assert "closed_loop" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def _fake_collect(model_config, workload, steps, seed, out, *, calibration_steps=0, **kw):
    """collect_vllm without an engine: writes what a run writes, with known row counts."""
    paths = output_paths(out, workload, calibration_steps)
    for role, p in paths.items():
        if p.suffix == ".csv":
            n = 12 if role == "trace" else 4
            write_csv_atomic(pd.DataFrame({"step": range(n)}), p)
            meta = paths["meta"] if role == "trace" else paths[f"{role}_meta"]
            write_json_atomic({"rows": n, "seed": seed}, meta)
    if "summary" in paths:
        write_json_atomic({"num_finished": 4}, paths["summary"])
    return paths


@pytest.mark.parametrize("where", ["after", "before"])
@pytest.mark.parametrize("workload", ["mixed", "closed_loop"])
def test_cli_collect_json_prints_the_final_summary(tmp_path, capsys, monkeypatch, where,
                                                    workload):
    from perfmodel.cli.main import main
    from perfmodel.data.collect import vllm_collector

    monkeypatch.setattr(vllm_collector, "collect_vllm", _fake_collect)
    out = tmp_path / "run.csv"
    args = ["vllm", "--model-config", "llama-tiny", "--workload", workload, "--steps", "12",
            "--random-state", "3", "-o", str(out)]
    if workload == "closed_loop":
        args += ["--calibration-steps", "4"]
    argv = ["collect", *args, "--json"] if where == "after" else ["collect", "--json", *args]
    assert main(argv) == 0
    cap = capsys.readouterr()
    obj = json.loads(cap.out)
    assert cap.err == ""
    assert obj["engine"] == "vllm" and obj["workload"] == workload
    assert obj["random_state"] == 3 and obj["steps"] == 12
    assert obj["written"]["trace"] == str(out) and obj["rows"]["trace"] == 12
    if workload == "closed_loop":
        assert obj["rows"] == {"trace": 12, "calib_pre": 4, "calib_post": 4}
        assert obj["closed_loop"] == {"num_finished": 4}
    # the text form says the same
    assert main(["collect", *args, "--force"]) == 0
    text = capsys.readouterr().out
    assert f"trace: {out} (12 rows)" in text and f"meta: {tmp_path / 'run.meta.json'}" in text


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None,
                    reason="needs an environment without vLLM")
@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_cli_collect_without_vllm_is_one_error_line(tmp_path, capsys, monkeypatch, json_flag):
    from perfmodel.cli.main import main
    from perfmodel.data.collect import vllm_collector

    # keep this process's environment (TMPDIR, OMP_NUM_THREADS ...) as it is
    monkeypatch.setattr(vllm_collector, "_prepare_environment", lambda cache_dir: None)
    argv = ["collect", "vllm", "--model-config", "llama-tiny", "--workload", "mixed", "--steps",
            "5", "-o", str(tmp_path / "m.csv"), "--cache-dir", str(tmp_path / "cache"),
            *json_flag]
    assert main(argv) == 2
    cap = capsys.readouterr()
    assert cap.out == ""
    assert len(cap.err.strip().splitlines()) == 1
    assert cap.err.startswith("perfmodel: error: vLLM is not importable")
    assert not (tmp_path / "m.csv").exists()

# -- real engine ---------------------------------------------------------------------------
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                    reason="vLLM is not installed (optional 'collect' extra; see README.md, Data)")
@pytest.mark.slow
def test_vllm_closed_loop_with_calibration(tmp_path):
    """One real engine: calibration before and after must have the same schedule."""
    from perfmodel.data.collect import collect_vllm
    paths = collect_vllm("llama-tiny", "closed_loop", None, 3, tmp_path / "cl.csv",
                         calibration_steps=12, cache_dir=tmp_path / "cache", enforce_eager=True,
                         num_requests=4, concurrency=2, prompt_len=8, output_len=5)
    d = pd.read_csv(paths["trace"])
    assert d["batch_size"].max() == 2 and (d["duration_ms"] > 0).all()
    assert (d["step_ms"] >= d["duration_ms"]).all()
    summ = json.loads(paths["summary"].read_text())
    assert summ["num_finished"] == 4 and summ["output_tokens"] == 20
    pre = json.loads(paths["calib_pre_meta"].read_text())
    post = json.loads(paths["calib_post_meta"].read_text())
    assert pre["rows"] == post["rows"] == 12
    assert pre["schedule_signature"] == post["schedule_signature"]
    meta = json.loads(paths["meta"].read_text())
    assert meta["sha256"] == hashlib.sha256(paths["trace"].read_bytes()).hexdigest()
