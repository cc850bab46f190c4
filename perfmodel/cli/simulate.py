"""``perfmodel simulate``: a continuous-batching server driven by a fitted step model
(:mod:`perfmodel.decisions.simulate`)."""
from __future__ import annotations

from perfmodel.cli.common import add_random_state_argument
from perfmodel.decisions.simulate import (
    POLICIES,
    EngineConfig,
    estimate_step_overhead,
    simulate_closed_loop,
    simulate_open_loop,
)
from perfmodel.errors import InputError

__all__ = ["add_simulate_arguments", "simulate_command"]


def add_simulate_arguments(parser) -> None:
    """Add ``perfmodel simulate`` options to an argparse (sub)parser."""
    parser.add_argument("fit", metavar="FIT.json",
                        help="fitted step model (written by perfmodel fit -o/--output)")
    parser.add_argument("--num-requests", type=int, required=True, help="requests in all (N)")
    parser.add_argument("--concurrency", type=int, help="closed-loop clients (C)")
    parser.add_argument("--rate", type=float, help="open loop: Poisson arrivals per second")
    parser.add_argument("--prompt-tokens", type=int, required=True, help="prompt length P")
    parser.add_argument("--output-tokens", type=int, required=True, help="output length O")
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument("--policy", choices=POLICIES, default="decode_first")
    parser.add_argument("--no-chunked-prefill", action="store_true",
                        help="disable chunked prefill (a prompt must fit in one step)")
    parser.add_argument("--step-overhead-ms", type=float, default=None,
                        help="per-step time outside the model run (default 0, or estimated "
                             "from --trace)")
    parser.add_argument("--trace", help="step trace to estimate the per-step overhead from")
    parser.add_argument("--request-intake-ms", type=float, default=0.0,
                        help="client round trip: send to schedulable (ms, default 0)")
    parser.add_argument("--response-delay-ms", type=float, default=0.0,
                        help="client round trip: a token's step end to the client (ms, default 0)")
    add_random_state_argument(parser, "the simulated arrivals (open loop) and step-time noise")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def simulate_command(args) -> tuple[str, dict]:
    """Run ``perfmodel simulate``; return (text, JSON-safe dict)."""
    from perfmodel.core.results import FitResult

    fit = FitResult.from_json(args.fit)
    overhead = args.step_overhead_ms
    est = None
    if overhead is None and getattr(args, "trace", None):
        from perfmodel.data.trace import read_trace

        est = estimate_step_overhead(read_trace(args.trace))
        overhead = est.overhead_ms
    overhead = 0.0 if overhead is None else overhead
    engine = EngineConfig(max_num_seqs=args.max_num_seqs,
                          max_num_batched_tokens=args.max_num_batched_tokens,
                          policy=args.policy, enable_chunked_prefill=not args.no_chunked_prefill,
                          step_overhead_ms=overhead, request_intake_ms=args.request_intake_ms,
                          response_delay_ms=args.response_delay_ms)
    common = {"engine": engine, "seed": args.seed, "keep_steps": False}
    if args.concurrency is not None and args.rate is not None:
        raise InputError("give --concurrency (closed loop) or --rate (open loop), not both")
    if args.rate is not None:
        r = simulate_open_loop(fit, rate=args.rate, num_requests=args.num_requests,
                               prompt_tokens=args.prompt_tokens,
                               output_tokens=args.output_tokens, **common)
    else:
        if args.concurrency is None:
            raise InputError("give --concurrency (closed loop) or --rate (open loop)")
        r = simulate_closed_loop(fit, args.num_requests, args.concurrency, args.prompt_tokens,
                                 args.output_tokens, **common)
    d = r.to_dict()
    d["model"] = fit.model_name
    if est is not None:
        d["overhead_estimate"] = est._asdict()
    c = d["config"]
    lines = [
        (f"simulated {c['mode'].replace('_', '-')} run with model {fit.model_name}: "
         f"{d['num_requests']} requests, prompt {c['prompt_tokens']}, output {c['output_tokens']}"
         + (f", concurrency {c['concurrency']}" if c["mode"] == "closed_loop"
            else f", rate {c['rate']}/s")),
        (f"scheduler: policy {c['policy']}, max_num_seqs {c['max_num_seqs']}, "
         f"max_num_batched_tokens {c['max_num_batched_tokens']}, "
         f"chunked prefill {'on' if c['enable_chunked_prefill'] else 'off'}, "
         f"step overhead {c['step_overhead_ms']:.3g} ms"
         + (f", client round trip {c['request_intake_ms']:.3g} ms in, "
            f"{c['response_delay_ms']:.3g} ms out" if (c["request_intake_ms"]
                                                      or c["response_delay_ms"]) else "")),
        f"output throughput  {d['output_throughput_tok_s']:.4g} tokens/s",
        f"median e2e latency {d['median_e2e_s']:.4g} s (p90 {d['p90_e2e_s']:.4g} s)",
        f"median TTFT        {d['median_ttft_s']:.4g} s",
        (f"mean TPOT          {d['mean_tpot_ms']:.4g} ms" if d["mean_tpot_ms"] is not None
         else "mean TPOT          n/a (one output token)"),
        (f"steps              {d['n_steps']} "
         f"(mean batch {d.get('mean_batch_size', float('nan')):.3g})"),
    ]
    return "\n".join(lines), d
