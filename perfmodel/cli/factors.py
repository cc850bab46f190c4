"""``perfmodel factors``: secondary-factor analysis at a fixed step size
(:mod:`perfmodel.decisions.factors`)."""
from __future__ import annotations

from perfmodel.cli.common import add_random_state_argument
from perfmodel.decisions.factors import secondary_factors

__all__ = ["add_factors_arguments", "factors_command"]


def add_factors_arguments(parser) -> None:
    """Add ``perfmodel factors`` options to an argparse (sub)parser."""
    parser.add_argument("trace", metavar="TRACE", help="step trace (csv/parquet/jsonl)")
    parser.add_argument("--tokens", type=int, required=True, help="the fixed token count S")
    parser.add_argument("--tol", type=int, default=0, help="accept |S - tokens| <= tol")
    parser.add_argument("--fit", default=None, metavar="FIT.json",
                        help="fitted model: how much of the variance it already explains")
    add_random_state_argument(parser, "the random forest and its cross-validation")
    parser.add_argument("--n-estimators", type=int, default=200)


def factors_command(args) -> tuple[str, dict]:
    """Run ``perfmodel factors``; return (text, JSON-safe dict)."""
    from perfmodel.data.trace import read_trace

    df = read_trace(args.trace)
    fit = None
    if getattr(args, "fit", None):
        from perfmodel.core.results import FitResult

        fit = FitResult.from_json(args.fit)
    r = secondary_factors(df, args.tokens, args.tol, fit=fit, seed=args.seed,
                          n_estimators=args.n_estimators)
    return r.report(), r.to_dict()
