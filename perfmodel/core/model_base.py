"""The base of every step-latency model: :class:`Param` and :class:`Model`.

Problem
-------
Every member of the model family (:mod:`perfmodel.core.models_seed`,
:mod:`perfmodel.core.models_ctx`) predicts the wall time ``T`` (ms) of one engine
step from the features of :mod:`perfmodel.data.features`, with an analytic
Jacobian and one tuple of :class:`Param` giving each parameter's name, unit,
bounds and physical reading; fitting, reports, tables and the paper take
names and units from there.  This module holds what they share: the parameter
record and the base class (argument checks, feature selection, clipping into
the bounds).  The registry of members (``MODELS``, ``get_model``) is
:mod:`perfmodel.core.model`.

Adding a member is local: subclass :class:`Model`, give ``name``,
``formula``, ``params``, ``requires``, ``_predict`` and ``_jacobian``, and
register it in :mod:`perfmodel.core.model`.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from perfmodel.data.features import CONTEXT_KEYS
from perfmodel.errors import InputError

__all__ = ["Model", "Param"]


@dataclass(frozen=True)
class Param:
    """One model parameter: its name, unit, bounds and physical reading.

    ``scales_with`` maps a feature key to a power: when the fitter divides
    feature ``k`` by its median ``m_k`` (median scaling), the parameter's
    value in scaled units is ``value * prod(m_k ** power)``.
    """

    name: str
    unit: str
    lower: float
    upper: float
    description: str
    scales_with: Mapping[str, float] = field(default_factory=dict)


class Model:
    """Base class of every member of the step-latency family.

    Subclasses set ``name``, ``formula``, ``params`` (tuple of :class:`Param`)
    and ``requires`` (feature keys of :mod:`perfmodel.data.features`),
    and implement ``_predict(theta, f)`` and ``_jacobian(theta, f)`` on a
    dict of float arrays.
    """

    name: str = ""
    formula: str = ""
    params: tuple[Param, ...] = ()
    requires: tuple[str, ...] = ("B", "S")
    #: name of the identifiable member this one is fitted through (None: itself)
    fitted_as: str | None = None
    #: name of the member this one ablates (a term removed, to test whether that term is
    #: needed); ablations are fitted and compared on request, never by default
    ablation_of: str | None = None

    # ---- metadata -------------------------------------------------------
    @property
    def param_names(self) -> list[str]:
        return [p.name for p in self.params]

    @property
    def n_params(self) -> int:
        return len(self.params)

    @property
    def lower(self) -> np.ndarray:
        return np.array([p.lower for p in self.params], dtype=float)

    @property
    def upper(self) -> np.ndarray:
        return np.array([p.upper for p in self.params], dtype=float)

    def units(self) -> dict[str, str]:
        return {p.name: p.unit for p in self.params}

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return f"<perfmodel model {self.name!r}: {self.formula}>"

    # ---- checks ---------------------------------------------------------
    def check_theta(self, theta) -> np.ndarray:
        """Return ``theta`` as a float vector, or raise naming what is wrong."""
        if isinstance(theta, Mapping):
            missing = [n for n in self.param_names if n not in theta]
            extra = [k for k in theta if k not in self.param_names]
            if missing or extra:
                raise InputError(
                    f"model {self.name!r}: missing parameters {missing}, unknown parameters {extra}"
                )
            theta = [theta[n] for n in self.param_names]
        t = np.asarray(theta, dtype=float)
        if t.shape != (self.n_params,):
            raise InputError(
                f"model {self.name!r} takes {self.n_params} parameters "
                f"{self.param_names}, got shape {t.shape}"
            )
        if not np.all(np.isfinite(t)):
            bad = [n for n, v in zip(self.param_names, t) if not np.isfinite(v)]
            raise InputError(f"model {self.name!r}: non-finite parameter values for {bad}")
        return t

    def check_features(self, feats) -> dict[str, np.ndarray]:
        """Return the features this model needs as float arrays of one length."""
        if not isinstance(feats, Mapping):
            from perfmodel.data.trace import step_features

            feats = step_features(feats, keys=self.requires)
        missing = [k for k in self.requires if k not in feats]
        if missing:
            hint = (
                " (this model needs per-request 'chunk_sizes' and 'context_lens' columns in the trace)"
                if set(missing) & set(CONTEXT_KEYS)
                else ""
            )
            raise InputError(f"model {self.name!r} needs features {missing}{hint}")
        out = {k: np.asarray(feats[k], dtype=float).ravel() for k in self.requires}
        n = {len(v) for v in out.values()}
        if len(n) != 1:
            raise InputError(f"model {self.name!r}: features have different lengths {sorted(n)}")
        return out

    # ---- evaluation -----------------------------------------------------
    def predict(self, theta, feats) -> np.ndarray:
        """Predicted step time in ms for every row of ``feats``."""
        return self._predict(self.check_theta(theta), self.check_features(feats))

    def jacobian(self, theta, feats) -> np.ndarray:
        """Analytic Jacobian dT/dtheta, shape (n, n_params)."""
        return self._jacobian(self.check_theta(theta), self.check_features(feats))

    def _predict(self, theta: np.ndarray, f: dict[str, np.ndarray]) -> np.ndarray:
        raise NotImplementedError

    def _jacobian(self, theta: np.ndarray, f: dict[str, np.ndarray]) -> np.ndarray:
        raise NotImplementedError

    def initial_guess(self, feats, y) -> np.ndarray:
        """A data-driven starting point inside the bounds."""
        raise NotImplementedError

    def clip(self, theta) -> np.ndarray:
        """Clip ``theta`` strictly inside the bounds (for starting points)."""
        lo, hi = self.lower, self.upper
        span = np.where(np.isfinite(hi - lo), hi - lo, np.abs(lo) + 1.0)
        eps = 1e-9 * np.maximum(span, 1e-300)
        return np.clip(np.asarray(theta, dtype=float), lo + eps, hi - eps)
