"""FitResult: statistics, warnings, report, JSON round trip, atomic writes."""
import json

import numpy as np
import pytest

from perfmodel.core.fit import fit_model
from perfmodel.core.model import get_model
from perfmodel.core.results import FitResult, atomic_write_text
from perfmodel.errors import InputError

TRUTH = np.array([5.0, 2.0, 0.05, 0.3, 0.02, 0.05, 0.002])


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(0)
    B = rng.integers(1, 65, 1200).astype(float)
    S = B + np.round(np.exp(rng.uniform(0, np.log(4096), 1200)))
    f = {"B": B, "S": S}
    y = get_model("seed_id").predict(TRUTH, f) * np.exp(0.03 * rng.standard_normal(1200))
    return fit_model(f, "seed", y=y), f, y


def test_statistics_match_direct_computation(fitted):
    r, f, y = fitted
    yhat = r.predict(f)
    res = y - yhat
    assert r.rmse == pytest.approx(np.sqrt(np.mean(res**2)))
    assert r.mae == pytest.approx(np.mean(np.abs(res)))
    assert r.mape == pytest.approx(100 * np.mean(np.abs(res) / y))
    assert r.r2 == pytest.approx(1 - np.sum(res**2) / np.sum((y - y.mean()) ** 2))
    logrss = np.sum((np.log(y) - np.log(yhat)) ** 2)
    assert r.rss == pytest.approx(logrss, rel=1e-9)
    assert r.aic == pytest.approx(1200 * np.log(logrss / 1200) + 2 * 7)
    assert r.bic == pytest.approx(1200 * np.log(logrss / 1200) + np.log(1200) * 7)
    assert r.dof == 1200 - 7


def test_json_round_trip(fitted, tmp_path):
    r, f, _ = fitted
    p = tmp_path / "fit.json"
    r.to_json(p)
    back = FitResult.from_json(p)
    np.testing.assert_array_equal(back.values, r.values)
    np.testing.assert_array_equal(back.stderr, r.stderr)
    np.testing.assert_array_equal(back.cov, r.cov)
    np.testing.assert_allclose(back.predict(f), r.predict(f))
    assert back.summary() == r.summary()
    assert back.fit_report() == r.fit_report()
    assert back.derived == r.derived and back.provenance == r.provenance
    with pytest.raises(InputError, match="exists"):
        r.to_json(p)


def test_from_json_rejects_non_fit_files(tmp_path):
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"a": 1}))
    with pytest.raises(InputError, match="missing keys"):
        FitResult.from_json(p)
    p.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        FitResult.from_json(p)
    with pytest.raises(InputError, match="does not exist"):
        FitResult.from_json(tmp_path / "none.json")


def test_warnings_for_high_correlation_and_bounds():
    rng = np.random.default_rng(1)
    B = rng.integers(1, 65, 400).astype(float)
    S = B + rng.integers(0, 2000, 400)
    f = {"B": B, "S": S}
    truth = TRUTH.copy()
    truth[5] = -0.02  # a negative per-request cost: the constrained optimum sits at tau_B = 0
    y = get_model("seed_id").predict(truth, f)
    r = fit_model(f, "seed_id", y=y, relative="absolute")
    assert "tau_B" in r.at_bound
    assert np.isnan(r.stderrs["tau_B"])
    assert any("tau_B is at a bound" in w for w in r.warnings)
    assert "(at bound; no interval)" in r.fit_report()
    assert r.high_correlations(0.95) == [
        c for c in r.high_correlations(0.0) if abs(c[2]) > 0.95]


def test_html_view_and_conf_int(fitted):
    r, _, _ = fitted
    assert "<table>" in r._repr_html_()
    ci = r.conf_int()
    for n, (lo, hi) in ci.items():
        assert lo < r.params[n] < hi
    with pytest.raises(InputError):
        r.conf_int(alpha=2)


def test_atomic_write_never_truncates(tmp_path):
    p = tmp_path / "out.txt"
    p.write_text("keep me")
    with pytest.raises(InputError):
        atomic_write_text(p, "new")
    assert p.read_text() == "keep me"
    atomic_write_text(p, "new", force=True)
    assert p.read_text() == "new"
    assert list(tmp_path.iterdir()) == [p]


def test_fit_options_as_dict_is_the_options_record():
    import dataclasses

    from perfmodel.core.results import FitOptions

    o = FitOptions(loss="huber", relative="log", f_scale=float("inf"), n_starts=3, n_converged=2,
                   seed=1, scale=True, outlier_window=(1, 300), irls_iterations=0, weighted=True)
    assert o.as_dict() == {"loss": "huber", "relative": "log", "f_scale": None, "n_starts": 3,
                           "n_converged": 2, "seed": 1, "scale": True, "outlier_window": [1, 300],
                           "irls_iterations": 0, "weighted": True}
    assert list(o.as_dict()) == ["loss", "relative", "f_scale", "n_starts", "n_converged", "seed",
                                 "scale", "outlier_window", "irls_iterations", "weighted"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.loss = "linear"
