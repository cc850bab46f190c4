"""``perfmodel convert``: a trace to Parquet, the recommended format for large traces
(:func:`perfmodel.data.typed_trace.write_parquet`)."""
from __future__ import annotations

__all__ = ["add_convert_arguments", "convert_command"]


def add_convert_arguments(parser) -> None:
    """Add ``perfmodel convert`` options to an argparse (sub)parser."""
    parser.add_argument("trace", metavar="TRACE", help="step trace (CSV, Parquet or JSON Lines)")
    parser.add_argument("--drop-invalid", action="store_true",
                        help="drop invalid rows (reported) instead of refusing the trace")


def convert_command(args) -> tuple[str, dict]:
    """Run ``perfmodel convert``: read and validate TRACE, write it as Parquet."""
    from pathlib import Path

    from perfmodel.cli.common import check_output
    from perfmodel.data.trace import read_trace
    from perfmodel.data.typed_trace import write_parquet
    from perfmodel.errors import InputError

    out = check_output(args.output, args.force)
    if Path(out).suffix.lower() not in (".parquet", ".pq"):
        raise InputError(f"convert writes Parquet: the output {str(out)!r} must end in "
                         "'.parquet' or '.pq'")
    df = read_trace(args.trace, drop_invalid=args.drop_invalid, lists="arrow")
    write_parquet(df, out, force=args.force)
    n_dropped = len(df.attrs.get("dropped") or [])
    obj = {"input": str(args.trace), "output": str(out), "rows": len(df),
           "dropped_invalid_rows": n_dropped, "columns": [str(c) for c in df.columns]}
    return (f"wrote {len(df)} validated rows ({len(df.columns)} columns) to {out}"
            + (f"; dropped {n_dropped} invalid rows" if n_dropped else "")), obj
