"""Choosing the model of record by nested cross-validation.

Problem
-------
A model chosen because it has the lowest held-out error, and then reported
with that same error, is reported optimistically: the choice used the test
folds. Nested cross-validation keeps the choice inside the training data:
for each outer fold of a protocol scheme
(:func:`perfmodel.stats.protocol.protocol_folds`), the candidates are
compared by the same scheme *on the outer training steps only*, the one with
the lowest pooled inner MAPE is refitted on all outer training steps and
scored on the outer test steps. The outer score is the honest error of the
selection procedure; the tally of choices says how stable the choice is.
(Cawley and Talbot, JMLR 11, 2010, on selection bias in model evaluation.)
"""
from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import pandas as pd

from perfmodel._checks import check_int_range
from perfmodel.errors import FitError, InputError

__all__ = ["nested_select"]


def _pooled_mape(df: pd.DataFrame, splits, make) -> float:
    y = df["duration_ms"].to_numpy(float)
    err = []
    for tr, te in splits:
        p = np.asarray(make().fit(df.iloc[tr]).predict(df.iloc[te]), float)
        if not np.isfinite(p).all():
            raise FitError("non-finite predictions")
        err.append(np.abs(y[te] - p) / y[te])
    return 100.0 * float(np.mean(np.concatenate(err)))


def nested_select(df: pd.DataFrame, candidates: Sequence[str], scheme: str = "grouped", *,
                  k_outer: int = 3, k_inner: int = 3, seed: int = 0, n_starts: int = 2,
                  relative: str = "log", time_ordered: bool | None = None,
                  progress=None) -> pd.DataFrame:
    """Nested cross-validation of model selection among ``candidates``.

    Parameters
    ----------
    df : DataFrame
        A step trace with ``duration_ms``.
    candidates : sequence of str
        Names in :data:`perfmodel.core.model.MODELS` (at least two).
    scheme : str, default 'grouped'
        A protocol scheme other than 'transfer' and 'extrapolate' (both
        outer and inner folds use it).
    k_outer, k_inner : int, default 3
    seed, n_starts, relative
        Fold shuffle / multi-start count / fit scale of every fit.
    time_ordered : bool, optional
        Passed to the fold engine.
    progress : callable, optional
        ``progress(str)`` after each outer fold.

    Returns
    -------
    DataFrame
        One row per (outer fold, candidate): ``fold``, ``candidate``,
        ``inner_mape`` (pooled over the inner folds; NaN when a fit failed),
        ``outer_mape`` (the candidate refitted on the outer training steps),
        ``chosen`` (True for the inner winner), ``n_train``, ``n_test``.
        The selection's honest error is ``outer_mape`` over the chosen rows.
    """
    from perfmodel.core.model import MODELS
    from perfmodel.data.trace import validate_trace
    from perfmodel.stats.compare import make_candidate
    from perfmodel.stats.protocol import protocol_folds

    if isinstance(candidates, str):
        candidates = [candidates]
    candidates = list(candidates)
    bad = [c for c in candidates if c not in MODELS]
    if len(candidates) < 2 or bad:
        raise InputError(f"`candidates` must name two or more models of {sorted(MODELS)}; "
                         f"got {candidates}")
    if scheme in ("transfer", "extrapolate"):
        raise InputError(f"nested selection needs a k-fold scheme, not {scheme!r}")
    k_outer = check_int_range("`k_outer`", k_outer, 2)
    k_inner = check_int_range("`k_inner`", k_inner, 2)
    df = validate_trace(df).reset_index(drop=True)
    y = df["duration_ms"].to_numpy(float)
    rows = []
    for i, (tr, te) in enumerate(protocol_folds(df, scheme, k_outer, seed,
                                                time_ordered=time_ordered)):
        sub = df.iloc[tr].reset_index(drop=True)
        inner = protocol_folds(sub, scheme, k_inner, seed, time_ordered=time_ordered)
        scores = {}
        for c in candidates:
            def make(c=c):
                return make_candidate(c, "model", relative, "linear", n_starts, seed)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                try:
                    scores[c] = _pooled_mape(sub, inner, make)
                except (InputError, FitError, ValueError, np.linalg.LinAlgError):
                    scores[c] = np.nan
                try:
                    p = make().fit(sub).predict(df.iloc[te])
                    outer = 100.0 * float(np.mean(np.abs(y[te] - p) / y[te]))
                except (InputError, FitError, ValueError, np.linalg.LinAlgError):
                    outer = np.nan
            rows.append({"fold": i, "candidate": c, "inner_mape": scores[c],
                         "outer_mape": outer, "n_train": int(tr.size), "n_test": int(te.size)})
        ok = {c: v for c, v in scores.items() if np.isfinite(v)}
        if not ok:
            raise FitError(f"outer fold {i}: every candidate failed on the inner folds")
        best = min(ok, key=ok.get)
        for r in rows[-len(candidates):]:
            r["chosen"] = r["candidate"] == best
        if progress is not None:
            progress(f"outer fold {i}: chose {best} (inner MAPE {ok[best]:.2f}%)")
    return pd.DataFrame(rows, columns=["fold", "candidate", "inner_mape", "outer_mape", "chosen",
                                       "n_train", "n_test"])
