"""Request workloads and SLOs for request-level decisions (capacity, token budget).

Problem
-------
A request-level decision needs the requests a deployment serves (prompt and
output lengths, and possibly a measured arrival schedule) and the service
levels they must meet.  This module turns the three ways users give a
workload -- a ``vllm bench serve`` result file, a request file (read by
:func:`perfmodel.data.requests.load_workload`), or length distributions --
into a :class:`Workload`, and parses SLOs such as ``ttft_p99=500,tpot_p99=50``
into an :class:`SLO` that scores simulated requests.

Length distributions (:func:`parse_lengths`)
--------------------------------------------
``N`` or ``const:N`` (every request ``N`` tokens); ``uniform:LO,HI``
(integers, both ends included: ``vllm bench serve --dataset-name random``
draws lengths this way with ``--random-range-ratio``); ``lognormal:MEDIAN,SIGMA``
(rounded, at least 1).  Draws come from ``numpy.random.default_rng(seed)``.

SLOs (:meth:`SLO.parse`)
------------------------
Comma-separated ``METRIC[_pNN]=MS`` with METRIC ``ttft``, ``tpot`` or
``e2e``.  A request *meets the SLO* when it is within every limit (TPOT of a
one-token request is undefined and counts as met).  The SLO is *attained*
when the fraction of requests meeting it is at least ``attainment``; the
``_pNN`` suffix sets ``attainment = NN/100`` (``ttft_p99=500`` means 99 % of
requests within 500 ms), and all suffixes must agree; without a suffix the
``attainment`` argument (default 0.99) applies.  ``goodput`` is the number of
requests meeting the SLO per second of the run (the definition of
``vllm bench serve --goodput``).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perfmodel._checks import check_int_range, check_probability
from perfmodel.errors import InputError

__all__ = ["SLO", "Workload", "load_workload_file", "parse_lengths", "workload_from_lengths"]

DEFAULT_ATTAINMENT = 0.99
_METRICS = ("ttft", "tpot", "e2e")
_SLO_ITEM = re.compile(r"^(ttft|tpot|e2e)(?:_p(\d+(?:\.\d+)?))?$")


@dataclass(frozen=True)
class SLO:
    """Per-request limits (ms; None: no limit) and the attainment target (module docstring)."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    attainment: float = DEFAULT_ATTAINMENT

    def __post_init__(self):
        lim = [getattr(self, f"{m}_ms") for m in _METRICS]
        if all(v is None for v in lim):
            raise InputError("an SLO needs at least one limit (ttft, tpot or e2e)")
        for m, v in zip(_METRICS, lim, strict=True):
            if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise InputError(f"SLO limit {m} must be a positive number of ms, got {v!r}")
        check_probability("attainment", self.attainment, closed=True)
        if self.attainment <= 0:
            raise InputError(f"attainment must be in (0, 1], got {self.attainment!r}")

    @classmethod
    def parse(cls, text: str, attainment: float | None = None) -> SLO:
        """``'ttft_p99=500,tpot_p99=50'`` -> SLO (module docstring, "SLOs")."""
        if not isinstance(text, str) or not text.strip():
            raise InputError("--slo is empty: give e.g. ttft_p99=500,tpot_p99=50 (ms)")
        limits: dict[str, float] = {}
        pcts = set()
        for item in text.split(","):
            key, eq, val = item.strip().partition("=")
            m = _SLO_ITEM.match(key.strip().lower())
            if not eq or m is None:
                raise InputError(f"SLO item {item.strip()!r}: expected METRIC[_pNN]=MS with METRIC "
                                 f"in {_METRICS}, e.g. ttft_p99=500")
            try:
                ms = float(val)
            except ValueError:
                raise InputError(f"SLO item {item.strip()!r}: {val!r} is not a number of ms") from None
            if m.group(1) in limits:
                raise InputError(f"SLO gives {m.group(1)} twice")
            limits[m.group(1)] = ms
            if m.group(2) is not None:
                pcts.add(float(m.group(2)))
        if len(pcts) > 1:
            raise InputError(f"SLO percentiles differ ({sorted(pcts)}); one attainment target "
                             "applies to all limits: use one pNN or --attainment")
        att = attainment
        if pcts:
            p = pcts.pop() / 100.0
            if att is not None and abs(att - p) > 1e-12:
                raise InputError(f"--attainment {att:g} contradicts the SLO's p{p * 100:g}")
            att = p
        return cls(**{f"{k}_ms": v for k, v in limits.items()},
                   attainment=DEFAULT_ATTAINMENT if att is None else att)

    def met(self, requests) -> np.ndarray:
        """Boolean per request: within every limit (``requests``: a simulation's request table)."""
        ok = np.ones(len(requests), dtype=bool)
        for m, col, scale in (("ttft", "ttft_s", 1e3), ("tpot", "tpot_ms", 1.0),
                              ("e2e", "e2e_s", 1e3)):
            lim = getattr(self, f"{m}_ms")
            if lim is None:
                continue
            v = requests[col].to_numpy(float) * scale
            ok &= ~(v > lim)  # NaN (TPOT of a one-token request) counts as met
        return ok

    def as_dict(self) -> dict[str, Any]:
        return {"ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms, "e2e_ms": self.e2e_ms,
                "attainment": self.attainment,
                "rule": "a request meets the SLO when within every limit; attained when at "
                        "least `attainment` of the requests meet it"}


@dataclass(frozen=True)
class Workload:
    """Per-request prompt and output lengths, optional arrival times (s), and their source."""

    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    arrival_s: np.ndarray | None = None
    source: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        P = np.asarray(self.prompt_tokens)
        O = np.asarray(self.output_tokens)
        if P.ndim != 1 or P.shape != O.shape or P.size == 0:
            raise InputError("a workload needs equally long, non-empty prompt and output lengths")
        for name, a in (("prompt_tokens", P), ("output_tokens", O)):
            if not np.all(np.isfinite(a.astype(float))) or np.any(a < 1) or np.any(a != np.round(a)):
                raise InputError(f"workload {name} must be integers >= 1")

    @property
    def n(self) -> int:
        return int(np.asarray(self.prompt_tokens).size)

    @property
    def mean_context_tokens(self) -> float:
        """Mean prior context of a decode step: mean prompt + half the mean output."""
        return float(np.mean(self.prompt_tokens) + np.mean(self.output_tokens) / 2.0)

    def resample(self, n: int, seed: int = 0) -> Workload:
        """``n`` requests drawn with replacement from this one's (prompt, output) pairs."""
        n = check_int_range("num_requests", n, 1, integral_float=True)
        i = np.random.default_rng(seed).integers(0, self.n, n)
        src = {**self.source, "resampled": {"from_requests": self.n, "num_requests": n,
                                            "seed": int(seed), "with_replacement": True}}
        return Workload(np.asarray(self.prompt_tokens)[i], np.asarray(self.output_tokens)[i],
                        None, src)

    def describe(self) -> dict[str, Any]:
        P, O = np.asarray(self.prompt_tokens), np.asarray(self.output_tokens)
        out = dict(self.source)
        out.update(num_requests=self.n, prompt_tokens_mean=float(P.mean()),
                   prompt_tokens_range=[int(P.min()), int(P.max())],
                   output_tokens_mean=float(O.mean()),
                   output_tokens_range=[int(O.min()), int(O.max())])
        return out


def parse_lengths(name: str, spec, n: int, seed: int = 0) -> np.ndarray:
    """``n`` token lengths from a distribution spec (module docstring); ``name`` for messages."""
    n = check_int_range("num_requests", n, 1, integral_float=True)
    text = str(spec).strip().lower()
    kind, _, args = text.partition(":")
    if not args:
        kind, args = "const", kind
    try:
        vals = [float(a) for a in args.split(",") if a.strip()]
    except ValueError:
        raise InputError(f"{name} {spec!r}: expected N, const:N, uniform:LO,HI or "
                         "lognormal:MEDIAN,SIGMA") from None
    rng = np.random.default_rng(seed)
    if kind == "const" and len(vals) == 1 and vals[0] >= 1 and vals[0] == round(vals[0]):
        return np.full(n, int(vals[0]), dtype=np.int64)
    if (kind == "uniform" and len(vals) == 2 and 1 <= vals[0] <= vals[1]
            and all(v == round(v) for v in vals)):
        return rng.integers(int(vals[0]), int(vals[1]) + 1, n).astype(np.int64)
    if kind == "lognormal" and len(vals) == 2 and vals[0] >= 1 and vals[1] >= 0:
        x = np.exp(math.log(vals[0]) + vals[1] * rng.standard_normal(n))
        return np.maximum(1, np.round(x)).astype(np.int64)
    raise InputError(f"{name} {spec!r}: expected N, const:N, uniform:LO,HI (integers, "
                     "1 <= LO <= HI) or lognormal:MEDIAN,SIGMA (MEDIAN >= 1, SIGMA >= 0)")


def workload_from_lengths(prompt_spec, output_spec, num_requests: int, seed: int = 0) -> Workload:
    """A :class:`Workload` of ``num_requests`` with lengths drawn from two distribution specs."""
    P = parse_lengths("--prompt-tokens", prompt_spec, num_requests, seed)
    O = parse_lengths("--output-tokens", output_spec, num_requests, seed + 1)
    return Workload(P, O, None, {"kind": "distributions", "prompt_tokens": str(prompt_spec),
                                 "output_tokens": str(output_spec), "seed": int(seed)})


def load_workload_file(path) -> Workload:
    """A :class:`Workload` from a bench result / request file (``perfmodel.data.requests``).

    Reads through :func:`perfmodel.data.requests.load_workload` (columns
    ``prompt_tokens``, ``output_tokens`` and, when the file has them,
    ``arrival_s``).
    """
    p = Path(path)
    if not p.is_file():
        raise InputError(f"workload file {p} does not exist")
    try:
        from perfmodel.data.requests import load_workload
    except ImportError:
        raise InputError("reading workload files needs perfmodel.data.requests, which this "
                         "installation lacks; give --prompt-tokens and --output-tokens "
                         "distributions instead") from None
    df = load_workload(p)
    for c in ("prompt_tokens", "output_tokens"):
        if c not in df:
            raise InputError(f"workload file {p}: no {c!r} per request")
    arr = df["arrival_s"].to_numpy(float) if "arrival_s" in df else None
    if arr is not None and not np.all(np.isfinite(arr)):
        arr = None
    return Workload(df["prompt_tokens"].to_numpy(np.int64), df["output_tokens"].to_numpy(np.int64),
                    arr, {"kind": "file", "path": str(p)})
