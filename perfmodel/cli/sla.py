"""``perfmodel sla``: the largest step size meeting a latency target (:mod:`perfmodel.decisions.sla`)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from perfmodel._checks import check_probability
from perfmodel._io import json_safe
from perfmodel.decisions.sla import (
    DEFAULT_S_MAX,
    DEFAULT_SEQS_GRID,
    frontier,
    max_batch,
    max_tokens,
    max_tokens_quantile,
    recommend_token_budget,
)
from perfmodel.errors import InputError

__all__ = ["add_sla_arguments", "int_list", "load_samples", "sla_command", "step_context"]


def int_list(text: str, name: str) -> list[int]:
    try:
        vals = [int(t) for t in str(text).replace(";", ",").split(",") if t.strip()]
    except ValueError:
        raise InputError(f"{name} must be integers separated by commas, got {text!r}") from None
    if not vals:
        raise InputError(f"{name} is empty")
    return vals


def add_sla_arguments(parser) -> None:
    """Add ``perfmodel sla`` options to an argparse (sub)parser."""
    parser.add_argument("fit", metavar="FIT.json",
                        help="fitted step model (written by perfmodel fit -o/--output)")
    parser.add_argument("--target-ms", type=float, required=True,
                        help="step-time target T* in ms (the ITL SLO with --recommend)")
    g = parser.add_mutually_exclusive_group()
    g.add_argument("--batch-size", type=int, help="largest S at this B (default mode)")
    g.add_argument("--total-tokens", type=int, help="converse: largest B at this S")
    g.add_argument("--frontier", action="store_true", help="S* over --batch-sizes")
    g.add_argument("--recommend", action="store_true",
                   help="recommend max_num_batched_tokens and max_num_seqs")
    parser.add_argument("--quantile", type=float, default=None,
                        help="meet the target with this probability q (0 < q < 1)")
    parser.add_argument("--method", choices=("auto", "delta", "bootstrap", "conformal"),
                        default="auto",
                        help="prediction distribution for --quantile (conformal: the upper end of "
                             "the fit's calibrated interval at level 2q - 1; auto, the default: "
                             "conformal when the fit stores that level, else delta)")
    parser.add_argument("--bootstrap-samples", default=None,
                        help="parameter samples for --method bootstrap (.npy or .csv, n x p)")
    parser.add_argument("--batch-sizes", default=",".join(map(str, DEFAULT_SEQS_GRID)),
                        help="comma-separated batch sizes for --frontier / max_num_seqs grid "
                             "for --recommend")
    parser.add_argument("--cover", choices=("full_step", "all_batch_sizes"), default="full_step",
                        help="--recommend: check only the full step (M, K) or every b <= M at K")
    parser.add_argument("--s-max", type=int, default=DEFAULT_S_MAX, help="search cap on S")
    c = parser.add_mutually_exclusive_group()
    c.add_argument("--context-tokens", type=float, default=None, metavar="N",
                   help="tokens already in each request's KV cache (needed by context-aware "
                        "models): a step at (B, S) is B requests of S/B tokens on N cached ones")
    c.add_argument("--workload", metavar="W",
                   help="bench result / request file: N = mean prompt + half the mean output")


def load_samples(path):
    if path is None:
        return None
    from pathlib import Path

    p = Path(path)
    if not p.exists():
        raise InputError(f"--bootstrap-samples file {p} does not exist")
    try:
        if p.suffix == ".npy":
            return np.load(p)
        return pd.read_csv(p).to_numpy(float)
    except (ValueError, UnicodeDecodeError, OSError, pd.errors.ParserError) as e:
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
        what = ".npy array" if p.suffix == ".npy" else "numeric CSV (UTF-8, n x p)"
        raise InputError(f"--bootstrap-samples file {str(p)!r} cannot be read as a {what}: "
                         f"{detail}") from None


def step_context(fit, args) -> tuple[dict | None, dict]:
    """(features for :class:`perfmodel.decisions.sla.Predictor`, the assumption stated).

    A context-aware model needs ``--context-tokens`` or ``--workload``:
    without either the command stops (exit 2) naming them.
    """
    from perfmodel.data.features import CONTEXT_KEYS

    need = [k for k in getattr(fit.model, "requires", ()) if k in CONTEXT_KEYS]
    x, source = getattr(args, "context_tokens", None), "--context-tokens"
    wl = getattr(args, "workload", None)
    if wl is not None:
        from perfmodel.decisions.requests_workload import load_workload_file

        w = load_workload_file(wl)
        x, source = w.mean_context_tokens, f"--workload {wl} (mean prompt + half mean output)"
    if x is None:
        if need:
            raise InputError(f"model {fit.model_name} is context-aware ({', '.join(need)}): give "
                             "--context-tokens N (tokens already cached per request) or "
                             "--workload FILE")
        return None, {"context_aware": False, "context_tokens": None,
                      "rule": "the model has no context terms"}
    if not (x >= 0):
        raise InputError(f"--context-tokens must be >= 0, got {x!r}")
    return {"context_tokens": float(x)}, {"source": source}


def sla_command(args) -> tuple[str, dict]:
    """Run ``perfmodel sla``; return (text, JSON-safe dict)."""
    from perfmodel.core.results import FitResult
    from perfmodel.decisions.sla import Predictor

    fit = FitResult.from_json(args.fit)
    feats, ctx_source = step_context(fit, args)
    assumed = {**Predictor(fit, features=feats).context_assumption, **ctx_source,
               "model": fit.model_name, "fit_trace": fit.provenance.get("trace")}
    text, d = _answer(fit, args, feats)
    return text + f"\nassumed context: {assumed['rule']}", {**d, "assumed_context": assumed}


def resolve_method(fit, method: str, q: float | None) -> str:
    """``--method auto``: the calibrated quantile when the fit stores level ``2q - 1``, else delta.

    The delta-method band is not calibrated on held-out steps (it over-covers
    long steps and under-covers short ones on the H200 trace; paper, SLA
    inversion), so a fit made by ``perfmodel fit`` (which stores a Mondrian
    conformal calibration) is inverted on its calibrated quantile.
    """
    from perfmodel.decisions.predictor import stored_quantile_level

    if method != "auto":
        return method
    if q is None or stored_quantile_level(fit, q) is None:
        return "delta"
    return "conformal"


def _answer(fit, args, feats) -> tuple[str, dict]:
    q = args.quantile
    if q is not None:
        q = check_probability("q", q)
    samples = load_samples(getattr(args, "bootstrap_samples", None))
    if args.method == "bootstrap" and samples is None and (q is not None or args.recommend):
        raise InputError("--method bootstrap needs --bootstrap-samples FILE")
    method = resolve_method(fit, args.method, 0.95 if q is None and args.recommend else q)
    kw = {"method": method, "boot_samples": samples, "features": feats}
    if args.recommend:
        grid = int_list(args.batch_sizes, "--batch-sizes")
        d = recommend_token_budget(fit, args.target_ms, 0.95 if q is None else q,
                                   max_num_seqs_grid=grid, s_max=args.s_max,
                                   cover=getattr(args, "cover", "full_step"), **kw)
        d = json_safe(d)
        if d["feasible"]:
            text = (f"recommended: --max-num-seqs {d['max_num_seqs']} --max-num-batched-tokens "
                    f"{d['max_num_batched_tokens']}\n{d['reason']}\n"
                    f"worst case at the cap: b={d['worst_case']['batch_size']} requests, "
                    f"{d['worst_case']['predicted_q_ms']:.4g} ms ({d['q']:g}-quantile)\n"
                    f"rule: {d['rule']}")
        else:
            text = d["reason"]
        text = f"{d['label']}\n{text}"
        return text, {"mode": "recommend", **d}
    if args.frontier:
        grid = int_list(args.batch_sizes, "--batch-sizes")
        df = frontier(fit, grid, args.target_ms, q, s_max=args.s_max, **kw)
        recs = json_safe(df.astype(object).where(df.notna(), None).to_dict("records"))
        text = df.to_string(index=False)
        return text, {"mode": "frontier", "target_ms": args.target_ms, "q": q, "rows": recs}
    if args.total_tokens is not None:
        a = max_batch(fit, args.total_tokens, args.target_ms, q=q, **kw)
        text = (f"max batch size at S={a.total_tokens}: {a.max_batch_size}\n{a.reason}"
                if a.feasible else a.reason)
        return text, {"mode": "max_batch", **a.to_dict()}
    if args.batch_size is None:
        raise InputError("give --batch-size, --total-tokens, --frontier or --recommend")
    if q is None:
        a = max_tokens(fit, args.batch_size, args.target_ms, s_max=args.s_max, features=feats)
    else:
        a = max_tokens_quantile(fit, args.batch_size, args.target_ms, q, s_max=args.s_max, **kw)
    text = (f"max tokens at B={a.batch_size}: {a.max_total_tokens}\n{a.reason}"
            if a.feasible else a.reason)
    return text, {"mode": "max_tokens", **a.to_dict()}

