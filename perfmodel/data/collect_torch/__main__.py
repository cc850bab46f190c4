"""Command line: ``python -m perfmodel.data.collect_torch --config CFG --out DIR [...]``.

Collects a step-latency trace with :func:`perfmodel.data.collect_torch.harness.collect`,
or, with ``--summarize CSV``, prints the noise floor of an existing trace.
"""
from __future__ import annotations

import argparse
import json
import sys


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m perfmodel.data.collect_torch",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--config", help="model config JSON (perfmodel/data/configs/llama-gpu-*.json)")
    ap.add_argument("--out", help="output folder (trace CSV + metadata JSON)")
    ap.add_argument("--basename", default="trace")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--backend", default="auto", choices=["auto", "flash_varlen", "sdpa"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-decode", type=int, default=800)
    ap.add_argument("--n-prefill", type=int, default=800)
    ap.add_argument("--n-mixed", type=int, default=800)
    ap.add_argument("--replicates", type=int, default=3)
    ap.add_argument("--max-kv-tokens", type=int, default=1_572_864)
    ap.add_argument("--max-decode-batch", type=int, default=256)
    ap.add_argument("--max-ctx", type=int, default=8192, help="upper end of context ranges")
    ap.add_argument("--max-tokens", type=int, default=8192, help="upper end of S ranges")
    ap.add_argument("--max-seconds", type=float, default=300.0,
                    help="stop timing after this many seconds (rows so far are kept)")
    ap.add_argument("--warmup-steps", type=int, default=10)
    ap.add_argument("--warmup-all", action="store_true",
                    help="run every configuration once untimed before timing")
    ap.add_argument("--warmup-max-seconds", type=float, default=60.0)
    ap.add_argument("--progress-every", type=int, default=250)
    ap.add_argument("--summarize", metavar="CSV", help="print the noise floor of a trace CSV")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from perfmodel.errors import InputError

    try:
        if args.summarize:
            import pandas as pd

            from perfmodel.data.collect_torch.harness import noise_floor
            print(json.dumps(noise_floor(pd.read_csv(args.summarize)), indent=2))
            return 0
        if not args.config or not args.out:
            raise InputError("--config and --out are required unless --summarize is given")
        from perfmodel.data.collect_torch.harness import WorkloadParams, collect, load_config

        cfg = load_config(args.config)
        params = WorkloadParams(
            seed=args.seed, n_decode=args.n_decode, n_prefill=args.n_prefill,
            n_mixed=args.n_mixed, decode_batch=(1, args.max_decode_batch),
            decode_ctx=(min(128, args.max_ctx), args.max_ctx),
            prefill_tokens=(min(16, args.max_tokens), args.max_tokens),
            prefill_ctx=(min(16, args.max_ctx), args.max_ctx),
            mixed_tokens=(min(32, args.max_tokens), args.max_tokens),
            mixed_max_decodes=min(255, args.max_decode_batch - 1) or 1,
            max_kv_tokens=args.max_kv_tokens)
        meta = collect(cfg, params, args.out, replicates=args.replicates, device=args.device,
                       dtype=args.dtype, backend=args.backend, max_seconds=args.max_seconds,
                       warmup_steps=args.warmup_steps, warmup_all=args.warmup_all,
                       warmup_max_seconds=args.warmup_max_seconds,
                       progress_every=args.progress_every,
                       basename=args.basename, config_path=args.config)
        print(json.dumps({k: meta.get(k) for k in
                          ("status", "rows", "gpu_name", "attn_backend", "timing_seconds",
                           "noise_floor")}, indent=2))
        return 0
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
