"""Confidence and prediction bands for T(B, S) (delta method or bootstrap).
"""
from __future__ import annotations

import pandas as pd
from scipy import stats

from perfmodel.stats.predictive import PredictiveDistribution
from perfmodel.stats.uncertainty._common import _alpha_problem, _check_fit, _choice_problem, _raise
from perfmodel.stats.uncertainty.bootstrap import BootstrapResult

# ---------------------------------------------------------------------------
# bands for T(B, S)
# ---------------------------------------------------------------------------

def _grid(model, feats):
    if isinstance(feats, pd.DataFrame):
        cols = {"batch_size": "B", "total_tokens": "S"}
        if all(k in feats.columns for k in model.requires):
            return {k: feats[k].to_numpy(float) for k in model.requires}
        if set(model.requires) <= {"B", "S"} and all(c in feats.columns for c in cols):
            return {cols[c]: feats[c].to_numpy(float) for c in cols}
        from perfmodel.data.trace import step_features

        return model.check_features(step_features(feats))
    return model.check_features(feats)


def _band(fit, feats, alpha, method, boot, predictive, seed, where, n_draws=4000):
    _check_fit(fit, where)
    problems = _alpha_problem(alpha) + _choice_problem("method", method, ("delta", "bootstrap"))
    if method == "bootstrap" and not isinstance(boot, BootstrapResult):
        problems.append(f"method 'bootstrap' needs boot=BootstrapResult, got {type(boot).__name__}")
    if method == "bootstrap" and isinstance(boot, BootstrapResult) and boot.n_ok < 2:
        problems.append("boot has no samples (a BootstrapResult read from a dict without samples?)")
    _raise(problems, where)
    f = _grid(fit.model, feats)
    dist = PredictiveDistribution(fit, boot if method == "bootstrap" else None, n_draws=n_draws,
                                  seed=seed)
    b = dist.band(f, 1.0 - alpha)
    out = pd.DataFrame({k: v for k, v in f.items()})
    out["fit"] = b.fit
    out["lower"], out["upper"] = (b.lower, b.upper) if predictive else (b.mean_lower, b.mean_upper)
    out.attrs.update(method=method, scale=dist.scale.name, unidentified=dist.unidentified)
    if method == "delta":
        out.attrs.update(quantile=float(stats.t.ppf(1 - alpha / 2, dist.dof)))
    else:
        out.attrs.update(n_samples=dist.n_samples)
        if predictive:
            out.attrs.update(noise_source=dist.noise_source)
    if dist.note:
        out.attrs.update(note=dist.note)
    return out


def confidence_band(fit, feats, alpha: float = 0.05, method: str = "delta", boot=None):
    """Pointwise confidence band for the mean step time ``T(B, S)`` at new points.

    Problem: how well is the *curve* known at each (B, S)?  ``'delta'``: the
    fitted value's variance on the fit scale ``v = g' C g`` (``g`` the
    model's analytic Jacobian on that scale, :mod:`perfmodel.core.scale`;
    ``C = fit.cov``), band ``inverse(mu, +/- t_{1-alpha/2, dof} sqrt(v))`` --
    ``mu exp(+/- t sd)`` for a log fit, ``mu +/- t sd`` for an absolute one,
    ``mu / (1 -+ t sd)`` for a weight one.  ``'bootstrap'``: the ``alpha/2,
    1-alpha/2`` quantiles of the predictions of the bootstrap samples ``boot``.
    Parameters at a bound, and unidentified parameters, contribute no
    variance (listed in ``attrs['unidentified']``; the rule of
    :mod:`perfmodel.stats.predictive`).

    Parameters
    ----------
    fit : FitResult
    feats : dict of feature arrays (``B``, ``S``, ...) or a DataFrame with
        those columns (or ``batch_size``/``total_tokens``)
    alpha : 1 - confidence level
    method : 'delta' or 'bootstrap'
    boot : BootstrapResult (with at least 20 samples), for ``method='bootstrap'``

    Returns
    -------
    DataFrame with the features, ``fit`` (ms), ``lower``, ``upper`` (ms).

    Notes
    -----
    The same numbers as ``PredictiveDistribution(fit, boot).band(feats, 1 - alpha)``'s
    ``mean_lower``/``mean_upper`` (``tests/stats/test_predictive.py``).
    """
    return _band(fit, feats, alpha, method, boot, False, 0, "confidence_band")


def prediction_band(fit, feats, alpha: float = 0.05, method: str = "delta", boot=None,
                    seed: int = 0, n_draws: int = 4000):
    """Pointwise prediction band for the time of a new step at (B, S).

    Problem: the confidence band covers the mean curve; a single new step
    also carries the residual noise.  ``'delta'``: the confidence-band
    variance plus the residual variance ``s^2 = RSS/dof`` on the fit's
    scale, ``inverse(mu, +/- t sqrt(v + s^2))``: for a log fit
    ``mu exp(+/- t sqrt(v + s^2))``; for an absolute fit
    ``mu +/- t sqrt(v + s^2)``; for a relative (``'weight'``) fit
    ``mu / (1 -+ t sqrt(v + s^2))``.  ``'bootstrap'``: ``max(n_draws, n_boot)``
    bootstrap predictions paired at random with the fit's centred residuals
    scaled by ``sqrt(n/dof)`` (normal errors of variance ``s^2`` when the fit
    carries no data), quantiles of the result (seeded by ``seed``).  The
    band's ends are the ``alpha/2`` and ``1 - alpha/2`` quantiles of
    :class:`perfmodel.stats.predictive.PredictiveDistribution`, the ones
    :mod:`perfmodel.decisions.sla` searches with.

    Parameters and return value as :func:`confidence_band`; ``n_draws``:
    size of the bootstrap predictive sample.

    Notes
    -----
    Verified: the upper limit at ``alpha = 0.10`` equals the 0.95-quantile of
    :func:`perfmodel.decisions.sla.max_tokens_quantile` at the same point to 1e-10
    (``tests/stats/test_predictive.py``).
    """
    return _band(fit, feats, alpha, method, boot, True, seed, "prediction_band", n_draws)
