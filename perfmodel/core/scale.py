"""The fit scale: the residual transform of a step-time fit, in one place.

Problem
-------
:func:`perfmodel.core.fit.fit_model` minimises squared residuals on one of three
scales (its ``relative`` option).  Everything computed from a fit afterwards
-- standard errors, bootstrap resamples, bands, SLA quantiles, lack-of-fit
tests, information criteria, residual diagnostics -- must use the residual
the fit minimised, or one fit gets different answers from different
functions.  This module holds the scales; every other module asks it.

The scales
----------
``mu`` is the fitted step time (ms), ``y`` a measured one, ``J`` the model's
Jacobian ``d mu / d theta``.

==========  ================  ==================  ===============  =========
name        residual ``e``    inverse ``y(e)``    Jacobian factor  weights
==========  ================  ==================  ===============  =========
``log``     ``log y - log mu``  ``mu exp(e)``     ``1 / mu``       none
``weight``  ``(y - mu) / y``  ``mu / (1 - e)``    ``1 / y``        ``1 / y^2``
``absolute`` ``y - mu``       ``mu + e``          ``1``            none
==========  ================  ==================  ===============  =========

The *Jacobian factor* turns ``J`` into the Jacobian of the fitted value on
the fit scale, i.e. minus the Jacobian of the residual: ``d e / d theta =
-factor * J``.  At a new step, whose ``y`` is not known, ``y = mu`` (first
order).

What ``weight`` means
---------------------
The fit is the definition: for ``relative='weight'``, :func:`fit_model`
minimises ``sum_i w_i (mu_i - y_i)^2`` with ``w_i = 1 / y_i^2``, so its
residual is the error of the fitted value relative to the *measured* time,
``e = (y - mu) / y = 1 - mu / y``; its RSS is ``sum e_i^2``.  That is not
``(y - mu) / mu`` and not ``log y - log mu`` (the three agree to first order
in ``e``; on a step measured 30 % above the curve they are 0.231, 0.300 and
0.262).  Earlier versions of :mod:`perfmodel.decisions.sla` used ``(y - mu)/mu``,
:mod:`perfmodel.stats.adequacy` and :mod:`perfmodel.stats.compare` the log residual, and
``perfmodel diagnose`` milliseconds for weight fits; they now all use the
residual above.

Predictive distribution of a new step
-------------------------------------
One rule for every scale: the residual of a new step about the fitted curve
is ``e = sd * t_dof`` (Student t, the fit's residual degrees of freedom) with
``sd^2 = v + s^2``, ``v`` the parameter variance of the fitted value on the
fit scale and ``s^2 = RSS / dof``; the step time is ``inverse(mu, e)``.  As
``inverse`` increases in ``e``, the ``q``-quantile is
``inverse(mu, t_q sd)`` and ``P(T <= t) = F_t(residual(t, mu) / sd)``.

* ``log``: log-t around the median ``mu`` (log-normal for large ``dof``).
* ``absolute``: t around the mean ``mu``.
* ``weight``: ``T = mu / (1 - e)``, the distribution whose relative error
  ``(T - mu) / T`` is the fit's residual distribution: median ``mu``, skewed
  to the right, always positive.  A quantile with ``t_q sd >= 1`` lies past
  the pole at ``e = 1`` and is ``+inf`` (no finite time is met with that
  probability).  Earlier versions used ``mu (1 + t_q sd)``, the first-order
  version of this quantile.

Means (:meth:`FitScale.mean`, for ``e`` normal): ``mu exp(sd^2 / 2)`` (log,
exact), ``mu`` (absolute), and for ``weight`` the second-order value
``mu (1 + sd^2)``: ``1 / (1 - e)`` is not integrable at ``e = 1``, so the
exact mean does not exist.

Verification
------------
``tests/core/test_scale.py``: ``inverse(mu, residual(y, mu)) == y`` to 1e-12 on
every scale; the Jacobian factor against finite differences of the residual;
``sqrt(weights) * (target - link)`` equals ``-residual`` (the residual
:func:`perfmodel.core.fit.fit_curve` minimises); quantile and cdf invert each
other; the log scale's quantile against :func:`scipy.stats.lognorm` and the
weight scale's against a Monte Carlo sample of ``mu / (1 - e)``.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats

from perfmodel.errors import InputError

__all__ = ["ABSOLUTE", "DEFAULT", "LOG", "SCALES", "WEIGHT", "AbsoluteScale", "FitScale",
           "LogScale", "WeightScale", "get_scale", "scale_of"]

#: the scale a fit uses when none is named
DEFAULT = "log"
#: predictions below this (ms) are clipped before a log is taken
TINY = 1e-300


# ---------------------------------------------------------------------------
# argument checks
# ---------------------------------------------------------------------------

def _values(name: str, x, *, positive: bool) -> np.ndarray:
    """``x`` as a float array, or InputError naming ``name`` and the bad entries."""
    try:
        a = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be numeric, got {type(x).__name__}") from None
    bad = ~np.isfinite(a) | ((a <= 0) if positive else False)
    if np.any(bad):
        what = "finite and > 0" if positive else "finite"
        raise InputError(f"{name} must be {what}: {int(np.sum(bad))} bad values")
    return a


def _broadcast(**arrays) -> list[np.ndarray]:
    try:
        return list(np.broadcast_arrays(*arrays.values()))
    except ValueError:
        shapes = {k: np.shape(v) for k, v in arrays.items()}
        raise InputError(f"shapes do not broadcast: {shapes}") from None


def _prob(q) -> np.ndarray:
    try:
        a = np.asarray(q, dtype=float)
    except (TypeError, ValueError):
        raise InputError(f"q must be a probability in (0, 1), got {q!r}") from None
    if not np.all((a > 0) & (a < 1)):
        raise InputError(f"q must be a probability in (0, 1), got {q!r}")
    return a


def _dof(dof) -> float:
    if dof is None:
        return np.inf
    try:
        d = float(dof)
    except (TypeError, ValueError):
        raise InputError(f"dof must be a positive number or None, got {dof!r}") from None
    if not d > 0:
        raise InputError(f"dof must be a positive number or None, got {dof!r}")
    return d


def _sd(sd) -> np.ndarray:
    a = _values("sd", sd, positive=False)
    if np.any(a < 0):
        raise InputError("sd must be >= 0")
    return a


def _t_ppf(q: np.ndarray, dof: float) -> np.ndarray:
    return stats.norm.ppf(q) if np.isinf(dof) else stats.t.ppf(q, dof)


def _t_cdf(z: np.ndarray, dof: float) -> np.ndarray:
    return stats.norm.cdf(z) if np.isinf(dof) else stats.t.cdf(z, dof)


# ---------------------------------------------------------------------------
# the scales
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class FitScale:
    """One residual scale of a fit (see the module docstring for the table).

    Attributes
    ----------
    name : the ``relative`` option of :func:`perfmodel.core.fit.fit_model`
    residual_text : the residual as text (for reports)
    relative : True for the scales of relative error (log, weight)
    positive : True where step times and predictions must be > 0
    """

    name: str
    residual_text: str
    relative: bool
    positive: bool

    # -- what each scale defines (no argument checks) ---------------------
    def _residual(self, y, mu):
        raise NotImplementedError

    def _inverse(self, mu, e):
        raise NotImplementedError

    def _factor(self, mu, y):
        raise NotImplementedError

    def _jacobian(self, J, mu, y):
        return J * self._factor(mu, y)[:, None]

    def _mean(self, mu, sd):
        raise NotImplementedError

    # -- the regression the fit solves ------------------------------------
    def target(self, y) -> np.ndarray:
        """The response :func:`perfmodel.core.fit.fit_curve` regresses: ``log y`` or ``y``.

        Parameters
        ----------
        y : array_like, measured step times (ms), > 0 on relative scales

        Returns
        -------
        ndarray of the shape of ``y``
        """
        return self._target(_values("y", y, positive=self.positive))

    def _target(self, y):
        return y

    def link(self, mu) -> np.ndarray:
        """The fitted value on the regressed scale: :meth:`target` applied to ``mu``.

        ``mu`` (array_like): fitted step times (ms), > 0 on relative scales.
        Returns ``log mu`` or ``mu``, an ndarray of the shape of ``mu``.
        """
        return self._target(_values("mu", mu, positive=self.positive))

    def weights(self, y, base=None) -> np.ndarray | None:
        """Sample weights of the regression: ``base / y^2`` on ``weight``, else ``base``.

        Parameters
        ----------
        y : array_like, measured step times (ms)
        base : array_like or None, the caller's own sample weights

        Returns
        -------
        ndarray or None (no weights)
        """
        y = _values("y", y, positive=self.positive)
        if base is None:
            return None
        b = _values("base", base, positive=False)
        if b.shape != y.shape:
            raise InputError(f"base weights have shape {b.shape}, y has {y.shape}")
        return b

    def regression(self, predict: Callable, jacobian: Callable) -> tuple[Callable, Callable]:
        """``(func, jac)`` with ``func(theta, x)`` the fitted value on the regressed scale.

        ``func = log(predict)`` on ``log`` (predictions clipped at
        :data:`TINY`), ``predict`` otherwise; ``jac`` its Jacobian.  With
        :meth:`target` and :meth:`weights` this is the problem
        :func:`perfmodel.core.fit.fit_curve` solves: its residual
        ``sqrt(w) (func - target)`` is ``-residual(y, mu)``.

        Parameters
        ----------
        predict, jacobian : callables ``(theta, x) -> (n,)`` and ``(n, p)``

        Returns
        -------
        (func, jac)
        """
        if not (callable(predict) and callable(jacobian)):
            raise InputError("predict and jacobian must be callables (theta, x) -> array")
        return predict, jacobian

    # -- residuals ----------------------------------------------------------
    def residual(self, y, mu) -> np.ndarray:
        """Residual ``e`` of measured times ``y`` about fitted times ``mu`` on this scale.

        Parameters
        ----------
        y, mu : array_like (broadcast), ms

        Returns
        -------
        ndarray
        """
        y = _values("y", y, positive=self.positive)
        mu = _values("mu", mu, positive=self.positive)
        y, mu = _broadcast(y=y, mu=mu)
        return self._residual(y, mu)

    def inverse(self, mu, e) -> np.ndarray:
        """The step time (ms) whose residual about ``mu`` is ``e``: ``residual``'s inverse.

        Increasing in ``e``.  On ``weight``, ``e >= 1`` (past the pole) gives ``+inf``.

        Parameters
        ----------
        mu : array_like, fitted times (ms)
        e : array_like, residuals on this scale (broadcast with ``mu``)

        Returns
        -------
        ndarray
        """
        mu = _values("mu", mu, positive=self.positive)
        e = _values("e", e, positive=False)
        mu, e = _broadcast(mu=mu, e=e)
        return self._inverse(mu, e)

    def jacobian_factor(self, mu, y=None) -> np.ndarray:
        """Factor turning ``J = d mu / d theta`` into the Jacobian on the fit scale.

        ``1/mu`` (log), ``1/y`` (weight), ``1`` (absolute); ``d e / d theta
        = -factor * J``.  ``y=None`` (a new step) uses ``y = mu``.

        Parameters
        ----------
        mu : array_like (n,), fitted times (ms)
        y : array_like (n,) or None, measured times (ms)

        Returns
        -------
        ndarray (n,)
        """
        mu = _values("mu", mu, positive=self.positive)
        y = mu if y is None else _values("y", y, positive=self.positive)
        mu, y = _broadcast(mu=mu, y=y)
        return self._factor(mu, y)

    def jacobian(self, J, mu, y=None) -> np.ndarray:
        """Jacobian of the fitted value on the fit scale: ``J * jacobian_factor(mu, y)``.

        Parameters
        ----------
        J : array_like (n, p), the model's Jacobian ``d mu / d theta``
        mu, y : see :meth:`jacobian_factor`

        Returns
        -------
        ndarray (n, p)
        """
        J = _values("J", J, positive=False)
        mu = _values("mu", mu, positive=self.positive).reshape(-1)
        y = mu if y is None else _values("y", y, positive=self.positive).reshape(-1)
        if J.ndim != 2 or J.shape[0] != mu.size or y.size != mu.size:
            raise InputError(f"J must be (n, p) with n = len(mu) = len(y) = {mu.size}, got "
                             f"J {J.shape}, y {y.shape}")
        return self._jacobian(J, mu, y)

    # -- the predictive distribution of a new step --------------------------
    def predictive_sd(self, var_param, s2) -> np.ndarray:
        """Fit-scale sd of a new step: ``sqrt(var_param + s2)``.

        Parameters
        ----------
        var_param : array_like, parameter variance of the fitted value on this
            scale (``g' C g`` with ``g = jacobian(J, mu)``); negative round-off is 0
        s2 : float, residual variance ``RSS / dof`` on this scale

        Returns
        -------
        ndarray
        """
        v = _values("var_param", var_param, positive=False)
        s = _values("s2", s2, positive=False)
        if np.any(s < 0):
            raise InputError(f"s2 must be >= 0, got {s2!r}")
        return np.sqrt(np.maximum(v, 0.0) + s)

    def quantile(self, mu, sd, q, dof=None) -> np.ndarray:
        """``q``-quantile (ms) of ``inverse(mu, sd * t_dof)``: ``inverse(mu, t_q sd)``.

        Parameters
        ----------
        mu : array_like, fitted times (ms)
        sd : array_like, fit-scale sd (broadcast with ``mu``)
        q : probability in (0, 1) (scalar or broadcast)
        dof : Student-t degrees of freedom; None for the normal

        Returns
        -------
        ndarray
        """
        z = _t_ppf(_prob(q), _dof(dof))
        mu, sd, z = _broadcast(mu=_values("mu", mu, positive=self.positive), sd=_sd(sd), z=z)
        return self._inverse(mu, z * sd)

    def cdf(self, t, mu, sd, dof=None) -> np.ndarray:
        """``P(T <= t)`` for ``T = inverse(mu, sd * t_dof)``: ``F_t(residual(t, mu) / sd)``.

        ``sd = 0`` gives the step function (1 where ``t >= mu``).

        Parameters
        ----------
        t : array_like, step times (ms), > 0 on relative scales
        mu, sd, dof : as :meth:`quantile`

        Returns
        -------
        ndarray
        """
        e = self.residual(t, mu)
        e, sd = _broadcast(e=e, sd=_sd(sd))
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(sd > 0, e / np.where(sd > 0, sd, 1.0), np.where(e >= 0, np.inf, -np.inf))
        return _t_cdf(z, _dof(dof))

    def mean(self, mu, sd) -> np.ndarray:
        """Mean (ms) of ``inverse(mu, e)`` for ``e ~ N(0, sd^2)`` (module docstring).

        Parameters
        ----------
        mu, sd : array_like (broadcast)

        Returns
        -------
        ndarray
        """
        mu, sd = _broadcast(mu=_values("mu", mu, positive=self.positive), sd=_sd(sd))
        return self._mean(mu, sd)


@dataclass(frozen=True)
class LogScale(FitScale):
    """``e = log y - log mu``: log-normal (log-t) steps around the median ``mu``."""

    def _target(self, y):
        return np.log(y)

    def regression(self, predict, jacobian):
        """``(log predict, J / predict)``, the prediction cached between the two calls."""
        if not (callable(predict) and callable(jacobian)):
            raise InputError("predict and jacobian must be callables (theta, x) -> array")
        last: dict = {}

        def pred(ts, f):
            # the Jacobian is always asked at the point just evaluated: reuse it (the
            # features are kept in the cache so that their id cannot be reused meanwhile)
            key = (id(f), ts.tobytes())
            if last.get("key") != key:
                last["key"], last["f"] = key, f
                last["val"] = np.maximum(predict(ts, f), TINY)
            return last["val"]

        def func(ts, f):
            return np.log(pred(ts, f))

        def jac(ts, f):
            return jacobian(ts, f) / pred(ts, f)[:, None]

        return func, jac

    def _residual(self, y, mu):
        return np.log(y) - np.log(mu)

    def _inverse(self, mu, e):
        with np.errstate(over="ignore"):
            return mu * np.exp(e)

    def _factor(self, mu, y):
        return 1.0 / mu

    def _jacobian(self, J, mu, y):
        return J / mu[:, None]

    def _mean(self, mu, sd):
        return mu * np.exp(0.5 * sd**2)


@dataclass(frozen=True)
class WeightScale(FitScale):
    """``e = (y - mu) / y``, weights ``1 / y^2``: the relative error of the fit."""

    def weights(self, y, base=None):
        """``base / y^2`` (``1 / y^2`` without ``base``)."""
        y = _values("y", y, positive=True)
        if base is None:
            return 1.0 / y**2
        b = _values("base", base, positive=False)
        if b.shape != y.shape:
            raise InputError(f"base weights have shape {b.shape}, y has {y.shape}")
        return b / y**2

    def _residual(self, y, mu):
        return (y - mu) / y

    def _inverse(self, mu, e):
        with np.errstate(divide="ignore"):
            return np.where(e < 1.0, mu / np.where(e < 1.0, 1.0 - e, 1.0), np.inf)

    def _factor(self, mu, y):
        return 1.0 / y

    def _jacobian(self, J, mu, y):
        return J / y[:, None]

    def _mean(self, mu, sd):
        return mu * (1.0 + sd**2)


@dataclass(frozen=True)
class AbsoluteScale(FitScale):
    """``e = y - mu`` in ms."""

    def _residual(self, y, mu):
        return y - mu

    def _inverse(self, mu, e):
        return mu + e

    def _factor(self, mu, y):
        return np.ones_like(mu)

    def _jacobian(self, J, mu, y):
        return J.copy()

    def _mean(self, mu, sd):
        return mu.copy()


LOG = LogScale("log", "log T - log T_hat", relative=True, positive=True)
WEIGHT = WeightScale("weight", "(T - T_hat)/T, weights 1/T^2", relative=True, positive=True)
ABSOLUTE = AbsoluteScale("absolute", "T - T_hat (ms)", relative=False, positive=False)

#: every scale by name, in the order the CLI offers them
SCALES: dict[str, FitScale] = {s.name: s for s in (LOG, WEIGHT, ABSOLUTE)}


def get_scale(name) -> FitScale:
    """The :class:`FitScale` called ``name`` (a FitScale is returned as it is).

    Parameters
    ----------
    name : 'log', 'weight', 'absolute' or a FitScale

    Returns
    -------
    FitScale
    """
    if isinstance(name, FitScale):
        return name
    if not isinstance(name, str) or name not in SCALES:
        raise InputError(f"relative {name!r} is not one of {list(SCALES)}")
    return SCALES[name]


def scale_of(fit) -> FitScale:
    """The scale a fitted model was made on (``fit.options['relative']``, default log).

    Parameters
    ----------
    fit : FitResult (anything with an ``options`` dict)

    Returns
    -------
    FitScale
    """
    options = getattr(fit, "options", None)
    if not isinstance(options, dict):
        raise InputError(f"fit must be a FitResult with an options dict, got {type(fit).__name__}")
    return get_scale(options.get("relative", DEFAULT))
