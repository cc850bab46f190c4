"""A step-level diagnostic: vLLM's token budget and ``max_num_seqs`` for an ITL SLO.

Problem
-------
With continuous batching each step emits one token per decoding request, so
the inter-token latency (ITL) is the step time.  :func:`recommend_token_budget`
proposes ``max_num_batched_tokens`` (``K``) and ``max_num_seqs`` (``M``) from
the probabilistic SLA frontier of :mod:`perfmodel.decisions.inversion`: per
``M`` the largest ``K`` whose step meets the SLO with probability ``q``, then
the ``M`` with the highest token throughput of a full step.  It is a
diagnostic (:data:`DIAGNOSTIC_LABEL`): it ignores queueing and request
deadlines; the request-level decision is
:func:`perfmodel.decisions.tune.tune_token_budget`.

The answers were checked against the single-point answers of
:func:`perfmodel.decisions.inversion.max_tokens_quantile` and, for
``cover='all_batch_sizes'``, against the quantile of every ``b <= M`` at ``K``
and the ``'full_step'`` budget at the same ``M`` (``tests/decisions/test_token_budget.py``).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from perfmodel._checks import check_int_range, check_positive, check_probability
from perfmodel.decisions.inversion import DEFAULT_S_MAX
from perfmodel.decisions.predictor import Predictor
from perfmodel.decisions.rising_search import line, smallest_below, solve_tokens
from perfmodel.errors import InputError

__all__ = ["DEFAULT_SEQS_GRID", "DIAGNOSTIC_LABEL", "recommend_token_budget"]

DEFAULT_SEQS_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: what :func:`recommend_token_budget` is (and is not): printed with its answers
DIAGNOSTIC_LABEL = ("diagnostic only: a step-level rule (tokens per second of one full step "
                    "under a step-time target); it ignores queueing and request deadlines and "
                    "can favour max_num_seqs = 1. For a deployment decision use the "
                    "request-level `perfmodel tune` (perfmodel.decisions.tune)")
#: the rule of each ``cover``, stated in the answer
RULES = {
    "full_step": ("for each max_num_seqs M: K(M) = largest K >= M with P(T(M, K) <= SLO) >= q; "
                  "choose the M maximising K / median T(M, K)"),
    "all_batch_sizes": ("for each max_num_seqs M: K(M) = largest K >= M with P(T(b, K) <= SLO) "
                        ">= q for every b = 1..M; choose the M maximising K / median T(M, K)"),
}


def recommend_token_budget(fit, itl_slo_ms: float, q: float = 0.95, *,
                           max_num_seqs_grid: Sequence[int] = DEFAULT_SEQS_GRID,
                           cover: str = "full_step", method: str = "delta", boot_samples=None,
                           s_max: int = DEFAULT_S_MAX, features: Mapping | None = None,
                           seed: int = 0) -> dict[str, Any]:
    """Propose vLLM's ``max_num_batched_tokens`` and ``max_num_seqs`` for an ITL SLO (diagnostic).

    A step-level diagnostic (:data:`DIAGNOSTIC_LABEL`, in the answer as
    ``label``): it can rank ``max_num_seqs = 1`` first, which serialises the
    requests.  The request-level decision is
    :func:`perfmodel.decisions.tune.tune_token_budget`.

    Problem: with continuous batching each step emits one token per decoding
    request, so the inter-token latency (ITL) is the step time (plus the
    overhead outside the model run, which ``itl_slo_ms`` should exclude).
    The token budget ``K`` caps the tokens per step and ``max_num_seqs`` =
    ``M`` the requests per step.

    Rule
    ----
    ``cover='full_step'`` (default): for each ``M`` in ``max_num_seqs_grid``
    take the point of the probabilistic SLA frontier, ``K(M) = S*_q(M)``,
    the largest ``K >= M`` with ``P(T(M, K) <= SLO) >= q`` (vLLM requires
    ``max_num_batched_tokens >= max_num_seqs``); choose the ``M`` that
    maximises the token throughput of that full step, ``K / median T(M, K)``
    (ties: the smaller ``M``).

    ``cover='all_batch_sizes'``: stricter, ``K(M)`` must also hold for
    steps at the cap with fewer requests: ``quantile_q T(b, K) <= SLO`` for
    every ``b = 1..M``.  (For each ``b`` the feasible ``S`` form an interval
    ``[L_b, U_b]`` on the fall-then-rise curve; ``K(M) = min_b U_b`` when that
    is ``>= max(M, max_b L_b)``.)  The saturation forms predict steps with
    few requests to be slow (``1 - e^{-k_B b}`` is small), so this can be
    infeasible where ``'full_step'`` is not.

    Either way the answer reports ``worst_case``: the ``b <= M`` whose step
    at ``K`` tokens has the largest ``q``-quantile.  Steps with very few
    tokens (on the falling branch) cannot be prevented by a cap and are not
    covered.

    Returns
    -------
    dict with ``max_num_batched_tokens``, ``max_num_seqs``, ``itl_slo_ms``,
    ``q``, ``method``, ``cover``, ``feasible``, ``reason``, ``rule``; at the
    chosen settings ``predicted_median_ms``, ``predicted_q_ms``,
    ``prob_meets_slo`` (step with ``M`` requests and ``K`` tokens),
    ``worst_case`` (``batch_size``, ``predicted_q_ms``, ``prob_meets_slo``),
    ``tokens_per_s``; and ``table``: one dict per ``M`` in the grid.
    """
    T, q, grid, s_max = _check_budget_args(itl_slo_ms, q, cover, max_num_seqs_grid, s_max)
    pred = Predictor(fit, q=q, method=method, boot_samples=boot_samples, features=features,
                     seed=seed)
    Ks, why_none = _BUDGETS[cover](pred, grid, T, s_max)
    table, best = _budget_table(pred, grid, Ks, T)
    out: dict[str, Any] = {"itl_slo_ms": T, "q": q, "method": method, "cover": cover,
                           "rule": RULES[cover], "label": DIAGNOSTIC_LABEL, "table": table,
                           "assumed_context": pred.context_assumption}
    if best is None:
        out.update(feasible=False, max_num_batched_tokens=None, max_num_seqs=None,
                   reason=f"infeasible: no max_num_seqs in {grid} meets the SLO {T:g} ms with "
                          f"probability {q:g}: {why_none or table[0]['reason']}")
        return out
    M, K = best["max_num_seqs"], best["max_num_batched_tokens"]
    wc = _worst_case(pred, M, K, T)
    out.update(
        feasible=True, max_num_batched_tokens=K, max_num_seqs=M,
        predicted_median_ms=best["predicted_median_ms"], predicted_q_ms=best["predicted_q_ms"],
        prob_meets_slo=best["prob_meets_slo"], tokens_per_s=best["tokens_per_s"],
        worst_case=wc, reason=_chosen_reason(best, wc, q, T),
    )
    if pred.note:
        out["note"] = pred.note
    return out


def _check_budget_args(itl_slo_ms, q, cover, max_num_seqs_grid, s_max):
    """Checked ``(SLO, q, sorted grid of M, s_max)``, in the order the messages name them."""
    T = check_positive("itl_slo_ms", itl_slo_ms, unit="ms")
    q = check_probability("q", q)
    if cover not in ("full_step", "all_batch_sizes"):
        raise InputError(f"cover must be 'full_step' or 'all_batch_sizes', got {cover!r}")
    if isinstance(max_num_seqs_grid, (int, np.integer)):
        max_num_seqs_grid = [max_num_seqs_grid]
    grid = sorted({check_int_range("max_num_seqs_grid", m, 1, integral_float=True)
                   for m in max_num_seqs_grid})
    if not grid:
        raise InputError("max_num_seqs_grid is empty")
    s_max = check_int_range("s_max", s_max, 1, integral_float=True)
    if s_max < grid[-1]:
        raise InputError(f"s_max={s_max} is below the largest max_num_seqs {grid[-1]}")
    return T, q, grid, s_max


def _budgets_full_step(pred: Predictor, grid: list[int], T: float, s_max: int):
    """``({M: (K or None, capped, why not)}, why no M is feasible)`` for ``cover='full_step'``."""
    Ms = np.array(grid, np.int64)
    sol = solve_tokens(pred, Ms, np.full(Ms.size, T), s_max)
    q = pred.q
    Ks = {int(M): (int(sol["S"][i]) if sol["feasible"][i] else None,
                   bool(sol["capped"][i]),
                   None if sol["feasible"][i] else
                   f"no K >= {int(M)} meets the SLO at {int(M)} requests (smallest "
                   f"{q:g}-quantile {float(sol['v_start'][i]):.4g} ms)")
          for i, M in enumerate(Ms)}
    i = int(np.argmin(sol["v_start"]))
    why_none = (f"the smallest {q:g}-quantile of a full step over the grid is "
                f"{float(sol['v_start'][i]):.4g} ms (max_num_seqs={int(Ms[i])}, "
                f"S={int(sol['start'][i])})")
    return Ks, why_none


def _budgets_all_batch_sizes(pred: Predictor, grid: list[int], T: float, s_max: int):
    """``({M: (K or None, capped, why not)}, None)`` for ``cover='all_batch_sizes'``.

    For each ``b`` the feasible token counts are ``[L_b, U_b]``; ``K(M) =
    min_{b <= M} U_b`` when it is at least ``max(M, max_{b <= M} L_b)``.
    """
    bs = np.arange(1, grid[-1] + 1, dtype=np.int64)
    sol = solve_tokens(pred, bs, np.full(bs.size, T), s_max)
    L = smallest_below(line(pred, bs.astype(float), "S"), bs, sol["start"], T)
    feas_b = sol["feasible"]
    U = np.where(feas_b, sol["S"], -1)
    Ks = {}
    for M in grid:
        sel = slice(0, M)
        if not feas_b[sel].all():
            worst = int(bs[sel][~feas_b[sel]][0])
            Ks[M] = (None, False, f"no token count meets the SLO at b={worst} requests")
            continue
        K, lo = int(U[sel].min()), int(max(M, L[sel].max()))
        if K < lo:
            Ks[M] = (None, False, (f"the feasible token ranges of b=1..{M} do not overlap "
                                   f"above S={M} (min U_b={K} < {lo})"))
            continue
        Ks[M] = (K, bool(K >= s_max), None)
    return Ks, None


_BUDGETS = {"full_step": _budgets_full_step, "all_batch_sizes": _budgets_all_batch_sizes}


def _budget_table(pred: Predictor, grid: list[int], Ks: dict, T: float):
    """One row per ``M`` (predictions at ``(M, K(M))``) and the row of highest throughput."""
    table = []
    best = None
    for M in grid:
        K, capped, why = Ks[M]
        if K is None:
            table.append({"max_num_seqs": M, "max_num_batched_tokens": None, "feasible": False,
                          "reason": why})
            continue
        f = {"B": [float(M)], "S": [float(K)]}
        med = float(pred.point(f)[0])
        thr = K / med * 1000.0
        row = {"max_num_seqs": M, "max_num_batched_tokens": K, "feasible": True,
               "predicted_median_ms": med, "predicted_q_ms": float(pred.quantile(f)[0]),
               "prob_meets_slo": float(pred.prob_below(f, T)[0]), "tokens_per_s": thr,
               "capped": capped}
        table.append(row)
        if best is None or thr > best["tokens_per_s"] * (1 + 1e-12):
            best = row
    return table, best


def _worst_case(pred: Predictor, M: int, K: int, T: float) -> dict[str, Any]:
    """The ``b <= M`` whose step at ``K`` tokens has the largest ``q``-quantile."""
    fb = {"B": np.arange(1, M + 1, dtype=float), "S": np.full(M, float(K))}
    qb = pred.quantile(fb)
    w = int(np.argmax(qb))
    return {"batch_size": w + 1, "predicted_q_ms": float(qb[w]),
            "prob_meets_slo": float(pred.prob_below({"B": [w + 1.0], "S": [float(K)]}, T)[0])}


def _chosen_reason(best: dict, wc: dict, q: float, T: float) -> str:
    """Why the chosen ``(M, K)`` meets the SLO, and a caution when a smaller step does not."""
    M, K = best["max_num_seqs"], best["max_num_batched_tokens"]
    reason = (f"max_num_seqs={M}, max_num_batched_tokens={K}: a full step is predicted at "
              f"{best['predicted_median_ms']:.4g} ms (median), {best['predicted_q_ms']:.4g} ms "
              f"({q:g}-quantile) <= SLO {T:g} ms; {best['tokens_per_s']:.4g} tokens/s per "
              "full step")
    if wc["predicted_q_ms"] > T:
        reason += (f"; caution: a step at the cap with only b={wc['batch_size']} request(s) is "
                   f"predicted at {wc['predicted_q_ms']:.4g} ms ({q:g}-quantile) > SLO "
                   "(cover='all_batch_sizes' guards against this)")
    return reason
