"""The fold engine: leak-free groups of steps and the one splitter built on them.

Problem: a held-out error measures prediction only if nothing the model was
fitted to is (nearly) the step it is tested on: replicate steps of one
configuration, identical schedules and, in an engine trace, neighbouring
steps. docs/model.md (Evaluation). This module is the one place folds are
made; every comparison, notebook and script calls it (through
:mod:`perfmodel.stats.validation`):

- :func:`fold_groups` -- leak-free groups: the union of same
  configuration, identical schedule and, for time-ordered traces
  (:func:`is_time_ordered`), contiguous blocks of :data:`DEFAULT_BLOCK`
  steps;
- :func:`make_folds` -- the splitter: grouped k-fold, blocked or expanding
  time series, extrapolation (and a deliberately leaky random k-fold),
  purging training steps next to test steps in time; with ``runs``, also
  grouped by engine run (out-of-run folds, :func:`run_codes`);
- :func:`decorrelation_lag` -- the data check behind :data:`DEFAULT_BLOCK`.

Its building blocks (:func:`perfmodel.stats.splits.grouped_kfold`,
:func:`~perfmodel.stats.splits.time_series_splits`,
:func:`~perfmodel.stats.splits.extrapolation_split`) live in
:mod:`perfmodel.stats.splits`.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from perfmodel._checks import rows_text as _rows
from perfmodel.data.trace import check_step_columns as _check_trace
from perfmodel.errors import InputError
from perfmodel.stats.schedule_key import _schedule_key
from perfmodel.stats.splits import (
    Split,
    _int,
    extrapolation_split,
    grouped_kfold,
    time_series_splits,
)

__all__ = [
    "DECORRELATION_THRESHOLD",
    "DEFAULT_BLOCK",
    "FOLD_SCHEMES",
    "decorrelation_lag",
    "fold_groups",
    "is_time_ordered",
    "make_folds",
    "run_codes",
    "time_blocks",
]

#: Default length, in steps, of the contiguous time blocks of :func:`fold_groups`
#: and of the purge of :func:`make_folds`. A stated default (the evaluation
#: review's 25 steps), checked against the data by :func:`decorrelation_lag`:
#: the autocorrelation of log step time falls below
#: :data:`DECORRELATION_THRESHOLD` at lag 17, 17, 17 on the committed
#: llama-small ``mixed-r1..3`` traces and 19, 19 on llama-tiny ``mixed-r2..3``
#: (all <= 25); llama-tiny ``mixed-r1`` needs lag 67 because 195 of its steps
#: were flagged as contended (another process held the cores: slow stretches
#: longer than a schedule's own correlation), so it is not taken as the rule.
DEFAULT_BLOCK = 25

#: Autocorrelation below which :func:`decorrelation_lag` calls two steps
#: decorrelated (a tenth of the variance of log step time shared).
DECORRELATION_THRESHOLD = 0.1

#: Schemes of :func:`make_folds`.
FOLD_SCHEMES = ("grouped", "blocked", "expanding", "extrapolate", "random")

_TIME_COLUMNS = ("step", "timestamp")
_RUN_COLUMN = "replicate"


def is_time_ordered(df: pd.DataFrame) -> bool:
    """Whether :func:`fold_groups` treats ``df`` as a time-ordered engine trace.

    True when ``df`` has a ``step`` or ``timestamp`` column and no ``config``
    column. A ``config`` column marks a designed sweep: configurations run
    in (randomised) order and replicated, where the dependence to keep on
    one side of a split is the configuration's replicates, and neighbours in
    time are unrelated configurations. On such a sweep time blocks would
    also chain every configuration into one group: on ``data/gpu/trace.csv``
    (3000 configurations x 3 replicates in random order) ``config`` plus
    25-step blocks is a single group.

    Parameters
    ----------
    df : DataFrame
        A step trace.

    Returns
    -------
    bool
    """
    if not isinstance(df, pd.DataFrame):
        raise InputError(f"`df` must be a pandas DataFrame (a step trace), got {type(df).__name__}")
    return any(c in df.columns for c in _TIME_COLUMNS) and "config" not in df.columns


class _Layout(NamedTuple):
    time_ordered: bool
    rank: np.ndarray  # time rank of each row over the whole trace (0 = first)
    run: np.ndarray  # run code of each row
    pos: np.ndarray  # position in time: `step` (less its minimum), else rank within the run


def _check_time_ordered(time_ordered: Any) -> None:
    if time_ordered is not None and not isinstance(time_ordered, (bool, np.bool_)):
        raise InputError(f"`time_ordered` must be True, False or None, got {time_ordered!r}")


def _layout(df: pd.DataFrame, time_ordered: Any) -> _Layout:
    from perfmodel.data.trace_features import time_order, time_rank

    _check_time_ordered(time_ordered)
    if time_ordered is None:
        time_ordered = is_time_ordered(df)
    n = len(df)
    order, rank = time_order(df), time_rank(df)
    if _RUN_COLUMN in df.columns:
        r = df[_RUN_COLUMN]
        if r.isna().any():
            raise InputError(f"column `{_RUN_COLUMN}` is missing at "
                             f"{_rows(r.isna().to_numpy(), df.index)}")
        run = pd.factorize(r.astype(str))[0].astype(np.int64)
    else:
        run = np.zeros(n, np.int64)
    if "step" in df.columns:  # step numbers: blocks stay aligned when rows are dropped
        st = pd.to_numeric(df["step"], errors="coerce").to_numpy(dtype=float)
        bad = st != np.round(st)
        if bad.any():
            raise InputError(f"column `step` must hold whole numbers; fails at "
                             f"{_rows(bad, df.index)}")
        pos = (st - st.min()).astype(np.int64)
    else:  # rank within the run
        perm = order[np.argsort(run[order], kind="stable")]  # by run, then time
        rs = run[perm]
        pos = np.empty(n, np.int64)
        pos[perm] = np.arange(n) - np.searchsorted(rs, rs, side="left")
    return _Layout(bool(time_ordered), rank, run, pos)



def _components(keys: list[np.ndarray], n: int) -> np.ndarray:
    """Connected components of rows linked by sharing any key; labels by first row."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    # rows 0..n-1 linked to one node per key value: row i holds its len(keys) links,
    # written straight into CSR form (int32 indices), without a COO copy to convert
    width, off = len(keys), n
    idx = np.empty((n, width), np.int64 if n + sum(int(k.max()) + 1 for k in keys) >= 2**31
                   else np.int32)
    for j, k in enumerate(keys):
        idx[:, j] = off + k
        off += int(k.max()) + 1
    indptr = np.r_[np.arange(0, n * width + 1, width, dtype=idx.dtype),
                   np.full(off - n, n * width, idx.dtype)]
    graph = csr_matrix((np.ones(n * width, np.int8), idx.ravel(), indptr), shape=(off, off))
    del idx
    lab = connected_components(graph, directed=False)[1][:n]
    return pd.factorize(lab)[0].astype(np.int64)


def _groups(df: pd.DataFrame, lay: _Layout, block: int) -> np.ndarray:
    return _components(_group_keys(df, lay, block, _schedule_key(df)), len(df))


def _group_keys(df: pd.DataFrame, lay: _Layout, block: int, sched: np.ndarray) -> list:
    """The keys whose shared values link steps (rules 1-3 of :func:`fold_groups`)."""
    keys = [sched]
    if "config" in df.columns:
        g = df["config"]
        if g.isna().any():
            raise InputError(f"column `config` is missing at {_rows(g.isna().to_numpy(), df.index)}")
        keys.append(pd.factorize(g.astype(str))[0].astype(np.int64))
    if lay.time_ordered:
        nb = int(lay.pos.max()) // block + 1
        keys.append(pd.factorize(lay.run * nb + lay.pos // block)[0].astype(np.int64))
    return keys


def fold_groups(df: pd.DataFrame, *, time_ordered: bool | None = None,
                block: int = DEFAULT_BLOCK) -> np.ndarray:
    """Leak-free group of each step: steps that must sit on one side of a split.

    Problem: a held-out error measures prediction only if nothing the model
    was fitted to is (nearly) the step it is tested on. Three kinds of
    steps leak, and two steps share a group when any of these links them,
    transitively (connected components of the union):

    1. **same configuration** -- the ``config`` column, when present: the
       replicate runs of one configuration (otherwise the test measures
       replicate noise, not prediction error);
    2. **identical schedule** -- equal ``batch_size``, ``total_tokens`` and,
       when present, the same multiset of per-request (``chunk_sizes``,
       ``context_lens``) pairs (requests listed in another order are the
       same step): identical steps filed under different configurations
       (Splitwise lists the P=512, B=1 prefill step under each output
       length) or repeated by a same-seed replicate run;
    3. **time block** -- for time-ordered traces (``time_ordered``, default
       :func:`is_time_ordered`), contiguous blocks of ``block`` steps of one
       run (the ``replicate`` column when present, else the whole trace):
       block ``(step - min step) // block`` when the trace has ``step``,
       else by rank within the run in time order (``timestamp``, else row
       order). Neighbouring steps of an engine trace share running requests
       and host state and are near-identical, so a test step must not be
       surrounded by its neighbours in training. Step numbers, not ranks,
       keep the blocks of same-seed replicate runs aligned when rows are
       dropped (notebook 11 drops contended steps; with ranks, the
       identical-schedule links between shifted blocks chained its whole
       llama-tiny trace into one group). Blocks alone still put the two
       steps either side of a block boundary on different sides;
       :func:`make_folds` purges those from training.

    Parameters
    ----------
    df : DataFrame
        A step trace (``batch_size``, ``total_tokens``; optional ``config``,
        ``chunk_sizes``, ``context_lens``, ``step``/``timestamp``,
        ``replicate``).
    time_ordered : bool, optional
        Add time blocks (rule 3); default :func:`is_time_ordered`.
    block : int, default :data:`DEFAULT_BLOCK`
        Steps per time block, >= 1.

    Returns
    -------
    ndarray of int64, shape (n,)
        Group label of each row, numbered 0, 1, ... in order of first row.

    Notes
    -----
    Verified by property tests (``tests/stats/test_folds.py``): no two rows
    with the same ``config``, the same schedule or the same time block have
    different labels, and rows are merged only through such links (the
    labels equal a brute-force union-find).
    """
    _check_trace(df, need_y=False)
    block = _int(block, "block", 1)
    _check_time_ordered(time_ordered)
    sched = _schedule_key(df)  # first: its temporaries are the largest, the layout waits
    keys = _group_keys(df, _layout(df, time_ordered), block, sched)  # the layout freed here
    return _components(keys, len(df))


def time_blocks(df: pd.DataFrame, block: int = DEFAULT_BLOCK) -> np.ndarray:
    """Time block of each step: rule 3 of :func:`fold_groups` on its own.

    Problem: neighbouring steps of one engine run share host state, so their
    errors (and whether an interval covers them) are correlated; studies of
    that correlation need the same blocks the folds use, without the
    identical-schedule and configuration links that :func:`fold_groups` adds
    for leakage (those can chain a whole sweep into one group).

    Parameters
    ----------
    df : DataFrame
        A step trace; ``step``, else ``timestamp``, else row order gives time;
        the ``replicate`` column, when present, separates runs.
    block : int, default :data:`DEFAULT_BLOCK`
        Steps per block, >= 1.

    Returns
    -------
    ndarray of int64, shape (n,)
        Block label of each row (run and ``position // block``), numbered 0,
        1, ... in order of first row.

    Verified in ``tests/stats/test_folds.py`` (blocks of a hand-made trace,
    and that every block lies inside one :func:`fold_groups` group).
    """
    _check_trace(df, need_y=False)
    block = _int(block, "block", 1)
    lay = _layout(df, True)
    nb = int(lay.pos.max()) // block + 1 if len(df) else 1
    return pd.factorize(lay.run * nb + lay.pos // block)[0].astype(np.int64)


def _check_k(k: Any, lo: int = 2) -> int:
    return _int(k, "k", lo)


def _time_purge(train: np.ndarray, test: np.ndarray, lay: _Layout, block: int) -> np.ndarray:
    """``train`` less the rows fewer than ``block`` positions from a test row of their run."""
    span = int(lay.pos.max()) + 2 * block + 1
    key = lay.run * span + lay.pos
    tk = np.sort(key[test])
    trk = key[train]
    j = np.searchsorted(tk, trk)
    left = np.where(j > 0, trk - tk[np.maximum(j - 1, 0)], np.iinfo(np.int64).max)
    right = np.where(j < tk.size, tk[np.minimum(j, tk.size - 1)] - trk, np.iinfo(np.int64).max)
    return train[np.minimum(left, right) >= block]


def _blocked(groups: np.ndarray, rank: np.ndarray, k: int) -> list[Split]:
    """Whole groups in time order dealt into ``k`` contiguous folds of near-equal size."""
    n = groups.size
    ng = int(groups.max()) + 1
    first = np.full(ng, n, np.int64)
    np.minimum.at(first, groups, rank)
    size = np.bincount(groups, minlength=ng)
    order = np.argsort(first, kind="stable")
    mid = np.cumsum(size[order]) - size[order] / 2.0
    fold_of = np.empty(ng, np.int64)
    fold_of[order] = np.minimum((mid * k / n).astype(np.int64), k - 1)
    row_fold = fold_of[groups]
    empty = [f for f in range(k) if not (row_fold == f).any()]
    if empty:
        raise InputError(f"`k` ({k}) contiguous folds need more groups: fold(s) {empty} would be "
                         f"empty ({ng} groups, the largest {int(size.max())} of {n} steps)")
    idx = np.arange(n)
    return [(idx[row_fold != f], idx[row_fold == f]) for f in range(k)]


def _extrapolate(df: pd.DataFrame, columns: Any, quantile: Any) -> np.ndarray:
    if isinstance(columns, str):
        columns = (columns,)
    columns = tuple(columns)
    if not columns or not all(isinstance(c, str) for c in columns):
        raise InputError(f"`columns` must be a column name or a non-empty list of them, "
                         f"got {columns!r}")
    test = np.zeros(len(df), bool)
    errs = []
    for c in columns:
        try:
            (_, te), = extrapolation_split(df, c, quantile)
        except InputError as e:
            if len(columns) == 1 or "nothing to extrapolate" not in str(e):
                raise
            errs.append(str(e))
            continue
        test[te] = True
    if not test.any():
        raise InputError("no step lies above the quantile of any of `columns`: " + "; ".join(errs))
    return np.flatnonzero(test)


def make_folds(df: pd.DataFrame, scheme: str = "grouped", k: int = 5, seed: int = 0, *,
               time_ordered: bool | None = None, block: int = DEFAULT_BLOCK,
               purge: bool = True, quantile: float = 0.8,
               columns: Any = ("total_tokens", "batch_size"), runs: Any = None,
               groups: np.ndarray | None = None) -> list[Split]:
    """The (train, test) splits of a cross-validation scheme, from leak-free groups.

    Problem: "grouped k-fold MAPE" must mean one thing whichever notebook,
    script or command computes it. This is the one splitter: every scheme
    starts from :func:`fold_groups` and, unless ``scheme='random'``, no
    group, no identical step and (time-ordered traces, ``purge=True``) no
    pair of steps of one run fewer than ``block`` positions apart lies on
    both sides of any split.

    Schemes:

    - ``'grouped'``: k-fold over the groups (:func:`grouped_kfold`: groups
      shuffled with ``seed``, dealt largest first to the lightest fold).
    - ``'blocked'``: k contiguous folds in time: groups ordered by their
      first step in time and dealt in that order into ``k`` folds of
      near-equal size (blocked cross-validation; little is purged).
    - ``'expanding'``: ``k`` expanding-window time-series splits
      (:func:`time_series_splits` over time order, test windows of
      ``n // (k + 1)`` steps); training steps sharing a group with the test
      window are dropped.
    - ``'extrapolate'``: one split, testing the steps above the
      ``quantile``-quantile of any of ``columns`` (a column with no step
      above is skipped) and training on the others, less any step whose
      configuration or schedule group (rules 1-2 of :func:`fold_groups`)
      has a test step. No time purge: the split is by value, and on a
      mixed engine trace a high-S step comes every few steps, so purging
      its neighbours would leave nothing to train on.
    - ``'random'``: shuffled k-fold of single steps, ignoring groups. It
      leaks on purpose: it is the reference that shows what grouping
      changes.

    Purge (``purge=True``, time-ordered traces, all schemes but
    'extrapolate' and 'random'): a training step fewer than ``block``
    steps (``step`` numbers, else ranks; see :func:`fold_groups`) from a
    test step of the same run is dropped from training. Blocks make test
    sets contiguous, so only the block edges are purged; with randomly
    assigned 25-step blocks that is still most of every training block
    next to a test block: on the three llama-tiny mixed runs (4500 steps)
    a fold of 'grouped' k=3 trains on about 1300 steps instead of 3000,
    while 'blocked' loses at most ``2 (block - 1)`` per run and fold.

    Parameters
    ----------
    df : DataFrame
        A step trace; positions in it are what the splits hold.
    scheme : {'grouped', 'blocked', 'expanding', 'extrapolate', 'random'}
    k : int, default 5
        Number of folds (>= 2; 'expanding': windows, >= 1; 'extrapolate':
        unused). At most the number of groups.
    seed : int, default 0
        Shuffle of 'grouped' and 'random'.
    time_ordered : bool, optional
        Passed to :func:`fold_groups`; default :func:`is_time_ordered`.
    block : int, default :data:`DEFAULT_BLOCK`
        Time-block length and purge distance, in steps.
    purge : bool, default True
        Drop training steps near a test step (time-ordered traces).
    quantile : float, default 0.8
        'extrapolate' only, in (0, 1).
    columns : str or sequence of str, default ('total_tokens', 'batch_size')
        'extrapolate' only: the columns whose upper tail is tested.
    runs : array_like, optional
        One run label per row (engine runs that may differ by a run-level
        shift: separate trace files, another day, another host). When given,
        the splits are also grouped by run: each split of the scheme is
        divided into one split per run ``r`` it tests, testing its steps of
        ``r`` and training on its training steps of every *other* run (no
        run on both sides of any split; all but 'extrapolate'). The leak-free
        groups are those of the whole trace, so same-seed replicate runs,
        whose schedules are identical, still never train on a twin of a
        test step. Needs >= 2 runs.
    groups : numpy.ndarray of int, optional
        ``fold_groups(df, time_ordered=time_ordered, block=block)`` if the
        caller already has it (it is the costly part on a large trace);
        computed when None.  'extrapolate' and 'random' do not use it.

    Returns
    -------
    list of (train_idx, test_idx)
        Sorted positions. 'grouped', 'blocked' and 'random': every step is
        in exactly one test set (with ``runs`` too).

    Notes
    -----
    Verified by property tests (``tests/stats/test_folds.py``) on random
    traces with replicates, identical steps under other configurations,
    dropped steps and several runs. 'grouped' gives the same folds as the
    former ``compare.make_splits`` wherever the groups are the same (checked
    on the eight Splitwise (model, hardware, TP) groups, Sarathi and
    Vidur); the former ``grouped_kfold(default_groups(df))`` shuffled
    ``config`` names, so its folds differ even where the groups agree.
    With ``runs``, the splits are checked to be exactly the scheme's splits
    divided by run (property test) and never to hold a test run in training.
    """
    _check_trace(df, need_y=False)
    if scheme not in FOLD_SCHEMES:
        raise InputError(f"`scheme` must be one of {list(FOLD_SCHEMES)}, got {scheme!r}")
    block = _int(block, "block", 1)
    if not isinstance(purge, (bool, np.bool_)):
        raise InputError(f"`purge` must be True or False, got {purge!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise InputError(f"`seed` must be an integer, got {seed!r}")
    n = len(df)
    lay = _layout(df, time_ordered)
    run = None if runs is None else run_codes(runs, n)
    if run is not None and scheme == "extrapolate":
        raise InputError("`runs` does not apply to scheme 'extrapolate' (one split by value)")
    if scheme == "random":
        splits = grouped_kfold(np.arange(n), _check_k(k), seed)
        return splits if run is None else _out_of_run(splits, run, scheme)
    if scheme == "extrapolate":
        return _extrapolation_fold(df, lay, block, columns, quantile)
    if groups is None:
        groups = _groups(df, lay, block)
    else:
        groups = np.asarray(groups)
        if groups.shape != (n,) or groups.dtype.kind not in "iu":
            raise InputError(f"`groups` must hold one integer group per step ({n}), got "
                             f"{groups.dtype} of shape {groups.shape}")
    if scheme == "grouped":
        splits = grouped_kfold(groups, _check_k(k), seed)
    elif scheme == "blocked":
        splits = _blocked(groups, lay.rank, _check_k(k))
    else:  # expanding
        splits = time_series_splits(n, _check_k(k, 1), order=lay.rank)
    splits = _drop_leaks(splits, groups, lay, block, purge, scheme)
    return splits if run is None else _out_of_run(splits, run, scheme)


def run_codes(runs: Any, n: int) -> np.ndarray:
    """Integer code of each row's run (``runs``: one label per row, >= 2 distinct, no missing).

    Parameters
    ----------
    runs : array_like
        Run labels (strings or numbers), one per row.
    n : int
        Number of rows.

    Returns
    -------
    ndarray of int64, codes 0, 1, ... in order of first row
    """
    r = pd.Series(np.asarray(runs, dtype=object).ravel())
    if len(r) != n:
        raise InputError(f"`runs` must hold one run label per row ({n}), got {len(r)}")
    if r.isna().any():
        raise InputError(f"`runs` is missing at {_rows(r.isna().to_numpy(), r.index)}")
    codes = pd.factorize(r.astype(str))[0].astype(np.int64)
    if n and codes.max() < 1:
        raise InputError(f"out-of-run folds need >= 2 runs; every row is run {r.iloc[0]!r}")
    return codes


def _out_of_run(splits: list[Split], run: np.ndarray, scheme: str) -> list[Split]:
    """Each split divided per tested run: its test steps of run r, its training steps of
    the other runs (a split left with no training step is an error)."""
    out = []
    for i, (tr, te) in enumerate(splits):
        for r in np.unique(run[te]):
            te_r, tr_r = te[run[te] == r], tr[run[tr] != r]
            if tr_r.size == 0:
                raise InputError(f"fold {i} of scheme {scheme!r} has no training step of a "
                                 f"run other than the one it tests; lower `k` or give more runs")
            out.append((tr_r, te_r))
    return out


def _extrapolation_fold(df: pd.DataFrame, lay: _Layout, block: int, columns: Any,
                        quantile: Any) -> list[Split]:
    """The one split of ``make_folds(scheme='extrapolate')``: no group on both sides, no purge."""
    test = _extrapolate(df, columns, quantile)
    plain = _groups(df, lay._replace(time_ordered=False), block)
    train = np.setdiff1d(np.arange(len(df)), test)
    train = train[~np.isin(plain[train], plain[test])]
    if train.size == 0:
        raise InputError("the extrapolation split leaves no training steps")
    return [(train, test)]


def _drop_leaks(splits: list[Split], groups: np.ndarray, lay: _Layout, block: int,
                purge: bool, scheme: str) -> list[Split]:
    """Drop from each training set the steps sharing a group with (or, with ``purge``, within
    ``block`` steps of) a test step; a fold left with no training step is an error."""
    out = []
    for i, (tr, te) in enumerate(splits):
        tr = tr[~np.isin(groups[tr], groups[te])]
        if lay.time_ordered and purge:
            tr = _time_purge(tr, te, lay, block)
        if tr.size == 0:
            raise InputError(f"fold {i} of scheme {scheme!r} has no training step left once "
                             f"steps sharing a group with (or within {block} steps of) its "
                             "test steps are dropped; lower `k` (-k on the command line) or "
                             "`block`, or give more steps")
        out.append((tr, te))
    return out


def decorrelation_lag(df: pd.DataFrame, threshold: float = DECORRELATION_THRESHOLD,
                      max_lag: int | None = None) -> int:
    """First lag at which the autocorrelation of log step time falls below a threshold.

    Problem: the time blocks of :func:`fold_groups` must be at least as long
    as the stretch over which neighbouring steps of a trace stay alike. The
    sample autocorrelation of x = log ``duration_ms`` in time order, demeaned
    per run (``replicate`` column, else the whole trace) and pooled over
    runs, r(l) = sum x_t x_{t+l} / sum x_t^2, is computed for l = 1, 2, ...;
    the first l with r(l) < ``threshold`` is returned. It measures how long
    the schedule and the host state persist (log step time, not a model's
    residual, so it needs no fitted model and is the same for every
    candidate).

    Parameters
    ----------
    df : DataFrame
        A time-ordered step trace with ``duration_ms``.
    threshold : float, default :data:`DECORRELATION_THRESHOLD`
        In (-1, 1).
    max_lag : int, optional
        Largest lag tried; default half the longest run.

    Returns
    -------
    int
        The lag, in steps.

    Notes
    -----
    On one run r(l) equals ``statsmodels.tsa.stattools.acf`` (tests). On
    the committed vLLM-CPU mixed traces it gives 17, 17, 17 (llama-small
    r1-r3) and 67, 19, 19 (llama-tiny r1-r3); see :data:`DEFAULT_BLOCK`.
    """
    data = _check_trace(df, need_y=True)
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) \
            or not -1 < threshold < 1:
        raise InputError(f"`threshold` must be a number in (-1, 1), got {threshold!r}")
    lay = _layout(df, True)
    x = np.log(data["T"])
    series = []
    for r in np.unique(lay.run):
        rows = np.flatnonzero(lay.run == r)
        v = x[rows[np.argsort(lay.pos[rows])]]
        series.append(v - v.mean())
    longest = max(s.size for s in series)
    if longest < 3:
        raise InputError(f"`df` needs a run of at least 3 steps, the longest has {longest}")
    max_lag = longest // 2 if max_lag is None else _int(max_lag, "max_lag", 1, longest - 1)
    den = sum(float(s @ s) for s in series)
    if den == 0:
        raise InputError("`df` has constant step times: the autocorrelation is undefined")
    for lag in range(1, max_lag + 1):
        num = sum(float(s[:-lag] @ s[lag:]) for s in series if s.size > lag)
        if num / den < threshold:
            return lag
    raise InputError(f"the autocorrelation of log step time stays >= {threshold} up to lag "
                     f"{max_lag}; raise `max_lag` or give a longer trace")


