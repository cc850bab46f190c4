"""Argument checks of the package: one function per kind of argument.

Problem
-------
Public functions check their arguments first and raise one
:class:`~perfmodel.errors.InputError` that names the argument, says what it
must be and shows what it got (``n_boot must be an integer >= 1, got 0``),
instead of failing later with a numpy error.  The same checks (an integer in
a range, a positive finite number, a probability, one of a few choices, a
finite vector) were written in several modules with small differences; this
module is the one copy.

Conventions
-----------
``name`` is the argument as the message should show it: plain (``rate``),
quoted by the caller (``argument 'rate'``, ``` `k` ```), or indexed
(``regime_mix['mixed']``).  Numbers are ``int``, ``float``, numpy scalars or
anything else ``float()`` accepts, except ``bool`` and strings.  Standard
library only at import time (numpy is imported by the functions that need it).
"""
from __future__ import annotations

import math
import sys
from collections.abc import Iterable
from numbers import Integral
from typing import Any

from perfmodel.errors import InputError

__all__ = [
    "check_choice",
    "check_int_range",
    "check_number",
    "check_positive",
    "check_probability",
    "check_real",
    "check_vector",
    "nonpositive_rows_text",
    "rows_text",
]


def _range_text(lo, hi, lo_open: bool = False, hi_open: bool = False) -> str:
    if lo is not None and hi is not None:
        return f"in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {lo}"
    if hi is not None:
        return f"{'<' if hi_open else '<='} {hi}"
    return ""


def _is_float(value: Any) -> bool:
    """A Python or numpy float (numpy is only looked at when it is loaded)."""
    if isinstance(value, float):
        return True
    np = sys.modules.get("numpy")
    return np is not None and isinstance(value, np.floating)


def _to_float(value: Any) -> float | None:
    """``float(value)``, or None where ``float()`` refuses it."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _as_float(name: str, value: Any, what: str) -> float:
    x = None if isinstance(value, (bool, str, bytes)) else _to_float(value)
    if x is None or not math.isfinite(x):
        raise InputError(f"{name} must be {what}, got {value!r}")
    return x


def check_int_range(name: str, value: Any, lo: int | None = None, hi: int | None = None, *,
                    integral_float: bool = False) -> int:
    """Return ``value`` as an int after checking ``lo <= value <= hi``.

    Parameters
    ----------
    name : str
        The argument as the message shows it.
    value : any
        An integer (``int`` or a numpy integer; never ``bool``).
    lo, hi : int, optional
        Inclusive bounds (``None``: unbounded).
    integral_float : bool, default False
        Also accept a finite float with an integer value (``8.0``).

    Returns
    -------
    int

    Raises
    ------
    InputError
        ``'{name} must be an integer >= {lo}, got {value!r}'`` (or ``in [lo,
        hi]``, ``<= hi``, or just ``an integer``).

    Examples
    --------
    >>> check_int_range("n_boot", 200, 1)
    200
    """
    rng = _range_text(lo, hi)
    msg = f"{name} must be an integer{' ' + rng if rng else ''}, got {value!r}"
    if isinstance(value, bool):
        raise InputError(msg)
    if integral_float and _is_float(value) and math.isfinite(value) and float(value).is_integer():
        value = int(value)
    if not isinstance(value, Integral):
        raise InputError(msg)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise InputError(msg)
    return int(value)


def check_number(name: str, value: Any, *, lo: float | None = None, hi: float | None = None,
                 lo_open: bool = False, hi_open: bool = False) -> float:
    """Return ``value`` as a finite float after checking its bounds.

    Parameters
    ----------
    name : str
    value : any
        A finite number.
    lo, hi : float, optional
        Bounds; closed unless ``lo_open`` / ``hi_open``.

    Returns
    -------
    float
        ``value`` converted, within the bounds.

    Raises
    ------
    InputError
        ``'{name} must be a finite number, got ...'`` or ``'{name} must be
        >= lo, got ...'`` (``> lo``, ``<= hi``, ``< hi``, ``in [lo, hi]``).
    """
    x = _as_float(name, value, "a finite number")
    if ((lo is not None and (x < lo or (lo_open and x == lo)))
            or (hi is not None and (x > hi or (hi_open and x == hi)))):
        raise InputError(f"{name} must be {_range_text(lo, hi, lo_open, hi_open)}, "
                         f"got {value!r}")
    return x


def check_real(name: str, value: Any) -> float:
    """Return ``float(value)`` after checking that it is finite.

    Looser than :func:`check_number`: anything ``float()`` accepts passes
    (``True``, ``"2.5"``), as for the constant features of the SLA answers
    (:func:`perfmodel.decisions.step_context.check_constants`), and the two
    failures have messages of their own.

    Raises
    ------
    InputError
        ``'{name} must be a number, got {value!r}'`` (``float()`` refuses it) or
        ``'{name} must be finite, got {value!r}'`` (NaN or inf).

    Examples
    --------
    >>> check_real("features['decode_ctx']", "2.5")
    2.5
    """
    x = _to_float(value)
    if x is None:
        raise InputError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(x):
        raise InputError(f"{name} must be finite, got {value!r}")
    return x


def check_positive(name: str, value: Any, *, allow_zero: bool = False, unit: str = "") -> float:
    """Return ``value`` as a float after checking it is finite and > 0 (>= 0 with ``allow_zero``).

    Parameters
    ----------
    name : str
    value : any
    allow_zero : bool, default False
    unit : str, optional
        Named in the message (``'a positive finite number of ms'``).

    Returns
    -------
    float

    Raises
    ------
    InputError
        ``'{name} must be a positive finite number, got {value!r}'`` (or
        ``non-negative``).

    Examples
    --------
    >>> check_positive("target_ms", 50)
    50.0
    """
    what = f"a {'non-negative' if allow_zero else 'positive'} finite number"
    what += f" of {unit}" if unit else ""
    x = _as_float(name, value, what)
    if x < 0 or (x == 0 and not allow_zero):
        raise InputError(f"{name} must be {what}, got {value!r}")
    return x


def check_probability(name: str, value: Any, *, closed: bool = False) -> float:
    """Return ``value`` as a float in ``(0, 1)`` (``[0, 1]`` when ``closed``).

    Raises
    ------
    InputError
        ``'{name} must be a probability in (0, 1), got {value!r}'``.
    """
    what = f"a probability in {'[0, 1]' if closed else '(0, 1)'}"
    x = _as_float(name, value, what)
    if not (0.0 <= x <= 1.0 if closed else 0.0 < x < 1.0):
        raise InputError(f"{name} must be {what}, got {value!r}")
    return x


def check_choice(name: str, value: Any, choices: Iterable[Any]) -> Any:
    """Return ``value`` if it is one of ``choices``.

    Raises
    ------
    InputError
        ``'{name} must be one of [...], got {value!r}'``.

    Examples
    --------
    >>> check_choice("policy", "fcfs", ("decode_first", "fcfs"))
    'fcfs'
    """
    allowed = list(choices)
    try:
        ok = value in allowed
    except TypeError:  # an unhashable or oddly comparing value
        ok = False
    if not ok:
        raise InputError(f"{name} must be one of {allowed}, got {value!r}")
    return value


def rows_text(mask, index=None, k: int = 5) -> str:
    """Describe the rows where ``mask`` is true, for an error message.

    Parameters
    ----------
    mask : array_like of bool
    index : sequence, optional
        Row labels (e.g. a DataFrame's index; shown with ``repr``); default:
        positions.
    k : int, default 5
        Rows shown before ``...``.

    Returns
    -------
    str
        ``'rows [3, 7, ...] (12 of 500)'``.
    """
    import numpy as np

    mask = np.asarray(mask, dtype=bool)
    bad = np.flatnonzero(mask)
    if index is None:
        labels = ", ".join(str(int(i)) for i in bad[:k])
    else:
        labels = ", ".join(repr(v.item() if isinstance(v, np.generic) else v)
                           for v in (index[i] for i in bad[:k]))
    more = ", ..." if bad.size > k else ""
    return f"rows [{labels}{more}] ({bad.size} of {mask.size})"


def nonpositive_rows_text(y) -> str:
    """Describe the step times of ``y`` that are not finite and > 0, for an error message.

    Parameters
    ----------
    y : array_like of float
        Step times (ms), one per row.

    Returns
    -------
    str
        ``'3 bad rows (first [0, 4, 9])'`` (0-based positions, at most five
        shown), or ``''`` when every value is finite and > 0.
    """
    import numpy as np

    y = np.asarray(y, dtype=float)
    rows = np.flatnonzero(~np.isfinite(y) | (y <= 0))
    return f"{rows.size} bad rows (first {rows[:5].tolist()})" if rows.size else ""


def check_vector(name: str, x: Any, *, min_n: int = 1, n: int | None = None,
                 n_of: str = "`resid`", nonconstant: bool = False):
    """Return ``x`` as a finite 1-D float array, or raise naming ``name``.

    Parameters
    ----------
    name : str
        The argument as messages show it (the diagnostics write ``` `x` ```).
    x : array_like
        1-D, or 2-D with one row or one column (flattened).
    min_n : int, default 1
        Fewest values accepted.
    n : int, optional
        Required length; ``n_of`` names what fixes it.
    nonconstant : bool, default False
        Refuse a vector whose values are all equal (nothing to test).

    Returns
    -------
    numpy.ndarray of float64

    Raises
    ------
    InputError
        None, not numeric, not 1-D, wrong length, non-finite values (rows
        named), fewer than ``min_n`` values, or constant with ``nonconstant``.
    """
    import numpy as np

    if x is None:
        raise InputError(f"{name} is required, got None")
    try:
        a = np.asarray(x, dtype=float)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name} must be numeric: {exc}") from None
    if a.ndim == 2 and 1 in a.shape:
        a = a.ravel()
    if a.ndim != 1:
        raise InputError(f"{name} must be 1-D, got shape {a.shape}")
    if n is not None and a.size != n:
        raise InputError(f"{name} has length {a.size}, expected {n} (the length of {n_of})")
    bad = ~np.isfinite(a)
    if bad.any():
        raise InputError(f"{name} has non-finite values (NaN or inf) at {rows_text(bad)}")
    if a.size < min_n:
        raise InputError(f"{name} has {a.size} values, this test needs at least {min_n}")
    if nonconstant and np.ptp(a) == 0:
        raise InputError(f"{name} is constant ({a[0]!r} for all {a.size} rows): nothing to test")
    return a
