"""A scikit-learn regressor around the step-latency fitter.

Problem: give the latency models the scikit-learn interface (``fit``,
``predict``, ``score``, ``get_params``), so they drop into pipelines,
``cross_val_score`` and grid searches beside the baselines.

``X`` is either an array whose columns are the model's features in the order
of ``Model.requires`` (``B``, ``S`` for the saturation forms), or a
DataFrame in the step-trace schema (``batch_size``, ``total_tokens`` and,
for context-aware models, ``chunk_sizes``/``context_lens``).  Features must
be finite and positive (the model's domain); ``y`` (ms) must be positive.
"""
from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from perfmodel.core.model import get_model

__all__ = ["StepLatencyRegressor"]


class StepLatencyRegressor(RegressorMixin, BaseEstimator):
    """Throughput-saturation step-latency model as a scikit-learn regressor.

    Parameters
    ----------
    model : str, default 'seed_id'
        A member of :data:`perfmodel.core.model.MODELS`.
    loss : str, default 'linear'
    relative : {'log', 'weight', 'absolute'}, default 'log'
    n_starts : int, default 8
    scale : bool, default True (median scaling of the features)
    random_state : int or None, seeds the multi-start.

    Attributes
    ----------
    fit_result_ : perfmodel.core.results.FitResult
    coef_ : ndarray, the fitted parameters (physical units)
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from perfmodel.core.estimator import StepLatencyRegressor
    >>> B = np.repeat([1, 4, 16, 64], 25).astype(float); S = B * np.tile(np.arange(1, 26), 4)
    >>> y = 5 + 0.05 * S + 0.1 * B
    >>> est = StepLatencyRegressor().fit(np.column_stack([B, S]), y)
    >>> bool(est.score(np.column_stack([B, S]), y) > 0.99)
    True
    """

    def __init__(self, model="seed_id", loss="linear", relative="log", n_starts=8, scale=True,
                 random_state=None):
        self.model = model
        self.loss = loss
        self.relative = relative
        self.n_starts = n_starts
        self.scale = scale
        self.random_state = random_state

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = True
        tags.target_tags.positive_only = True
        tags.target_tags.required = True
        tags.input_tags.allow_nan = False
        return tags

    def _features(self, X, reset):
        import pandas as pd

        m = get_model(self.model)
        if isinstance(X, pd.DataFrame) and "batch_size" in X.columns:
            from perfmodel.data.trace import step_features, validate_trace

            feats = step_features(validate_trace(X, require_duration=False))
            if reset:
                self.n_features_in_ = X.shape[1]
                self.feature_names_in_ = np.asarray(X.columns, dtype=object)
            return m.check_features(feats)
        Xa = validate_data(self, X, reset=reset, dtype=np.float64, ensure_min_samples=1)
        if Xa.shape[1] == 1 and len(m.requires) > 1:
            raise ValueError(f"n_features = 1, but model {m.name!r} needs {list(m.requires)}")
        if Xa.shape[1] != len(m.requires):
            raise ValueError(f"X has {Xa.shape[1]} features, but model {m.name!r} needs "
                             f"{len(m.requires)}: {list(m.requires)}")
        if np.any(Xa <= 0):
            rows = np.nonzero(np.any(Xa <= 0, axis=1))[0]
            raise ValueError(f"X must be positive (B, S >= 1 in a real trace): {rows.size} rows "
                             f"with values <= 0 (first {rows[:5].tolist()})")
        return {k: Xa[:, i] for i, k in enumerate(m.requires)}

    def fit(self, X, y, sample_weight=None):
        """Fit the model; returns self."""
        from perfmodel.core.fit import fit_model

        if y is None:
            raise ValueError("StepLatencyRegressor requires y to be passed, but the target y is None")
        feats = self._features(X, reset=True)
        n = len(next(iter(feats.values())))
        if n <= get_model(self.model).n_params:
            raise ValueError(f"n_samples = {n}: the model has {get_model(self.model).n_params} "
                             "parameters and needs more steps than that")
        y = np.asarray(y, dtype=np.float64).ravel()
        if y.shape[0] != len(next(iter(feats.values()))):
            raise ValueError(f"X has {len(next(iter(feats.values())))} rows but y has {y.shape[0]}")
        if not np.all(np.isfinite(y)) or np.any(y <= 0):
            raise ValueError("y (step time in ms) must be finite and positive")
        seed = self.random_state
        if seed is None or isinstance(seed, np.random.RandomState):
            seed = np.random.RandomState(seed).randint(0, 2**31 - 1) if seed is not None else 0
        self.fit_result_ = fit_model(feats, self.model, y=y, loss=self.loss,
                                     relative=self.relative, weights=sample_weight,
                                     n_starts=self.n_starts, seed=int(seed), scale=self.scale)
        self.coef_ = self.fit_result_.values.copy()
        return self

    def predict(self, X):
        """Predicted step time (ms)."""
        check_is_fitted(self, "fit_result_")
        feats = self._features(X, reset=False)
        return self.fit_result_.predict(feats)
