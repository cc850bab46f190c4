"""The evaluation protocol: which held-out splits every table reports, and their checks.

Problem
-------
A held-out error is a claim about prediction only if no test step has a
twin, a replicate or a time neighbour in training. The fold engine
(:func:`perfmodel.stats.validation.make_folds`) makes leak-free folds; this
module fixes *which* splits the comparison tables, the notebooks, the
scripts and ``perfmodel compare`` report, so that "held-out MAPE" means the
same thing everywhere, and it checks them:

:data:`SCHEMES` (all from the one fold engine)

- ``'grouped'`` -- k-fold over groups of same configuration + identical
  schedule (a designed sweep: Splitwise, the H200 trace). On a
  time-ordered engine trace it is ``'blocked25'`` (groups alone would leave
  near-identical neighbouring steps across the split).
- ``'blocked25'``, ``'blocked100'`` -- k contiguous folds of 25- / 100-step
  time blocks, training steps within the block length of a test step
  purged (time-ordered traces only).
- ``'transfer'`` -- cross-workload transfer: train on some workloads
  (``workload`` column, e.g. the vLLM-CPU sweeps), test on another (the
  mixed or closed-loop runs); training steps with a test step's schedule
  are dropped.
- ``'extrapolate'`` -- train at or below the 0.8 quantile of S and B,
  test above.

:func:`leak_report` checks any splits against the three leaks (same
configuration, identical schedule, time neighbour of the same run within a
distance), :func:`ratio_interval` gives the cluster-bootstrap interval
of a model/floor ratio and :func:`paired_difference` the paired interval
and test of two candidates' MAPE difference (both resample the leak-free
groups, never single steps, with the same draws for the same seed).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from perfmodel._checks import check_int_range
from perfmodel.data.trace import check_step_columns
from perfmodel.errors import InputError
from perfmodel.stats import validation as _v
from perfmodel.stats.folds import _layout
from perfmodel.stats.schedule_key import _schedule_key

__all__ = [
    "BLOCKS",
    "SCHEMES",
    "TRANSFER_COLUMN",
    "is_leak_free",
    "leak_report",
    "paired_difference",
    "protocol_folds",
    "ratio_interval",
    "schemes_for",
]

#: the protocol's schemes, in the order tables list them
SCHEMES = ("grouped", "blocked25", "blocked100", "transfer", "extrapolate")
#: time-block length (steps) of each blocked scheme
BLOCKS = {"blocked25": 25, "blocked100": 100}
#: the column naming each step's workload, for ``'transfer'``
TRANSFER_COLUMN = "workload"


def schemes_for(df: pd.DataFrame) -> tuple[str, ...]:
    """The schemes of :data:`SCHEMES` that apply to ``df``.

    Blocked schemes need a time-ordered trace
    (:func:`perfmodel.stats.validation.is_time_ordered`); ``'transfer'`` a
    ``workload`` column with two or more workloads; ``'grouped'`` and
    ``'extrapolate'`` apply to every trace (``'grouped'`` on a time-ordered
    trace is ``'blocked25'``, so it is left out there).
    """
    ordered = _v.is_time_ordered(df)
    out = [] if ordered else ["grouped"]
    if ordered:
        out += ["blocked25", "blocked100"]
    if TRANSFER_COLUMN in df.columns and df[TRANSFER_COLUMN].nunique() >= 2:
        out.append("transfer")
    out.append("extrapolate")
    return tuple(out)


def _names(v: Any, what: str, known: Sequence[str]) -> list[str]:
    if isinstance(v, str):
        v = [v]
    try:
        v = [str(x) for x in v]
    except TypeError:
        raise InputError(f"`{what}` must be a workload name or a list of them, got {v!r}") \
            from None
    bad = [x for x in v if x not in known]
    if not v or bad:
        raise InputError(f"`{what}` names unknown workload(s) {bad or v}; known: {sorted(known)}")
    return v


def _transfer(df: pd.DataFrame, train: Any, test: Any) -> list[_v.Split]:
    if TRANSFER_COLUMN not in df.columns:
        raise InputError(f"scheme 'transfer' needs a `{TRANSFER_COLUMN}` column")
    w = df[TRANSFER_COLUMN].astype(str).to_numpy()
    known = sorted(set(w))
    if test is None:
        raise InputError("scheme 'transfer' needs `test` (the workload(s) to predict)")
    te_names = _names(test, "test", known)
    tr_names = [x for x in known if x not in te_names] if train is None else \
        _names(train, "train", known)
    if set(tr_names) & set(te_names):
        raise InputError(f"workload(s) {sorted(set(tr_names) & set(te_names))} are in both "
                         "`train` and `test`")
    te = np.flatnonzero(np.isin(w, te_names))
    tr = np.flatnonzero(np.isin(w, tr_names))
    # identical schedules (and configurations) of a test step leave training
    groups = _v.fold_groups(df, time_ordered=False)
    tr = tr[~np.isin(groups[tr], groups[te])]
    if tr.size == 0 or te.size == 0:
        raise InputError(f"transfer {tr_names} -> {te_names} leaves an empty "
                         f"{'training' if tr.size == 0 else 'test'} set")
    return [(tr, te)]


def protocol_folds(df: pd.DataFrame, scheme: str, k: int = 5, seed: int = 0, *,
                   train: Any = None, test: Any = None, quantile: float = 0.8,
                   time_ordered: bool | None = None) -> list[_v.Split]:
    """The (train, test) splits of one protocol scheme (module docstring).

    Parameters
    ----------
    df : DataFrame
        A step trace; positions in it are what the splits hold.
    scheme : one of :data:`SCHEMES`
    k : int, default 5
        Folds of 'grouped' and the blocked schemes (at most the number of
        groups; lowered to it for 'grouped').
    seed : int, default 0
        Shuffle of 'grouped'.
    train, test : str or list of str
        'transfer' only: the training workloads (default: every other) and
        the test workload(s) (required), values of the ``workload`` column.
    quantile : float, default 0.8
        'extrapolate' only.
    time_ordered : bool, optional
        Override :func:`perfmodel.stats.validation.is_time_ordered`.

    Returns
    -------
    list of (train_idx, test_idx)
        Sorted positions; checked leak-free by :func:`leak_report` in the
        tests.
    """
    check_step_columns(df, need_y=False)
    if scheme not in SCHEMES:
        raise InputError(f"`scheme` must be one of {list(SCHEMES)}, got {scheme!r}")
    k = check_int_range("`k`", k, 2)
    ordered = _v.is_time_ordered(df) if time_ordered is None else time_ordered
    if scheme == "transfer":
        return _transfer(df, train, test)
    if scheme == "extrapolate":
        return _v.make_folds(df, "extrapolate", seed=seed, quantile=quantile,
                             time_ordered=ordered)
    if scheme == "grouped" and not ordered:
        ng = np.unique(_v.fold_groups(df, time_ordered=False)).size
        if ng < 2:
            raise InputError("grouped folds need at least 2 groups of steps; the trace has 1")
        return _v.make_folds(df, "grouped", min(k, ng), seed, time_ordered=False)
    if not ordered:
        raise InputError(f"scheme {scheme!r} needs a time-ordered trace (a `step` or "
                         "`timestamp` column and no `config` column)")
    block = BLOCKS.get(scheme, _v.DEFAULT_BLOCK)
    return _v.make_folds(df, "blocked", k, seed, time_ordered=True, block=block)


def leak_report(df: pd.DataFrame, splits: Sequence[_v.Split], *, block: int | None = None,
                time_ordered: bool | None = None) -> pd.DataFrame:
    """Count, per split, the test steps that leak into training.

    A test step leaks when its training set holds (1) a step of the same
    ``config``, (2) a step of identical schedule (``batch_size``,
    ``total_tokens`` and the multiset of (chunk, context) pairs, requests in
    any order) or (3) -- ``block`` given and a time-ordered trace -- a step
    of the same run (``replicate``) fewer than ``block`` steps away.
    It shares the engine's schedule key and time positions but not its
    grouping or purge (a direct search over the training keys and time
    positions), so it catches mistakes in those.

    Returns
    -------
    DataFrame
        One row per split: ``fold``, ``n_train``, ``n_test``, ``config``,
        ``schedule``, ``time`` (leaking test steps of each kind).
    """
    check_step_columns(df, need_y=False)
    n = len(df)
    sched = _schedule_key(df)
    cfg = pd.factorize(df["config"].astype(str))[0] if "config" in df.columns else None
    ordered = _v.is_time_ordered(df) if time_ordered is None else time_ordered
    lay = _layout(df, ordered) if block is not None and ordered else None
    if block is not None:
        block = check_int_range("`block`", block, 1)
    rows = []
    for i, (tr, te) in enumerate(splits):
        tr, te = np.asarray(tr, np.int64), np.asarray(te, np.int64)
        if tr.size and (tr.min() < 0 or tr.max() >= n) or te.size and (te.min() < 0
                                                                       or te.max() >= n):
            raise InputError(f"split {i} holds positions outside [0, {n - 1}]")
        row = {"fold": i, "n_train": int(tr.size), "n_test": int(te.size),
               "config": 0 if cfg is None else int(np.isin(cfg[te], cfg[tr]).sum()),
               "schedule": int(np.isin(sched[te], sched[tr]).sum()), "time": 0}
        if lay is not None:
            row["time"] = int(_near(lay, tr, te, block).sum())
        rows.append(row)
    return pd.DataFrame(rows, columns=["fold", "n_train", "n_test", "config", "schedule", "time"])


def _near(lay, tr: np.ndarray, te: np.ndarray, block: int) -> np.ndarray:
    """Mask over ``te``: a training step of the same run fewer than ``block`` steps away."""
    out = np.zeros(te.size, bool)
    for r in np.unique(lay.run[te]):
        p_tr = np.sort(lay.pos[tr][lay.run[tr] == r])
        sel = lay.run[te] == r
        if p_tr.size == 0:
            continue
        p = lay.pos[te][sel]
        j = np.searchsorted(p_tr, p)
        d_right = np.abs(p_tr[np.minimum(j, p_tr.size - 1)] - p)
        d_left = np.abs(p - p_tr[np.maximum(j - 1, 0)])
        out[np.flatnonzero(sel)] = np.minimum(d_left, d_right) < block
    return out


def is_leak_free(report: pd.DataFrame) -> bool:
    """Whether a :func:`leak_report` found no leaking test step."""
    return bool((report[["config", "schedule", "time"]].to_numpy() == 0).all())


def _paired_errors(x, y, clusters, names, n_boot, level):
    """Two per-step error vectors and their cluster labels, checked (shared by
    :func:`ratio_interval` and :func:`paired_difference`).

    Returns ``(x, y, ok, codes, n_boot)``: the vectors as float arrays, the
    rows where both are finite, each such row's cluster code (``None`` when
    there is no such row) and the checked ``n_boot``.
    """
    a = np.asarray(x, float).ravel()
    b = np.asarray(y, float).ravel()
    c = np.asarray(clusters).ravel()
    if not (a.size == b.size == c.size):
        raise InputError(f"{names[0]}, {names[1]} and clusters differ in length "
                         f"({a.size}, {b.size}, {c.size})")
    n_boot = check_int_range("`n_boot`", n_boot, 1)
    if not isinstance(level, float) or not 0 < level < 1:
        raise InputError(f"`level` must be a float in (0, 1), got {level!r}")
    ok = np.isfinite(a) & np.isfinite(b)
    codes = pd.factorize(pd.Series(c[ok]).astype(str))[0] if ok.any() else None
    return a, b, ok, codes, n_boot


def ratio_interval(model_err: Any, floor_err: Any, clusters: Any, *, n_boot: int = 1000,
                   level: float = 0.9, seed: int = 0) -> tuple[float, float, float]:
    """Model/floor MAPE ratio with a cluster-bootstrap percentile interval.

    Problem: steps of one configuration or time block are not independent,
    so resampling steps understates the uncertainty of a ratio. The clusters
    (the leak-free groups of :func:`perfmodel.stats.validation.fold_groups`:
    configuration, identical schedule, time block) are resampled with
    replacement and the ratio ``mean(model_err) / mean(floor_err)`` recomputed
    over the rows where both are defined.

    Parameters
    ----------
    model_err, floor_err : array_like (n,)
        Absolute relative errors per step of the model (held out) and of the
        floor's median oracle (NaN where a step has no replicate).
    clusters : array_like (n,)
        Cluster label of each step.
    n_boot : int, default 1000
    level : float, default 0.9
        Two-sided level of the percentile interval.
    seed : int, default 0

    Returns
    -------
    (ratio, lo, hi)
        NaN when no row has both errors. Verified against a direct resampling
        loop and on clustered synthetic errors (tests).
    """
    m, f, ok, codes, n_boot = _paired_errors(model_err, floor_err, clusters,
                                             ("model_err", "floor_err"), n_boot, level)
    if codes is None or f[ok].sum() <= 0:
        return (float("nan"),) * 3
    nc = int(codes.max()) + 1
    sm = np.bincount(codes, weights=m[ok], minlength=nc)
    sf = np.bincount(codes, weights=f[ok], minlength=nc)
    ratio = float(sm.sum() / sf.sum())
    bm, bf = _resampled_sums((sm, sf), n_boot, seed)
    with np.errstate(invalid="ignore", divide="ignore"):
        boots = bm / bf
    a = (1 - level) / 2
    lo, hi = np.nanquantile(boots, [a, 1 - a])
    return ratio, float(lo), float(hi)


#: most cluster draws held in memory at once by :func:`_resampled_sums`
_DRAW_CHUNK = 4_000_000


def _resampled_sums(sums: Sequence[np.ndarray], n_boot: int, seed: int) -> list[np.ndarray]:
    """Per-cluster sums added up over ``n_boot`` cluster-bootstrap replicates.

    The one cluster resampling of this module: replicate ``b`` draws the
    ``nc = len(sums[0])`` clusters with replacement (row ``b`` of
    ``default_rng(seed).integers(0, nc, (n_boot, nc))``, generated a block of
    rows at a time to bound memory), and every array in ``sums`` is summed
    over the same draws, so quantities computed with one seed on the same
    clusters share their replicates (paired).
    """
    nc = len(sums[0])
    rng = np.random.default_rng(seed)
    out = [np.empty(n_boot) for _ in sums]
    step = max(1, _DRAW_CHUNK // max(nc, 1))
    for start in range(0, n_boot, step):
        draws = rng.integers(0, nc, size=(min(step, n_boot - start), nc))
        for o, w in zip(out, sums):
            o[start:start + len(draws)] = w[draws].sum(axis=1)
    return out


#: at most this many clusters: the sign-flip test enumerates all 2**n flips, else draws them
_EXACT_FLIPS = 12


def paired_difference(err: Any, ref_err: Any, clusters: Any, *, n_boot: int = 1000,
                      level: float = 0.9, seed: int = 0,
                      paired: bool = True) -> tuple[float, float, float, float]:
    """MAPE difference of two candidates on the same steps: interval and paired test.

    Problem: two candidates scored on the same held-out steps share the
    steps' difficulty, so their MAPEs are positively correlated and
    comparing two separate intervals hides differences that the data
    resolve. The difference ``100 (mean(err) - mean(ref_err))`` (points) is
    bootstrapped by resampling the clusters (the leak-free groups of
    :func:`perfmodel.stats.validation.fold_groups`) *once* per replicate for
    both candidates, with the draws of :func:`ratio_interval`.

    The p-value is a two-sided sign-flip permutation test at the cluster
    level (Good 2005, *Permutation, Parametric and Bootstrap Tests of
    Hypotheses*, 3rd ed., Springer, sec. 3.7 "matched pairs"): under the
    null hypothesis that the two candidates are exchangeable, each cluster's
    summed error difference ``D_c`` is symmetric about zero, so the statistic
    ``|sum_c D_c|`` (the pooled difference, the quantity the interval
    reports, each cluster weighted by its steps) is compared with its value
    under every sign flip (all ``2**n`` when ``n <= 12`` clusters, else
    ``n_boot`` random flips with the ``(1 + hits) / (1 + n_boot)`` estimate of
    Phipson & Smyth 2010, *Stat. Appl. Genet. Mol. Biol.* 9(1):39). It was
    chosen over a Wilcoxon signed-rank test of per-cluster means because
    the latter tests the median cluster, not the pooled MAPE difference that
    the table reports. Identical candidates give ``p = 1``. With few clusters
    the smallest attainable p is ``2 / 2**n``.

    Parameters
    ----------
    err, ref_err : array_like (n,)
        Absolute relative errors per step of the candidate and of the
        reference (NaN where a candidate has no prediction; such rows are
        left out of both).
    clusters : array_like (n,)
        Cluster label of each step.
    n_boot : int, default 1000
        Bootstrap replicates (and random sign flips when there are many clusters).
    level : float, default 0.9
        Two-sided level of the percentile interval.
    seed : int, default 0
    paired : bool, default True
        False resamples the two candidates' clusters independently (the
        unpaired interval, for comparison only; the p-value is unchanged).

    Returns
    -------
    (diff, lo, hi, p)
        Points of MAPE; NaN when no row has both errors. Verified on
        synthetic errors with a known difference, identical candidates and
        positively correlated errors, where the paired interval is narrower
        than the unpaired one (tests).
    """
    e, r, ok, codes, n_boot = _paired_errors(err, ref_err, clusters, ("err", "ref_err"),
                                             n_boot, level)
    if codes is None:
        return (float("nan"),) * 4
    nc = int(codes.max()) + 1
    n_c = np.bincount(codes, minlength=nc).astype(float)
    se = np.bincount(codes, weights=e[ok], minlength=nc)
    sr = np.bincount(codes, weights=r[ok], minlength=nc)
    d = se - sr  # per-cluster summed differences
    diff = 100 * float(d.sum() / n_c.sum())
    if paired:
        bd, bn = _resampled_sums((d, n_c), n_boot, seed)
        boots = 100 * bd / bn
    else:  # the reference's clusters drawn again, independently
        be, bn = _resampled_sums((se, n_c), n_boot, seed)
        br, bnr = _resampled_sums((sr, n_c), n_boot, seed + 1)
        boots = 100 * (be / bn - br / bnr)
    a = (1 - level) / 2
    lo, hi = np.quantile(boots, [a, 1 - a])
    return diff, float(lo), float(hi), _sign_flip_p(d, n_boot, seed)


def _sign_flip_p(d: np.ndarray, n_flip: int, seed: int) -> float:
    """Two-sided sign-flip p-value of ``sum(d)`` (:func:`paired_difference`)."""
    t = abs(float(d.sum()))
    tol = 1e-12 * max(float(np.abs(d).sum()), 1e-300)  # ties up to rounding count as hits
    if d.size <= _EXACT_FLIPS:
        signs = 1 - 2 * ((np.arange(2 ** d.size)[:, None] >> np.arange(d.size)) & 1)
        return float(np.mean(np.abs(signs @ d) >= t - tol))
    rng, hits = np.random.default_rng(seed), 0
    step = max(1, _DRAW_CHUNK // d.size)  # bounded memory, as in _resampled_sums
    for start in range(0, n_flip, step):
        signs = rng.choice([-1.0, 1.0], size=(min(step, n_flip - start), d.size))
        hits += int(np.sum(np.abs(signs @ d) >= t - tol))
    return (1 + hits) / (1 + n_flip)
