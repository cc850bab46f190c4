"""``perfmodel compare``: models and baselines by cross-validation (:mod:`perfmodel.stats.compare`)."""
from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd

from perfmodel._checks import check_int_range
from perfmodel.cli.common import add_random_state_argument, check_output
from perfmodel.core.scale import DEFAULT as DEFAULT_SCALE
from perfmodel.core.scale import SCALES
from perfmodel.errors import InputError
from perfmodel.stats.compare import (
    CV_SCHEMES,
    DEFAULT_BASELINES,
    DEFAULT_MODELS,
    compare,
    format_table,
    load_trace_arg,
)

__all__ = ["add_compare_arguments", "compare_command"]


def add_compare_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``perfmodel compare`` (the CLI adds -o/--output, --force, --json)."""
    parser.add_argument("trace", metavar="TRACE",
                        help="step trace file, or a dataset: splitwise:MODEL/HARDWARE/tpK "
                             "(e.g. splitwise:llama2-70b/a100/tp4), sarathi, vidur[:SEED]")
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS),
                        help="comma-separated models (default: %(default)s; context-aware "
                             "ones are skipped on traces without per-request context)")
    parser.add_argument("--baselines", default=",".join(DEFAULT_BASELINES),
                        help="comma-separated baselines, or '' for none (default: %(default)s)")
    parser.add_argument("--cv", default="grouped", choices=list(CV_SCHEMES),
                        help="a scheme of the evaluation protocol (perfmodel.stats.protocol): "
                             "grouped (config + identical schedule; 25-step blocks on an engine trace), "
                             "blocked25, blocked100, transfer (needs a workload column), "
                             "extrapolate (train on the lower S and B) or time (expanding window)")
    parser.add_argument("--test-workload", default=None,
                        help="--cv transfer: the value of the trace's workload column to predict "
                             "(trained on the others)")
    parser.add_argument("-k", "--folds", type=int, default=5, dest="k", help="folds (default 5)")
    add_random_state_argument(parser, "the folds, the multi-starts and the random forest")
    parser.add_argument("--starts", type=int, default=4, help="multi-start count per fit")
    parser.add_argument("--relative", default=DEFAULT_SCALE, choices=list(SCALES),
                        help="residuals of the model fits (default log)")
    parser.add_argument("--quantile", type=float, default=0.8,
                        help="extrapolation split: quantile of S and B (default 0.8)")
    parser.add_argument("--reference", default=None,
                        help="candidate the paired MAPE differences (diff_vs_ref, 90%% paired "
                             "cluster-bootstrap interval, sign-flip p) are taken against "
                             "(default: the model of record when compared, else the first model)")


def compare_command(args) -> tuple[str, dict]:
    """Run ``perfmodel compare``: write the table (CSV) and return (text, json dict)."""
    from perfmodel._io import atomic_write_text

    inputs = [args.trace] if Path(args.trace).exists() else []
    out = check_output(args.output, args.force, inputs=inputs)
    check_int_range("-k/--folds", args.k, 2)
    check_int_range("--starts", args.starts, 1)
    if not 0 < args.quantile < 1:
        raise InputError(f"--quantile must be in (0, 1), got {args.quantile}")
    df, label = load_trace_arg(args.trace)
    table = compare(df, models=args.models, baselines=args.baselines, cv=args.cv, k=args.k,
                    seed=args.seed, relative=args.relative, n_starts=args.starts,
                    quantile=args.quantile, test_workload=args.test_workload,
                    reference=args.reference)
    atomic_write_text(out, table.to_csv(index=False), force=args.force, inputs=inputs)
    nf = table.attrs["noise_floor"]
    floor = nf.get("oracle_median")
    if nf["kind"] == "none" or floor is None:
        # no repeated measurements: say so in words; the JSON holds null and the reason
        why = "the trace has no replicate steps" + (f"; {nf['note']}" if nf.get("note") else "")
        floor_text = f"noise floor: not available ({why})"
        nf_json = None
    else:
        why = None
        floor_text = (f"noise floor ({nf['kind']}): median-oracle MAPE {floor:.2f}%, "
                      f"(diagnostic: median CV {100 * nf['median_cv']:.2f}%)")
        nf_json = nf
    ref = table.attrs["reference"]
    head = (f"{label}: {len(df)} steps, cv={args.cv} ({int(table['k'].iloc[0])} folds), "
            f"relative={args.relative}; {floor_text}\n"
            f"differences vs {ref}: MAPE points, 90% paired cluster-bootstrap interval, "
            "sign-flip p")
    text = head + "\n" + format_table(table) + f"\n\nwrote {out}"
    records = [{k: (None if (isinstance(v, float) and not math.isfinite(v)) or v is pd.NA
                    else (int(v) if isinstance(v, (np.integer,)) else v))
                for k, v in r.items()} for r in table.to_dict(orient="records")]
    return text, {"trace": args.trace, "label": label, "n_steps": len(df), "cv": args.cv,
                  "relative": args.relative, "reference": ref, "noise_floor": nf_json,
                  "noise_floor_reason": why, "output": str(out),
                  "rows": records}
