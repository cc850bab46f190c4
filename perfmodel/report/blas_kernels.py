"""Which OpenBLAS kernels a kernel-invariance check compares on this CPU.

Problem
-------
``make test`` validates the notebooks under two OpenBLAS kernels so that a
printed number never depends on the kernel a user's CPU happens to get
(README, "Reproducibility").  The list it was given, ``default Haswell``, only
compares two kernels where OpenBLAS does not pick Haswell for the CPU by
itself.  On a CPU where it does (an AMD EPYC with AVX2, for one) both entries
run the same code and the check compares a run with itself, at twice the cost.
A kernel the CPU cannot execute (``SkylakeX`` without AVX-512) would crash the
check instead of checking anything.

:func:`resolve_kernels` asks OpenBLAS, in a fresh process per candidate (the
kernel is chosen when the library loads), which core it runs under each
setting, and keeps candidates that run a multiplication and a least-squares
solve and whose core differs from every core kept before; fallbacks fill the
list up to the count wanted.  It uses only the standard library here and the
project's Python (numpy, scipy, threadpoolctl) for the probes.

Verified on the project's 2-core AMD EPYC host: ``default`` and ``Haswell``
both report core ``Haswell`` there, ``Sandybridge`` reports ``Sandybridge``, so
``default Haswell`` with fallback ``Sandybridge`` resolves to ``default
Sandybridge``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable, Sequence

__all__ = ["DEFAULT_KERNEL", "kernel_env", "probe_kernel", "resolve_kernels"]

#: the name that means "what OpenBLAS picks for this CPU" (no OPENBLAS_CORETYPE)
DEFAULT_KERNEL = "default"

_PROBE = (
    "import json, numpy as np, scipy.linalg\n"
    "from threadpoolctl import threadpool_info\n"
    "a = np.arange(64 * 64, dtype=float).reshape(64, 64) / 4096.0 + np.eye(64)\n"
    "b = a @ a.T\n"
    "scipy.linalg.lstsq(b, np.ones(64))\n"
    "cores = sorted({str(i.get('architecture')) for i in threadpool_info()\n"
    "                if i.get('internal_api') == 'openblas'})\n"
    "print(json.dumps(cores))\n"
)


#: the variables that choose OpenBLAS's kernel (unset for ``default``; the Makefile's
#: ``BLAS_ENV_K`` unsets the same, tests/test_makefile.py checks it)
KERNEL_VARIABLES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def kernel_env(kernel: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment that runs OpenBLAS under ``kernel`` (``default``: unset)."""
    env = dict(os.environ if base is None else base)
    for name in KERNEL_VARIABLES:
        env.pop(name, None)
    if kernel != DEFAULT_KERNEL:
        env["OPENBLAS_CORETYPE"] = kernel
    return env


def probe_kernel(kernel: str, python: str = sys.executable) -> tuple[str, ...] | None:
    """The OpenBLAS core(s) a process runs under ``kernel``, or None when it cannot run.

    None means the probe process failed: the CPU lacks the instructions the
    kernel needs (the process dies of SIGILL), or numpy, scipy or threadpoolctl
    is missing.  An empty tuple means no OpenBLAS was loaded (MKL, Accelerate).
    """
    try:
        r = subprocess.run([python, "-c", _PROBE], env=kernel_env(kernel), capture_output=True,
                           text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0:
        return None
    try:
        return tuple(json.loads(r.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        return None


def resolve_kernels(requested: Sequence[str], fallbacks: Sequence[str] = (), count: int = 2,
                    probe=probe_kernel) -> tuple[list[str], list[str]]:
    """Kernels that run on this CPU and differ from each other, and why others were left.

    Parameters
    ----------
    requested : sequence of str
        Kernel names in order of preference (``default`` = OpenBLAS's own pick,
        anything else a value of ``OPENBLAS_CORETYPE``).
    fallbacks : sequence of str
        Tried in order, after ``requested``, while fewer than ``count`` distinct
        kernels were found.
    count : int
        How many distinct kernels to find (at least 1).
    probe : callable
        ``probe(kernel) -> tuple of core names or None``; :func:`probe_kernel`
        (a parameter so the choice logic is testable without OpenBLAS).

    Returns
    -------
    kept : list of str
        Up to ``count`` kernel names; every requested name is tried before any
        fallback.  Where no OpenBLAS is loaded only the first runnable name is
        kept (every kernel name would run the same library).
    notes : list of str
        One line per candidate left out, saying why.
    """
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    if not requested:
        raise ValueError("requested names no kernel")
    kept: list[str] = []
    seen: dict[tuple[str, ...], str] = {}
    notes: list[str] = []
    for name in [*requested, *[f for f in fallbacks if f not in requested]]:
        if len(kept) >= count:
            break
        if name in kept:
            continue
        cores = probe(name)
        if cores is None:
            notes.append(f"{name}: left out, a process under it failed (CPU lacks the "
                         "instructions, or numpy/scipy/threadpoolctl missing)")
            continue
        if cores in seen:
            what = "no OpenBLAS loaded" if not cores else f"core {'/'.join(cores)}"
            notes.append(f"{name}: left out, runs the same {what} as {seen[cores]}")
            continue
        seen[cores] = name
        kept.append(name)
    if len(kept) < count:
        notes.append(f"only {len(kept)} distinct kernel(s) found of the {count} wanted")
    return kept, notes


def _main(argv: Iterable[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(
        prog="python -m perfmodel.report.blas_kernels",
        description="Print the OpenBLAS kernels (space-separated) a kernel-invariance check "
                    "compares on this CPU; why any was left out goes to stderr.")
    ap.add_argument("kernels", nargs="+", help="kernel names in order of preference "
                                               "(default = OpenBLAS's own pick)")
    ap.add_argument("--fallback", nargs="*", default=[], help="tried when the kernels above "
                    "give fewer than --count distinct cores")
    ap.add_argument("--count", type=int, default=2)
    args = ap.parse_args(None if argv is None else list(argv))
    try:
        kept, notes = resolve_kernels(args.kernels, args.fallback, args.count)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for n in notes:
        print(f"blas kernels: {n}", file=sys.stderr)
    if not kept:
        print("error: no kernel runs on this machine", file=sys.stderr)
        return 2
    print(" ".join(kept))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(_main())
