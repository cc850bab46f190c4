"""Numbers for the paper: LaTeX macro names, formatting, per-notebook fragments and their assembly.

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
    _DIGITS,
    _HEADER,
    _MACRO_RE,
    _check_name,
    _write,
)

# ---------------------------------------------------------------------------
# numbers
# ---------------------------------------------------------------------------

def macro_name(*parts: Any) -> str:
    """Join ``parts`` into a valid LaTeX macro name (letters only), CamelCase.

    Digits become words (``2`` -> ``Two``) and every other character
    separates words: ``macro_name('nb02', 'tau_0', 'ci')`` gives
    ``'NbZeroTwoTauZeroCi'``.
    """
    if not parts:
        raise InputError("macro_name needs at least one part")
    out = []
    for part in parts:
        if not isinstance(part, (str, int)) or isinstance(part, bool):
            raise InputError(f"macro_name parts must be str or int, got {part!r}")
        for word in re.split(r"[^A-Za-z0-9]+", str(part)):
            for tok in re.findall(r"[A-Za-z]+|[0-9]", word):
                out.append(_DIGITS[int(tok)] if tok.isdigit() else tok[0].upper() + tok[1:])
    name = "".join(out)
    if not name:
        raise InputError(f"macro_name: parts {parts!r} contain no letters or digits")
    return name


def count_word(n: Any) -> str:
    """A count as the word prose uses for it: ``0``-``9`` spelled out, larger counts as digits.

    Problem: design counts (runs, schedules, cases) read as words in the
    text ("two, three and four runs"); typed by hand they drift from the
    data. A notebook writes them through this one rule instead.

    Parameters
    ----------
    n : non-negative integer (a bool is refused)

    Returns
    -------
    ``'zero'`` ... ``'nine'``, else ``str(n)``

    Verified in ``tests/report/test_paperio.py`` (each word, 10 and 12 as digits, bad input).
    """
    if isinstance(n, bool) or not isinstance(n, _numbers.Integral) or n < 0:
        raise InputError(f"count_word needs a non-negative integer, got {n!r}")
    n = int(n)
    return _DIGITS[n].lower() if n < len(_DIGITS) else str(n)


def word_list(items: Iterable[Any], *, empty: str = "none") -> str:
    """Items as prose lists them: ``'a'``, ``'a and b'``, ``'a, b and c'``; ``empty`` when none.

    Problem: macros that name the data sets or regimes where something holds
    ("the token factor helps on H200 and H100") were joined by two local
    rules in one notebook ("a, b" and "a, b and c"); one rule here keeps
    every such list alike.

    Parameters
    ----------
    items : iterable of str
        Already escaped for LaTeX where needed (this function adds nothing).
    empty : str
        What an empty list reads as.

    Returns
    -------
    str

    Verified in ``tests/report/test_paperio.py`` (0, 1, 2 and 3 items, bad input).
    """
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise InputError(f"word_list needs an iterable of strings, got {items!r}")
    items = list(items)
    if not all(isinstance(x, str) and x for x in items) or not isinstance(empty, str):
        raise InputError(f"word_list items and empty must be non-empty strings, got {items!r}")
    if not items:
        return empty
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def format_number(value: Any, digits: int = 3, *, fixed: bool = False, percent: bool = False,
                  thousands: bool = True) -> str:
    """Format one number for LaTeX text.

    Parameters
    ----------
    value : int, float or numpy scalar (a ``str`` is returned unchanged)
    digits : significant digits (``fixed=False``) or decimals (``fixed=True``)
    fixed : use ``digits`` decimals instead of significant digits
    percent : append ``\\%``
    thousands : group integers of 5 digits or more with ``{,}``

    Floats with ``|x| >= 1e6`` or ``0 < |x| < 1e-3`` become
    ``\\ensuremath{m\\times 10^{e}}``; minus signs are typeset as math
    minus; NaN becomes ``n/a``.  Integers are printed exactly.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, _numbers.Real):
        raise InputError(f"value must be a real number or a str, got {value!r} ({type(value).__name__})")
    if not isinstance(digits, int) or isinstance(digits, bool) or not 0 <= digits <= 15:
        raise InputError(f"digits must be an integer in [0, 15], got {digits!r}")
    if not fixed and digits < 1:
        raise InputError("digits must be >= 1 for significant-digit formatting")
    suffix = r"\%" if percent else ""
    if isinstance(value, _numbers.Integral):
        v = int(value)
        s = f"{abs(v):,}".replace(",", "{,}") if thousands and abs(v) >= 10000 else str(abs(v))
        return ("$-$" if v < 0 else "") + s + suffix
    x = float(value)
    if math.isnan(x):
        return "n/a"
    if math.isinf(x):
        return (r"$-\infty$" if x < 0 else r"$\infty$")
    sign = "$-$" if x < 0 else ""
    a = abs(x)
    if a != 0 and (a >= 1e6 or a < 1e-3) and not fixed:
        m, e = f"{a:.{digits - 1}e}".split("e")
        return rf"{sign}\ensuremath{{{m}\times 10^{{{int(e)}}}}}{suffix}"
    if fixed:
        s = f"{a:.{digits}f}"
    elif a == 0:
        s = "0"
    else:
        r = float(f"{a:.{digits - 1}e}")  # round to `digits` significant digits first
        s = f"{r:.{max(0, digits - 1 - math.floor(math.log10(r)))}f}"
    if thousands and a >= 10000 and "." not in s:
        s = f"{int(s):,}".replace(",", "{,}")
    if float(s.replace("{,}", "")) == 0:
        sign = ""
    return sign + s + suffix


def _three_reals(named: tuple, prefix: str = "") -> list[float] | None:
    """A point and its interval ends as floats (None if any is NaN); InputError naming a bad one.

    The one input check of :func:`format_estimate` and :func:`format_paired`
    (``prefix`` leads the message).
    """
    vals = []
    for name, v in named:
        if isinstance(v, bool) or not isinstance(v, _numbers.Real):
            raise InputError(f"{prefix}{name} must be a real number, got {v!r}")
        vals.append(float(v))
    return None if any(math.isnan(v) for v in vals) else vals


def format_estimate(value: Any, lo: Any, hi: Any, digits: int = 2) -> str:
    """An estimate with its interval for text or a table cell: ``0.27 [0.14, 0.39]``.

    Problem: an effect size printed alone (the lack-of-fit ``sigma_b /
    sigma`` of the comparison tables) hides how little a few groups
    determine it; every such estimate is printed with its interval, each
    number by :func:`format_number` with ``digits`` significant digits.

    Parameters
    ----------
    value, lo, hi : real numbers (NaN anywhere gives ``--``)
    digits : significant digits of each; one more (up to 4) while the two
        ends of an interval of non-zero width would print alike

    Returns
    -------
    str

    Verified in ``tests/report/test_paperio.py``.
    """
    vals = _three_reals((("value", value), ("lo", lo), ("hi", hi)), "format_estimate: ")
    if vals is None:
        return "--"
    if not vals[1] <= vals[0] <= vals[2]:
        raise InputError(f"format_estimate: interval [{vals[1]}, {vals[2]}] does not hold "
                         f"the estimate {vals[0]}")
    v, a, b = (format_number(x, digits) for x in vals)
    if a == b and vals[1] < vals[2] and digits < 4:  # a narrow interval: one digit more
        return format_estimate(value, lo, hi, digits + 1)
    return f"{v} [{a}, {b}]"


def format_bound(value: Any, limit: float, digits: int = 2, *, latex: bool = True) -> str:
    """``value`` formatted, or "below ``limit``" when it is smaller in magnitude.

    For quantities at rounding level (a singular value ratio of 1e-16, a change
    of 1e-14 ms): their digits are floating-point noise that moves with the
    BLAS kernel, so only the bound is a claim.  ``latex=False`` gives plain
    text for notebook output.

    >>> format_bound(7.8e-17, 1e-12, latex=False)
    '< 1e-12'
    >>> format_bound(0.0091, 1e-12, latex=False)
    '0.0091'
    """
    if not (isinstance(limit, _numbers.Real) and limit > 0):
        raise InputError(f"limit must be a positive number, got {limit!r}")
    x = float(value)
    if math.isfinite(x) and abs(x) < limit:
        e = math.log10(limit)
        if latex:
            return (rf"\ensuremath{{<10^{{{int(e)}}}}}" if e == int(e)
                    else rf"\ensuremath{{<{format_number(limit, digits)}}}")
        return f"< {limit:g}"
    if latex:
        return format_number(x, digits)
    return f"{float(f'{x:.{digits - 1}e}'):g}"


def format_to_uncertainty(value: Any, uncertainty: float, *, max_digits: int = 3) -> str:
    """``value`` rounded to the decimal place of the leading digit of ``uncertainty``.

    The printed digits then stop where the uncertainty starts (a bootstrap
    endpoint whose Monte Carlo range is 130 is printed to the hundred: 200),
    and never exceed ``max_digits`` significant digits.  A zero or non-finite
    ``uncertainty`` falls back to ``max_digits`` significant digits.

    >>> format_to_uncertainty(213.0, 130.0)
    '200'
    >>> format_to_uncertainty(0.2081, 0.062)
    '0.21'
    """
    x = float(value)
    u = abs(float(uncertainty))
    if not math.isfinite(x) or x == 0:
        return format_number(x, max_digits)
    if not math.isfinite(u) or u == 0:
        return format_number(x, max_digits)
    place = math.floor(math.log10(u))                   # 10**place: the uncertain digit
    sig = max(1, min(max_digits, math.floor(math.log10(abs(x))) - place + 1))
    if math.floor(math.log10(abs(x))) < place:          # |value| below the uncertainty
        return "0" if abs(x) < 0.5 * 10.0**place else format_number(math.copysign(10.0**place, x), 1)
    return format_number(float(f"{x:.{sig - 1}e}"), sig)


def interval_excludes_zero(lo: Any, hi: Any) -> bool:
    """Whether the interval ``[lo, hi]`` of a difference excludes zero (the data resolve its sign).

    False when either end is NaN: an interval that was not computed resolves nothing.

    >>> interval_excludes_zero(0.2, 1.4), interval_excludes_zero(-0.3, 0.8)
    (True, False)
    """
    a, b = float(lo), float(hi)
    if math.isnan(a) or math.isnan(b):
        return False
    if a > b:
        raise InputError(f"lo must not exceed hi, got [{a}, {b}]")
    return a > 0 or b < 0


def format_paired(diff: Any, lo: Any, hi: Any, *, decimals: int = 0, star: bool = True,
                  point: bool = True, latex: bool = False) -> str:
    """A paired difference and its interval for a table cell: ``+3 [+2, +4]*``.

    Problem: a difference of two models' held-out MAPE on the same steps has
    an interval, and both the difference and the interval must print the same
    under every BLAS kernel and CPU.  The MAPEs themselves agree to about
    1e-5 points across OpenBLAS kernels for most fits, but a multi-start fit
    that lands in another optimum under another kernel moves them by up to a
    few tenths (Splitwise ``seed + gamma`` against the record: +5.05 [+2.47,
    +8.04] under one kernel, +4.86 [+2.24, +7.87] under another; the vLLM-CPU
    model of record under extrapolation by 0.03): tenths are not supported,
    so ``decimals=0`` (the default) prints whole points.  Every value is
    printed signed and keeps the sign of the unrounded value (an end of -0.3
    prints ``-0``, so that ``[-0, +1]`` reads as containing zero and ``[-1,
    -0]*`` as not; only an exact zero prints ``+0``), followed by ``*``
    (``star``) when the interval excludes zero (:func:`interval_excludes_zero`,
    decided on the unrounded ends, so a difference of a few tenths that the
    data resolve is starred although it prints ``-0``). ``point=False`` prints
    the interval alone. NaN gives ``--``. ``latex=True`` typesets the signs as
    math (``$-$``, ``$+$``) for running text; table cells keep the plain
    characters.

    >>> format_paired(0.04, -0.26, 0.31)
    '+0 [-0, +0]'
    >>> format_paired(-0.5, -0.6, -0.3)
    '-0 [-1, -0]*'
    >>> format_paired(2.61, 2.42, 2.83)
    '+3 [+2, +3]*'
    >>> format_paired(6.96, 0.8, 15.0, decimals=1)
    '+7.0 [+0.8, +15.0]*'
    """
    if not isinstance(decimals, int) or isinstance(decimals, bool) or not 0 <= decimals <= 6:
        raise InputError(f"decimals must be an integer in [0, 6], got {decimals!r}")
    vals = _three_reals((("diff", diff), ("lo", lo), ("hi", hi)))
    if vals is None:
        return "--"
    signed = lambda v: f"{math.copysign(round(abs(v), decimals), v) if v else 0.0:+.{decimals}f}"
    text = f"[{signed(vals[1])}, {signed(vals[2])}]"
    if point:
        text = f"{signed(vals[0])} {text}"
    if latex:
        text = re.sub(r"(?<![0-9])([+-])", r"$\1$", text)
    return text + ("*" if star and interval_excludes_zero(vals[1], vals[2]) else "")


def _macro_lines(values: Mapping[str, str]) -> str:
    return "".join(f"\\newcommand{{\\{k}}}{{{v}}}\n" for k, v in sorted(values.items()))


def write_numbers(values: Mapping[str, Any], fragment: str, *, folder: str | os.PathLike,
                  digits: int | Mapping[str, int] = 3, fixed: bool | Iterable[str] = False,
                  percent: Iterable[str] = ()) -> dict[str, str]:
    """Write ``values`` as LaTeX macros to ``<folder>/<fragment>.tex``.

    Parameters
    ----------
    values : mapping macro name -> number or preformatted str.  Names are
        letters only (LaTeX rule; build them with :func:`macro_name`).
    fragment : file stem, normally the notebook's name
    folder : the fragments folder (``paper/numbers``)
    digits : significant digits for every float, or a mapping per name
        (names not in the mapping get 3)
    fixed : True, or the names formatted with ``digits`` decimals
    percent : names that get a ``\\%`` suffix

    Returns
    -------
    dict name -> the formatted text (sorted), handy to print in the notebook.

    The file is rewritten whole on every call: a fragment holds exactly the
    numbers of its notebook's last run.
    """
    if not isinstance(values, Mapping) or not values:
        raise InputError("values must be a non-empty mapping of macro name -> number")
    _check_name(fragment, "fragment")
    bad = [k for k in values if not isinstance(k, str) or not _MACRO_RE.match(k)]
    if bad:
        raise InputError(f"macro names must be letters only (LaTeX rule): {len(bad)} bad, "
                         f"first {bad[:5]!r}; build names with macro_name()")
    percent = set(percent)
    fixed_set = set(values) if fixed is True else (set() if fixed is False else set(fixed))
    unknown = (percent | fixed_set) - set(values)
    if unknown:
        raise InputError(f"percent/fixed name macros that are not in values: {sorted(unknown)}")
    out = {}
    for k, v in values.items():
        d = digits.get(k, 3) if isinstance(digits, Mapping) else digits
        try:
            out[k] = format_number(v, d, fixed=k in fixed_set, percent=k in percent)
        except InputError as e:
            raise InputError(f"number {k!r}: {e}") from None
    text = _HEADER.format(who=f"notebook {fragment}", target=f"nb-{fragment}") + _macro_lines(out)
    _write(Path(folder) / f"{fragment}.tex", text)
    return dict(sorted(out.items()))


_DEF_RE = re.compile(r"^\\newcommand\{\\([A-Za-z]+)\}\{(.*)\}\s*$")


def read_numbers(path: str | os.PathLike) -> dict[str, str]:
    """Read the macros of one fragment (or of ``numbers.tex``) back."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"numbers file {p} does not exist")
    out = {}
    for i, line in enumerate(p.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("%"):
            continue
        m = _DEF_RE.match(line)
        if not m:
            raise InputError(f"{p}:{i}: not a \\newcommand line: {line[:80]!r}")
        out[m.group(1)] = m.group(2)
    return out


def assemble_numbers(folder: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Join every ``<folder>/*.tex`` fragment into ``out`` (``paper/numbers.tex``).

    Fragments are taken in name order, each under a comment naming it; a
    macro defined by two fragments raises :class:`InputError` naming both.
    With no fragments, ``out`` holds only its header (the paper then fails
    to compile on the first missing macro, which is what should happen).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"numbers folder {folder} does not exist")
    seen: dict[str, str] = {}
    parts = [_HEADER.format(who="perfmodel.report.paperio.assemble_numbers from paper/numbers/*.tex",
                            target="paper")]
    for frag in sorted(folder.glob("*.tex")):
        vals = read_numbers(frag)
        dup = sorted(k for k in vals if k in seen)
        if dup:
            raise InputError(f"macros defined twice: {dup[:5]} in {frag.name} and "
                             f"{seen[dup[0]]} ({len(dup)} in all)")
        for k in vals:
            seen[k] = frag.name
        parts.append(f"% --- {frag.name}\n" + _macro_lines(vals))
    return _write(Path(out), "".join(parts))
