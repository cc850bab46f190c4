"""The FIT.json format: its version, its schema check, and the upgrade of older files.

Problem
-------
``perfmodel fit -o FIT.json`` writes a fitted model that other commands
(``report``, ``predict``, ``diagnose``, ``sla``, ``simulate``) and people read
back, possibly after editing it by hand or after a newer perfmodel wrote it.
A file that is not a valid fit must be refused on load with one message naming
the key and what is wrong -- never turned into negative or infinite
predictions, a wrong SLA answer or an internal error.

Versions
--------
``format_version`` (an integer) is the first key of every FIT.json.

* **1** -- the current format (:data:`FIT_FORMAT_VERSION`).  Files written
  before the format was versioned have no ``format_version``: they hold the
  same keys, and are loaded as version 1 after the same checks.

Upgrade path: a future version ``v + 1`` adds an entry ``v: function`` to
:data:`UPGRADES` that turns a checked version-``v`` dict into a version
``v + 1`` dict; :func:`check_fit_dict` applies them in turn, so every older
file is checked as written and then upgraded step by step.  A version newer
than this perfmodel knows is refused (upgrade perfmodel).

Checks (:func:`check_fit_dict`)
-------------------------------
Required keys ``model``, ``fitted_model``, ``param_names``, ``values``,
``stderr``, ``cov``, ``statistics``, ``optimizer``, ``options``, with their
types; ``fitted_model`` a known model whose parameter names are
``param_names``; ``values`` one finite number per parameter, inside the
model's bounds (``Model.lower`` <= value <= ``Model.upper``); ``stderr`` and
``init`` one number (or null) per parameter; ``cov`` a p x p matrix of
numbers (or null) with a non-negative diagonal; ``statistics`` with integer
``n`` >= 1, ``n_params`` equal to the model's, ``dof``; ``optimizer`` with
``success`` (bool), ``status``, ``nfev`` (int), ``message`` (str);
``options`` an object whose ``relative`` (if given) is a known residual
scale.  Optional keys, when present, have their types (``interval_calibration``
an object, whose contents the interval calibration checks where it is used).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from numbers import Integral, Real
from typing import Any

from perfmodel.core.model import get_model
from perfmodel.errors import InputError

__all__ = ["FIT_FORMAT_VERSION", "UPGRADES", "check_fit_dict"]

#: the version :meth:`perfmodel.core.results.FitResult.summary` writes
FIT_FORMAT_VERSION: int = 1

#: ``{v: upgrade of a checked version-v dict to version v + 1}`` (none yet)
UPGRADES: dict[int, Callable[[dict], dict]] = {}

_REQUIRED = ("model", "fitted_model", "param_names", "values", "stderr", "cov", "statistics",
             "optimizer", "options")
_STAT_INTS = ("n", "n_params", "dof")
_STAT_NUMS = ("rss", "rss_ms", "r2", "rmse", "mae", "mape", "aic", "bic")
#: optional keys and the JSON type each must have
_OPTIONAL = {"formula": str, "units": list, "init": list, "at_bound": list,
             "unidentified": list, "derived": dict, "derived_note": str,
             "dropped": (dict, type(None)), "medians": dict, "provenance": dict,
             "warnings": list, "bootstrap": dict, "interval_calibration": dict}
_JSON_TYPE = {str: "a string", list: "a list", dict: "an object (a dict)", int: "an integer",
              bool: "true or false"}


def _tname(v) -> str:
    return "null" if v is None else type(v).__name__


def _shown(v) -> str:
    return "null" if v is None else f"{type(v).__name__} {v!r}"


def _is_num(v) -> bool:
    return isinstance(v, Real) and not isinstance(v, bool)


def _is_int(v) -> bool:
    return isinstance(v, Integral) and not isinstance(v, bool)


class _Checker:
    """Raise one InputError per problem, prefixed by the file being read."""

    def __init__(self, where: str):
        self.where = where

    def fail(self, msg: str):
        raise InputError(f"{self.where}: {msg}")

    def typed(self, d: dict, key: str, typ, what: str | None = None):
        v = d[key]
        if not isinstance(v, typ):
            types = typ if isinstance(typ, tuple) else (typ,)
            want = what or " or ".join("null" if t is type(None) else _JSON_TYPE[t]
                                       for t in types)
            self.fail(f"{key!r} must be {want}, got {_shown(v)}"[:300])
        return v

    def numbers(self, key: str, v, p: int, *, allow_null: bool) -> list:
        if not isinstance(v, list):
            self.fail(f"{key!r} must be a list of {p} numbers, got {_tname(v)}")
        if len(v) != p:
            self.fail(f"{key!r} has {len(v)} values, the model has {p} parameters")
        for i, x in enumerate(v):
            if x is None and allow_null:
                continue
            if not _is_num(x) or not math.isfinite(x):
                self.fail(f"{key!r}[{i}] must be a finite number{' or null' if allow_null else ''}"
                          f", got {x!r}")
        return v


def _check_version(d: dict, c: _Checker) -> int:
    v = d.get("format_version", 1)
    if not _is_int(v):
        c.fail(f"'format_version' must be an integer, got {_shown(v)}")
    if v < 1 or v > FIT_FORMAT_VERSION:
        c.fail(f"'format_version' {v} is not supported: this perfmodel reads FIT.json versions "
               f"1 to {FIT_FORMAT_VERSION}" + (" (upgrade perfmodel)" if v > FIT_FORMAT_VERSION
                                                else ""))
    return int(v)


def _check_params(d: dict, c: _Checker):
    for key in ("model", "fitted_model"):
        c.typed(d, key, str)
    try:
        m = get_model(d["fitted_model"])
        get_model(d["model"])
    except InputError as e:
        c.fail(str(e))
    names = d["param_names"]
    if not isinstance(names, list) or names != m.param_names:
        c.fail(f"'param_names' {names!r} are not the parameters {m.param_names} of model "
               f"{m.name!r}")
    p = m.n_params
    values = c.numbers("values", d["values"], p, allow_null=False)
    # a relative 1e-9 of slack: a fit at a bound is divided back from the scaled problem
    out = [(n, v, lo, hi) for n, v, lo, hi in zip(names, values, m.lower, m.upper)
           if not lo - 1e-9 * abs(lo) <= v <= hi + 1e-9 * abs(hi)]
    if out:
        n, v, lo, hi = out[0]
        c.fail(f"parameter {n} = {v!r} is outside the bounds [{lo:g}, {hi:g}] of model "
               f"{m.name!r}" + (f" (and {len(out) - 1} more)" if len(out) > 1 else ""))
    stderr = c.numbers("stderr", d["stderr"], p, allow_null=True)
    if any(s is not None and s < 0 for s in stderr):
        c.fail("'stderr' has negative values")
    if "init" in d:
        c.numbers("init", d["init"], p, allow_null=True)
    cov = d["cov"]
    if not isinstance(cov, list) or len(cov) != p or any(
            not isinstance(r, list) or len(r) != p for r in cov):
        c.fail(f"'cov' must be a {p} x {p} matrix (a list of {p} lists of {p} numbers) for "
               f"model {m.name!r}")
    for i, row in enumerate(cov):
        c.numbers(f"cov[{i}]", row, p, allow_null=True)
        if row[i] is not None and row[i] < 0:
            c.fail(f"'cov' has a negative variance on its diagonal (parameter {names[i]})")
    for key in ("at_bound", "unidentified"):
        if key in d and (not isinstance(d[key], list) or not set(d[key]) <= set(names)):
            c.fail(f"{key!r} must be a list of parameter names of {m.name!r}, got {d[key]!r}")
    return m


def _check_sections(d: dict, m, c: _Checker) -> None:
    st = c.typed(d, "statistics", dict)
    for k in _STAT_INTS:
        if not _is_int(st.get(k)):
            c.fail(f"'statistics'.{k} must be an integer, got {_shown(st.get(k))}")
    if st["n"] < 1 or st["n_params"] != m.n_params:
        c.fail(f"'statistics' has n = {st['n']}, n_params = {st['n_params']}; expected n >= 1 "
               f"and n_params = {m.n_params} (model {m.name!r})")
    for k in _STAT_NUMS:
        v = st.get(k)
        if v is not None and not _is_num(v):
            c.fail(f"'statistics'.{k} must be a number or null, got {_shown(v)}")
    opt = c.typed(d, "optimizer", dict)
    for k, ok, what in (("success", lambda v: isinstance(v, bool), "true or false"),
                        ("status", _is_int, "an integer"), ("nfev", _is_int, "an integer"),
                        ("message", lambda v: isinstance(v, str), "a string")):
        if k not in opt:
            c.fail(f"'optimizer'.{k} is missing")
        if not ok(opt[k]):
            c.fail(f"'optimizer'.{k} must be {what}, got {_shown(opt[k])}")
    options = c.typed(d, "options", dict)
    if options.get("relative") is not None:
        from perfmodel.core.scale import SCALES

        if options["relative"] not in SCALES:
            c.fail(f"'options'.relative must be one of {list(SCALES)}, got "
                   f"{options['relative']!r}")
    for key, typ in _OPTIONAL.items():
        if key in d:
            c.typed(d, key, typ)
    for key in ("derived", "medians"):
        for k, v in d.get(key, {}).items():
            if v is not None and not _is_num(v):
                c.fail(f"{key!r}.{k} must be a number or null, got {_shown(v)}")


def check_fit_dict(d: Any, source: str | None = None) -> dict:
    """Check a parsed FIT.json against the schema; return it upgraded to the current version.

    Parameters
    ----------
    d : any
        The parsed JSON document.
    source : str, optional
        The file, named in messages.

    Returns
    -------
    dict
        ``d`` (not modified) or an upgraded copy, with ``format_version`` set
        to :data:`FIT_FORMAT_VERSION`.

    Raises
    ------
    InputError
        The first problem found: a missing key (``"missing key
        'optimizer'"``), a wrong type, a null where an object is needed, a length
        that does not match the model's parameter count, a parameter outside
        the model's bounds or not finite, an unknown ``format_version``.

    Examples
    --------
    >>> check_fit_dict({"format_version": 99}, "f.json")
    Traceback (most recent call last):
    ...
    perfmodel.errors.InputError: fit file 'f.json': 'format_version' 99 is not supported: this perfmodel reads FIT.json versions 1 to 1 (upgrade perfmodel)
    """
    c = _Checker(f"fit file {source!r}" if source else "fit file")
    if not isinstance(d, dict):
        c.fail(f"not a perfmodel fit: the document is {_tname(d)}, not a JSON object")
    version = _check_version(d, c)
    missing = [k for k in _REQUIRED if k not in d]
    if missing:
        c.fail(f"not a perfmodel fit: missing key{'s' if len(missing) > 1 else ''} "
               f"{', '.join(repr(k) for k in missing)}")
    m = _check_params(d, c)
    _check_sections(d, m, c)
    out = dict(d)
    while version < FIT_FORMAT_VERSION:
        out = UPGRADES[version](out)
        version += 1
    out["format_version"] = FIT_FORMAT_VERSION
    return out
