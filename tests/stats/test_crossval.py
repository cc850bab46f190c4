"""Tests of perfmodel.stats.crossval: cross_validate's fold and summary rows,
failures, input errors and parallel workers."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from numpy.testing import assert_allclose

from perfmodel.errors import InputError
from perfmodel.stats import baselines as bl
from perfmodel.stats import crossval as cvl
from perfmodel.stats import folds as fo
from perfmodel.stats import scores as sc
from perfmodel.stats import splits as spl


# ---------------------------------------------------------------- cross-validation
def test_cross_validate_recovers_known_model_in_every_fold(synthetic_trace):
    df = synthetic_trace(240)
    sp = spl.time_series_splits(len(df), 4)
    tab = cvl.cross_validate(df, lambda: bl.get_baseline("linear"), sp)
    folds = tab[tab.fold.isin(range(4))]
    assert set(folds.regime) <= {"all", *sc.REGIMES}
    assert (folds.RMSE < 1e-9).all() and (folds.MAPE < 1e-9).all()
    assert list(tab.model.unique()) == ["linear"]
    allrows = folds[folds.regime == "all"]
    assert list(allrows.n_test) == [sp[i][1].size for i in range(4)]
    assert list(allrows.n_train) == [sp[i][0].size for i in range(4)]


def test_cross_validate_summary_rows_and_coefficients(synthetic_trace):
    df = synthetic_trace(400, seed=5, noise=0.05)
    sp = fo.make_folds(df, "grouped", k=5, seed=0)
    fitted = []

    def make():
        m = bl.LinearBS()
        fitted.append(m)
        return m

    tab = cvl.cross_validate(df, make, sp)
    # each fold's fit recovers the known coefficients (2, 0.3, 0.01) to within noise
    for m in fitted:
        assert_allclose(m.coef_, [2, 0.3, 0.01], rtol=0.15)
    folds = tab[(tab.fold != "mean") & (tab.fold != "pooled")]
    for r in ("all",) + sc.REGIMES:
        sub = folds[folds.regime == r]
        if sub.empty:
            continue
        mean = tab[(tab.fold == "mean") & (tab.regime == r)].iloc[0]
        assert_allclose(mean[["R2", "RMSE", "MAE", "MAPE"]].to_numpy(float),
                        sub[["R2", "RMSE", "MAE", "MAPE"]].mean().to_numpy(float), rtol=1e-12)
        assert mean.n == sub.n.sum()
    # pooled = metrics of all out-of-fold predictions together
    y, p = [], []
    for m, (tr, te) in zip(fitted, sp):
        y.append(df.duration_ms.to_numpy()[te])
        p.append(m.predict(df.iloc[te]))
    ref = sc.metrics(np.concatenate(y), np.concatenate(p))
    pooled = tab[(tab.fold == "pooled") & (tab.regime == "all")].iloc[0]
    assert_allclose(pooled[["R2", "RMSE", "MAE", "MAPE"]].to_numpy(float),
                    [ref["R2"], ref["RMSE"], ref["MAE"], ref["MAPE"]], rtol=1e-12)


def test_cross_validate_extrapolation_and_by_regime_off(synthetic_trace):
    df = synthetic_trace(240, seed=2, noise=0.02)
    tab = cvl.cross_validate(df, lambda: bl.get_baseline("poly3"),
                            spl.extrapolation_split(df), by_regime=False)
    assert set(tab.regime) == {"all"} and list(tab.fold) == [0, "mean", "pooled"]


def test_cross_validate_records_or_raises_failures(synthetic_trace):
    df = synthetic_trace(80)

    class Flaky:
        name = "flaky"
        calls = 0

        def fit(self, d):
            Flaky.calls += 1
            if Flaky.calls == 2:
                raise RuntimeError("did not converge")
            self.m = bl.LinearBS().fit(d)
            # a model whose fit returns None still works

        def predict(self, d):
            return self.m.predict(d)

    sp = spl.time_series_splits(len(df), 3)
    tab = cvl.cross_validate(df, Flaky, sp, errors="record")
    failed = tab[tab.error != ""]
    assert len(failed) == 1 and failed.fold.iloc[0] == 1
    assert "RuntimeError: did not converge" in failed.error.iloc[0]
    assert np.isnan(failed.RMSE.iloc[0])
    mean = tab[(tab.fold == "mean") & (tab.regime == "all")].iloc[0]
    assert mean.n == sp[0][1].size + sp[2][1].size
    Flaky.calls = 0
    with pytest.raises(RuntimeError, match="did not converge"):
        cvl.cross_validate(df, Flaky, sp)


def test_cross_validate_input_errors(synthetic_trace):
    df = synthetic_trace(40)
    sp = spl.time_series_splits(len(df), 2)
    with pytest.raises(InputError, match="`make_model` must be a callable"):
        cvl.cross_validate(df, bl.LinearBS(), sp)
    with pytest.raises(InputError, match="split 0: test indices outside"):
        cvl.cross_validate(df, bl.LinearBS, [(np.arange(5), np.array([50]))])
    with pytest.raises(InputError, match="empty test set"):
        cvl.cross_validate(df, bl.LinearBS, [(np.arange(5), np.array([], int))])
    with pytest.raises(InputError, match="`errors`"):
        cvl.cross_validate(df, bl.LinearBS, sp, errors="ignore")
    with pytest.raises(InputError, match=r"lacks column\(s\) \['duration_ms'\]"):
        cvl.cross_validate(df.drop(columns="duration_ms"), bl.LinearBS, sp)



def test_cross_validate_gives_the_same_scores_on_two_workers():
    from perfmodel.core.synthetic import simulate_trace

    df = simulate_trace(n=300, noise="multiplicative", seed=8)
    a = cvl.cross_validate(df, lambda: bl.get_baseline("linear"), "random", k=3)
    b = cvl.cross_validate(df, lambda: bl.get_baseline("linear"), "random", k=3, n_jobs=2)
    pd.testing.assert_frame_equal(a, b)
    with pytest.raises(InputError, match="backend must be one of"):
        cvl.cross_validate(df, lambda: bl.get_baseline("linear"), "random", k=3,
                          backend="spark")


def test_cross_validate_keeps_out_of_fold_predictions(synthetic_trace):
    """attrs['predictions'] equals a direct fit-and-predict loop over the splits, with NaN on
    the rows of a failed fold and on rows no split tests."""
    df = synthetic_trace(300, seed=3, noise=0.05)
    sp = fo.make_folds(df, "grouped", k=4, seed=1)
    tab = cvl.cross_validate(df, lambda: bl.get_baseline("poly2", relative=True), sp)
    ref = np.full(len(df), np.nan)
    for tr, te in sp:
        ref[te] = bl.get_baseline("poly2", relative=True).fit(df.iloc[tr]).predict(df.iloc[te])
    assert np.isfinite(ref).all()
    assert_allclose(tab.attrs["predictions"], ref, rtol=1e-12)
    # the pooled MAPE is the mean absolute relative error of these predictions
    y = df.duration_ms.to_numpy()
    pooled = tab[(tab.fold == "pooled") & (tab.regime == "all")].MAPE.iloc[0]
    assert pooled == pytest.approx(100 * np.mean(np.abs(ref - y) / y), rel=1e-12)

    class FailsOnFirst:
        calls = 0

        def fit(self, d):
            FailsOnFirst.calls += 1
            if FailsOnFirst.calls == 1:
                raise RuntimeError("no fit")
            self.m = bl.LinearBS().fit(d)
            return self

        def predict(self, d):
            return self.m.predict(d)

    sp2 = spl.time_series_splits(len(df), 3)
    pred = cvl.cross_validate(df, FailsOnFirst, sp2, errors="record").attrs["predictions"]
    tested = np.concatenate([te for _, te in sp2[1:]])
    assert np.isfinite(pred[tested]).all()
    assert np.isnan(np.delete(pred, tested)).all()  # failed fold 0 and untested rows
