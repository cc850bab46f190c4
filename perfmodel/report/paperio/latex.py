"""Tables for the paper: a pandas DataFrame as a booktabs ``tabular``.

See :mod:`perfmodel.report.paperio`; verified in ``tests/report/test_paperio.py``.
"""
from __future__ import annotations

import math
import numbers as _numbers
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from perfmodel.errors import InputError
from perfmodel.report.paperio._common import (
    _HEADER,
    _check_name,
    _write,
)
from perfmodel.report.paperio.macros import format_number

# ---------------------------------------------------------------------------
# tables
# ---------------------------------------------------------------------------

_ESC = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
        "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def latex_escape(text: Any) -> str:
    """Escape LaTeX's special characters in plain text."""
    return "".join(_ESC.get(c, c) for c in str(text))


def table_tex(df, *, columns: Mapping[str, str] | None = None,
              formats: Mapping[str, Any] | None = None, digits: int = 3,
              align: str | None = None, index: bool = False, escape: bool = True,
              midrules: Iterable[int] = ()) -> str:
    """Render a DataFrame as a booktabs ``tabular`` (text only; no float, no caption).

    Parameters
    ----------
    df : pandas.DataFrame (at least one row and one column)
    columns : header text per column, raw LaTeX (e.g. ``{'tau_0': r'$\\tau_0$'}``);
        other headers are escaped column names
    formats : per column, a callable ``value -> str`` (raw LaTeX) or an int
        number of significant digits; columns without an entry use
        :func:`format_number` with ``digits`` for numbers and
        :func:`latex_escape` for text (``escape=False`` passes text raw)
    align : column spec, default ``l`` for text columns and ``r`` for numbers
    index : include the index as the first column
    midrules : row positions (0-based, before that row) that get a ``\\midrule``
    """
    import pandas as pd

    if not isinstance(df, pd.DataFrame):
        raise InputError(f"df must be a pandas DataFrame, got {type(df).__name__}")
    if index:
        df = df.reset_index()
    if df.shape[0] == 0 or df.shape[1] == 0:
        raise InputError(f"df is empty (shape {df.shape}): nothing to tabulate")
    columns = dict(columns or {})
    formats = dict(formats or {})
    unknown = sorted(set(columns) - set(map(str, df.columns)) | set(formats) - set(map(str, df.columns)))
    if unknown:
        raise InputError(f"columns/formats name columns the table does not have: {unknown}")
    names = [str(c) for c in df.columns]
    numeric = [pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])
               for c in df.columns]
    if align is None:
        align = "".join("r" if n else "l" for n in numeric)
    elif not isinstance(align, str) or not align:
        raise InputError(f"align must be a non-empty LaTeX column spec, got {align!r}")

    def cell(c, v):
        f = formats.get(c)
        if callable(f):
            return str(f(v))
        if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
            return "--"
        if isinstance(v, _numbers.Real) and not isinstance(v, bool):
            return format_number(v, f if isinstance(f, int) else digits)
        return latex_escape(v) if escape else str(v)

    head = " & ".join(columns.get(c, latex_escape(c)) for c in names) + r" \\"
    rules = set(midrules)
    lines = [f"\\begin{{tabular}}{{{align}}}", r"\toprule", head, r"\midrule"]
    for i, row in enumerate(df.itertuples(index=False, name=None)):
        if i in rules and i > 0:
            lines.append(r"\midrule")
        lines.append(" & ".join(cell(c, v) for c, v in zip(names, row)) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def stack(*lines: str, align: str = "c", valign: str = "b") -> str:
    """A header (or cell) of several lines, one under the other, as raw LaTeX.

    Problem: a wide table scaled down to the text width prints at 4-5 pt;
    breaking long headers (``stack("TTFT p50", "(ms)")``) lets narrow
    columns fit at the normal table size instead.  The lines go into a
    bottom-aligned inner ``tabular`` without outer padding, so a stacked
    header sits on the same baseline as one-line headers beside it.

    Parameters
    ----------
    *lines : raw LaTeX, at least one (escape text with :func:`latex_escape`)
    align : ``"l"``, ``"c"`` or ``"r"``, the alignment of the lines
    valign : ``"b"`` (default: the last line on the row's baseline, for headers)
        or ``"t"`` (the first line on it, the others below: for a body cell, whose
        extra lines then grow its own row instead of reaching into the row above)

    Verified in ``tests/report/test_paperio.py``; the paper's tables compile
    with it (``make paper``).
    """
    if not lines or not all(isinstance(t, str) for t in lines):
        raise InputError(f"stack needs one or more strings, got {lines!r}")
    if align not in ("l", "c", "r"):
        raise InputError(f"align must be 'l', 'c' or 'r', got {align!r}")
    if valign not in ("b", "t"):
        raise InputError(f"valign must be 'b' or 't', got {valign!r}")
    if len(lines) == 1:
        return lines[0]
    # "\\{}": a line that starts with "[" is not read as the optional argument of "\\"
    return f"\\begin{{tabular}}[{valign}]{{@{{}}{align}@{{}}}}" + r" \\{}".join(lines) + r"\end{tabular}"


def write_table(df, name: str, *, folder: str | os.PathLike, notebook: str | None = None,
                **kwargs) -> Path:
    """Write :func:`table_tex` of ``df`` to ``<folder>/<name>.tex`` (see there)."""
    _check_name(name, "name")
    who = f"notebook {notebook}" if notebook else "perfmodel.report.paperio.write_table"
    text = _HEADER.format(who=who, target=f"nb-{notebook}" if notebook else "paper")
    return _write(Path(folder) / f"{name}.tex", text + table_tex(df, **kwargs))


# the paper's symbol for each parameter whose name is not already its symbol (docs/model.md)
_PARAM_SYMBOLS = {"c_attn": r"c_{\mathrm{attn}}", "c_kv": r"c_{\mathrm{kv}}",
                  "c_kv_mixed": r"c_{\mathrm{mix}}", "P_max": r"P_{\max}"}
_GREEK = ("tau", "gamma")


def param_tex(name: str) -> str:
    """The paper's math symbol for a model parameter name, in ``$...$``.

    ``tau_0`` -> ``$\\tau_{0}$``, ``k_B`` -> ``$k_{B}$``, ``c_kv_mixed`` ->
    ``$c_{\\mathrm{mix}}$`` (the symbols of ``paper/main.tex`` and
    ``docs/model.md``). The one place notebooks turn parameter names into
    symbols for tables, labels and numbers.
    """
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z]+(_[A-Za-z0-9]+)*", name):
        raise InputError(f"parameter name must look like 'k_B' or 'tau_0', got {name!r}")
    if name in _PARAM_SYMBOLS:
        return f"${_PARAM_SYMBOLS[name]}$"
    base, _, sub = name.partition("_")
    head = f"\\{base}" if base in _GREEK else base
    if not sub:
        return f"${head}$"
    sub = sub if "_" not in sub else r"\mathrm{" + sub.replace("_", r"\_") + "}"
    return f"${head}_{{{sub}}}$"
