"""The ``perfmodel`` command.

Every sub-command checks its input first.  On bad input it prints ONE line,
``perfmodel: error: <what is wrong>``, to standard error and exits with
status 2 -- never a traceback.  It never overwrites an existing output file
unless ``--force`` is given, never one of its own inputs or anything that is
not a regular file (even with ``--force``), and writes outputs atomically
(temporary file plus link or rename, :mod:`perfmodel._io`), so a failed,
interrupted (Ctrl-C, exit 130) or terminated (SIGTERM, exit 143) run leaves
no truncated file behind.  Warnings raised on the way to an error are not
shown; those of a successful run are shown after it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path

import numpy as np

from perfmodel import __version__
from perfmodel._checks import check_int_range, check_positive
from perfmodel._io import Terminated, atomic_write_text, json_safe, terminate_as_interrupt
from perfmodel.cli import capacity as cli_capacity
from perfmodel.cli import collect as cli_collect
from perfmodel.cli import compare as cli_compare
from perfmodel.cli import convert as cli_convert
from perfmodel.cli import coverage as cli_coverage
from perfmodel.cli import factors as cli_factors
from perfmodel.cli import replay as cli_replay
from perfmodel.cli import simulate as cli_simulate
from perfmodel.cli import sla as cli_sla
from perfmodel.cli.common import (
    Parser,
    UsageError,
    add_backend_arguments,
    add_random_state_argument,
    add_run_level_arguments,
    check_output,
    check_run_traces,
    emit,
    run_level_sd,
)
from perfmodel.errors import InputError, PerfmodelError

#: the default model and loss; chosen from held-out measurements (README, "Model of record")
DEFAULT_MODEL = "auto"
DEFAULT_LOSS = "linear"


def resolve_model(name: str, df) -> str:
    """Resolve ``auto`` to :func:`perfmodel.core.model.default_for` of the trace ``df``."""
    if name != "auto":
        return name
    from perfmodel.core.model import default_for

    return default_for(df)


# ---------------------------------------------------------------------------
def cmd_fit(args):
    from perfmodel._parallel import check_backend
    from perfmodel.core.fit import fit_model, trace_fit_data

    check_int_range("--starts", args.starts, 1)
    if args.bootstrap:
        check_int_range("--bootstrap", args.bootstrap, 2)
    check_backend(args.backend, args.scheduler)
    out = check_output(args.output, args.force, inputs=args.trace)
    df, run_column = _read_fit_traces(args)
    _check_run_term_args(args, run_column)
    sibling_traces = _check_sibling_args(args, run_column)
    model = resolve_model(args.model, df)
    window = tuple(args.outlier_window) if args.outlier_window else None
    relative = "absolute" if args.absolute else args.relative
    # the fit's features and step times, computed once from the validated frame (the same
    # fit as fit_model(df, ...)); without intervals or bootstrap nothing reads the frame
    # after this, so its columns are freed before the fit; the conformal calibration takes
    # the fold groups (computed first, from the per-request lists) and these features, and
    # keeps only the columns it reads (README, "Large traces")
    attrs, groups = df.attrs, None
    if args.intervals == "conformal" and not args.bootstrap and window is None:
        from perfmodel.data.trace import LIST_COLUMNS
        from perfmodel.stats.intervals import calibration_columns
        from perfmodel.stats.validation import fold_groups

        keep = calibration_columns(df, run_column) + list(LIST_COLUMNS)  # + the features'
        df = df[[c for c in df.columns if c in keep]]
        groups = fold_groups(df)
    feats, y = trace_fit_data(df, model)
    if groups is not None:
        df = df[calibration_columns(df, run_column)]
    elif args.intervals != "conformal" and not args.bootstrap:
        df = None
    res = fit_model(feats, model, y=y, loss=args.loss, relative=relative, n_starts=args.starts,
                    seed=args.seed, outlier_window=window, scale=not args.no_scale,
                    allow_degenerate=args.allow_degenerate)
    fit_data = (feats, y) if groups is not None else None
    del feats, y
    # the reader hashed each file already: one hash, or one per run (read_trace / read_runs)
    one = len(args.trace) == 1
    res.provenance["trace"] = str(args.trace[0]) if one else [str(t) for t in args.trace]
    res.provenance["trace_sha256"] = attrs["sha256"]
    if attrs.get("alias_map"):
        res.provenance["alias_map"] = attrs["alias_map"]
    if attrs.get("dropped"):
        res.provenance["dropped_invalid_rows"] = len(attrs["dropped"])
    _calibrate(args, res, df, run_column, groups, fit_data,
               siblings=_sibling_records(args, res, sibling_traces, relative))
    del fit_data, groups
    summary = res.summary()
    if args.bootstrap:
        from perfmodel.stats.uncertainty import attach_bootstrap, bootstrap

        groups = None
        if args.scheme == "cluster":
            from perfmodel.stats.validation import fold_groups

            groups = fold_groups(df)
        bs = bootstrap(res, df, n_boot=args.bootstrap, scheme=args.scheme, seed=args.seed,
                       n_jobs=args.jobs, method=args.ci_method, progress=not args.json,
                       backend=args.backend, scheduler=args.scheduler, groups=groups)
        attach_bootstrap(res, bs)
        summary = res.summary()
        summary["bootstrap"] = res.provenance["bootstrap"]
    atomic_write_text(out, json.dumps(json_safe(summary), indent=2, allow_nan=False) + "\n",
                      force=args.force, inputs=args.trace)
    emit(args, res.fit_report() + f"\n\nwrote {out}", summary)
    return 0


def _read_fit_traces(args):
    """The trace(s) of ``perfmodel fit`` and the run column of an across-run calibration.

    One trace: read as ever; several: one run each (:func:`read_runs`, column
    ``run``).  ``--interval-calibration auto`` calibrates across runs when
    runs are given (several traces, or ``--run-column``), within the run
    otherwise; ``across-runs`` without two runs is bad input (exit 2).
    """
    from perfmodel.data.trace import RUN_COLUMN, read_runs, read_trace
    from perfmodel.stats.intervals import run_labels

    kw = {"drop_invalid": args.drop_invalid, "allow_degenerate": args.allow_degenerate,
          "lists": "arrow"}
    if len(args.trace) > 1:
        if args.run_column is not None:
            raise InputError("--run-column names a column of ONE trace; several traces are "
                             f"one run each (column {RUN_COLUMN!r})")
        df, column = read_runs(args.trace, **kw), RUN_COLUMN
    else:
        df, column = read_trace(args.trace[0], **kw), args.run_column
    mode = args.interval_calibration
    if mode == "across-runs" and column is None:
        raise InputError("--interval-calibration across-runs needs several runs: give several "
                         "traces (one run each) or --run-column COLUMN")
    if mode == "within-run" or args.intervals != "conformal":
        column = None
    if column is not None:
        run_labels(df, column)  # the column exists and holds >= 2 runs
    return df, column


def _check_sibling_args(args, run_column) -> dict:
    """``--sibling-traces``, checked and read before the fit: a within-run conformal
    calibration, no step log twice, none of the fit's own traces; ``{path: trace}``."""
    if not args.sibling_traces:
        return {}
    if args.intervals != "conformal":
        raise InputError("--sibling-traces pool held-out scores into the conformal interval "
                         "calibration: they need --intervals conformal")
    if run_column is not None:
        raise InputError("--sibling-traces need a within-run calibration (give one trace, or "
                         "--interval-calibration within-run)")
    if args.absolute:
        raise InputError("--sibling-traces pool relative held-out errors: residuals in ms "
                         "(--absolute) differ between traces; fit on a relative scale")
    from perfmodel.data.trace import read_trace
    from perfmodel.data.trace_read import trace_sha256

    paths = check_run_traces(args.sibling_traces, args.trace, "--sibling-traces",
                             "siblings are other traces")
    # read (and so checked) before any fit; the same content under another name is the
    # fit's own trace, not a sibling
    traces = {p: read_trace(p, drop_invalid=args.drop_invalid,
                            allow_degenerate=args.allow_degenerate) for p in paths}
    own_sha = {trace_sha256(t) for t in args.trace}
    for p, d in traces.items():
        if d.attrs.get("sha256") in own_sha:
            raise InputError(f"--sibling-traces: {p} has the same content as the fit's own trace "
                             "(sha256): siblings are other traces")
    return traces


def _sibling_records(args, res, traces: dict, relative) -> list[dict]:
    """Each ``--sibling-traces`` trace fitted on its own as the main fit was, and scored."""
    from perfmodel.core.fit import fit_model
    from perfmodel.stats.intervals import sibling_scores

    out = []
    # each sibling is fitted without the fit's outlier window (LOW_MS, HIGH_MS are the fit's
    # own trace's times, not a sibling's)
    if traces:
        res.provenance["sibling_traces"] = {p: sd.attrs.get("sha256") for p, sd in traces.items()}
    for p, sd in traces.items():
        try:
            sf = fit_model(sd, res.model_name, loss=args.loss, relative=relative,
                           n_starts=args.starts, seed=args.seed,
                           scale=not args.no_scale, allow_degenerate=args.allow_degenerate)
        except PerfmodelError as e:
            raise InputError(f"--sibling-traces: {p} cannot be fitted with {res.model_name}: "
                             f"{e}") from None
        out.append(sibling_scores(sf, sd, str(p), seed=args.seed,
                                  n_starts=min(args.starts, 4)))
    return out


def _check_run_term_args(args, run_column) -> None:
    """``--run-sd`` / ``--run-traces`` of ``perfmodel fit``, checked before the fit: a
    within-run conformal calibration, an sd >= 0, run traces other than the fit's."""
    if args.run_sd is None and not args.run_traces:
        return
    if args.intervals != "conformal":
        raise InputError("--run-sd / --run-traces add a run-level term to the conformal "
                         "interval calibration: they need --intervals conformal")
    if run_column is not None:
        raise InputError("--run-sd / --run-traces need a within-run calibration: an across-runs "
                         "one holds the run shifts in its scores already (give one trace, or "
                         "--interval-calibration within-run)")
    if args.run_sd is not None:
        check_positive("run_sd", args.run_sd, allow_zero=True)
    else:
        check_run_traces(args.run_traces, args.trace)


def _calibrate(args, res, df, run_column=None, groups=None, fit_data=None,
               siblings=None) -> None:
    """``--intervals conformal``: store the held-out interval calibration in the fit, with
    the run-level term of ``--run-sd`` / ``--run-traces`` (:mod:`perfmodel.stats.run_term`)."""
    if args.intervals != "conformal":
        return
    from perfmodel.stats.intervals import calibrate_intervals

    try:
        res.interval_calibration = calibrate_intervals(res, df, seed=args.seed,
                                                       n_starts=min(args.starts, 4),
                                                       run_column=run_column, groups=groups,
                                                       fit_data=fit_data, siblings=siblings)
    except PerfmodelError as e:
        print(f"perfmodel: warning: no interval calibration stored ({e}); "
              "predict --interval will use the model-based band", file=sys.stderr)
        return
    sib = res.interval_calibration.get("siblings")
    if sib:
        ratios = [v for v in sib.get("spread_ratio", []) if v is not None]
        span = f"{min(ratios):.2g}-{max(ratios):.2g}" if ratios else "n/a"
        print(f"perfmodel: interval calibration pooled with the held-out scores of "
              f"{len(sib['labels'])} sibling trace(s) ({sum(sib['n_clusters'])} configurations); "
              f"their spread over this trace's: {span} (pooling assumes alike relative errors "
              "per regime)", file=sys.stderr)
    if args.run_sd is not None or args.run_traces:
        from perfmodel.stats.run_term import run_term_record, with_run_term

        sd, est = run_level_sd(args, res)
        res.interval_calibration = with_run_term(res.interval_calibration,
                                                 run_term_record(sd, estimate=est))


def _delegate(command):
    """A sub-command from a ``perfmodel.cli`` module: ``command(args) -> (text, obj)``."""
    def run(args):
        text, obj = command(args)
        emit(args, text, obj)
        return 0
    return run


def _load_fit(path):
    from perfmodel.core.results import FitResult

    return FitResult.from_json(Path(path))


def cmd_report(args):
    res = _load_fit(args.fit)
    emit(args, res.fit_report(), res.summary())
    return 0


def _predict_run_term(args, res) -> None:
    """``predict --run-sd | --run-traces``: put a run-level term on the fit's stored within-run
    calibration for this prediction (replacing a stored one; FIT.json is not changed)."""
    if args.run_sd is None and not args.run_traces:
        return
    if args.interval is None:
        raise InputError("--run-sd and --run-traces shape the interval: give --interval LEVEL")
    if args.interval_method in ("model", "online"):
        raise InputError("--run-sd and --run-traces apply to the conformal interval, not to "
                         f"--interval-method {args.interval_method}"
                         + (" (it learns the run's level from the run's measured steps)"
                            if args.interval_method == "online" else ""))
    if not res.interval_calibration:
        raise InputError(f"the fit in {args.fit} stores no interval calibration to add a "
                         "run-level term to (fit it with --intervals conformal)")
    if args.run_traces and any(Path(str(p)).resolve() == Path(args.trace).resolve()
                               for p in args.run_traces):
        raise InputError(f"--run-traces includes the predicted trace {args.trace!r}: the "
                         "run-level spread must come from other runs")
    from perfmodel.stats.run_term import run_term_record, with_run_term

    sd, est = run_level_sd(args, res)
    res.interval_calibration = with_run_term(res.interval_calibration,
                                             run_term_record(sd, estimate=est))


def cmd_predict(args):
    from perfmodel.data.trace import read_trace

    inputs = [args.fit, args.trace]
    out = check_output(args.output, args.force, inputs=inputs)
    res = _load_fit(args.fit)
    if args.interval is None and args.interval_method != "auto":
        raise InputError(f"--interval-method {args.interval_method} chooses the interval: give "
                         "--interval LEVEL")
    df = read_trace(args.trace, drop_invalid=args.drop_invalid, require_duration=False)
    _predict_run_term(args, res)
    pred = res.predict(df)
    bad = ~np.isfinite(pred) | (pred <= 0)
    if bad.any():
        raise InputError(f"the fit in {args.fit} predicts {int(bad.sum())} non-finite or "
                         f"non-positive step times on {args.trace}: nothing written")
    table = df.copy()
    table["predicted_ms"] = pred
    obj = {"output": str(out), "rows": len(table), "model": res.model_name,
           "mean_predicted_ms": float(np.mean(pred))}
    cols = "predicted_ms"
    if args.interval is not None:
        from perfmodel.stats.interval_online import METHOD as ONLINE
        from perfmodel.stats.interval_online import online_interval
        from perfmodel.stats.intervals import prediction_interval

        iv = (online_interval(res, df, args.interval) if args.interval_method == ONLINE else
              prediction_interval(res, df, args.interval, method=args.interval_method))
        table["lower_ms"], table["upper_ms"] = iv.lower, iv.upper
        if iv.regime is not None:  # conformal: the calibration regime of each step
            table["interval_regime"] = iv.regime
        obj["interval"] = {"level": iv.level, "method": iv.method,
                           "description": iv.description, "pools": iv.pools,
                           **({"calibration": iv.calibration} if iv.calibration else {})}
        if iv.method == "conformal":  # the run-level term (None: none), README.md
            obj["interval"]["run_term"] = res.interval_calibration.get("run_term")
        cols += ", lower_ms, upper_ms" + (", interval_regime" if iv.regime is not None else "")
        print(f"perfmodel: interval {iv.level:g}: {iv.method}: {iv.description}",
              file=sys.stderr)
        check_text = _interval_check(df, pred, iv, res, obj)
    json.dumps(json_safe(obj), allow_nan=False)  # everything checked before the write
    atomic_write_text(out, table.to_csv(index=False), force=args.force, inputs=inputs)
    text = f"wrote {len(table)} rows with {cols} to {out}"
    emit(args, text + (f"\n{check_text}" if args.interval is not None and check_text else ""),
         obj)
    return 0


def _interval_check(df, pred, iv, res, obj) -> str:
    """``predict --interval`` on a trace with measured ``duration_ms``: the interval's coverage
    per regime (:func:`perfmodel.stats.interval_coverage.interval_check`), stored under
    ``interval.check`` and returned as text ("" when the trace has no measured times).  A
    check that cannot be made (e.g. a ``config`` column with gaps) is skipped with a note on
    stderr: the predictions are the command's result."""
    from perfmodel.stats.interval_coverage import (
        CHECK_LEGEND,
        TOLERANCE,
        check_summary,
        format_check,
        interval_check,
        measured,
    )

    if not measured(df).any():
        return ""
    try:
        tab = interval_check(df, pred, iv)
    except InputError as e:
        print(f"perfmodel: note: no coverage check of the interval ({e})", file=sys.stderr)
        return ""
    fitted = res.provenance.get("trace_sha256")
    fitted = {fitted} if isinstance(fitted, str) else set(fitted or [])
    own = df.attrs.get("sha256") in fitted
    obj["interval"]["check"] = {
        "tolerance": TOLERANCE, "in_sample": bool(own),
        "regimes": json.loads(tab.to_json(orient="records"))}
    lines = [f"coverage of the {iv.level:g} interval on the measured steps"
             + (" (IN SAMPLE: this is the fit's own trace, not held-out steps)" if own else
                " (held-out only if the fit never saw these steps)")
             + f"; {CHECK_LEGEND.format(tol=TOLERANCE)}"]
    return "\n".join(lines + format_check(tab) + [check_summary(tab, TOLERANCE)]
                     + _other_check(df, pred, iv, res, obj))


#: ``predict``'s comparison with the online interval is skipped above this many steps: the
#: online interval is a loop over the steps in Python (about 13 s on 320,000 steps, against 2 s
#: for the prediction, the stored interval and its check)
OTHER_CHECK_MAX_STEPS = 100_000


def _other_check(df, pred, iv, res, obj) -> list[str]:
    """Beside the check of one of the two calibrated intervals, one line on the other's
    coverage of the same measured steps (``interval.check_other``).  Beside the online
    interval, the stored (advance) one: the decision commands can only use that one.  Beside
    the stored interval, the online one: a user monitoring or replaying a run can use it
    where the stored interval does not carry over (README.md, "Online intervals").  None
    beside the model band, or beside a stored interval with a run-level term (the online
    interval learns the run's level itself).  Skipped with a note on stderr where it cannot
    be made (e.g. a ``step`` column that repeats) or, for the online interval, above
    :data:`OTHER_CHECK_MAX_STEPS` steps: the predictions and the first check stand."""
    from perfmodel.stats.interval_coverage import TOLERANCE, check_summary, interval_check
    from perfmodel.stats.interval_online import METHOD as ONLINE
    from perfmodel.stats.interval_online import online_interval
    from perfmodel.stats.intervals import conformal_interval

    n = len(df)
    if iv.method == ONLINE:
        make, name, why = conformal_interval, "the stored conformal interval", (
            "the advance prediction, whose calibration sla --quantile inverts")
    elif iv.method == "conformal" and res.interval_calibration.get("run_term") is None:
        make, name, why = online_interval, "the online interval", (
            "--interval-method online: each step from the measured steps before it")
    else:
        return []
    if make is online_interval and n > OTHER_CHECK_MAX_STEPS:
        print(f"perfmodel: note: no comparison with {name} on {n} steps (more than "
              f"{OTHER_CHECK_MAX_STEPS}; --interval-method online gives it)", file=sys.stderr)
        return []
    try:
        other = make(res, df, iv.level)
        tab = interval_check(df, pred, other)
    except InputError as e:
        print(f"perfmodel: note: no comparison with {name} ({e})", file=sys.stderr)
        return []
    own = obj["interval"]["check"]["in_sample"]
    obj["interval"]["check_other"] = {"method": other.method, "tolerance": TOLERANCE,
                                      "in_sample": own,
                                      "regimes": json.loads(tab.to_json(orient="records"))}
    every = tab[tab["regime"] == "all"]
    share = f"all steps {float(every['coverage'].iloc[0]):.3f} covered; " if len(every) else ""
    where = " (IN SAMPLE)" if own else ""
    return [f"for comparison, {name} ({why}) on the same steps{where}: {share}"
            + check_summary(tab, TOLERANCE)]


def cmd_diagnose(args):
    """Residual tests of a fit on a trace, on the fit's own scale (:mod:`perfmodel.core.scale`)."""
    from perfmodel.core.scale import scale_of
    from perfmodel.data.trace import read_trace, step_features, time_order
    from perfmodel.stats.diagnostics import residual_table

    res = _load_fit(args.fit)
    df = read_trace(args.trace)
    f = step_features(df)
    scale = scale_of(res)
    resid = scale.residual(df["duration_ms"].to_numpy(float), res.predict(df))
    order = time_order(df)
    idx = np.argsort(order, kind="stable")
    table = residual_table(resid[idx], f["B"][idx], f["S"][idx], order=np.arange(len(idx)))
    text = (f"residual tests on the fit's scale, {scale.name} ({scale.residual_text}), "
            f"n = {len(resid)}, time-ordered\n" + table.to_string(index=False))
    emit(args, text, {"residual_scale": scale.name, "residual": scale.residual_text,
                       "n": len(resid), "tests": json.loads(table.to_json(orient="records"))})
    return 0


# ---------------------------------------------------------------------------
def _add_common(sp, out: bool = False, js: bool = True, fit_arg: bool = False) -> None:
    """Options every sub-command may share: the fit, ``-o/--output`` with ``--force``, ``--json``."""
    if fit_arg and not any(a.dest == "fit" for a in sp._actions):
        sp.add_argument("fit", metavar="FIT.json",
                        help="a fit written by perfmodel fit -o/--output")
    if out:
        sp.add_argument("-o", "--output", required=True, help="output file (refused if it exists)")
        sp.add_argument("--force", action="store_true", help="overwrite an existing output")
    if js and not any("--json" in a.option_strings for a in sp._actions):
        sp.add_argument("--json", action="store_true", help="machine-readable JSON output")


def _add_fit_parser(sub) -> None:
    """``perfmodel fit``: the model, loss and scale, the multi-start, data filters, intervals."""
    from perfmodel.core.model import MODELS, RECOMMENDED
    from perfmodel.core.scale import DEFAULT as DEFAULT_SCALE
    from perfmodel.core.scale import SCALES

    f = sub.add_parser("fit", help="fit a latency model to a step trace")
    f.add_argument("trace", nargs="+",
                   help="step trace (CSV, Parquet or JSON Lines); several: one engine run "
                        "each, fitted together, intervals calibrated across runs")
    _add_common(f, out=True)
    f.add_argument("--model", default=DEFAULT_MODEL, choices=["auto", *sorted(MODELS)],
                   help=f"model (default: auto = {RECOMMENDED['context']} when the trace has "
                        f"chunk_sizes and context_lens, else {RECOMMENDED['no_context']})")
    f.add_argument("--loss", default=DEFAULT_LOSS,
                   choices=["linear", "huber", "soft_l1", "cauchy", "tukey"])
    g = f.add_mutually_exclusive_group()
    g.add_argument("--relative", default=DEFAULT_SCALE,
                   choices=[n for n, s in SCALES.items() if s.relative],
                   help="relative residuals: " + "; ".join(
                       f"{n}: {s.residual_text}" for n, s in SCALES.items() if s.relative)
                   + f" (default {DEFAULT_SCALE})")
    g.add_argument("--absolute", action="store_true", help="absolute residuals in ms")
    add_random_state_argument(f, "the multi-start and the bootstrap")
    f.add_argument("--starts", type=int, default=8, help="multi-start count")
    f.add_argument("--no-scale", action="store_true", help="do not median-scale B and S")
    f.add_argument("--outlier-window", type=float, nargs=2, metavar=("LOW_MS", "HIGH_MS"),
                   help="drop steps outside [LOW, HIGH] ms (off by default; e.g. 1 300)")
    f.add_argument("--drop-invalid", action="store_true", help="drop invalid rows and report them")
    f.add_argument("--allow-degenerate", action="store_true",
                   help="fit a degenerate trace (every row identical, durations below 1 "
                        "microsecond, a single (B, S)) instead of refusing it")
    _add_fit_interval_arguments(f)
    f.set_defaults(func=cmd_fit)


def _add_fit_interval_arguments(f) -> None:
    """``perfmodel fit``: the bootstrap and the stored interval calibration."""
    f.add_argument("--bootstrap", type=int, default=0, metavar="N", help="add N bootstrap intervals")
    f.add_argument("--scheme", default="pairs",
                   choices=["pairs", "residual", "wild", "block", "cluster"],
                   help="bootstrap resampling; cluster: whole leak-free groups of the fold "
                        "engine (configuration, identical schedule, time block)")
    f.add_argument("--intervals", default="conformal", choices=["conformal", "none"],
                   help="store a held-out (cross-validated) Mondrian conformal calibration "
                        "of prediction intervals in FIT.json for predict --interval "
                        "(default: conformal; costs k = 5 refits)")
    f.add_argument("--interval-calibration", default="auto",
                   choices=["auto", "within-run", "across-runs"],
                   help="across-runs: score every held-out step with refits on the OTHER "
                        "runs, so the interval includes the run-to-run shift (needs several "
                        "traces or --run-column); auto: across-runs when runs are given, "
                        "else within-run (default auto)")
    f.add_argument("--run-column", default=None, metavar="COLUMN",
                   help="column of the trace naming each step's engine run (>= 2 runs)")
    f.add_argument("--sibling-traces", nargs="+", metavar="STEPLOG", default=None,
                   help="traces of the same engine on other hardware, models or settings, NOT "
                        "the fit's own: each is fitted on its own with the same model and "
                        "options and its held-out scores join the interval calibration's "
                        "pools (for a trace with too few configurations per regime; assumes "
                        "the relative error per regime is alike across them; README.md, "
                        "Prediction intervals)")
    add_run_level_arguments(f, sd_help=(
        "sd (log scale) of a run-level term stored with a within-run calibration: predict "
        "--interval then covers a step of ANOTHER run, all of whose steps are exp(u) times "
        "slower, u ~ N(0, SD^2) (README.md, Prediction intervals; default: no term)"))
    f.add_argument("--ci-method", default="percentile", choices=["percentile", "bca"])
    f.add_argument("--jobs", type=int, default=1, help="parallel jobs for the bootstrap")
    add_backend_arguments(f)


def _add_fit_readers(sub) -> None:
    """``perfmodel report``, ``predict`` and ``diagnose``: commands that read a fit."""
    r = sub.add_parser("report", help="print the fit report of FIT.json")
    r.add_argument("fit")
    _add_common(r)
    r.set_defaults(func=cmd_report)

    pr = sub.add_parser("predict", help="predict step times for a trace")
    pr.add_argument("fit")
    pr.add_argument("trace")
    _add_common(pr, out=True)
    pr.add_argument("--drop-invalid", action="store_true")
    pr.add_argument("--interval", type=float, default=None, metavar="LEVEL",
                    help="add lower_ms and upper_ms: the central prediction interval at LEVEL "
                         "(e.g. 0.9), and with a conformal interval interval_regime (each "
                         "step's calibration regime, phase|length); the method used is "
                         "printed on stderr")
    pr.add_argument("--interval-method", default="auto",
                    choices=["auto", "conformal", "model", "online"],
                    help="auto: the fit's stored conformal calibration if any, else the "
                         "model-based band (default auto); online: each step's interval from "
                         "the measured steps before it in the trace (adaptive conformal, for "
                         "monitoring or replaying a run; needs duration_ms)")
    add_run_level_arguments(pr, sd_help=(
        "sd (log scale) of a run-level term for this prediction, on the fit's stored "
        "within-run calibration (replaces a stored term; FIT.json is not changed): the "
        "interval then covers a step of a run all of whose steps are exp(u) times slower, "
        "u ~ N(0, SD^2) (README.md, Prediction intervals)"))
    pr.set_defaults(func=cmd_predict)

    d = sub.add_parser("diagnose", help="residual tests of a fit on a trace")
    d.add_argument("fit")
    d.add_argument("trace")
    _add_common(d)
    d.set_defaults(func=cmd_diagnose)


#: sub-commands with a module of their own in perfmodel/cli/: (name, help, shared options,
#: add the options, run it)
_MODULE_COMMANDS = (
    ("sla", "largest step size meeting a latency target", {"fit_arg": True},
     cli_sla.add_sla_arguments, cli_sla.sla_command),
    ("compare", "compare models and baselines by cross-validation", {"out": True},
     cli_compare.add_compare_arguments, cli_compare.compare_command),
    ("coverage", "held-out coverage of the prediction interval, per regime", {"out": True},
     cli_coverage.add_coverage_arguments, cli_coverage.coverage_command),
    ("simulate", "simulate a continuous-batching server", {"fit_arg": True},
     cli_simulate.add_simulate_arguments, cli_simulate.simulate_command),
    ("factors", "secondary-factor analysis at a fixed step size", {},
     cli_factors.add_factors_arguments, cli_factors.factors_command),
    ("capacity", "highest request rate / concurrency meeting TTFT-TPOT SLOs", {},
     cli_capacity.add_capacity_arguments, cli_capacity.capacity_command),
    ("tune", "token budget and max_num_seqs that maximise goodput under SLOs", {},
     cli_capacity.add_tune_arguments, cli_capacity.tune_command),
    ("replay", "replay a serving run's requests (TTFT, TPOT, latency)", {},
     cli_replay.add_replay_arguments, cli_replay.replay_command),
    ("convert", "write a trace as Parquet (recommended for large traces)", {"out": True},
     cli_convert.add_convert_arguments, cli_convert.convert_command),
)


def _add_module_parsers(sub) -> None:
    """The sub-commands of :data:`_MODULE_COMMANDS`, in that order."""
    for name, text, kw, add_arguments, command in _MODULE_COMMANDS:
        sp = sub.add_parser(name, help=text)
        add_arguments(sp)
        _add_common(sp, **kw)
        sp.set_defaults(func=_delegate(command))


def build_parser() -> argparse.ArgumentParser:
    """The ``perfmodel`` parser: one sub-parser per command, in the order ``--help`` lists them."""
    p = Parser(prog="perfmodel", description="Step-latency models for LLM serving engines.")
    p.add_argument("--version", action="version", version=f"perfmodel {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    _add_fit_parser(sub)
    _add_fit_readers(sub)
    _add_module_parsers(sub)
    cli_collect.add_collect_parser(sub)
    return p


def _run_command(args) -> int:
    """Run the sub-command; its warnings are shown only if it succeeds.

    A bad value often makes numpy warn (``invalid value encountered``) on its
    way to the one-line error; those warnings are noise before the error, so
    they are held back and shown after a successful run only.
    """
    with warnings.catch_warnings(record=True) as caught:
        rc = int(args.func(args) or 0)
    for w in caught:
        warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    return rc


def main(argv=None) -> int:
    """Entry point of the ``perfmodel`` console script."""
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        with terminate_as_interrupt():
            return _run_command(args)
    except UsageError as e:
        print(f"perfmodel: error: {e}", file=sys.stderr)
        return 2
    except (PerfmodelError, ValueError, OSError, KeyError) as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"perfmodel: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("perfmodel: interrupted (SIGINT); nothing half-written is left (a temporary "
              "output file, if any, was removed)", file=sys.stderr)
        return 130
    except Terminated:
        print("perfmodel: terminated (SIGTERM); nothing half-written is left (a temporary "
              "output file, if any, was removed)", file=sys.stderr)
        return 143
    except Exception as e:
        if os.environ.get("PERFMODEL_DEBUG"):
            raise
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(f"perfmodel: internal error: {type(e).__name__}: {msg} "
              "(set PERFMODEL_DEBUG=1 for a traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
