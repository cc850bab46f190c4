"""Stand-alone runner: ``python -m perfmodel.data.collect vllm --model-config ... -o ...``.

The same as ``perfmodel collect vllm ...``; the arguments live in :mod:`perfmodel.cli.collect`
(an entry point may import the CLI layer: nothing imports it).
"""
from __future__ import annotations

import argparse
import sys

from perfmodel.cli.collect import add_vllm_arguments


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perfmodel.data.collect")
    sub = parser.add_subparsers(dest="engine", required=True)
    add_vllm_arguments(sub.add_parser("vllm", help="in-process vLLM engine"))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
