"""``perfmodel coverage``: held-out coverage of the prediction interval on a trace
(:mod:`perfmodel.stats.interval_heldout`)."""
from __future__ import annotations

__all__ = ["add_coverage_arguments", "coverage_command"]


def _levels(text: str) -> list[float]:
    import argparse

    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"levels must be comma-separated numbers such as 0.8,0.9,0.95, got {text!r}") from None


def add_coverage_arguments(parser) -> None:
    """Add ``perfmodel coverage`` options to an argparse (sub)parser."""
    from perfmodel.core.model import MODELS

    parser.add_argument("trace", metavar="TRACE",
                        help="step trace with duration_ms (CSV, Parquet or JSON Lines)")
    from perfmodel.stats.interval_heldout import DEFAULT_LEVELS, SCHEMES

    parser.add_argument("--levels", type=_levels, default=list(DEFAULT_LEVELS),
                        help="comma-separated interval levels, each in 0.50..0.99 by 0.01 "
                             "(default 0.8,0.9,0.95)")
    parser.add_argument("--model", default="auto", choices=["auto", *sorted(MODELS)],
                        help="model fitted on each training side (default: auto, the model "
                             "of record for the trace's columns, as perfmodel fit)")
    parser.add_argument("--cv", default="auto", choices=list(SCHEMES),
                        help="outer and inner folds: auto = contiguous time blocks for a "
                             "time-ordered trace (step or timestamp, no config column), "
                             "configuration + identical-schedule groups otherwise; expanding = "
                             "forward in time (train on earlier steps, cover a later window: "
                             "shows a drift within the run; the first window is not tested)")
    parser.add_argument("-k", "--folds", type=int, default=5, dest="k",
                        help="outer folds, and inner folds of each calibration (default 5)")
    parser.add_argument("--starts", type=int, default=4,
                        help="multi-start count of each outer fold's fit (default 4; the "
                             "calibration's inner refits use at most 4, as perfmodel fit does)")
    parser.add_argument("--online", action="store_true",
                        help="also the online interval (predict --interval-method online): each "
                             "fold's held-out steps covered in time order, each from the "
                             "measured held-out steps before it; the table gains a method column")
    parser.add_argument("--drop-invalid", action="store_true",
                        help="drop invalid rows (reported) instead of refusing the trace")
    from perfmodel.cli.common import add_random_state_argument

    add_random_state_argument(parser, "the folds and the multi-starts")


def coverage_command(args) -> tuple[str, dict]:
    """Run ``perfmodel coverage``: write the per-regime table (CSV), return (text, json dict)."""
    import json
    import warnings

    import pandas as pd

    from perfmodel._checks import check_int_range
    from perfmodel._io import atomic_write_text
    from perfmodel.cli.common import check_output
    from perfmodel.data.trace import read_trace
    from perfmodel.errors import InputError
    from perfmodel.stats.interval_coverage import (
        CHECK_LEGEND,
        TOLERANCE,
        check_summary,
        format_check,
    )
    from perfmodel.stats.interval_heldout import (
        check_levels,
        held_out_coverage,
        held_out_intervals,
    )

    out = check_output(args.output, args.force, inputs=[args.trace])
    check_int_range("-k/--folds", args.k, 2)
    check_int_range("--starts", args.starts, 1)
    levels = check_levels(args.levels)
    df = read_trace(args.trace, drop_invalid=args.drop_invalid)
    if "duration_ms" not in df.columns:
        raise InputError(f"{args.trace} has no duration_ms: coverage needs measured step times")
    model = None if args.model == "auto" else args.model
    with warnings.catch_warnings():  # the refits' optimiser notes; the table is the result
        warnings.simplefilter("ignore")
        steps = held_out_intervals(df, levels=levels, model=model, scheme=args.cv, k=args.k,
                                   seed=args.seed, n_starts=args.starts)
    table = held_out_coverage(steps)
    if args.online:  # the same held-out steps, covered online from each fold's interval
        from perfmodel.stats.interval_online import online_held_out

        on = online_held_out(steps)
        table = pd.concat([table.assign(method="conformal"),
                           held_out_coverage(on, method="online").assign(method="online")],
                          ignore_index=True)
        table = table[["method"] + [c for c in table.columns if c != "method"]]
    atomic_write_text(out, table.to_csv(index=False), force=args.force, inputs=[args.trace])
    a = steps.attrs
    head = (f"{args.trace}: {len(steps)} held-out steps of {len(df)}, model {a['model']}, "
            f"{a['k']} outer folds ({a['scheme']}{'; ' + a['note'] if a['note'] else ''}), "
            f"each fitted ({args.starts} starts) and calibrated on its training side as "
            "perfmodel fit does\n"
            f"{CHECK_LEGEND.format(tol=TOLERANCE)}\n"
            "not checked: a shift between runs, workloads or machines (one trace)")
    lines = []
    for name, part in (table.groupby("method", sort=False) if args.online else [(None, table)]):
        part = part.drop(columns="method") if name else part
        lines += ([f"{name}:"] if name else []) + format_check(part) + [
            check_summary(part, TOLERANCE)]
    text = "\n".join([head, *lines, f"wrote {out}"])
    obj = {"trace": str(args.trace), "output": str(out), "model": a["model"],
           "scheme": a["scheme"], "note": a["note"] or None, "k": a["k"], "levels": levels,
           "n_steps": len(df), "n_held_out": len(steps), "tolerance": TOLERANCE,
           "online": bool(args.online),
           "rows": json.loads(table.to_json(orient="records"))}
    return text, obj
