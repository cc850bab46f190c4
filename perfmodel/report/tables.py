"""Paper tables built from the statistics layer's results (LaTeX ``tabular`` text).

Here rather than beside the numbers they show: the report layer may import the
statistics layer, not the other way round.  Not imported by
``perfmodel.report`` itself, so ``paperio`` and ``pipeline`` keep running
without numpy.
"""
from __future__ import annotations

import pandas as pd

from perfmodel.report.paperio import latex_escape, table_tex
from perfmodel.stats.coverage import RECOMMENDED, coverage_table

__all__ = ["coverage_tex"]


def _head(p: str) -> str:
    if "_" not in p:
        return p
    base, sub = p.split("_", 1)
    return rf"${chr(92) + base if base == 'tau' else base}_{{{sub}}}$"


def coverage_tex(summary: pd.DataFrame, digits: int = 3) -> str:
    """The coverage table as a booktabs ``tabular`` (:func:`perfmodel.report.paperio.table_tex`);
    the recommended method of each noise type is marked with a dagger."""
    wide = coverage_table(summary, digits)
    wide["method"] = [latex_escape(m) + (r"$^\dagger$" if RECOMMENDED.get(s) == m else "")
                      for s, m in zip(wide["scenario"], wide["method"])]
    heads = {p: _head(p) for p in wide.columns if p not in ("scenario", "relative", "method")}
    breaks = [i for i in range(1, len(wide)) if wide["scenario"].iloc[i] != wide["scenario"].iloc[i - 1]]
    fmt = {"method": lambda v: v}
    return table_tex(wide, columns={"relative": "fit scale", **heads}, formats=fmt,
                     midrules=breaks)
