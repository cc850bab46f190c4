"""Shared set-up of the CLI tests: the command run in-process, and one fit of the example trace.

* ``run(args) -> (exit status, stdout, stderr)`` runs ``perfmodel`` in this
  process (``perfmodel.cli.main.main``) and returns what it printed.
* ``fit_json``: a ``seed_id`` fit of ``data/example/example_trace.csv``
  written by ``perfmodel fit --json`` once per test module.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from perfmodel.cli.main import main

EXAMPLE = Path(__file__).resolve().parents[2] / "data" / "example" / "example_trace.csv"


@pytest.fixture
def run(capsys):
    """``run(args)``: the CLI in-process; returns (exit status, stdout, stderr)."""

    def _run(args):
        rc = main([str(a) for a in args])
        out = capsys.readouterr()
        return rc, out.out, out.err

    return _run


@pytest.fixture(scope="module")
def fit_json(tmp_path_factory):
    p = tmp_path_factory.mktemp("fit") / "fit.json"
    assert main(["fit", str(EXAMPLE), "-o", str(p), "--model", "seed_id", "--json"]) == 0
    return p
