"""Parameter intervals and confidence/prediction bands for fitted latency models.

Problem
-------
A fitted step-latency model (:class:`perfmodel.core.results.FitResult`) gives
point estimates; decisions (capacity, SLA margins) need to know how far they
can be off.  This module gives

* **covariance intervals** -- ``theta_j +/- t_{1-alpha/2, n-p} se_j`` from the
  fit's ``s^2 (J^T J)^{-1}`` (:func:`covariance_intervals`), or from a sandwich
  covariance robust to heteroscedastic (``'HC0'``, ``'HC3'``) or
  autocorrelated (``'HAC'``, Newey-West) errors (:func:`sandwich_cov`);
* **profile-likelihood intervals** -- refit with one parameter pinned on a
  grid and find, with :func:`scipy.optimize.brentq`, where the residual sum of
  squares crosses an F (default) or chi-squared threshold
  (:func:`profile_intervals`); or, where a parameter is bounded on one side
  only, the rise of that objective on a fixed grid, every pinned refit started
  from the estimate (:func:`profile_rise`);
* **bootstrap intervals** -- resampling schemes ``'pairs'`` (cases),
  ``'residual'``, ``'wild'`` (heteroscedastic errors) and ``'block'``
  (stationary or circular, data-driven block length; time-ordered traces),
  percentile or BCa intervals, warm starts from the full-data fit, seeded,
  parallel with joblib (:func:`bootstrap` -> :class:`BootstrapResult`);
* **bands for T(B, S)** -- confidence bands for the mean step time and
  prediction bands for a new step, by the delta method or from a bootstrap
  (:func:`confidence_band`, :func:`prediction_band`).

The fit's scale
---------------
Everything works on the scale the fit was made on (``fit.options['relative']``),
through :mod:`perfmodel.core.scale`: ``'log'`` -- residual ``e = log y - log mu``,
rebuilt as ``y = mu exp(e)``; ``'absolute'`` -- ``e = y - mu``, ``y = mu + e``;
``'weight'`` (relative residuals, weights ``1/y^2``) -- ``e = (y - mu)/y``,
``y = mu/(1 - e)``.  ``mu`` is the fitted step time in ms.  The Jacobian on
that scale is ``J/mu`` (log), ``J`` (absolute) or ``J/y`` (weight).  The
bands come from :class:`perfmodel.stats.predictive.PredictiveDistribution`, the
distribution behind the quantiles of :mod:`perfmodel.decisions.sla` too.

Verification
------------
The BCa formulas reproduce :func:`scipy.stats.bootstrap` (``method='BCa'``)
on scipy's own bootstrap distribution of a mean to 1e-12; HC0/HC3/HAC
sandwich covariances reproduce statsmodels ``OLS(...).fit(cov_type=...)`` on
a linear model to 1e-10; the F-profile interval of a linear model reproduces
the t interval (statsmodels ``conf_int``) to 1e-6
(``tests/stats/test_uncertainty.py``).  Coverage of every method is measured by
:mod:`perfmodel.stats.coverage`.

References
----------
Bates & Watts (1988), *Nonlinear Regression Analysis and Its Applications*, ch. 6 (profile t).
Davison & Hinkley (1997), *Bootstrap Methods and their Application*, ch. 5-6, 8.
Efron & Tibshirani (1993), *An Introduction to the Bootstrap*, ch. 14 (BCa).
Davidson & Flachaire (2008), The wild bootstrap, tamed at last, J. Econometrics 146.
Politis & Romano (1994), The stationary bootstrap, JASA 89; Politis & White (2004), and
Patton, Politis & White (2009), automatic block-length selection, Econometric Reviews.
MacKinnon & White (1985) (HC3); Newey & West (1987, 1994) (HAC).

Modules
-------
:mod:`.covariance` (classical and sandwich intervals), :mod:`.profile`
(profile likelihood), :mod:`.resampling` (percentile/BCa/studentized
intervals, block resampling), :mod:`.bootstrap` (:func:`bootstrap`,
:class:`BootstrapResult`), :mod:`.bands` (confidence/prediction bands) and
:mod:`._common` (argument checks, the fit's data and scale).  Every name is
re-exported here; patch a function in the module that defines it.
"""
from __future__ import annotations

from perfmodel.stats.uncertainty._common import (
    BLOCKS,
    COV_TYPES,
    METHODS,
    SCHEMES,
)
from perfmodel.stats.uncertainty._common import SE_TYPES as SE_TYPES  # not in __all__, as before
from perfmodel.stats.uncertainty._common import WILD_WEIGHTS as WILD_WEIGHTS
from perfmodel.stats.uncertainty._common import one_blas_thread as one_blas_thread
from perfmodel.stats.uncertainty.bands import confidence_band, prediction_band
from perfmodel.stats.uncertainty.bootstrap import BootstrapResult, attach_bootstrap, bootstrap
from perfmodel.stats.uncertainty.clustering import ClusterSummary, intraclass_correlation
from perfmodel.stats.uncertainty.covariance import covariance_intervals, sandwich_cov
from perfmodel.stats.uncertainty.profile import _profile_core as _profile_core  # used by tests
from perfmodel.stats.uncertainty.profile import profile_intervals, profile_rise
from perfmodel.stats.uncertainty.resampling import (
    bca_interval,
    block_indices,
    optimal_block_length,
    percentile_interval,
    quantile_mc_range,
    share_below,
    studentized_interval,
)

__all__ = [
    "BLOCKS",
    "COV_TYPES",
    "METHODS",
    "SCHEMES",
    "BootstrapResult",
    "ClusterSummary",
    "attach_bootstrap",
    "bca_interval",
    "block_indices",
    "bootstrap",
    "confidence_band",
    "covariance_intervals",
    "intraclass_correlation",
    "optimal_block_length",
    "percentile_interval",
    "prediction_band",
    "profile_intervals",
    "profile_rise",
    "quantile_mc_range",
    "sandwich_cov",
    "share_below",
    "studentized_interval",
]
