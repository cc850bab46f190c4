"""``python -m perfmodel.report.paperio``: the pipeline helpers' command line (see :mod:`._cli`)."""
from __future__ import annotations

from perfmodel.report.paperio._cli import _main

if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(_main())
