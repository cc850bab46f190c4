"""Checking a real-client series against a protocol frozen before it was collected.

Problem
-------
A prediction interval whose form was chosen after seeing the runs it is checked
on (the run-level term of :mod:`perfmodel.decisions.run_intervals`, designed on
the replicated series) is a development check.  A confirmation fixes, in a
committed file, everything the check uses -- the fit, the run-level sd, the
replay settings, the capacity interval and the acceptance rules -- and only
then collects the series.  ``scripts/freeze_real_client_protocol.py`` writes
that file; this module reads it and checks a series against it without
recomputing anything it fixes:

* :func:`min_inside` -- the acceptance bound on how many runs a calibrated
  interval must cover (a one-sided binomial bound);
* :func:`load_protocol` -- the frozen file, checked;
* :func:`collected_after` -- every run of the series started after the freeze;
* :func:`rate_outcomes` -- whether each run at a planned rate met the SLO
  target as the frozen capacity interval predicted.

The acceptance bound was checked against :func:`scipy.stats.binom.cdf` by hand
for n = 11, level 0.9 (P(X <= 7) = 0.019, P(X <= 8) = 0.090: bound 8), and the
rules on hand-built results in ``tests/decisions/test_confirmation.py``.
"""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pandas as pd
from scipy import stats

from perfmodel._checks import check_int_range, check_probability
from perfmodel.errors import InputError

PROTOCOL_KEYS = ("frozen_utc", "series", "model", "run_level", "replay", "capacity",
                 "acceptance")
OUTCOMES = ("meets", "misses", "no prediction")


def min_inside(n: int, level: float, alpha: float = 0.05) -> int:
    """Largest count k with P(X < k) <= alpha for X ~ Binomial(n, level).

    A calibrated interval of level ``level`` covers each of ``n`` independent
    runs with probability ``level``; fewer than k covered runs then happen with
    probability at most ``alpha``, so a count below k rejects the interval.
    """
    n = check_int_range("n", n, 1)
    level = check_probability("level", level)
    alpha = check_probability("alpha", alpha)
    k = 0
    while k < n and stats.binom.cdf(k, n, level) <= alpha:
        k += 1
    return k


def load_protocol(path) -> dict[str, Any]:
    """The frozen protocol written by ``scripts/freeze_real_client_protocol.py``."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"protocol {str(p)!r} is not a file")
    try:
        proto = json.loads(p.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"protocol {str(p)!r} is not JSON: {e}") from None
    if not isinstance(proto, dict):
        raise InputError(f"protocol {str(p)!r} is not a JSON object")
    missing = [k for k in PROTOCOL_KEYS if k not in proto]
    if missing:
        raise InputError(f"protocol {str(p)!r} lacks {', '.join(missing)}")
    bad = {r: o for r, o in proto["acceptance"].get("rate_outcomes", {}).items()
           if o not in OUTCOMES}
    if bad:
        raise InputError(f"protocol {str(p)!r}: unknown rate outcomes {bad}")
    return proto


def _utc(text: str, fmt: str, what: str) -> dt.datetime:
    try:
        return dt.datetime.strptime(text, fmt).replace(tzinfo=dt.UTC)
    except (TypeError, ValueError):
        raise InputError(f"{what}: {text!r} is not a time of the form {fmt}") from None


def collected_after(series, frozen_utc: str) -> pd.DataFrame:
    """Per run of ``series``: its bench start (``bench.json`` ``date``, UTC) and
    whether it is after ``frozen_utc`` (``YYYY-MM-DDTHH:MM:SSZ``).

    ``vllm bench serve`` writes ``date`` in the host's local time; the runs
    here were collected on a host whose local time is UTC (the protocol file
    and the collection log are both in UTC).
    """
    frozen = _utc(frozen_utc, "%Y-%m-%dT%H:%M:%SZ", "frozen_utc")
    root = Path(series)
    runs = sorted(d for d in root.iterdir() if (d / "bench.json").is_file()) \
        if root.is_dir() else []
    if not runs:
        raise InputError(f"series {str(root)!r} has no run folder (with a bench.json)")
    rows = []
    for d in runs:
        date = json.loads((d / "bench.json").read_text()).get("date")
        start = _utc(date, "%Y%m%d-%H%M%S", f"{d.name}/bench.json date")
        rows.append({"run": d.name, "start_utc": start, "after": start > frozen})
    return pd.DataFrame(rows)


def rate_outcomes(result, protocol: dict) -> pd.DataFrame:
    """The frozen capacity interval's predicted outcome against each run's measured one.

    Parameters
    ----------
    result : :func:`perfmodel.decisions.real_client.validate_series` of the series
        (its runs' ``attainment``, ``engine``, ``request_rate``,
        ``max_concurrency``)
    protocol : :func:`load_protocol`'s dict

    Returns
    -------
    DataFrame, one row per open-loop run with the training run's limits whose
    rate the protocol planned: ``run``, ``rate``, ``attainment`` (measured
    share within the SLO), ``met`` (>= the protocol's target), ``predicted``
    (``meets`` / ``misses`` / ``no prediction``) and ``agrees`` (None where no
    prediction).
    """
    plan = protocol["acceptance"]["rate_outcomes"]
    target = float(protocol["capacity"]["attainment_target"])
    engine = result["capacity"]["engine"]
    rows = []
    for name, r in result["runs"].items():
        if r.get("max_concurrency") is not None or r["engine"] != engine:
            continue
        key = f"{r['request_rate']:g}"
        if key not in plan:
            continue
        met = r["attainment"]["measured"] >= target
        pred = plan[key]
        rows.append({"run": name, "rate": float(r["request_rate"]),
                     "attainment": float(r["attainment"]["measured"]), "met": bool(met),
                     "predicted": pred,
                     "agrees": None if pred == "no prediction" else met == (pred == "meets")})
    if not rows:
        raise InputError("no open-loop run with the training run's limits at a planned rate")
    return pd.DataFrame(rows).sort_values(["rate", "run"], ignore_index=True)
