"""Tests of perfmodel.stats.uncertainty.clustering: ICC and design effect."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfmodel.errors import InputError
from perfmodel.stats.uncertainty import intraclass_correlation


def test_balanced_icc_equals_the_anova_formula_from_statsmodels():
    sm = pytest.importorskip("statsmodels.formula.api")
    anova_lm = pytest.importorskip("statsmodels.stats.anova").anova_lm
    rng = np.random.default_rng(0)
    g = np.repeat(np.arange(30), 4)
    x = rng.normal(size=30)[g] + rng.normal(size=g.size)
    tab = anova_lm(sm.ols("x ~ C(g)", data=pd.DataFrame({"x": x, "g": g})).fit())
    msb, msw = tab["mean_sq"].iloc[0], tab["mean_sq"].iloc[1]
    want = (msb - msw) / (msb + 3 * msw)
    got = intraclass_correlation(x, g)
    assert got.icc == pytest.approx(want, rel=1e-12)
    assert got.design_effect == pytest.approx(1 + 3 * want, rel=1e-12)
    assert got.n_eff == pytest.approx(120 / got.design_effect)


def test_known_icc_is_recovered():
    rng = np.random.default_rng(1)
    g = np.repeat(np.arange(400), 5)
    x = rng.normal(0, np.sqrt(0.8), 400)[g] + rng.normal(0, np.sqrt(0.2), g.size)
    assert intraclass_correlation(x, g).icc == pytest.approx(0.8, abs=0.04)


def test_singletons_and_bad_input():
    s = intraclass_correlation([1.0, 2.0, 3.0], [0, 1, 2])
    assert s.design_effect == 1.0 and s.n_eff == 3.0
    with pytest.raises(InputError):
        intraclass_correlation([1.0, np.nan], [0, 1])
    with pytest.raises(InputError):
        intraclass_correlation([1.0, 2.0], [0])
