"""The stored form of a fit's interval calibration (FIT.json key ``interval_calibration``).

Problem
-------
:func:`perfmodel.stats.intervals.calibrate_intervals` measures, at fit
time, the fit-scale residuals of held-out steps (cross-validation on the
fold engine) and keeps, per regime, the finite-sample conformal quantiles
of those residuals at a grid of levels.  ``perfmodel predict --interval``
reads them back from FIT.json.  This module owns the stored form: the
constants that name it and :func:`check_interval_calibration`, the one
validator (it raises :class:`perfmodel.errors.InputError` naming the first
problem).  Reading FIT.json only checks that the key holds an object
(:mod:`perfmodel.core.fit_format`); its contents are validated where they
are used (:func:`perfmodel.stats.intervals.conformal_interval`, so
``perfmodel predict --interval`` exits 2 on a damaged calibration).  Fitting
and applying the calibration live in :mod:`perfmodel.stats.intervals`
(layers: core < stats).

The stored object (JSON, self-contained)
----------------------------------------
``version``
    :data:`VERSION` (an integer).
``method``
    :data:`METHOD` (``'mondrian-cv-conformal'``).
``scale``
    the fit scale whose residual is the score (:mod:`perfmodel.core.scale`).
``levels``
    increasing central coverage levels in (0, 1).
``regime_rule``
    ``{'phase': {'prefill_ratio': r}, 'length_thresholds_ms': [t1, t2]}``: a
    step's phase is :func:`perfmodel.stats.validation.regime` with
    ``prefill_ratio`` ``r``; its length is ``short`` when its predicted time
    is below ``t1`` ms, ``long`` at or above ``t2``, else ``medium``.
``min_count``
    the fewest residuals a pool needs to be used.
``pools``
    ``{name: {'n': n, 'lower': [...], 'upper': [...]}}``, one lower and one
    upper residual quantile per level (``null``: no finite quantile at that
    level).  Names are ``'<phase>|<length>'`` cells, ``'<phase>|*'`` and
    ``'*|*'`` (every step).
``folds``
    how the held-out residuals were made (scheme, k, seed, time_ordered,
    block, n_steps).
``quantile_rule`` (optional)
    how the pools' bounds were computed: ``'cluster-subsample-interpolated'``
    (one score per configuration, subsampled, interpolated rank; written
    since this key exists) or ``'step-rank'`` (the finite-sample step rank; a
    calibration without the key was made so).  Both are read the same way:
    the bounds are stored, only their meaning is recorded.
``clusters`` (optional)
    the column whose rows were one cluster (``'config'``), or ``'steps'``.
``runs`` (optional)
    which calibration made the scores: ``{'calibration': 'within-run',
    'n_runs': m}`` (folds inside the trace taken as one run; ``m`` > 1 when
    several runs were pooled, e.g. several traces with ``--interval-calibration
    within-run``; a calibration without the key was made on one run) or
    ``{'calibration': 'across-runs',
    'column': c, 'n_runs': m, 'labels': [...]}`` (every score from a refit on
    the other runs of column ``c``, ``m >= 2``).
``run_term`` (optional)
    the run-level term added to the interval of a step of another run
    (:mod:`perfmodel.stats.run_term`): ``{'sd': sd, 'source': 'run-sd' |
    'run-traces', 'n_runs': n | null, ...}`` (``sd`` >= 0, log scale; with
    ``run-traces`` also ``ratios`` and ``mean_log_ratio`` of the runs it was
    estimated from).  Without the key there is none (sd 0).
``siblings`` (optional)
    other traces whose held-out scores were pooled with the fit's own
    (:func:`perfmodel.stats.intervals.sibling_scores`): ``{'labels': [...],
    'n_steps': [...], 'n_clusters': [...], 'spread_ratio': [...]}``, one
    entry per sibling (``spread_ratio``: its scores' median absolute
    deviation over the fit's own; optional).
    Without the key the pools hold the fit's own scores only.

Verification
------------
``tests/core/test_interval_calibration.py``: a stored calibration passes
and survives a FIT.json round trip; each kind of damage (missing key,
wrong version, unsorted levels, a pool with the wrong number of
quantiles, lower above upper, a cell of an unknown phase) raises an
InputError that names it.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from itertools import pairwise
from typing import Any

from perfmodel.errors import InputError

__all__ = ["ACROSS_RUNS", "ALL", "CALIBRATIONS", "KEY", "LENGTHS", "METHOD", "PHASES", "QUANTILE_RULES",
           "RUN_TERM", "SIBLINGS", "VERSION", "WITHIN_RUN", "check_interval_calibration", "pool_chain"]

#: the FIT.json key
KEY = "interval_calibration"
#: the stored form's version
VERSION = 1
#: the method name
METHOD = "mondrian-cv-conformal"
#: the ways pool bounds may have been computed (optional key ``quantile_rule``)
QUANTILE_RULES = ("cluster-subsample-interpolated", "step-rank")
#: phase labels (those of :func:`perfmodel.stats.validation.regime`)
PHASES = ("decode-only", "mixed", "prefill-heavy")
#: length labels
LENGTHS = ("short", "medium", "long")
#: the pool of every step
ALL = "*|*"
#: calibrations (optional key ``runs``): folds inside one run, or out-of-run folds
WITHIN_RUN, ACROSS_RUNS = "within-run", "across-runs"
CALIBRATIONS = (WITHIN_RUN, ACROSS_RUNS)
#: the optional sub-key of the run-level term
RUN_TERM = "run_term"
#: the optional key of the sibling traces whose scores were pooled
SIBLINGS = "siblings"

_KEYS = ("version", "method", "scale", "levels", "regime_rule", "min_count", "pools", "folds")


def pool_chain(phase: str, length: str) -> tuple[str, str, str]:
    """Pools tried for a step, finest first: its cell, its phase, every step."""
    return (f"{phase}|{length}", f"{phase}|*", ALL)


def _valid_pool_names() -> set[str]:
    names = {ALL}
    for p in PHASES:
        names.add(f"{p}|*")
        names.update(f"{p}|{ln}" for ln in LENGTHS)
    return names


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _check_levels(levels: Any) -> list[float]:
    if not isinstance(levels, list) or not levels or not all(_number(v) for v in levels):
        raise InputError(f"{KEY}.levels must be a non-empty list of numbers")
    if not all(0 < v < 1 for v in levels) or any(b <= a for a, b in pairwise(levels)):
        raise InputError(f"{KEY}.levels must be increasing numbers in (0, 1)")
    return [float(v) for v in levels]


def _check_pool(name: str, pool: Any, n_levels: int) -> None:
    where = f"{KEY}.pools[{name!r}]"
    if not isinstance(pool, Mapping) or any(k not in pool for k in ("n", "lower", "upper")):
        raise InputError(f"{where} must hold n, lower and upper")
    n = pool["n"]
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise InputError(f"{where}.n must be an integer >= 0, got {n!r}")
    for side in ("lower", "upper"):
        q = pool[side]
        if not isinstance(q, list) or len(q) != n_levels:
            raise InputError(f"{where}.{side} must list one value per level ({n_levels})")
        if not all(v is None or _number(v) for v in q):
            raise InputError(f"{where}.{side} must hold numbers or null")
    for lo, hi in zip(pool["lower"], pool["upper"]):
        if lo is not None and hi is not None and lo > hi:
            raise InputError(f"{where} has a lower quantile above its upper one")


def check_interval_calibration(obj: Any) -> dict:
    """Validate a stored interval calibration (module docstring); return it as a dict.

    Parameters
    ----------
    obj : the value of FIT.json's ``interval_calibration`` key

    Returns
    -------
    dict (the same content)

    Raises
    ------
    InputError naming the first problem found.
    """
    if not isinstance(obj, Mapping):
        raise InputError(f"{KEY} must be a JSON object, got {type(obj).__name__}")
    missing = [k for k in _KEYS if k not in obj]
    if missing:
        raise InputError(f"{KEY} is missing keys {missing}")
    if obj["version"] != VERSION:
        raise InputError(f"{KEY}.version {obj['version']!r} is not supported (this perfmodel "
                         f"reads version {VERSION})")
    if obj["method"] != METHOD:
        raise InputError(f"{KEY}.method must be {METHOD!r}, got {obj['method']!r}")
    if obj["scale"] not in ("log", "weight", "absolute"):
        raise InputError(f"{KEY}.scale must be log, weight or absolute, got {obj['scale']!r}")
    levels = _check_levels(obj["levels"])
    rule = obj["regime_rule"]
    th = rule.get("length_thresholds_ms") if isinstance(rule, Mapping) else None
    if (not isinstance(th, list) or len(th) != len(LENGTHS) - 1
            or not all(_number(v) for v in th) or any(b < a for a, b in pairwise(th))
            or not isinstance(rule.get("phase"), Mapping)
            or not _number(rule["phase"].get("prefill_ratio"))
            or not rule["phase"]["prefill_ratio"] > 1):
        raise InputError(f"{KEY}.regime_rule must hold length_thresholds_ms (two ascending "
                         "numbers) and phase.prefill_ratio > 1")
    mc = obj["min_count"]
    if isinstance(mc, bool) or not isinstance(mc, int) or mc < 1:
        raise InputError(f"{KEY}.min_count must be an integer >= 1, got {mc!r}")
    pools = obj["pools"]
    if not isinstance(pools, Mapping) or ALL not in pools:
        raise InputError(f"{KEY}.pools must be an object holding the pool {ALL!r}")
    bad = sorted(set(pools) - _valid_pool_names())
    if bad:
        raise InputError(f"{KEY}.pools has unknown pool names {bad}")
    for name, pool in pools.items():
        _check_pool(name, pool, len(levels))
    if obj.get("quantile_rule", "step-rank") not in QUANTILE_RULES:
        raise InputError(f"{KEY}.quantile_rule must be one of {list(QUANTILE_RULES)}, "
                         f"got {obj['quantile_rule']!r}")
    if not isinstance(obj["folds"], Mapping):
        raise InputError(f"{KEY}.folds must be a JSON object")
    _check_runs(obj.get("runs"))
    _check_run_term(obj.get(RUN_TERM))
    _check_siblings(obj.get(SIBLINGS))
    return dict(obj)


def _check_siblings(rec: Any) -> None:
    """The optional ``siblings`` key: labels, and steps and configurations per sibling."""
    if rec is None:
        return
    ok = isinstance(rec, Mapping) and isinstance(rec.get("labels"), list) and rec["labels"]
    if ok:
        n = len(rec["labels"])
        ok = (all(isinstance(v, str) and v for v in rec["labels"])
              and len(set(rec["labels"])) == n
              and all(isinstance(rec.get(k), list) and len(rec[k]) == n
                      and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1
                              for v in rec[k]) for k in ("n_steps", "n_clusters")))
    if ok and "spread_ratio" in rec:
        r = rec["spread_ratio"]
        ok = isinstance(r, list) and len(r) == n and all(
            v is None or (_number(v) and v >= 0) for v in r)
    if not ok:
        raise InputError(f"{KEY}.{SIBLINGS} must hold labels (unique, non-empty strings) and, "
                         "per label, n_steps and n_clusters (integers >= 1) and optionally "
                         "spread_ratio (numbers >= 0 or null)")


def _check_runs(runs: Any) -> None:
    """The optional ``runs`` key: within-run (1 run) or across-runs (a column, >= 2 runs)."""
    if runs is None:
        return
    if not isinstance(runs, Mapping) or runs.get("calibration") not in CALIBRATIONS:
        raise InputError(f"{KEY}.runs must be an object whose calibration is one of "
                         f"{list(CALIBRATIONS)}")
    n = runs.get("n_runs")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InputError(f"{KEY}.runs.n_runs must be an integer >= 1, got {n!r}")
    if runs["calibration"] == ACROSS_RUNS and (n < 2 or not isinstance(runs.get("column"), str)):
        raise InputError(f"{KEY}.runs: an across-runs calibration needs a column and >= 2 runs")


def _check_run_term(rec: Any) -> None:
    """The optional ``run_term`` key: a finite sd >= 0 and its source."""
    if rec is None:
        return
    if (not isinstance(rec, Mapping) or not _number(rec.get("sd")) or rec["sd"] < 0
            or rec.get("source") not in ("run-sd", "run-traces")):
        raise InputError(f"{KEY}.{RUN_TERM} must hold sd (a finite number >= 0) and source "
                         "('run-sd' or 'run-traces')")
    n = rec.get("n_runs")
    if rec["source"] == "run-traces" and (isinstance(n, bool) or not isinstance(n, int) or n < 2):
        raise InputError(f"{KEY}.{RUN_TERM}.n_runs must be an integer >= 2 for an estimate, "
                         f"got {n!r}")
