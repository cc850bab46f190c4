"""Synthetic step traces with known truth.

Problem
-------
Checking a fitter, an interval or a diagnostic needs data whose generating
model and parameters are known.  This module draws engine steps that look like
continuous batching with chunked prefill (:func:`make_design`), evaluates any
member of :mod:`perfmodel.core.model` on them with chosen parameters, adds noise of
a precisely defined kind (:func:`simulate_trace`), and returns a trace in the
canonical schema (:mod:`perfmodel.data.trace`) whose ``attrs['truth']`` records the
model, parameters, noise and seed.

Design (per step, one of three regimes)
---------------------------------------
``decode-only``
    ``B`` log-uniform in ``1..min(max_batch, token_cap)``, every chunk 1,
    contexts log-uniform in ``1..max_context``; ``S = B``.
``mixed``
    ``d`` decode requests (``d`` uniform in ``1..min(max_batch, token_cap) - 1``;
    chunk 1, contexts as above), scheduled first, then one prefill chunk
    (two with probability 0.3, if ``max_batch`` allows) drawn log-uniform in
    ``2..R`` where ``R`` is the token budget left (``token_cap - d``), each
    trimmed to the budget still left; a chunk that would be shorter than 2 is
    not scheduled.  Prefill contexts are 0 (a new prompt) with probability
    0.5, else log-uniform in ``1..max_context`` (a later chunk of a long
    prompt, or a prefix-cache hit).
``prefill-heavy``
    1 to ``min(4, max_batch)`` prefill chunks, each log-uniform in
    ``2..token_cap``, trimmed to the budget as above; no decodes.

Thus ``S <= token_cap``, every prefill chunk is >= 2, ``num_decode`` counts the
chunks equal to 1 and ``num_prefill`` those > 1 (consistent with the features
``decode_ctx`` and ``prefill_sq`` of :func:`perfmodel.data.trace.step_features`).
The column ``phase`` says the regime: ``'decode'``, ``'mixed'``, ``'prefill'``.

Noise (``mu`` = model prediction in ms, ``z`` standard normal, one per step)
------------------------------------------------------------------------
``'none'``            ``T = mu`` exactly.
``'gaussian'``        ``T = mu + sigma z``; ``sigma`` in ms.
``'multiplicative'``  ``T = mu exp(sigma z)`` (log-normal; ``sigma`` = sd of
                      ``log T``, so ``mu`` is the median, not the mean).
``'student_t'``       ``T = mu + sigma sqrt((df-2)/df) t_df``: heavy tails,
                      scaled so the noise sd is ``sigma`` ms (needs ``df > 2``).
``'heteroscedastic'`` ``T = mu + sigma (mu/mu_ref)^power z`` with
                      ``mu_ref = median(mu)``: the sd is proportional to
                      ``mu^power`` and equals ``sigma`` ms at the median step.
``'ar1'``             On the log scale, in time order (row order = ``step``):
                      ``T_t = mu_t exp(e_t)``, ``e_t = phi e_{t-1} +
                      sqrt(1-phi^2) sigma z_t``, ``e_0 = sigma z_0``, so
                      ``e`` is stationary with sd ``sigma`` and lag-1
                      autocorrelation ``phi`` (host drift is multiplicative).

``sigma=None`` means 0.05 for the log-scale kinds (5%) and 5% of ``median(mu)``
ms for the additive kinds; the value used is recorded.  **T > 0 always**: the
log-scale kinds are positive by construction; for the additive kinds every
step with ``T <= 0`` has its noise redrawn (so the noise is truncated at
``-mu``), at most 100 rounds, and the number of redrawn steps is recorded in
``attrs['truth']['noise']['n_redrawn']`` (0 whenever ``sigma`` is small
against ``mu``, as in every default).

Reproducibility: the design uses ``numpy.random.default_rng(seed)`` (so
``make_design(..., seed=s)`` is the design of ``simulate_trace(..., seed=s)``)
and the noise ``default_rng([seed, 1])``, an independent stream: changing the
noise keeps the steps.
"""
from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from perfmodel import __version__
from perfmodel._checks import check_choice, check_int_range, check_number
from perfmodel._io import atomic_open
from perfmodel.core.model import Model, get_model
from perfmodel.data.trace import step_features, validate_trace
from perfmodel.errors import InputError

__all__ = [
    "DEFAULT_REGIME_MIX",
    "EXAMPLE_SPEC",
    "NOISE_KINDS",
    "REGIMES",
    "default_truth",
    "make_design",
    "simulate_trace",
    "write_example_trace",
]

REGIMES: tuple[str, ...] = ("decode-only", "mixed", "prefill-heavy")
_PHASE = {"decode-only": "decode", "mixed": "mixed", "prefill-heavy": "prefill"}
DEFAULT_REGIME_MIX: dict[str, float] = {"decode-only": 0.5, "mixed": 0.35, "prefill-heavy": 0.15}
NOISE_KINDS: tuple[str, ...] = (
    "none", "gaussian", "multiplicative", "student_t", "heteroscedastic", "ar1",
)
_LOG_KINDS = ("multiplicative", "ar1")

# Realistic parameters: the step times of a ~7B model on one datacentre GPU
# (decode steps 7-12 ms for B = 1..64, a 2,048-token prefill ~110 ms).
_SEED_ID = {
    "tau_0": 5.0,     # ms: fixed per-step overhead (launches, sync, scheduling)
    "a_0": 0.5,       # ms: fixed work / peak throughput
    "a_1": 0.05,      # ms/token: time per token at saturation (~20k tokens/s)
    "k_B": 1.0,       # 1/request: throughput 63% saturated at B=1, 98% at B=4
    "k_S": 0.1,       # 1/token: 63% saturated at S=10, >99.99% at S=100
    "tau_B": 0.05,    # ms/request: per-request overhead (metadata, sampling)
    "tau_S": 0.002,   # ms/token: per-token overhead outside the saturating work
}
_P_MAX = 100.0  # tokens/ms, the convention used to express seed_id in seed form
_DEFAULT_TRUTH: dict[str, dict[str, float]] = {
    "seed_id": dict(_SEED_ID),
    "seed": {
        "P_max": _P_MAX, "k_B": _SEED_ID["k_B"], "k_S": _SEED_ID["k_S"],
        "w_0": _SEED_ID["a_0"] * _P_MAX, "w_1": _SEED_ID["a_1"] * _P_MAX,
        "tau_0": _SEED_ID["tau_0"], "tau_B": _SEED_ID["tau_B"], "tau_S": _SEED_ID["tau_S"],
    },
    "seed_gamma": {
        **{k: _SEED_ID[k] for k in ("tau_0", "a_0", "a_1", "k_B", "k_S")},
        "gamma_B": 2e-3,  # 1/request: +13% work at B = 64
        "gamma_S": 5e-5,  # 1/token: +10% work at S = 2,048
        "tau_B": _SEED_ID["tau_B"], "tau_S": _SEED_ID["tau_S"],
    },
    "seed_ctx": {
        **_SEED_ID,
        "c_attn": 5e-6,   # ms per query-key pair: +10 ms for a 2,048-token prefill
        "c_kv": 2e-5,     # ms per cached token read: +2.6 ms for 64 decodes at 2k context
    },
}

#: How ``data/example/example_trace.csv`` is made (see :func:`write_example_trace`).
EXAMPLE_SPEC: dict = {
    "model": "seed_id", "n": 2000, "noise": "multiplicative", "sigma": 0.05, "seed": 0,
    "regime_mix": dict(DEFAULT_REGIME_MIX), "max_batch": 64, "token_cap": 2048,
    "max_context": 4096,
}


def default_truth(model_name) -> dict[str, float]:
    """Realistic parameter values for a model-family member.

    Problem: synthetic traces and recovery studies need parameters that give
    step times like real ones.  Values (``seed_id``): ``tau_0 = 5 ms``,
    ``a_0 = 0.5 ms``, ``a_1 = 0.05 ms/token`` (~20k tokens/s at saturation),
    ``k_B = 1 /request``, ``k_S = 0.1 /token``, ``tau_B = 0.05 ms/request``,
    ``tau_S = 0.002 ms/token``: decode steps of 7-12 ms for ``B = 1..64``
    (14 ms at ``B = S = 1``, the seed form's small-``S`` rise) and ~110 ms
    for a 2,048-token prefill, the scale of a ~7B model on one datacentre
    GPU.  ``seed`` is the same model with ``P_max = 100 tokens/ms``
    (``w_i = a_i P_max``); ``seed_gamma`` adds ``gamma_B = 2e-3``,
    ``gamma_S = 5e-5``; ``seed_ctx`` adds ``c_attn = 5e-6 ms/pair``,
    ``c_kv = 2e-5 ms/token``.

    Parameters
    ----------
    model_name : str or Model

    Returns
    -------
    dict
        ``{parameter name: value}`` in the model's ``param_names`` order.

    Raises
    ------
    InputError
        Unknown model, or no default recorded for it.
    """
    model = get_model(model_name)
    truth = _DEFAULT_TRUTH.get(model.name)
    if truth is None:
        raise InputError(f"default_truth: no default parameters for model {model.name!r} "
                         f"(have {sorted(_DEFAULT_TRUTH)}); pass theta explicitly")
    if set(truth) != set(model.param_names):  # the model changed under us
        raise InputError(f"default_truth: stored parameters {sorted(truth)} do not match "
                         f"model {model.name!r} parameters {model.param_names}")
    return {k: float(truth[k]) for k in model.param_names}


# ---------------------------------------------------------------------------
# argument checks
# ---------------------------------------------------------------------------

def _check_mix(regime_mix) -> dict[str, float]:
    if regime_mix is None:
        return dict(DEFAULT_REGIME_MIX)
    if not isinstance(regime_mix, dict):
        raise InputError(f"regime_mix must be a dict {{regime: weight}} over {list(REGIMES)}, "
                         f"got {type(regime_mix).__name__}")
    unknown = [k for k in regime_mix if k not in REGIMES]
    if unknown:
        raise InputError(f"regime_mix: unknown regimes {unknown}; known: {list(REGIMES)}")
    w = {k: check_number(f"regime_mix[{k!r}]", regime_mix.get(k, 0.0), lo=0.0) for k in REGIMES}
    tot = sum(w.values())
    if tot <= 0:
        raise InputError(f"regime_mix: weights must have a positive sum, got {regime_mix!r}")
    return {k: v / tot for k, v in w.items()}


# ---------------------------------------------------------------------------
# design
# ---------------------------------------------------------------------------

def _loguniform_int(rng, lo: int, hi: int, size=None):
    """Integers in [lo, hi] with log-uniform density (floor of exp(U(log lo, log(hi+1))))."""
    x = np.floor(np.exp(rng.uniform(np.log(lo), np.log(hi + 1), size=size)))
    return np.clip(x, lo, hi).astype(np.int64)


def _prefill_chunks(rng, k: int, budget: int, max_context: int):
    chunks, ctx = [], []
    for _ in range(k):
        if budget < 2:
            break
        c = min(int(_loguniform_int(rng, 2, budget)), budget)
        chunks.append(c)
        ctx.append(0 if rng.random() < 0.5 else int(_loguniform_int(rng, 1, max_context)))
        budget -= c
    return chunks, ctx


def make_design(n: int, regime_mix=None, max_batch: int = 64, token_cap: int = 2048,
                seed: int = 0, *, max_context: int = 4096) -> pd.DataFrame:
    """Draw ``n`` engine steps (requests, chunks, contexts) without timings.

    Problem: a synthetic trace needs steps shaped like continuous batching
    with chunked prefill; the three regimes are defined in the module
    docstring.

    Parameters
    ----------
    n : int
        Number of steps (>= 1).
    regime_mix : dict, optional
        Weights of ``'decode-only'``, ``'mixed'``, ``'prefill-heavy'``
        (normalised; missing keys weigh 0).  Default
        :data:`DEFAULT_REGIME_MIX` (0.5 / 0.35 / 0.15).
    max_batch : int, default 64
        Largest ``B``; ``'mixed'`` needs >= 2.
    token_cap : int, default 2048
        Token budget per step: ``S <= token_cap`` (vLLM's
        ``max_num_batched_tokens``); ``'mixed'`` needs >= 3, ``'prefill-heavy'`` >= 2.
    seed : int, default 0
        Seed of ``numpy.random.default_rng``.
    max_context : int, default 4096
        Largest prior context of a request.

    Returns
    -------
    pandas.DataFrame
        Columns ``step, batch_size, total_tokens, chunk_sizes, context_lens,
        num_decode, num_prefill, phase`` (no ``duration_ms``).

    Examples
    --------
    >>> d = make_design(3, {"decode-only": 1.0}, max_batch=4, seed=1)
    >>> bool((d.total_tokens == d.batch_size).all())
    True
    """
    n = check_int_range("n", n, 1)
    mix = _check_mix(regime_mix)
    max_batch = check_int_range("max_batch", max_batch, 1)
    token_cap = check_int_range("token_cap", token_cap, 1)
    seed = check_int_range("seed", seed, 0)
    max_context = check_int_range("max_context", max_context, 1)
    if mix["mixed"] > 0 and (max_batch < 2 or token_cap < 3):
        raise InputError(f"regime 'mixed' needs max_batch >= 2 and token_cap >= 3 (one decode "
                         f"plus a prefill chunk >= 2), got max_batch={max_batch}, "
                         f"token_cap={token_cap}")
    if mix["prefill-heavy"] > 0 and token_cap < 2:
        raise InputError(f"regime 'prefill-heavy' needs token_cap >= 2, got {token_cap}")

    rng = np.random.default_rng(seed)
    regime = rng.choice(len(REGIMES), size=n, p=[mix[r] for r in REGIMES])
    bmax = min(max_batch, token_cap)
    chunk_col, ctx_col = [], []
    n_dec = np.zeros(n, dtype=np.int64)
    n_pre = np.zeros(n, dtype=np.int64)
    for i, r in enumerate(regime):
        if r == 0:  # decode-only
            b = int(_loguniform_int(rng, 1, bmax))
            chunks = [1] * b
            ctx = _loguniform_int(rng, 1, max_context, size=b).tolist()
        elif r == 1:  # mixed: decodes first, then 1-2 prefill chunks in the budget left
            d = int(rng.integers(1, bmax)) if bmax > 1 else 1
            k = 2 if (rng.random() < 0.3 and max_batch - d >= 2) else 1
            pc, px = _prefill_chunks(rng, k, token_cap - d, max_context)
            chunks = [1] * d + pc
            ctx = _loguniform_int(rng, 1, max_context, size=d).tolist() + px
        else:  # prefill-heavy
            k = int(rng.integers(1, min(4, max_batch) + 1))
            chunks, ctx = _prefill_chunks(rng, k, token_cap, max_context)
        nd = sum(1 for c in chunks if c == 1)
        n_dec[i], n_pre[i] = nd, len(chunks) - nd
        chunk_col.append(";".join(map(str, chunks)))
        ctx_col.append(";".join(map(str, ctx)))
    B = n_dec + n_pre
    S = np.array([sum(map(int, c.split(";"))) for c in chunk_col], dtype=np.int64)
    return pd.DataFrame({
        "step": np.arange(n, dtype=np.int64),
        "batch_size": B,
        "total_tokens": S,
        "chunk_sizes": chunk_col,
        "context_lens": ctx_col,
        "num_decode": n_dec,
        "num_prefill": n_pre,
        "phase": [_PHASE[REGIMES[r]] for r in regime],
    })


# ---------------------------------------------------------------------------
# noise and simulation
# ---------------------------------------------------------------------------

def _check_theta(model: Model, theta) -> dict[str, float]:
    if theta is None:
        return default_truth(model)
    t = model.check_theta(theta)
    lo, hi = model.lower, model.upper
    out = [f"{n}={float(v)!r} not in [{float(a)}, {float(b)}]"
           for n, v, a, b in zip(model.param_names, t, lo, hi)
           if not (a <= v <= b)]
    if out:
        raise InputError(f"theta outside the bounds of model {model.name!r}: " + ", ".join(out))
    return {n: float(v) for n, v in zip(model.param_names, t)}


def _draw(kind, rng, size, sigma, df):
    """Unit-scaled noise for the additive kinds (sd = sigma)."""
    if kind == "student_t":
        return sigma * math.sqrt((df - 2.0) / df) * rng.standard_t(df, size=size)
    return sigma * rng.standard_normal(size)


def simulate_trace(model="seed_id", theta=None, n: int = 2000, *, noise: str = "gaussian",
                   sigma=None, df: float = 5.0, phi: float = 0.5, power: float = 1.0,
                   regime_mix=None, max_batch: int = 64, token_cap: int = 2048,
                   max_context: int = 4096, seed: int = 0, design=None) -> pd.DataFrame:
    """Simulate a step trace from a model with known parameters and noise.

    Problem: produce data with known truth for tests and recovery studies:
    ``T = noise(model.predict(theta, step_features(design)))`` on a design
    from :func:`make_design` (noise kinds defined exactly in the module
    docstring).

    Parameters
    ----------
    model : str or Model, default ``'seed_id'``
        A member of :mod:`perfmodel.core.model`.
    theta : dict or sequence, optional
        True parameters (``{name: value}`` or in ``param_names`` order),
        inside the model's bounds.  Default :func:`default_truth`.
    n : int, default 2000
        Number of steps (ignored when ``design`` is given).
    noise : str, default ``'gaussian'``
        One of :data:`NOISE_KINDS`.
    sigma : float, optional
        Noise scale: ms for ``gaussian``, ``student_t``, ``heteroscedastic``
        (sd at the median step); sd of ``log T`` for ``multiplicative``,
        ``ar1``.  Default: 5% (see module docstring).  ``sigma = 0`` gives
        ``T = mu`` exactly, like ``noise='none'``.
    df : float, default 5
        Degrees of freedom of ``student_t`` (> 2).
    phi : float, default 0.5
        Lag-1 autocorrelation of ``ar1`` (|phi| < 1).
    power : float, default 1
        ``heteroscedastic``: sd proportional to ``mu**power``.
    regime_mix, max_batch, token_cap, max_context
        Passed to :func:`make_design`.
    seed : int, default 0
        Design stream ``default_rng(seed)``, noise stream ``default_rng([seed, 1])``.
    design : DataFrame, optional
        Use these steps (canonical schema without ``duration_ms``) instead of
        drawing a design; its ``step`` order is the time order for ``ar1``.

    Returns
    -------
    pandas.DataFrame
        Columns ``step, timestamp, batch_size, total_tokens, duration_ms,
        chunk_sizes, context_lens, num_decode, num_prefill, phase`` (the
        design's extra columns, if any, follow); ``timestamp`` (s) is the
        start of each step with steps back to back from 0.  ``attrs['truth']``
        = ``{'model', 'theta', 'noise': {'kind', 'sigma', 'scale', 'df'|'phi'|
        'power'|'mu_ref', 'n_redrawn'}, 'seed', 'design', 'generator',
        'perfmodel_version'}``.

    Raises
    ------
    InputError
        Bad arguments, theta outside the bounds, a prediction that is not
        finite and positive, or additive noise too large to keep ``T > 0``.
    """
    m = get_model(model)
    truth = _check_theta(m, theta)
    check_choice("noise", noise, NOISE_KINDS)
    seed = check_int_range("seed", seed, 0)
    spec, sigma = _noise_spec(noise, sigma, df=df, phi=phi, power=power)
    design, design_spec = _design_for(design, n, regime_mix, max_batch, token_cap, max_context,
                                      seed)

    feats = step_features(design)
    mu = m.predict(truth, feats)
    if not np.all(np.isfinite(mu) & (mu > 0)):
        bad = np.nonzero(~(np.isfinite(mu) & (mu > 0)))[0]
        raise InputError(f"model {m.name!r} with theta {truth} predicts a non-positive or "
                         f"non-finite time at {len(bad)} steps (rows {bad[:5].tolist()})")

    rng = np.random.default_rng([seed, 1])
    nn = len(mu)
    # time order: by 'step' (every design has one), ties in row order
    order = np.argsort(design["step"].to_numpy(), kind="stable") if "step" in design else \
        np.arange(nn)
    if noise in _LOG_KINDS:
        T = _log_noise(mu, order, sigma, spec, rng)
    elif noise == "none":
        spec.update(sigma=0.0, scale="none", n_redrawn=0)
        T = mu.copy()
    else:
        T = _additive_noise(mu, sigma, spec, rng)

    out = _as_trace(design, T, order)
    out.attrs["truth"] = {
        "generator": "perfmodel.core.synthetic.simulate_trace",
        "perfmodel_version": __version__,
        "model": m.name,
        "theta": truth,
        "noise": spec,
        "seed": seed,
        "design": design_spec,
    }
    return out


def _noise_spec(noise: str, sigma, *, df, phi, power) -> tuple[dict, float | None]:
    """Check the noise arguments of :func:`simulate_trace`: (its ``truth['noise']`` so far, sigma)."""
    spec: dict = {"kind": noise}
    if sigma is not None:
        sigma = check_number("sigma", sigma, lo=0.0)
    if noise == "student_t":
        spec["df"] = check_number("df", df, lo=2.0, lo_open=True)
    if noise == "ar1":
        spec["phi"] = check_number("phi", phi, lo=-1.0, hi=1.0, lo_open=True, hi_open=True)
    if noise == "heteroscedastic":
        spec["power"] = check_number("power", power)
    return spec, sigma


def _design_for(design, n, regime_mix, max_batch, token_cap, max_context,
                seed) -> tuple[pd.DataFrame, dict]:
    """The steps of :func:`simulate_trace`: drawn by :func:`make_design` or the given ``design``
    (checked); with its ``truth['design']`` entry."""
    if design is None:
        n = check_int_range("n", n, 1)
        design = make_design(n, regime_mix, max_batch, token_cap, seed, max_context=max_context)
        return design, {"n": n, "regime_mix": _check_mix(regime_mix), "max_batch": max_batch,
                        "token_cap": token_cap, "max_context": max_context}
    if not isinstance(design, pd.DataFrame):
        raise InputError(f"design must be a DataFrame, got {type(design).__name__}")
    design = validate_trace(design.drop(columns=["duration_ms", "timestamp"], errors="ignore"),
                            require_duration=False, source="design")
    return design, {"n": len(design), "given": True}


def _log_noise(mu: np.ndarray, order: np.ndarray, sigma, spec: dict, rng) -> np.ndarray:
    """``T = mu exp(e)``: ``multiplicative`` (iid e) or ``ar1`` (e an AR(1) path in time
    ``order``), sd of e ``sigma`` (default 0.05); fills ``spec``."""
    nn = len(mu)
    s = 0.05 if sigma is None else sigma
    spec.update(sigma=s, scale="log")
    z = rng.standard_normal(nn)
    if spec["kind"] == "multiplicative":
        e = s * z
    else:
        ph = spec["phi"]
        innov = (s * math.sqrt(1.0 - ph * ph) * z).tolist()
        path = [s * float(z[0])]
        for w in innov[1:]:
            path.append(ph * path[-1] + w)
        e = np.empty(nn)
        e[order] = path  # the t-th step in time order gets e_t
    spec["n_redrawn"] = 0
    return mu * np.exp(e)


def _additive_noise(mu: np.ndarray, sigma, spec: dict, rng) -> np.ndarray:
    """``T = mu + sd e`` for the additive kinds (sd ``sigma`` ms, default 5% of the median
    step; ``heteroscedastic``: times ``(mu/mu_ref)**power``); steps with ``T <= 0`` are
    redrawn (at most 100 rounds, else InputError); fills ``spec``."""
    noise, nn = spec["kind"], len(mu)
    s = 0.05 * float(np.median(mu)) if sigma is None else sigma
    spec.update(sigma=s, scale="additive ms")
    sd_scale = np.ones(nn)
    if noise == "heteroscedastic":
        mu_ref = float(np.median(mu))
        spec["mu_ref"] = mu_ref
        sd_scale = (mu / mu_ref) ** spec["power"]
    T = mu + sd_scale * _draw(noise, rng, nn, s, spec.get("df"))
    n_redrawn = 0
    for _ in range(100):
        low = np.nonzero(T <= 0)[0]
        if low.size == 0:
            break
        n_redrawn += low.size
        T[low] = mu[low] + sd_scale[low] * _draw(noise, rng, low.size, s, spec.get("df"))
    else:
        raise InputError(f"noise {noise!r} with sigma={s!r} ms is too large to keep T > 0 "
                         f"(after 100 redraws {int((T <= 0).sum())} steps are still <= 0); "
                         "lower sigma or use noise='multiplicative'")
    spec["n_redrawn"] = int(n_redrawn)
    return T


def _as_trace(design: pd.DataFrame, T: np.ndarray, order: np.ndarray) -> pd.DataFrame:
    """The design with ``duration_ms = T`` and back-to-back ``timestamp`` (s) in time
    ``order``, in the canonical column order, validated."""
    nn = len(T)
    start = np.zeros(nn)
    start[order] = np.concatenate([[0.0], np.cumsum(T[order])[:-1]]) / 1000.0

    out = design.copy()
    if "step" not in out:
        out.insert(0, "step", np.arange(nn, dtype=np.int64))
    out.insert(1, "timestamp", start)
    out.insert(out.columns.get_loc("total_tokens") + 1, "duration_ms", T)
    lead = ["step", "timestamp", "batch_size", "total_tokens", "duration_ms", "chunk_sizes",
            "context_lens", "num_decode", "num_prefill", "phase"]
    cols = [c for c in lead if c in out.columns] + [c for c in out.columns if c not in lead]
    return validate_trace(out[cols], source="simulate_trace")


# ---------------------------------------------------------------------------
# the committed example trace
# ---------------------------------------------------------------------------

def write_example_trace(path, *, overwrite: bool = True) -> Path:
    """Write the project's example trace (a SYNTHETIC trace with known truth).

    Problem: the repository ships a small trace that every command can run
    on without any download.  It is :func:`simulate_trace` with
    :data:`EXAMPLE_SPEC`: model ``seed_id`` at :func:`default_truth`, 2,000
    steps of the default regime mix, multiplicative (log-normal) noise with
    ``sigma = 0.05``, seed 0.  Regenerate with::

        python -m perfmodel.core.synthetic data/example/example_trace.csv

    Parameters
    ----------
    path : str or path-like
        Output CSV; written atomically (temporary file, then rename).
    overwrite : bool, default True
        ``False`` refuses to replace an existing file.

    Returns
    -------
    pathlib.Path
    """
    if not isinstance(path, (str, os.PathLike)):
        raise InputError(f"path must be a str or path, got {type(path).__name__}")
    p = Path(path)
    if p.exists() and not overwrite:
        raise InputError(f"{str(p)!r} exists; pass overwrite=True to replace it")
    if not p.parent.is_dir():
        raise InputError(f"folder {str(p.parent)!r} does not exist")
    spec = EXAMPLE_SPEC
    df = simulate_trace(spec["model"], default_truth(spec["model"]), spec["n"],
                        noise=spec["noise"], sigma=spec["sigma"], seed=spec["seed"],
                        regime_mix=spec["regime_mix"], max_batch=spec["max_batch"],
                        token_cap=spec["token_cap"], max_context=spec["max_context"])
    with atomic_open(p, "w", force=True) as fh:
        df.to_csv(fh, index=False, lineterminator="\n")
    return p


if __name__ == "__main__":  # python -m perfmodel.core.synthetic OUT.csv
    if len(sys.argv) != 2:
        print("usage: python -m perfmodel.core.synthetic OUT.csv  (writes the example trace)",
              file=sys.stderr)
        sys.exit(2)
    try:
        print(write_example_trace(sys.argv[1]))
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
