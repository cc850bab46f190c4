"""Sensitivity of the step time to batch size and tokens: derivatives, elasticities, maps.

Problem
-------
The decision quantities (docs/model.md) include ``dT/dB`` and ``dT/dS`` on a
``(B, S)`` grid and contour maps of them (:func:`plot_contour`, by default
``batch_range=(1, 64), token_range=(1, 2048)``).  An operator reads from them where one more
request or one more token is cheap, where the step is saturated, and where
token throughput ``S/T`` still grows with ``S``.

Derivatives
-----------
For the saturation members, with ``u = 1 - e^{-k_B B}``, ``v = 1 - e^{-k_S S}``,
``W = a_0 + a_1 S`` (``a_i = w_i / P_max`` for the seed form):

``seed_id`` / ``seed`` (and ``seed_ctx``, context features held fixed)::

    dT/dB = tau_B - W k_B e^{-k_B B} / (u^2 v)
    dT/dS = tau_S + a_1 / (u v) - W k_S e^{-k_S S} / (u v^2)

``seed_gamma`` (``g = 1 + gamma_B B + gamma_S S``)::

    dT/dB = tau_B + W gamma_B / (u v) - W g k_B e^{-k_B B} / (u^2 v)
    dT/dS = tau_S + (a_1 g + W gamma_S) / (u v) - W g k_S e^{-k_S S} / (u v^2)

Other models (anything with ``.predict``) fall back to central differences
with step ``h = 1e-4 * max(|x|, 1)`` (truncation error ``O(h^2)``), treating
``B`` and ``S`` as continuous.  The closed forms are verified against
central differences in ``tests/decisions/test_sensitivity.py``.

Derived quantities: elasticities ``e_B = dT/dB * B / T`` and
``e_S = dT/dS * S / T`` (the % change of T per % change of B or S);
token throughput ``S / T`` (tokens/s ``= 1000 S / T``); marginal throughput
``d(S/T)/dS = (T - S dT/dS) / T^2`` (tokens/s gained per extra token,
positive while adding tokens still raises throughput).
"""
from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from perfmodel._checks import check_choice, check_int_range
from perfmodel.errors import InputError

__all__ = ["ANALYTIC_MODELS", "QUANTITIES", "derivatives", "plot_contour", "sensitivity_grid"]

#: quantities that plot_contour can draw: column -> axis label
QUANTITIES = {
    "T": "predicted step time T (ms)",
    "throughput": "token throughput S/T (tokens/s)",
    "dT_dB": "dT/dB (ms per request)",
    "dT_dS": "dT/dS (ms per token)",
    "elasticity_B": "elasticity of T in B",
    "elasticity_S": "elasticity of T in S",
    "marginal_throughput": "d(S/T)/dS (tokens/s per token)",
}

ANALYTIC_MODELS = ("seed", "seed_id", "seed_gamma", "seed_ctx")


def _sat(k, x):
    """(1 - e^{-kx}, k e^{-kx})."""
    return -np.expm1(-k * x), k * np.exp(-k * x)


def _analytic(name: str, th: Mapping[str, float], B, S, extra: Mapping[str, np.ndarray]):
    """T, dT/dB, dT/dS in closed form for the saturation members."""
    if name == "seed":
        a0, a1 = th["w_0"] / th["P_max"], th["w_1"] / th["P_max"]
    else:
        a0, a1 = th["a_0"], th["a_1"]
    u, du = _sat(th["k_B"], B)
    v, dv = _sat(th["k_S"], S)
    W = a0 + a1 * S
    uv = u * v
    if name == "seed_gamma":
        g = 1.0 + th["gamma_B"] * B + th["gamma_S"] * S
        T = th["tau_0"] + W * g / uv + th["tau_B"] * B + th["tau_S"] * S
        dB = th["tau_B"] + W * th["gamma_B"] / uv - W * g * du / (u * uv)
        dS = th["tau_S"] + (a1 * g + W * th["gamma_S"]) / uv - W * g * dv / (v * uv)
    else:
        T = th["tau_0"] + W / uv + th["tau_B"] * B + th["tau_S"] * S
        dB = th["tau_B"] - W * du / (u * uv)
        dS = th["tau_S"] + a1 / uv - W * dv / (v * uv)
        if name == "seed_ctx":
            T = T + th["c_attn"] * extra["attn_prefill"] + th["c_kv"] * extra["decode_ctx"]
    return T, dB, dS


def _predict(fit, B, S, extra):
    f = {"B": B, "S": S, **extra}
    return np.asarray(fit.predict(f), dtype=float).reshape(B.shape)


def derivatives(fit, batch_size, total_tokens, *, features: Mapping | None = None,
                method: str = "auto") -> dict[str, np.ndarray]:
    """Step time and its partial derivatives in B and S at given points.

    Parameters
    ----------
    fit : FitResult (closed forms for the saturation members), or any object
        with ``.predict(features)`` (central differences)
    batch_size, total_tokens : array-likes, broadcast together (continuous
        values are allowed)
    features : constants (or arrays broadcastable to the points) for other
        model features, e.g. ``attn_prefill``/``decode_ctx`` for ``seed_ctx``;
        missing ones are 0.  They are held fixed in the derivatives.
    method : ``'auto'`` (closed form when available), ``'analytic'`` or
        ``'numeric'``

    Returns
    -------
    dict with arrays ``B, S, T, dT_dB, dT_dS, elasticity_B, elasticity_S,
    throughput`` (tokens/s), ``marginal_throughput`` (tokens/s per token)
    and the string ``method`` used.
    """
    if not hasattr(fit, "predict"):
        raise InputError(f"fit must be a FitResult or have .predict(features), got "
                         f"{type(fit).__name__}")
    if method not in ("auto", "analytic", "numeric"):
        raise InputError(f"method must be 'auto', 'analytic' or 'numeric', got {method!r}")
    try:
        B, S = np.broadcast_arrays(np.asarray(batch_size, float), np.asarray(total_tokens, float))
    except ValueError:
        raise InputError("batch_size and total_tokens cannot be broadcast together") from None
    B, S = B.copy(), S.copy()
    for name, x in (("batch_size", B), ("total_tokens", S)):
        if not np.all(np.isfinite(x)) or np.any(x <= 0):
            bad = np.nonzero(~(np.isfinite(x) & (x > 0)))[0] if x.ndim == 1 else []
            raise InputError(f"{name} must be positive and finite (first bad positions "
                             f"{list(bad[:5])})")
    model = getattr(fit, "model", None)
    requires = tuple(getattr(model, "requires", ("B", "S")))
    extra = {}
    features = dict(features or {})
    for k in features:
        if k in ("B", "S"):
            raise InputError("features must not set 'B' or 'S'")
    for k in requires:
        if k not in ("B", "S"):
            extra[k] = np.broadcast_to(np.asarray(features.get(k, 0.0), float), B.shape).copy()
    for k, v in features.items():
        if k not in extra:
            extra[k] = np.broadcast_to(np.asarray(v, float), B.shape).copy()
    name = getattr(model, "name", None)
    can = name in ANALYTIC_MODELS and hasattr(fit, "values") and hasattr(fit, "param_names")
    if method == "analytic" and not can:
        raise InputError(f"no closed-form derivatives for model {name!r}; use method='numeric'")
    if can and method != "numeric":
        th = dict(zip(fit.param_names, np.asarray(fit.values, float)))
        T, dB, dS = _analytic(name, th, B, S, extra)
        used = "analytic"
    else:
        T = _predict(fit, B, S, extra)
        hB = 1e-4 * np.maximum(np.abs(B), 1.0)
        hS = 1e-4 * np.maximum(np.abs(S), 1.0)
        dB = (_predict(fit, B + hB, S, extra) - _predict(fit, B - hB, S, extra)) / (2 * hB)
        dS = (_predict(fit, B, S + hS, extra) - _predict(fit, B, S - hS, extra)) / (2 * hS)
        used = "numeric"
    return {
        "B": B, "S": S, "T": T, "dT_dB": dB, "dT_dS": dS,
        "elasticity_B": dB * B / T, "elasticity_S": dS * S / T,
        "throughput": 1000.0 * S / T,
        "marginal_throughput": 1000.0 * (T - S * dS) / T**2,
        "method": used,
    }


def _axis(values, name):
    a = np.asarray(values, float).ravel()
    if a.size == 0 or not np.all(np.isfinite(a)) or np.any(a <= 0):
        raise InputError(f"{name} must be a non-empty sequence of positive finite numbers")
    return a


def sensitivity_grid(fit, batch_sizes, total_tokens, *, features: Mapping | None = None,
                     method: str = "auto") -> pd.DataFrame:
    """Derivatives and derived quantities on the grid ``batch_sizes x total_tokens``.

    Returns
    -------
    DataFrame, one row per (B, S): ``batch_size, total_tokens, T_ms, dT_dB,
    dT_dS, elasticity_B, elasticity_S, throughput_tok_s,
    marginal_throughput``, and ``valid`` (``S >= B``: a real step computes
    at least one token per request; rows with ``S < B`` are kept but
    flagged).
    """
    b = _axis(batch_sizes, "batch_sizes")
    s = _axis(total_tokens, "total_tokens")
    Bg, Sg = np.meshgrid(b, s, indexing="ij")
    d = derivatives(fit, Bg.ravel(), Sg.ravel(), features=features, method=method)
    return pd.DataFrame({
        "batch_size": d["B"], "total_tokens": d["S"], "T_ms": d["T"], "dT_dB": d["dT_dB"],
        "dT_dS": d["dT_dS"], "elasticity_B": d["elasticity_B"],
        "elasticity_S": d["elasticity_S"], "throughput_tok_s": d["throughput"],
        "marginal_throughput": d["marginal_throughput"], "valid": d["S"] >= d["B"],
    })


def _range(r, name):
    try:
        lo, hi = (float(x) for x in r)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a (low, high) pair, got {r!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo < hi):
        raise InputError(f"{name} must satisfy 0 < low < high, got {r!r}")
    return lo, hi


def plot_contour(fit, batch_range=(1, 64), token_range=(1, 2048), quantity: str = "T",
                 ax=None, *, n: int = 80, levels: int = 14, log_tokens: bool = False,
                 mask_invalid: bool = True, features: Mapping | None = None):
    """Contour map of a quantity over (B, S).

    Parameters
    ----------
    fit : fitted step model
    batch_range, token_range : (low, high), both > 0
    quantity : one of :data:`QUANTITIES` (``'T'``, ``'throughput'``,
        ``'dT_dB'``, ``'dT_dS'``, ``'elasticity_B'``, ``'elasticity_S'``,
        ``'marginal_throughput'``)
    ax : matplotlib Axes or None (a new figure)
    n : grid points per axis; ``log_tokens`` spaces S logarithmically
    mask_invalid : hatch the region ``S < B`` grey and label it: no step has
        fewer tokens than requests (every request computes at least one)
    features : constants for other model features (see :func:`derivatives`)

    Returns
    -------
    matplotlib Axes (with a colour bar; the S axis is logarithmic when
    ``log_tokens``)
    """
    check_choice("quantity", quantity, QUANTITIES)
    b0, b1 = _range(batch_range, "batch_range")
    s0, s1 = _range(token_range, "token_range")
    n = check_int_range("n", n, 2)
    from perfmodel.plotting import get_ax

    ax = get_ax(ax, needs="contourf")
    b = np.linspace(b0, b1, n)
    s = np.geomspace(s0, s1, n) if log_tokens else np.linspace(s0, s1, n)
    Bg, Sg = np.meshgrid(b, s, indexing="xy")
    d = derivatives(fit, Bg, Sg, features=features)
    Z = np.array(d[quantity], dtype=float)
    if mask_invalid:
        Z = np.where(Sg >= Bg, Z, np.nan)
    cs = ax.contourf(Bg, Sg, Z, levels=levels)
    ax.contour(Bg, Sg, Z, levels=cs.levels, colors="k", linewidths=0.4, alpha=0.5)
    if quantity in ("dT_dS", "dT_dB", "marginal_throughput") and np.nanmin(Z) < 0 < np.nanmax(Z):
        ax.contour(Bg, Sg, Z, levels=[0.0], colors="w", linewidths=1.5, linestyles="--")
    ax.figure.colorbar(cs, ax=ax, label=QUANTITIES[quantity])
    if mask_invalid and s0 < min(b1, s1):
        edge = np.minimum(b, s1)
        ax.fill_between(b, s0, edge, where=edge > s0, facecolor="0.9", edgecolor="0.6",
                        hatch="///", lw=0, label="S < B: no such step")
        ax.legend(loc="lower right", fontsize="small", framealpha=0.9)
    if log_tokens:
        ax.set_yscale("log")
    ax.set_xlabel("batch size B (requests)")
    ax.set_ylabel("tokens per step S")
    name = getattr(fit, "model_name", None) or getattr(getattr(fit, "model", None), "name", "")
    ax.set_title(f"{QUANTITIES[quantity]}" + (f" [{name}]" if name else ""))
    return ax
