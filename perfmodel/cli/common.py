"""What every ``perfmodel`` sub-command shares: the argument parser with one-line errors,
``--random-state``, the text-or-JSON output and the output-file check."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from perfmodel._io import check_output_path, json_safe
from perfmodel.errors import InputError, PerfmodelError

__all__ = [
    "DeprecatedAlias",
    "Parser",
    "UsageError",
    "add_backend_arguments",
    "add_random_state_argument",
    "add_run_level_arguments",
    "check_output",
    "check_run_traces",
    "emit",
    "run_level_sd",
]


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error message and exit status 2."""

    def error(self, message):  # pragma: no cover - exercised through main()
        raise UsageError(f"{self.prog}: {message}")


class UsageError(Exception):
    pass


class DeprecatedAlias(argparse.Action):
    """A hidden old spelling of an option: stores like the new one and warns on stderr."""

    def __init__(self, option_strings, dest, new_option: str = "", **kwargs):
        self.new_option = new_option
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"perfmodel: warning: {option_string} is deprecated, use {self.new_option}",
              file=sys.stderr)
        setattr(namespace, self.dest, values)


def _seed(text: str) -> int:
    """A random seed on the command line: an integer >= 0 (argparse names the option)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return v


def add_random_state_argument(parser: argparse.ArgumentParser, what: str,
                              default: int = 0) -> None:
    """``--random-state N``: the random seed of a sub-command (stored as ``args.seed``).

    The option was called ``--seed``, a word that also names the source-form
    model (``--model seed``); ``--seed N`` still works as a hidden,
    deprecated alias (it warns on stderr).
    """
    parser.add_argument("--random-state", dest="seed", type=_seed, default=default, metavar="N",
                        help=f"random seed of {what} (default: %(default)s)")
    parser.add_argument("--seed", dest="seed", type=_seed, default=argparse.SUPPRESS,
                        action=DeprecatedAlias, new_option="--random-state",
                        help=argparse.SUPPRESS)


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    """``--backend {loky,dask}`` and ``--scheduler ADDRESS``: where the parallel work runs
    (:func:`perfmodel._parallel.map_tasks`; README, "Scaling out")."""
    from perfmodel._parallel import BACKENDS

    parser.add_argument("--backend", default="loky", choices=list(BACKENDS),
                        help="parallel backend: loky (local cores, default) or dask (a Dask "
                             "cluster: --scheduler, or a LocalCluster on this machine)")
    parser.add_argument("--scheduler", default=None, metavar="ADDRESS",
                        help="with --backend dask: the scheduler, e.g. tcp://host:8786")


def emit(args, text: str, obj) -> None:
    if getattr(args, "json", False):
        print(json.dumps(json_safe(obj), indent=2, allow_nan=False))
    else:
        print(text)


def check_output(path, force: bool, inputs=()) -> Path:
    """Check ``-o/--output`` before any work: not an existing file without ``--force``,
    never a device, FIFO, link or folder, never one of the command's ``inputs``."""
    p = Path(path)
    # a device, FIFO, link, folder or input file: refused whatever --force says
    check_output_path(p, force=True, inputs=inputs)
    if p.exists() and not force:
        raise PerfmodelError(f"output {p} exists; pass --force to overwrite it")
    if not p.parent.exists():
        raise PerfmodelError(f"output folder {p.parent} does not exist")
    return p


def add_run_level_arguments(parser, sd_help: str | None = None) -> None:
    """``--run-sd SD`` or ``--run-traces STEPLOG ...``: the run-level term of an interval
    (``sd_help``: the help of ``--run-sd`` where the interval is not a replication's)."""
    g = parser.add_mutually_exclusive_group()
    g.add_argument("--run-sd", type=float, default=None, metavar="SD",
                   help=sd_help or (
                       "sd (log scale) of the run-level term of the interval: every step of a "
                       "replication exp(u) times slower, u ~ N(0, SD^2) (the host's speed from "
                       "run to run, docs/decisions.md; default 0: none)"))
    g.add_argument("--run-traces", nargs="+", metavar="STEPLOG",
                   help="step logs of other runs of the same server, NOT the fit's own: the "
                        "run-level sd is estimated from them (root-mean-square log of each "
                        "run's measured over predicted step time; at least 2)")


def check_run_traces(paths, own, option: str = "--run-traces",
                     why: str = "the run-level spread needs runs the fit did not see") -> list[str]:
    """``--run-traces`` (or another ``option`` naming other traces than the fit's, e.g.
    ``--sibling-traces``): no step log twice, none of the fit's own trace(s) ``own`` (a path,
    a list of paths or None); returns the paths as strings."""
    paths = [str(p) for p in paths]
    if len(set(paths)) != len(paths):
        raise InputError(f"{option} names a step log twice")
    for o in own if isinstance(own, (list, tuple)) else [own] if own else []:
        if any(Path(p).resolve() == Path(str(o)).resolve() for p in paths):
            raise InputError(f"{option} includes the fit's own trace {str(o)!r}: {why}")
    return paths


def run_level_sd(args, fit) -> tuple[float, dict | None]:
    """The run-level sd from ``--run-sd`` or ``--run-traces`` (0 without either), and the
    estimate (:func:`perfmodel.stats.run_level.run_level_spread`) when it was estimated."""
    if getattr(args, "run_traces", None):
        from perfmodel.data.trace import read_trace
        from perfmodel.stats.run_level import run_level_spread

        paths = check_run_traces(args.run_traces,
                                 (getattr(fit, "provenance", None) or {}).get("trace"))
        est = run_level_spread(fit, {p: read_trace(p) for p in paths})
        return est["sd"], est
    return (0.0 if args.run_sd is None else args.run_sd), None
