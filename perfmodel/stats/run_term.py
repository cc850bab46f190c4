"""The run-level term of step prediction intervals: another run of the same server.

Problem
-------
A conformal calibration made with folds inside one engine run
(:mod:`perfmodel.stats.intervals`, ``within-run``) sees no run-to-run shift:
when the interval is used on another run of the same engine and host, every
step of that run may be a few per cent slower or faster together, and the
interval under-covers (README.md, Prediction intervals).
:mod:`perfmodel.stats.run_level` measures that shift as the sd (log scale) of
the speed ratio of runs the fit did not see; this module adds it to the step
interval.

Method
------
A step of another run is ``y = mu * exp(e + u)``: ``e`` the calibrated
within-run log-scale score of its pool, ``u ~ N(0, sd^2)`` the run's factor
(shared by all its steps, independent of ``e``).  The per-step marginal
interval at level ``L`` is the central ``L`` interval of ``e + u``: the
convolution of the pool's score distribution with the normal.

* *The score distribution of a pool* (:func:`score_distribution`): the stored
  bounds at level ``L`` are its quantiles at ``p = (1 - L)/2`` and
  ``(1 + L)/2`` (levels 0.50 ... 0.99 give the probabilities 0.005 ... 0.25
  and 0.75 ... 0.995).  The quantile function is taken piecewise linear in
  the normal score ``z = Phi^-1(p)`` between those points (between the 0.25
  and 0.75 quantiles too) and, beyond 0.005 and 0.995, continues the chord
  from the 0.90 to the 0.99 level's bound of that side (linear in ``z``: a
  normal tail of that spread); it is read at the ``N = 2000`` probabilities
  ``(j + 0.5) / N``: ``N`` equally likely scores ``s_j``.  For normal scores
  every step of this is exact but the ``N``-point grid.
* *The convolution* (:func:`convolved_bounds`): the distribution of
  ``e + u`` is the mixture ``mean_j N(s_j, sd^2)``; its quantiles at
  ``(1 -+ L)/2`` are found by bisection of its distribution function (80
  halvings of a bracket ``[min s - 10 sd, max s + 10 sd]``).  The method is
  deterministic: no random draw.
* *Never narrower*: the interval used is the hull of that central interval
  and the stored one.  For a smooth score distribution the convolution is
  wider anyway (normal scores: ``sqrt(s^2 + sd^2)``); where the stored
  quantile function jumps (a pool whose upper tail is a few very slow steps,
  e.g. the contended steps of a vLLM-CPU llama-tiny run) the convolution
  smooths the jump and a bound could move inward, and the run term must not
  make an interval narrower than the one calibrated without it.
* ``sd = 0`` leaves the stored bounds as they are, bit for bit.
* Only a ``log``-scale calibration takes the term (on another scale the
  score and the run's factor do not add); a calibration ``across-runs``
  already holds run shifts in its scores and refuses it (the shift would be
  counted twice), as does any other than ``within-run``.

The term is stored in the calibration (FIT.json key ``interval_calibration``,
sub-key ``run_term``, :mod:`perfmodel.core.interval_calibration`) with its
provenance: ``perfmodel fit --run-sd SD`` or ``--run-traces STEPLOG ...``
(:func:`perfmodel.stats.run_level.run_level_spread` of runs the fit did not
see).  The interval is then one for a step of a run like the others, not
for the fitted run itself.

Verification
------------
``tests/stats/test_run_term.py``: a pool holding the quantiles of
``N(0, s^2)`` gives bounds ``-+ sqrt(s^2 + sd^2) z`` (the closed form, to
1 %); ``sd = 0`` returns the stored interval unchanged; the interval widens
monotonically with ``sd`` on a skewed pool and never moves inside the stored
one on a pool whose tail jumps; on synthetic runs shifted by ``N(0, 0.05^2)``
from a calibration run, the term of the true sd brings the coverage of new
runs from 0.54 / 0.65 to 0.83 / 0.92 at 0.8 / 0.9; a record survives a
FIT.json round trip; an across-runs or non-log calibration and a negative
``sd`` are refused.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from perfmodel._checks import check_positive
from perfmodel.core.interval_calibration import ACROSS_RUNS, RUN_TERM, WITHIN_RUN
from perfmodel.errors import InputError

__all__ = ["GRID", "convolved_bounds", "pool_bounds", "run_term_record", "run_term_sd",
           "run_term_text", "score_distribution", "with_run_term"]

#: equally likely scores a pool's distribution is read at
GRID = 2000
_HALVINGS = 80
#: the tails beyond the outermost stored level continue the chord from the level this many
#: stored levels inward (0.90 to 0.99 with the levels 0.50, 0.51, ..., 0.99)
_TAIL_CHORD = 9


def run_term_record(sd, *, estimate: Mapping | None = None) -> dict:
    """The stored ``run_term`` record: the sd and where it came from.

    Parameters
    ----------
    sd : run-level sd (log scale, >= 0)
    estimate : :func:`perfmodel.stats.run_level.run_level_spread` of the runs
        it was estimated from, or None (given as a number: ``--run-sd``)

    Returns
    -------
    dict: ``sd``, ``source`` (``'run-sd'`` or ``'run-traces'``), ``n_runs``
    (None for a given number), and for an estimate its ``ratios``,
    ``mean_log_ratio`` and ``rule``.
    """
    sd = check_positive("run_sd", sd, allow_zero=True)
    if estimate is None:
        return {"sd": sd, "source": "run-sd", "n_runs": None}
    if not isinstance(estimate, Mapping) or "ratios" not in estimate:
        raise InputError("estimate must be a run_level_spread result (with ratios)")
    return {"sd": sd, "source": "run-traces", "n_runs": int(estimate["n_runs"]),
            "ratios": {str(k): float(v) for k, v in estimate["ratios"].items()},
            "mean_log_ratio": float(estimate["mean_log_ratio"]), "rule": str(estimate["rule"])}


def with_run_term(cal: Mapping, record: Mapping) -> dict:
    """A copy of calibration ``cal`` that carries the run term ``record``.

    Raises InputError when ``cal`` cannot take a run term of ``record['sd'] > 0``:
    an across-runs calibration (its scores already hold run shifts) or a
    scale other than log.
    """
    from perfmodel.core.interval_calibration import check_interval_calibration

    cal = check_interval_calibration(cal)
    sd = check_positive("run_sd", record.get("sd") if isinstance(record, Mapping) else None,
                        allow_zero=True)
    if sd > 0:
        runs = cal.get("runs") or {"calibration": WITHIN_RUN}
        if runs["calibration"] != WITHIN_RUN:
            raise InputError(f"a run-level term needs a within-run calibration: this one is "
                             f"{runs['calibration']} (its scores hold the run shifts already)")
        if cal["scale"] != "log":
            raise InputError(f"a run-level term needs a log-scale calibration, got "
                             f"{cal['scale']!r} (the run factor multiplies the step time)")
    out = dict(cal)
    out[RUN_TERM] = dict(record)
    return check_interval_calibration(out)


def run_term_sd(cal: Mapping) -> float:
    """The run-level sd a stored calibration carries (0 without the key)."""
    rec = cal.get(RUN_TERM)
    return 0.0 if rec is None else float(rec["sd"])


def run_term_text(cal: Mapping) -> str:
    """How an interval of ``cal`` treats the run-level term, in words (printed by predict)."""
    rec = cal.get(RUN_TERM)
    runs = (cal.get("runs") or {}).get("calibration")
    if rec is None or rec["sd"] == 0:
        if runs == ACROSS_RUNS:
            return "run-to-run shift from the across-runs scores, no separate run-level term"
        return ("no run-level term: the interval is for steps of a run like the calibration "
                "run (another run's speed shift is left out)")
    src = (f"estimated from {rec['n_runs']} runs the fit did not see" if rec["source"] ==
           "run-traces" else "given by --run-sd")
    return (f"includes a run-level term: one factor exp(u) per run, u ~ N(0, "
            f"{rec['sd']:.3g}^2), {src}")


def score_distribution(pool: Mapping, levels) -> np.ndarray | None:
    """``GRID`` equally likely scores of a stored pool (module docstring), None if incomplete.

    Parameters
    ----------
    pool : a stored pool (``lower``, ``upper``: one bound per level)
    levels : the calibration's levels

    Returns
    -------
    sorted ndarray of ``GRID`` scores, or None when a bound is missing
    """
    lv = np.asarray(levels, float)
    lo, hi = pool["lower"], pool["upper"]
    if any(v is None for v in lo) or any(v is None for v in hi):
        return None
    from scipy.special import ndtri

    z = ndtri(np.concatenate([(1 - lv[::-1]) / 2, (1 + lv) / 2]))
    q = np.concatenate([np.asarray(lo, float)[::-1], np.asarray(hi, float)])
    q = np.maximum.accumulate(q)  # a quantile function never decreases
    zu = ndtri((np.arange(GRID) + 0.5) / GRID)
    out = np.interp(zu, z, q)
    k = min(_TAIL_CHORD, len(lv) - 1)  # the tails: the chord of the outermost stored levels
    if k > 0:
        for end, inner, sel in ((0, k, zu < z[0]), (-1, -1 - k, zu > z[-1])):
            slope = max((q[end] - q[inner]) / (z[end] - z[inner]), 0.0)
            out[sel] = q[end] + slope * (zu[sel] - z[end])
    return out


def convolved_bounds(scores, sd: float, level: float) -> tuple[float, float]:
    """Central ``level`` interval of ``s + u``, ``s`` uniform on ``scores``, ``u ~ N(0, sd^2)``.

    Parameters
    ----------
    scores : 1-d array of equally likely scores (finite)
    sd : > 0
    level : in (0, 1)

    Returns
    -------
    (lower, upper), found by bisection of the mixture's distribution function
    """
    from scipy.special import ndtr

    s = np.asarray(scores, float).ravel()
    sd = check_positive("sd", sd)
    if s.size == 0 or not np.all(np.isfinite(s)):
        raise InputError("scores must be a non-empty array of finite numbers")
    targets = np.array([(1 - level) / 2, (1 + level) / 2])
    a = np.full(2, s.min() - 10 * sd)
    b = np.full(2, s.max() + 10 * sd)
    for _ in range(_HALVINGS):
        m = (a + b) / 2
        below = ndtr((m[:, None] - s[None, :]) / sd).mean(axis=1) < targets
        a, b = np.where(below, m, a), np.where(below, b, m)
    lo, hi = (a + b) / 2
    return float(lo), float(hi)


def pool_bounds(cal: Mapping):
    """The pool bounds an interval of ``cal`` uses: ``bounds(pool, li) -> (lo, hi)`` or None.

    Without a run term (or with sd 0) the stored bounds; with one, the hull of
    the convolved and the stored bounds of the pool (None where the pool's
    distribution is incomplete, so the next pool of the Mondrian chain is tried).
    """
    sd = run_term_sd(cal)
    if sd == 0:
        return lambda pool, li: (None if pool["lower"][li] is None or pool["upper"][li] is None
                                 else (pool["lower"][li], pool["upper"][li]))
    if ((cal.get("runs") or {}).get("calibration", WITHIN_RUN) != WITHIN_RUN
            or cal["scale"] != "log"):
        raise InputError("the stored run-level term needs a within-run, log-scale calibration")
    levels, cache = cal["levels"], {}

    def bounds(pool, li):
        key = (id(pool), li)
        if key not in cache:
            s = None if pool["lower"][li] is None else score_distribution(pool, levels)
            if s is None:
                cache[key] = None
            else:  # never inside the stored interval (module docstring, "never narrower")
                lo, hi = convolved_bounds(s, sd, levels[li])
                cache[key] = (min(lo, pool["lower"][li]), max(hi, pool["upper"][li]))
        return cache[key]
    return bounds
