"""Stand-alone runner: ``python -m perfmodel.data.collect vllm --model-config ... -o ...``.

Temporary until ``perfmodel collect vllm`` is wired into ``perfmodel/cli.py``.
"""
from __future__ import annotations

import argparse
import sys

from perfmodel.data.collect.vllm_collector import add_vllm_arguments


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perfmodel.data.collect")
    sub = parser.add_subparsers(dest="engine", required=True)
    add_vllm_arguments(sub.add_parser("vllm", help="in-process vLLM engine"))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
