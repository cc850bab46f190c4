"""Tests of perfmodel.decisions.sensitivity: closed-form derivatives against central differences."""
from __future__ import annotations

from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest

from perfmodel.core.model import get_model
from perfmodel.decisions.sensitivity import QUANTITIES, derivatives, plot_contour, sensitivity_grid
from perfmodel.errors import InputError

THETAS = {
    "seed_id": [5.0, 2.0, 0.05, 0.3, 0.01, 0.1, 0.002],
    "seed": [50.0, 0.3, 0.01, 100.0, 2.5, 5.0, 0.1, 0.002],
    "seed_gamma": [5.0, 2.0, 0.05, 0.3, 0.01, 0.01, 1e-4, 0.1, 0.002],
    "seed_ctx": [5.0, 2.0, 0.05, 0.3, 0.01, 0.1, 0.002, 1e-5, 1e-3],
}


def _fit(name):
    m = get_model(name)
    th = np.asarray(THETAS[name], float)
    return SimpleNamespace(model=m, values=th, param_names=m.param_names, model_name=name,
                           predict=lambda f: m.predict(th, f))


def _central(fit, B, S, extra, which, h):
    def T(b, s):
        return fit.predict({"B": np.atleast_1d(b), "S": np.atleast_1d(s), **extra})

    if which == "B":
        return (T(B + h, S) - T(B - h, S)) / (2 * h)
    return (T(B, S + h) - T(B, S - h)) / (2 * h)


@pytest.mark.parametrize("name", sorted(THETAS))
def test_closed_form_matches_central_differences(name):
    fit = _fit(name)
    rng = np.random.default_rng(0)
    B = rng.uniform(1, 128, 200)
    S = rng.uniform(1, 8192, 200)
    feats = {"attn_prefill": rng.uniform(0, 1e6, 200), "decode_ctx": rng.uniform(0, 1e5, 200)}
    d = derivatives(fit, B, S, features=feats)
    assert d["method"] == "analytic"
    extra = feats if name == "seed_ctx" else {}
    T = fit.predict({"B": B, "S": S, **extra})
    assert np.allclose(d["T"], T, rtol=1e-12)
    # step h = 1e-3 x: central-difference truncation error O(h^2) ~ 1e-6 relative
    for which, key, x in (("B", "dT_dB", B), ("S", "dT_dS", S)):
        num = _central(fit, B, S, extra, which, 1e-3 * x)
        scale = np.abs(T) / x  # derivative scale (ms per unit)
        assert np.all(np.abs(d[key] - num) <= 1e-5 * scale + 1e-9), (name, key)


def test_numeric_fallback_generic_model():
    class Linear:
        def predict(self, f):
            return 1.0 + 0.1 * np.asarray(f["B"]) + 0.01 * np.asarray(f["S"]) ** 1.5

    d = derivatives(Linear(), [1.0, 10.0], [100.0, 400.0])
    assert d["method"] == "numeric"
    assert np.allclose(d["dT_dB"], 0.1, rtol=1e-6)
    assert np.allclose(d["dT_dS"], 0.015 * np.sqrt([100.0, 400.0]), rtol=1e-6)
    with pytest.raises(InputError, match="closed-form"):
        derivatives(Linear(), 1.0, 1.0, method="analytic")


def test_numeric_and_analytic_agree_on_a_fit():
    fit = _fit("seed_id")
    a = derivatives(fit, [4, 16, 64], [64, 512, 4096])
    n = derivatives(fit, [4, 16, 64], [64, 512, 4096], method="numeric")
    assert n["method"] == "numeric"
    assert np.allclose(a["dT_dB"], n["dT_dB"], rtol=1e-5)
    assert np.allclose(a["dT_dS"], n["dT_dS"], rtol=1e-5)


def test_derived_quantities():
    fit = _fit("seed_id")
    B = np.array([2.0, 8.0, 32.0])
    S = np.array([50.0, 600.0, 3000.0])
    d = derivatives(fit, B, S)
    assert np.allclose(d["elasticity_B"], d["dT_dB"] * B / d["T"])
    assert np.allclose(d["elasticity_S"], d["dT_dS"] * S / d["T"])
    assert np.allclose(d["throughput"], 1000 * S / d["T"])
    h = 1e-3 * S
    thr = lambda s: 1000 * s / fit.predict({"B": B, "S": s})
    num = (thr(S + h) - thr(S - h)) / (2 * h)
    assert np.allclose(d["marginal_throughput"], num, rtol=1e-5)
    # the falling branch at small S and the rising branch at large S
    small = derivatives(fit, 8.0, 2.0)
    large = derivatives(fit, 8.0, 1e5)
    assert small["dT_dS"] < 0 < large["dT_dS"]
    # S -> inf: dT/dS -> a_1 / (1 - e^{-k_B B}) + tau_S
    _, _, a1, kB, _, _, tauS = THETAS["seed_id"]
    assert large["dT_dS"] == pytest.approx(a1 / -np.expm1(-kB * 8.0) + tauS, rel=1e-9)


def test_grid_and_validity():
    fit = _fit("seed_id")
    g = sensitivity_grid(fit, [1, 8, 64], [4, 32, 256, 2048])
    assert isinstance(g, pd.DataFrame) and len(g) == 12
    assert g["valid"].tolist() == list(g["total_tokens"] >= g["batch_size"])
    assert {"T_ms", "dT_dB", "dT_dS", "elasticity_B", "elasticity_S", "throughput_tok_s",
            "marginal_throughput"} <= set(g.columns)
    with pytest.raises(InputError, match="batch_sizes"):
        sensitivity_grid(fit, [], [1])
    with pytest.raises(InputError, match="total_tokens"):
        sensitivity_grid(fit, [1], [0, 5])


@pytest.mark.parametrize("quantity", sorted(QUANTITIES))
def test_plot_contour_every_quantity(quantity):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    out = plot_contour(_fit("seed_id"), (1, 64), (1, 2048), quantity=quantity, ax=ax, n=20)
    assert out is ax
    assert ax.get_xlabel().startswith("batch size")
    assert QUANTITIES[quantity] in ax.get_title()
    # the impossible region S < B is hatched and named, not left blank
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["S < B: no such step"]
    plt.close(fig)
    fig, ax = plt.subplots()
    plot_contour(_fit("seed_id"), (1, 64), (100, 2048), quantity=quantity, ax=ax, n=20)
    assert ax.get_legend() is None  # S >= 100 > B everywhere: nothing to hatch
    plt.close(fig)


def test_plot_contour_bad_arguments():
    fit = _fit("seed_id")
    with pytest.raises(InputError, match="quantity"):
        plot_contour(fit, quantity="latency")
    with pytest.raises(InputError, match="batch_range"):
        plot_contour(fit, batch_range=(10, 1))
    with pytest.raises(InputError, match="token_range"):
        plot_contour(fit, token_range=(0, 10))
    with pytest.raises(InputError, match="ax"):
        plot_contour(fit, ax="axes")
    with pytest.raises(InputError, match="n must be"):
        plot_contour(fit, n=1)
    with pytest.raises(InputError, match="total_tokens"):
        derivatives(fit, [1.0], [-1.0])
    with pytest.raises(InputError, match="predict"):
        derivatives(object(), 1.0, 1.0)


def test_log_tokens_axis():
    import matplotlib.pyplot as plt

    ax = plot_contour(_fit("seed_gamma"), (1, 32), (1, 8192), quantity="dT_dS", n=15,
                      log_tokens=True)
    assert ax.get_yscale() == "log"
    plt.close(ax.figure)
