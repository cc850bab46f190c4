"""The vLLM step-log plugin: rows from fake scheduler outputs, buffering, crash safety."""
import importlib.util
import os
import shutil
import subprocess
from types import SimpleNamespace

import pytest

from perfmodel.data.collect import vllm_plugin as vp
from perfmodel.data.trace import read_trace
from perfmodel.errors import InputError


def _so(new, cached, preempted=()):
    """A fake SchedulerOutput: new = [(id, chunk, ctx)], cached = [(id, chunk, ctx)]."""
    nst = {rid: c for rid, c, _ in [*new, *cached]}
    return SimpleNamespace(
        num_scheduled_tokens=nst,
        scheduled_new_reqs=[SimpleNamespace(req_id=r, num_computed_tokens=x) for r, _, x in new],
        scheduled_cached_reqs=SimpleNamespace(req_ids=[r for r, _, _ in cached],
                                              num_computed_tokens=[x for _, _, x in cached]),
        preempted_req_ids=set(preempted), total_num_scheduled_tokens=sum(nst.values()))


TIMES = {"wall_start": 1.7e9, "step_start": 10.0, "sched_start": 10.001, "sched_end": 10.003,
         "exec_start": 10.004, "model_end": 10.024, "update_start": 10.025,
         "update_end": 10.027, "step_end": 10.030, "prev_step_end": 9.995}


def test_step_row_by_hand():
    so = _so(new=[("c", 100, 0)], cached=[("a", 1, 140), ("b", 1, 63)], preempted=["z"])
    row = vp.step_row(7, so, TIMES, prompt_lens={"a": 128, "b": 64, "c": 300}, num_running=3,
                      num_waiting=5, kv_cache_usage=0.25, machine={"cpu_ms": 40.0})
    assert row["batch_size"] == 3 and row["total_tokens"] == 102
    assert row["chunk_sizes"] == "100;1;1" and row["context_lens"] == "0;140;63"
    # b has computed 63 < 64 prompt tokens: its one-token chunk is a prefill
    assert (row["num_decode"], row["num_prefill"]) == (1, 2)
    assert row["duration_ms"] == pytest.approx(20.0)
    assert row["schedule_ms"] == pytest.approx(2.0) and row["update_ms"] == pytest.approx(2.0)
    assert row["step_ms"] == pytest.approx(30.0) and row["gap_ms"] == pytest.approx(5.0)
    assert row["num_preempted"] == 1 and row["num_waiting"] == 5
    assert set(row) == set(vp.COLUMNS)


def test_empty_step_is_no_row_and_first_gap_is_nan():
    assert vp.step_row(0, _so([], []), TIMES, prompt_lens={}, num_running=0, num_waiting=0,
                       kv_cache_usage=0.0) is None
    t = {k: v for k, v in TIMES.items() if k != "prev_step_end"}
    row = vp.step_row(0, _so([("a", 5, 0)], []), t, prompt_lens={}, num_running=1,
                      num_waiting=0, kv_cache_usage=0.0)
    assert row["gap_ms"] != row["gap_ms"]  # NaN


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _row(i):
    return {"step": i, "batch_size": 1, "total_tokens": 1, "duration_ms": 1.5,
            "chunk_sizes": "1", "context_lens": str(i)}


def test_writer_flushes_by_rows_and_seconds(tmp_path):
    clock = Clock()
    p = tmp_path / "log.csv"
    w = vp.StepLogWriter(p, flush_rows=3, flush_s=10.0, clock=clock)
    assert p.read_text().startswith("step,timestamp,")  # header at once
    w.write(_row(0))
    w.write(_row(1))
    assert p.read_text().count("\n") == 1  # buffered
    w.write(_row(2))
    assert p.read_text().count("\n") == 4  # 3 rows flushed
    w.write(_row(3))
    clock.t = 11.0
    w.write(_row(4))  # 11 s since the last flush
    assert p.read_text().count("\n") == 6
    w.write(_row(5))
    w.close()
    w.close()
    df = vp.read_step_log(p)
    assert df["step"].tolist() == list(range(6))
    with pytest.raises(InputError, match="closed"):
        w.write(_row(6))


def test_killed_writer_leaves_a_readable_trace(tmp_path):
    """A process killed with SIGKILL keeps every flushed row; the file is a valid trace."""
    p = tmp_path / "log.csv"
    code = (
        "import os, signal\n"
        "from perfmodel.data.collect.vllm_plugin import StepLogWriter\n"
        f"w = StepLogWriter({str(p)!r}, flush_rows=4, flush_s=1e9)\n"
        "for i in range(10):\n"
        "    w.write({'step': i, 'batch_size': 2, 'total_tokens': 3, 'duration_ms': 2.0 + i,"
        " 'chunk_sizes': '2;1', 'context_lens': '0;7', 'timestamp': 1.7e9 + i,"
        " 'num_decode': 1, 'num_prefill': 1})\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n")
    r = subprocess.run([os.sys.executable, "-c", code], check=False, capture_output=True)
    assert r.returncode != 0
    df = vp.read_step_log(p)
    assert df["step"].tolist() == list(range(8))  # two full flushes; the last 2 rows lost
    trace = read_trace(p)
    assert len(trace) == 8 and (trace["total_tokens"] == 3).all()


def test_partial_last_line_is_dropped(tmp_path):
    p = tmp_path / "log.csv"
    w = vp.StepLogWriter(p, flush_rows=1)
    w.write(_row(0))
    w.close()
    with open(p, "a") as fh:
        fh.write("1,,,1,1,")
    df = vp.read_step_log(p)
    assert len(df) == 1 and df.attrs["dropped_partial_line"]


def test_writer_refuses_bad_input(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text("old run\n")
    with pytest.raises(InputError, match="exists"):
        vp.StepLogWriter(p)
    with pytest.raises(InputError, match="flush_rows"):
        vp.StepLogWriter(tmp_path / "y.csv", flush_rows=0)
    with pytest.raises(InputError, match="folder"):
        vp.StepLogWriter(tmp_path / "no" / "y.csv")
    with pytest.raises(InputError, match="does not exist"):
        vp.read_step_log(tmp_path / "none.csv")


class FakeScheduler:
    def __init__(self):
        self.requests = {"a": SimpleNamespace(num_prompt_tokens=4)}
        self.calls = 0

    def schedule(self, *args):
        self.calls += 1
        if self.calls == 2:
            return _so([], [])  # nothing scheduled: no row
        return _so([("a", 4, 0)], []) if self.calls == 1 else _so([], [("a", 1, 4)])

    def update_from_output(self, so, out):
        return {"outputs": out}

    def get_request_counts(self):
        return (1, 2)

    def get_kv_cache_usage(self):
        return 0.5


class FakeExecutor:
    def execute_model(self, so, non_block=True):
        return SimpleNamespace(result=lambda: None)

    def sample_tokens(self, grammar):
        return "tokens"


class FakeCore:
    """The call pattern of ``EngineCore.step`` (vLLM 0.32)."""

    def __init__(self):
        self.scheduler, self.model_executor = FakeScheduler(), FakeExecutor()

    def step(self):
        so = self.scheduler.schedule(False)
        fut = self.model_executor.execute_model(so, non_block=True)
        out = fut.result()
        if out is None:
            out = self.model_executor.sample_tokens(None)
        return self.scheduler.update_from_output(so, out), True


def test_engine_hook_logs_each_step_with_a_fake_core(tmp_path):
    p = tmp_path / "log.csv"
    writers = []

    def factory():
        writers.append(vp.StepLogWriter(p, flush_rows=100))
        return writers[-1]

    FakeCore.step = vp.engine_step_hook(FakeCore.step, factory)
    core = FakeCore()
    outs = [core.step() for _ in range(3)]
    assert outs[0] == ({"outputs": "tokens"}, True)  # the step's result is passed through
    writers[0].close()
    assert len(writers) == 1
    df = vp.read_step_log(p)
    assert df["step"].tolist() == [0, 2]  # step 1 scheduled nothing
    assert df["num_decode"].tolist() == [0, 1] and df["num_prefill"].tolist() == [1, 0]
    assert df["context_lens"].tolist() == ["0", "4"]
    assert (df["duration_ms"] >= 0).all() and (df["step_ms"] >= df["duration_ms"]).all()
    assert df["num_waiting"].tolist() == [2, 2] and df["kv_cache_usage"].tolist() == [0.5, 0.5]
    assert df["gap_ms"].isna().tolist() == [True, False]
    assert df["log_ms"].isna().tolist() == [True, False] and df["log_ms"].iloc[1] >= 0


def test_register_without_the_variable_does_nothing(monkeypatch):
    monkeypatch.delenv(vp.ENV_VAR, raising=False)
    vp.register()  # returns before importing vllm


def test_entry_point_is_declared():
    import tomllib
    from pathlib import Path

    cfg = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    eps = cfg["project"]["entry-points"]["vllm.general_plugins"]
    assert eps == {"perfmodel_step_log": "perfmodel.data.collect.vllm_plugin:register"}
    assert "vllm" in cfg["project"]["optional-dependencies"]


VLLM = os.environ.get("PERFMODEL_VLLM_PYTHON", "/work/venv-vllm/bin/python")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None and not shutil.which(VLLM),
                    reason="vLLM is not installed (extra perfmodel[vllm]); set "
                           "PERFMODEL_VLLM_PYTHON to a Python that has it")
def test_register_patches_vllm_engine_core():
    """With vLLM importable, register() replaces EngineCore.step once."""
    code = ("import os; os.environ['PERFMODEL_STEP_LOG'] = '/dev/null'\n"
            "from perfmodel.data.collect.vllm_plugin import register\n"
            "register(); register()\n"
            "from vllm.v1.engine.core import EngineCore\n"
            "assert EngineCore.step.__perfmodel_step_log__\n")
    py = os.sys.executable if importlib.util.find_spec("vllm") else VLLM
    root = str(__import__("pathlib").Path(__file__).resolve().parents[2])
    r = subprocess.run([py, "-c", code], check=False, capture_output=True, text=True,
                       timeout=300, env={**os.environ, "PYTHONPATH": root}, cwd=root)
    assert r.returncode == 0, r.stderr[-2000:]
