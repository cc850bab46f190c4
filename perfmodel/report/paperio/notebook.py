"""Figures and the object notebooks use (:class:`PaperOutputs`, :func:`notebook_setup`).

See :mod:`perfmodel.report.paperio`; verified in ``tests/report/test_paperio.py``.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from perfmodel.errors import InputError
from perfmodel.report.paperio._common import (
    _check_name,
)
from perfmodel.report.paperio.latex import write_table
from perfmodel.report.paperio.macros import (
    write_numbers,
)
from perfmodel.report.pipeline import record_output

# ---------------------------------------------------------------------------
# figures
# ---------------------------------------------------------------------------

def save_figure(fig, name: str, *, folder: str | os.PathLike, formats: Iterable[str] = ("pdf", "png"),
                dpi: int = 150) -> list[Path]:
    """Save ``fig`` as ``<folder>/<name>.<fmt>`` for each format, reproducibly.

    PDF files carry no creation date (``metadata={'CreationDate': None}``)
    and PNG files no software tag, so two runs give identical bytes when the
    figure is the same.  Returns the written paths.
    """
    _check_name(name, "name")
    if not hasattr(fig, "savefig"):
        raise InputError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")
    formats = tuple(formats)
    bad = [f for f in formats if f not in ("pdf", "png", "svg")]
    if not formats or bad:
        raise InputError(f"formats must be a non-empty subset of pdf, png, svg; got {formats!r}")
    if not isinstance(dpi, int) or dpi <= 0:
        raise InputError(f"dpi must be a positive integer, got {dpi!r}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    meta = {"pdf": {"CreationDate": None, "Producer": None},
            "png": {"Software": None},
            "svg": {"Date": None}}
    out = []
    for f in formats:
        p = folder / f"{name}.{f}"
        fig.savefig(p, format=f, dpi=dpi, bbox_inches="tight", metadata=meta[f])
        out.append(p)
    return out


#: Size of a mathtext sub- or superscript relative to its text's font size.
#: Matplotlib's mathtext draws the ``2`` of ``$10^{2}$`` and the ``0`` of
#: ``$\tau_{0}$`` at 0.7 times the label's size (its ``SHRINK_FACTOR``); with
#: matplotlib 3.11 and the DejaVu Sans math font,
#: ``matplotlib.mathtext.MathTextParser("path").parse(r"$10^{2}$", prop=FontProperties(size=8))``
#: gives glyphs of 8, 8 and 5.6 pt, which ``tests/report/test_paperio.py`` checks.
SCRIPT_SCALE = 0.7

_MATH = re.compile(r"(?<!\\)\$(.*?)(?<!\\)\$", re.DOTALL)


def _has_script(text: str) -> bool:
    """Whether ``text`` has mathtext (between unescaped ``$``) with a ``^`` or ``_``."""
    return any(("^" in m or "_" in m) for m in _MATH.findall(text))


def printed_font_pt(fig, shown_width: float) -> float:
    """The smallest text size (pt) of ``fig`` once shown ``shown_width`` inches wide.

    Problem: a figure saved ``W`` inches wide (its tight bounding box, as
    :func:`save_figure` writes it) and included at ``shown_width`` inches is
    scaled by ``shown_width / W``, and so is every font in it; a 9 pt label
    of a 10-inch figure set at the text width prints at 5.7 pt.  This
    returns ``min(size) * shown_width / W`` over the visible, non-empty
    texts (tick labels, labels, titles, legends, annotations) so that a
    notebook can check its figure prints at a readable size.

    The size of a text is its font size, except that a text whose string
    has mathtext (between ``$`` signs) with a superscript or subscript
    (``^`` or ``_``) counts at :data:`SCRIPT_SCALE` (0.7) times its font
    size: matplotlib draws the scripts smaller than the label, so the
    exponent of a log tick label ``$10^{2}$`` or the subscript of
    ``$k_{B}$`` is the smallest print in it, and
    ``Text.get_fontsize()`` (the whole label's size) misses it.  Nested
    scripts (``$x^{a^{b}}$``, 0.49) are counted at 0.7 as well.

    Verified in ``tests/report/test_paperio.py`` against a figure of known
    size, and against the glyph sizes of matplotlib's mathtext parser.
    """
    if not hasattr(fig, "get_tightbbox") or not hasattr(fig, "canvas"):
        raise InputError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")
    if isinstance(shown_width, bool) or not isinstance(shown_width, (int, float)) or not shown_width > 0:
        raise InputError(f"shown_width must be a positive number of inches, got {shown_width!r}")
    from matplotlib.text import Text

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    width = fig.get_tightbbox(renderer).width + 2 * 0.1  # inches; savefig pads 0.1 in per side
    sizes = [t.get_fontsize() * (SCRIPT_SCALE if _has_script(t.get_text()) else 1.0)
             for t in fig.findobj(Text)
             if t.get_visible() and t.get_text().strip() and t.get_window_extent(renderer).width > 0
             and fig.bbox.overlaps(t.get_window_extent(renderer))]
    if not sizes:
        raise InputError("fig has no visible text")
    return float(min(sizes)) * float(shown_width) / width


# ---------------------------------------------------------------------------
# the object notebooks use
# ---------------------------------------------------------------------------

class PaperOutputs:
    """Figures, tables and numbers of one notebook, under one output root.

    Parameters
    ----------
    root : the repository root (notebooks pass their ``out`` parameter,
        ``'..'`` when run from ``notebooks/``)
    notebook : the notebook's name (fragment and provenance comments)

    Files go to ``<root>/figures``, ``<root>/paper/tables`` and
    ``<root>/paper/numbers/<notebook>.tex``.  Numbers accumulate over calls
    to :meth:`numbers` and the fragment is rewritten with all of them, so a
    notebook may report numbers cell by cell.
    """

    def __init__(self, root: str | os.PathLike, notebook: str):
        root = Path(root)
        if not root.is_dir():
            raise InputError(f"root {str(root)!r} is not a folder")
        self.root = root
        self.notebook = _check_name(notebook, "notebook")
        self.figures = root / "figures"
        self.tables = root / "paper" / "tables"
        self.numbers_dir = root / "paper" / "numbers"
        self._numbers: dict[str, Any] = {}
        self._opts: dict[str, dict] = {}

    def figure(self, fig, name: str, *, shown_width: float | None = None, min_pt: float = 7.0,
               **kwargs) -> list[Path]:
        """Save ``fig`` (see :func:`save_figure`).

        With ``shown_width`` (inches: the width ``paper/main.tex`` includes
        it at), first check that its smallest text prints at ``min_pt`` or
        more (:func:`printed_font_pt`); a smaller one raises ``InputError``
        naming the size, and nothing is written.
        """
        if shown_width is not None:
            got = printed_font_pt(fig, shown_width)
            if got < min_pt:
                raise InputError(f"figure {name!r}: its smallest text prints at {got:.1f} pt when "
                                 f"shown {shown_width} in wide (minimum {min_pt} pt); draw it "
                                 "smaller or its text larger")
        paths = save_figure(fig, name, folder=self.figures, **kwargs)
        for p in paths:
            record_output(p)
        return paths

    def table(self, df, name: str, **kwargs) -> Path:
        """Write ``df`` as ``paper/tables/<name>.tex`` (see :func:`table_tex`)."""
        path = write_table(df, name, folder=self.tables, notebook=self.notebook, **kwargs)
        record_output(path)
        return path

    def numbers(self, values: Mapping[str, Any], *, digits: int = 3, fixed: bool = False,
                percent: bool = False) -> dict[str, str]:
        """Add ``values`` (same formatting for all of them) and rewrite the fragment.

        Returns the formatted text of the values just added.
        """
        if not isinstance(values, Mapping) or not values:
            raise InputError("values must be a non-empty mapping of macro name -> number")
        for k, v in values.items():
            self._numbers[k] = v
            self._opts[k] = {"digits": digits, "fixed": fixed, "percent": percent}
        done = write_numbers(
            self._numbers, self.notebook, folder=self.numbers_dir,
            digits={k: o["digits"] for k, o in self._opts.items()},
            fixed=[k for k, o in self._opts.items() if o["fixed"]],
            percent=[k for k, o in self._opts.items() if o["percent"]],
        )
        record_output(self.numbers_dir / f"{self.notebook}.tex")
        return {k: done[k] for k in values}


#: matplotlib settings of every paper figure (small, column-width, embeddable fonts)
PAPER_RC = {
    "figure.figsize": (4.8, 3.2),
    "figure.dpi": 100,
    "savefig.dpi": 150,
    "font.size": 9,
    "axes.titlesize": 9,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "pdf.fonttype": 42,
    "svg.hashsalt": "perfmodel",
    "axes.spines.top": False,
    "axes.spines.right": False,
}


def notebook_setup(out: str | os.PathLike, notebook: str, *, style: bool = True) -> PaperOutputs:
    """Prepare a paper notebook and return its :class:`PaperOutputs`.

    * ``out`` is the repository root as the notebook sees it (``'..'`` from
      ``notebooks/``); it must contain ``pyproject.toml``, so a wrong
      working directory fails here with a clear message rather than writing
      figures somewhere else;
    * ``PERFMODEL_DATA_MIRROR`` defaults (an explicit setting wins) to
      ``<root>/../shared/data/external`` when that folder exists, the same
      rule as ``tests/conftest.py``, so notebooks run under papermill and
      nbval alike read the local mirror of the public datasets;
    * ``style`` applies :data:`PAPER_RC` to matplotlib;
    * figures, tables and numbers go under ``PERFMODEL_PAPER_OUTPUT`` (the
      pipeline sets it to the repository root; ``make test`` to
      ``build/nbval-outputs``); when it is unset -- a notebook opened in
      JupyterLab or run by hand -- they go to ``<out>/build/scratch``, so an
      interactive run never replaces the paper's committed outputs (inputs
      are still read from ``out``).  The pipeline also sets
      ``PERFMODEL_OUTPUT_MANIFEST`` (see :mod:`perfmodel.report.pipeline`).
    """
    root = Path(out)
    if not (root / "pyproject.toml").is_file():
        raise InputError(f"out={str(out)!r} is not the repository root (no pyproject.toml there; "
                         f"working directory {os.getcwd()})")
    mirror = root.resolve().parent / "shared" / "data" / "external"
    if mirror.is_dir():
        os.environ.setdefault("PERFMODEL_DATA_MIRROR", str(mirror))
    if style:
        import matplotlib

        matplotlib.rcParams.update(PAPER_RC)
    dest = os.environ.get("PERFMODEL_PAPER_OUTPUT")
    if not dest:
        dest = root / "build" / "scratch"
        print(f"paper outputs of this run go to {dest} (the paper's own outputs are written "
              "only by `make reproduce`)")
    Path(dest).mkdir(parents=True, exist_ok=True)
    return PaperOutputs(dest, notebook)
