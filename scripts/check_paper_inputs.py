#!/usr/bin/env python3
"""Check that every file paper/main.tex includes was produced by this pipeline run.

Problem: the paper must quote only generated results.  A figure or table left
over from an earlier run (or committed by hand) would let a stale result into
the PDF.  This script lists every ``\\includegraphics``, ``\\input`` and
``\\include`` in the paper, resolves each as LaTeX would (relative to the
paper's folder, ``\\graphicspath`` and the default extensions ``.pdf``,
``.png``, ``.jpg`` for graphics and ``.tex`` for inputs), and fails when a
file is missing or older than the stamp the pipeline writes when it starts
(``build/pipeline.stamp``).  With ``--pdf`` it also checks that the PDF was
built after the stamp.  Commented-out lines are ignored.

Exit status: 0 when every file passes, 1 when one does not (all problems are
listed), 2 on bad arguments.  Standard library only.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

CMD = re.compile(r"\\(includegraphics|input|include)\s*(\[[^\]]*\])?\s*\{([^}]+)\}")
GPATH = re.compile(r"\\graphicspath\s*\{((?:\{[^}]*\})+)\}")
GRAPHIC_EXT = (".pdf", ".png", ".jpg", ".jpeg", ".eps")


def strip_comments(text: str) -> str:
    """Remove LaTeX comments (an unescaped % to the end of the line)."""
    return "\n".join(re.sub(r"(?<!\\)%.*", "", line) for line in text.splitlines())


def included_files(tex: Path) -> list[tuple[str, str]]:
    """(command, argument) for every include in ``tex``, in order."""
    text = strip_comments(tex.read_text())
    return [(m.group(1), m.group(3).strip()) for m in CMD.finditer(text)]


def graphics_paths(tex: Path) -> list[Path]:
    text = strip_comments(tex.read_text())
    base = tex.parent
    out = [base]
    for m in GPATH.finditer(text):
        out += [base / p for p in re.findall(r"\{([^}]*)\}", m.group(1))]
    return out


def resolve(cmd: str, arg: str, tex: Path) -> Path | None:
    """The file LaTeX would read for ``\\cmd{arg}``, or None when there is none."""
    if cmd == "includegraphics":
        dirs = graphics_paths(tex)
        exts = ("",) if Path(arg).suffix.lower() in GRAPHIC_EXT else GRAPHIC_EXT
    else:
        dirs = [tex.parent]
        exts = ("",) if arg.endswith(".tex") else (".tex", "")
    for d in dirs:
        for e in exts:
            p = d / f"{arg}{e}"
            if p.is_file():
                return p
    return None


def check(tex: Path, stamp: Path, pdf: Path | None = None, allow: tuple[str, ...] = ()) -> list[str]:
    """Problems found (empty when all is well)."""
    problems = []
    t0 = stamp.stat().st_mtime
    seen = set()
    for cmd, arg in included_files(tex):
        if arg in seen:
            continue
        seen.add(arg)
        p = resolve(cmd, arg, tex)
        if p is None:
            problems.append(f"\\{cmd}{{{arg}}}: no such file (relative to {tex.parent})")
        elif arg not in allow and p.stat().st_mtime < t0:
            problems.append(f"\\{cmd}{{{arg}}}: {p} is older than {stamp} (not produced by this run)")
    if not seen:
        problems.append(f"{tex} includes no files at all")
    if pdf is not None:
        if not pdf.is_file():
            problems.append(f"{pdf} was not built")
        elif pdf.stat().st_mtime < t0:
            problems.append(f"{pdf} is older than {stamp} (not built by this run)")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tex", default="paper/main.tex", type=Path)
    ap.add_argument("--stamp", default="build/pipeline.stamp", type=Path)
    ap.add_argument("--pdf", type=Path, default=None, help="also require this PDF newer than the stamp")
    ap.add_argument("--allow", action="append", default=[],
                    help="an include argument exempt from the age check (may repeat)")
    args = ap.parse_args(argv)
    for p, what in ((args.tex, "--tex"), (args.stamp, "--stamp")):
        if not p.is_file():
            print(f"error: {what} {p} does not exist", file=sys.stderr)
            return 2
    problems = check(args.tex, args.stamp, args.pdf, tuple(args.allow))
    n = len({a for _, a in included_files(args.tex)})
    if problems:
        print(f"{len(problems)} problem(s) with the paper's {n} included files:", file=sys.stderr)
        for x in problems:
            print(f"  - {x}", file=sys.stderr)
        return 1
    print(f"ok: all {n} files included by {args.tex} were produced by this run"
          + (f"; {args.pdf} built" if args.pdf else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
