"""The predictive distribution of the time of a new step, from a fit (and a bootstrap).

Problem
-------
The time of a new step with features ``x`` is uncertain for two reasons: the
fitted curve ``mu(x)`` (the parameters) and the step's own noise.  The bands
of :mod:`perfmodel.stats.uncertainty` and the quantiles behind every answer of
:mod:`perfmodel.decisions.sla` need the same distribution; it is built once, here, so
that one fit gives one answer: the upper limit of the level-0.90 prediction
band *is* the 0.95-quantile an SLA search uses.

:class:`PredictiveDistribution` ``(fit, boot=None)`` gives, at feature rows
``x``, the ``median``, ``mean``, ``quantile(q)``, ``cdf(t)`` and
``band(level)`` (confidence band of the mean curve and prediction band of a
new step).  Everything is on the fit's scale (:mod:`perfmodel.core.scale`).

Delta method (``boot=None``)
----------------------------
The fitted value on the fit scale has parameter variance ``v = g' C g``,
``g = scale.jacobian(J, mu)`` (the model Jacobian ``J`` at ``x``, ``y = mu``)
and ``C`` the fit's covariance.  A new step is ``T = scale.inverse(mu, e)``,
``e = sd * t_dof`` with ``sd^2 = v + s^2``, ``s^2 = RSS/dof``; the mean curve
lies in ``inverse(mu, +/- t sqrt(v))`` (:mod:`perfmodel.core.scale`, "Predictive
distribution of a new step").

Bootstrap (``boot`` given)
--------------------------
``boot`` holds parameter samples ``theta_b`` (a BootstrapResult's
``samples`` or an ``(n_boot, p)`` array; at least 20 finite rows).  ``M =
max(n_draws, n_boot)`` draws ``j`` pair a sample index ``b_j`` (uniform) with
a residual ``e_j`` (the rule below), seeded by ``seed``; the predictive sample
is ``T_j = inverse(mu(theta_{b_j}), e_j)`` (predictions clipped at 1e-300 ms
on the relative scales) and quantiles, cdf, median and mean are those of the
sample.  The confidence band of the mean is read off ``mu(theta_b)`` over all
samples.

The two rules
-------------
*Unidentified parameters* (``fit.unidentified``: the data do not determine
them) contribute no parameter variance, in either method: their rows of
``C`` are 0 and their columns of the bootstrap samples are replaced by the
estimate.  They are reported in :attr:`PredictiveDistribution.unidentified`
and the ``note``.  (Parameters at a bound have no covariance, so the delta
method holds them at the bound too; the bootstrap keeps their resampled
values: the refits respect the bound.)

*Bootstrap residuals*: residuals given by the caller are used as given;
otherwise the fit's own residuals on its scale, centred and multiplied by
``sqrt(n/dof)`` (so that their variance is ``s^2``, the delta method's);
a fit without data (read from JSON) draws ``N(0, s^2)`` residuals and says
so in ``note``.

Earlier versions differed: :func:`perfmodel.stats.uncertainty.prediction_band`
gave NaN bands for unidentified parameters and drew one residual per sample
and point; :class:`perfmodel.decisions.sla.Predictor` used raw uncentred residuals,
``(y - mu)/mu`` on weight fits and ``mu (1 + t sd)`` for weight quantiles.

Verification
------------
``tests/stats/test_predictive.py``: the delta quantile against the log-normal
quantile of a synthetic trace with known noise
(:func:`perfmodel.core.synthetic.simulate_trace`); quantile and cdf invert each
other; the band's upper prediction limit at level 0.90 equals the
0.95-quantile of :func:`perfmodel.decisions.sla.max_tokens_quantile` to 1e-10 (delta
and bootstrap); a bootstrap from normal parameter samples matches the delta
method.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy import stats

from perfmodel.core.scale import TINY, scale_of
from perfmodel.errors import InputError

__all__ = ["MIN_SAMPLES", "Band", "MeanStepTime", "PredictiveDistribution", "Spread", "mean_step_model"]

#: fewest finite parameter samples a bootstrap distribution accepts
MIN_SAMPLES = 20
#: largest predictive sample (draws x points) held at once
_CHUNK = 2_000_000
NO_DATA_NOTE = "residuals drawn from N(0, rss/dof): the fit carries no residual data"
#: a relative sd of the mean above this (a factor exp(+-2 x 10) on the log scale) is no
#: estimate: the parameter covariance is near-singular along a direction the data do not
#: determine, and the delta-method band there is not a band (a referee found median widths of
#: 1e152 in a stored study); :meth:`PredictiveDistribution.spread` warns
UNDETERMINED_SD = 10.0


@dataclass(frozen=True)
class Spread:
    """Delta-method spread at feature rows: ``center`` (ms) and fit-scale sds."""

    center: np.ndarray
    sd_mean: np.ndarray
    sd_new: np.ndarray


@dataclass(frozen=True)
class Band:
    """Pointwise bands at one level (ms).

    ``mean_lower``/``mean_upper``: confidence band of the mean curve;
    ``lower``/``upper``: prediction band of a new step (its ends are the
    ``(1 -+ level)/2`` quantiles of :meth:`PredictiveDistribution.quantile`).
    """

    level: float
    method: str
    fit: np.ndarray
    mean_lower: np.ndarray
    mean_upper: np.ndarray
    lower: np.ndarray
    upper: np.ndarray


# ---------------------------------------------------------------------------
# argument checks
# ---------------------------------------------------------------------------

_FIT_ATTRS = ("model", "values", "cov", "rss", "dof", "options", "param_names")


def _missing_fit_attrs(fit) -> list[str]:
    return [a for a in _FIT_ATTRS if not hasattr(fit, a)]


def _check_fit(fit) -> None:
    missing = _missing_fit_attrs(fit)
    if missing:
        raise InputError(f"a predictive distribution needs a FitResult (missing {missing}); "
                         f"got {type(fit).__name__}")
    if not (fit.dof and fit.dof > 0):
        raise InputError(f"fit has {fit.dof} degrees of freedom: no residual variance")


def _open_unit(name: str, value, what: str, *, scalar_what: str | None = None) -> float:
    """``value`` as a float in (0, 1), else ``InputError('{name} must be {what}, got ...')``.

    With ``scalar_what``, an array is refused too, and a bool or an array is
    told ``'{name} must be {scalar_what}, got ...'``.
    """
    if isinstance(value, bool) or (scalar_what is not None and np.ndim(value) != 0):
        raise InputError(f"{name} must be {scalar_what or what}, got {value!r}")
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be {what}, got {value!r}") from None
    if not 0.0 < x < 1.0:
        raise InputError(f"{name} must be {what}, got {value!r}")
    return x


def _level(level) -> float:
    return _open_unit("level", level, "a number in (0, 1)")


def _q(q) -> float:
    return _open_unit("q", q, "a probability in (0, 1)", scalar_what="one probability in (0, 1)")


def _count(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise InputError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _samples(fit, boot) -> np.ndarray:
    """Finite parameter samples, unidentified columns held at the estimate."""
    raw = getattr(boot, "samples", boot)
    try:
        S = np.asarray(raw, dtype=float)
    except (TypeError, ValueError):
        raise InputError("boot must be a BootstrapResult or an (n_boot, p) array of parameter "
                         f"samples, got {type(boot).__name__}") from None
    p = len(fit.values)
    if S.ndim != 2 or S.shape[1] != p:
        raise InputError(f"boot_samples must have shape (n_boot, {p}), got {S.shape}")
    ok = np.all(np.isfinite(S), axis=1)
    if ok.sum() < MIN_SAMPLES:
        raise InputError(f"boot_samples has {int(ok.sum())} finite rows; need at least "
                         f"{MIN_SAMPLES}")
    S = S[ok].copy()
    held = _indices(fit, getattr(fit, "unidentified", []))
    S[:, held] = np.asarray(fit.values, float)[held]
    return S


def _indices(fit, names) -> np.ndarray:
    names = set(names)
    return np.array([i for i, n in enumerate(fit.param_names) if n in names], dtype=np.int64)


# ---------------------------------------------------------------------------
# the two rules
# ---------------------------------------------------------------------------

def _delta_cov(fit) -> np.ndarray:
    """The fit's covariance, rows of unidentified parameters (and NaN rows) set to 0."""
    C = np.array(fit.cov, dtype=float)
    held = _indices(fit, getattr(fit, "unidentified", []))
    C[held, :] = 0.0
    C[:, held] = 0.0
    return np.where(np.isfinite(C), C, 0.0)


def _residual_pool(fit, scale, residuals) -> tuple[np.ndarray | None, str]:
    """(pool of fit-scale residuals or None, where they came from)."""
    if residuals is not None:
        e = np.asarray(residuals, float).ravel()
        e = e[np.isfinite(e)]
        if e.size < 2:
            raise InputError("residuals must hold at least 2 finite values")
        return e, "the residuals given"
    y, f = getattr(fit, "y", None), getattr(fit, "fitted", None)
    if y is None or f is None:
        return None, NO_DATA_NOTE
    e = scale.residual(np.asarray(y, float), np.asarray(f, float))
    e = e[np.isfinite(e)]
    if e.size < 2:
        return None, NO_DATA_NOTE
    pool = (e - e.mean()) * math.sqrt(e.size / fit.dof)
    return pool, f"the fit's {scale.name}-scale residuals, centred and scaled by sqrt(n/dof)"


# ---------------------------------------------------------------------------
# the distribution
# ---------------------------------------------------------------------------

class PredictiveDistribution:
    """Distribution of the time (ms) of a new step at given features (module docstring).

    Parameters
    ----------
    fit : FitResult
    boot : None (delta method), a BootstrapResult with samples, or an
        ``(n_boot, p)`` array of parameter samples (bootstrap)
    residuals : fit-scale residuals for the bootstrap (default: the fit's own)
    n_draws : minimum size of the bootstrap predictive sample
    seed : seed of the bootstrap pairing and residual draws

    Attributes
    ----------
    method : 'delta' or 'bootstrap'
    scale : the fit's :class:`perfmodel.core.scale.FitScale`
    unidentified : parameters held at their estimate (no variance)
    noise_source : where the bootstrap residuals come from ('' for delta)
    note : a caveat for reports ('' when none)
    """

    def __init__(self, fit, boot=None, *, residuals=None, n_draws: int = 4000, seed: int = 0):
        _check_fit(fit)
        self.fit = fit
        self.scale = scale_of(fit)
        self.dof = int(fit.dof)
        self.s2 = float(fit.rss) / self.dof
        self.theta = np.asarray(fit.values, float)
        self.unidentified = list(getattr(fit, "unidentified", []))
        self.method = "delta" if boot is None else "bootstrap"
        self.noise_source, self.note = "", ""
        self._cov = _delta_cov(fit)
        if boot is not None:
            self._init_bootstrap(boot, residuals, _count("n_draws", n_draws, 1),
                                 _count("seed", seed, 0))
        if self.unidentified:
            held = f"unidentified {self.unidentified} held at their estimates (no variance)"
            self.note = f"{self.note}; {held}" if self.note else held

    def _init_bootstrap(self, boot, residuals, n_draws, seed):
        self._samples = _samples(self.fit, boot)
        pool, self.noise_source = _residual_pool(self.fit, self.scale, residuals)
        rng = np.random.default_rng(seed)
        M = max(n_draws, len(self._samples))
        self._pairs = rng.integers(0, len(self._samples), M)
        if pool is None:
            self._eps = rng.normal(0.0, math.sqrt(self.s2), M)
            self.note = NO_DATA_NOTE
        else:
            self._eps = pool[rng.integers(0, pool.size, M)]

    @property
    def n_samples(self) -> int:
        """Number of finite parameter samples (0 for the delta method)."""
        return 0 if self.method == "delta" else int(self._samples.shape[0])

    # -- features and the curve ------------------------------------------
    def _features(self, feats) -> dict:
        if not isinstance(feats, Mapping) and not hasattr(feats, "columns"):
            raise InputError(f"feats must be a dict of feature arrays or a step trace, got "
                             f"{type(feats).__name__}")
        return self.fit.model.check_features(feats)

    def center(self, feats) -> np.ndarray:
        """The fitted curve ``mu`` (ms) at ``feats``: the median of the delta method."""
        return self.fit.model.predict(self.theta, self._features(feats))

    def spread(self, feats) -> Spread:
        """Delta-method ``center`` (ms) and fit-scale sds of the mean and of a new step.

        Parameters
        ----------
        feats : dict of feature arrays the model needs (or a step trace)

        Returns
        -------
        Spread
        """
        f = self._features(feats)
        mu = self.fit.model.predict(self.theta, f)
        g = self.scale.jacobian(self.fit.model.jacobian(self.theta, f), mu)
        v = np.maximum(np.einsum("ij,jk,ik->i", g, self._cov, g), 0.0)
        # relative to the prediction on every scale (the absolute scale's sd is in ms)
        sd_rel = np.sqrt(v) / np.abs(mu) if self.scale.name == "absolute" else np.sqrt(v)
        wild = ~(sd_rel <= UNDETERMINED_SD)
        if wild.any():
            import warnings

            warnings.warn(f"delta method: the relative sd of the mean exceeds "
                          f"{UNDETERMINED_SD:g} at {int(wild.sum())} of {wild.size} rows (a "
                          f"near-singular parameter covariance): the band there is not "
                          f"determined; use the calibrated interval", RuntimeWarning,
                          stacklevel=2)
        return Spread(mu, np.sqrt(v), self.scale.predictive_sd(v, self.s2))

    # -- the bootstrap sample -----------------------------------------------
    def _curves(self, f, cols: slice) -> np.ndarray:
        """(n_boot, ncols) predictions of the parameter samples."""
        sub = {k: v[cols] for k, v in f.items()}
        return np.stack([self.fit.model.predict(th, sub) for th in self._samples])

    def _sample(self, f, cols: slice) -> np.ndarray:
        """(M, ncols) predictive sample of new steps (ms)."""
        P = self._curves(f, cols)[self._pairs]
        if self.scale.positive:
            P = np.maximum(P, TINY)
        return self.scale.inverse(P, self._eps[:, None])

    def _by_chunk(self, f, stat) -> np.ndarray:
        n = len(next(iter(f.values())))
        out = np.empty(n)
        step = max(1, _CHUNK // len(self._eps))
        for i in range(0, n, step):
            sl = slice(i, min(n, i + step))
            out[sl] = stat(self._sample(f, sl), sl)
        return out

    # -- summaries ---------------------------------------------------------
    def median(self, feats) -> np.ndarray:
        """Median (ms) of a new step: ``mu`` (delta) or the sample median (bootstrap)."""
        if self.method == "delta":
            return self.center(feats)
        return self._by_chunk(self._features(feats), lambda T, sl: np.median(T, axis=0))

    def mean(self, feats) -> np.ndarray:
        """Mean (ms) of a new step (delta: :meth:`perfmodel.core.scale.FitScale.mean`)."""
        if self.method == "delta":
            s = self.spread(feats)
            return self.scale.mean(s.center, s.sd_new)
        return self._by_chunk(self._features(feats), lambda T, sl: np.mean(T, axis=0))

    def quantile(self, feats, q: float) -> np.ndarray:
        """``q``-quantile (ms) of the time of a new step at each feature row.

        Parameters
        ----------
        feats : dict of feature arrays (or a step trace)
        q : probability in (0, 1)

        Returns
        -------
        ndarray (n,)
        """
        q = _q(q)
        if self.method == "delta":
            s = self.spread(feats)
            return self.scale.quantile(s.center, s.sd_new, q, self.dof)
        return self._by_chunk(self._features(feats), lambda T, sl: np.quantile(T, q, axis=0))

    def cdf(self, feats, t) -> np.ndarray:
        """``P(T <= t)`` for a new step at each feature row.

        Parameters
        ----------
        feats : dict of feature arrays (or a step trace)
        t : step time(s) in ms, a scalar or one per row (> 0 on relative scales)

        Returns
        -------
        ndarray (n,)
        """
        f = self._features(feats)
        tt = self._times(t, len(next(iter(f.values()))))
        if self.method == "delta":
            s = self.spread(f)
            return self.scale.cdf(tt, s.center, s.sd_new, self.dof)
        return self._by_chunk(f, lambda T, sl: np.mean(T <= tt[sl], axis=0))

    def _times(self, t, n: int) -> np.ndarray:
        try:
            tt = np.asarray(t, dtype=float)
        except (TypeError, ValueError):
            raise InputError(f"t must be step times in ms, got {t!r}") from None
        if tt.ndim > 1 or tt.size not in (1, n):
            raise InputError(f"t must be a scalar or one value per row ({n}), got shape {tt.shape}")
        bad = ~np.isfinite(tt) | ((tt <= 0) if self.scale.positive else False)
        if np.any(bad):
            raise InputError(f"t must be finite{' and > 0' if self.scale.positive else ''} ms, "
                             f"got {t!r}")
        return np.broadcast_to(tt, (n,))

    def band(self, feats, level: float = 0.95) -> Band:
        """Pointwise confidence band of the mean and prediction band of a new step.

        Parameters
        ----------
        feats : dict of feature arrays (or a step trace)
        level : coverage of each band, in (0, 1)

        Returns
        -------
        Band (ms); ``upper`` is ``quantile(feats, (1 + level)/2)``
        """
        level = _level(level)
        lo_q, hi_q = (1.0 - level) / 2.0, (1.0 + level) / 2.0
        f = self._features(feats)
        mu = self.fit.model.predict(self.theta, f)
        if self.method == "delta":
            s = self.spread(f)
            z = float(stats.t.ppf(hi_q, self.dof))
            m_lo, m_hi = (self.scale.inverse(mu, -z * s.sd_mean),
                          self.scale.inverse(mu, z * s.sd_mean))
        else:
            P = self._curves(f, slice(None))
            m_lo, m_hi = np.quantile(P, [lo_q, hi_q], axis=0)
        return Band(level, self.method, mu, m_lo, m_hi, self.quantile(f, lo_q),
                    self.quantile(f, hi_q))


class MeanStepTime:
    """The mean time (ms) of a step, for quantities that add many steps up.

    Problem: a fit on a relative scale (log residuals, the default) predicts
    the *median* step time ``mu``; a request's latency, a run's busy time or
    a throughput is a *sum* of steps, whose expectation needs each step's
    mean. Under the fit's own noise model the mean is ``scale.mean(mu, s)``
    (:meth:`perfmodel.core.scale.FitScale.mean`; ``mu exp(s^2/2)`` on the log
    scale, ``s`` the residual standard deviation), a constant factor
    ``scale.mean(1, s)`` for every scale (log, weight, absolute). Summing
    medians instead understates every sum by that factor (the
    retransformation bias; about 2 % at ``s = 0.2``). Parameter uncertainty
    is not in the factor: it does not average out over the steps of one
    simulation and belongs to the interval, not to the point answer.

    Verified in ``tests/stats/test_predictive.py``: the factor equals the
    mean of ``exp`` of normal log residuals with the fit's ``s`` (Monte Carlo)
    and is 1 on the absolute scale.

    Parameters
    ----------
    fit : FitResult
        Any fitted model with ``rss``, ``dof`` and ``options`` (its scale).

    Attributes
    ----------
    factor : float
        Mean over median of a step, ``>= 1`` on the log scale.
    fit : the wrapped fit; every other attribute is the fit's.
    """

    def __init__(self, fit):
        fit = fit.fit if isinstance(fit, MeanStepTime) else fit
        missing = _missing_fit_attrs(fit)
        if missing:
            raise InputError(f"a mean step time needs a FitResult (missing {missing}); "
                             f"got {type(fit).__name__}")
        self.fit = fit
        dof = int(fit.dof)
        # no residual degrees of freedom: no variance to correct for, the mean is the median
        sd = math.sqrt(float(fit.rss) / dof) if dof > 0 else 0.0
        self.factor = float(scale_of(fit).mean(np.array([1.0]), np.array([sd]))[0])

    def predict(self, feats) -> np.ndarray:
        """Mean step time (ms): the fit's prediction times :attr:`factor`."""
        return self.factor * np.asarray(self.fit.predict(feats), dtype=float)

    def __getattr__(self, name):
        if name == "fit":  # not set yet (e.g. while unpickling)
            raise AttributeError(name)
        return getattr(self.fit, name)


def mean_step_model(model):
    """``model`` with the mean step time when it is a fit, else unchanged.

    A simulator that adds step times up calls this on the model it is given
    (:class:`MeanStepTime`); a plain object with a ``predict`` method (a
    baseline, a lookup table, a test's constant step) is used as it is, since
    nothing says what its prediction is the median of.
    """
    if isinstance(model, MeanStepTime) or _missing_fit_attrs(model):
        return model
    return MeanStepTime(model)
