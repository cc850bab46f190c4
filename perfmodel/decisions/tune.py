"""Token budget as a request-level decision: ``max_num_batched_tokens`` and ``max_num_seqs``
that maximise goodput under TTFT / TPOT SLOs, by simulation, with an interval.

Problem
-------
The step-level rule (:func:`perfmodel.decisions.sla.recommend_token_budget`)
maximises the tokens per second of one full step under a step-time target; it
ignores queueing, prefill/decode interference and the requests' own
deadlines, and on real fits it ranks ``max_num_seqs = 1`` first, which
serialises every request.  Here each candidate ``(max_num_seqs,
max_num_batched_tokens)`` is judged by what its requests experience:

* objective ``'capacity'`` (default): the highest request rate (or
  concurrency) whose SLO attainment meets the target
  (:func:`perfmodel.decisions.capacity.capacity`'s search);
* objective ``'goodput'`` at a given ``load``: requests meeting the SLO per
  second (:func:`perfmodel.decisions.capacity.evaluate_load`).

The recommendation is the candidate with the best point objective (ties: the
smaller budget, then fewer sequences).  The interval repeats the evaluation
over ``replications`` draws of the step model (parameters, step noise and
arrivals, as in :mod:`perfmodel.decisions.capacity`), the *same* draw for every
candidate (common random numbers), and reports for the recommended
candidate the interval of its objective, the interval of its gain over the
``baseline`` configuration (paired by draw), and the share of draws in which
it is the best candidate.

Verification: ``tests/decisions/test_tune.py`` (a step model whose time grows
with the batch makes a small ``max_num_seqs`` lose under a rate it cannot
serve; the ranking agrees with independent :func:`evaluate_load` calls).
"""
from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from perfmodel._checks import check_choice, check_positive
from perfmodel._parallel import check_backend, map_tasks
from perfmodel.decisions.capacity import (
    StepModelDraw,
    _check_common,
    _one_search,
    _unit_arrivals,
    evaluate_load,
    parameter_draws,
    run_factors,
    run_level_text,
    with_limits,
)
from perfmodel.decisions.requests_workload import SLO, Workload
from perfmodel.decisions.simulate import EngineConfig
from perfmodel.errors import InputError
from perfmodel.stats.uncertainty import percentile_interval

__all__ = ["DEFAULT_SEQS", "DEFAULT_TOKENS", "tune_token_budget"]

DEFAULT_SEQS = (8, 16, 32, 64)
DEFAULT_TOKENS = (256, 512, 1024, 2048)


def _grid(seqs, tokens) -> list[tuple[int, int]]:
    cands = []
    for m in sorted({int(x) for x in seqs}):
        for k in sorted({int(x) for x in tokens}):
            if m >= 1 and k >= m:  # vLLM requires max_num_batched_tokens >= max_num_seqs
                cands.append((m, k))
    if not cands:
        raise InputError("no candidate with max_num_batched_tokens >= max_num_seqs >= 1 in the "
                         "grids")
    return cands


def _score(task, *, engines, workload, slo, mode, objective, load, max_load, rel_tol):
    """The objective of every candidate engine for one draw ``task = (model, arrival seed,
    starts)`` (``starts``: the point answers, where each capacity search starts)."""
    model, arrival_seed, starts = task
    u = _unit_arrivals(workload.n, arrival_seed) if mode == "rate" else None
    out = []
    for i, e in enumerate(engines):
        if objective == "goodput":
            out.append(evaluate_load(model, workload, slo, load, mode=mode, engine=e,
                                     unit_arrivals=u)["goodput_req_s"])
        else:
            start = starts[i] if starts is not None and starts[i] > 0 else 1.0
            out.append(float(_one_search(model, workload, slo, mode, e, max_load, rel_tol,
                                         arrival_seed, start)[0]))
    return np.array(out)


def tune_token_budget(fit, workload: Workload, slo: SLO, *, mode: str = "rate",
                      objective: str = "capacity", load: float | None = None,
                      max_num_seqs_grid=DEFAULT_SEQS, max_num_batched_tokens_grid=DEFAULT_TOKENS,
                      engine: EngineConfig | None = None, baseline: tuple[int, int] | None = None,
                      replications: int = 10, level: float = 0.9, boot_samples=None,
                      noise: bool = True, rel_tol: float = 0.05, max_load: float | None = None,
                      seed: int = 0, backend: str = "loky", n_jobs: int = 1,
                      scheduler: str | None = None, run_sd: float = 0.0) -> dict[str, Any]:
    """Choose ``(max_num_seqs, max_num_batched_tokens)`` by simulated goodput (module docstring).

    Parameters
    ----------
    fit : FitResult
    workload, slo, mode, engine, replications, level, boot_samples, noise,
    rel_tol, max_load, seed, run_sd : as :func:`perfmodel.decisions.capacity.capacity`
        (``engine`` supplies everything but the two limits)
    objective : ``'capacity'`` or ``'goodput'`` (needs ``load``)
    load : request rate (or concurrency) for ``objective='goodput'``
    max_num_seqs_grid, max_num_batched_tokens_grid : candidate values
    baseline : ``(max_num_seqs, max_num_batched_tokens)`` to compare with
        (default: those of ``engine``)
    backend, n_jobs, scheduler : where the ``replications`` run
        (:func:`perfmodel._parallel.map_tasks`; identical results on every backend)

    Returns
    -------
    dict with ``recommended`` (``max_num_seqs``, ``max_num_batched_tokens``,
    ``objective``, ``interval``, ``prob_best``), ``baseline`` (the same, and
    ``gain`` with its interval), ``table`` (one row per candidate),
    ``objective``, ``slo``, ``assumptions``.
    """
    mode, engine, level, R, rel_tol, max_load = _check_common(
        workload, slo, mode, engine, level, replications, rel_tol, max_load)
    objective = check_choice("objective", objective, ("capacity", "goodput"))
    check_backend(backend, scheduler)
    run_sd = check_positive("run_sd", run_sd, allow_zero=True)
    if objective == "goodput":
        if load is None:
            raise InputError("objective='goodput' needs load (a request rate or concurrency)")
        load = check_positive("load", load)
    cands = _grid(max_num_seqs_grid, max_num_batched_tokens_grid)
    base = (engine.max_num_seqs, engine.max_num_batched_tokens) if baseline is None else (
        int(baseline[0]), int(baseline[1]))
    if base not in cands:
        cands.append(base)
    engines = [with_limits(engine, m, k) for m, k in cands]

    task = partial(_score, engines=engines, workload=workload, slo=slo, mode=mode,
                   objective=objective, load=load, max_load=max_load, rel_tol=rel_tol)
    point = task((StepModelDraw(fit, noise=noise, seed=seed), seed, None))
    draws = np.empty((R, len(cands)))
    source = None
    if R > 0:
        thetas, source = parameter_draws(fit, R, seed + 1, boot_samples)
        factors = run_factors(R, run_sd, seed + 3000)
        # replication r: its own parameters, noise (seed + 1000 + r), run-level factor
        # and arrivals (seed + 2000 + r), the same for every candidate; independent of
        # the backend
        reps = ((StepModelDraw(fit, thetas[r], noise=noise, seed=seed + 1000 + r,
                               factor=float(factors[r])),
                 seed + 2000 + r, point) for r in range(R))
        out = map_tasks(task, reps, backend=backend, n_jobs=n_jobs, scheduler=scheduler,
                        total=R, desc="tune replications")
        for r, row in enumerate(out):
            draws[r] = row
    order = sorted(range(len(cands)), key=lambda i: (-point[i], cands[i][1], cands[i][0]))
    best, ib = cands[order[0]], order[0]
    jb = cands.index(base)
    def iv(x):
        if R == 0:
            return None
        lower, upper = percentile_interval(x, 1 - level)
        return {"level": level, "lower": float(lower), "upper": float(upper)}

    prob_best = None if R == 0 else float(np.mean(draws[:, ib] >= draws.max(axis=1) - 1e-12))
    unit = _unit(objective, mode)
    table = [{"max_num_seqs": m, "max_num_batched_tokens": k, "objective": float(point[i]),
              "interval": iv(draws[:, i]) if R else None}
             for i, (m, k) in enumerate(cands)]
    gain = None if R == 0 else iv(draws[:, ib] - draws[:, jb])
    return {
        "objective": {"name": objective, "unit": unit, "load": load, "mode": mode},
        "recommended": {"max_num_seqs": best[0], "max_num_batched_tokens": best[1],
                        "objective": float(point[ib]), "interval": iv(draws[:, ib]),
                        "prob_best": prob_best},
        "baseline": {"max_num_seqs": base[0], "max_num_batched_tokens": base[1],
                     "objective": float(point[jb]), "interval": iv(draws[:, jb]),
                     "gain": float(point[ib] - point[jb]), "gain_interval": gain},
        "table": table, "slo": slo.as_dict(),
        "assumptions": {"model": getattr(fit, "model_name", None),
                        "workload": workload.describe(), "engine": engine.as_dict(),
                        "parameters": source, "replications": R,
                        "run_level": run_level_text(run_sd),
                        "rule": "maximise the objective over the grid (ties: smaller budget, "
                                "then fewer sequences); the same draws for every candidate"},
    }


def _unit(objective: str, mode: str) -> str:
    if objective == "goodput":
        return "requests meeting the SLO per second"
    return "requests/s (highest rate meeting the SLO)" if mode == "rate" else (
        "concurrent requests (highest concurrency meeting the SLO)")
