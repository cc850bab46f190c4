"""Shared pieces of :mod:`perfmodel.decisions.simulate`: argument checks and the
step time of one batch.
"""
from __future__ import annotations

import numpy as np

from perfmodel._checks import check_int_range
from perfmodel.errors import InputError
from perfmodel.stats.predictive import mean_step_model

# ---------------------------------------------------------------------------
# argument checks
# ---------------------------------------------------------------------------

def _per_request(name: str, value, n: int) -> np.ndarray:
    """An int or a length-n sequence of ints >= 1 -> int64 array of length n."""
    if np.isscalar(value):
        return np.full(n, check_int_range(name, value, 1, integral_float=True), dtype=np.int64)
    a = np.asarray(value)
    if a.ndim != 1 or a.size != n:
        raise InputError(f"{name} must be an integer or a sequence of {n} integers, "
                         f"got shape {a.shape}")
    if not np.issubdtype(a.dtype, np.number) or not np.all(np.isfinite(a.astype(float))):
        raise InputError(f"{name} must hold finite integers")
    bad = np.nonzero((a < 1) | (a != np.round(a)))[0]
    if bad.size:
        raise InputError(f"{name} must be integers >= 1: {bad.size} bad values, first at "
                         f"positions {bad[:5].tolist()}")
    return a.astype(np.int64)


def _check_model(model):
    if not hasattr(model, "predict") or not callable(model.predict):
        raise InputError(f"model must have a .predict(features) method (e.g. a FitResult), "
                         f"got {type(model).__name__}")
    return model


def _step_time_model(model, cfg):
    """The model a simulated step is priced with (both engine loops use it).

    Without step noise a step lasts the fit's *mean* step time
    (:func:`perfmodel.stats.predictive.mean_step_model`): latencies and busy
    times are sums of steps. With ``cfg.step_noise_sd`` the median times the
    log-normal noise has that mean already, so the model is used as it is.
    """
    return mean_step_model(model) if cfg.step_noise_sd == 0 else model


# ---------------------------------------------------------------------------
# step time of one batch (features: perfmodel.data.features.batch_features)
# ---------------------------------------------------------------------------

def _predict_one(model, feats) -> float:
    y = np.asarray(model.predict(feats), dtype=float).ravel()
    if y.size != 1 or not np.isfinite(y[0]) or y[0] <= 0:
        raise InputError(f"model predicted {y.tolist()} ms for a step with B={int(feats['B'][0])}, "
                         f"S={int(feats['S'][0])}; a step time must be one positive number")
    return float(y[0])
