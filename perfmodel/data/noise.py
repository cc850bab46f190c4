"""The measurement noise floor of a step trace: how well could any model do?

Problem
-------
A latency model's held-out error means little without the error left by the
measurements themselves.  Two kinds of repeated measurement give a floor:

* **replicate runs** -- same-seed runs of one engine with identical
  schedules (column ``replicate``; steps matched across runs by ``config``,
  or by ``step`` when there is no ``config``): the per-step coefficient of
  variation across runs, raw and with the slow run-level drift of a shared
  host removed (data/README.md, Noise floor and drift);
* **configuration repeats** -- repeated runs of one configuration (column
  ``config``, e.g. Splitwise's 5 repeats): the coefficient of variation
  within each configuration.

**The floor** (one definition, the number every table divides a model's
held-out MAPE by: :attr:`NoiseFloor.floor`) is ``oracle_median``: the MAPE
(percent) of the *median oracle*, which predicts each configuration by the
constant that minimises that configuration's MAPE -- the median of its
replicates weighted by ``1/T`` (the plain median when all weights are equal)
-- with each row's error scaled by a finite-sample factor ``c_n``
(:func:`median_oracle_factor`, n replicates).  A median is not dragged by a
heavy-tailed replicate the way a mean is (a mean-based oracle under heavy
tails is no floor: a model can "beat" it).  Unscaled
(``oracle_median_sample``) it is a strict lower bound: every model of the
step's schedule predicts one value for all replicates of a configuration,
so none can have a lower MAPE on the replicated rows; but with 3
replicates one of each configuration is predicted exactly and the bound
is ``1/sqrt(2)`` of the error of knowing the configuration's true centre.
``c_n`` (sqrt(2) for n = 2 and 3 under normal noise) undoes that, as
``sqrt(n/(n-1))`` does for the mean below: the floor estimates the MAPE of a
model that knew each configuration's true median.

The other numbers are labelled diagnostics, not floors.  ``median_cv``: the
median over groups of ``sd (ddof=1) / mean``, the number docs/model.md (Fit
scales) quotes.  ``oracle_mape``: the MAPE (percent) of an oracle that
predicts each group's mean.  The deviation of a replicate from its group's *sample* mean
understates its deviation from the true mean by ``sqrt((n-1)/n)`` (n
replicates), so ``oracle_mape`` multiplies each row's absolute percentage
deviation by ``sqrt(n/(n-1))``: it estimates the MAPE of a model that knew
each configuration's true mean.  ``oracle_mape_sample`` is the uncorrected
value (a strict lower bound for n >= 2, exact for the in-sample mean).

Verified on synthetic replicates with known log-normal noise and a known
multiplicative drift (``tests/data/test_noise.py``).
"""
from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from perfmodel._checks import check_int_range, nonpositive_rows_text
from perfmodel.errors import InputError

__all__ = ["DRIFT_WINDOW", "NoiseFloor", "config_floor", "group_floors", "median_oracle_errors",
           "median_oracle_factor", "noise_floor", "replicate_floor"]

#: default rolling-median window (steps of one run) for the drift estimate
DRIFT_WINDOW = 201


@dataclass
class NoiseFloor:
    """A noise floor; see the module docstring for the definitions.

    ``kind`` is ``'replicate runs'``, ``'configuration repeats'`` or
    ``'none'`` (no repeated measurements: every number NaN).  The
    ``*_drift_removed`` fields are NaN for configuration repeats.
    """

    kind: str
    oracle_median: float
    oracle_median_sample: float
    median_cv: float
    oracle_mape: float
    oracle_mape_sample: float
    n_groups: int
    n_rows: int
    replicates: float
    median_cv_drift_removed: float = float("nan")
    oracle_mape_drift_removed: float = float("nan")
    window: int | None = None
    by: str | None = None
    key: str | None = None
    drift_range: tuple[float, float] | None = None
    by_group: dict[str, dict[str, float]] = field(default_factory=dict)
    note: str = ""
    #: per row of the trace: the median oracle's absolute percentage error (NaN where the
    #: row has no replicate); the unit a cluster bootstrap of a model/floor ratio resamples
    row_errors: np.ndarray | None = field(default=None, repr=False, compare=False)

    @property
    def floor(self) -> float:
        """The MAPE (percent) a model is compared with: ``oracle_median`` (module docstring)."""
        return self.oracle_median

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (NaN becomes None; ``row_errors`` left out)."""
        def clean(v):
            if isinstance(v, float) and not math.isfinite(v):
                return None
            if isinstance(v, dict):
                return {str(k): clean(x) for k, x in v.items()}
            if isinstance(v, (list, tuple)):
                return [clean(x) for x in v]
            return v
        d = asdict(self)
        d.pop("row_errors", None)
        return clean(d)


# ---------------------------------------------------------------------------
def _check_df(df, need, what):
    if not isinstance(df, pd.DataFrame):
        raise InputError(f"{what}: df must be a pandas DataFrame (a step trace), "
                         f"got {type(df).__name__}")
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise InputError(f"{what}: missing column(s) {missing}; columns present: "
                         f"{[str(c) for c in df.columns][:15]}")
    y = pd.to_numeric(df["duration_ms"], errors="coerce").to_numpy(float)
    bad = nonpositive_rows_text(y)
    if bad:
        raise InputError(f"{what}: duration_ms must be finite and > 0; {bad}")
    return y


def median_oracle_errors(y, groups) -> np.ndarray:
    """Absolute relative error of the median oracle, per row (NaN for unreplicated rows).

    Problem: the floor must be a bound no model of the schedule can beat.
    Each group (configuration) is predicted by ``c_g = argmin_c sum_i |y_i -
    c| / y_i``: the median of its values weighted by ``1/y_i`` (lower
    weighted median; for two values the smaller, whose error is then the
    smallest possible). Verified against a brute-force minimum over the
    group's values (``tests/data/test_noise.py``).

    Parameters
    ----------
    y : array_like (n,), positive step times
    groups : array_like (n,), configuration of each row

    Returns
    -------
    ndarray (n,)
        ``|y - c_g| / y`` (a fraction); NaN where the group has one row.
    """
    y = np.asarray(y, float).ravel()
    g = pd.factorize(pd.Series(np.asarray(groups)).astype(str))[0]
    if g.size != y.size:
        raise InputError(f"groups has {g.size} labels for {y.size} values")
    if not (np.isfinite(y) & (y > 0)).all():
        raise InputError("y must be finite and > 0")
    order = np.lexsort((y, g))
    gs, ys = g[order], y[order]
    w = 1.0 / ys
    cum = np.cumsum(w)
    start = np.searchsorted(gs, gs, side="left")
    before = np.where(start > 0, cum[np.maximum(start - 1, 0)], 0.0)
    within = cum - before
    tot = np.bincount(gs, weights=w)[gs]
    # first row of each group whose cumulative weight reaches half the group's
    reach = within >= tot / 2.0
    first = np.full(int(gs.max()) + 1, np.inf)
    np.minimum.at(first, gs[reach], np.flatnonzero(reach))
    c = ys[first.astype(np.int64)][gs]
    out = np.empty_like(y)
    out[order] = np.abs(ys - c) / ys
    cnt = np.bincount(g)[g]
    out[cnt < 2] = np.nan
    return out


@functools.lru_cache(maxsize=64)
def median_oracle_factor(n: int) -> float:
    """``c_n``: the error of the true median over the in-sample median oracle's, n replicates.

    ``c_n = E|X - median| / E[mean_i |X_i - m_n|]`` for normal X (``m_n`` the
    lower median of n draws, :func:`median_oracle_errors` on equal weights),
    by a seeded Monte Carlo of 40000 groups (relative error ~0.5 %); exactly
    sqrt(2) for n = 2 and 3 (tests).
    """
    n = check_int_range("median_oracle_factor: n", n, 2)
    rng = np.random.default_rng(20261126)
    groups = max(40000 // n, 4000)
    z = rng.standard_normal((groups, n))
    srt = np.sort(z, axis=1)
    med = srt[:, (n - 1) // 2]
    mean_dev = np.mean(np.abs(z - med[:, None]))
    return float(np.sqrt(2.0 / np.pi) / mean_dev)


def _scaled_median_errors(y, g) -> tuple[np.ndarray, np.ndarray]:
    """(errors scaled by c_n, unscaled errors) of the median oracle, per row."""
    e = median_oracle_errors(y, g)
    codes = pd.factorize(pd.Series(np.asarray(g)).astype(str))[0]
    n = np.bincount(codes)[codes]
    fac = np.ones(e.size)
    for k in np.unique(n[n >= 2]):
        fac[n == k] = median_oracle_factor(int(k))
    return e * fac, e


def _stats(y: np.ndarray, g: np.ndarray) -> tuple[pd.Series, float, float, int, int, float]:
    """(cv per group, oracle MAPE corrected, uncorrected, groups, rows, mean replicates)."""
    s = pd.Series(y)
    grp = s.groupby(g)
    n = grp.transform("count").to_numpy(float)
    keep = n >= 2
    if not keep.any():
        return pd.Series(dtype=float), np.nan, np.nan, 0, 0, np.nan
    mean = grp.transform("mean").to_numpy(float)
    ape = np.abs(y - mean) / y
    cv = (grp.std(ddof=1) / grp.mean())[grp.count() >= 2]
    o_corr = 100.0 * float(np.mean(ape[keep] * np.sqrt(n[keep] / (n[keep] - 1))))
    o_raw = 100.0 * float(np.mean(ape[keep]))
    counts = grp.count()
    counts = counts[counts >= 2]
    return cv, o_corr, o_raw, int(counts.size), int(keep.sum()), float(counts.mean())


def _by_group(y, g, label):
    out = {}
    for lab in pd.unique(label):
        m = label == lab
        cv, oc, _, ng, _, _ = _stats(y[m], g[m])
        if ng:
            out[str(lab)] = {"oracle_median": _oracle_median(y[m], g[m]),
                             "median_cv": float(cv.median()), "oracle_mape": oc, "n_groups": ng}
    return out


def _oracle_median(y, g) -> float:
    e = _scaled_median_errors(y, g)[0]
    return 100.0 * float(np.nanmean(e)) if np.isfinite(e).any() else float("nan")


def config_floor(df: pd.DataFrame, group: str = "config", *,
                 by: str | None = "phase") -> NoiseFloor:
    """Configuration-repeat floor: variation between repeats of one configuration.

    Rows sharing ``df[group]`` are repeats of one configuration (Splitwise:
    5 runs each).  Groups with one row are ignored.

    Parameters
    ----------
    df : DataFrame with ``duration_ms`` and ``group``
    group : column naming the configuration
    by : optional column (default ``'phase'`` when present) for a
        per-label breakdown in ``by_group``

    Returns
    -------
    NoiseFloor with ``kind='configuration repeats'`` (or ``'none'`` when no
    configuration is repeated).

    Examples
    --------
    >>> import pandas as pd
    >>> df = pd.DataFrame({"config": ["a", "a", "b", "b"], "duration_ms": [9.0, 11.0, 19.0, 21.0]})
    >>> round(config_floor(df).median_cv, 4)
    0.1061
    """
    if not isinstance(group, str):
        raise InputError(f"config_floor: group must be a column name, got {group!r}")
    y = _check_df(df, ["duration_ms", group], "config_floor")
    g = df[group].astype(str).to_numpy()
    cv, oc, orw, ng, nr, rep = _stats(y, g)
    if ng == 0:
        return NoiseFloor("none", np.nan, np.nan, np.nan, np.nan, np.nan, 0, 0, np.nan, key=group,
                          note=f"no value of {group!r} has two or more rows")
    by_group = _by_group(y, g, df[by].astype(str).to_numpy()) if by and by in df.columns else {}
    err, raw = _scaled_median_errors(y, g)
    return NoiseFloor("configuration repeats", 100.0 * float(np.nanmean(err)),
                      100.0 * float(np.nanmean(raw)), float(cv.median()),
                      oc, orw, ng, nr, rep,
                      key=group, by=by if by_group else None, by_group=by_group,
                      note=f"repeats of one {group!r}; floor = per-{group} 1/T-weighted median "
                           "(oracle_mape: per-group mean, deviations scaled by sqrt(n/(n-1)))",
                      row_errors=err)


def replicate_floor(df: pd.DataFrame, *, replicate: str = "replicate", key: str | None = None,
                    order: str = "step", window: int = DRIFT_WINDOW,
                    by: str | None = "phase") -> NoiseFloor:
    """Replicate-run floor: per-step variation across same-seed runs, raw and drift-removed.

    Problem: same-seed runs of one engine execute identical schedules, so
    the spread of one step's time across runs is measurement noise; on a
    shared host part of it is a slow run-level drift (data/README.md, Noise floor and drift),
    reported separately.

    Steps are matched across runs by ``key`` (default ``'config'`` when the
    column exists, else ``'step'``); keys not present in every run, or whose
    schedule (``batch_size``, ``total_tokens`` and, when present,
    ``chunk_sizes``/``context_lens``) differs between runs, are left out and
    counted in ``note``.

    Drift removal: within each run, in the order of ``order``, the log ratio
    ``l = log T - mean over runs of log T`` (the log ratio to the key's
    geometric replicate mean) is smoothed by a centred rolling median over
    ``window`` steps (at least ``window // 4`` present); each time is divided
    by ``exp`` of it.  With ``by`` (default ``'phase'`` when present) the
    drift is estimated separately per label, since a host slowdown moves
    launch-bound decode steps more than compute-bound prefill steps.

    Parameters
    ----------
    df : DataFrame with ``duration_ms``, ``replicate`` and the key
    replicate : column naming the run
    key : column matching steps across runs (see above)
    order : column giving time order within a run (``step`` or ``timestamp``)
    window : int >= 3, rolling-median window in steps
    by : optional column for a per-label drift and breakdown

    Returns
    -------
    NoiseFloor with ``kind='replicate runs'``; ``drift_range`` is the
    smallest and largest drift factor removed.
    """
    if key is None:
        key = "config" if isinstance(df, pd.DataFrame) and "config" in df.columns else "step"
    window = check_int_range("replicate_floor: window", window, 3)
    y, d, runs = _runs_table(df, replicate, key, order)
    ok, notes = _matched_steps(df, d, runs.size, key)
    lab = (df[by].astype(str).to_numpy() if by and by in df.columns else None)
    d, y_ok = d[ok].copy(), y[ok]
    lab_ok = lab[ok] if lab is not None else None
    if d.empty:
        return NoiseFloor("none", np.nan, np.nan, np.nan, np.nan, np.nan, 0, 0, np.nan, key=key,
                          note="; ".join(notes) or "no key is in every run")
    drift = _drift(d, lab_ok, window)
    y_corr = d["y"].to_numpy() * np.exp(-drift.to_numpy())
    g = d["key"].to_numpy()
    cv, oc, orw, ng, nr, rep = _stats(y_ok, g)
    cv2, oc2, _, _, _, _ = _stats(y_corr, g)
    err, err_raw = np.full(y.size, np.nan), np.full(y.size, np.nan)
    err[ok], err_raw[ok] = _scaled_median_errors(y_ok, g)
    by_group = _by_group_drift(y_ok, y_corr, g, lab_ok) if lab_ok is not None else {}
    notes.insert(0, f"{runs.size} runs matched by {key!r}; drift = rolling median over "
                    f"{int(window)} steps of each run" + (f" per {by!r}" if lab_ok is not None
                                                          else ""))
    return NoiseFloor("replicate runs", 100.0 * float(np.nanmean(err)),
                      100.0 * float(np.nanmean(err_raw)), float(cv.median()),
                      oc, orw, ng, nr, rep, row_errors=err,
                      median_cv_drift_removed=float(cv2.median()),
                      oracle_mape_drift_removed=oc2, window=int(window),
                      by=by if lab_ok is not None else None, key=key,
                      drift_range=(float(np.exp(drift.min())), float(np.exp(drift.max()))),
                      by_group=by_group, note="; ".join(notes))


def _runs_table(df, replicate: str, key: str, order: str):
    """Check the columns of :func:`replicate_floor`; return ``(y, table, run names)``.

    The table has one row per step: ``y`` (ms), ``rep`` (run), ``key`` and
    ``t`` (time order), all runs' keys as text.
    """
    need = ["duration_ms", replicate, key] + ([order] if order != key else [])
    y = _check_df(df, list(dict.fromkeys(need)), "replicate_floor")
    if order not in df.columns:
        raise InputError(f"replicate_floor: order column {order!r} is missing")
    d = pd.DataFrame({"y": y, "rep": df[replicate].astype(str).to_numpy(),
                      "key": df[key].astype(str).to_numpy(),
                      "t": pd.to_numeric(df[order], errors="coerce").to_numpy(float)})
    if not np.isfinite(d["t"]).all():
        raise InputError(f"replicate_floor: order column {order!r} has missing values")
    runs = d["rep"].unique()
    if runs.size < 2:
        raise InputError(f"replicate_floor: column {replicate!r} names {runs.size} run; "
                         "two or more replicate runs are needed")
    return y, d, runs


def _matched_steps(df, d, n_runs_total: int, key: str) -> tuple[np.ndarray, list[str]]:
    """Rows whose key is in every run with one schedule, and notes on those left out."""
    sched_cols = [c for c in ("batch_size", "total_tokens", "chunk_sizes", "context_lens")
                  if c in df.columns]
    sched = df[sched_cols].astype(str).agg("|".join, axis=1).to_numpy() if sched_cols else None
    notes = []
    dup = d.duplicated(["rep", "key"])
    if dup.any():
        raise InputError(f"replicate_floor: key {key!r} repeats within a run at "
                         f"{int(dup.sum())} rows (first {np.flatnonzero(dup)[:5].tolist()}); "
                         "choose a key that identifies one step of a run")
    n_runs = d.groupby("key")["rep"].transform("nunique").to_numpy()
    ok = n_runs == n_runs_total
    if sched is not None:
        same = pd.Series(sched).groupby(d["key"].to_numpy()).transform("nunique").to_numpy() == 1
        if (~same & ok).any():
            notes.append(f"{pd.unique(d['key'][~same & ok]).size} keys with different schedules "
                         "across runs left out")
        ok &= same
    if (~ok).any():
        notes.append(f"{int((~ok).sum())} rows left out (key not in every run or schedule "
                     "differs)")
    return ok, notes


def _drift(d, lab_ok, window: int) -> pd.Series:
    """Log drift factor of each row (index of ``d``): the rolling median of the log ratio to
    the key's geometric replicate mean, within each run (and label) in time order."""
    logy = np.log(d["y"])
    srt = d.assign(lr=logy - logy.groupby(d["key"]).transform("mean"),
                   lab=lab_ok if lab_ok is not None else "").sort_values(["rep", "t"],
                                                                         kind="stable")
    minp = max(3, int(window) // 4)
    drift = srt.groupby(["rep", "lab"], sort=False)["lr"].transform(
        lambda x: x.rolling(int(window), center=True, min_periods=minp).median())
    return drift.fillna(0.0).reindex(srt.index).sort_index()


def _by_group_drift(y_ok, y_corr, g, lab_ok) -> dict[str, dict[str, float]]:
    """Per-label breakdown, raw and drift-removed."""
    raw = _by_group(y_ok, g, lab_ok)
    cor = _by_group(y_corr, g, lab_ok)
    return {k: {**raw[k], "median_cv_drift_removed": cor[k]["median_cv"],
                "oracle_mape_drift_removed": cor[k]["oracle_mape"]} for k in raw}


def noise_floor(df: pd.DataFrame, *, window: int = DRIFT_WINDOW) -> NoiseFloor:
    """The floor a trace supports: replicate runs if it has them, else configuration repeats.

    Replicate runs: a ``replicate`` column with two or more runs and a
    ``config`` or ``step`` key seen in every run (:func:`replicate_floor`).
    Otherwise configuration repeats (:func:`config_floor` on ``config``).
    Otherwise ``kind='none'`` (NaN floor: e.g. Sarathi-Serve's single
    batches, or Vidur's deterministic composition).
    """
    if not isinstance(df, pd.DataFrame):
        raise InputError(f"noise_floor: df must be a pandas DataFrame, got {type(df).__name__}")
    if "replicate" in df.columns and df["replicate"].nunique() >= 2:
        order = "step" if "step" in df.columns else ("timestamp" if "timestamp" in df.columns
                                                     else None)
        if order is not None:
            nf = replicate_floor(df, order=order, window=window)
            if nf.kind != "none":
                return nf
    if "config" in df.columns:
        return config_floor(df)
    return NoiseFloor("none", np.nan, np.nan, np.nan, np.nan, np.nan, 0, 0, np.nan,
                      note="no replicate runs and no 'config' column")


def group_floors(df: pd.DataFrame, by, *, window: int = DRIFT_WINDOW) -> pd.Series:
    """The floor of each group of a data set that holds several separate traces.

    Problem: a data set such as Splitwise holds one trace per (model,
    hardware, TP) group, each fitted and validated on its own; its floor is
    the floor of each group (:func:`noise_floor` on the group's rows), and
    a one-number summary is the median over groups -- the same statistic as
    the median-over-groups MAPE it is compared with.  Every table and
    number quoting a per-group floor takes it from here, so the data set
    table, the per-group fit table and the model comparison agree.

    Parameters
    ----------
    df : DataFrame
        Rows of all groups, with the columns :func:`noise_floor` needs.
    by : str or list of str
        Columns naming a group (e.g. ``["model", "hardware", "tp"]``).
    window : int
        Drift window passed to :func:`noise_floor`.

    Returns
    -------
    pandas.Series of :class:`NoiseFloor`, indexed by the group key (a tuple
    when ``by`` names several columns), in sorted group order; ``.map(lambda
    nf: nf.floor).median()`` is the summary.  Verified against
    :func:`noise_floor` on each group in ``tests/data/test_noise.py``.
    """
    if not isinstance(df, pd.DataFrame):
        raise InputError(f"group_floors: df must be a pandas DataFrame, got {type(df).__name__}")
    cols = [by] if isinstance(by, str) else list(by) if isinstance(by, (list, tuple)) else None
    if not cols or not all(isinstance(c, str) for c in cols):
        raise InputError(f"group_floors: by must be a column name or a list of them, got {by!r}")
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise InputError(f"group_floors: missing group column(s) {missing}")
    if df.empty:
        raise InputError("group_floors: df has no rows")
    key = cols[0] if isinstance(by, str) else cols
    out = {k: noise_floor(g.reset_index(drop=True), window=window)
           for k, g in df.groupby(key, sort=True)}
    return pd.Series(out, dtype=object, name="floor")
