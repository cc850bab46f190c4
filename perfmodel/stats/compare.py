"""Compare latency models and baselines on the same held-out folds.

Problem
-------
A model earns its parameters only if it predicts steps it was not fitted
to better than simpler or more flexible alternatives, and the gap that
matters is the one to the measurement noise floor.  :func:`compare` fits
every model of :mod:`perfmodel.core.model` and every baseline of
:mod:`perfmodel.stats.baselines` on the *same* folds and writes one row per
candidate: held-out MAPE/RMSE overall and by regime (decode-only / mixed /
prefill-heavy, :func:`perfmodel.stats.validation.regime`), the number of
parameters, AIC/BIC and the pure-error lack-of-fit F test in sample on all
steps, and the ratio of held-out MAPE to the noise floor of
:func:`perfmodel.data.noise.noise_floor` (the median oracle, see there) with
a cluster-bootstrap interval (:func:`perfmodel.stats.protocol.ratio_interval`).
Each candidate is also compared with a reference (by default the model of
record, :func:`perfmodel.core.model.default_for`): its MAPE difference in
points with a paired cluster-bootstrap interval and a paired sign-flip test
(:func:`perfmodel.stats.protocol.paired_difference`), so that differences
the shared test steps resolve are told from those they do not.  Beside the
MAPE, the median absolute percentage error (``MdAPE``) and the RMS log
error (``RMSLE``, :func:`perfmodel.stats.scores.robust_metrics`).

Folds
-----
Every scheme is one of the evaluation protocol
(:func:`perfmodel.stats.protocol.protocol_folds`, on the one fold engine
:func:`perfmodel.stats.validation.make_folds`): ``cv='grouped'`` (same
configuration + identical schedule; on a time-ordered trace 25-step
blocks), ``'blocked25'`` / ``'blocked100'`` (contiguous time blocks,
neighbours purged), ``'transfer'`` (train on some ``workload`` values, test
on ``test_workload``), ``'extrapolate'`` (test the steps with ``S`` or
``B`` above their ``quantile``), and ``'time'`` (expanding windows,
docs/model.md, Evaluation).

Held-out scores pool the out-of-fold predictions (each step is predicted
once in grouped CV); ``fold_mape_mean`` is the mean of per-fold MAPEs
(the mean error over folds, docs/model.md, Evaluation).

Dataset names
-------------
``TRACE`` is a step-trace file (CSV, Parquet, JSON Lines) or a public
dataset loaded through :mod:`perfmodel.data.datasets`:

* ``splitwise:MODEL/HARDWARE/tpK``, e.g. ``splitwise:llama2-70b/a100-80gb/tp4``
  (``HARDWARE`` may be a unique prefix such as ``a100``);
* ``sarathi`` -- the Sarathi-Serve specimen batches;
* ``vidur`` or ``vidur:SEED`` -- Vidur's profile composed into steps.
"""
from __future__ import annotations

import io
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perfmodel.core.model import MODELS
from perfmodel.core.scale import DEFAULT as DEFAULT_SCALE
from perfmodel.core.scale import get_scale
from perfmodel.data.features import CONTEXT_KEYS
from perfmodel.errors import FitError, InputError

__all__ = [
    "CV_SCHEMES",
    "DEFAULT_BASELINES",
    "DEFAULT_MODELS",
    "LOF_LEVEL",
    "ModelCandidate",
    "compare",
    "in_sample_stats",
    "load_trace_arg",
    "make_candidate",
]

#: models compared by default: every registered member fitted as itself (the seed form is
#: fitted through ``seed_id``) that is not an ablation, in registration order
DEFAULT_MODELS = tuple(name for name, m in MODELS.items()
                       if m.fitted_as is None and m.ablation_of is None)
#: baselines compared by default: the peers that need no hardware description (the roofline
#: needs the model's shape and the GPU's peaks) and the non-negative linear ablation; the
#: cubic ``poly3`` is left out (an unregularised strawman: 970 % held-out MAPE on Splitwise)
DEFAULT_BASELINES = ("linear", "poly2", "constant_throughput", "distserve", "splitwise_interp",
                     "nnls_ctx", "random_forest")
CV_SCHEMES = ("grouped", "blocked25", "blocked100", "transfer", "extrapolate", "time")
_CTX_FEATURES = frozenset(CONTEXT_KEYS)
_REGIMES = ("decode-only", "mixed", "prefill-heavy")
#: Confidence level of the lack-of-fit effect size's interval (``lof_sd_lo`` / ``lof_sd_hi``),
#: the level of the other intervals of the table
LOF_LEVEL = 0.9


# ---------------------------------------------------------------------------
# folds
# ---------------------------------------------------------------------------
def _splits(df: pd.DataFrame, cv: str, k: int, seed: int, quantile: float,
            time_ordered: bool | None, test_workload=None) -> list[tuple[np.ndarray, np.ndarray]]:
    """The folds of ``cv``: the protocol's (:func:`perfmodel.stats.protocol.protocol_folds`)."""
    from perfmodel.stats.protocol import protocol_folds
    from perfmodel.stats.validation import make_folds

    if cv not in CV_SCHEMES:
        raise InputError(f"cv {cv!r} is not one of {list(CV_SCHEMES)}")
    if cv == "time":
        return make_folds(df, "expanding", k, seed, time_ordered=time_ordered)
    return protocol_folds(df, cv, k, seed, quantile=quantile, time_ordered=time_ordered,
                          test=test_workload)


# ---------------------------------------------------------------------------
# candidates
# ---------------------------------------------------------------------------
class ModelCandidate:
    """A member of the model family behind ``fit(df)`` / ``predict(df)``.

    ``__init__`` only stores its arguments; ``fit`` calls
    :func:`perfmodel.core.fit.fit_model` and keeps the result in ``result_``.
    """

    def __init__(self, model: str, *, relative: str = DEFAULT_SCALE, loss: str = "linear",
                 n_starts: int = 4, seed: int = 0):
        self.model = model
        self.relative = relative
        self.loss = loss
        self.n_starts = n_starts
        self.seed = seed

    @property
    def name(self) -> str:
        return self.model

    def fit(self, df: pd.DataFrame) -> ModelCandidate:
        from perfmodel.core.fit import fit_model

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            self.result_ = fit_model(df, self.model, loss=self.loss, relative=self.relative,
                                     n_starts=self.n_starts, seed=self.seed)
        return self

    def predict(self, df: pd.DataFrame) -> np.ndarray:
        return np.asarray(self.result_.predict(df), float)

    @property
    def n_params(self) -> int:
        """Nominal parameters less those whose term is identically zero on the fitted steps.

        (``c_kv_mixed`` on a trace without mixed steps, ``a_attn`` on one
        without prefill chunks: the data carry no such term to estimate.)
        """
        r = self.result_
        J = r.model.jacobian(r.values, r.features)
        return int(r.n_params - np.sum(np.all(J == 0, axis=0)))


def _needs_context(name: str, kind: str) -> bool:
    if kind == "baseline":
        return name in ("distserve", "nnls_ctx", "roofline", "trained_roofline")
    from perfmodel.core.model import get_model

    return bool(set(get_model(name).requires) & _CTX_FEATURES)


def make_candidate(name: str, kind: str, relative: str = DEFAULT_SCALE, loss: str = "linear",
                   n_starts: int = 4, seed: int = 0, baseline_kwargs: dict | None = None):
    """An unfitted candidate: a :class:`ModelCandidate` (``kind='model'``) or a baseline."""
    if kind == "model":
        return ModelCandidate(name, relative=relative, loss=loss, n_starts=n_starts, seed=seed)
    from perfmodel.stats.baselines import get_baseline

    kw: dict[str, Any] = {"relative": get_scale(relative).relative}
    if name == "random_forest":
        kw["random_state"] = seed
    return get_baseline(name, **kw, **(baseline_kwargs or {}).get(name, {}))


def _min_train(name: str, kind: str) -> int:
    """Fewest training steps a candidate is fitted on: one more than its parameters (2 for a forest)."""
    if kind == "model":
        from perfmodel.core.model import get_model

        m = get_model(name)
        return get_model(m.fitted_as or m.name).n_params + 1
    from perfmodel.stats.baselines import get_baseline

    k = get_baseline(name).n_params
    return 2 if k is None else int(k) + 1


def _scale_resid(y, yhat, relative):
    """Residuals on the comparison's fit scale; None where the scale cannot take ``yhat``."""
    scale = get_scale(relative)
    if scale.positive and np.any(yhat <= 0):
        return None
    return scale.residual(y, yhat)


def _score(y, pred, labels, prefix=""):
    from perfmodel.stats.scores import robust_metrics
    from perfmodel.stats.validation import metrics

    out = {}
    m = metrics(y, pred)
    out["MAPE"], out["RMSE"] = m["MAPE"], m["RMSE"]
    rm = robust_metrics(y, pred)
    out["MdAPE"], out["RMSLE"] = rm["MdAPE"], rm["RMSLE"]
    for r in _REGIMES:
        sel = labels == r
        if sel.any():
            mr = metrics(y[sel], pred[sel])
            out[f"MAPE_{r}"], out[f"RMSE_{r}"] = mr["MAPE"], mr["RMSE"]
        else:
            out[f"MAPE_{r}"] = out[f"RMSE_{r}"] = np.nan
    return out


def _check_names(names, known, what) -> list[str]:
    if isinstance(names, str):
        names = [s for s in names.split(",") if s]
    names = list(names)
    bad = [n for n in names if n not in known]
    if bad:
        raise InputError(f"unknown {what} {bad}; choose from {sorted(known)}")
    if len(set(names)) != len(names):
        raise InputError(f"{what} listed twice: {sorted({n for n in names if names.count(n) > 1})}")
    return names


def _held_out(df, y, splits, make, min_train):
    """Out-of-fold predictions of one candidate: (pred, fold MAPEs, error messages, folds
    not fitted because they have fewer than ``min_train`` training steps)."""
    pred = np.full(len(df), np.nan)
    fold_mape, errs, unfit = [], [], 0
    for tr, te in splits:
        if len(tr) < min_train:
            unfit += 1  # more parameters than training steps: not fitted
            continue
        try:
            cand = make().fit(df.iloc[tr])
            p = np.asarray(cand.predict(df.iloc[te]), float)
            if not np.all(np.isfinite(p)):
                raise FitError(f"{int((~np.isfinite(p)).sum())} non-finite predictions")
        except (InputError, FitError, ValueError, np.linalg.LinAlgError) as exc:
            errs.append(f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
            continue
        pred[te] = p
        fold_mape.append(100 * float(np.mean(np.abs(y[te] - p) / y[te])))
    return pred, fold_mape, errs, unfit


def _in_sample(df, y, make, relative, lof_groups) -> dict[str, Any]:
    """In-sample MAPE, parameters, AIC/BIC and the lack-of-fit F test of one candidate."""
    from perfmodel.stats.adequacy import information_criteria, lack_of_fit

    row: dict[str, Any] = {}
    cand = make().fit(df)
    p = np.asarray(cand.predict(df), float)
    row["mape_in"] = 100 * float(np.mean(np.abs(y - p) / y))
    kpar = cand.n_params
    row["n_params"] = np.nan if kpar is None else int(kpar)
    e = _scale_resid(y, p, relative)
    if e is None or kpar is None:
        return row
    row["aic"], row["bic"] = information_criteria(float(e @ e), len(y), int(kpar))
    if lof_groups is not None:
        # the test on the fit's scale: y - yhat there is the scale's residual
        try:
            lof = lack_of_fit(e, np.zeros_like(e), lof_groups, int(kpar))
            row["lof_F"], row["lof_p"] = lof.F, lof.pvalue
            row["lof_sd_ratio"] = lof.bias_sd_ratio
            row["lof_sd_lo"], row["lof_sd_hi"] = lof.bias_sd_ratio_interval(LOF_LEVEL)
        except InputError:
            pass
    return row


def in_sample_stats(df: pd.DataFrame, make, relative: str = DEFAULT_SCALE) -> dict[str, Any]:
    """In-sample statistics of one candidate fitted on all of ``df`` (those of :func:`compare`).

    The same computation as :func:`compare`'s in-sample columns, for a table
    whose held-out scores come from elsewhere: ``mape_in``, ``n_params``, and
    where the candidate has a parameter count ``aic``, ``bic`` and, where some
    schedules are replicated, the pure-error lack-of-fit test ``lof_F``,
    ``lof_p`` and its effect size ``lof_sd_ratio`` with its :data:`LOF_LEVEL`
    interval ``lof_sd_lo`` / ``lof_sd_hi``
    (:func:`perfmodel.stats.adequacy.lack_of_fit` on the residuals of
    the ``relative`` scale, groups of identical schedules).

    Parameters
    ----------
    df : DataFrame, a step trace with ``duration_ms`` (> 0)
    make : callable returning an unfitted candidate (``fit(df)``, ``predict(df)``,
        ``n_params``), as :func:`make_candidate`'s
    relative : fit scale of the residuals (:mod:`perfmodel.core.scale`)
    """
    if not isinstance(df, pd.DataFrame) or "duration_ms" not in df.columns:
        raise InputError("df must be a step trace (a DataFrame with a duration_ms column)")
    if not callable(make):
        raise InputError(f"make must be a callable returning a candidate, got {type(make).__name__}")
    y = pd.to_numeric(df["duration_ms"], errors="coerce").to_numpy(float)
    if not np.all(np.isfinite(y) & (y > 0)):
        raise InputError("duration_ms must hold positive finite times")
    get_scale(relative)
    return _in_sample(df, y, make, relative, _lof_groups(df))


def _lof_groups(df: pd.DataFrame) -> np.ndarray | None:
    """Groups of identical inputs (same schedule) when some are replicated, else None."""
    from perfmodel.stats.schedule_key import _schedule_key

    g = _schedule_key(df)
    return g if np.unique(g).size < g.size else None


def compare(df: pd.DataFrame, models: Sequence[str] | str | None = None,
            baselines: Sequence[str] | str | None = None, cv: str = "grouped", k: int = 5,
            seed: int = 0, *, relative: str = DEFAULT_SCALE, loss: str = "linear", n_starts: int = 4,
            quantile: float = 0.8, floor=None, in_sample: bool = True,
            time_ordered: bool | None = None, progress=None, test_workload=None,
            baseline_kwargs: dict | None = None, n_boot: int = 1000,
            reference: str | None = None) -> pd.DataFrame:
    """Fit every model and baseline on the same folds and score them held out.

    Parameters
    ----------
    df : DataFrame, a step trace (``batch_size``, ``total_tokens``,
        ``duration_ms``; ``chunk_sizes``/``context_lens`` for context-aware
        candidates; ``config`` for grouping and the noise floor)
    models : names in :data:`perfmodel.core.model.MODELS` (default
        :data:`DEFAULT_MODELS`); a comma-separated string also works
    baselines : names in :data:`perfmodel.stats.baselines.BASELINES` (default
        :data:`DEFAULT_BASELINES`)
    cv : one of :data:`CV_SCHEMES` (module docstring)
    k : folds (grouped/blocked: at most the number of groups; time: windows)
    seed : seeds the fold assignment, the multi-start, the forest and the bootstrap
    relative : the models' residuals ('log', 'weight', 'absolute'); the
        baselines fit relative error unless 'absolute'
    loss, n_starts : passed to :func:`perfmodel.core.fit.fit_model`
    quantile : the extrapolation split's quantile of S and B
    floor : a :class:`perfmodel.data.noise.NoiseFloor` (default: computed on
        the test steps' trace -- for ``'transfer'`` the test workload)
    in_sample : also fit every candidate on all steps for ``mape_in``,
        ``n_params``, ``aic``, ``bic``, ``lof_F``, ``lof_p``, ``lof_sd_ratio``,
        ``lof_sd_lo``, ``lof_sd_hi`` (False leaves them NaN)
    time_ordered : whether the folds add time blocks and purge neighbours
        (default :func:`perfmodel.stats.validation.is_time_ordered`)
    progress : optional callable ``progress(str)`` told each candidate
    test_workload : ``cv='transfer'``: the ``workload`` value(s) predicted
    baseline_kwargs : ``{baseline name: keyword arguments}`` (e.g. the roofline's
        ``model_config`` and peaks)
    n_boot : cluster-bootstrap draws of the ratio and difference intervals
        (and random sign flips of the paired test)
    reference : the candidate every other one is compared with (default: the
        model of record, :func:`perfmodel.core.model.default_for`, when it is
        among the models, else the first model, else the first baseline)

    Returns
    -------
    DataFrame, one row per candidate: ``name``, ``kind`` ('model' or
    'baseline'), ``status`` ('ok', 'skipped: ...' or 'failed: ...'),
    ``n_params``, held-out ``MAPE``, ``RMSE`` and each by regime
    (``MAPE_decode-only`` ...), ``n_test``, ``fold_mape_mean``,
    ``fold_mape_sd``, in-sample ``mape_in`` / ``aic`` / ``bic`` / ``lof_F`` /
    ``lof_p`` / ``lof_sd_ratio`` with its :data:`LOF_LEVEL` interval ``lof_sd_lo`` /
    ``lof_sd_hi`` (residuals on the ``relative`` scale; the lack-of-fit test
    groups identical schedules;
    :meth:`perfmodel.stats.adequacy.LackOfFitResult.bias_sd_ratio_interval`), ``noise_floor`` (median-oracle MAPE,
    percent), ``ratio_to_floor`` and its 90 % cluster-bootstrap interval
    ``ratio_lo`` / ``ratio_hi`` (over the test steps that have replicates;
    clusters: the leak-free groups), ``MdAPE`` (percent) and ``RMSLE``
    held out, ``diff_vs_ref`` (MAPE minus the reference's MAPE, points, on
    the test steps both predicted) with its 90 % paired cluster-bootstrap
    interval ``diff_lo`` / ``diff_hi`` (the same resampled clusters for both)
    and ``p_vs_ref`` (two-sided paired sign-flip test over the clusters;
    :func:`perfmodel.stats.protocol.paired_difference`; the reference's row:
    0 and NaN), ``cv``, ``k``, ``relative``.  Sorted as
    given (models, then baselines).  ``df.attrs['reference']`` names the
    reference, ``df.attrs['noise_floor']`` holds the
    floor as a dict, ``df.attrs['predictions']`` the out-of-fold predictions
    (one column per candidate, NaN off the test sets; rows of the validated
    trace, index reset).
    """
    from perfmodel.data.trace import has_context, validate_trace
    from perfmodel.stats.validation import regime

    models, baselines = _check_args(df, models, baselines, relative, k, n_starts,
                                    baseline_kwargs)
    df = validate_trace(df).reset_index(drop=True)
    reference = _reference(df, models, baselines, reference)
    need = _check_size(df, models, baselines)
    splits = _splits(df, cv, int(k), seed, quantile, time_ordered, test_workload)
    test_rows = np.unique(np.concatenate([te for _, te in splits]))
    nf, floor_err = _floor(df, test_rows, floor)
    clusters = _clusters(df, time_ordered)
    has_ctx = has_context(df)
    y = df["duration_ms"].to_numpy(float)
    labels = regime(df).to_numpy().astype(str)
    ctx = _Context(df=df, y=y, splits=splits, test_rows=test_rows, labels=labels,
                   floor_err=floor_err, clusters=clusters,
                   lof_groups=_lof_groups(df) if in_sample else None,
                   relative=relative, seed=seed, n_boot=n_boot)
    rows, preds = [], {}
    for kind, names in (("model", models), ("baseline", baselines)):
        for name in names:
            if progress is not None:
                progress(f"{kind} {name}")
            make = partial(make_candidate, name, kind, relative, loss, n_starts, seed,
                           baseline_kwargs)
            row, pred = _candidate_row(ctx, name, kind, make, need[(name, kind)], in_sample,
                                       has_ctx)
            rows.append(row)
            if pred is not None:
                preds[name] = pred
    _paired(rows, preds, reference, ctx)
    out = _table(rows, nf, cv, len(splits), relative, len(df))
    out.attrs["predictions"] = pd.DataFrame(preds)
    out.attrs["reference"] = reference
    return out


def _reference(df, models, baselines, reference) -> str:
    """The candidate :func:`compare` measures differences against (see there)."""
    from perfmodel.core.model import default_for

    names = [*models, *baselines]
    if reference is None:
        rec = default_for(df)
        return rec if rec in models else names[0]
    if not isinstance(reference, str) or reference not in names:
        raise InputError(f"reference {reference!r} is not among the candidates {names}")
    return reference


def _paired(rows, preds, reference, ctx) -> None:
    """Add ``diff_vs_ref``, ``diff_lo``, ``diff_hi``, ``p_vs_ref`` to each row in place."""
    from perfmodel.stats.protocol import paired_difference

    ref = preds.get(reference)
    if ref is None:  # the reference was skipped: no differences
        return
    y = ctx.y
    ref_err = np.abs(y - ref) / y
    for row in rows:
        pred = preds.get(row["name"])
        if pred is None or row["name"] == reference:
            if row["name"] == reference:
                row.update(diff_vs_ref=0.0, diff_lo=0.0, diff_hi=0.0, p_vs_ref=np.nan)
            continue
        err = np.abs(y - pred) / y
        row["diff_vs_ref"], row["diff_lo"], row["diff_hi"], row["p_vs_ref"] = \
            paired_difference(err, ref_err, ctx.clusters, n_boot=ctx.n_boot, seed=ctx.seed)


def _check_args(df, models, baselines, relative, k, n_starts,
                baseline_kwargs) -> tuple[list[str], list[str]]:
    """Check the arguments of :func:`compare`; return the model and baseline names."""
    from perfmodel.core.model import MODELS
    from perfmodel.stats.baselines import BASELINES

    if not isinstance(df, pd.DataFrame):
        raise InputError(f"df must be a pandas DataFrame (a step trace), got {type(df).__name__}")
    models = _check_names(DEFAULT_MODELS if models is None else models, MODELS, "models")
    baselines = _check_names(DEFAULT_BASELINES if baselines is None else baselines, BASELINES,
                             "baselines")
    if not models and not baselines:
        raise InputError("nothing to compare: models and baselines are both empty")
    get_scale(relative)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 2:
        raise InputError(f"k must be an integer >= 2, got {k!r}")
    if isinstance(n_starts, bool) or not isinstance(n_starts, (int, np.integer)) or n_starts < 1:
        raise InputError(f"n_starts must be an integer >= 1, got {n_starts!r}")
    if baseline_kwargs is not None and not isinstance(baseline_kwargs, dict):
        raise InputError(f"baseline_kwargs must be a dict, got {type(baseline_kwargs).__name__}")
    return models, baselines


def _check_size(df, models, baselines) -> dict[tuple[str, str], int]:
    """Fewest training steps of each candidate; the trace must have more than the smallest."""
    need = {(n, kd): _min_train(n, kd) for kd, ns in (("model", models), ("baseline", baselines))
            for n in ns}
    (small, _), fewest = min(need.items(), key=lambda kv: kv[1])
    if len(df) <= fewest:
        raise InputError(f"the trace has {len(df)} steps, too few to compare: the smallest "
                         f"candidate ({small}) needs {fewest} training steps and the test "
                         "folds more")
    return need


@dataclass(frozen=True)
class _Context:
    """What every candidate of one :func:`compare` call is scored on."""

    df: pd.DataFrame
    y: np.ndarray  # measured step times (ms)
    splits: list  # the folds, (train, test) positions
    test_rows: np.ndarray  # rows in some test set
    labels: np.ndarray  # regime of each row
    floor_err: np.ndarray  # median-oracle error of each row (NaN without replicates)
    clusters: np.ndarray  # leak-free group of each row (the bootstrap's clusters)
    lof_groups: np.ndarray | None  # identical-schedule groups for the lack-of-fit test
    relative: str
    seed: int
    n_boot: int


def _candidate_row(ctx: _Context, name: str, kind: str, make, min_train: int,
                   in_sample: bool, has_ctx: bool) -> tuple[dict[str, Any], np.ndarray | None]:
    """One candidate's row of the table and its out-of-fold predictions (None: skipped)."""
    row: dict[str, Any] = {"name": name, "kind": kind, "status": "ok"}
    if _needs_context(name, kind) and not has_ctx:
        row["status"] = "skipped: needs per-request chunk_sizes and context_lens"
        return row, None
    y, n_splits = ctx.y, len(ctx.splits)
    pred, fold_mape, errs, unfit = _held_out(ctx.df, y, ctx.splits, make, min_train)
    done = ctx.test_rows[np.isfinite(pred[ctx.test_rows])]
    if errs:
        row["status"] = f"failed on {len(errs)} of {n_splits} folds: {errs[0]}"
    if unfit:
        row["status"] = (f"not fitted on {unfit} of {n_splits} folds: needs "
                         f"{min_train} training steps")
    if done.size:
        row.update(_score(y[done], pred[done], ctx.labels[done]))
        row["n_test"] = int(done.size)
        row["fold_mape_mean"] = float(np.mean(fold_mape))
        row["fold_mape_sd"] = float(np.std(fold_mape, ddof=1)) if len(fold_mape) > 1 \
            else np.nan
        err = np.full(len(y), np.nan)
        err[done] = np.abs(y[done] - pred[done]) / y[done]
        _, row["ratio_lo"], row["ratio_hi"] = _ratio(err, ctx.floor_err, ctx.clusters,
                                                     ctx.n_boot, ctx.seed)
    if in_sample:
        try:
            row.update(_in_sample(ctx.df, y, make, ctx.relative, ctx.lof_groups))
        except (InputError, FitError, ValueError, np.linalg.LinAlgError) as exc:
            if row["status"] == "ok":
                row["status"] = f"failed in sample: {type(exc).__name__}: {exc}"[:240]
    return row, pred


def _floor(df, test_rows, floor):
    """(NoiseFloor, per-row median-oracle errors) over the test steps' trace."""
    from perfmodel.data.noise import noise_floor

    if floor is not None:
        err = floor.row_errors if floor.row_errors is not None and \
            len(floor.row_errors) == len(df) else np.full(len(df), np.nan)
        return floor, err
    full = test_rows.size == len(df)
    sub = df if full else df.iloc[test_rows].reset_index(drop=True)
    nf = noise_floor(sub)
    err = np.full(len(df), np.nan)
    if nf.row_errors is not None:
        err[test_rows if not full else np.arange(len(df))] = nf.row_errors
    if not full and nf.kind == "none":  # e.g. an extrapolation split's test rows
        nf = noise_floor(df)
        if nf.row_errors is not None:
            err = nf.row_errors
    return nf, err


def _clusters(df, time_ordered):
    from perfmodel.stats.validation import fold_groups

    return fold_groups(df, time_ordered=time_ordered)


def _ratio(err, floor_err, clusters, n_boot, seed):
    from perfmodel.stats.protocol import ratio_interval

    sel = np.isfinite(err) & np.isfinite(floor_err)
    if not sel.any():
        return np.nan, np.nan, np.nan
    return ratio_interval(err[sel], floor_err[sel], clusters[sel], n_boot=n_boot, seed=seed)


def _table(rows, nf, cv, n_splits, relative, n_steps) -> pd.DataFrame:
    cols = (["name", "kind", "status", "n_params", "MAPE", "RMSE"]
            + [f"MAPE_{r}" for r in _REGIMES] + [f"RMSE_{r}" for r in _REGIMES]
            + ["n_test", "fold_mape_mean", "fold_mape_sd", "mape_in", "aic", "bic", "lof_F",
               "lof_p", "lof_sd_ratio", "lof_sd_lo", "lof_sd_hi", "ratio_lo", "ratio_hi", "MdAPE", "RMSLE", "diff_vs_ref", "diff_lo",
               "diff_hi", "p_vs_ref"])
    out = pd.DataFrame(rows).reindex(columns=cols)
    fl = nf.floor if nf.kind != "none" else np.nan
    out["noise_floor"] = fl
    out["ratio_to_floor"] = out["MAPE"] / fl if np.isfinite(fl) and fl > 0 else np.nan
    out["cv"], out["k"], out["relative"] = cv, n_splits, relative
    out = out.astype({"n_test": "Int64", "n_params": "Int64"})
    out.attrs["noise_floor"] = nf.to_dict()
    out.attrs["n_steps"] = n_steps
    return out


# ---------------------------------------------------------------------------
# dataset names and the CLI
# ---------------------------------------------------------------------------
def load_trace_arg(spec: str) -> tuple[pd.DataFrame, str]:
    """Load ``TRACE``: a file, or a dataset name (module docstring). Returns (df, label)."""
    from perfmodel.data import datasets

    if not isinstance(spec, str) or not spec:
        raise InputError(f"TRACE must be a file or a dataset name, got {spec!r}")
    p = Path(spec)
    if p.exists():
        from perfmodel.data.trace import read_trace

        return read_trace(p), p.stem
    name, _, arg = spec.partition(":")
    if name == "splitwise":
        sw = datasets.splitwise_steps()
        groups = sorted({f"{m}/{h}/tp{t}" for m, h, t in
                         sw[["model", "hardware", "tp"]].itertuples(index=False)})
        parts = arg.split("/")
        if len(parts) != 3 or not parts[2].startswith("tp") or not parts[2][2:].isdigit():
            raise InputError(f"splitwise needs a group, splitwise:MODEL/HARDWARE/tpK; one of "
                             f"{groups}")
        model, hw, tp = parts[0], parts[1], int(parts[2][2:])
        hws = sorted({h for h in sw["hardware"].unique() if h == hw or h.startswith(hw)})
        if len(hws) != 1:
            raise InputError(f"hardware {hw!r} matches {hws or 'nothing'}; groups: {groups}")
        sel = sw[(sw["model"] == model) & (sw["hardware"] == hws[0]) & (sw["tp"] == tp)]
        if sel.empty:
            raise InputError(f"no Splitwise group {spec!r}; groups: {groups}")
        return sel.reset_index(drop=True), f"splitwise_{model}_{hws[0]}_tp{tp}"
    if name == "sarathi" and not arg:
        return datasets.sarathi_steps(), "sarathi"
    if name == "vidur":
        if arg and not arg.isdigit():
            raise InputError(f"vidur:SEED needs an integer seed, got {arg!r}")
        s = int(arg) if arg else 0
        return datasets.vidur_steps(seed=s), "vidur" if not arg else f"vidur_seed{s}"
    raise InputError(f"TRACE {spec!r} is neither a file nor a dataset name "
                     "(splitwise:MODEL/HARDWARE/tpK, sarathi, vidur[:SEED])")


def format_table(table: pd.DataFrame) -> str:
    """A plain-text view of a comparison table."""
    cols = ["name", "kind", "n_params", "MAPE", "MAPE_decode-only", "MAPE_mixed",
            "MAPE_prefill-heavy", "MdAPE", "RMSLE", "RMSE", "aic", "lof_p", "ratio_to_floor",
            "ratio_lo", "ratio_hi", "diff_vs_ref", "diff_lo", "diff_hi", "p_vs_ref", "status"]
    t = table.reindex(columns=cols).copy()
    for c in ("MAPE", "MAPE_decode-only", "MAPE_mixed", "MAPE_prefill-heavy", "MdAPE",
              "ratio_to_floor", "ratio_lo", "ratio_hi", "diff_vs_ref", "diff_lo", "diff_hi"):
        t[c] = t[c].map(lambda v: "" if pd.isna(v) else f"{v:.2f}")
    t["RMSLE"] = t["RMSLE"].map(lambda v: "" if pd.isna(v) else f"{v:.3f}")
    for c in ("lof_p", "p_vs_ref"):
        t[c] = t[c].map(lambda v: "" if pd.isna(v) else f"{v:.2g}")
    t["RMSE"] = t["RMSE"].map(lambda v: "" if pd.isna(v) else f"{v:.4g}")
    t["aic"] = t["aic"].map(lambda v: "" if pd.isna(v) else f"{v:.1f}")
    buf = io.StringIO()
    buf.write(t.to_string(index=False))
    return buf.getvalue()
