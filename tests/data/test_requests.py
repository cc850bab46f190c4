"""Request-file loaders: hand-written files of each format, the published runs, bad input."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from perfmodel.data.requests import load_run_dir, load_workload
from perfmodel.errors import InputError

RUNS = Path(os.environ.get("PERFMODEL_DATA_MIRROR", "/nonexistent")) / "llmservingsim" / "bench" / "examples"


def _jsonl(tmp_path, rows):
    p = tmp_path / "requests.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return p


def test_jsonl_measured_definitions(tmp_path):
    p = _jsonl(tmp_path, [
        {"request_id": "a", "input_toks": 10, "output_toks": 5, "arrival_time": 100.5,
         "queued_ts": 7.0, "first_token_ts": 7.25, "last_token_ts": 8.25},
        {"request_id": "b", "input_toks": 3, "output_toks": 1, "arrival_time": 101.0,
         "queued_ts": 7.5, "first_token_ts": 7.75, "last_token_ts": 7.75},
    ])
    df = load_workload(p)
    assert df["prompt_tokens"].tolist() == [10, 3]
    assert df["arrival_s"].tolist() == [0.0, 0.5]
    assert df["ttft_ms"].tolist() == [250.0, 250.0]
    assert df["latency_ms"].tolist() == [1250.0, 250.0]
    assert df.loc[0, "tpot_ms"] == 250.0          # (8.25 - 7.25) / (5 - 1) s
    assert np.isnan(df.loc[1, "tpot_ms"])         # one output token: undefined
    assert df.attrs["source"] == "requests.jsonl"


def test_jsonl_without_timestamps_has_no_measured_columns(tmp_path):
    p = _jsonl(tmp_path, [{"input_toks": 4, "output_toks": 2, "arrival_time": 3.0}])
    df = load_workload(p)
    assert "ttft_ms" not in df and df["arrival_s"].tolist() == [0.0]


def test_bench_result(tmp_path):
    d = {"input_lens": [100, 200, 50], "output_lens": [11, 3, 0],
         "ttfts": [0.1, 0.2, 0.0], "itls": [[0.01] * 10, [0.05, 0.05], []],
         "start_times": [1000.0, 1000.5, 1001.0], "errors": ["", "", "boom"]}
    p = tmp_path / "bench.json"
    p.write_text(json.dumps(d))
    df = load_workload(p)
    assert len(df) == 2 and df.attrs["dropped"] == 1
    assert df["arrival_s"].tolist() == [0.0, 0.5]
    np.testing.assert_allclose(df["latency_ms"], [200.0, 300.0])   # ttft + sum(itls)
    np.testing.assert_allclose(df["tpot_ms"], [10.0, 50.0])
    d["latencies"] = [0.3, 0.4, 0.0]
    p.write_text(json.dumps(d))
    np.testing.assert_allclose(load_workload(p)["latency_ms"], [300.0, 400.0])


def test_csv_roundtrip(tmp_path):
    p = tmp_path / "w.csv"
    p.write_text("prompt_tokens,output_tokens,arrival_s,extra\n5,2,10.0,x\n6,3,12.5,y\n")
    df = load_workload(p)
    assert list(df.columns) == ["prompt_tokens", "output_tokens", "arrival_s"]
    assert df["arrival_s"].tolist() == [0.0, 2.5]


@pytest.mark.parametrize("content,suffix,match", [
    ('{"input_toks": 0, "output_toks": 2, "arrival_time": 1}\n', ".jsonl", "integers >= 1"),
    ('{"input_toks": 3, "arrival_time": 1}\n', ".jsonl", "missing fields"),
    ("not json\n", ".jsonl", "not JSON"),
    ('{"input_lens": [1]}', ".json", "start_times"),
    ("a,b\n1,2\n", ".csv", "missing columns"),
    ("x", ".txt", "unknown format"),
])
def test_bad_files(tmp_path, content, suffix, match):
    p = tmp_path / f"f{suffix}"
    p.write_text(content)
    with pytest.raises(InputError, match=match):
        load_workload(p)


def test_missing_file_and_folder(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_workload(tmp_path / "none.jsonl")
    with pytest.raises(InputError, match="does not exist"):
        load_run_dir(tmp_path / "none")
    (tmp_path / "run").mkdir()
    with pytest.raises(InputError, match="missing vllm"):
        load_run_dir(tmp_path / "run")


@pytest.mark.skipif(not RUNS.is_dir(), reason="LLMServingSim runs not in PERFMODEL_DATA_MIRROR")
@pytest.mark.parametrize("run", ["RTX4090/Llama-3.1-8B", "RTXPRO6000/Llama-3.1-8B",
                                 "RTXPRO6000/Qwen3-30B-A3B-Instruct-2507"])
def test_published_runs_match_their_summary(run):
    settings, df = load_run_dir(RUNS / run)
    assert len(df) == 300 and settings["max_num_batched_tokens"] == 2048
    # the means printed in the run's own validation/summary.txt (column vLLM)
    text = (RUNS / run / "validation" / "summary.txt").read_text().splitlines()
    means = {ln.split()[0]: float(ln.split()[2]) for ln in text if " Mean " in ln}
    assert round(df["ttft_ms"].mean(), 1) == means["TTFT"]
    assert round(df["tpot_ms"].mean(), 1) == means["TPOT"]
    assert round(df["latency_ms"].mean(), 1) == means["Latency"]
    if run.startswith("RTX4090"):
        assert settings["num_gpu_blocks"] == 2588
    if "Qwen" in run:
        assert settings["data_parallel_size"] == 2 and settings["num_instances"] == 2
