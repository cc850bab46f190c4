"""The Makefile and README promise things a newcomer relies on: check them without running them."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _dry(target: str) -> str:
    r = subprocess.run(["make", "-n", "--no-print-directory", target], cwd=ROOT,
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_lab_has_inline_figures_and_sees_the_whole_repository():
    out = _dry("lab")
    assert "env -u MPLBACKEND" in out          # the Agg backend would hide every figure
    assert "--notebook-dir=." in out            # data/, figures/, build/ in the file browser


def test_notebook_validation_runs_under_two_distinct_blas_kernels():
    out = _dry("test-notebooks")
    # the list is resolved on the CPU: a kernel running the same core as another is replaced
    assert "perfmodel.report.blas_kernels default Haswell --fallback Sandybridge Nehalem" in out
    assert "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE" in out and "OPENBLAS_CORETYPE=$k" in out
    # the numbers and tables the notebooks wrote under each kernel are compared
    assert "perfmodel.report.pipeline compare" in out and "build/nbval-outputs/$k" in out


def test_the_makefile_and_kernel_env_run_a_kernel_the_same_way():
    # two places say how a process runs under kernel k: the Makefile's BLAS_ENV_K (shell) and
    # perfmodel.report.blas_kernels.kernel_env (the probe); they must unset the same variables
    from perfmodel.report.blas_kernels import KERNEL_VARIABLES, kernel_env

    out = _dry("test-notebooks")
    unset = "env " + " ".join(f"-u {v}" for v in KERNEL_VARIABLES)
    assert unset in out
    base = {v: "x" for v in KERNEL_VARIABLES}
    assert not set(KERNEL_VARIABLES) & set(kernel_env("default", base))
    assert kernel_env("Sandybridge", base)["OPENBLAS_CORETYPE"] == "Sandybridge"
    assert "OPENBLAS_CORETYPE=$k" in out


def test_make_test_lints():
    assert "ruff check perfmodel tests scripts benchmarks" in _dry("lint")


def test_paper_clean_removes_only_what_the_pipeline_rebuilds():
    out = _dry("paper-clean")
    assert "perfmodel.report.pipeline clean" in out
    assert "paper/tables" not in out            # script-written tables stay


def test_pipeline_runs_notebooks_with_their_outputs_recorded():
    text = (ROOT / "notebooks" / "pipeline.mk").read_text()
    assert "PERFMODEL_OUTPUT_MANIFEST" in text and "PERFMODEL_PAPER_OUTPUT" in text
    assert "SOURCE_DATE_EPOCH" in text


def test_readme_paths_exist():
    """Every repository path the README names in backticks exists (generated build/ aside)."""
    text = (ROOT / "README.md").read_text()
    tops = ("data/", "perfmodel/", "notebooks/", "scripts/", "paper/", "figures/", "tests/",
            "benchmarks/", "docs/", ".ci/")
    missing = []
    for token in re.findall(r"`([^`\s]+)`", text):
        path = token.rstrip(".,;:")
        named = path.startswith(tops) and not any(c in path for c in "*<>$")
        if named and not (ROOT / path).exists():
            missing.append(path)
    assert not missing, f"README names paths that do not exist: {missing}"


def test_a_dry_run_of_the_notebook_validation_deletes_nothing(tmp_path):
    # make runs a recipe line that calls $(MAKE) even under -n: nothing on such a line may
    # delete or write (nbval empties its own output folder, in its own recipe)
    kept = tmp_path / "default" / "paper" / "numbers" / "01_data_overview.tex"
    kept.parent.mkdir(parents=True)
    kept.write_text("kept")
    r = subprocess.run(["make", "-n", "--no-print-directory", "test-notebooks",
                        f"NBVAL_OUT={tmp_path}"], cwd=ROOT, capture_output=True, text=True,
                       check=False)
    assert r.returncode == 0, r.stderr
    assert kept.read_text() == "kept"
    assert f"rm -rf {tmp_path}/" in r.stdout       # the sub-make prints what it would remove
