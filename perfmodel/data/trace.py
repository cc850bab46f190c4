"""The step-trace schema: read, alias, validate, and turn into model features.

Problem
-------
A step-latency model is fitted to a *step trace*: one row per engine step
("model run") giving the number of requests ``B`` scheduled in the step, the
number of tokens ``S`` it computes and its wall time ``T`` in milliseconds.
Traces come from different collectors and papers with different column names,
file formats and defects (missing values, impossible steps, per-request lists
that disagree with the totals).  These modules map them onto one canonical
schema and refuse, with one message naming column, rows and count, anything
that is not a valid step.  This module is the one place to import them from.

Modules
-------
* :mod:`perfmodel.data.trace_schema` - canonical columns, limits, aliases,
  row numbering (the schema itself is documented there);
* :mod:`perfmodel.data.trace_lists` - per-request list cells, parsed and normalised;
* :mod:`perfmodel.data.trace_checks` - one checker per part of the schema;
* :mod:`perfmodel.data.trace_validate` - :func:`validate_trace`;
* :mod:`perfmodel.data.trace_read` - :func:`read_trace`: formats and parsers;
* :mod:`perfmodel.data.trace_features` - :func:`step_features`, :func:`time_order`.

Examples
--------
>>> import pandas as pd
>>> df = validate_trace(pd.DataFrame({"B": [1, 2], "S": [1, 9], "T": [5.0, 7.5]}))
>>> list(df.columns), describe_aliases(df)
(['batch_size', 'total_tokens', 'duration_ms'], "batch_size <- 'B', total_tokens <- 'S', duration_ms <- 'T'")
"""
from __future__ import annotations

from perfmodel.data.trace_checks import check_degenerate, check_step_columns
from perfmodel.data.trace_features import has_context, step_features, time_order
from perfmodel.data.trace_lists import ListColumn, parse_int_list, parse_list_column
from perfmodel.data.trace_read import RUN_COLUMN, read_runs, read_trace, trace_sha256
from perfmodel.data.trace_schema import (
    ALIASES,
    CANONICAL_COLUMNS,
    LIST_COLUMNS,
    MAX_COUNT,
    MIN_DURATION_MS,
    REQUIRED_COLUMNS,
    ROW_CONVENTION,
    describe_aliases,
    resolve_aliases,
)
from perfmodel.data.trace_validate import validate_trace

#: the public names, grouped by the module that defines each (in the order of Modules above)
__all__ = [  # noqa: RUF022 - grouped by home module, sorted within each group
    # trace_schema
    "ALIASES", "CANONICAL_COLUMNS", "LIST_COLUMNS", "MAX_COUNT", "MIN_DURATION_MS",
    "REQUIRED_COLUMNS", "ROW_CONVENTION", "describe_aliases", "resolve_aliases",
    # trace_lists
    "ListColumn", "parse_int_list", "parse_list_column",
    # trace_checks
    "check_degenerate", "check_step_columns",
    # trace_validate
    "validate_trace",
    # trace_read
    "RUN_COLUMN", "read_runs", "read_trace", "trace_sha256",
    # trace_features
    "has_context", "step_features", "time_order",
]
