"""Calibrate a step-latency model from request-level (static-batch) latencies.

Problem
-------
Most users only have end-to-end benchmark numbers, not step traces.  A
static-batch benchmark (LLM-Inference-Bench, ``perfmodel.data.datasets.
load_llm_inference_bench``) reports, per configuration, the total time to
serve ``B`` requests with ``L`` input and ``L`` output tokens each.  If every
request runs the whole batch in lock-step, that time is a sum of ``L`` engine
steps, and a step model ``T(theta; step)`` can be fitted to it::

    latency_ms(B, L) ~= sum_{k=0}^{L-1} T(theta; step_k(B, L))

with, in this project's step schema (``context_lens`` = tokens computed
*before* the step, :mod:`perfmodel.data.trace`):

* step ``k = 0`` (prefill): ``B`` requests, chunk ``L`` each, context 0,
  ``S = B L``; it produces the first output token;
* step ``k = 1 .. L-1`` (decode ``j = k``): ``B`` requests, chunk 1 each,
  context ``L + j - 1`` each (the ``L`` prompt tokens and the ``j - 1``
  output tokens already fed back), ``S = B``.

This is ``T_prefill(B, B L) + sum_{j=1}^{L-1} T_decode(B,
context = L + j)`` with its context shifted by one to this schema
(``load_llm_inference_bench``'s docstring).

:func:`calibrate_from_requests` builds one feature dict holding every step
of every row (:func:`static_batch_steps`), evaluates the member's
``_predict`` and ``_jacobian`` on it once per iteration, sums per row with
``np.add.reduceat`` (the Jacobian of the sum is the sum of the per-step
Jacobians), and fits ``theta`` by :func:`perfmodel.core.fit.fit_curve` on log
latency (relative error).  Parameters that no static batch can see (their
integrated Jacobian column is identically zero, e.g. ``c_kv_mixed`` of
``seed_ctx_mono``: no static-batch step mixes a prefill chunk with cached
context) are held at their lower bound and reported as not identified.
:func:`heldout_evaluation` and :func:`grouped_kfold_requests` score the
calibrated model on configurations left out of the fit.

What the integral leaves out (absorbed by ``tau_0`` and the other terms, or
not at all): per-request work outside the steps (tokenisation, detokenising,
engine start of the batch); prefills split over several steps when ``B L``
exceeds the engine's token budget; and KV-cache preemption when the batch's
final context ``B (2L - 1)`` does not fit in memory (the engine then
recomputes requests, and the lock-step assumption fails).

Verification: on synthetic rows built by integrating a known ``seed_id``
theta the calibration recovers the step predictions to 1e-6 relative, and
the integrated Jacobian equals central finite differences
(``tests/stats/test_calibrate.py``).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
from scipy import optimize

from perfmodel._checks import check_int_range
from perfmodel.core.fit import fit_curve, race_starts
from perfmodel.core.model import RECOMMENDED, Model, get_model
from perfmodel.core.scale import LOG
from perfmodel.data.features import uniform_batch_features
from perfmodel.errors import InputError

__all__ = [
    "REQUEST_COLUMNS",
    "HeldOut",
    "KFold",
    "calibrate_from_requests",
    "grouped_kfold_requests",
    "heldout_evaluation",
    "integrate_jacobian",
    "integrate_predict",
    "predict_requests",
    "static_batch_steps",
]

#: columns a request-level row needs (names of ``load_llm_inference_bench``)
REQUEST_COLUMNS = ("B", "L", "latency_s")
#: columns that must hold a single value: one calibration = one engine set-up
GROUP_COLUMNS = ("hardware", "num_hardware", "framework", "model")
#: nonlinear parameters; every other parameter of a supported member enters linearly
_NONLINEAR = ("k_B", "k_S")
_K_B_GRID = np.geomspace(1e-3, 3.0, 8)
_K_S_GRID = np.geomspace(1e-5, 1.0, 11)


# ---------------------------------------------------------------------------
# input checks
# ---------------------------------------------------------------------------

def _bad_rows(df: pd.DataFrame, mask: np.ndarray) -> str:
    rows = df.index[np.asarray(mask)]
    return f"{len(rows)} rows (first {list(rows[:5])})"


def _int_column(df: pd.DataFrame, col: str, lowest: int) -> np.ndarray:
    v = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    bad = ~np.isfinite(v) | (v < lowest) | (v != np.round(v))
    if bad.any():
        raise InputError(f"column {col!r} must hold integers >= {lowest}: "
                         f"{_bad_rows(df, bad)} do not, e.g. {df[col].to_numpy()[bad][:3].tolist()}")
    return v.astype(np.int64)


def _check_rows(df_rows, *, need_latency: bool = True, what: str = "df_rows"):
    """Validate request rows; return ``(B, L, latency_ms or None)`` as arrays."""
    if not isinstance(df_rows, pd.DataFrame):
        raise InputError(f"{what} must be a pandas DataFrame, got {type(df_rows).__name__}")
    need = REQUEST_COLUMNS if need_latency else REQUEST_COLUMNS[:2]
    missing = [c for c in need if c not in df_rows.columns]
    if missing:
        raise InputError(f"{what}: missing columns {missing} (columns present: "
                         f"{[str(c) for c in df_rows.columns]}); rows come from "
                         "perfmodel.data.datasets.load_llm_inference_bench")
    if len(df_rows) == 0:
        raise InputError(f"{what} has no rows")
    if "consistent" in df_rows.columns:
        bad = ~df_rows["consistent"].astype(bool).to_numpy()
        if bad.any():
            raise InputError(f"{what}: column 'consistent' is False in {_bad_rows(df_rows, bad)}: "
                             "their batch size is not B concurrent requests (llama.cpp); "
                             "load with consistent_only=True")
    for col in GROUP_COLUMNS:
        if col in df_rows.columns:
            vals = pd.unique(df_rows[col])
            if len(vals) > 1:
                raise InputError(f"{what}: column {col!r} has {len(vals)} values "
                                 f"{[str(v) for v in vals[:5]]}; calibrate one hardware, "
                                 "device count, framework and model at a time")
    B = _int_column(df_rows, "B", 1)
    L = _int_column(df_rows, "L", 1)
    if not need_latency:
        return B, L, None
    lat = pd.to_numeric(df_rows["latency_s"], errors="coerce").to_numpy(dtype=float,
                                                                        na_value=np.nan)
    bad = ~np.isfinite(lat) | (lat <= 0)
    if bad.any():
        raise InputError(f"column 'latency_s' must be finite and > 0: {_bad_rows(df_rows, bad)} "
                         "are not")
    return B, L, 1000.0 * lat


def _check_model(model) -> Model:
    m = get_model(model)
    if m.fitted_as:
        raise InputError(f"model {m.name!r} is not identifiable; calibrate {m.fitted_as!r} "
                         "(its identifiable form) instead")
    missing = [k for k in _NONLINEAR if k not in m.param_names]
    if missing:
        raise InputError(f"model {m.name!r} has no {' or '.join(missing)} (an ablation); "
                         "request-level calibration needs both saturation rates")
    return m


# ---------------------------------------------------------------------------
# the integral: steps of a static batch, summed per row
# ---------------------------------------------------------------------------

def static_batch_steps(B, L) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Every engine step of static batches of ``B`` requests x ``L`` in / ``L`` out tokens.

    Problem: a row's latency is the sum of its ``L`` steps; build the features
    of all steps of all rows at once with
    :func:`perfmodel.data.features.uniform_batch_features` (every request of a step
    has the same chunk and context; verified equal to
    :func:`perfmodel.data.features.batch_features`, step by step, in
    ``tests/stats/test_calibrate.py``).

    Row ``r`` owns steps ``starts[r] .. starts[r] + L[r] - 1``: first the
    prefill (chunk ``L``, context 0 for each of the ``B`` requests), then
    ``L - 1`` decode steps ``j = 1 .. L-1`` (chunk 1, context ``L + j - 1``).
    With ``L = 1`` the single step has chunk 1 and, by the schema's
    definitions, counts as a decode of context 0.

    Parameters
    ----------
    B, L : array_like of int >= 1, same length

    Returns
    -------
    feats : dict of float arrays of length ``sum(L)``: ``B, S, ctx_sum,
        ctx_max, attn, attn_prefill, decode_ctx, prefill_sq, chunk_sd``
    starts : int array, the first step of each row (for ``np.add.reduceat``)
    """
    B = np.asarray(B).ravel()
    L = np.asarray(L).ravel()
    if B.shape != L.shape or B.size == 0:
        raise InputError(f"B and L must be non-empty and of one length, got {B.size} and {L.size}")
    for name, v in (("B", B), ("L", L)):
        vf = v.astype(float)
        if not np.all(np.isfinite(vf)) or np.any(vf < 1) or np.any(vf != np.round(vf)):
            raise InputError(f"{name} must hold integers >= 1, got {v[:5].tolist()}...")
    B = B.astype(np.int64)
    L = L.astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(L)[:-1]]).astype(np.int64)
    row = np.repeat(np.arange(L.size), L)
    k = np.arange(int(L.sum())) - starts[row]
    Bs = B[row].astype(float)
    Ls = L[row].astype(float)
    pre = k == 0
    chunk = np.where(pre, Ls, 1.0)
    ctx = np.where(pre, 0.0, Ls + k - 1.0)
    return uniform_batch_features(Bs, chunk, ctx), starts


def integrate_predict(model, theta, steps, starts) -> np.ndarray:
    """Per-row sum of the step predictions (ms): the model's static-batch latency.

    ``steps`` and ``starts`` come from :func:`static_batch_steps`.
    """
    m = get_model(model)
    return np.add.reduceat(m._predict(m.check_theta(theta), m.check_features(steps)),
                           np.asarray(starts))


def integrate_jacobian(model, theta, steps, starts) -> np.ndarray:
    """Per-row sum of the step Jacobians: d(latency_ms)/d(theta), shape (rows, p)."""
    m = get_model(model)
    return np.add.reduceat(m._jacobian(m.check_theta(theta), m.check_features(steps)),
                           np.asarray(starts), axis=0)


def predict_requests(fit, df_rows, model=None) -> np.ndarray:
    """Predicted static-batch latency (ms) of request rows from a step model.

    Parameters
    ----------
    fit : a FitResult (from :func:`calibrate_from_requests` or
        :func:`perfmodel.core.fit.fit_model`), or a parameter vector / dict with
        ``model`` given
    df_rows : DataFrame with columns ``B`` and ``L``
    model : str or Model, needed only when ``fit`` is a parameter vector

    Returns
    -------
    numpy.ndarray of ms, one per row
    """
    if hasattr(fit, "values") and hasattr(fit, "fitted_model_name"):
        if model is not None and get_model(model).name != fit.fitted_model_name:
            raise InputError(f"model {get_model(model).name!r} differs from the fit's "
                             f"{fit.fitted_model_name!r}")
        m, theta = get_model(fit.fitted_model_name), fit.values
    else:
        if model is None:
            raise InputError("model is required when fit is a parameter vector")
        m, theta = _check_model(model), fit
    theta = m.check_theta(theta)
    B, L, _ = _check_rows(df_rows, need_latency=False)
    steps, starts = static_batch_steps(B, L)
    return integrate_predict(m, theta, steps, starts)


# ---------------------------------------------------------------------------
# starting points
# ---------------------------------------------------------------------------

def _is_linear_except_k(m: Model, f, starts) -> bool:
    """True when T is linear in every parameter but k_B, k_S (checked numerically)."""
    names = m.param_names
    if not all(k in names for k in _NONLINEAR):
        return False
    rng = np.random.default_rng(12345)
    th = m.clip(np.where(np.isin(names, _NONLINEAR), 0.01, rng.uniform(0.5, 2.0, len(names))))
    lin = ~np.isin(names, _NONLINEAR)
    J = np.add.reduceat(m._jacobian(th, f), starts, axis=0)
    y = np.add.reduceat(m._predict(th, f), starts)
    return bool(np.allclose(J[:, lin] @ th[lin], y, rtol=1e-9, atol=0))


def _linear_starts(m: Model, f, starts, y, free, hold) -> list[tuple[float, np.ndarray]]:
    """Grid over (k_B, k_S); the other parameters by NNLS on relative error.

    With ``k_B`` and ``k_S`` fixed, the integrated latency is linear in the
    remaining parameters, and non-negative least squares on ``(X theta -
    y)/y`` gives their best values (held parameters keep ``hold``'s values
    and their contribution is subtracted first; the box's lower bounds are
    0, except ``tau_0``'s 1e-6, restored by clipping).  Returns (log SSR,
    theta) for every grid point, best first.
    """
    names = m.param_names
    iB, iS = names.index("k_B"), names.index("k_S")
    nonlin = np.isin(names, _NONLINEAR)
    lin = np.nonzero(~nonlin & free)[0]
    held = np.nonzero(~nonlin & ~free)[0]
    out = []
    for kb in _K_B_GRID:
        for ks in _K_S_GRID:
            th = np.where(free, m.clip(np.ones(len(names))), hold)
            th[iB] = kb if free[iB] else hold[iB]
            th[iS] = ks if free[iS] else hold[iS]
            J = np.add.reduceat(m._jacobian(th, f), starts, axis=0)
            target = (y - J[:, held] @ hold[held]) / y
            X = J[:, lin] / y[:, None]
            if not (np.all(np.isfinite(X)) and np.all(np.isfinite(target))):
                continue
            coef, _ = optimize.nnls(X, target, maxiter=50 * max(X.shape[1], 1))
            th[lin] = coef
            th = np.where(free, m.clip(th), hold)
            pred = np.add.reduceat(m._predict(th, f), starts)
            out.append((float(np.sum(np.log(np.maximum(pred, 1e-300) / y) ** 2)), th))
    out.sort(key=lambda t: t[0])
    return out


def _starts(m: Model, f, starts, y, free, hold, n_starts: int, seed: int) -> list[np.ndarray]:
    """Starting points in physical units (see :func:`calibrate_from_requests`)."""
    rng = np.random.default_rng(seed)
    names = m.param_names
    grid = _linear_starts(m, f, starts, y, free, hold) if _is_linear_except_k(m, f, starts) else []
    if grid:
        cands = [grid[0][1]]
        iB = names.index("k_B")
        for _, th in grid[1:]:  # the next-best start from a different k_B
            if len(cands) >= min(2, n_starts):
                break
            if not np.isclose(th[iB], cands[0][iB]):
                cands.append(th)
    else:
        # pseudo step times: each step of a row takes the row's mean step time
        counts = np.diff(np.append(starts, len(f["B"])))
        cands = [m.initial_guess(f, np.repeat(y / counts, counts))]
    base = np.where(free, cands[0], hold)
    # a parameter the start left at 0 is perturbed to a value whose term is ~5% of a row
    J = np.add.reduceat(m._jacobian(m.clip(np.where(free, base, hold)), f), starts, axis=0)
    typical = np.array([0.05 * float(np.median(y[J[:, j] > 0] / J[J[:, j] > 0, j]))
                        if np.any(J[:, j] > 0) else 1e-6 for j in range(len(names))])
    while len(cands) < n_starts:
        pert = np.where(base > 0, base, typical) * np.exp(rng.uniform(-np.log(10), np.log(10),
                                                                      base.size))
        cands.append(m.clip(pert))
    return [np.where(free, m.clip(np.asarray(th, float)), hold) for th in cands[:n_starts]]


# ---------------------------------------------------------------------------
# the calibration
# ---------------------------------------------------------------------------

def _held_values(m: Model, fixed) -> tuple[np.ndarray, np.ndarray]:
    """Values of the held parameters (lower bounds, then ``fixed``) and which ``fixed`` holds."""
    names, p = m.param_names, m.n_params
    hold = m.lower.copy()
    user_fixed = np.zeros(p, bool)
    if fixed is not None:
        if not isinstance(fixed, Mapping):
            raise InputError(f"fixed must be a dict of parameter name -> value, got {fixed!r}")
        unknown = [k for k in fixed if k not in names]
        if unknown:
            raise InputError(f"fixed: unknown parameters {unknown} for model {m.name!r} "
                             f"(parameters: {names})")
        for k, v in fixed.items():
            i = names.index(k)
            try:
                v = float(v)
            except (TypeError, ValueError):
                raise InputError(f"fixed[{k!r}] must be a number, got {v!r}") from None
            if not (np.isfinite(v) and m.lower[i] <= v <= m.upper[i]):
                raise InputError(f"fixed[{k!r}] = {v!r} is outside the bounds "
                                 f"[{m.lower[i]:g}, {m.upper[i]:g}]")
            hold[i], user_fixed[i] = v, True
    return hold, user_fixed


def _free_parameters(m: Model, f, starts, user_fixed, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(invisible, free): parameters no static batch sees, and those fitted."""
    # parameters whose integrated Jacobian column is zero for every row at a
    # generic point are invisible to static batches: hold them at the lower bound
    probe = m.clip(np.full(m.n_params, 0.01))
    Jp = np.add.reduceat(m._jacobian(probe, f), starts, axis=0)
    invisible = ~np.any(Jp != 0, axis=0)
    free = ~invisible & ~user_fixed
    if n <= int(free.sum()):
        raise InputError(f"model {m.name!r} has {int(free.sum())} free parameters but only {n} "
                         "request rows to fit")
    return invisible, free


def _integrated_regression(m: Model, f, starts, free, hold, scale: bool):
    """Median-scaled features and the summed-over-steps regression on log latency.

    Returns ``(medians, scale factor per parameter, func, jac, bounds of the
    free parameters)``; ``func``/``jac`` take the scaled free parameters.
    """
    med = {k: (float(np.median(v[v > 0])) if np.any(v > 0) else 1.0) if scale else 1.0
           for k, v in f.items()}
    fs = {k: v / med[k] for k, v in f.items()}
    pscale = np.array([np.prod([med[k] ** pw for k, pw in prm.scales_with.items()
                                if k in med]) or 1.0 for prm in m.params])
    bounds = (m.lower * pscale)[free], (m.upper * pscale)[free]
    hold_s = hold * pscale

    def _full(ts):
        th = hold_s.copy()
        th[free] = ts
        return th

    def _sum(ts, _x):
        return np.add.reduceat(m._predict(_full(ts), fs), starts)

    def _sum_jac(ts, _x):
        return np.add.reduceat(m._jacobian(_full(ts), fs), starts, axis=0)[:, free]

    # the request latency is fitted on the log scale (perfmodel.core.scale.LOG)
    func, jac = LOG.regression(_sum, _sum_jac)
    return med, pscale, func, jac, bounds


def _calibration_result(m: Model, r, s0, n_ok: int, *, B, L, y, steps, n_steps: int, starts,
                        hold, free, invisible, pscale, med, n_starts: int, seed: int, scale: bool):
    """The FitResult of a calibration: physical units, request-level statistics, options."""
    from perfmodel.core.results import FitData, FitEstimate, FitOptions, FitResult

    names, p, n = m.param_names, m.n_params, y.size
    theta = hold.copy()
    theta[free] = r.params / pscale[free]
    cov = np.full((p, p), np.nan)
    cov[np.ix_(free, free)] = r.cov / np.outer(pscale[free], pscale[free])
    at_bound = np.zeros(p, bool)
    at_bound[free] = r.at_bound
    unident = invisible.copy()
    unident[free] = r.unidentified
    pred = integrate_predict(m, theta, steps, starts)
    out = FitResult.build(
        model=m, fitted=m,
        estimate=FitEstimate(theta=theta, cov=cov, at_bound=at_bound, unidentified=unident,
                             init=s0, curve=r),
        data=FitData(y=y, yhat=pred, keep=np.ones(n, bool),
                     feats={"B": B.astype(float), "L": L.astype(float)}, medians=med),
        options=FitOptions(loss="linear", relative="log", f_scale=1.0, n_starts=n_starts,
                           n_converged=int(n_ok), seed=int(seed), scale=scale))
    out.options.update(
        target="static_batch_requests", n_steps=n_steps,
        fixed={nm: float(v) for nm, v, fr in zip(names, hold, free) if not fr},
        invisible=[nm for nm, iv in zip(names, invisible) if iv],
        integration="latency_ms = T(prefill: B x chunk L, ctx 0) "
                    "+ sum_{j=1}^{L-1} T(decode: B x chunk 1, ctx L+j-1)")
    if all(k in names and free[names.index(k)] for k in ("c_attn", "c_kv")):
        out.warnings.append(
            "with input = output length, prefill attention (c_attn B L^2/2) and decode KV "
            "reads (c_kv B (L-1)(3L-2)/2) have the same leading shape: only about "
            "c_attn + 3 c_kv is determined, not the prefill/decode split of the step model "
            f"(here c_attn + 3 c_kv = {out.params['c_attn'] + 3 * out.params['c_kv']:.4g} "
            "ms/token^2); hold one with fixed= when a step trace gives it")
    return out


def calibrate_from_requests(df_rows, model=RECOMMENDED["context"], seed: int = 0, n_starts: int = 4, *,
                            fixed=None, max_nfev: int | None = 2000, scale: bool = True):
    """Fit a step model to static-batch request latencies.

    Problem: minimise ``sum_r (log sum_{k in steps(r)} T(theta; k) - log
    latency_ms_r)^2`` subject to the member's bounds, where ``steps(r)`` are
    the prefill and the ``L - 1`` decode steps of row ``r``
    (:func:`static_batch_steps`; module docstring for the indexing).

    Parameters
    ----------
    df_rows : DataFrame with columns ``B``, ``L``, ``latency_s`` (seconds), as
        :func:`perfmodel.data.datasets.load_llm_inference_bench` returns, for ONE
        hardware, device count, framework and model (checked where those
        columns exist; rows with ``consistent == False`` are refused)
    model : str or Model, a member of :mod:`perfmodel.core.model` (default
        ``'seed_ctx_mono'``; ``'seed_id'`` has no context terms).  Members
        fitted through another (``'seed'``) are refused: calibrate the
        identifiable one.
    seed : int, seeds the random starts
    n_starts : int >= 1.  Start 0 is the best point of a (k_B, k_S) grid
        with the linear parameters solved by non-negative least squares on
        relative error; start 1 the best grid point with another k_B; the
        rest log-uniform perturbations (x1/10 .. x10) of start 0.  The
        lowest-cost optimum is kept.
    fixed : dict name -> value, optional: parameters held at a given value
        (within the member's bounds), e.g. a prefill cost known from a step
        trace.  Parameters no static batch can see are always held at their
        lower bound.
    max_nfev : passed to :func:`perfmodel.core.fit.fit_curve`
    scale : divide each step feature by its median over all steps while
        fitting (parameters are reported in physical units)

    Returns
    -------
    perfmodel.core.results.FitResult
        ``values``/``params`` are the step-model parameters (physical
        units): ``predict(features)`` gives *step* times in ms.  Its
        statistics are *request-level*: ``n`` rows, ``mape`` the in-sample
        request-latency MAPE (%), ``r2``/``rmse``/``mae`` in ms of request
        latency, ``y``/``fitted``/``residuals`` per row, ``features`` the
        rows' ``B`` and ``L``; ``rss``/``aic``/``bic`` are on log latency.
        ``options['target'] = 'static_batch_requests'``; held parameters are
        listed in ``options['fixed']`` (those no static batch can see also
        in ``unidentified``).

    Notes
    -----
    Identifiability.  With input = output = ``L`` the prefill attention
    ``c_attn B L^2/2`` and the decode KV reads ``c_kv B (L-1)(3L-2)/2`` have
    the same leading shape ``B L^2``: the rows fix ``c_attn + 3 c_kv`` well
    and the split only through lower-order terms that ``tau_B``, ``tau_S``
    and ``a_1`` also produce.  Request latencies of static batches are then
    predicted well, but the prefill/decode split of the step model is not
    determined (a warning says so); hold one of the two with ``fixed``
    when a step trace or an operator profile gives it.

    Raises
    ------
    InputError
        Missing columns, ``B < 1``, ``L < 1``, non-positive latency, several
        groups mixed, a bad ``fixed``, or no more rows than free parameters.
    FitError
        Every start failed.

    Examples
    --------
    >>> import pandas as pd
    >>> from perfmodel.stats.calibrate import calibrate_from_requests, predict_requests
    >>> rows = pd.DataFrame({"B": [1, 1, 8, 8, 32, 32, 64, 64],
    ...                      "L": [64, 256, 64, 256, 64, 256, 64, 256]})
    >>> theta = [6.0, 0.02, 0.02, 0.1, 0.5, 0.02, 1e-4]
    >>> rows["latency_s"] = predict_requests(theta, rows, "seed_id") / 1000
    >>> fit = calibrate_from_requests(rows, "seed_id")
    >>> bool(fit.mape < 1e-3)
    True
    """
    m = _check_model(model)
    n_starts = check_int_range("n_starts", n_starts, 1)
    seed = check_int_range("seed", seed)
    hold, user_fixed = _held_values(m, fixed)
    B, L, y = _check_rows(df_rows)
    steps, starts = static_batch_steps(B, L)
    f = m.check_features(steps)
    invisible, free = _free_parameters(m, f, starts, user_fixed, y.size)
    med, pscale, func, jac, bounds = _integrated_regression(m, f, starts, free, hold, scale)
    logy = LOG.target(y)
    starts_phys = _starts(m, f, starts, y, free, hold, int(n_starts), int(seed))
    r, s0, n_ok = race_starts(
        lambda s: fit_curve(func, None, logy, (s * pscale)[free], jac=jac, bounds=bounds,
                            xtol=1e-10, ftol=1e-10, gtol=1e-10, max_nfev=max_nfev),
        starts_phys, m.name)
    return _calibration_result(m, r, s0, n_ok, B=B, L=L, y=y, steps=steps, n_steps=len(f["B"]),
                               starts=starts, hold=hold, free=free, invisible=invisible,
                               pscale=pscale, med=med, n_starts=len(starts_phys), seed=seed,
                               scale=scale)


# ---------------------------------------------------------------------------
# held-out evaluation
# ---------------------------------------------------------------------------

def _mape(pred, y) -> float:
    return float(100.0 * np.mean(np.abs(pred - y) / y))


class HeldOut(NamedTuple):
    """Result of :func:`heldout_evaluation` (MAPE in %, latencies in ms)."""

    fit: Any
    n_train: int
    n_test: int
    mape_train: float
    mape_test: float
    pred_ms: np.ndarray
    y_ms: np.ndarray


class KFold(NamedTuple):
    """Result of :func:`grouped_kfold_requests` (MAPE in %, latencies in ms)."""

    k: int
    n_configs: int
    fold: np.ndarray
    pred_ms: np.ndarray
    y_ms: np.ndarray
    mape_test: float
    mape_train: float
    fold_mape: list


def heldout_evaluation(df_rows, train_mask, model=RECOMMENDED["context"], *, seed: int = 0,
                       n_starts: int = 4, fixed=None) -> HeldOut:
    """Calibrate on the rows in ``train_mask`` and score the others.

    Problem: a calibrated step model is useful only if it predicts
    configurations it did not see; fit on the training rows and report the
    request-latency MAPE, ``100 mean |pred - y| / y``, on both sides.

    Parameters
    ----------
    df_rows : request rows (see :func:`calibrate_from_requests`)
    train_mask : boolean array_like, one per row; True = fit on this row.
        Both sides must be non-empty.
    model, seed, n_starts, fixed : passed to :func:`calibrate_from_requests`

    Returns
    -------
    HeldOut
        ``fit`` (FitResult on the training rows), ``n_train``, ``n_test``,
        ``mape_train``, ``mape_test`` (%), ``pred_ms`` (every row), ``y_ms``
    """
    _, _, y = _check_rows(df_rows)
    mask = np.asarray(train_mask)
    if mask.dtype != bool or mask.shape != (len(df_rows),):
        raise InputError(f"train_mask must be a boolean array of length {len(df_rows)}, got "
                         f"dtype {mask.dtype} and shape {mask.shape}")
    if mask.all() or not mask.any():
        raise InputError(f"train_mask selects {int(mask.sum())} of {mask.size} rows: both the "
                         "training and the held-out side need rows")
    fit = calibrate_from_requests(df_rows[mask], model, seed=seed, n_starts=n_starts,
                                  fixed=fixed)
    pred = predict_requests(fit, df_rows)
    return HeldOut(fit=fit, n_train=int(mask.sum()), n_test=int((~mask).sum()),
                   mape_train=_mape(pred[mask], y[mask]), mape_test=_mape(pred[~mask], y[~mask]),
                   pred_ms=pred, y_ms=y)


def grouped_kfold_requests(df_rows, model=RECOMMENDED["context"], *, k: int = 5, seed: int = 0,
                           n_starts: int = 4, fixed=None) -> KFold:
    """Grouped k-fold over configurations ``(B, L)``: out-of-fold request MAPE.

    Problem: replicates of one configuration must not sit on both sides of
    a split (that would leak), so the ``(B, L)`` pairs are the groups of
    :func:`perfmodel.stats.validation.grouped_kfold` (the splitter every fold in
    the package comes from: groups shuffled with ``seed``, dealt largest
    first to the lightest fold); each fold is predicted by a model
    calibrated on the others.

    Returns
    -------
    KFold
        ``k``, ``n_configs``, ``fold`` (fold of every row), ``pred_ms``
        (out-of-fold prediction of every row), ``y_ms``, ``mape_test``
        (pooled out-of-fold MAPE, %), ``mape_train`` (mean in-fold MAPE of
        the k fits, %), ``fold_mape`` (held-out MAPE per fold, %)
    """
    B, L, y = _check_rows(df_rows)
    k = check_int_range("k", k, 2)
    cfg = pd.MultiIndex.from_arrays([B, L])
    uniq = cfg.unique()
    if len(uniq) < k:
        raise InputError(f"k={k} folds need at least {k} distinct (B, L) configurations, "
                         f"got {len(uniq)}")
    from perfmodel.stats.validation import grouped_kfold  # the package's one fold splitter

    fold = np.empty(y.size, np.int64)
    for i, (_, te) in enumerate(grouped_kfold(uniq.get_indexer(cfg), int(k), seed)):
        fold[te] = i
    pred = np.full(y.size, np.nan)
    fold_mape, train_mape = [], []
    for i in range(k):
        test = fold == i
        res = heldout_evaluation(df_rows, ~test, model, seed=seed, n_starts=n_starts, fixed=fixed)
        pred[test] = res.pred_ms[test]
        fold_mape.append(res.mape_test)
        train_mape.append(res.mape_train)
    return KFold(k=int(k), n_configs=len(uniq), fold=fold, pred_ms=pred, y_ms=y,
                 mape_test=_mape(pred, y), mape_train=float(np.mean(train_mape)),
                 fold_mape=fold_mape)
