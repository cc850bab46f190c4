"""Residual diagnostics for a fitted step-latency model.

Problem: after fitting ``T(B, S)`` we must know whether the residuals
``e = T - T_hat`` behave as the fit's standard errors assume (normal,
homoscedastic, uncorrelated in time, without drift). The core set
(docs/model.md, Evaluation) is Shapiro-Wilk, Breusch-Pagan on B and S,
Durbin-Watson and a linear trend test against time order; this module adds
Jarque-Bera, Anderson-Darling, Ljung-Box and (optionally) White's test, and
:func:`residual_table` returns all of them as one table.

Each test returns a small :class:`~typing.NamedTuple` (``statistic``,
``pvalue`` and what else it needs). Every function checks its input first and
raises :class:`perfmodel.errors.InputError` naming the argument.

Verification (``tests/stats/test_diagnostics.py``): every statistic and p-value
equals the statsmodels/scipy function called directly on the same residuals
to a relative 1e-10; Breusch-Pagan, Durbin-Watson and Ljung-Box also match
values computed with R (``lmtest::bptest``, ``car::durbinWatsonTest``,
``stats::Box.test``) as recorded in statsmodels' own test suite, and
Shapiro-Wilk matches the worked example scipy's test suite takes from the
original paper.

Note: ``stats.linregress(range(n), resid)[:2]``, a common shortcut for a trend
test, returns the slope and the *intercept*, not a p-value; :func:`trend_test` returns the
slope's t statistic and two-sided p-value.

Modules
-------
:mod:`.normality` (Shapiro-Wilk, Jarque-Bera, Anderson-Darling),
:mod:`.heteroscedasticity` (Breusch-Pagan, White), :mod:`.time_order`
(Durbin-Watson, Ljung-Box, trend), :mod:`.table` (:func:`residual_table`) and
:mod:`._common` (result types, argument checks).  Every name is re-exported
here; patch a function in the module that defines it.
"""
from __future__ import annotations

from perfmodel.stats.diagnostics._common import (
    SHAPIRO_MAX_N as SHAPIRO_MAX_N,  # not in __all__, as before
)
from perfmodel.stats.diagnostics._common import (
    AndersonResult,
    BreuschPaganResult,
    DurbinWatsonResult,
    JarqueBeraResult,
    LjungBoxResult,
    ShapiroResult,
    TrendResult,
    WhiteResult,
)
from perfmodel.stats.diagnostics.heteroscedasticity import breusch_pagan, white_test
from perfmodel.stats.diagnostics.normality import (
    _ad_normal_pvalue as _ad_normal_pvalue,  # used by tests
)
from perfmodel.stats.diagnostics.normality import anderson_darling, jarque_bera, shapiro_wilk
from perfmodel.stats.diagnostics.table import residual_table
from perfmodel.stats.diagnostics.time_order import durbin_watson, ljung_box, trend_test

__all__ = [
    "AndersonResult",
    "BreuschPaganResult",
    "DurbinWatsonResult",
    "JarqueBeraResult",
    "LjungBoxResult",
    "ShapiroResult",
    "TrendResult",
    "WhiteResult",
    "anderson_darling",
    "breusch_pagan",
    "durbin_watson",
    "jarque_bera",
    "ljung_box",
    "residual_table",
    "shapiro_wilk",
    "trend_test",
    "white_test",
]
