"""Shared test set-up: public-data mirror and a throw-away download cache.

* ``PERFMODEL_DATA_MIRROR`` defaults to ``<repo>/../shared/data/external``
  when that folder exists (an explicit setting wins), so dataset tests read
  the local mirror and never need the network.
* ``PERFMODEL_DATA_HOME`` is set, for the whole session, to a temporary
  folder so that no test writes into the user's cache.
* ``fetch_or_skip(name)`` returns a dataset's path or skips the test with
  the reason when neither mirror nor cache nor network has it.
* ``local_cluster``: a running Dask ``LocalCluster`` of 2 processes (1 thread
  each), or a skip that says why it cannot start here.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

_REPO = Path(__file__).resolve().parents[1]
_MIRROR = _REPO.parent / "shared" / "data" / "external"
if _MIRROR.is_dir():
    os.environ.setdefault("PERFMODEL_DATA_MIRROR", str(_MIRROR))


@pytest.fixture(scope="session", autouse=True)
def _perfmodel_data_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("perfmodel-data-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PERFMODEL_DATA_HOME", str(home))
        yield home


@pytest.fixture
def fetch_or_skip():
    """``fetch_or_skip(name) -> Path``: ``perfmodel.data.datasets.fetch``, or skip if unreachable."""
    from perfmodel.data.datasets import fetch
    from perfmodel.errors import DataUnavailableError

    def _fetch(name: str) -> Path:
        try:
            return fetch(name)
        except DataUnavailableError as e:
            pytest.skip(f"public dataset {name!r} unreachable (no mirror, cache or network): {e}")

    return _fetch


@pytest.fixture
def local_cluster():
    """A running Dask LocalCluster of 2 processes (1 thread each), closed after the test.

    Skips when ``dask[distributed]`` is missing or the cluster cannot start on this machine.
    """
    distributed = pytest.importorskip("dask.distributed",
                                      reason="dask[distributed] is not installed")
    try:
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                           dashboard_address=None)
    except Exception as e:  # noqa: BLE001 - any failure to start means: cannot test here
        pytest.skip(f"a Dask LocalCluster cannot start on this machine: {e}")
    with cluster:
        yield cluster
