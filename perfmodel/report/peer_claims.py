"""Stated accuracies of peer simulators, read from the cited-claims file.

Problem
-------
The related-work section of the paper reports the accuracy each peer
simulator's authors state for it (Vidur, LLMServingSim, BLIS, ...).  Those
numbers must not be typed into the paper by hand, and a reader must be able
to see where each was read: they live in ``data/literature/peer_claims.csv``,
one row per claim with the reference's bib key, what is predicted, how the
simulator is calibrated, the metric, the bound (``<`` an upper bound, ``=`` a
value), the value in percent, where in the source it is stated, what it was
evaluated on and a public URL of the source (``data/literature/README.md``).
:func:`load_peer_claims` reads that file and refuses a malformed one with one
:class:`~perfmodel.errors.InputError` naming the problem (the file, the
column, the line), never a parser's traceback; given the bibliography it
also refuses a bib key the paper cannot cite.  Notebook
``20_step_peers`` renders the claims into ``paper/tables/peer_claims.tex``.

The claims are each author's own data, hardware and metric: the table says
so, and nothing here compares them with each other or with the paper's
errors.

Verified against: ``tests/report/test_peer_claims.py`` (the committed file
loads and every bib key is in ``paper/refs.bib``; malformed files are
refused with the message naming the problem).
"""
from __future__ import annotations

import csv
import io
import math
import os
import re
from pathlib import Path

from perfmodel.errors import InputError

__all__ = ["BOUNDS", "COLUMNS", "bib_keys", "format_claim", "load_peer_claims"]

#: the columns of the claims file, in order
COLUMNS = ("system", "bibkey", "predicts", "calibrated_on", "metric", "stated_bound",
           "stated_value", "where", "evaluated_on", "source")
#: stated_bound -> its meaning ("<": the source gives an upper bound; "=": the value itself)
BOUNDS = {"<": "less than", "=": "equal to"}

_KEY = re.compile(r"[A-Za-z0-9_:.-]+")
_BIB_ENTRY = re.compile(r"@\s*[A-Za-z]+\s*\{\s*([^,\s]+)\s*,")


def bib_keys(path: str | os.PathLike) -> set[str]:
    """The entry keys of a BibTeX file (``@article{key, ...`` -> ``key``).

    Raises
    ------
    InputError
        ``path`` is not a regular file.
    """
    p = Path(path)
    if not p.is_file():
        raise InputError(f"bibliography {p} does not exist or is not a regular file")
    return set(_BIB_ENTRY.findall(p.read_text(encoding="utf-8")))


def _rows(p: Path) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """The header and the (line number, fields) of each non-blank record of a CSV file."""
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{p}: not UTF-8 text ({e})") from None
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    out, header = [], None
    try:
        for fields in reader:
            if not any(f.strip() for f in fields):
                continue
            if header is None:
                header = [f.strip() for f in fields]
            else:
                out.append((reader.line_num, fields))
    except csv.Error as e:
        raise InputError(f"{p}, line {reader.line_num}: not valid CSV ({e})") from None
    if header is None:
        raise InputError(f"{p} is empty: it needs the header {','.join(COLUMNS)} and one row per claim")
    return header, out


def load_peer_claims(path: str | os.PathLike, *, bib: str | os.PathLike | None = None):
    """The peer simulators' stated accuracies, one row per claim.

    Parameters
    ----------
    path : str or os.PathLike
        The claims file (``data/literature/peer_claims.csv``): a CSV with
        exactly the header :data:`COLUMNS`, in any order.
    bib : str, os.PathLike or None
        A BibTeX file (``paper/refs.bib``); when given, every ``bibkey``
        must be an entry of it.

    Returns
    -------
    pandas.DataFrame
        The columns :data:`COLUMNS` in that order, in the file's row order;
        ``stated_value`` a float (percent), every other column text with
        surrounding blanks removed.

    Raises
    ------
    InputError
        The file is missing, empty, not UTF-8 or not valid CSV; a column is
        missing or unknown (named); a row has too few or too many fields, an
        empty cell, a ``stated_bound`` not in :data:`BOUNDS`, a
        ``stated_value`` that is not a number in (0, 100], a malformed
        ``bibkey`` or a ``source`` that is not an ``http(s)`` URL (file, line
        and column named); two rows state the same claim (same ``bibkey``,
        ``metric``, ``evaluated_on``); a ``bibkey`` is not in ``bib``.

    Examples
    --------
    >>> claims = load_peer_claims("data/literature/peer_claims.csv",
    ...                           bib="paper/refs.bib")            # doctest: +SKIP
    >>> claims.loc[0, ["system", "stated_bound", "stated_value"]].tolist()  # doctest: +SKIP
    ['Vidur', '<', 9.0]
    """
    import pandas as pd

    p = Path(path)
    if not p.is_file():
        raise InputError(f"claims file {p} does not exist or is not a regular file")
    header, rows = _rows(p)
    missing = [c for c in COLUMNS if c not in header]
    unknown = [c for c in header if c not in COLUMNS]
    if missing or unknown:
        raise InputError(f"{p}: header must hold exactly the columns {list(COLUMNS)}; "
                         f"missing {missing}, unknown {unknown}")
    if len(set(header)) != len(header):
        dup = sorted({c for c in header if header.count(c) > 1})
        raise InputError(f"{p}: columns named twice in the header: {dup}")
    if not rows:
        raise InputError(f"{p} has a header but no claims")
    records, seen = [], {}
    for line, fields in rows:
        where = f"{p}, line {line}"
        if len(fields) != len(header):
            raise InputError(f"{where}: {len(fields)} fields, the header has {len(header)}")
        rec = {c: v.strip() for c, v in zip(header, fields)}
        empty = [c for c in COLUMNS if not rec[c]]
        if empty:
            raise InputError(f"{where}: empty {empty} (every column is required)")
        if rec["stated_bound"] not in BOUNDS:
            raise InputError(f"{where}: stated_bound {rec['stated_bound']!r} is not one of "
                             f"{list(BOUNDS)} ('<' an upper bound, '=' the stated value)")
        try:
            value = float(rec["stated_value"])
        except ValueError:
            raise InputError(f"{where}: stated_value {rec['stated_value']!r} is not a number "
                             "(percent, as printed in the source)") from None
        if not (math.isfinite(value) and 0 < value <= 100):
            raise InputError(f"{where}: stated_value {rec['stated_value']!r} is not a percentage "
                             "in (0, 100]")
        rec["stated_value"] = value
        if not _KEY.fullmatch(rec["bibkey"]):
            raise InputError(f"{where}: bibkey {rec['bibkey']!r} is not a BibTeX key "
                             "(letters, digits, '_', ':', '.', '-')")
        if not re.fullmatch(r"https?://\S+", rec["source"]):
            raise InputError(f"{where}: source {rec['source']!r} is not a public http(s) URL")
        claim = (rec["bibkey"], rec["metric"], rec["evaluated_on"])
        if claim in seen:
            raise InputError(f"{where}: the same claim as line {seen[claim]} "
                             f"(bibkey, metric, evaluated_on = {claim})")
        seen[claim] = line
        records.append(rec)
    if bib is not None:
        keys = bib_keys(bib)
        absent = sorted({r["bibkey"] for r in records} - keys)
        if absent:
            raise InputError(f"{p}: bibkeys not in {bib}: {absent}")
    return pd.DataFrame.from_records(records, columns=list(COLUMNS))


def format_claim(bound: str, value: float) -> str:
    """The stated value as LaTeX: ``'<'``, 9.0 -> ``'$<$\\,9'``; ``'='``, 1.9 -> ``'1.9'``.

    The number is printed as the source printed it (shortest form, no
    rounding); the bound as its symbol.

    Raises
    ------
    InputError
        ``bound`` is not in :data:`BOUNDS` or ``value`` is not a finite number.
    """
    if bound not in BOUNDS:
        raise InputError(f"bound must be one of {list(BOUNDS)}, got {bound!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"value must be a finite number, got {value!r}")
    text = f"{value:g}"
    return f"$<$\\,{text}" if bound == "<" else text
