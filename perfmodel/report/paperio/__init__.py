"""Paper I/O: the only way a notebook hands numbers, tables and figures to the paper.

Problem
-------
Nothing in ``paper/main.tex`` is typed by hand: every number quoted in the
text is a LaTeX macro, every table a generated ``tabular``, every figure a
generated PDF.  Notebooks run independently (one per paper item, possibly in
parallel under ``make -j``), so each writes its *own* files and one
assembler joins the number fragments:

* :func:`write_numbers` -- ``paper/numbers/<notebook>.tex``, one
  ``\\newcommand`` per number, sorted, no timestamps (two runs with the same
  parameters give identical files);
* :func:`assemble_numbers` -- ``paper/numbers.tex`` from every fragment; a
  macro defined in two fragments is an error naming both;
* :func:`write_table` -- ``paper/tables/<name>.tex``, a booktabs
  ``tabular`` (the caption and label stay in ``main.tex``);
* :func:`save_figure` -- ``figures/<name>.pdf`` (and ``.png`` for the
  notebook view), without creation dates so the files are reproducible;
* :class:`PaperOutputs` -- the three above bound to one output root and one
  notebook name, which is what notebooks use.

The module imports only the standard library at top level, so the
dependency scanner (``python -m perfmodel.report.paperio deps``, used by
``notebooks/pipeline.mk``) and the stripper run with any Python 3.11.

Examples
--------
>>> out = PaperOutputs("..", "02_fit_and_identifiability")      # doctest: +SKIP
>>> out.numbers({"SynthMaxRelErr": 0.0123}, digits=2)            # doctest: +SKIP
{'SynthMaxRelErr': '0.012'}

Modules
-------
:mod:`.macros` (numbers), :mod:`.latex` (tables), :mod:`.notebook` (figures,
:class:`PaperOutputs`, :func:`notebook_setup`), :mod:`.make_helpers`
(:func:`notebook_deps`, :func:`strip_notebook`), :mod:`._cli` (the command
line) and :mod:`._common` (names, atomic writes, :func:`find_root`).  Every
name is re-exported here; patch a function in the module that defines it.
"""
from __future__ import annotations

from perfmodel.report.paperio._cli import _main as _main  # python -m perfmodel.report.paperio
from perfmodel.report.paperio._common import find_root
from perfmodel.report.paperio.latex import latex_escape, param_tex, stack, table_tex, write_table
from perfmodel.report.paperio.macros import (
    assemble_numbers,
    count_word,
    format_bound,
    format_estimate,
    format_number,
    format_paired,
    format_to_uncertainty,
    interval_excludes_zero,
    macro_name,
    read_numbers,
    word_list,
    write_numbers,
)
from perfmodel.report.paperio.make_helpers import notebook_deps, strip_notebook
from perfmodel.report.paperio.notebook import (
    PAPER_RC,
    SCRIPT_SCALE,
    PaperOutputs,
    notebook_setup,
    printed_font_pt,
    save_figure,
)

__all__ = [
    "PAPER_RC",
    "SCRIPT_SCALE",
    "PaperOutputs",
    "assemble_numbers",
    "count_word",
    "find_root",
    "format_bound",
    "format_estimate",
    "format_number",
    "format_paired",
    "format_to_uncertainty",
    "interval_excludes_zero",
    "latex_escape",
    "macro_name",
    "notebook_deps",
    "notebook_setup",
    "param_tex",
    "printed_font_pt",
    "read_numbers",
    "save_figure",
    "stack",
    "strip_notebook",
    "table_tex",
    "word_list",
    "write_numbers",
    "write_table",
]
