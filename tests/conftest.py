"""Shared test set-up: public-data mirror and a throw-away download cache.

* ``PERFMODEL_DATA_MIRROR`` defaults to ``<repo>/../shared/data/external``
  when that folder exists (an explicit setting wins), so dataset tests read
  the local mirror and never need the network.
* ``PERFMODEL_DATA_HOME`` is set, for the whole session, to a temporary
  folder so that no test writes into the user's cache.
* ``fetch_or_skip(name)`` returns a dataset's path or skips the test with
  the reason when neither mirror nor cache nor network has it.
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
