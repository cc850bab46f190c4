"""The kernel list a kernel-invariance check compares: distinct cores only, runnable ones only."""
from __future__ import annotations

import pytest

from perfmodel.report import blas_kernels as bk


def _probe(table):
    calls = []

    def probe(name):
        calls.append(name)
        return table[name]
    probe.calls = calls
    return probe


def test_a_kernel_running_the_same_core_is_replaced_by_a_fallback():
    # an AVX2 CPU: OpenBLAS's own pick is Haswell, so `default Haswell` compares nothing
    probe = _probe({"default": ("Haswell",), "Haswell": ("Haswell",),
                    "Sandybridge": ("Sandybridge",), "Nehalem": ("Nehalem",)})
    kept, notes = bk.resolve_kernels(["default", "Haswell"], ["Sandybridge", "Nehalem"], 2, probe)
    assert kept == ["default", "Sandybridge"]
    assert any("Haswell: left out" in n and "as default" in n for n in notes)
    assert "Nehalem" not in probe.calls            # stops once two distinct cores are found


def test_requested_kernels_that_differ_are_kept_without_fallbacks():
    probe = _probe({"default": ("SkylakeX",), "Haswell": ("Haswell",)})
    kept, notes = bk.resolve_kernels(["default", "Haswell"], ["Sandybridge"], 2, probe)
    assert kept == ["default", "Haswell"] and notes == []


def test_a_kernel_the_cpu_cannot_run_is_left_out_and_said_so():
    probe = _probe({"default": ("Haswell",), "SkylakeX": None, "Sandybridge": ("Sandybridge",)})
    kept, notes = bk.resolve_kernels(["default", "SkylakeX"], ["Sandybridge"], 2, probe)
    assert kept == ["default", "Sandybridge"]
    assert any(n.startswith("SkylakeX: left out, a process under it failed") for n in notes)


def test_without_openblas_one_kernel_is_kept_and_the_shortfall_named():
    probe = _probe({"default": (), "Haswell": (), "Sandybridge": ()})
    kept, notes = bk.resolve_kernels(["default", "Haswell"], ["Sandybridge"], 2, probe)
    assert kept == ["default"]
    assert any("no OpenBLAS loaded" in n for n in notes)
    assert notes[-1] == "only 1 distinct kernel(s) found of the 2 wanted"


@pytest.mark.parametrize("args, match", [(([], [], 2), "requested names no kernel"),
                                         ((["default"], [], 0), "count must be at least 1")])
def test_bad_arguments_are_named(args, match):
    with pytest.raises(ValueError, match=match):
        bk.resolve_kernels(*args, probe=lambda k: ("x",))


def test_kernel_env_unsets_the_override_for_default_only():
    base = {"OPENBLAS_CORETYPE": "Zen", "OPENBLAS_L2_SIZE": "1", "PATH": "/bin"}
    assert bk.kernel_env("default", base) == {"PATH": "/bin"}
    assert bk.kernel_env("Haswell", base) == {"PATH": "/bin", "OPENBLAS_CORETYPE": "Haswell"}


def test_the_probe_reads_this_process_openblas():
    cores = bk.probe_kernel("default")
    if cores is None:
        pytest.skip("numpy, scipy or threadpoolctl cannot run a probe here")
    assert isinstance(cores, tuple) and all(isinstance(c, str) for c in cores)


def test_cli_exits_2_with_one_line_on_a_bad_count(capsys):
    assert bk._main(["default", "--count", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: count must be at least 1, got 0"]
