"""``perfmodel capacity`` and ``perfmodel tune``: request-level decisions under SLOs
(:mod:`perfmodel.decisions.capacity`, :mod:`perfmodel.decisions.tune`)."""
from __future__ import annotations

import argparse
import math
from dataclasses import fields

from perfmodel._parallel import check_backend
from perfmodel.cli.common import (
    add_backend_arguments,
    add_random_state_argument,
    add_run_level_arguments,
    run_level_sd,
)
from perfmodel.decisions.capacity import capacity, unit_schedule
from perfmodel.decisions.requests_workload import SLO, load_workload_file, workload_from_lengths
from perfmodel.decisions.simulate import POLICIES, ROUTINGS, EngineConfig, estimate_step_overhead
from perfmodel.decisions.tune import DEFAULT_SEQS, DEFAULT_TOKENS, tune_token_budget
from perfmodel.errors import InputError

__all__ = ["add_capacity_arguments", "add_tune_arguments", "capacity_command",
           "load_fit_and_inputs", "tune_command"]

DEFAULT_NUM_REQUESTS = 300
_CHOICES = {"policy": POLICIES, "routing": ROUTINGS}
#: engine settings of these commands that differ from EngineConfig's defaults (vLLM V1)
_DEFAULTS = {"policy": "fcfs"}


def add_workload_arguments(parser) -> None:
    """``--workload`` or ``--prompt-tokens``/``--output-tokens`` (+ ``--num-requests``)."""
    parser.add_argument("--workload", metavar="W",
                        help="vllm bench serve result JSON, request file (JSON Lines / CSV)")
    parser.add_argument("--prompt-tokens", metavar="DIST",
                        help="prompt lengths: N, const:N, uniform:LO,HI or lognormal:MEDIAN,SIGMA")
    parser.add_argument("--output-tokens", metavar="DIST", help="output lengths (as above)")
    parser.add_argument("--num-requests", type=int, default=None,
                        help=f"requests drawn from the distributions (default "
                             f"{DEFAULT_NUM_REQUESTS}), or from --workload's requests with "
                             "replacement (default: the file's requests as they are)")


def add_engine_arguments(parser) -> None:
    """The simulated server's settings: one option per :class:`EngineConfig` field.

    ``step_noise_sd`` is left out (the step noise comes from the fit); the
    policy defaults to ``fcfs`` (vLLM V1's scheduler), the rest to
    EngineConfig's defaults.
    """
    for f in fields(EngineConfig):
        if f.name == "step_noise_sd":
            continue
        flag = "--" + f.name.replace("_", "-")
        if isinstance(f.default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None,
                                help=f"EngineConfig.{f.name} (default {f.default})")
        elif f.name in _CHOICES:
            parser.add_argument(flag, choices=_CHOICES[f.name], default=None,
                                help=f"EngineConfig.{f.name} (default {_DEFAULTS.get(f.name, f.default)})")
        else:
            kind = float if isinstance(f.default, float) else int
            parser.add_argument(flag, type=kind, default=None,
                                help=f"EngineConfig.{f.name} (default {f.default}"
                                     + (", or estimated from --trace)" if f.name ==
                                        "step_overhead_ms" else ")"))
    parser.add_argument("--trace", help="step trace to estimate the per-step overhead from")


def add_decision_arguments(parser) -> None:
    """SLO, mode, interval and search options shared by capacity and tune."""
    parser.add_argument("fit", metavar="FIT.json",
                        help="fitted step model (written by perfmodel fit -o/--output)")
    parser.add_argument("--slo", required=True,
                        help="limits in ms, e.g. ttft_p99=500,tpot_p99=50 (ttft, tpot, e2e)")
    parser.add_argument("--attainment", type=float, default=None,
                        help="share of requests that must meet the SLO (default: from _pNN, "
                             "else 0.99)")
    parser.add_argument("--mode", choices=("rate", "concurrency"), default="rate",
                        help="open loop (request rate) or closed loop (concurrency)")
    add_workload_arguments(parser)
    add_engine_arguments(parser)
    parser.add_argument("--level", type=float, default=0.9, help="interval level (default 0.9)")
    parser.add_argument("--bootstrap-samples", default=None,
                        help="parameter samples (.npy or .csv, n x p) for the interval "
                             "(default: normal approximation of the fit covariance)")
    parser.add_argument("--no-noise", action="store_true", help="no step noise")
    add_run_level_arguments(parser)
    parser.add_argument("--max-load", type=float, default=None,
                        help="search cap (req/s or clients)")
    add_random_state_argument(parser, "arrivals, step noise and parameter draws")
    parser.add_argument("--jobs", type=int, default=1,
                        help="parallel jobs for the replications (-1: all cores; default 1)")
    add_backend_arguments(parser)


def add_capacity_arguments(parser) -> None:
    """Add ``perfmodel capacity`` options to an argparse (sub)parser."""
    add_decision_arguments(parser)
    parser.add_argument("--replications", type=int, default=20,
                        help="searches for the interval (0: none; default 20)")
    parser.add_argument("--resample-requests", action="store_true",
                        help="each replication of the interval serves a new sample of the "
                             "workload's requests, drawn with replacement (for a workload that is "
                             "a sample of the traffic, e.g. a benchmark's prompts)")
    parser.add_argument("--rel-tol", type=float, default=0.02,
                        help="relative precision of the answer (default 0.02)")
    parser.add_argument("--recorded-arrivals", type=float, default=None, metavar="RATE",
                        help="search on the --workload file's recorded arrival times, recorded "
                             "at RATE req/s (the run's --request-rate), rescaled to each rate "
                             "searched, instead of new Poisson schedules: the answer for that "
                             "run's exact requests and arrivals (rate mode)")


def add_tune_arguments(parser) -> None:
    """Add ``perfmodel tune`` options to an argparse (sub)parser."""
    add_decision_arguments(parser)
    parser.add_argument("--objective", choices=("capacity", "goodput"), default="capacity",
                        help="maximise the SLO capacity, or the goodput at --load")
    parser.add_argument("--load", type=float, default=None,
                        help="request rate (or concurrency) for --objective goodput")
    parser.add_argument("--seqs-grid", default=",".join(map(str, DEFAULT_SEQS)),
                        help="candidate max_num_seqs, comma-separated")
    parser.add_argument("--tokens-grid", default=",".join(map(str, DEFAULT_TOKENS)),
                        help="candidate max_num_batched_tokens, comma-separated")
    parser.add_argument("--replications", type=int, default=10,
                        help="draws for the intervals (0: none; default 10)")
    parser.add_argument("--rel-tol", type=float, default=0.05,
                        help="relative precision of each capacity (default 0.05)")


def load_fit_and_inputs(args):
    """(fit, workload, slo, engine, overhead estimate or None, boot samples) from the options."""
    from perfmodel.cli.sla import load_samples
    from perfmodel.core.results import FitResult

    slo = SLO.parse(args.slo, args.attainment)
    workload = _workload(args)
    fit = FitResult.from_json(args.fit)
    overhead, est = args.step_overhead_ms, None
    if overhead is None and args.trace:
        from perfmodel.data.trace import read_trace

        est = estimate_step_overhead(read_trace(args.trace))
        overhead = est.overhead_ms
    kw = dict(_DEFAULTS)
    kw.update({f.name: getattr(args, f.name) for f in fields(EngineConfig)
               if getattr(args, f.name, None) is not None})
    kw["step_overhead_ms"] = 0.0 if overhead is None else overhead
    engine = EngineConfig(**kw)
    return fit, workload, slo, engine, est, load_samples(args.bootstrap_samples)


def _workload(args):
    dists = args.prompt_tokens is not None or args.output_tokens is not None
    if args.workload and dists:
        raise InputError("give --workload or --prompt-tokens/--output-tokens, not both")
    if args.workload:
        w = load_workload_file(args.workload)
        return w if args.num_requests is None else w.resample(args.num_requests, args.seed)
    if args.prompt_tokens is None or args.output_tokens is None:
        raise InputError("missing workload: give --workload FILE, or both --prompt-tokens and "
                         "--output-tokens (e.g. uniform:64,192)")
    n = DEFAULT_NUM_REQUESTS if args.num_requests is None else args.num_requests
    return workload_from_lengths(args.prompt_tokens, args.output_tokens, n, args.seed)


def _answer_text(d: dict, key: str, unit: str) -> str:
    v = d[key]
    iv = d["interval"]
    s = f"{v:.3g}" if key == "max_rate" else f"{v}"
    if iv is not None:
        lo, hi = iv["lower"], iv["upper"]
        (l1, l2), (u1, u2) = iv["lower_mc_range"], iv["upper_mc_range"]
        s += (f" {unit} ({iv['level']:.0%} interval {lo:.3g} - {hi:.3g} over "
              f"{iv['replications']} replications; another {iv['replications']} could move "
              f"its ends within {l1:.3g}-{l2:.3g} and {u1:.3g}-{u2:.3g})")
    else:
        s += f" {unit}"
    if d["capped"]:
        s += (" (reached the search cap: the SLO holds at every load tried; with few requests "
              "no queue builds up: raise --num-requests)")
    if not d["feasible"]:
        s += " (infeasible: the SLO fails even at the smallest load)"
    return s


def _recorded_arrivals(args, workload):
    """``--recorded-arrivals RATE``: the workload file's arrival times at unit rate, or None."""
    if args.recorded_arrivals is None:
        return None
    if not args.workload or args.num_requests is not None:
        raise InputError("--recorded-arrivals needs --workload FILE with its requests as they "
                         "are (no --num-requests)")
    if workload.arrival_s is None:
        raise InputError(f"--recorded-arrivals: the workload file {args.workload} records no "
                         "arrival times")
    if not math.isfinite(args.recorded_arrivals) or args.recorded_arrivals <= 0:
        raise InputError(f"--recorded-arrivals must be the positive request rate the file was "
                         f"recorded at, got {args.recorded_arrivals}")
    return unit_schedule(workload.arrival_s, args.recorded_arrivals)


def capacity_command(args) -> tuple[str, dict]:
    """Run ``perfmodel capacity``; return (text, JSON-safe dict)."""
    check_backend(args.backend, args.scheduler)
    fit, workload, slo, engine, est, samples = load_fit_and_inputs(args)
    run_sd, run_est = run_level_sd(args, fit)
    d = capacity(fit, workload, slo, mode=args.mode, engine=engine,
                 replications=args.replications, level=args.level, boot_samples=samples,
                 noise=not args.no_noise, rel_tol=args.rel_tol, max_load=args.max_load,
                 seed=args.seed, backend=args.backend, n_jobs=args.jobs,
                 scheduler=args.scheduler, run_sd=run_sd,
                 resample_requests=args.resample_requests,
                 unit_arrivals=_recorded_arrivals(args, workload))
    if est is not None:
        d["assumptions"]["overhead_estimate"] = est._asdict()
    if run_est is not None:
        d["assumptions"]["run_level_estimate"] = run_est
    key, unit = ("max_rate", "req/s") if args.mode == "rate" else ("max_concurrency", "clients")
    lines = [f"{key.replace('_', ' ')}: {_answer_text(d, key, unit)}",
             f"SLO: {_slo_text(slo)}",
             (f"model {d['assumptions']['model']}; engine max_num_seqs {engine.max_num_seqs}, "
             f"max_num_batched_tokens {engine.max_num_batched_tokens}, policy {engine.policy}, "
             f"step overhead {engine.step_overhead_ms:.3g} ms; {workload.n} requests"),
             f"run-level term: {d['assumptions']['run_level']}",
             "load        attainment  goodput(req/s)  p99 TTFT(ms)  p99 TPOT(ms)"]
    for c in d["attainment_curve"]:
        lines.append(f"{c['load']:<11.4g} {c['attainment']:<11.3f} {c['goodput_req_s']:<15.3g} "
                     f"{_g(c['p99_ttft_ms']):<13} {_g(c['p99_tpot_ms'])}")
    return "\n".join(lines), d


def tune_command(args) -> tuple[str, dict]:
    """Run ``perfmodel tune``; return (text, JSON-safe dict)."""
    from perfmodel.cli.sla import int_list

    check_backend(args.backend, args.scheduler)
    fit, workload, slo, engine, est, samples = load_fit_and_inputs(args)
    run_sd, run_est = run_level_sd(args, fit)
    d = tune_token_budget(fit, workload, slo, mode=args.mode, objective=args.objective,
                          load=args.load, max_num_seqs_grid=int_list(args.seqs_grid, "--seqs-grid"),
                          max_num_batched_tokens_grid=int_list(args.tokens_grid, "--tokens-grid"),
                          engine=engine, replications=args.replications, level=args.level,
                          boot_samples=samples, noise=not args.no_noise, rel_tol=args.rel_tol,
                          max_load=args.max_load, seed=args.seed, backend=args.backend,
                          n_jobs=args.jobs, scheduler=args.scheduler, run_sd=run_sd)
    if run_est is not None:
        d["assumptions"]["run_level_estimate"] = run_est
    if est is not None:
        d["assumptions"]["overhead_estimate"] = est._asdict()
    rec, base = d["recommended"], d["baseline"]

    def iv(x):
        return "" if x is None else f" ({x['level']:.0%} interval {x['lower']:.3g} - {x['upper']:.3g})"

    lines = [(f"recommended: --max-num-seqs {rec['max_num_seqs']} --max-num-batched-tokens "
             f"{rec['max_num_batched_tokens']}"),
             f"{d['objective']['unit']}: {rec['objective']:.3g}{iv(rec['interval'])}"
             + ("" if rec["prob_best"] is None else
                f"; best in {rec['prob_best']:.0%} of the draws"),
             (f"baseline max_num_seqs {base['max_num_seqs']}, max_num_batched_tokens "
             f"{base['max_num_batched_tokens']}: {base['objective']:.3g}{iv(base['interval'])}; "
             f"gain {base['gain']:.3g}{iv(base['gain_interval'])}"),
             f"SLO: {_slo_text(slo)}; model {d['assumptions']['model']}; {workload.n} requests"]
    return "\n".join(lines), d


def _g(v) -> str:
    return "n/a" if v is None else f"{v:.4g}"


def _slo_text(slo: SLO) -> str:
    parts = [f"{m} <= {getattr(slo, m + '_ms'):g} ms" for m in ("ttft", "tpot", "e2e")
             if getattr(slo, m + "_ms") is not None]
    return ", ".join(parts) + f" for {slo.attainment:.4g} of requests"
