"""Prediction intervals of step times that hold on held-out steps: Mondrian CV-conformal.

Problem
-------
The model-based interval of :class:`perfmodel.stats.predictive.PredictiveDistribution`
assumes one residual distribution (t with the fit's ``s^2``) for every
step, fitted and judged on the same steps.  On real traces the residual
spread differs between decode, mixed and prefill steps and between short
and long steps, and out-of-sample residuals are wider than in-sample ones,
so "met with probability 0.95" fails where it matters (measured coverage:
README.md, Prediction intervals).

Method
------
1. *Held-out scores.*  :func:`cv_residuals` refits the fit's model (same
   loss, scale, outlier window; started at the fit's values) on the
   training side of each split of :func:`perfmodel.stats.validation.make_folds`
   and records the fit-scale residual :meth:`perfmodel.core.scale.FitScale.residual`
   (``log(y / mu)`` by default) of every held-out step.
2. *Regimes by rule* (:func:`interval_regimes`): the phase of
   :func:`perfmodel.stats.validation.regime` (decode-only / mixed /
   prefill-heavy) times the length: ``short`` / ``medium`` / ``long`` by the
   fit's predicted time against the tertiles of the predicted times of the
   fitted steps (stored as ``length_thresholds_ms``).  No rule depends on a
   dataset.
3. *Conformal quantiles per pool, one score per cluster*
   (:func:`cluster_conformal_bounds`): replicates of one configuration
   (``config`` column, :func:`calibration_clusters`) share their model
   error, so the rank counts the pool's ``m`` configurations, not its
   steps: one score is drawn per configuration and the order statistic at
   ``(m + 1)(1 - a/2)``, interpolated, is averaged over 200 draws
   (repeated subsampling, Dunn, Wasserman and Ramdas, JASA 2022); the lower
   bound is the mirror image (none when that position is above ``m``).
   Without a ``config`` column every step is its own cluster and this is
   the interpolated split-conformal rank (Vovk et al., *Algorithmic
   Learning in a Random World*, 2005; Lei et al., JASA 2018), whose
   expected coverage is the level itself.  The step-level ceiling rank of
   :func:`conformal_bounds` (used before; FIT.json's ``quantile_rule`` says
   which) treats replicates as independent and under-covered held-out
   configurations (README.md, Prediction intervals).
4. *Mondrian fallback*: a step uses the finest pool of
   :func:`perfmodel.core.interval_calibration.pool_chain` (its cell, its
   phase, every step) that holds at least ``min_count`` (50) scores and has
   both bounds at that level.  Only where even the pool of every step has
   too few scores for the level (fewer than ``(1 + level) / (1 - level)``)
   does :func:`normal_tail_bounds` give the bound (flagged ``normal_tail``).
5. *The interval* of a new step is ``scale.inverse(mu, [lower, upper])``
   about the full fit's ``mu``.

Siblings
--------
A trace with too few configurations per regime for a rank (one Splitwise
group) can pool the held-out scores of sibling traces -- the same engine on
other hardware, models or parallelism, each fitted and scored on its own
(:func:`sibling_scores`) -- into every pool (``calibrate_intervals(...,
siblings=)``, ``perfmodel fit --sibling-traces``).  It assumes the relative
held-out error per regime is alike across them; README.md, Prediction
intervals, measures where it holds (Splitwise) and where it does not (two
model sizes of one engine).

Across runs
-----------
Folds inside one run see no run-to-run shift: an interval calibrated on one
engine run under-covers another run of the same engine (another start,
another day: README.md, Prediction intervals, measures it on the vLLM-CPU
replicates).  When the training data holds several runs (several trace
files given to ``perfmodel fit``, or a run column named by
``run_column``), :func:`cv_residuals` makes the folds of step 1 out-of-run
as well: ``make_folds(..., runs=)`` divides each split of the fold engine by
run and trains on the *other* runs only, so every score holds a run-to-run
shift as well as the model's held-out error, and the stored quantiles widen
by as much as the runs differ.  The leak-free groups are still the whole
trace's (same-seed replicate runs repeat every schedule, so a test step's
twin in another run stays out of training).  With ``m`` runs the shift is
sampled ``m`` times only: with 2 or 3 runs the interval holds for a new run
only as far as those runs span the engine's run-to-run spread (measured,
README.md).  FIT.json says which calibration was used (``runs``); a within-run
one may carry a run-level term of known sd instead (:mod:`perfmodel.stats.run_term`).

Each pool also records the intraclass correlation of its scores within the
fold engine's groups (configuration, identical schedule, time block) and the
effective count ``n_eff``
(:func:`perfmodel.stats.uncertainty.intraclass_correlation`).  They are
diagnostics: where ``n_eff`` is small (Splitwise: about 30 configurations
per group, ICC 0.7-0.98) held-out coverage per regime is only as good as a
quantile of ~30 configuration effects allows (README.md, Prediction
intervals).  Using ``n_eff`` in the conformal rank
(``conformal_bounds(..., n_eff=)``) was measured too and over-covered.

The scores come from refits on the training folds, while ``mu`` is the full
fit's (the "cross-validation residual" form of CV+ / cross-conformal
prediction, Barber et al., Ann. Statist. 2021): its coverage guarantee is
approximate, not exact; the held-out study (``scripts/interval_study.py``)
measures it.  The calibration is stored in FIT.json under
``interval_calibration`` (:mod:`perfmodel.core.interval_calibration`).

Verification
------------
``tests/stats/test_intervals.py``: :func:`conformal_bounds` against the
order statistics by hand and its coverage on exchangeable draws (the
guarantee, within binomial tolerance); :func:`cluster_conformal_bounds`
against interpolated order statistics by hand, and on 12 simulated
clusters of 5 replicates (intraclass correlation 0.9) covering a step of a
new cluster at 0.83 for level 0.8 where the step rank gives 0.77; calibrated intervals cover fresh
steps of a synthetic trace with known heteroscedastic noise at their level
per regime; the model-based interval is kept when no calibration exists;
on synthetic runs with a run-level shift (log sd 0.05, step noise 0.03),
one run's calibration covers 40 new runs at 0.33 / 0.44 for 0.8 / 0.9 and
the calibration across 8 runs at 0.83 / 0.91 (mean of 4 draws); a run
column with one run, or none, is refused.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from perfmodel.core.interval_calibration import (
    ACROSS_RUNS,
    ALL,
    KEY,
    LENGTHS,
    METHOD,
    QUANTILE_RULES,
    SIBLINGS,
    VERSION,
    WITHIN_RUN,
    check_interval_calibration,
    pool_chain,
)
from perfmodel.core.scale import get_scale, scale_of
from perfmodel.data.trace_read import RUN_COLUMN
from perfmodel.errors import InputError
from perfmodel.stats.predictive import _level  # the one check of an interval level
from perfmodel.stats.run_term import pool_bounds, run_term_text
from perfmodel.stats.validation import (
    DEFAULT_BLOCK,
    fold_groups,
    is_time_ordered,
    make_folds,
    regime,
)

__all__ = ["CLUSTER_COLUMN", "LEVELS", "MIN_COUNT", "QUANTILE_RULE", "Interval",
           "calibrate_intervals", "calibration_clusters", "calibration_columns", "cluster_conformal_bounds",
           "conformal_bounds", "conformal_interval", "cv_residuals", "interval_regimes", "model_interval",
           "prediction_interval", "run_labels", "runs_text", "sibling_scores", "stored_level_index"]

#: levels stored by a calibration: 0.50, 0.51, ..., 0.99
LEVELS = tuple(round(0.5 + 0.01 * i, 2) for i in range(50))
#: fewest held-out scores a pool needs
MIN_COUNT = 50
#: the column whose rows share a model error (one configuration's replicates)
CLUSTER_COLUMN = "config"
#: how the stored bounds were computed (:func:`cluster_conformal_bounds`)
QUANTILE_RULE = QUANTILE_RULES[0]
#: one-score-per-cluster subsamples averaged by :func:`cluster_conformal_bounds`
SUBSAMPLES = 200
#: prefill_ratio of the phase rule
PREFILL_RATIO = 32.0
_EPS = 1e-9


@dataclass(frozen=True)
class Interval:
    """Pointwise prediction interval (ms) at one level, with how it was made.

    ``pools``: conformal: how many steps used each pool.  ``calibration``: conformal:
    the stored ``runs`` record (within-run, or across how many runs); None for the model band.
    ``regime``: conformal: each step's calibration regime ``'phase|length'`` (the
    regimes whose coverage README.md, Prediction intervals, reports); None for the model band.
    """

    level: float
    method: str
    lower: np.ndarray
    upper: np.ndarray
    description: str
    pools: dict
    calibration: dict | None = None
    regime: np.ndarray | None = None


def conformal_bounds(scores, level, n_eff: float | None = None) -> tuple[float, float]:
    """Finite-sample split-conformal lower and upper score bounds at ``level``.

    Parameters
    ----------
    scores : array_like of finite calibration scores (any order)
    level : central coverage in (0, 1)
    n_eff : effective number of independent scores (default: their count);
        with clustered scores, ``n / design effect``
        (:func:`perfmodel.stats.uncertainty.intraclass_correlation`)

    Returns
    -------
    (lower, upper): with ``p = (n_eff + 1)(1 - a/2) / n_eff``, ``a = 1 - level``,
    the upper bound is the smallest score whose empirical cdf reaches ``p``
    and the lower bound its mirror image (the largest score with at least
    ``p`` of the scores at or above it).  For ``n_eff = n`` these are the
    ``ceil((n+1)(1-a/2))``-th and ``floor((n+1) a/2)``-th smallest scores.
    ``-inf`` / ``+inf`` where ``p > 1`` (too few scores for that level).
    """
    level = _level(level)
    s = np.sort(np.asarray(scores, dtype=float).ravel())
    if s.size == 0 or not np.all(np.isfinite(s)):
        raise InputError("scores must be a non-empty array of finite numbers")
    n = s.size
    ne = float(n) if n_eff is None else float(n_eff)
    if not 0 < ne <= n:
        raise InputError(f"n_eff must be in (0, {n}], got {n_eff!r}")
    p = (ne + 1.0) * (1.0 - (1.0 - level) / 2.0) / ne
    if p > 1.0 + _EPS:
        return -math.inf, math.inf
    k = min(max(math.ceil(n * p - _EPS), 1), n)  # smallest k with k/n >= p
    return float(s[n - k]), float(s[k - 1])


def _type6(x: np.ndarray, pos: float) -> np.ndarray:
    """Order statistic at 1-based position ``pos`` along the last axis, interpolated."""
    k = math.floor(pos)
    f = pos - k
    lo = x[..., max(k, 1) - 1]
    hi = x[..., min(k + 1, x.shape[-1]) - 1]
    return lo + f * (hi - lo) if k >= 1 else x[..., 0]


def cluster_conformal_bounds(scores, clusters, level, n_sub: int = SUBSAMPLES,
                             seed: int = 0) -> tuple[float, float]:
    """Conformal score bounds for a step of a new cluster (configuration).

    Problem: replicates of one configuration share most of their residual
    (Splitwise: intraclass correlation 0.7-0.98), so ``n`` steps hold about
    as much information as their ``m`` configurations, and the step-level
    rank of :func:`conformal_bounds` (as if ``n`` scores were independent)
    is too close to the centre: a held-out configuration falls outside more
    often than ``1 - level``.

    Method: repeated subsampling of Dunn, Wasserman and Ramdas (JASA 2022,
    "Distribution-free prediction sets for two-layer hierarchical models",
    arXiv:1809.07441): draw one score per cluster (``m`` scores,
    exchangeable with a step of a new cluster), take the order statistic at
    position ``(m + 1)(1 - a/2)``, ``a = 1 - level``, interpolated between
    neighbours (Hyndman-Fan type 6: its expected coverage is ``1 - a/2``
    exactly, where the ceiling rank of :func:`conformal_bounds` is
    conservative by up to ``1/(m + 1)``), the lower bound its mirror image;
    average both over ``n_sub`` draws (fixed ``seed``).  Without clusters
    (every score its own) no draw is needed and this is the interpolated
    split-conformal rank.  The target is coverage *at* the level (README.md,
    Prediction intervals), not at least the level.

    Parameters
    ----------
    scores : array_like of finite calibration scores
    clusters : array_like, one label per score (configuration)
    level : central coverage in (0, 1)
    n_sub : subsamples averaged (>= 1)
    seed : random seed of the subsamples

    Returns
    -------
    (lower, upper); ``-inf`` / ``+inf`` where ``(m + 1)(1 - a/2) > m`` (too few
    clusters for that level).
    """
    level = _level(level)
    s, codes, m = _cluster_codes(scores, clusters)
    if isinstance(n_sub, bool) or not isinstance(n_sub, int) or n_sub < 1:
        raise InputError(f"n_sub must be an integer >= 1, got {n_sub!r}")
    return _bounds_of_levels(s, codes, m, [level], n_sub, seed)[0]


def _cluster_codes(scores, clusters) -> tuple[np.ndarray, np.ndarray, int]:
    """Checked scores, their clusters coded 0..m-1 (one factorisation), and ``m``."""
    s = np.asarray(scores, dtype=float).ravel()
    g = np.asarray(clusters).ravel()
    if s.size == 0 or not np.all(np.isfinite(s)):
        raise InputError("scores must be a non-empty array of finite numbers")
    if g.shape != s.shape:
        raise InputError(f"clusters must hold one label per score ({s.size}), got {g.size}")
    codes = pd.factorize(g)[0]
    return s, codes, int(codes.max()) + 1


def _bounds_of_levels(s: np.ndarray, codes: np.ndarray, m: int, levels, n_sub: int,
                      seed: int) -> list[tuple[float, float]]:
    """:func:`cluster_conformal_bounds` at each of ``levels`` (checked), sharing the work.

    The sorted one-score-per-cluster draws do not depend on the level: they
    are drawn (same seed, so the same draws) and sorted once for all levels,
    which gives each level the bits of its own call.
    """
    x = None
    out = []
    for level in levels:
        pos = (m + 1) * (1.0 - (1.0 - level) / 2.0)
        if pos > m + _EPS:
            out.append((-math.inf, math.inf))
            continue
        if x is None:
            x = _sorted_draws(s, codes, m, n_sub, seed)
        out.append((float(np.mean(_type6(x, m + 1 - pos))), float(np.mean(_type6(x, pos)))))
    return out


def _sorted_draws(s: np.ndarray, codes: np.ndarray, m: int, n_sub: int,
                  seed: int) -> np.ndarray:
    """One score per cluster, ``n_sub`` draws, each sorted (the scores sorted when m = n)."""
    if m == s.size:
        return np.sort(s)[None, :]
    order = np.lexsort((s, codes))
    size = np.bincount(codes)
    start = np.r_[0, np.cumsum(size)[:-1]]
    u = np.random.default_rng(seed).random((n_sub, m))
    return np.sort(s[order][start + np.floor(u * size).astype(int)], axis=1)


def interval_regimes(df: pd.DataFrame, mu, thresholds_ms,
                     prefill_ratio: float = PREFILL_RATIO) -> tuple[np.ndarray, np.ndarray]:
    """Phase and length label of each step (module docstring, "Regimes by rule").

    Parameters
    ----------
    df : step trace (``batch_size``, ``total_tokens``; optional ``num_decode``,
        ``chunk_sizes``)
    mu : predicted step times (ms), one per row
    thresholds_ms : two ascending times (ms): steps predicted below the first
        are ``short``, at or above the second ``long``, else ``medium``
    prefill_ratio : passed to :func:`perfmodel.stats.validation.regime`

    Returns
    -------
    (phase, length): object arrays
    """
    mu = np.asarray(mu, dtype=float)
    if mu.shape != (len(df),):
        raise InputError(f"mu must hold one prediction per row ({len(df)}), got {mu.shape}")
    reg = regime(df, prefill_ratio=prefill_ratio)
    t1, t2 = (float(v) for v in thresholds_ms)
    # labels taken from one object per label, not one string per step (5M steps: some
    # 600 MB less)
    phase = np.array([str(c) for c in reg.cat.categories], dtype=object)[reg.cat.codes.to_numpy()]
    length = np.array(LENGTHS, dtype=object)[np.where(mu < t1, 0, np.where(mu >= t2, 2, 1))]
    return phase, length


def _kept(fit, df: pd.DataFrame, fit_data=None):
    """The rows of ``df`` inside the fit's outlier window, and ``fit_data`` of those rows."""
    if not isinstance(df, pd.DataFrame) or "duration_ms" not in df.columns:
        raise InputError("calibrating intervals needs the fitted trace with duration_ms")
    if fit_data is not None:
        fit_data = _check_fit_data(fit, fit_data, len(df))
    win = fit.options.get("outlier_window")
    if win:
        y = pd.to_numeric(df["duration_ms"], errors="coerce").to_numpy(float)
        keep = (y >= win[0]) & (y <= win[1])
        df = df[keep]
        if fit_data is not None:
            fit_data = ({k: v[keep] for k, v in fit_data[0].items()}, fit_data[1][keep])
    return df.reset_index(drop=True), fit_data


def _check_fit_data(fit, fit_data, n: int):
    """``fit_data`` = ``trace_fit_data(df, fit.model_name)``: the model's features, one per row."""
    from perfmodel.core.model import get_model

    m = get_model(fit.model_name)
    m = get_model(m.fitted_as) if m.fitted_as else m
    ok = isinstance(fit_data, tuple) and len(fit_data) == 2 and isinstance(fit_data[0], dict)
    if ok:
        arrays = [*fit_data[0].values(), fit_data[1]]
        ok = set(m.requires) <= set(fit_data[0]) and all(
            isinstance(a, np.ndarray) and a.shape == (n,) for a in arrays)
    if not ok:
        raise InputError(f"fit_data must be trace_fit_data(df, {fit.model_name!r}): a dict of "
                         f"the features {list(m.requires)} and the step times, one per row "
                         f"of df ({n})")
    return fit_data


def calibration_columns(df: pd.DataFrame, run_column: str | None = None) -> list[str]:
    """The columns of ``df`` that :func:`calibrate_intervals` reads when given ``groups`` and
    ``fit_data``: step times, B and S, time order, runs, configurations and the phase rule
    (``num_decode``, else ``chunk_sizes``).  A frame cut to them gives the same calibration
    (``tests/stats/test_intervals.py``) without the per-request lists the fold groups and
    features were computed from.
    """
    need = ["batch_size", "total_tokens", "duration_ms", "step", "timestamp", "num_decode",
            "replicate", RUN_COLUMN, CLUSTER_COLUMN, run_column]
    if "num_decode" not in df.columns:
        need.append("chunk_sizes")
    return [c for c in df.columns if c in need]


def cv_residuals(fit, df: pd.DataFrame, *, scheme: str = "auto", k: int = 5, seed: int = 0,
                 time_ordered: bool | None = None, block: int = DEFAULT_BLOCK,
                 n_starts: int = 4, run_column: str | None = None) -> tuple[np.ndarray, dict]:
    """Fit-scale residuals of held-out steps: refit on each training fold, score its test fold.

    Parameters
    ----------
    fit : FitResult of ``df`` (model, loss, scale and outlier window are reused)
    df : the fitted step trace (rows outside the fit's outlier window are dropped)
    scheme : ``'grouped'``, ``'blocked'`` or ``'auto'`` (blocked for a
        time-ordered trace, :func:`perfmodel.stats.validation.is_time_ordered`
        or ``time_ordered=True``, and grouped where its groups are too large
        for ``k`` contiguous folds, said in ``folds['note']``; grouped otherwise)
    k, seed, time_ordered, block : passed to
        :func:`perfmodel.stats.validation.make_folds`
    n_starts : multi-start count of each refit (the first start is the fit's values)
    run_column : column of ``df`` naming each step's engine run (>= 2 runs), or
        None: with it the folds are also grouped by run (``make_folds(runs=)``),
        so every residual comes from a refit on *other* runs and holds the
        run-to-run shift (:func:`calibrate_intervals`)

    Returns
    -------
    (residuals, folds): residuals per kept row of ``df`` (NaN where a row is
    in no test fold), and a JSON-safe description of the folds.
    """
    if scheme not in ("auto", "grouped", "blocked"):
        raise InputError(f"scheme must be 'auto', 'grouped' or 'blocked', got {scheme!r}")
    d, _ = _kept(fit, df)
    return _cv_residuals(fit, d, fold_groups(d, time_ordered=time_ordered, block=block),
                         scheme=scheme, k=k, seed=seed, time_ordered=time_ordered, block=block,
                         n_starts=n_starts, run_column=run_column)


def resolved_folds(d: pd.DataFrame, scheme: str, *, k: int, seed: int, time_ordered, block: int,
                   groups=None, runs=None) -> tuple[str, str, list]:
    """The folds of ``scheme`` on the trace ``d``, with ``'auto'`` resolved as the interval
    calibration resolves it: blocked for a time-ordered trace
    (:func:`perfmodel.stats.validation.is_time_ordered` or ``time_ordered=True``), grouped
    where its groups are too large for ``k`` contiguous folds, grouped otherwise.

    Returns ``(scheme, note, splits)``: the scheme used, ``''`` or why grouped folds stood
    in, and the ``make_folds`` splits."""
    kw = {"k": k, "seed": seed, "time_ordered": time_ordered, "block": block, "groups": groups,
          "runs": runs}
    if scheme == "auto":
        timed = is_time_ordered(d) if time_ordered is None else bool(time_ordered)
        scheme = "blocked" if timed else "grouped"
        try:
            return scheme, "", make_folds(d, scheme, **kw)
        except InputError as e:  # a few groups too large for contiguous folds
            if scheme != "blocked":
                raise
            return "grouped", f"blocked folds impossible ({e}); grouped folds used", \
                make_folds(d, "grouped", **kw)
    return scheme, "", make_folds(d, scheme, **kw)


def _cv_residuals(fit, d: pd.DataFrame, groups: np.ndarray, *, scheme, k, seed, time_ordered,
                  block, n_starts, run_column=None, fit_data=None) -> tuple[np.ndarray, dict]:
    """:func:`cv_residuals` of the kept rows ``d`` with their :func:`fold_groups` ``groups``
    (and ``trace_fit_data`` of those rows, computed when None)."""
    from perfmodel.core.fit import fit_model, trace_fit_data
    from perfmodel.data.trace import validate_trace

    runs = None if run_column is None else run_labels(d, run_column)
    scheme, note, splits = resolved_folds(d, scheme, k=k, seed=seed, time_ordered=time_ordered,
                                          block=block, groups=groups, runs=runs)
    # positions as int32 where they fit: the same rows, half the memory of k folds
    if len(d) < 2**31:
        splits = [(tr.astype(np.int32), te.astype(np.int32)) for tr, te in splits]
    scale = scale_of(fit)
    y = d["duration_ms"].to_numpy(float)
    out = np.full(len(d), np.nan)
    o = fit.options
    # the fit's features and step times of every kept row, once: each refit and its test
    # fold take row subsets of these arrays instead of copies of the frame's rows (the same
    # bits: a step's features do not depend on the other rows, perfmodel.data.features)
    feats, y_fit = (trace_fit_data(validate_trace(d), fit.model_name) if fit_data is None
                    else fit_data)
    for tr, te in splits:
        f = fit_model({k: v[tr] for k, v in feats.items()}, fit.model_name, y=y_fit[tr],
                      loss=o.get("loss", "linear"), relative=o.get("relative", "log"),
                      scale=bool(o.get("scale", True)), n_starts=n_starts, seed=seed)
        out[te] = scale.residual(y[te], f.predict({k: v[te] for k, v in feats.items()}))
        del f
    folds = {"scheme": scheme, "k": int(k), "seed": int(seed), "block": int(block),
             "time_ordered": time_ordered, "n_steps": int(np.isfinite(out).sum()),
             "refit_starts": int(n_starts), **({"note": note} if note else {}),
             **({"out_of_run": True, "n_splits": len(splits)} if runs is not None else {})}
    return out, folds


def run_labels(df: pd.DataFrame, column: str) -> np.ndarray:
    """The run label of each step from ``column``, checked: present, no missing value, >= 2 runs.

    Parameters
    ----------
    df : step trace
    column : the column naming each step's engine run (e.g. ``run``: the file
        stem of each trace given to ``perfmodel fit``)

    Returns
    -------
    object ndarray of labels (strings), one per row
    """
    if not isinstance(column, str) or not column:
        raise InputError(f"the run column must be a column name, got {column!r}")
    if column not in df.columns:
        raise InputError(f"across-run interval calibration needs the run column {column!r}, "
                         f"which the trace lacks (columns: {', '.join(map(str, df.columns))})")
    r = df[column]
    if r.isna().any():
        raise InputError(f"run column {column!r} has {int(r.isna().sum())} missing values")
    labels = r.astype(str).to_numpy(dtype=object)
    n = len(set(labels))
    if n < 2:
        raise InputError(f"across-run interval calibration needs >= 2 runs; run column "
                         f"{column!r} holds {n} ({', '.join(sorted(set(labels)))})")
    return labels


def _pool(scores: np.ndarray, groups: np.ndarray, clusters: np.ndarray, levels) -> dict:
    """Bounds per level of one pool (:func:`cluster_conformal_bounds`) and its diagnostics.

    ``groups``: the fold engine's leak-free groups (for the intraclass
    correlation reported); ``clusters``: the units that share a residual
    (configurations), which set the rank.
    """
    from perfmodel.stats.uncertainty.clustering import intraclass_correlation

    if scores.size < 2:
        return {"n": int(scores.size), "lower": [None] * len(levels),
                "upper": [None] * len(levels)}
    cs = intraclass_correlation(scores, groups)
    s, codes, m = _cluster_codes(scores, clusters)  # one factorisation, one draw for all levels
    lower, upper, tail = [], [], []
    for lv, (lo, hi) in zip(levels, _bounds_of_levels(s, codes, m, levels, SUBSAMPLES, 0)):
        tail.append(not (math.isfinite(hi) and math.isfinite(lo)))
        if tail[-1]:
            lo, hi = normal_tail_bounds(scores, lv, min(cs.n_eff, float(m)))
        lower.append(float(f"{lo:.6g}"))
        upper.append(float(f"{hi:.6g}"))
    return {"n": int(scores.size), "n_clusters": m, "n_groups": cs.n_groups,
            "icc": round(cs.icc, 4), "n_eff": round(cs.n_eff, 1), "lower": lower,
            "upper": upper, "normal_tail": tail}


def normal_tail_bounds(scores, level, n_eff: float) -> tuple[float, float]:
    """Normal prediction limits of a new score, for levels too high for a conformal rank.

    ``mean -+ t_{nu, (1 + level)/2} sd sqrt(1 + 1/n_eff)``, ``nu = max(n_eff - 1, 1)``
    (the classical prediction interval of one new draw from ``n_eff``
    independent normal ones), widened to the extreme scores.  Used only where
    :func:`conformal_bounds` has no finite bound (``n_eff`` below
    ``(1 + level) / (1 - level)``); FIT.json marks those levels
    (``normal_tail``).

    Parameters
    ----------
    scores : array_like, >= 2 finite values
    level : central coverage in (0, 1)
    n_eff : effective number of independent scores (> 0)

    Returns
    -------
    (lower, upper)
    """
    from scipy import stats

    level = _level(level)
    s = np.asarray(scores, dtype=float).ravel()
    if s.size < 2 or not np.all(np.isfinite(s)) or not n_eff > 0:
        raise InputError("normal_tail_bounds needs >= 2 finite scores and n_eff > 0")
    half = (float(stats.t.ppf((1.0 + level) / 2.0, max(n_eff - 1.0, 1.0)))
            * float(np.std(s, ddof=1)) * math.sqrt(1.0 + 1.0 / n_eff))
    m = float(np.mean(s))
    return min(m - half, float(s.min())), max(m + half, float(s.max()))


def calibration_clusters(df: pd.DataFrame) -> np.ndarray:
    """The unit whose scores share a residual: the configuration, else each step.

    Replicates of one configuration (the ``config`` column, rule 1 of
    :func:`perfmodel.stats.validation.fold_groups`) share its model error;
    a trace without it (one engine run) has every step as its own unit.
    Time blocks are not clusters here: they keep folds leak-free, and the
    residuals of neighbouring blocks are only weakly alike (README.md,
    Prediction intervals).

    Parameters
    ----------
    df : step trace

    Returns
    -------
    ndarray of labels, one per row
    """
    if CLUSTER_COLUMN in df.columns:
        return df[CLUSTER_COLUMN].astype(str).to_numpy(dtype=object)
    return np.arange(len(df))


def calibrate_intervals(fit, df: pd.DataFrame, *, levels=LEVELS, min_count: int = MIN_COUNT,
                        scheme: str = "auto", k: int = 5, seed: int = 0,
                        time_ordered: bool | None = None, block: int = DEFAULT_BLOCK,
                        n_starts: int = 4, prefill_ratio: float = PREFILL_RATIO,
                        run_column: str | None = None, groups: np.ndarray | None = None,
                        fit_data: tuple | None = None, siblings=None) -> dict:
    """The Mondrian CV-conformal calibration of ``fit`` on its trace ``df`` (module docstring).

    Parameters
    ----------
    fit : FitResult fitted to ``df``
    df : the step trace (with ``duration_ms``)
    levels : increasing levels in (0, 1) to store
    min_count : fewest scores a pool needs (>= 1)
    scheme, k, seed, time_ordered, block, n_starts : see :func:`cv_residuals`
    prefill_ratio : phase rule (:func:`perfmodel.stats.validation.regime`)
    run_column : None (within-run calibration: the trace is one run, as
        before this option existed) or the column naming each step's engine
        run, >= 2 runs (across-run calibration: every score is out-of-run,
        module docstring, "Across runs"); recorded under ``runs``
    groups : ``fold_groups(df, time_ordered=time_ordered, block=block)`` if the
        caller has it (only for a fit without outlier window: the groups are
        those of the kept rows); computed when None
    fit_data : ``trace_fit_data(df, fit.model_name)`` (features and step
        times of every row of ``df``) if the caller has it; computed when None.
        With both, ``df`` may be cut to :func:`calibration_columns`: the
        calibration is the same, bit for bit (``tests/stats/test_intervals.py``)
    siblings : None, or a list of :func:`sibling_scores` records (other
        traces of the same engine, each fitted on its own): their held-out
        scores join every pool, their configurations count in its rank, and
        the calibration records them under ``siblings`` (labels, steps,
        configurations, and ``spread_ratio``: each sibling's median absolute
        deviation of scores over the trace's own, a check of the assumption
        that their errors are alike).  Only with a within-run calibration.

    Returns
    -------
    dict in the form :func:`perfmodel.core.interval_calibration.check_interval_calibration`
    accepts (store it as ``fit.interval_calibration``).
    """
    levels = [_level(v) for v in levels]
    if isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 1:
        raise InputError(f"min_count must be an integer >= 1, got {min_count!r}")
    if scheme not in ("auto", "grouped", "blocked"):
        raise InputError(f"scheme must be 'auto', 'grouped' or 'blocked', got {scheme!r}")
    if groups is not None and fit.options.get("outlier_window"):
        raise InputError("groups: give them only for a fit without outlier window (they must "
                         "be those of the rows kept)")
    if siblings and run_column is not None:
        raise InputError("siblings pool within-run scores: they cannot join an across-run "
                         "calibration (give one run, or --interval-calibration within-run)")
    d, fit_data = _kept(fit, df, fit_data)
    sc = _held_out_scores(fit, d, groups, fit_data, scheme=scheme, k=k, seed=seed,
                          time_ordered=time_ordered, block=block, n_starts=n_starts,
                          run_column=run_column, prefill_ratio=prefill_ratio)
    del fit_data
    resid, folds, groups, thresholds = sc["resid"], sc["folds"], sc["groups"], sc["thresholds"]
    phase, length, clusters = sc["phase"], sc["length"], sc["clusters"]
    if run_column is None:  # within the trace; several runs read by read_runs are pooled
        pooled = int(d[RUN_COLUMN].nunique()) if RUN_COLUMN in d.columns else 1
        runs = {"calibration": WITHIN_RUN, "n_runs": max(pooled, 1)}
    else:
        labels = sorted(set(run_labels(d, run_column)))
        runs = {"calibration": ACROSS_RUNS, "column": run_column, "n_runs": len(labels),
                "labels": labels}
    ok = np.isfinite(resid)
    sib_record = None
    if siblings:
        sibs = _check_siblings(siblings, fit, CLUSTER_COLUMN if CLUSTER_COLUMN in d.columns
                               else "steps")
        own = np.isfinite(resid)
        own_spread = _spread(resid[own])
        resid = np.concatenate([resid[own]] + [r["scores"] for r in sibs])
        phase = np.concatenate([phase[own]] + [r["phase"] for r in sibs])
        length = np.concatenate([length[own]] + [r["length"] for r in sibs])
        # prefixed by position (0: the trace's own, i: the i-th sibling), so that no label
        # a sibling was given can make two units one
        tag = lambda i, v: np.array([f"{i}|{x}" for x in v], dtype=object)
        groups = np.concatenate([tag(0, groups[own])]
                                + [tag(i, r["groups"]) for i, r in enumerate(sibs, 1)])
        clusters = np.concatenate([tag(0, clusters[own])]
                                  + [tag(i, r["clusters"]) for i, r in enumerate(sibs, 1)])
        ok = np.ones(resid.size, dtype=bool)
        sib_record = {"labels": [r["label"] for r in sibs],
                      "n_steps": [int(r["scores"].size) for r in sibs],
                      "n_clusters": [len(set(r["clusters"])) for r in sibs],
                      "spread_ratio": [float(f"{_spread(r['scores']) / own_spread:.3g}")
                                       if own_spread > 0 else None for r in sibs]}
    pools = {ALL: _pool(resid[ok], groups[ok], clusters[ok], levels)}
    for p in sorted(set(phase[ok])):
        sel = ok & (phase == p)
        pools[f"{p}|*"] = _pool(resid[sel], groups[sel], clusters[sel], levels)
        for ln in LENGTHS:
            cell = sel & (length == ln)
            if cell.any():
                pools[f"{p}|{ln}"] = _pool(resid[cell], groups[cell], clusters[cell], levels)
    cal = {"version": VERSION, "method": METHOD, "scale": scale_of(fit).name,
           "levels": levels, "min_count": min_count, "quantile_rule": QUANTILE_RULE,
           "clusters": CLUSTER_COLUMN if CLUSTER_COLUMN in d.columns else "steps",
           "regime_rule": {"phase": {"prefill_ratio": float(prefill_ratio)},
                           "length_thresholds_ms": thresholds},
           "pools": pools, "folds": folds, "runs": runs}
    if sib_record is not None:
        cal[SIBLINGS] = sib_record
    return check_interval_calibration(cal)


def sibling_scores(fit, df: pd.DataFrame, label: str, *, scheme: str = "auto", k: int = 5,
                   seed: int = 0, time_ordered: bool | None = None, block: int = DEFAULT_BLOCK,
                   n_starts: int = 4, prefill_ratio: float = PREFILL_RATIO) -> dict:
    """Held-out scores of a sibling trace, to pool into another fit's interval calibration.

    Problem: a conformal rank at level ``1 - a`` needs ``m >= (1 + level) /
    (1 - level)`` configurations in a pool (19 at 0.9, 39 at 0.95).  A small
    replicated benchmark (one Splitwise (model, GPU, TP) group: about 15
    configurations per phase) has too few, and the normal limits that stand
    in are too wide on some regimes and too narrow on others (README.md,
    Prediction intervals).  Siblings -- traces of the same engine on other
    hardware, models or parallelism, each fitted on its own -- add their own
    held-out scores to each regime's pool, so the rank counts their
    configurations too.  The assumption, which the held-out study tests
    (``scripts/interval_study.py --siblings``, leave-one-group-out): the
    relative held-out error of the model, per regime, is alike across the
    siblings.  Where it is not (another model size whose steps are far
    noisier) borrowing makes the interval wrong for both.

    Each sibling is scored exactly as :func:`calibrate_intervals` scores the
    fit's own trace: folds of the fold engine on the sibling's trace,
    refits of the sibling's fit, regimes by the sibling's OWN length thirds
    (``short`` means short for that sibling), configurations and fold groups
    labelled with ``label`` so no two siblings share a cluster.

    Parameters
    ----------
    fit : FitResult of ``df`` (its own fit; same scale as the fit it will calibrate)
    df : the sibling's step trace (with ``duration_ms``)
    label : a name for the sibling (unique among the siblings of one calibration)
    scheme, k, seed, time_ordered, block, n_starts : see :func:`cv_residuals`
    prefill_ratio : phase rule (:func:`perfmodel.stats.validation.regime`)

    Returns
    -------
    dict: ``label``, ``scale``, ``model`` (the fit's model name),
    ``cluster_kind`` (``'config'`` or ``'steps'``) and, per held-out step,
    ``scores``, ``phase``, ``length``, ``groups``, ``clusters`` and ``rows``
    (its position among the rows of ``df`` the fit keeps); pass a list of them
    as ``calibrate_intervals(..., siblings=)``, which refuses a record of
    another scale, model or kind of cluster.
    """
    if not isinstance(label, str) or not label:
        raise InputError(f"a sibling needs a non-empty label, got {label!r}")
    if scheme not in ("auto", "grouped", "blocked"):
        raise InputError(f"scheme must be 'auto', 'grouped' or 'blocked', got {scheme!r}")
    d, fit_data = _kept(fit, df)
    sc = _held_out_scores(fit, d, None, fit_data, scheme=scheme, k=k, seed=seed,
                          time_ordered=time_ordered, block=block, n_starts=n_starts,
                          run_column=None, prefill_ratio=prefill_ratio)
    ok = np.isfinite(sc["resid"])
    tag = lambda v: np.array([f"{label}:{x}" for x in v], dtype=object)
    return {"label": label, "scale": scale_of(fit).name, "model": fit.model_name,
            "cluster_kind": CLUSTER_COLUMN if CLUSTER_COLUMN in d.columns else "steps",
            "scores": sc["resid"][ok], "phase": np.asarray(sc["phase"])[ok],
            "length": np.asarray(sc["length"])[ok], "groups": tag(sc["groups"][ok]),
            "clusters": tag(sc["clusters"][ok]), "rows": np.flatnonzero(ok)}


def _held_out_scores(fit, d: pd.DataFrame, groups, fit_data, *, scheme, k, seed,
                     time_ordered, block, n_starts, run_column, prefill_ratio) -> dict:
    """The held-out scores of a trace's kept rows ``d`` and the labels that pool them: the
    one scoring that :func:`calibrate_intervals` (the fit's own trace) and
    :func:`sibling_scores` (a sibling's) share, so both cut regimes and clusters alike.

    Returns a dict: ``resid`` (CV score per row, NaN where no fold held it out), ``folds``,
    ``groups`` (the fold engine's groups, computed once when None), ``thresholds`` (the
    length thirds of the predictions, at 6 significant digits as stored in FIT.json),
    ``phase``, ``length`` and ``clusters``.
    """
    if groups is None:
        groups = fold_groups(d, time_ordered=time_ordered, block=block)  # once: folds and pools
    resid, folds = _cv_residuals(fit, d, groups, scheme=scheme, k=k, seed=seed,
                                 time_ordered=time_ordered, block=block, n_starts=n_starts,
                                 run_column=run_column, fit_data=fit_data)
    mu = fit.predict(d if fit_data is None else fit_data[0])
    thresholds = [float(f"{v:.6g}") for v in np.quantile(mu, [1 / 3, 2 / 3])]
    phase, length = interval_regimes(d, mu, thresholds, prefill_ratio)
    return {"resid": resid, "folds": folds, "groups": groups, "thresholds": thresholds,
            "phase": phase, "length": length, "clusters": calibration_clusters(d)}


def _spread(scores: np.ndarray) -> float:
    """Median absolute deviation of held-out scores (the siblings' diagnostic ``spread_ratio``)."""
    return float(np.median(np.abs(scores - np.median(scores))))


def _check_siblings(siblings, fit, cluster_kind: str) -> list[dict]:
    """The sibling records of :func:`sibling_scores`, checked against the fit they join: a
    relative fit scale (log-scale scores of different hardware are alike, milliseconds are
    not), the same scale, model and kind of cluster (configurations or steps), unique labels,
    and aligned, finite arrays."""
    scale = scale_of(fit).name
    if isinstance(siblings, dict) or not hasattr(siblings, "__iter__"):
        raise InputError("siblings must be a list of sibling_scores(...) records")
    sibs = list(siblings)
    if not get_scale(scale).relative:
        raise InputError(f"siblings pool relative held-out errors; the fit's scale {scale!r} "
                         "is absolute (ms), which differs between traces: fit on a relative "
                         "scale (--relative log)")
    need = {"label", "scale", "model", "cluster_kind", "scores", "phase", "length", "groups",
            "clusters", "rows"}
    for r in sibs:
        if not isinstance(r, dict) or not need <= set(r):
            raise InputError("each sibling must be a record of sibling_scores(fit, df, label)")
        if r["scale"] != scale:
            raise InputError(f"sibling {r['label']!r} was scored on the {r['scale']} scale, the "
                             f"fit on the {scale} scale: fit both with the same --relative")
        if r["model"] != fit.model_name:
            raise InputError(f"sibling {r['label']!r} was fitted with {r['model']}, the trace "
                             f"with {fit.model_name}: fit every sibling with the same model")
        if r["cluster_kind"] != cluster_kind:
            raise InputError(
                f"sibling {r['label']!r} counts {r['cluster_kind']} as its units and the trace "
                f"{cluster_kind}: a trace of replicated configurations (column "
                f"{CLUSTER_COLUMN!r}) pools only siblings that have them, and one without only "
                "siblings without (one engine run's steps would outnumber the configurations)")
        n = np.asarray(r["scores"]).size
        if n == 0:
            raise InputError(f"sibling {r['label']!r} has no held-out scores")
        if (any(np.asarray(r[k]).shape != (n,) for k in
                ("phase", "length", "groups", "clusters", "rows"))
                or not np.all(np.isfinite(np.asarray(r["scores"], dtype=float)))):
            raise InputError(f"sibling {r['label']!r}: its arrays must be finite scores and one "
                             "phase, length, group, cluster and row per score")
    labels = [r["label"] for r in sibs]
    if len(set(labels)) != len(labels):
        raise InputError(f"sibling labels must be unique, got {labels}")
    return sibs


def runs_text(cal: dict) -> str:
    """Which calibration a stored one used, in words: within-run or across how many runs."""
    r = cal.get("runs") or {"calibration": WITHIN_RUN, "n_runs": 1}
    if r["calibration"] == ACROSS_RUNS:
        return (f"calibrated across runs ({r['n_runs']} runs of column {r['column']!r}, "
                f"each scored by refits on the other runs)")
    if r["n_runs"] > 1:
        return (f"calibrated within the pooled steps of {r['n_runs']} runs (folds mix the runs: "
                "no run-to-run shift in the scores)")
    return "calibrated within one run (no run-to-run shift in the scores)"


def _bounds_for(cal: dict, phase, length, li: int) -> tuple[np.ndarray, np.ndarray, dict]:
    """Score bounds per step at level index ``li``, the finest eligible pool of each (widened
    by a stored run-level term: :func:`perfmodel.stats.run_term.pool_bounds`)."""
    n, bounds, used = len(phase), pool_bounds(cal), {}
    lo, hi = np.full(n, -np.inf), np.full(n, np.inf)
    pools, mc = cal["pools"], cal["min_count"]
    for key in sorted(set(zip(phase, length))):
        rows = (phase == key[0]) & (length == key[1])
        for name in pool_chain(*key):
            p = pools.get(name)
            if p is None or (b := bounds(p, li)) is None:
                continue
            if p["n"] >= mc or name == ALL:
                lo[rows], hi[rows] = b
                used[name] = used.get(name, 0) + int(rows.sum())
                break
        else:
            used["none (unbounded)"] = used.get("none (unbounded)", 0) + int(rows.sum())
    return lo, hi, used


def _inverse(scale, mu, e, side: str) -> np.ndarray:
    out = np.empty_like(mu)
    fin = np.isfinite(e)
    out[fin] = scale.inverse(mu[fin], e[fin])
    out[~fin] = (0.0 if scale.positive else -np.inf) if side == "lower" else np.inf
    return out


def stored_level_index(cal: dict, level: float) -> int | None:
    """Index of ``level`` among a calibration's stored levels (to 1e-9), or None: the one match rule.

    Used by :func:`conformal_interval` and by the SLA searches that read a
    ``q``-quantile off the stored level ``2q - 1``
    (:mod:`perfmodel.decisions.predictor`).
    """
    return next((i for i, v in enumerate(cal["levels"]) if abs(float(v) - level) < 1e-9), None)


def conformal_interval(fit, df: pd.DataFrame, level, calibration: dict | None = None,
                       mu=None) -> Interval:
    """Mondrian CV-conformal interval of new steps ``df`` at a stored ``level``.

    Parameters
    ----------
    fit : FitResult carrying ``interval_calibration`` (or pass ``calibration``)
    df : step trace to predict (``batch_size``, ``total_tokens``, the model's features)
    level : one of the calibration's levels
    calibration : overrides ``fit.interval_calibration``
    mu : the fit's predictions of ``df`` (ms), when the caller has them from
        features ``df`` does not carry (the SLA searches hold the context
        features at constants); default ``fit.predict(df)``

    Returns
    -------
    Interval (method ``'conformal'``)
    """
    level = _level(level)
    cal = calibration if calibration is not None else getattr(fit, "interval_calibration", None)
    if cal is None:
        raise InputError(f"the fit has no {KEY}: refit with perfmodel fit --intervals conformal")
    cal = check_interval_calibration(cal)
    idx = stored_level_index(cal, level)
    if idx is None:
        raise InputError(f"level {level} is not calibrated; the fit stores levels "
                         f"{cal['levels'][0]}..{cal['levels'][-1]} "
                         f"({len(cal['levels'])} levels, e.g. 0.8, 0.9, 0.95)")
    scale = get_scale(cal["scale"])
    mu = np.asarray(fit.predict(df) if mu is None else mu, dtype=float).ravel()
    if mu.shape != (len(df),) or not np.all(np.isfinite(mu)):
        raise InputError(f"mu must hold one finite prediction per step ({len(df)})")
    rule = cal["regime_rule"]
    phase, length = interval_regimes(df, mu, rule["length_thresholds_ms"],
                                     rule["phase"]["prefill_ratio"])
    lo, hi, used = _bounds_for(cal, phase, length, idx)
    rule_q = cal.get("quantile_rule", "step-rank")
    sib = cal.get(SIBLINGS)
    sib_text = ("" if not sib else f"; pooled with the held-out scores of {len(sib['labels'])} "
                f"sibling trace(s) ({', '.join(sib['labels'])})")
    text = (f"{METHOD} ({rule_q}, clusters: {cal.get('clusters', 'steps')}; {runs_text(cal)}; "
            f"{run_term_text(cal)}{sib_text}): per-regime quantiles of {cal['folds'].get('k')}-fold "
            f"{cal['folds'].get('scheme')} held-out {cal['scale']}-scale residuals "
            f"(pools used: {used})")
    return Interval(level, "conformal", _inverse(scale, mu, lo, "lower"),
                    _inverse(scale, mu, hi, "upper"), text, used,
                    dict(cal.get("runs") or {"calibration": WITHIN_RUN, "n_runs": 1}),
                    np.array([f"{a}|{b}" for a, b in zip(phase, length)], dtype=object))


def model_interval(fit, df: pd.DataFrame, level) -> Interval:
    """The model-based (delta-method) prediction band of :class:`PredictiveDistribution`.

    Parameters
    ----------
    fit : FitResult
    df : step trace to predict
    level : central coverage in (0, 1)

    Returns
    -------
    Interval (method ``'model'``)
    """
    from perfmodel.stats.predictive import PredictiveDistribution

    level = _level(level)
    b = PredictiveDistribution(fit).band(df, level)
    text = ("model-based delta-method band (t residuals with the fit's in-sample variance; "
            "not calibrated on held-out steps)")
    return Interval(level, "model", np.asarray(b.lower), np.asarray(b.upper), text, {})


def prediction_interval(fit, df: pd.DataFrame, level, method: str = "auto") -> Interval:
    """Prediction interval of new steps: conformal when the fit is calibrated, else model-based.

    Parameters
    ----------
    fit : FitResult
    df : step trace to predict
    level : central coverage in (0, 1)
    method : ``'auto'`` (conformal if ``fit.interval_calibration``, else
        model), ``'conformal'`` (error without a calibration) or ``'model'``

    Returns
    -------
    Interval
    """
    if method not in ("auto", "conformal", "model"):
        raise InputError(f"method must be 'auto', 'conformal' or 'model', got {method!r}")
    if method == "model" or (method == "auto" and not getattr(fit, "interval_calibration", None)):
        return model_interval(fit, df, level)
    return conformal_interval(fit, df, level)
