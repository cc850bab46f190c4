#!/usr/bin/env python3
"""Request-level validation against the real client: `vllm serve` + `vllm bench serve`.

Fits the model of record on the step log of one run of a series collected by
``scripts/collect_vllm_serve.sh``, replays every other run from its own
``bench.json`` (lengths and arrivals, or the closed loop of a
``--max-concurrency`` run; measured timings are only compared with) and asks
``capacity`` for the highest rate meeting the SLO.  The logic is
:func:`perfmodel.decisions.real_client.validate_series` (the notebook
``notebooks/13_real_client.ipynb`` uses the same functions).  Writes ``--out``
(JSON) and prints a table.  Usage::

    python scripts/validate_real_client.py data/vllm-serve/llama-small-20261126 \\
        --train repeat-1 --slo ttft_p99=1000,tpot_p99=50 --out build/real_client.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfmodel._io import atomic_write_text, json_safe
from perfmodel.decisions.real_client import capacity_check, validate_series
from perfmodel.errors import InputError


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("series", type=Path, help="folder of run folders (steps.csv + bench.json)")
    ap.add_argument("--train", required=True, help="run whose step log the model is fitted on")
    ap.add_argument("--slo", default="ttft_p99=1000,tpot_p99=50")
    ap.add_argument("--replications", type=int, default=20)
    ap.add_argument("--no-client-round-trip", action="store_true",
                    help="replay without the request intake and response delay")
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "real_client.json")
    args = ap.parse_args(argv)
    try:
        result = validate_series(args.series, args.train, args.slo,
                                 replications=args.replications,
                                 client_round_trip=not args.no_client_round_trip)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"fit {result['model']} on {result['train']} ({result['n_steps']} steps); "
          f"step overhead {result['step_overhead_ms']:.2f} ms")
    cd = result["client_delays"]
    if cd is not None:
        print(f"client round trip: intake {cd['request_intake_ms']:.1f} ms "
              f"({cd['n_intake_consistent']}/{cd['n_requests']} requests consistent), "
              f"response delay {cd['response_delay_ms']:.1f} ms (median of {cd['n_response']})")
    for name, res in result["runs"].items():
        e = {k: v["error"] for k, v in res.items() if isinstance(v, dict) and "error" in v}
        print(f"{name:>18}: " + "  ".join(f"{k} {100 * v:+.0f}%" for k, v in e.items()
                                          if v is not None))
    chk = capacity_check(result)
    print(f"capacity: {chk['max_rate']:.1f} req/s, {100 * chk['level']:.0f} % interval "
          f"[{chk['lower']:.1f}, {chk['upper']:.1f}]; measured: meets the SLO up to "
          f"{chk['last_pass']} req/s, fails at {chk['first_fail']} req/s; "
          f"inside the interval: {chk['inside']}")
    atomic_write_text(args.out, json.dumps(json_safe(result), indent=1), force=True,
                      make_parents=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
