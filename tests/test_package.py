"""The package's own namespace: lazy re-exports of the public entry points."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import perfmodel

ROOT = Path(__file__).resolve().parents[1]


def test_public_entry_points_are_the_modules_own_objects():
    from perfmodel.core import fit, model, results
    from perfmodel.data import trace

    assert perfmodel.read_trace is trace.read_trace
    assert perfmodel.fit_model is fit.fit_model
    assert perfmodel.FitResult is results.FitResult
    assert perfmodel.get_model is model.get_model
    assert perfmodel.MODELS is model.MODELS
    assert perfmodel.RECOMMENDED is model.RECOMMENDED
    assert perfmodel.default_for is model.default_for
    assert set(perfmodel.__all__) <= set(dir(perfmodel))
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        perfmodel.nope  # noqa: B018


def test_from_perfmodel_import_fits_a_trace():
    from perfmodel import fit_model, get_model, read_trace

    df = read_trace(ROOT / "data" / "example" / "example_trace.csv").iloc[:400]
    fit = fit_model(df, get_model("seed_id"), n_starts=1)
    assert fit.model_name == "seed_id" and fit.success


def _run(code: str, python: str = sys.executable) -> str:
    r = subprocess.run([python, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       check=False, env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr.strip().splitlines()[-1:]
    return r.stdout.strip()


def test_import_perfmodel_stays_light():
    code = ("import sys; import perfmodel; "
            "print(sorted(m for m in ('numpy', 'pandas', 'scipy', 'perfmodel.core.model') "
            "if m in sys.modules))")
    assert _run(code) == "[]"


def test_paperio_and_pipeline_import_without_numpy():
    """pipeline.mk runs `python3 -m perfmodel.report.paperio deps` with any Python: no numpy needed."""
    code = ("import sys; sys.path.insert(0, '.'); sys.modules['numpy'] = None; "
            "import perfmodel.report.paperio, perfmodel.report.pipeline, perfmodel._io, perfmodel._checks; "
            "print('ok')")
    assert _run(code) == "ok"
    plain = shutil.which("python3", path="/usr/bin:/bin")
    if plain is not None:  # a system Python, usually without numpy
        assert _run(code.replace("sys.modules['numpy'] = None; ", ""), plain) == "ok"
