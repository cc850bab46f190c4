"""Heteroscedasticity tests of residuals: Breusch-Pagan (Koenker's robust form) and White.

Verified in ``tests/stats/test_diagnostics.py`` against statsmodels and R's
``lmtest::bptest`` (see :mod:`perfmodel.stats.diagnostics`).
"""
from __future__ import annotations

from typing import Any

import numpy as np
from scipy import stats

from perfmodel.errors import InputError
from perfmodel.stats.diagnostics._common import (
    BreuschPaganResult,
    WhiteResult,
    _full_rank,
    _regressors,
    _resid,
)


def breusch_pagan(resid: Any, exog: Any, robust: bool = True) -> BreuschPaganResult:
    """Breusch-Pagan test: does the residual variance depend on the regressors?

    Problem: step-time noise often grows with S (long prefill steps); an
    unweighted fit then gives wrong standard errors. The residuals are
    tested against B and S (docs/model.md, Evaluation).

    The squared residuals are regressed on a constant plus the columns of
    ``exog`` (e.g. B and S). Null hypothesis: homoscedasticity, the variance
    does not depend on them. ``lm`` is n R^2 of that regression (Koenker's
    studentised form, ``robust=True``, valid without normal errors) or half
    its explained sum of squares on e^2/mean(e^2) (the original form,
    ``robust=False``, assumes normal errors); chi-square with ``df`` degrees of
    freedom under the null. ``f`` is the F statistic of the same auxiliary
    regression (better size in small samples). Small p-values mean the spread
    of the residuals changes with the regressors: weight the fit or fit
    relative error.

    Parameters
    ----------
    resid : array_like, shape (n,)
        Residuals, finite, not constant.
    exog : array_like (n,) or (n, k), DataFrame or mapping name -> array
        The variance regressors, without the constant (added here; constant
        columns are dropped). Columns that are linear combinations of earlier
        ones (e.g. S == B on a decode-only trace) are dropped, so ``df`` is the
        true rank; ``regressors`` names those kept.
    robust : bool, default True
        Koenker's studentised statistic (True) or the original one (False).

    Returns
    -------
    BreuschPaganResult
        ``lm``, ``lm_pvalue``, ``f``, ``f_pvalue``, ``df``, ``n``, ``robust``,
        ``regressors``; ``statistic``/``pvalue`` alias ``lm``/``lm_pvalue``.

    Notes
    -----
    Verified against :func:`statsmodels.stats.diagnostic.het_breuschpagan`
    (all four numbers) on [1, exog] to 1e-10, and against R's
    ``lmtest::bptest`` (studentised 0.709924388395087, p 0.701199952134347;
    original 1.302014063483341, p 0.5215203247110649) for the growth-rate
    regression on statsmodels' macrodata recorded in statsmodels' test suite.
    Regressors are standardised before the auxiliary regression, which leaves
    the statistics unchanged and keeps it well conditioned at large S.
    """
    e = _resid(resid, min_n=3)
    if not isinstance(robust, (bool, np.bool_)):
        raise InputError(f"`robust` must be True or False, got {robust!r}")
    x, names = _regressors(exog, e.size, "exog")
    xc, kept = _full_rank(x, names, "exog")
    if e.size <= xc.shape[1]:
        raise InputError(
            f"`resid` has {e.size} values: Breusch-Pagan on {xc.shape[1]} columns needs more"
        )
    from statsmodels.stats.diagnostic import het_breuschpagan

    lm, lmp, f, fp = het_breuschpagan(e, xc, robust=bool(robust))
    return BreuschPaganResult(
        float(lm), float(lmp), float(f), float(fp), xc.shape[1] - 1, e.size, bool(robust), kept
    )


def white_test(resid: Any, exog: Any) -> WhiteResult:
    """White's test: does the residual variance depend on the regressors,
    their squares or their products?

    Problem: a heteroscedasticity test that also catches variance depending
    non-linearly on B and S (e.g. largest in the middle of the range).

    Null hypothesis: homoscedasticity. e^2 is regressed on a constant, the
    regressors, their squares and cross products; ``lm`` = n R^2 is
    chi-square(``df``) under the null; ``f`` is the auxiliary F statistic.

    Parameters
    ----------
    resid : array_like, shape (n,)
    exog : array_like (n,) or (n, k), DataFrame or mapping name -> array
        Regressors without the constant, as in :func:`breusch_pagan`.

    Returns
    -------
    WhiteResult
        ``lm``, ``lm_pvalue``, ``f``, ``f_pvalue``, ``df``, ``n``,
        ``regressors``; ``statistic``/``pvalue`` alias ``lm``/``lm_pvalue``.

    Notes
    -----
    Verified against :func:`statsmodels.stats.diagnostic.het_white` on
    [1, exog] to 1e-10. ``df`` is the rank of the auxiliary design minus one
    (statsmodels' ``df_model``), so duplicated terms are not counted.
    """
    e = _resid(resid, min_n=3)
    x, names = _regressors(exog, e.size, "exog")
    xc, kept = _full_rank(x, names, "exog")
    k = xc.shape[1]
    n_aux = k * (k + 1) // 2
    if e.size <= n_aux:
        raise InputError(
            f"`resid` has {e.size} values: White's test on {n_aux} auxiliary columns needs more"
        )
    from statsmodels.regression.linear_model import OLS

    i0, i1 = np.triu_indices(k)
    aux = OLS(e**2, xc[:, i0] * xc[:, i1]).fit()
    lm = e.size * aux.rsquared
    df = round(aux.df_model)
    return WhiteResult(
        float(lm),
        float(stats.chi2.sf(lm, df)),
        float(aux.fvalue),
        float(aux.f_pvalue),
        df,
        e.size,
        kept,
    )
