"""Out-of-sample validation of step-latency models: splits, regimes, scores.

Problem: an in-sample R^2 says little about a model meant for prediction,
extrapolation and capacity planning. docs/model.md (Evaluation) calls for time-series
cross-validation (expanding training window, fixed test window, mean error
over folds) and partitioned evaluation (decode-only, mixed, large prefill);
replicate steps of one configuration must not sit in both training and test
sets, and extrapolation must be tested on data beyond the training range.

This module is the public entry point of validation (import from here); the
work is done by four modules of one job each:

- :mod:`perfmodel.stats.folds` -- the fold engine (the one place folds are
  made; every comparison, notebook and script calls it):
  :func:`fold_groups` (leak-free groups: same configuration, identical
  schedule and, for time-ordered traces (:func:`is_time_ordered`),
  contiguous blocks of :data:`DEFAULT_BLOCK` steps), :func:`make_folds`
  (grouped k-fold, blocked or expanding time series, extrapolation and a
  deliberately leaky random k-fold, purging training steps next to test
  steps in time) and :func:`decorrelation_lag` (the data check behind
  :data:`DEFAULT_BLOCK`);
- :mod:`perfmodel.stats.splits` -- its building blocks on labels or
  positions: :func:`grouped_kfold`, :func:`time_series_splits`,
  :func:`extrapolation_split`;
- :mod:`perfmodel.stats.scores` -- :func:`regime` (decode-only / mixed /
  prefill-heavy) and :func:`metrics` (R^2, RMSE, MAE, MAPE);
- :mod:`perfmodel.stats.crossval` -- :func:`cross_validate`, which runs any
  model with ``fit(df) -> self`` and ``predict(df) -> ndarray`` (the
  baselines of :mod:`perfmodel.stats.baselines`, the model family's
  wrapper) over the splits and scores each fold, overall and by regime.

Split generators return a list of ``(train_idx, test_idx)`` pairs of sorted
integer positions (``df.iloc``).
"""
from __future__ import annotations

from perfmodel.stats.crossval import cross_validate
from perfmodel.stats.folds import (
    DECORRELATION_THRESHOLD,
    DEFAULT_BLOCK,
    FOLD_SCHEMES,
    decorrelation_lag,
    fold_groups,
    is_time_ordered,
    make_folds,
    run_codes,
)
from perfmodel.stats.scores import REGIMES, metrics, regime
from perfmodel.stats.splits import Split, extrapolation_split, grouped_kfold, time_series_splits

__all__ = [
    "DECORRELATION_THRESHOLD",
    "DEFAULT_BLOCK",
    "FOLD_SCHEMES",
    "REGIMES",
    "Split",
    "cross_validate",
    "decorrelation_lag",
    "extrapolation_split",
    "fold_groups",
    "grouped_kfold",
    "is_time_ordered",
    "make_folds",
    "metrics",
    "regime",
    "run_codes",
    "time_series_splits",
]

