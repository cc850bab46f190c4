"""The step time an SLA answer searches on: a fit's point prediction or its ``q``-quantile.

Problem
-------
Every SLA answer (:mod:`perfmodel.decisions.inversion`,
:mod:`perfmodel.decisions.token_budget`, :mod:`perfmodel.decisions.batch_filter`)
evaluates one quantity at many ``(B, S)``: the fitted step time, or with a
probability ``q`` its ``q``-quantile under the prediction distribution of a
new step.  :class:`Predictor` is that quantity: a thin layer over
:class:`perfmodel.stats.predictive.PredictiveDistribution` (the one predictive
distribution of a new step, shared with the bands of
:mod:`perfmodel.stats.uncertainty`) that fills the features other than ``B``
and ``S`` from :mod:`perfmodel.decisions.step_context` and fixes ``q``.

The quantiles were verified against the bands of
:mod:`perfmodel.stats.uncertainty` at the same points (``tests/stats/test_predictive.py``)
and by hand for the delta method (``tests/decisions/test_sla.py``).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from perfmodel._checks import check_probability
from perfmodel.decisions.step_context import (
    SEARCHED,
    check_constants,
    context_assumption,
    fill_features,
)
from perfmodel.errors import InputError
from perfmodel.stats.predictive import PredictiveDistribution

__all__ = ["Predictor", "stored_quantile_level"]


def _check_predictor_like(fit) -> None:
    if not hasattr(fit, "predict") or not callable(fit.predict):
        raise InputError(f"fit must be a FitResult or have a .predict(features) method, got "
                         f"{type(fit).__name__}")


METHODS = ("delta", "bootstrap", "conformal")


def _check_method(method: str) -> str:
    if method not in METHODS:
        raise InputError(f"method must be one of {', '.join(map(repr, METHODS))}, got {method!r}")
    return method


def stored_quantile_level(fit, q: float) -> float | None:
    """``2q - 1`` when the fit's interval calibration stores that level (its upper end is the
    ``q``-quantile), else None (no calibration, or the level not stored)."""
    from perfmodel.stats.intervals import stored_level_index

    cal = getattr(fit, "interval_calibration", None)
    level = 2.0 * q - 1.0
    return level if cal and stored_level_index(cal, level) is not None else None


def _conformal_level(fit, q: float) -> float:
    """The stored central level whose upper end is the ``q``-quantile: ``2q - 1``."""
    cal = getattr(fit, "interval_calibration", None)
    if not cal:
        raise InputError("method='conformal' needs a fit with an interval calibration "
                         "(perfmodel fit, or perfmodel.stats.intervals.calibrate_intervals)")
    level = 2.0 * q - 1.0
    levels = [float(v) for v in cal["levels"]]
    if stored_quantile_level(fit, q) is None:
        raise InputError(f"method='conformal' gives the q-quantile as the upper end of the stored "
                         f"central level 2q - 1 = {level:g}, which is not calibrated; the fit "
                         f"stores {', '.join(f'{v:g}' for v in levels)} (q = "
                         f"{', '.join(f'{(1 + v) / 2:g}' for v in levels)})")
    return level


class Predictor:
    """Predicted step time (ms) of a fit: the point prediction or its ``q``-quantile.

    Parameters
    ----------
    fit : FitResult (needed for ``q``), or any object with ``.predict(feats)``
    q : None (point prediction) or a probability in (0, 1)
    method : ``'delta'`` or ``'bootstrap'`` (see :mod:`perfmodel.decisions.sla`), or
        ``'conformal'``: the ``q``-quantile is the upper end of the fit's stored
        Mondrian conformal interval at the central level ``2q - 1`` (calibrated
        on held-out steps per phase and length regime,
        :func:`perfmodel.stats.intervals.conformal_interval`); the step is
        given its phase by its ``B`` and ``S`` alone. It gives no probability at
        other targets (``prob_below`` is NaN).
    boot_samples : (n_boot, p) parameter samples for ``'bootstrap'``
    residuals : fit-scale residuals for ``'bootstrap'`` (default: from the fit)
    features : constants for model features other than ``B`` and ``S`` (e.g.
        ``{'attn_prefill': ..., 'decode_ctx': ...}`` for ``seed_ctx``), and/or
        ``{'context_tokens': X}``: every request of a step at ``(B, S)`` computes
        ``S/B`` tokens on ``X`` cached ones, and the context features the model
        needs come from :func:`perfmodel.data.features.uniform_batch_features`
        (constants given by name win); features neither given nor implied are 0,
        i.e. those context terms are left out (:attr:`context_assumption` says which)
    n_draws : size of the bootstrap predictive sample
    seed : seed of the bootstrap pairing
    """

    def __init__(self, fit, q=None, method: str = "delta", boot_samples=None, residuals=None,
                 features: Mapping | None = None, n_draws: int = 4000, seed: int = 0):
        _check_predictor_like(fit)
        self.fit = fit
        self.q = None if q is None else check_probability("q", q)
        self.method = _check_method(method)
        if method == "bootstrap" and boot_samples is None and self.q is not None:
            raise InputError("method='bootstrap' needs boot_samples (an n_boot x p array of "
                             "parameter samples)")
        self.features = check_constants(features)
        self.requires = tuple(getattr(getattr(fit, "model", None), "requires", SEARCHED))
        self._dist_args = {"boot": boot_samples if method == "bootstrap" else None,
                           "residuals": residuals, "n_draws": n_draws, "seed": seed}
        self._dist = None
        self.note = ""
        self._level = None
        if self.q is not None and method == "conformal":
            self._level = _conformal_level(fit, self.q)
            self.note = (f"q-quantile: upper end of the conformal interval at level "
                         f"{self._level:g}, calibrated on held-out steps; no probability at "
                         f"other targets")
        elif self.q is not None:
            self.note = self.distribution.note

    @property
    def distribution(self) -> PredictiveDistribution:
        """The fit's :class:`~perfmodel.stats.predictive.PredictiveDistribution` (built on first use)."""
        if self._dist is None:
            self._dist = PredictiveDistribution(self.fit, **self._dist_args)
        return self._dist

    @property
    def context_assumption(self) -> dict[str, Any]:
        """What the predictions assume about the context features the model needs."""
        return context_assumption(self.requires, self.features)

    def _feats(self, feats: Mapping) -> dict:
        return fill_features(feats, self.requires, self.features)

    def point(self, feats: Mapping) -> np.ndarray:
        """Point prediction (ms): the fitted curve (the median for log fits)."""
        return np.asarray(self.fit.predict(self._feats(feats)), dtype=float).ravel()

    def quantile(self, feats: Mapping, q: float | None = None) -> np.ndarray:
        """``q``-quantile (ms) of the step time of a new step with these features."""
        q = self.q if q is None else check_probability("q", q)
        if q is None:
            return self.point(feats)
        if self.method == "conformal":
            return self._conformal_upper(feats, q)
        return self.distribution.quantile(self._feats(feats), q)

    def _conformal_upper(self, feats: Mapping, q: float) -> np.ndarray:
        """Upper end of the stored conformal interval at level ``2q - 1`` (ms)."""
        import pandas as pd

        from perfmodel.stats.intervals import conformal_interval

        level = _conformal_level(self.fit, q)
        f = self._feats(feats)
        mu = np.asarray(self.fit.predict(f), dtype=float).ravel()
        B = np.asarray(f["B"], float).ravel()
        # the regime of a step from its B and S; the searches also evaluate S < B (off the
        # domain, never an answer), labelled as the one-token-per-request step S = B
        steps = pd.DataFrame({"batch_size": B,
                              "total_tokens": np.maximum(np.asarray(f["S"], float).ravel(), B)})
        return np.asarray(conformal_interval(self.fit, steps, level, mu=mu).upper, dtype=float)

    def prob_below(self, feats: Mapping, target_ms: float) -> np.ndarray:
        """``P(T <= target_ms)`` for a new step (NaN without an uncertainty model)."""
        f = self._feats(feats)
        if self.q is None or self.method == "conformal":
            return np.full(np.asarray(f["B"]).size, np.nan)
        return self.distribution.cdf(f, target_ms)

    def __call__(self, feats: Mapping) -> np.ndarray:
        return self.quantile(feats)

    def surface(self, B, S) -> np.ndarray:
        """The searched quantity at broadcast arrays ``B``, ``S`` (same shape out)."""
        B, S = np.broadcast_arrays(np.asarray(B, float), np.asarray(S, float))
        v = self({"B": B.ravel(), "S": S.ravel()})
        return v.reshape(B.shape)
