"""Request-level capacity under TTFT / TPOT SLOs, with an interval, by simulation.

Problem
-------
The question operators ask is not about one step but about requests: what
request rate (open loop) or how many concurrent clients (closed loop) can this
deployment take while, e.g., 99 % of requests see TTFT <= 500 ms and
TPOT <= 50 ms?  :func:`capacity` answers it with the continuous-batching
simulator (:mod:`perfmodel.decisions.simulate`) driven by a fitted step model.

Method
------
1. *Attainment at a load* (:func:`evaluate_load`): simulate the workload's
   requests (:class:`perfmodel.decisions.requests_workload.Workload`) at a
   request rate (Poisson arrivals, the unit-rate schedule of the replication
   divided by the rate, so that every rate sees the same arrival pattern:
   common random numbers) or a concurrency (closed loop); the attainment is the
   fraction of requests meeting the SLO, the goodput those requests per second.
2. *Search*: the largest load whose attainment is >= the target, by doubling
   from 1 until the SLO fails, then bisection (on a log scale for rates, on
   integers for concurrency) to a relative tolerance ``rel_tol``.  It assumes
   attainment falls with load; with step noise it can be locally
   non-monotone, and the search returns one crossing.  Searches stop at
   ``max_load`` (reported as ``capped``); a workload that misses the SLO even
   at the smallest load gives 0 (``feasible`` False).
3. *Interval*: ``replications`` searches, each with its own step model and
   randomness: parameters drawn from bootstrap samples of the fit
   (``boot_samples``) or, without them, from the normal approximation
   ``N(theta_hat, C)`` of the fit covariance (unidentified parameters, and
   parameters at a bound by :func:`perfmodel.core.lsq_result.at_bound`, held
   at their estimates: the others drawn from their conditional normal, as in
   :class:`perfmodel.stats.predictive.PredictiveDistribution`;
   draws clipped to the model's bounds); step noise ``inverse(mu, e)`` on
   the fit's scale with ``e ~ N(0, rss/dof)`` (the step part of the same
   predictive distribution; :mod:`perfmodel.core.scale`); with ``run_sd`` > 0
   a run-level factor ``exp(u)``, ``u ~ N(0, run_sd^2)``, on every step of the
   replication (the host's speed from run to run,
   :mod:`perfmodel.stats.run_level`: step noise alone averages away over a run
   and gives too narrow an interval); a new arrival schedule (or, with
   ``unit_arrivals``, one given schedule for every replication: a measured
   run's own arrivals, :func:`unit_schedule`); and, with
   ``resample_requests``, a new request sample: ``n`` (prompt, output) pairs
   drawn with replacement from the workload's (:meth:`Workload.resample`),
   for a workload that is itself a sample of the traffic (a benchmark's
   prompts, a day's log) rather than the exact requests to be served.  The
   interval is the pair of empirical ``(1 -+ level)/2`` quantiles of these
   answers; their median is reported beside the point answer.  The replications are independent (each seeded
   by its index) and run through :func:`perfmodel._parallel.map_tasks`
   (``backend``: local processes or a Dask cluster; identical answers on
   every backend).  The point answer uses the fitted parameters
   with step noise and the base seed.

Not modelled (the simulator's limits): prefix caching, asynchronous
scheduling, speculative decoding, client and network time; KV-cache
preemption only when ``engine.num_gpu_blocks`` is set; the per-step overhead outside the model run is
``EngineConfig.step_overhead_ms`` (estimate it from a server step log, e.g.
``step_ms - duration_ms + gap_ms`` of :mod:`perfmodel.data.collect.vllm_plugin`).

Verification
------------
``tests/decisions/test_capacity.py``: with a constant 10 ms step and
``max_num_seqs = 1`` the closed-loop answer equals the hand-computed
``C* = (TTFT_limit - 10 ms) / 20 ms + 1``; a TPOT limit above/below the step
time gives a capped/infeasible answer; the rate found meets the target and
``(1 + rel_tol)`` times it does not, re-simulated independently.
"""
from __future__ import annotations

import math
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np

from perfmodel._checks import check_choice, check_int_range, check_positive, check_probability
from perfmodel._parallel import check_backend, map_tasks
from perfmodel.core.lsq_result import within_se_of_bound
from perfmodel.core.scale import scale_of
from perfmodel.decisions.requests_workload import SLO, Workload
from perfmodel.decisions.simulate import EngineConfig, simulate_closed_loop, simulate_open_loop
from perfmodel.errors import InputError
from perfmodel.stats.uncertainty import percentile_interval, quantile_mc_range

__all__ = ["MODES", "StepModelDraw", "capacity", "evaluate_load", "parameter_draws", "run_factors",
           "unit_schedule"]

MODES = ("rate", "concurrency")
DEFAULT_MAX_RATE = 1e4
_MIN_RATE = 1e-4
_CURVE = (0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0)


# ---------------------------------------------------------------------------
# the step model of one replication
# ---------------------------------------------------------------------------

class StepModelDraw:
    """A step model with parameters ``theta`` and, optionally, step noise on the fit's scale.

    ``predict(features)`` returns ``factor * inverse(mu(theta), e)`` with ``e ~ N(0,
    rss/dof)`` drawn from its own generator (``seed``; :meth:`reset` restarts it so
    that every load of one search sees the same noise sequence); ``factor`` is
    the run-level speed of the replication (:mod:`perfmodel.stats.run_level`;
    1: the fitted run's).
    """

    def __init__(self, fit, theta=None, *, noise: bool = True, seed: int = 0,
                 factor: float = 1.0):
        for a in ("model", "values", "rss", "dof"):
            if not hasattr(fit, a):
                raise InputError(f"intervals and step noise need a FitResult, got "
                                 f"{type(fit).__name__}")
        self.fit, self.model = fit, fit.model
        self.theta = np.asarray(fit.values if theta is None else theta, float)
        self.scale = scale_of(fit)
        self.sd = math.sqrt(float(fit.rss) / int(fit.dof)) if noise and fit.dof > 0 else 0.0
        self.seed = int(seed)
        self.factor = check_positive("factor", factor)
        self.reset()

    def reset(self) -> None:
        self.rng = np.random.default_rng(self.seed)

    def predict(self, feats) -> np.ndarray:
        mu = np.asarray(self.model.predict(self.theta, feats), float)
        if self.sd > 0:
            mu = self.scale.inverse(np.maximum(mu, 1e-9),
                                    self.rng.normal(0.0, self.sd, mu.shape))
        return np.maximum(mu * self.factor, 1e-6)


def run_factors(n: int, run_sd: float, seed: int) -> np.ndarray:
    """``n`` run-level speed factors ``exp(u)``, ``u ~ N(0, run_sd^2)`` (all 1 when ``run_sd`` is 0)."""
    if run_sd == 0:
        return np.ones(int(n))
    return np.exp(np.random.default_rng(seed).normal(0.0, run_sd, int(n)))


def parameter_draws(fit, n: int, seed: int = 0, boot_samples=None) -> tuple[np.ndarray, str]:
    """``n`` parameter vectors for the interval (module docstring, step 3) and their source."""
    from perfmodel.stats.predictive import _delta_cov, _samples

    n = check_int_range("replications", n, 1, integral_float=True)
    rng = np.random.default_rng(seed)
    if boot_samples is not None:
        S = _samples(fit, boot_samples)
        return S[rng.integers(0, len(S), n)], f"bootstrap samples of the fit ({len(S)} rows)"
    C = _delta_cov(fit)
    theta = np.asarray(fit.values, float)
    lo, hi = fit.model.lower, fit.model.upper
    # a parameter the fit counts at a bound (perfmodel.core.lsq_result.at_bound: closer to it
    # than a share of its standard error, also where the solver stopped a hair inside it) is
    # held at its estimate: drawn, it would be clipped in about half of the replications and the
    # clip breaks its correlation with the others (TPOT intervals up to 10^7 ms once, for
    # tau_0 = 1e-6 + 4e-8 ms with a standard error of 38 ms). Held = conditioned on its
    # estimate: the conditional covariance of the others (the Schur complement), which is the
    # fit's own covariance where the fit left the parameter out of it; the rule is applied to the
    # covariance given too, for a fit whose covariance still holds such a parameter
    # (with its conditional standard deviation, 1 / sqrt of the precision's diagonal)
    drawn = np.diag(C) > 0
    cond_sd = np.zeros(theta.size)
    if drawn.any():
        prec = np.linalg.pinv(C[np.ix_(drawn, drawn)])
        cond_sd[drawn] = 1.0 / np.sqrt(np.clip(np.diag(prec), 1e-300, None))
    flagged = np.isin(np.asarray(fit.param_names), list(getattr(fit, "at_bound", [])))
    near = (flagged | within_se_of_bound(theta, lo, hi, cond_sd)) & drawn
    if near.any():
        C = C - C[:, near] @ np.linalg.pinv(C[np.ix_(near, near)]) @ C[near, :]
        C[near, :] = 0.0
        C[:, near] = 0.0
    draws = rng.multivariate_normal(theta, C, size=n, method="eigh", check_valid="ignore")
    return (np.clip(draws, lo, hi),
            ("normal approximation N(theta_hat, covariance) of the fit, parameters at a bound "
             "held, clipped to the bounds"))


# ---------------------------------------------------------------------------
# one load
# ---------------------------------------------------------------------------

def _unit_arrivals(n: int, seed: int) -> np.ndarray:
    gaps = np.random.default_rng(seed).exponential(1.0, n - 1)
    return np.concatenate([[0.0], np.cumsum(gaps)])


def unit_schedule(arrival_s, rate: float) -> np.ndarray:
    """A measured run's arrival times as a unit-rate schedule for :func:`capacity`.

    Problem: to ask what capacity the model gives for the exact requests and
    arrivals of one measured open-loop run (not a fresh Poisson schedule), the
    run's arrival times must be rescaled so that the search's rate ``x``
    reproduces them at the run's own rate.  Returns ``(arrival_s -
    arrival_s[0]) * rate``: divided by ``rate`` it gives back the measured
    schedule (shifted to start at 0), divided by another rate the same
    pattern stretched or compressed.

    Parameters
    ----------
    arrival_s : arrival times (s) of the run's requests, non-decreasing, finite
    rate : the run's nominal request rate (req/s), e.g. ``--request-rate``
    """
    a = np.asarray(arrival_s, dtype=float)
    if a.ndim != 1 or a.size < 1:
        raise InputError(f"arrival_s must be a 1-D array of arrival times, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise InputError("arrival_s must be finite")
    if np.any(np.diff(a) < 0):
        raise InputError("arrival_s must be non-decreasing (the order the requests arrived in)")
    rate = check_positive("rate", rate)
    return (a - a[0]) * rate


def _check_unit_arrivals(u, n: int) -> np.ndarray:
    a = np.asarray(u, dtype=float)
    if a.ndim != 1 or a.size != n:
        raise InputError(f"unit_arrivals must hold one arrival time per request ({n}), "
                         f"got shape {a.shape}")
    if not np.all(np.isfinite(a)) or np.any(a < 0) or np.any(np.diff(a) < 0):
        raise InputError("unit_arrivals must be finite, >= 0 and non-decreasing")
    return a


def evaluate_load(model, workload: Workload, slo: SLO, load: float, *, mode: str = "rate",
                  engine: EngineConfig | None = None, arrival_seed: int = 0,
                  unit_arrivals=None) -> dict[str, Any]:
    """Simulate ``workload`` at one load and score it against ``slo``.

    Parameters
    ----------
    model : step model (``.predict``); a :class:`StepModelDraw` is reset first
    workload, slo : what is served and what it must meet
    load : request rate (req/s, ``mode='rate'``) or concurrency (``'concurrency'``)
    engine : EngineConfig of the simulated server
    arrival_seed / unit_arrivals : the unit-rate Poisson schedule (rate mode)

    Returns
    -------
    dict: ``load``, ``attainment``, ``goodput_req_s``, ``request_throughput_req_s``,
    ``output_throughput_tok_s``, ``p50``/``p99`` of ``ttft_ms``, ``tpot_ms``, ``e2e_ms``
    """
    mode = check_choice("mode", mode, MODES)
    engine = EngineConfig() if engine is None else engine
    if hasattr(model, "reset"):
        model.reset()
    P, O = workload.prompt_tokens, workload.output_tokens
    if mode == "rate":
        rate = check_positive("rate", load)
        u = _unit_arrivals(workload.n, arrival_seed) if unit_arrivals is None else unit_arrivals
        r = simulate_open_loop(model, prompt_tokens=P, output_tokens=O, arrival_times=u / rate,
                               engine=engine, keep_steps=False)
    else:
        c = check_int_range("concurrency", load, 1, integral_float=True)
        r = simulate_closed_loop(model, workload.n, c, P, O, engine=engine, keep_steps=False)
    req = r.requests
    met = slo.met(req)
    mk = r.makespan_s
    out = {"load": float(load), "attainment": float(met.mean()),
           "goodput_req_s": float(met.sum() / mk), "request_throughput_req_s": len(req) / mk,
           "output_throughput_tok_s": r.output_throughput_tok_s}
    for name, col, f in (("ttft_ms", "ttft_s", 1e3), ("tpot_ms", "tpot_ms", 1.0),
                         ("e2e_ms", "e2e_s", 1e3)):
        v = req[col].to_numpy(float) * f
        v = v[np.isfinite(v)]
        out[f"p50_{name}"] = float(np.median(v)) if v.size else None
        out[f"p99_{name}"] = float(np.quantile(v, 0.99)) if v.size else None
    return out


# ---------------------------------------------------------------------------
# the search
# ---------------------------------------------------------------------------

def _double(ok, lo, cap):
    """From a passing ``lo``, double until a load fails or ``cap`` is reached.

    Returns ``(lo, hi)`` (``hi`` the first failing load) or ``(cap, None)`` when
    every load up to ``cap`` passes.  Shared by the rate and concurrency searches.
    """
    while True:
        if lo >= cap:
            return cap, None
        x = min(lo * 2, cap)
        if not ok(x):
            return lo, x
        lo = x


def _search(passes, mode: str, max_load: float, rel_tol: float, start: float = 1.0):
    """Largest load that passes: (answer, capped, number of evaluations)."""
    evals = 0

    def ok(x):
        nonlocal evals
        evals += 1
        return passes(x)

    if mode == "rate":
        x = min(start, max_load)
        if ok(x):
            lo, hi = _double(ok, x, max_load)
            if hi is None:
                return max_load, True, evals
        else:
            hi = x
            while True:
                x = hi / 2.0
                if x < _MIN_RATE:
                    return 0.0, False, evals
                if ok(x):
                    lo = x
                    break
                hi = x
        while hi / lo > 1.0 + rel_tol:
            mid = math.sqrt(lo * hi)
            if ok(mid):
                lo = mid
            else:
                hi = mid
        return lo, False, evals
    cap = int(max_load)
    if not ok(1):
        return 0, False, evals
    lo, hi = _double(ok, 1, cap)
    if hi is None:
        return cap, True, evals
    while hi - lo > max(1, int(rel_tol * lo)):
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo, False, evals


def _one_search(model, workload, slo, mode, engine, max_load, rel_tol, arrival_seed,
                start=1.0, unit_arrivals=None):
    u = None
    if mode == "rate":
        u = _unit_arrivals(workload.n, arrival_seed) if unit_arrivals is None else unit_arrivals

    def passes(x):
        e = evaluate_load(model, workload, slo, x, mode=mode, engine=engine, unit_arrivals=u)
        return e["attainment"] >= slo.attainment

    return _search(passes, mode, max_load, rel_tol, start)


def _replication(task, *, fit, noise, seed, search):
    """One replication of the interval: ``task = (r, theta_r, factor_r)`` -> (answer, evaluations).

    Everything random in it is seeded by ``r`` (its step noise by ``seed + 1000 + r``,
    its arrivals by ``seed + 2000 + r``, its request sample, when resampled, by
    ``seed + 4000 + r``; its parameters and run factor are drawn before; a
    given ``unit_arrivals`` replaces its arrivals), so the
    answers do not depend on where or in which order the replications run
    (:func:`perfmodel._parallel.map_tasks`).
    """
    r, theta, factor = task
    m = StepModelDraw(fit, theta, noise=noise, seed=seed + 1000 + r, factor=factor)
    work = search["workload"]
    if search.get("resample_requests"):
        work = work.resample(work.n, seed + 4000 + r)
    a, _, k = _one_search(m, work, search["slo"], search["mode"],
                          search["engine"], search["max_load"], search["rel_tol"],
                          seed + 2000 + r, start=search["start"],
                          unit_arrivals=search.get("unit_arrivals"))
    return a, k


def _check_common(workload, slo, mode, engine, level, replications, rel_tol, max_load):
    if not isinstance(workload, Workload):
        raise InputError(f"workload must be a Workload, got {type(workload).__name__}")
    if not isinstance(slo, SLO):
        raise InputError(f"slo must be an SLO, got {type(slo).__name__}")
    mode = check_choice("mode", mode, MODES)
    engine = EngineConfig() if engine is None else engine
    if not isinstance(engine, EngineConfig):
        raise InputError(f"engine must be an EngineConfig, got {type(engine).__name__}")
    if engine.step_noise_sd:
        raise InputError("engine.step_noise_sd must be 0: the step noise comes from the fit")
    level = check_probability("level", level)
    replications = check_int_range("replications", replications, 0, integral_float=True)
    rel_tol = check_positive("rel_tol", rel_tol)
    if max_load is None:
        max_load = DEFAULT_MAX_RATE if mode == "rate" else workload.n
    max_load = check_positive("max_load", max_load)
    if mode == "concurrency":
        max_load = max(1, min(int(max_load), workload.n))
    return mode, engine, level, replications, rel_tol, max_load


def capacity(fit, workload: Workload, slo: SLO, *, mode: str = "rate",
             engine: EngineConfig | None = None, replications: int = 20, level: float = 0.9,
             boot_samples=None, noise: bool = True, rel_tol: float = 0.02,
             max_load: float | None = None, seed: int = 0, backend: str = "loky",
             n_jobs: int = 1, scheduler: str | None = None,
             run_sd: float = 0.0, resample_requests: bool = False,
             unit_arrivals=None) -> dict[str, Any]:
    """Highest request rate / concurrency whose simulated SLO attainment meets the target.

    Parameters
    ----------
    fit : FitResult (a plain ``.predict`` model works with ``replications=0, noise=False``)
    workload, slo : see :mod:`perfmodel.decisions.requests_workload`
    mode : ``'rate'`` (open loop, Poisson) or ``'concurrency'`` (closed loop)
    engine : EngineConfig (scheduler limits, policy, ``step_overhead_ms``)
    replications : searches for the interval (0: no interval)
    level : interval level
    boot_samples : (n_boot, p) bootstrap parameter samples (default: normal approximation)
    noise : draw step noise from the fit's residual variance
    rel_tol : relative precision of the rate (concurrency: of the integer)
    max_load : search cap (default 1e4 req/s, or the number of requests)
    seed : base seed (arrivals, noise, parameter draws)
    backend, n_jobs, scheduler : where the ``replications`` independent searches
        run (:func:`perfmodel._parallel.map_tasks`: ``'loky'`` local processes,
        ``n_jobs=1`` in this process; ``'dask'`` a Dask cluster at ``scheduler`` or
        a LocalCluster); the answer is the same on every backend (each
        replication is seeded by its index)
    run_sd : sd (log scale) of the run-level term: each replication runs all
        its steps ``exp(u)`` times slower, ``u ~ N(0, run_sd^2)`` (the host's
        speed from run to run; estimate it from the step logs of runs the fit
        did not see with :func:`perfmodel.stats.run_level.run_level_spread`).
        0 (default): no run-level term, the interval is then for a run as fast
        as the fitted one
    resample_requests : each replication serves ``workload.n`` requests drawn
        with replacement from the workload's (module docstring, step 3): the
        interval then carries the sampling of the requests too (False: every
        replication serves exactly the workload's requests)
    unit_arrivals : arrival times of the workload's requests at a mean rate of
        one per second (rate mode only), used by the point search and every
        replication instead of a new Poisson schedule; divided by each rate
        searched.  :func:`unit_schedule` makes it from a measured run, whose
        requests are then the workload: the answer for that run's exact
        requests and arrivals.  None (default): Poisson schedules

    Returns
    -------
    dict with ``mode``, ``max_rate`` or ``max_concurrency``, ``feasible``,
    ``capped``, ``interval``, ``slo``, ``attainment_curve`` (one dict per load,
    :func:`evaluate_load`), ``assumptions`` (model, workload, engine, arrivals,
    step noise) and ``search``.  ``interval`` (None without replications) holds
    ``level``, ``lower``, ``upper``, ``median`` (of the replications' answers),
    ``replications``, ``values``, ``sources`` and ``lower_mc_range`` /
    ``upper_mc_range``: how far another set of as many replications could
    move each end (the bracketing order statistics at 95 %,
    :func:`perfmodel.stats.uncertainty.quantile_mc_range`; with 40
    replications the 5 % end's range runs from the lowest to the sixth lowest
    answer).
    """
    mode, engine, level, R, rel_tol, max_load = _check_common(
        workload, slo, mode, engine, level, replications, rel_tol, max_load)
    seed = check_int_range("seed", seed, 0, integral_float=True)
    run_sd = check_positive("run_sd", run_sd, allow_zero=True)
    if not isinstance(resample_requests, (bool, np.bool_)):
        raise InputError(f"resample_requests must be True or False, got {resample_requests!r}")
    if unit_arrivals is not None:
        if mode != "rate":
            raise InputError("unit_arrivals needs mode='rate' (a closed loop has no schedule)")
        if resample_requests:
            raise InputError("unit_arrivals belong to the workload's requests: they cannot be "
                             "combined with resample_requests")
        unit_arrivals = _check_unit_arrivals(unit_arrivals, workload.n)
    check_backend(backend, scheduler)
    is_fit = hasattr(fit, "rss") and hasattr(fit, "values")
    if (R > 0 or noise) and not is_fit:
        raise InputError("intervals and step noise need a FitResult; pass replications=0 and "
                         "noise=False for a plain model")
    point_model = StepModelDraw(fit, noise=noise, seed=seed) if is_fit else fit
    answer, capped, n_eval = _one_search(point_model, workload, slo, mode, engine, max_load,
                                         rel_tol, seed, unit_arrivals=unit_arrivals)
    interval = None
    source = None
    if R > 0:
        thetas, source = parameter_draws(fit, R, seed + 1, boot_samples)
        search = {"workload": workload, "slo": slo, "mode": mode, "engine": engine,
                  "max_load": max_load, "rel_tol": rel_tol,
                  "start": answer if answer > 0 else 1.0,
                  "resample_requests": bool(resample_requests),
                  "unit_arrivals": unit_arrivals}
        factors = run_factors(R, run_sd, seed + 3000)
        task = partial(_replication, fit=fit, noise=noise, seed=seed, search=search)
        out = map_tasks(task, [(r, thetas[r], factors[r]) for r in range(R)], backend=backend, n_jobs=n_jobs,
                        scheduler=scheduler, desc="capacity replications")
        vals = [a for a, _ in out]
        n_eval += sum(k for _, k in out)
        lower, upper = percentile_interval(vals, 1 - level)
        mc = {e: [float(v) for v in quantile_mc_range(vals, q)]
              for e, q in (("lower", (1 - level) / 2), ("upper", (1 + level) / 2))}
        interval = {"level": level, "lower": float(lower), "upper": float(upper),
                    "median": float(np.median(vals)), "replications": R,
                    "lower_mc_range": mc["lower"], "upper_mc_range": mc["upper"],
                    "values": [float(v) for v in vals],
                    "sources": {"parameters": source,
                                "step_noise": _noise_text(point_model) if noise else "off",
                                "arrivals": _arrivals_text(mode, unit_arrivals, True),
                                "run_level": run_level_text(run_sd),
                                "requests": _requests_text(workload, resample_requests)}}
    curve = _curve(point_model, workload, slo, mode, engine, answer, max_load, seed,
                   unit_arrivals)
    key = "max_rate" if mode == "rate" else "max_concurrency"
    return {
        "mode": mode, key: answer, "feasible": answer > 0, "capped": capped,
        "interval": interval, "slo": slo.as_dict(), "attainment_curve": curve,
        "assumptions": {**_assumptions(fit, workload, engine, mode, noise, point_model),
                        "arrivals": _arrivals_text(mode, unit_arrivals, False),
                        "run_level": run_level_text(run_sd)},
        "search": {"rel_tol": rel_tol, "max_load": max_load, "evaluations": n_eval,
                   "rule": "doubling from 1, then bisection on the attainment target"},
    }


def run_level_text(run_sd: float) -> str:
    """How a decision's interval treats the run-level term, for its JSON ``assumptions``."""
    if run_sd == 0:
        return ("none: every replication runs at the fitted run's speed (the interval leaves "
                "out the run-to-run change of the host's speed)")
    return (f"one factor exp(u) per replication on every step, u ~ N(0, {run_sd:.3g}^2)")


def _requests_text(workload: Workload, resample: bool) -> str:
    """What the interval's replications serve, for its ``sources``."""
    if resample:
        return (f"{workload.n} requests drawn with replacement from the workload's {workload.n} "
                "per replication (the request sample's own uncertainty)")
    return f"the workload's {workload.n} requests in every replication (not resampled)"


def _noise_text(model) -> str:
    if not isinstance(model, StepModelDraw) or model.sd == 0:
        return "off"
    return (f"inverse(mu, e) on the fit's {model.scale.name} scale, e ~ N(0, {model.sd:.3g}^2) "
            "(rss/dof), one draw per step")


def _arrivals_text(mode: str, unit_arrivals, per_replication: bool) -> str:
    """The arrival schedule a capacity answer used, for its ``assumptions``/``sources``."""
    if mode != "rate":
        return "closed loop: each finish issues the next request"
    if unit_arrivals is not None:
        return ("the given schedule (unit_arrivals) divided by the rate, the same in every "
                "replication")
    if per_replication:
        return "a new Poisson schedule per replication"
    return "Poisson, the unit-rate schedule of the seed divided by the rate"


def _curve(model, workload, slo, mode, engine, answer, max_load, seed, unit_arrivals=None):
    if mode == "rate":
        base = answer if answer > 0 else _MIN_RATE * 100
        loads = sorted({min(base * f, max_load) for f in _CURVE})
    else:
        base = max(int(answer), 1)
        loads = sorted({min(max(1, round(base * f)), int(max_load)) for f in _CURVE})
    return [evaluate_load(model, workload, slo, x, mode=mode, engine=engine, arrival_seed=seed,
                          unit_arrivals=unit_arrivals)
            for x in loads]


def _assumptions(fit, workload, engine, mode, noise, model) -> dict[str, Any]:
    prov = getattr(fit, "provenance", {}) or {}
    return {
        "model": getattr(fit, "model_name", type(fit).__name__),
        "fit_trace": prov.get("trace"),
        "workload": workload.describe(),
        "engine": engine.as_dict(),
        "step_noise": _noise_text(model) if noise else "off",
        "not_modelled": "prefix caching, asynchronous scheduling, speculative decoding, client "
                        "and network time"
                        + ("" if engine.num_gpu_blocks else "; KV-cache limits and preemption "
                           "(no num_gpu_blocks given)"),
    }


def with_limits(engine: EngineConfig, max_num_seqs: int, max_num_batched_tokens: int):
    """``engine`` with other scheduler limits (checked by EngineConfig)."""
    return replace(engine, max_num_seqs=max_num_seqs,
                   max_num_batched_tokens=max_num_batched_tokens)
