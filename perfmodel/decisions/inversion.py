"""SLA inversion: the largest step size whose predicted time meets a target, and its frontier.

Problem
-------
Invert a fitted step-latency model ``T(B, S)`` (docs/model.md, Decision
quantities): the largest number of tokens ``S*`` a step with ``B`` requests
can carry within a step-time target ``T*`` (:func:`max_tokens`), the same
with a stated probability ``P(T <= T*) >= q`` (:func:`max_tokens_quantile`),
the converse largest ``B*`` at ``S`` tokens (:func:`max_batch`), and the
frontier ``S*(B)`` over batch sizes (:func:`frontier`, :func:`plot_frontier`).

Every search runs on the rising branch (:mod:`perfmodel.decisions.rising_search`)
of the searched quantity (:class:`perfmodel.decisions.predictor.Predictor`), so
an answer satisfies ``T(B, S*) <= T* < T(B, S* + 1)`` exactly on integers
unless capped at ``s_max``; this was verified against brute force over integers
and with hypothesis in ``tests/decisions/test_sla.py``.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from perfmodel._checks import check_int_range, check_positive, check_probability
from perfmodel._io import json_safe
from perfmodel.decisions.predictor import Predictor
from perfmodel.decisions.rising_search import largest_below, line, rising_start, solve_tokens
from perfmodel.errors import InputError

__all__ = ["DEFAULT_S_MAX", "BatchAnswer", "SlaAnswer", "frontier", "max_batch", "max_tokens",
           "max_tokens_quantile", "plot_frontier"]

DEFAULT_S_MAX = 2**20


def _count_arg(name: str, value) -> int:
    """An integer >= 1 (a float with an integer value is accepted)."""
    return check_int_range(name, value, 1, integral_float=True)


def _target_arg(name: str, value) -> float:
    return check_positive(name, value, unit="ms")


def _tokens_args(batch_size, target_ms, s_max) -> tuple[int, float, int]:
    """Checked ``(B, T*, s_max)`` of :func:`max_tokens` and :func:`max_tokens_quantile`."""
    B = _count_arg("batch_size", batch_size)
    T = _target_arg("target_ms", target_ms)
    s_max = _count_arg("s_max", s_max)
    if s_max < B:
        raise InputError(f"s_max={s_max} is below batch_size={B} (S >= B)")
    return B, T, s_max


# ---------------------------------------------------------------------------
# answers
# ---------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class _SearchAnswer:
    """What every answer of a search on the rising branch reports beside its number.

    ``predicted_ms`` is the point prediction at the answer when feasible,
    else the smallest point prediction reachable on the allowed domain; with
    a quantile ``q``, ``predicted_q_ms`` is the ``q``-quantile at the same
    point.  ``rising_from`` is the smallest value of the searched variable from
    which the predicted ``T`` does not fall (a property of the model);
    ``search_from`` is the smallest value the search considers.  ``capped``
    means the target is met up to the end of the search range.
    """

    target_ms: float
    q: float | None = None
    predicted_ms: float
    predicted_q_ms: float | None = None
    rising_from: int
    search_from: int
    feasible: bool
    capped: bool = False
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return json_safe(asdict(self))


@dataclass(frozen=True, kw_only=True)
class SlaAnswer(_SearchAnswer):
    """Largest tokens per step at a batch size under a step-time target.

    ``max_total_tokens`` is ``S*`` (None when infeasible); ``rising_from`` may
    be below ``batch_size``, ``search_from = max(batch_size, rising_from)``
    (S >= B).  With a quantile, ``method`` names the prediction distribution
    and ``prob_meets`` = ``P(T <= target_ms)`` at the answer.  ``capped``:
    met up to ``s_max``.  Fields in common with :class:`BatchAnswer` are
    described in ``_SearchAnswer``.
    """

    batch_size: int
    max_total_tokens: int | None
    method: str | None = None
    prob_meets: float | None = None


@dataclass(frozen=True, kw_only=True)
class BatchAnswer(_SearchAnswer):
    """Largest batch size at a token count under a step-time target (B <= S).

    ``max_batch_size`` is ``B*`` (None when infeasible).  ``search_from``, the
    smallest B the search considers, equals ``rising_from`` (B >= 1 always),
    kept for the same keys as :class:`SlaAnswer`; ``capped``: every B up to
    ``total_tokens`` meets the target.
    """

    total_tokens: int
    max_batch_size: int | None


def _tokens_answer(pred: Predictor, B: int, target: float, s_max: int, sol: dict,
                   i: int) -> SlaAnswer:
    """The :class:`SlaAnswer` of row ``i`` of :func:`~perfmodel.decisions.rising_search.solve_tokens`."""
    rise = int(sol["rising"][i])
    start = int(sol["start"][i])
    q = pred.q
    common = {"batch_size": B, "target_ms": target, "rising_from": rise, "search_from": start,
              "q": q, "method": pred.method if q is not None else None}
    searched = f"search from S={start} = max(B={B}, rising_from={rise})"
    if sol["feasible"][i]:
        S = int(sol["S"][i])
        capped = bool(sol["capped"][i])
        f = {"B": [B], "S": [S]}
        what = f"{q:g}-quantile" if q is not None else "predicted step time"
        if capped:
            reason = (f"the {what} stays <= {target:g} ms up to s_max={s_max}: S* is capped at "
                      "s_max (raise s_max to search further)")
        else:
            nxt = float(pred.surface(B, S + 1))
            reason = (f"{what} {float(pred.surface(B, S)):.4g} ms at S={S} <= {target:g} ms < "
                      f"{nxt:.4g} ms at S={S + 1} ({searched})")
        return SlaAnswer(
            **common, max_total_tokens=S, predicted_ms=float(pred.point(f)[0]), feasible=True,
            reason=reason, capped=capped,
            predicted_q_ms=float(pred.quantile(f)[0]) if q is not None else None,
            prob_meets=float(pred.prob_below(f, target)[0]) if q is not None else None)
    f = {"B": [B], "S": [start]}
    lowest = float(sol["v_start"][i])
    where = (f"at S={start}, the minimum over S >= {B}" if start > B or rise > B
             else f"at S={B} (S >= B: each request computes at least one token)")
    what = f"{q:g}-quantile of the step time" if q is not None else "predicted step time"
    reason = (f"infeasible: target {target:g} ms is below the smallest {what}, "
              f"{lowest:.4g} ms {where}; {searched}")
    return SlaAnswer(
        **common, max_total_tokens=None, predicted_ms=float(pred.point(f)[0]), feasible=False,
        reason=reason, predicted_q_ms=lowest if q is not None else None,
        prob_meets=float(pred.prob_below(f, target)[0]) if q is not None else None)


def max_tokens(fit, batch_size: int, target_ms: float, *, s_max: int = DEFAULT_S_MAX,
               features: Mapping | None = None) -> SlaAnswer:
    """Largest integer S >= B with predicted T(B, S) <= T* on the rising branch.

    Problem: ``S* = argmin_S |T(B,S) - T*|`` (docs/model.md) read as "the
    most tokens a step with ``B`` requests can compute within ``T*``".  The
    search starts at ``max(B, rising_from)`` (module docstring), doubles the
    step until the target is exceeded, then bisects on integers, so
    ``T(B,S*) <= T* < T(B,S*+1)`` exactly (tested with hypothesis).

    Parameters
    ----------
    fit : FitResult or any object with ``.predict(features)``
    batch_size : int >= 1
    target_ms : float > 0
    s_max : search cap on S (answers at the cap are flagged ``capped``)
    features : constants for other model features (see :class:`Predictor`)

    Returns
    -------
    SlaAnswer (``max_total_tokens`` None and ``feasible`` False when the
    target is below the smallest predicted time)

    Examples
    --------
    >>> a = max_tokens(fit, 16, 50.0)        # doctest: +SKIP
    >>> a.max_total_tokens, a.predicted_ms   # doctest: +SKIP
    """
    B, T, s_max = _tokens_args(batch_size, target_ms, s_max)
    pred = Predictor(fit, features=features)
    sol = solve_tokens(pred, np.array([B], np.int64), np.array([T]), s_max)
    return _tokens_answer(pred, B, T, s_max, sol, 0)


def max_tokens_quantile(fit, batch_size: int, target_ms: float, q: float, *,
                        method: str = "delta", boot_samples=None, residuals=None,
                        s_max: int = DEFAULT_S_MAX, features: Mapping | None = None,
                        n_draws: int = 4000, seed: int = 0) -> SlaAnswer:
    """Largest integer S >= B with ``P(T(B,S) <= T*) >= q`` on the rising branch.

    Problem: a target met with a stated probability.  ``P(T <= T*) >= q`` is
    ``quantile_q(T) <= T*``, so this is :func:`max_tokens` with the step time
    replaced by its ``q``-quantile under the prediction distribution of a new
    step (delta method or bootstrap, module docstring); the same exact
    integer property holds for the quantile.

    Parameters
    ----------
    q : probability in (0, 1), e.g. 0.95
    method : ``'delta'`` or ``'bootstrap'``
    boot_samples : (n_boot, p) array of parameter samples (bootstrap)
    residuals : fit-scale residuals for the bootstrap (default: from ``fit``)
    n_draws, seed : size and seed of the bootstrap predictive sample

    Returns
    -------
    SlaAnswer with ``q``, ``method``, ``predicted_q_ms`` and ``prob_meets``
    """
    B, T, s_max = _tokens_args(batch_size, target_ms, s_max)
    q = check_probability("q", q)
    pred = Predictor(fit, q=q, method=method, boot_samples=boot_samples, residuals=residuals,
                     features=features, n_draws=n_draws, seed=seed)
    sol = solve_tokens(pred, np.array([B], np.int64), np.array([T]), s_max)
    ans = _tokens_answer(pred, B, T, s_max, sol, 0)
    if pred.note:
        ans = replace(ans, reason=ans.reason + f" [{pred.note}]")
    return ans


def max_batch(fit, total_tokens: int, target_ms: float, *, q: float | None = None,
              method: str = "delta", boot_samples=None, features: Mapping | None = None,
              seed: int = 0) -> BatchAnswer:
    """Largest integer B <= S with predicted T(B, S) <= T* (the converse of :func:`max_tokens`).

    Problem: at a token budget ``S``, how many requests may share a step.
    ``T`` falls then rises in ``B`` too (more requests raise the saturation
    factor ``1 - e^{-k_B B}``, ``tau_B B`` adds time), so the search runs on
    the rising branch in ``B`` from ``rising_from`` up to ``S`` (each request
    computes at least one token); with ``q``, on the ``q``-quantile.

    Returns
    -------
    BatchAnswer (``max_batch_size`` None when infeasible; ``capped`` when
    every B up to S meets the target)
    """
    S = _count_arg("total_tokens", total_tokens)
    T = _target_arg("target_ms", target_ms)
    pred = Predictor(fit, q=q, method=method, boot_samples=boot_samples, features=features,
                     seed=seed)
    g = line(pred, np.array([S], float), "B")
    one = np.ones(1, np.int64)
    rise = rising_start(g, one, np.array([S], np.int64))
    x, feas, capped, v0 = largest_below(g, rise, np.array([S], np.int64), np.array([T]))
    r = int(rise[0])
    if feas[0]:
        B = int(x[0])
        f = {"B": [B], "S": [S]}
        if capped[0]:
            reason = (f"every B from {r} up to S={S} meets {T:g} ms (B <= S; search from "
                      f"B={r} = rising_from)")
        else:
            reason = (f"{float(g(np.array([[B]]))[0, 0]):.4g} ms at B={B} <= {T:g} ms < "
                      f"{float(g(np.array([[B + 1]]))[0, 0]):.4g} ms at B={B + 1} "
                      f"(search from B={r} = rising_from)")
        return BatchAnswer(
            total_tokens=S, target_ms=T, max_batch_size=B, predicted_ms=float(pred.point(f)[0]),
            rising_from=r, search_from=r, feasible=True, reason=reason, q=pred.q,
            predicted_q_ms=float(pred.quantile(f)[0]) if pred.q is not None else None,
            capped=bool(capped[0]))
    f = {"B": [r], "S": [S]}
    reason = (f"infeasible: target {T:g} ms is below the smallest predicted step time "
              f"{float(v0[0]):.4g} ms at S={S} (reached at B={r})")
    return BatchAnswer(
        total_tokens=S, target_ms=T, max_batch_size=None, predicted_ms=float(pred.point(f)[0]),
        rising_from=r, search_from=r, feasible=False, reason=reason, q=pred.q,
        predicted_q_ms=float(v0[0]) if pred.q is not None else None)


# ---------------------------------------------------------------------------
# frontier
# ---------------------------------------------------------------------------

def frontier(fit, batch_sizes: Sequence[int], target_ms: float, q: float | None = None, *,
             method: str = "delta", boot_samples=None, s_max: int = DEFAULT_S_MAX,
             features: Mapping | None = None, seed: int = 0) -> pd.DataFrame:
    """The SLA frontier ``S*(B)`` over batch sizes, as a table.

    Problem: which (B, S) combinations meet a step-time
    target.  One :func:`max_tokens` (or :func:`max_tokens_quantile` when
    ``q`` is given) per batch size, solved together.

    Returns
    -------
    DataFrame with columns ``batch_size, target_ms, max_total_tokens`` (NA
    when infeasible), ``feasible, capped, rising_from, search_from`` (``max(B,
    rising_from)``: the smallest S searched), ``predicted_ms`` (point
    prediction at S*), ``predicted_q_ms`` and ``prob_meets`` (with ``q``),
    ``tokens_per_s`` (``S*/T_hat * 1000``: the step's token throughput at S*).
    """
    T = _target_arg("target_ms", target_ms)
    if isinstance(batch_sizes, (int, np.integer)):
        batch_sizes = [batch_sizes]
    Bs = np.array([_count_arg("batch_sizes", b) for b in batch_sizes], np.int64)
    if Bs.size == 0:
        raise InputError("batch_sizes is empty")
    s_max = _count_arg("s_max", s_max)
    if s_max < Bs.max():
        raise InputError(f"s_max={s_max} is below the largest batch size {int(Bs.max())}")
    pred = Predictor(fit, q=q, method=method, boot_samples=boot_samples, features=features,
                     seed=seed)
    sol = solve_tokens(pred, Bs, np.full(Bs.size, T), s_max)
    feas = sol["feasible"]
    S = np.where(feas, sol["S"], sol["start"])
    f = {"B": Bs.astype(float), "S": S.astype(float)}
    point = pred.point(f)
    df = pd.DataFrame({
        "batch_size": Bs,
        "target_ms": T,
        "max_total_tokens": pd.array(np.where(feas, sol["S"], 0), dtype="Int64"),
        "feasible": feas,
        "capped": sol["capped"] & feas,
        "rising_from": sol["rising"],
        "search_from": sol["start"],
        "predicted_ms": point,
    })
    df.loc[~feas, "max_total_tokens"] = pd.NA
    if pred.q is not None:
        df["q"] = pred.q
        df["predicted_q_ms"] = pred.quantile(f)
        df["prob_meets"] = pred.prob_below(f, T)
    df["tokens_per_s"] = np.where(feas, S / point * 1000.0, np.nan)
    return df


def _get_ax(ax):
    from perfmodel.plotting import get_ax

    return get_ax(ax)


def plot_frontier(df: pd.DataFrame, ax=None, *, label: str | None = None):
    """Plot ``S*`` against ``B`` from :func:`frontier` (ax in, ax out).

    Feasible batch sizes are joined by a line; infeasible ones are marked
    with crosses on the x axis; capped answers with an upward triangle.
    The region below the line meets the target.
    """
    need = ("batch_size", "max_total_tokens", "feasible")
    if not isinstance(df, pd.DataFrame) or any(c not in df.columns for c in need):
        raise InputError(f"df must be a DataFrame from frontier() with columns {list(need)}")
    ax = _get_ax(ax)
    ok = df[df["feasible"].astype(bool)]
    bad = df[~df["feasible"].astype(bool)]
    q = df["q"].iloc[0] if "q" in df.columns and len(df) else None
    T = df["target_ms"].iloc[0] if "target_ms" in df.columns and len(df) else None
    if label is None:
        label = (f"S*(B), T* = {T:g} ms" if T is not None else "S*(B)") + (
            f", P >= {q:g}" if q is not None else "")
    ax.plot(ok["batch_size"], ok["max_total_tokens"].astype(float), "o-", label=label)
    if "capped" in df.columns and df["capped"].any():
        c = df[df["capped"].astype(bool)]
        ax.plot(c["batch_size"], c["max_total_tokens"].astype(float), "^", color="k",
                label="capped at s_max")
    if len(bad):
        ax.plot(bad["batch_size"], np.zeros(len(bad)), "x", color="red", label="infeasible")
    ax.set_xscale("log", base=2)
    ax.set_yscale("symlog" if len(ok) and ok["max_total_tokens"].min() < 1 else "log")
    ax.set_xlabel("batch size B (requests)")
    ax.set_ylabel("max tokens per step S*")
    ax.legend(fontsize="small")
    return ax
