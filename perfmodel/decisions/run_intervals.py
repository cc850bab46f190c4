"""Prediction intervals for whole real-client runs, with the run-level term.

Problem
-------
:func:`perfmodel.decisions.real_client.replay_run` replays a measured run's
requests with the fit's mean step time and gives one number per metric.  On
the later vLLM-CPU runs of ``data/vllm-serve`` these points miss the measured
p50 TPOT and latency by more than 10 % on a third of the runs, and always in
one direction: those runs' engines were a few per cent slower than the fitted
run (:func:`perfmodel.stats.run_level.run_speed_ratio`), and near saturation
the queues amplify that.  Whether a prediction holds is then a question for
an interval that carries the run-to-run change of the host's speed.

Method
------
:func:`replay_interval` replays the run ``replications`` times, each with its
own step model (:class:`perfmodel.decisions.capacity.StepModelDraw`:
parameters drawn from the fit, step noise on the fit's scale, and one
run-level factor ``exp(u)``, ``u ~ N(0, run_sd^2)``, for all steps), the
recorded arrivals and lengths unchanged, and returns the equal-tailed
``level`` interval of each request metric's p50 / p99 and of the SLO
attainment.  ``run_sd`` comes from runs the fit did not see:
:func:`series_run_spread` (every other run with a step log in the training
run's series, :func:`perfmodel.stats.run_level.run_level_spread`).
:func:`series_intervals` does this for every run of a series and says, per
run and metric, whether the measured value lies inside.
:func:`own_speed_errors` is a diagnostic, not a prediction: it replays each
run with its OWN speed ratio (from its own step log) as the factor, to show
how much of the point error the run's speed explains.

Verification
------------
``tests/decisions/test_run_intervals.py``: with a constant step model and no
noise the interval collapses to the replay's point; a larger ``run_sd``
widens it; on the committed series (when present) the measured p50s fall
inside more often with the run-level term than without.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perfmodel._checks import check_int_range, check_positive, check_probability
from perfmodel.data.requests import load_workload
from perfmodel.data.trace import read_trace
from perfmodel.decisions import real_client as rc
from perfmodel.decisions.capacity import StepModelDraw, parameter_draws, run_factors
from perfmodel.decisions.requests_workload import SLO
from perfmodel.decisions.simulate import simulate_closed_loop, simulate_open_loop
from perfmodel.decisions.simulate.results import latency_stats
from perfmodel.errors import InputError
from perfmodel.stats.run_level import run_level_spread
from perfmodel.stats.uncertainty import percentile_interval, share_below

__all__ = ["INTERVAL_METRICS", "interval_placement", "own_speed_errors", "replay_interval",
           "series_intervals", "series_run_spread"]

#: what :func:`series_intervals` checks per run (request metrics at p50, and the attainment)
INTERVAL_METRICS: tuple[str, ...] = ("ttft_ms_p50", "tpot_ms_p50", "latency_ms_p50",
                                     "tpot_ms_p99", "attainment")
#: distance between the base seeds of two runs of a series (independent draws per run)
RUN_SEED_STRIDE = 10_007


def replay_interval(fit, work: pd.DataFrame, engine, slo: SLO | None = None, *,
                    run_sd: float = 0.0, replications: int = 40, level: float = 0.9,
                    seed: int = 0, concurrency: int | None = None,
                    boot_samples=None) -> dict[str, Any]:
    """The ``level`` interval of a replayed run's request metrics (module docstring).

    Parameters
    ----------
    fit : FitResult (parameters, residual variance and scale are used)
    work : the run's requests (``prompt_tokens``, ``output_tokens``,
        ``arrival_s``; :func:`perfmodel.data.requests.load_workload`); with
        ``ttft_ms``, ``tpot_ms``, ``latency_ms`` the measured values are given beside
    engine : EngineConfig of the replay
    slo : SLO for the attainment interval (None: no attainment)
    run_sd : sd (log scale) of the run-level factor (0: none)
    replications : replays (>= 2)
    level : interval level
    seed : base seed (parameters ``seed + 1``, noise ``seed + 1000 + r``,
        run factors ``seed + 3000``)
    concurrency : None (the recorded arrivals, open loop) or C (a closed loop
        of C clients in the file's order)
    boot_samples : bootstrap parameter samples (default: the fit's covariance)

    Returns
    -------
    dict: ``level``, ``replications``, ``run_sd``, per metric of
    :data:`perfmodel.decisions.real_client.METRICS` and statistic (``mean``,
    ``p50``, ``p90``, ``p95``, ``p99``) ``{"lower", "upper", "measured", "pit"}``
    (measured and pit None without the measured columns; ``pit`` is the share
    of the replays below the measured value, ties half,
    :func:`perfmodel.stats.uncertainty.share_below`: uniform over many
    calibrated checks, so it shows where in its interval a value falls), and
    with ``slo`` ``attainment`` in the same form.
    """
    R = check_int_range("replications", replications, 2, integral_float=True)
    level = check_probability("level", level)
    run_sd = check_positive("run_sd", run_sd, allow_zero=True)
    seed = check_int_range("seed", seed, 0, integral_float=True)
    if slo is not None and not isinstance(slo, SLO):
        raise InputError(f"slo must be an SLO or None, got {type(slo).__name__}")
    missing = [c for c in ("prompt_tokens", "output_tokens", "arrival_s")
               if c not in getattr(work, "columns", ())]
    if missing:
        raise InputError(f"work lacks columns {missing} (a run's requests, load_workload)")
    thetas, _ = parameter_draws(fit, R, seed + 1, boot_samples)
    factors = run_factors(R, run_sd, seed + 3000)
    P, O = work["prompt_tokens"].to_numpy(), work["output_tokens"].to_numpy()
    draws: dict[tuple[str, str], list[float]] = {}
    for r in range(R):
        model = StepModelDraw(fit, thetas[r], noise=True, seed=seed + 1000 + r,
                              factor=float(factors[r]))
        if concurrency is None:
            sim = simulate_open_loop(model, prompt_tokens=P, output_tokens=O, engine=engine,
                                     arrival_times=work["arrival_s"].to_numpy(),
                                     keep_steps=False)
        else:
            sim = simulate_closed_loop(model, len(work), concurrency, P, O, engine=engine,
                                       keep_steps=False)
        for m, d in sim.latency_stats().items():
            for q, v in d.items():
                draws.setdefault((m, q), []).append(np.nan if v is None else v)
        if slo is not None:
            req = sim.requests
            ok = rc.attained(req["ttft_s"] * 1000.0, req["tpot_ms"], slo, req["e2e_s"] * 1000.0)
            draws.setdefault(("attainment", ""), []).append(float(ok.mean()))
    has = all(m in work.columns for m in rc.METRICS)
    meas = latency_stats(work["ttft_ms"], work["tpot_ms"], work["latency_ms"]) if has else {}
    out: dict[str, Any] = {"level": level, "replications": R, "run_sd": run_sd}
    for (m, q), v in draws.items():
        a = np.asarray(v, float)
        a = a[np.isfinite(a)]
        lower, upper = percentile_interval(a, 1 - level) if a.size else (None, None)
        iv = {"lower": None if lower is None else float(lower),
              "upper": None if upper is None else float(upper)}
        if m == "attainment":
            iv["measured"] = (float(rc.attained(work["ttft_ms"], work["tpot_ms"], slo,
                                                work["latency_ms"]).mean()) if has else None)
            out[m] = iv
        else:
            iv["measured"] = meas.get(m, {}).get(q)
            out.setdefault(m, {})[q] = iv
        iv["pit"] = (share_below(a, iv["measured"])
                     if a.size and iv["measured"] is not None else None)
    return out


def _fitted(series, train: str, train_series, slo):
    """``(root, same, slo, fit, overhead, delays)``: the series, whether the training run is
    in it, the SLO, and the fit of ``train`` with its step overhead and client round trip."""
    root = Path(series)
    if not root.is_dir():
        raise InputError(f"series {str(root)!r} is not a folder")
    troot = _train(series, train, train_series)
    slo = slo if isinstance(slo, SLO) else SLO.parse(slo)
    fit, steps, overhead = rc.fit_run(troot / train)
    delays = rc.client_delays(troot / train, steps, overhead)
    return root, troot.resolve() == root.resolve(), slo, fit, overhead, delays


def _train(series, train: str, train_series=None) -> Path:
    root = Path(train_series if train_series is not None else series)
    if not (root / train / "steps.csv").is_file():
        raise InputError(f"train {train!r}: no run with a steps.csv in {str(root)!r}")
    return root


def series_run_spread(train_series, train: str, extra_series=()) -> dict:
    """The run-level spread of the fit on run ``train``, from runs it did not see.

    Every run folder of ``train_series`` with a ``steps.csv``, except ``train``,
    and every such run folder of each folder in ``extra_series`` (named
    ``<series>/<run>``; the training run is skipped wherever it appears) is one
    run the fit did not see (:func:`perfmodel.stats.run_level.run_level_spread`).
    """
    root = _train(train_series, train)
    if isinstance(extra_series, (str, Path)):
        raise InputError("extra_series must be a list of series folders, not one path")
    extra = [Path(x) for x in extra_series]
    for x in extra:
        if not x.is_dir():
            raise InputError(f"extra_series: {str(x)!r} is not a folder")
    fit = rc.fit_run(root / train)[0]
    trained = (root / train).resolve()
    others = {}
    for series, prefix in ((root, ""), *((x, f"{x.name}/") for x in extra)):
        for d in sorted(series.iterdir()):
            if (d / "steps.csv").is_file() and d.resolve() != trained:
                others.setdefault(f"{prefix}{d.name}", read_trace(d / "steps.csv"))
    return run_level_spread(fit, others)


def series_intervals(series, train: str, *, train_series=None, run_sd: float = 0.0,
                     slo="ttft_p99=1000,tpot_p99=50", replications: int = 40,
                     level: float = 0.9, seed: int = 0) -> pd.DataFrame:
    """Per run of ``series``: measured p50s and attainment against their replay interval.

    The model is fitted on ``train`` (of ``train_series``, default ``series``)
    as in :func:`perfmodel.decisions.real_client.validate_series`, with its
    step overhead and client round trip.  Each run gets its own draws (base
    seed ``seed + RUN_SEED_STRIDE * i`` for the i-th run in name order), so the
    runs are independent checks.  Returns one row per run: ``run``,
    ``held_out``, and per key of :data:`INTERVAL_METRICS` ``<key> measured``,
    ``<key> lower``, ``<key> upper``, ``<key> inside`` (bool) and ``<key> pit``
    (the measured value's share of replays below it, :func:`replay_interval`).
    """
    root, same, slo, fit, overhead, delays = _fitted(series, train, train_series, slo)
    rows = []
    for i, d in enumerate(sorted(p for p in root.iterdir() if (p / "bench.json").is_file())):
        eng, closed = rc.replay_settings(d, overhead, delays)
        iv = replay_interval(fit, load_workload(d / "bench.json"), eng, slo, run_sd=run_sd,
                             replications=replications, level=level,
                             seed=seed + RUN_SEED_STRIDE * i, concurrency=closed)
        row: dict[str, Any] = {"run": d.name, "held_out": not (same and d.name == train)}
        for k in INTERVAL_METRICS:
            v = iv[k] if k == "attainment" else iv[k[:-4]][k[-3:]]
            m, lo, hi = v["measured"], v["lower"], v["upper"]
            row.update({f"{k} measured": m, f"{k} lower": lo, f"{k} upper": hi,
                        f"{k} inside": None not in (m, lo, hi) and lo <= m <= hi,
                        f"{k} pit": v["pit"]})
        rows.append(row)
    if not rows:
        raise InputError(f"series {str(root)!r} has no run folder (with a bench.json)")
    return pd.DataFrame(rows)


def interval_placement(intervals: pd.DataFrame, keys=INTERVAL_METRICS) -> pd.DataFrame:
    """Where the measured values of a series fall in their intervals, not only how often inside.

    An interval can cover often because it is wide while its centre is off:
    every measured value then sits on one side of its replays.  Per key of
    ``keys`` (columns ``<key> measured / lower / upper / inside / pit`` of
    :func:`series_intervals`) this counts the runs inside (``<key> inside``,
    the one definition), below and above the interval, and a sign test of the
    measured values against their replays: a run is in the lower half when
    fewer than half of its replays lie below its measured value (``pit`` <
    1/2), in the upper half when more do, and a tie when as many replays lie
    above as below (``pit`` = 1/2 exactly: the mid-rank share of
    :func:`~perfmodel.stats.uncertainty.share_below`; every replay equal to the
    measured value, as for a share within the SLO of 1.00 in every replay, is
    one).  Ties carry no sign and are left out of the test, which is the
    two-sided binomial p-value of the lower-half count among the untied runs
    against 1/2 (:func:`scipy.stats.binomtest`; NaN when every run is a tie).

    The p-value assumes the runs' signs independent.  Runs of one series share
    the fit and the series' speed, so they are not, and the p-value is
    anti-conservative: read it as a description of the count, and the median
    ``pit`` as the effect size.  Also returned: the median width of the
    intervals (``upper - lower``; relative to the interval's midpoint for the
    time metrics, in shares for the attainment).

    Returns one row per key: ``statistic``, ``n``, ``inside``, ``below``,
    ``above``, ``lower_half``, ``upper_half``, ``ties``, ``half_p``,
    ``median_pit``, ``median_width``, ``relative_width`` (bool: the width is
    relative).  Runs without a measured value or interval for a key are left
    out of that key's row.  Verified in ``tests/decisions/test_run_intervals.py``
    (hand-counted sides, halves and ties; the p-value against the binomial
    formula).
    """
    from scipy.stats import binomtest

    if not isinstance(intervals, pd.DataFrame):
        raise InputError(f"intervals must be the DataFrame of series_intervals, got "
                         f"{type(intervals).__name__}")
    keys = [keys] if isinstance(keys, str) else list(keys)
    rows = []
    for k in keys:
        cols = [f"{k} {c}" for c in ("measured", "lower", "upper", "pit", "inside")]
        missing = [c for c in cols if c not in intervals.columns]
        if missing:
            raise InputError(f"intervals lacks columns {missing} (series_intervals' output)")
        d = intervals[cols[:4]].astype(float)
        keep = d.notna().all(axis=1).to_numpy()
        if not keep.any():
            raise InputError(f"intervals has no run with a measured value and interval for {k!r}")
        m, lo, hi, pit = (d[c].to_numpy()[keep] for c in cols[:4])
        inside = intervals[cols[4]].to_numpy()[keep].astype(bool)
        width = hi - lo
        relative = k != "attainment"
        if relative:
            width = width / ((hi + lo) / 2.0)
        n_low, n_high = int((pit < 0.5).sum()), int((pit > 0.5).sum())
        signed = n_low + n_high
        rows.append({"statistic": k, "n": len(m), "inside": int(inside.sum()),
                     "below": int((m < lo).sum()), "above": int((m > hi).sum()),
                     "lower_half": n_low, "upper_half": n_high, "ties": len(m) - signed,
                     "half_p": float(binomtest(n_low, signed, 0.5).pvalue) if signed else np.nan,
                     "median_pit": float(np.median(pit)), "median_width": float(np.median(width)),
                     "relative_width": relative})
    return pd.DataFrame(rows)


def own_speed_errors(series, train: str, *, train_series=None,
                     slo="ttft_p99=1000,tpot_p99=50") -> pd.DataFrame:
    """Diagnostic: each run replayed at its own measured speed, and the p50 errors left.

    The fit of ``train`` (as in :func:`series_intervals`) is scaled, for each
    run of ``series`` with a step log, by that run's
    :func:`~perfmodel.stats.run_level.run_speed_ratio` (which needs the run's
    own steps: this is NOT a prediction of the run, it says how much of the
    replay's error is the run's speed).  Returns one row per run: ``run``,
    ``speed_ratio`` and per request metric ``<metric> p50 error`` (relative).
    """
    from perfmodel.stats.run_level import run_speed_ratio

    root, _, slo, fit, overhead, delays = _fitted(series, train, train_series, slo)
    rows = []
    for d in sorted(p for p in root.iterdir() if (p / "steps.csv").is_file()
                    and (p / "bench.json").is_file()):
        ratio = run_speed_ratio(fit, read_trace(d / "steps.csv"))
        eng, closed = rc.replay_settings(d, overhead, delays)
        res = rc.replay_run(StepModelDraw(fit, noise=False, factor=ratio),
                            load_workload(d / "bench.json"), eng, slo, concurrency=closed)
        rows.append({"run": d.name, "speed_ratio": ratio,
                     **{f"{m} p50 error": res[f"{m}_p50"]["error"] for m in rc.METRICS}})
    if not rows:
        raise InputError(f"series {str(root)!r} has no run with a steps.csv and a bench.json")
    return pd.DataFrame(rows)
