"""SLA inversion, token budgets and an SLA-aware batch filter from a fitted step model.

Problem
-------
Turn a fitted step-latency model ``T(B, S)`` into operator answers
(docs/model.md, Decision quantities): the largest number of tokens ``S*`` a step with ``B``
requests can carry and still meet a step-time target ``T*``; the converse
largest ``B*`` at ``S`` tokens; the same with a stated probability
(``P(T <= T*) >= q``); the frontier over ``B``; a recommended vLLM
``max_num_batched_tokens`` / ``max_num_seqs`` for an inter-token-latency SLO;
and an SLA-aware batch filter, ``schedule_batch_with_sla``.

Where the answers are exact
---------------------------
The saturation forms are **not monotone** in ``S`` (docs/model.md, Monotonicity):
``T`` falls from ``+inf`` as ``S -> 0`` and rises again, and likewise in
``B`` at fixed ``S``.  Every search here runs on the *rising branch*:
``rising_from`` is the smallest integer from which the predicted time does
not fall (found on a log grid, then refined by bisection on the sign of the
forward difference ``T(s+1) - T(s)``; this assumes a single minimum between
the last falling grid point and the next-but-one, which holds for the
saturation members because ``(a_0 + a_1 S)/(1 - e^{-k S})`` is convex).
On that branch an answer satisfies, exactly on integers,

    T(B, S*) <= T*  <  T(B, S* + 1)

unless ``S*`` is capped at ``s_max``; ``S*`` never decreases as ``T*`` grows;
a target below the smallest predicted time on the allowed domain
(``S >= max(B, rising_from)``) is reported as infeasible.  Every answer
reports both ``rising_from`` (the model's, which can be below ``B``) and
``search_from = max(B, rising_from)``, the smallest ``S`` the search
considers (``S >= B``: each request computes at least one token).  These properties
are checked with hypothesis in ``tests/decisions/test_sla.py``.

Uncertainty
-----------
With ``q`` the step time is replaced by its ``q``-quantile under the
prediction distribution of a new step,
:class:`perfmodel.stats.predictive.PredictiveDistribution` -- the same one behind
the bands of :mod:`perfmodel.stats.uncertainty`, so the ``q``-quantile here is the
upper end of the level ``2q - 1`` prediction band there:

* ``method='delta'``: on the fit's scale (:mod:`perfmodel.core.scale`) a new step
  has residual ``e ~ sd * t_dof`` with ``sd^2 = g' C g + s^2`` (``g`` the
  fit-scale Jacobian of the fitted value, ``C = fit.cov``, ``s^2 =
  fit.rss/fit.dof``) and time ``inverse(T_hat, e)``: ``T_hat exp(e)`` for
  ``relative='log'``, ``T_hat + e`` for ``'absolute'``, ``T_hat/(1 - e)`` for
  ``'weight'``.  Parameters at a bound or unidentified carry no variance.
* ``method='bootstrap'``: parameter samples (``boot_samples``, an
  ``n_boot x p`` array, e.g. from a residual or pairs bootstrap) are paired
  at random (seeded) with fit-scale residuals (the fit's own, centred and
  scaled by ``sqrt(n/dof)``, or ``residuals``); the predictive sample is
  ``inverse(T_hat_b, e_j)`` and its empirical quantile is used.  Without
  stored residuals (a fit read from JSON), residuals are drawn from
  ``N(0, s^2)`` and the answer says so.
* ``method='conformal'``: the upper end of the fit's stored Mondrian conformal
  interval (:func:`perfmodel.stats.intervals.conformal_interval`) at the central
  level ``2q - 1``, the step's regime taken from its ``B`` and ``S``: the only
  quantile here calibrated on held-out steps (the delta band over-covers long
  and under-covers short steps held out; paper, SLA inversion).  It needs a fit
  with an interval calibration, ``2q - 1`` among its stored levels, and gives no
  probability at other targets (``prob_meets`` is NaN).  Verified in
  ``tests/decisions/test_sla.py`` against ``conformal_interval`` and a trace with
  known noise.

Modules
-------
This module gathers the SLA decisions; each lives in a module of its own:

* :mod:`perfmodel.decisions.predictor`: :class:`Predictor`, the searched quantity;
* :mod:`perfmodel.decisions.step_context`: the constants (and the context
  assumption) for the features other than ``B`` and ``S``;
* :mod:`perfmodel.decisions.rising_search`: the exact integer searches;
* :mod:`perfmodel.decisions.inversion`: :func:`max_tokens`,
  :func:`max_tokens_quantile`, :func:`max_batch`, :func:`frontier`,
  :func:`plot_frontier`;
* :mod:`perfmodel.decisions.token_budget`: :func:`recommend_token_budget`;
* :mod:`perfmodel.decisions.batch_filter`: :func:`schedule_batch_with_sla`.
"""
from __future__ import annotations

from perfmodel.decisions.batch_filter import ScheduleDecision, schedule_batch_with_sla
from perfmodel.decisions.inversion import (
    DEFAULT_S_MAX,
    BatchAnswer,
    SlaAnswer,
    frontier,
    max_batch,
    max_tokens,
    max_tokens_quantile,
    plot_frontier,
)
from perfmodel.decisions.predictor import Predictor
from perfmodel.decisions.token_budget import (
    DEFAULT_SEQS_GRID,
    DIAGNOSTIC_LABEL,
    recommend_token_budget,
)

__all__ = [
    "DEFAULT_SEQS_GRID",
    "DEFAULT_S_MAX",
    "DIAGNOSTIC_LABEL",
    "BatchAnswer",
    "Predictor",
    "ScheduleDecision",
    "SlaAnswer",
    "frontier",
    "max_batch",
    "max_tokens",
    "max_tokens_quantile",
    "plot_frontier",
    "recommend_token_budget",
    "schedule_batch_with_sla",
]
