"""Tests of perfmodel._parallel: map_tasks on loky and Dask, per-task seeds, laziness."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from perfmodel._parallel import BACKENDS, check_backend, map_tasks, task_seed, task_seeds
from perfmodel.errors import InputError


def _draw(item):
    i, ss = item
    return i, np.random.default_rng(ss).standard_normal(3)


def test_task_seed_is_the_spawned_child_without_spawning_the_others():
    kids = np.random.SeedSequence(11).spawn(5)
    for i, kid in enumerate(kids):
        assert task_seed(11, i).generate_state(4).tolist() == kid.generate_state(4).tolist()
    # a billion tasks: the seeds are a generator, nothing allocated up front
    gen = task_seeds(11, 10**12)
    first = list(itertools.islice(gen, 3))
    assert [i for i, _ in first] == [0, 1, 2]


def test_map_tasks_keeps_task_order_in_process_and_on_loky():
    tasks = list(task_seeds(3, 40))
    a = map_tasks(_draw, tasks)
    b = map_tasks(_draw, tasks, n_jobs=2, chunk_size=3)
    assert [i for i, _ in a] == list(range(40)) == [i for i, _ in b]
    for (_, x), (_, y) in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


def test_map_tasks_consumes_a_generator_lazily():
    pulled = []

    def gen():
        for i in itertools.count():
            pulled.append(i)
            yield i

    seen = []

    def stop_after_five(t):
        seen.append(len(pulled))
        if t == 5:
            raise StopIteration("enough")  # ends the run early
        return t

    with pytest.raises(StopIteration):
        map_tasks(stop_after_five, gen())
    # in-process, task t is run when exactly t + 1 tasks have been drawn
    assert seen == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("kw, match", [
    ({"backend": "spark"}, "backend must be one of"),
    ({"backend": "loky", "scheduler": "tcp://h:8786"}, "only used by backend 'dask'"),
    ({"backend": "dask", "scheduler": ""}, "scheduler must be an address"),
    ({"n_jobs": 0}, "n_jobs must be a non-zero integer"),
    ({"chunk_size": 0}, "chunk_size must be an integer >= 1"),
])
def test_map_tasks_refuses_bad_arguments(kw, match):
    with pytest.raises(InputError, match=match):
        map_tasks(abs, [1], **kw)


def test_check_backend_names_every_backend():
    assert set(BACKENDS) == {"loky", "dask"}
    assert check_backend("dask", "tcp://127.0.0.1:8786") == "dask"


def test_dask_local_cluster_gives_the_loky_results(local_cluster):
    tasks = list(task_seeds(5, 30))
    a = map_tasks(_draw, tasks)
    b = map_tasks(_draw, tasks, backend="dask", scheduler=local_cluster.scheduler_address,
                  chunk_size=4)
    assert [i for i, _ in b] == list(range(30))
    for (_, x), (_, y) in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


def test_dask_scheduler_that_cannot_be_reached_is_an_input_error(monkeypatch):
    pytest.importorskip("dask.distributed", reason="dask[distributed] is not installed")
    monkeypatch.setattr("perfmodel._parallel.CONNECT_TIMEOUT_S", 2)
    with pytest.raises(InputError, match="cannot reach the Dask scheduler"):
        map_tasks(abs, [1], backend="dask", scheduler="tcp://127.0.0.1:1")
