"""Request-level validation against the real client: `vllm serve` + `vllm bench serve`.

Problem
-------
A step model is only useful for decisions if the requests it is meant to
serve come out as predicted.  A *series* is a folder of runs collected by
``scripts/collect_vllm_serve.sh``: one folder per run with the engine-side
step log ``steps.csv``, the client's ``bench.json`` (``vllm bench serve
--save-result --save-detailed``) and ``meta.json`` (the server command).
:func:`validate_series` fits the model of record
(:func:`perfmodel.core.model.default_for`) on the step log of ONE run,
estimates the per-step time outside the model run from that same log
(:func:`~perfmodel.decisions.simulate.validation.estimate_step_overhead`,
consecutive step starts) and the client round trip (:func:`client_delays`:
the delay from a request's send to the scheduler, and from a token's step to
the client; the step log and the client share a clock), and for every other run replays the client's own
requests through the simulator with the run's engine limits: lengths from
``bench.json``; an open-loop run (a finite ``request_rate``) with the
recorded arrival times, a closed-loop run (``--request-rate inf
--max-concurrency C``) as C clients that re-issue the next request when one
finishes (after the response delay and the intake).  Measured timings of the
held-out runs are only compared with, never fitted to.  It
also asks :func:`perfmodel.decisions.capacity.capacity` for the highest
request rate meeting the SLO (with its interval), to compare with the rates
at which the measured runs met or missed it.

The paper items are built from the result by one function each:
:func:`error_table` (per held-out run, measured and predicted TTFT / TPOT /
latency p50 and p99 and the errors), :func:`repeat_spread` (run-to-run
spread of same-seed repeats), :func:`capacity_check` (predicted capacity
against measured attainment per rate) and :func:`budget_table` (vLLM's
default limits against a tuned budget).

Checked in ``tests/decisions/test_real_client.py`` against a hand-built
series (a constant step model: TTFT and TPOT by hand) and, when present,
against the committed series ``data/vllm-serve/llama-small-20261126``.
"""
from __future__ import annotations

import json
import math
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perfmodel._checks import check_positive
from perfmodel.core.fit import fit_model
from perfmodel.core.model import default_for
from perfmodel.data.requests import load_workload
from perfmodel.data.trace import read_trace
from perfmodel.data.trace_lists import parse_int_list
from perfmodel.decisions.capacity import capacity
from perfmodel.decisions.requests_workload import SLO, Workload
from perfmodel.decisions.simulate import EngineConfig, simulate_closed_loop, simulate_open_loop
from perfmodel.decisions.simulate.results import latency_stats
from perfmodel.decisions.simulate.validation import estimate_step_overhead
from perfmodel.errors import InputError

__all__ = ["METRICS", "VLLM_CPU_SERVE_DEFAULTS", "attained", "budget_replicates", "budget_table",
           "capacity_check", "client_delays", "client_label", "client_loop", "error_table",
           "estimate_client_delays", "failure_point_verdict", "fit_run", "goodput",
           "open_loop_runs", "repeat_spread", "replay_run", "replay_settings", "run_limits",
           "validate_series"]

#: request metrics compared, each at p50 and p99
METRICS: tuple[str, ...] = ("ttft_ms", "tpot_ms", "latency_ms")
QUANTILES: tuple[str, ...] = ("p50", "p99")

#: vLLM 0.32's defaults for `vllm serve` on a CPU with one worker (its
#: ``EngineArgs.get_batch_defaults``: OPENAI_API_SERVER, world size 1), used when a
#: run's server command sets no limit
VLLM_CPU_SERVE_DEFAULTS = {"max_num_seqs": 128, "max_num_batched_tokens": 2048}


def _run_dir(run_dir) -> Path:
    p = Path(run_dir)
    if not (p / "bench.json").is_file():
        raise InputError(f"run_dir {str(p)!r} has no bench.json (a vllm bench serve result)")
    return p


def run_limits(run_dir) -> dict[str, int]:
    """The server's scheduler limits of a run: its command's flags, else vLLM's defaults.

    Reads ``meta.json``'s ``server_command`` (``--max-num-seqs N``,
    ``--max-num-batched-tokens N``), then ``server.log`` (``max_num_seqs=N``);
    a limit named in neither is :data:`VLLM_CPU_SERVE_DEFAULTS`'s.
    """
    p = _run_dir(run_dir)
    meta = json.loads((p / "meta.json").read_text()) if (p / "meta.json").is_file() else {}
    cmd = meta.get("server_command") or ""
    cmd = " ".join(cmd) if isinstance(cmd, list) else str(cmd)
    log = (p / "server.log").read_text(errors="replace") if (p / "server.log").is_file() else ""
    out = {}
    for key in ("max_num_seqs", "max_num_batched_tokens"):
        m = re.search(rf"--{key.replace('_', '-')}[ =](\d+)", cmd) or re.search(
            rf"{key}=(\d+)", log)
        out[key] = int(m.group(1)) if m else VLLM_CPU_SERVE_DEFAULTS[key]
    return out


def client_loop(run_dir) -> tuple[float, int | None]:
    """``(request_rate, max_concurrency)`` of the client, from ``bench.json``.

    ``request_rate`` is ``inf`` for ``--request-rate inf``; ``max_concurrency``
    is None when the client set no cap.  A run with an infinite rate and a cap
    is a closed loop of that many clients.
    """
    b = json.loads((_run_dir(run_dir) / "bench.json").read_text())
    rate = float(b.get("request_rate", math.inf))
    conc = b.get("max_concurrency")
    return rate, (None if conc is None else int(conc))


def attained(ttft_ms, tpot_ms, slo: SLO, latency_ms=None) -> np.ndarray:
    """Per request: within every limit of ``slo`` (a NaN TPOT, one output token, meets it).

    ``latency_ms`` is needed when ``slo`` limits the end-to-end latency.
    """
    if not isinstance(slo, SLO):
        raise InputError(f"slo must be an SLO, got {type(slo).__name__}")
    ttft, tpot = np.asarray(ttft_ms, float), np.asarray(tpot_ms, float)
    if ttft.shape != tpot.shape:
        raise InputError(f"ttft_ms and tpot_ms differ in length ({ttft.size} vs {tpot.size})")
    ok = np.ones(ttft.size, bool)
    if slo.ttft_ms is not None:
        ok &= ttft <= slo.ttft_ms
    if slo.tpot_ms is not None:
        ok &= ~(tpot > slo.tpot_ms)
    if slo.e2e_ms is not None:
        if latency_ms is None:
            raise InputError("slo limits the latency (e2e): give latency_ms")
        lat = np.asarray(latency_ms, float)
        if lat.shape != ttft.shape:
            raise InputError("latency_ms and ttft_ms differ in length")
        ok &= lat <= slo.e2e_ms
    return ok


def goodput(arrival_s, latency_ms, ok) -> float:
    """Requests within the SLO per second, over first arrival to last completion."""
    a, lat, ok = (np.asarray(x, float) for x in (arrival_s, latency_ms, ok))
    if not (a.size == lat.size == ok.size) or a.size == 0:
        raise InputError("arrival_s, latency_ms and ok must be non-empty and of one length")
    span = float(np.max(a + lat / 1000.0) - np.min(a))
    if not span > 0:
        raise InputError("the run spans no time (last completion <= first arrival)")
    return float(ok.sum() / span)


def fit_run(run_dir) -> tuple[Any, pd.DataFrame, float]:
    """Fit the model of record on a run's step log: ``(fit, steps, step_overhead_ms)``."""
    p = _run_dir(run_dir)
    if not (p / "steps.csv").is_file():
        raise InputError(f"run_dir {str(p)!r} has no steps.csv (run without the step logger?)")
    steps = read_trace(p / "steps.csv")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = fit_model(steps, model=default_for(steps))
    overhead = float(estimate_step_overhead(steps, method="timestamp").overhead_ms)
    return fit, steps, overhead


def _first_prefills(steps: pd.DataFrame, t0: float) -> tuple[np.ndarray, np.ndarray]:
    """Step index and size of every first prompt chunk (prior context 0) from ``t0`` on,
    in step order and, within a step, in batch order (vLLM admits FCFS)."""
    ks, cs = [], []
    mono = steps["mono_s"].to_numpy(float)
    for k, (c, x) in enumerate(zip(steps["chunk_sizes"], steps["context_lens"])):
        if not mono[k] >= t0:
            continue
        c, x = parse_int_list(c), parse_int_list(x)
        new = x == 0
        ks.extend([k] * int(new.sum()))
        cs.extend(c[new].tolist())
    return np.asarray(ks, np.int64), np.asarray(cs, np.int64)


def _max_overlap(lo: np.ndarray, hi: np.ndarray) -> tuple[float, int]:
    """The midpoint of the first stretch of d >= 0 inside the most intervals (lo, hi]."""
    pts = np.unique(np.clip(np.concatenate([lo, hi]), 0.0, None))
    if pts.size < 2:
        return float(pts[0]), int(np.sum((lo < pts[0]) & (pts[0] <= hi)))
    mids = 0.5 * (pts[:-1] + pts[1:])
    cnt = ((lo[None, :] < mids[:, None]) & (mids[:, None] <= hi[None, :])).sum(axis=1)
    best = cnt == cnt.max()
    a = int(np.argmax(best))
    b = a + (int(np.argmin(best[a:])) if not best[a:].all() else best.size - a)
    return float(0.5 * (pts[a] + pts[b])), int(cnt.max())


def estimate_client_delays(steps: pd.DataFrame, send_s, prompt_tokens, ttft_s,
                           step_overhead_ms: float) -> dict[str, Any]:
    """The client round trip of a run: request intake and response delay (ms).

    Problem
    -------
    The simulator starts a request's clock when the scheduler can see it and
    stops it at the end of the step that samples a token; ``vllm bench serve``
    starts it when it sends the request and stops it when the token arrives.
    The step log's ``mono_s`` is on the client's ``start_times`` clock
    (:mod:`perfmodel.data.collect.vllm_plugin`), so both delays can be read off
    one run.  The k-th first prompt chunk (prior context 0) after the first send
    is matched to the k-th request in send order (vLLM admits FCFS); the match
    is checked (one chunk per request, each chunk at most its prompt, no step
    before its send) and refused otherwise.

    Estimators
    ----------
    ``request_intake_ms``: a request with intake d is first schedulable at the
    first step starting at or after ``send + d``; its observed first step k
    (start ``t_k``) says ``t_{k-1} - send < d <= t_k - send``.  The estimate is
    the middle of the first range of d >= 0 consistent with the most requests
    (``n_intake_consistent`` of them).  The median of ``t_k - send`` would also
    count the wait for the step in progress, which the simulator already has.
    ``response_delay_ms``: the median, over requests whose whole prompt went in
    their first step, of the measured TTFT minus ``(end of that step - send)``,
    the step's end as the simulator has it (start + ``duration_ms`` +
    ``step_overhead_ms``).

    Parameters
    ----------
    steps : the run's step log (:func:`perfmodel.data.trace.read_trace`; needs
        ``mono_s``, ``duration_ms``, ``chunk_sizes``, ``context_lens``)
    send_s, prompt_tokens, ttft_s : per request, the client's ``start_times``
        (s), ``input_lens`` and ``ttfts`` (s), any order
    step_overhead_ms : float >= 0, the simulator's per-step overhead

    Returns
    -------
    dict: ``request_intake_ms``, ``response_delay_ms``, ``n_requests``,
    ``n_intake_consistent``, ``n_response``.

    Checked in ``tests/decisions/test_real_client.py`` on a synthetic log
    built with known delays.
    """
    need = [c for c in ("mono_s", "duration_ms", "chunk_sizes", "context_lens")
            if c not in getattr(steps, "columns", ())]
    if need:
        raise InputError(f"steps lacks columns {need} (a step log of the vllm plugin)")
    send, P, ttft = (np.asarray(v, float).ravel() for v in (send_s, prompt_tokens, ttft_s))
    if not (send.size == P.size == ttft.size) or send.size == 0:
        raise InputError("send_s, prompt_tokens and ttft_s must be non-empty and of one length")
    if not (np.all(np.isfinite(send)) and np.all(np.isfinite(ttft))):
        raise InputError("send_s and ttft_s must be finite")
    ovh = float(step_overhead_ms)
    if not (math.isfinite(ovh) and ovh >= 0):
        raise InputError(f"step_overhead_ms must be a finite number >= 0, got {step_overhead_ms!r}")
    order = np.argsort(send, kind="stable")
    send, P, ttft = send[order], P[order], ttft[order]
    ks, cs = _first_prefills(steps, float(send[0]))
    mono = steps["mono_s"].to_numpy(float)
    if ks.size != send.size or np.any(cs > P) or np.any(mono[ks] < send):
        raise InputError(f"cannot match the step log to the requests: {ks.size} first prompt "
                         f"chunks after the first send for {send.size} requests, or a chunk "
                         "larger than its prompt or before its send (preemption? another "
                         "client?)")
    hi = (mono[ks] - send) * 1e3
    lo = np.where(ks > 0, (mono[np.maximum(ks - 1, 0)] - send) * 1e3, -np.inf)
    intake, n_ok = _max_overlap(lo, hi)
    whole = cs == P
    if not whole.any():
        raise InputError("no request had its whole prompt in its first step: the response "
                         "delay needs one")
    end = mono[ks] + (steps["duration_ms"].to_numpy(float)[ks] + ovh) / 1e3
    resp = float(np.median((ttft - (end - send))[whole] * 1e3))
    return {"request_intake_ms": intake, "response_delay_ms": max(resp, 0.0),
            "n_requests": int(send.size), "n_intake_consistent": n_ok,
            "n_response": int(whole.sum())}


def client_delays(run_dir, steps: pd.DataFrame, step_overhead_ms: float) -> dict[str, Any]:
    """:func:`estimate_client_delays` of a run folder (its ``bench.json`` and step log)."""
    b = json.loads((_run_dir(run_dir) / "bench.json").read_text())
    miss = [k for k in ("start_times", "input_lens", "ttfts") if not b.get(k)]
    if miss:
        raise InputError(f"{run_dir}/bench.json lacks {miss} (vllm bench serve --save-detailed)")
    return estimate_client_delays(steps, b["start_times"], b["input_lens"], b["ttfts"],
                                  step_overhead_ms)


def _pair(measured, predicted) -> dict:
    err = None if not measured or predicted is None else (predicted - measured) / measured
    return {"measured": measured, "predicted": predicted, "error": err}


def replay_run(fit, work: pd.DataFrame, engine: EngineConfig, slo: SLO, *,
               concurrency: int | None = None) -> dict:
    """Replay one measured run's requests and compare with what the client measured.

    ``work`` is :func:`perfmodel.data.requests.load_workload`'s table of the
    run (lengths, arrivals, measured timings).  ``concurrency`` None replays
    the recorded arrival times (open loop); an integer C replays a closed
    loop of C clients issuing the requests in the file's order.  Returns per
    metric and quantile ``{measured, predicted, error}`` (error relative to
    the measured value), ``output_tok_s``, ``goodput_req_s`` and
    ``attainment`` (share of requests within the SLO).
    """
    missing = [c for c in ("prompt_tokens", "output_tokens", "arrival_s", *METRICS)
               if c not in getattr(work, "columns", ())]
    if missing:
        raise InputError(f"work lacks columns {missing} (a measured run's load_workload table)")
    P, O = work["prompt_tokens"].to_numpy(), work["output_tokens"].to_numpy()
    if concurrency is None:
        sim = simulate_open_loop(fit, prompt_tokens=P, output_tokens=O, engine=engine,
                                 arrival_times=work["arrival_s"].to_numpy(), keep_steps=False)
    else:
        sim = simulate_closed_loop(fit, len(work), concurrency, P, O, engine=engine,
                                   keep_steps=False)
    r = sim.requests
    pred = sim.latency_stats()
    meas = latency_stats(work["ttft_ms"], work["tpot_ms"], work["latency_ms"])
    out: dict[str, Any] = {"n": len(work)}
    for m in METRICS:
        for q in QUANTILES:
            out[f"{m}_{q}"] = _pair(meas[m][q], pred[m][q])
    arr, lat = work["arrival_s"].to_numpy(), work["latency_ms"].to_numpy()
    thr_m = float(O.sum() / (float(np.max(arr + lat / 1e3)) - float(arr.min())))
    out["output_tok_s"] = _pair(thr_m, sim.output_throughput_tok_s)
    ok_m = attained(work["ttft_ms"], work["tpot_ms"], slo, lat)
    ok_p = attained(r["ttft_s"] * 1000.0, r["tpot_ms"], slo, r["e2e_s"] * 1000.0)
    out["goodput_req_s"] = _pair(goodput(arr, lat, ok_m),
                                 goodput(r["arrival_s"], r["e2e_s"] * 1000.0, ok_p))
    out["attainment"] = {"measured": float(ok_m.mean()), "predicted": float(ok_p.mean())}
    return out


def replay_settings(run_dir, overhead: float, delays: dict | None = None
                    ) -> tuple[EngineConfig, int | None]:
    """How a measured run is replayed: ``(engine, concurrency)``.

    The engine has the run's scheduler limits (:func:`run_limits`), FCFS, the
    given per-step overhead and client round trip; ``concurrency`` is C for a
    closed loop (``--request-rate inf --max-concurrency C``), else None (the
    recorded arrivals).
    """
    rate, conc = client_loop(run_dir)
    closed = conc if (math.isinf(rate) and conc is not None) else None
    return _engine(run_limits(run_dir), overhead, delays), closed


def _engine(limits: dict, overhead: float, delays: dict | None = None) -> EngineConfig:
    d = delays or {}
    return EngineConfig(max_num_seqs=int(limits["max_num_seqs"]),
                        max_num_batched_tokens=int(limits["max_num_batched_tokens"]),
                        policy="fcfs", step_overhead_ms=overhead,
                        request_intake_ms=d.get("request_intake_ms", 0.0),
                        response_delay_ms=d.get("response_delay_ms", 0.0))


def validate_series(series, train: str, slo="ttft_p99=1000,tpot_p99=50", *,
                    replications: int = 20, seed: int = 0,
                    client_round_trip: bool = True, train_series=None,
                    run_sd: float = 0.0) -> dict:
    """Fit on run ``train`` of ``series``, replay every run, and compute the capacity answer.

    Parameters
    ----------
    series : folder of run folders (each with ``bench.json``, ``meta.json``;
        the training run also ``steps.csv``)
    train : name of the run whose step log the model is fitted on
    train_series : folder holding the run ``train`` when it is not in
        ``series`` (None: ``series``).  Then every run of ``series`` is held
        out: the confirmation of a model fitted and frozen on an earlier series
    slo : :class:`SLO` or its text form (``ttft_p99=MS,tpot_p99=MS``)
    replications : searches for the capacity interval (0: none)
    seed : base seed of :func:`~perfmodel.decisions.capacity.capacity`
    client_round_trip : estimate the client's request intake and response
        delay on the training run (:func:`client_delays`) and replay every
        run, and the capacity search, with them (False: both 0, the replay
        without a client round trip)
    run_sd : the capacity interval's run-level term
        (:func:`perfmodel.decisions.capacity.capacity`; estimate it with
        :func:`perfmodel.decisions.run_intervals.series_run_spread`)

    Returns
    -------
    dict (JSON-safe after :func:`perfmodel._io.json_safe`): ``train``,
    ``model``, ``n_steps``, ``step_overhead_ms``, ``client_delays``
    (:func:`estimate_client_delays`' dict, or None), ``slo``, ``runs`` (name ->
    :func:`replay_run`'s dict plus ``engine``, ``request_rate``,
    ``max_concurrency``, ``held_out``; a closed-loop run also
    ``open_loop_replay``: the same replayed with its recorded start times
    instead, the ablation) and ``capacity`` (``max_rate``, ``interval``, the
    engine limits and request lengths it assumed).
    """
    root = Path(series)
    if not root.is_dir():
        raise InputError(f"series {str(root)!r} is not a folder")
    troot = root if train_series is None else Path(train_series)
    if not troot.is_dir():
        raise InputError(f"train_series {str(troot)!r} is not a folder")
    same = troot.resolve() == root.resolve()
    slo = slo if isinstance(slo, SLO) else SLO.parse(slo)
    runs = sorted(d for d in root.iterdir() if (d / "bench.json").is_file())
    if not runs:
        raise InputError(f"series {str(root)!r} has no run folder (with a bench.json)")
    if not (troot / train / "bench.json").is_file():
        raise InputError(f"train {train!r} is not a run of {str(troot)!r}")
    fit, steps, overhead = fit_run(troot / train)
    delays = client_delays(troot / train, steps, overhead) if client_round_trip else None
    result: dict[str, Any] = {"train": train, "model": fit.model_name, "n_steps": len(steps),
                              "step_overhead_ms": overhead, "client_delays": delays,
                              "slo": slo.as_dict(), "runs": {},
                              "train_series": None if same else str(troot)}
    for d in runs:
        lim, (rate, conc) = run_limits(d), client_loop(d)
        work = load_workload(d / "bench.json")
        eng, closed = replay_settings(d, overhead, delays)
        res = replay_run(fit, work, eng, slo, concurrency=closed)
        if closed is not None:
            res["open_loop_replay"] = replay_run(fit, work, eng, slo)
        res.update(engine=lim, request_rate=rate, max_concurrency=conc,
                   held_out=not (same and d.name == train))
        result["runs"][d.name] = res
    wt = load_workload(troot / train / "bench.json")
    wl = Workload(prompt_tokens=wt["prompt_tokens"].to_numpy(),
                  output_tokens=wt["output_tokens"].to_numpy())
    lim = run_limits(troot / train)
    cap = capacity(fit, wl, slo, mode="rate", engine=_engine(lim, overhead, delays),
                   replications=replications, seed=seed, run_sd=run_sd)
    result["capacity"] = {"max_rate": cap["max_rate"], "interval": cap["interval"],
                          "run_level": cap["assumptions"]["run_level"],
                          "engine": lim, "workload": f"request lengths of {train}"}
    return result


def _check_result(result) -> dict:
    if not isinstance(result, dict) or not isinstance(result.get("runs"), dict) \
            or not result["runs"]:
        raise InputError("result must be validate_series' dict (with non-empty 'runs')")
    return result


def client_label(res: dict, *, compact: bool = False) -> str:
    """How a run's client drove the server, and the server's limits, for a table.

    ``res`` is a run's entry of :func:`validate_series`'s ``runs`` (``request_rate``,
    ``max_concurrency``, ``engine``).  Long: ``"5 req/s, 32 / 768"`` or
    ``"closed loop, 16 clients"``; ``compact=True``: ``"5; 32/768"`` or
    ``"C=16; 32/768"`` (req/s or clients; ``max_num_seqs``/``max_num_batched_tokens``).
    A run is a closed loop when it had a concurrency cap and no arrival rate
    (``request_rate`` infinite).
    """
    if not isinstance(res, dict) or not isinstance(res.get("engine"), dict):
        raise InputError("res must be a run's result with an `engine` mapping")
    lim = res["engine"]
    closed = res.get("max_concurrency") is not None and math.isinf(res["request_rate"])
    if compact:
        head = f"C={res['max_concurrency']}" if closed else f"{res['request_rate']:g}"
        return f"{head}; {lim['max_num_seqs']}/{lim['max_num_batched_tokens']}"
    if closed:
        return f"closed loop, {res['max_concurrency']} clients"
    return (f"{res['request_rate']:g} req/s, {lim['max_num_seqs']} / "
            f"{lim['max_num_batched_tokens']}")


def error_table(result) -> pd.DataFrame:
    """Per held-out run (rows): measured and predicted p50 / p99 of each metric, and the error.

    Columns ``run``, ``client`` (rate and limits, or the closed loop), then per
    metric and quantile ``<metric> <q> measured``, ``... predicted`` (ms) and
    ``... error`` (relative, a fraction); the training run is left out.  Rows
    in order: open-loop runs with the training run's limits by rate, closed
    loops by concurrency, runs with other limits by rate.
    """
    runs = _check_result(result)["runs"]
    base = runs.get(result.get("train"), {}).get("engine")

    def order(item):
        name, r = item
        closed = r.get("max_concurrency") is not None and math.isinf(r["request_rate"])
        group = 1 if closed else (0 if r["engine"] == base else 2)
        return (group, r["request_rate"], r.get("max_concurrency") or 0, name)

    rows = []
    for name, res in sorted(runs.items(), key=order):
        if not res.get("held_out", True):
            continue
        row = {"run": name, "client": client_label(res)}
        for m in METRICS:
            for q in QUANTILES:
                v = res[f"{m}_{q}"]
                for k in ("measured", "predicted", "error"):
                    row[f"{m} {q} {k}"] = v[k] if v[k] is not None else float("nan")
        rows.append(row)
    return pd.DataFrame(rows)


def repeat_spread(result, prefix: str = "repeat-") -> dict[str, float]:
    """Run-to-run spread of the same-seed repeats: half the range over the mean, per metric.

    Uses the runs named ``<prefix>*`` (identical requests and arrivals); keys
    ``<metric> <q>``, values fractions (e.g. 0.12 for +-12 %).  Needs >= 2 repeats.
    """
    reps = [r for n, r in _check_result(result)["runs"].items() if n.startswith(prefix)]
    if len(reps) < 2:
        raise InputError(f"repeat_spread needs >= 2 runs named {prefix!r}*, found {len(reps)}")
    out = {}
    for m in METRICS:
        for q in QUANTILES:
            v = np.array([r[f"{m}_{q}"]["measured"] for r in reps], float)
            out[f"{m} {q}"] = float((v.max() - v.min()) / 2 / v.mean())
    return out


def open_loop_runs(result) -> pd.DataFrame:
    """The runs a capacity answer is checked against, one row per run.

    Open-loop runs (a finite request rate, no concurrency cap) of
    :func:`validate_series`' ``result`` with the engine limits its capacity
    was computed for.  Columns: ``rate`` (req/s), ``run`` (folder name),
    ``measured`` and ``predicted`` (share of requests within the SLO: the
    run's and its replay's), sorted by rate and name.  :func:`capacity_check`
    aggregates these per rate.
    """
    res = _check_result(result)
    lim = (res.get("capacity") or {}).get("engine")
    if lim is None:
        raise InputError("result has no capacity answer (validate_series' 'capacity')")
    rows = [{"rate": r["request_rate"], "run": n, "measured": r["attainment"]["measured"],
             "predicted": r["attainment"]["predicted"]}
            for n, r in res["runs"].items()
            if r["engine"] == lim and r.get("max_concurrency") is None
            and math.isfinite(r["request_rate"])]
    if not rows:
        raise InputError("no open-loop run with the capacity's engine limits")
    return pd.DataFrame(rows).sort_values(["rate", "run"], ignore_index=True)


def capacity_check(result, target: float | None = None) -> dict:
    """The capacity answer against measured SLO attainment per request rate.

    Measured runs used: open-loop runs with the engine limits the capacity was
    computed for.  Returns ``per_rate`` (DataFrame: ``rate``, ``runs``,
    ``measured`` = lowest attainment over the runs at that rate,
    ``predicted`` = the replay's, ``meets``), ``last_pass`` (highest rate
    below which every measured rate met ``target``), ``first_fail`` (lowest
    failing rate), ``max_rate``, ``lower``, ``upper`` (the predicted answer and
    its interval), ``inside`` (both ``last_pass`` and ``first_fail`` lie in
    the interval: the measured failure point is bracketed inside it; None when
    either is missing) and ``verdict`` (:func:`failure_point_verdict`; None
    without an interval).
    ``target`` defaults to the SLO's attainment target (``result['slo']``).
    """
    res = _check_result(result)
    if target is None:
        target = (res.get("slo") or {}).get("attainment")
    if not isinstance(target, (int, float)) or not 0 < target <= 1:
        raise InputError(f"target must be an attainment in (0, 1] (or in result['slo']), "
                         f"got {target!r}")
    cap = res.get("capacity") or {}
    if cap.get("max_rate") is None:
        raise InputError("result has no capacity answer (validate_series' 'capacity')")
    df = open_loop_runs(res).groupby("rate").agg(
        runs=("run", "count"), measured=("measured", "min"),
        predicted=("predicted", "min")).reset_index()
    df["meets"] = df["measured"] >= target
    fails = df.loc[~df["meets"], "rate"]
    first_fail = float(fails.min()) if len(fails) else None
    below = df[df["rate"] < first_fail] if first_fail is not None else df
    last_pass = float(below["rate"].max()) if len(below) else None
    iv = cap.get("interval") or {}
    lower, upper = iv.get("lower"), iv.get("upper")
    inside = verdict = None
    if None not in (lower, upper):
        verdict = failure_point_verdict(last_pass, first_fail, lower, upper)
        if None not in (last_pass, first_fail):
            inside = verdict == "brackets"
    return {"per_rate": df, "last_pass": last_pass, "first_fail": first_fail,
            "max_rate": float(cap["max_rate"]), "lower": lower, "upper": upper,
            "level": iv.get("level"), "inside": inside, "verdict": verdict, "target": target}


def failure_point_verdict(last_pass, first_fail, lower: float, upper: float) -> str:
    """Where an interval ``[lower, upper]`` of a capacity stands against the measured one.

    The measured failure point lies in ``(last_pass, first_fail]``: above the
    highest rate below which every measured rate met the target, at or below
    the first rate that missed it (``None``: no such rate, the bracket is open
    on that side, ``(0, first_fail]`` or ``(last_pass, inf)``).  Returns
    ``'brackets'`` (the interval contains the whole bracket, so the failure
    point is inside it: ``lower <= last_pass`` and ``first_fail <= upper``,
    both rates measured), ``'misses'`` (the interval lies wholly above the
    first failing rate or wholly at or below the last passing one: the
    failure point is outside it) or ``'overlaps'`` (neither: the measured
    rates cannot tell).
    """
    lo, hi = (check_positive(n, v, allow_zero=True) for n, v in (("lower", lower),
                                                                 ("upper", upper)))
    if hi < lo:
        raise InputError(f"lower {lo} is above upper {hi}")
    for n, v in (("last_pass", last_pass), ("first_fail", first_fail)):
        if v is not None:
            check_positive(n, v)
    if last_pass is not None and first_fail is not None and not last_pass < first_fail:
        raise InputError(f"last_pass {last_pass} must be below first_fail {first_fail}")
    if (first_fail is not None and lo > first_fail) or (last_pass is not None and hi <= last_pass):
        return "misses"
    if last_pass is not None and first_fail is not None and lo <= last_pass and first_fail <= hi:
        return "brackets"
    return "overlaps"


def _budget_fields(r: dict) -> dict:
    """A replayed run's engine limits, goodput and attainment, measured and predicted: the
    columns of :func:`budget_table` and :func:`budget_replicates`."""
    return {**r["engine"],
            "goodput measured": r["goodput_req_s"]["measured"],
            "goodput predicted": r["goodput_req_s"]["predicted"],
            "attainment measured": r["attainment"]["measured"],
            "attainment predicted": r["attainment"]["predicted"]}


def budget_table(result, pairs=(("budget-default-{}", "budget-tuned-{}"),),
                 rates=None) -> pd.DataFrame:
    """vLLM's default limits against the tuned budget, per rate: measured and predicted goodput.

    Pairs runs named ``budget-default-<rate>`` / ``budget-tuned-<rate>`` (every
    rate present when ``rates`` is None).  Columns ``rate``, ``config``
    (``default`` / ``tuned``), ``max_num_seqs``, ``max_num_batched_tokens``,
    ``goodput measured``, ``goodput predicted`` (req/s), ``attainment
    measured``, ``attainment predicted``.
    """
    runs = _check_result(result)["runs"]
    rows = []
    for fmt_d, fmt_t in pairs:
        # a rate: digits and a point (a replicate's ``-rep<i>`` is budget_replicates')
        pat = re.compile(re.escape(fmt_d).replace(r"\{\}", r"([0-9]+(?:\.[0-9]+)?)") + "$")
        found = sorted((float(m.group(1)), m.group(1)) for n in runs if (m := pat.match(n)))
        for rate, txt in found:
            if rates is not None and rate not in rates:
                continue
            for cfg, fmt in (("default", fmt_d), ("tuned", fmt_t)):
                r = runs.get(fmt.format(txt))
                if r is None:
                    raise InputError(f"budget run {fmt.format(txt)!r} missing for rate {txt}")
                rows.append({"rate": rate, "config": cfg, **_budget_fields(r)})
    if not rows:
        raise InputError("no budget-default-<rate> / budget-tuned-<rate> runs in result")
    return pd.DataFrame(rows)


_REPLICATE = re.compile(r"budget-(default|tuned)-(.+)-rep(\d+)$")


def budget_replicates(result) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Replicated token-budget pairs: per run, and per rate the paired difference.

    Problem
    -------
    One run per configuration cannot say whether a goodput difference between
    vLLM's default limits and a tuned budget is more than run-to-run noise.
    ``scripts/collect_vllm_serve.sh`` with ``BUDGET_REPEATS`` > 1 runs the
    pair ``budget-default-<rate>-rep<i>`` / ``budget-tuned-<rate>-rep<i>``
    with one seed per repeat i (the same requests and arrivals for both
    configurations: a paired design).

    Returns
    -------
    per_run : DataFrame, one row per run: ``rate``, ``rep``, ``config``,
        ``max_num_seqs``, ``max_num_batched_tokens``, ``n`` (requests),
        ``goodput measured`` / ``goodput predicted`` (req/s),
        ``attainment measured`` / ``attainment predicted``
    per_rate : DataFrame, one row per rate: ``reps`` (complete pairs), per
        configuration the mean goodput measured and predicted and the pooled
        attainment (all requests of its runs), and the paired difference
        tuned - default of measured goodput: ``diff mean``, ``diff min``,
        ``diff max``, ``tuned wins`` (repeats where it is > 0), and
        ``pred diff mean`` (the replay's)

    Checked in ``tests/decisions/test_real_client.py`` on a hand-built result.
    """
    runs = _check_result(result)["runs"]
    rows = []
    for name, r in runs.items():
        m = _REPLICATE.match(name)
        if not m:
            continue
        try:
            rate = float(m.group(2))
        except ValueError:
            raise InputError(f"budget run {name!r}: {m.group(2)!r} is not a rate") from None
        rows.append({"rate": rate, "rep": int(m.group(3)), "config": m.group(1),
                     **r["engine"], "n": int(r.get("n", 0)), **_budget_fields(r)})
    if not rows:
        raise InputError("no budget-default-<rate>-rep<i> / budget-tuned-<rate>-rep<i> runs "
                         "in result")
    per_run = pd.DataFrame(rows).sort_values(["rate", "rep", "config"], ignore_index=True)
    out = []
    for rate, g in per_run.groupby("rate"):
        wide = g.pivot(index="rep", columns="config")
        if not {"default", "tuned"} <= set(g["config"]):
            raise InputError(f"rate {rate:g}: budget runs of one configuration only")
        both = wide.dropna(subset=[("goodput measured", "default"),
                                   ("goodput measured", "tuned")])
        if both.empty:
            raise InputError(f"rate {rate:g}: no repeat with both configurations")
        d = (both[("goodput measured", "tuned")] - both[("goodput measured", "default")])
        dp = (both[("goodput predicted", "tuned")] - both[("goodput predicted", "default")])
        row = {"rate": float(rate), "reps": len(both)}
        for cfg in ("default", "tuned"):
            c = g[g["config"] == cfg]
            w = c["n"].to_numpy(float)
            w = w if w.sum() > 0 else np.ones(len(c))
            row[f"{cfg} goodput measured"] = float(c["goodput measured"].mean())
            row[f"{cfg} goodput min"] = float(c["goodput measured"].min())
            row[f"{cfg} goodput max"] = float(c["goodput measured"].max())
            row[f"{cfg} goodput predicted"] = float(c["goodput predicted"].mean())
            for what in ("measured", "predicted"):
                row[f"{cfg} attainment {what}"] = float(
                    np.average(c[f"attainment {what}"], weights=w))
        row.update({"diff mean": float(d.mean()), "diff min": float(d.min()),
                    "diff max": float(d.max()), "tuned wins": int((d > 0).sum()),
                    "pred diff mean": float(dp.mean())})
        out.append(row)
    return per_run, pd.DataFrame(out)
