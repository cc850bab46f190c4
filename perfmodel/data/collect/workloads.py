"""Seeded workloads that drive a serving engine one step at a time.

Problem: a step-latency model needs traces whose steps cover the batch size B,
the step's token count S (evenly on a log scale up to the token cap) and the
per-request context, and whose *schedule* (the sequence of batch sizes, chunk
sizes and contexts, step by step) is identical across runs with the same seed,
so that replicate runs measure the per-step noise floor.

A workload is a small state machine. Before every engine step the driver shows
it an :class:`EngineView` (step index, how many requests are unfinished or
waiting, which finished in the previous step) and the workload answers with the
requests to add (:meth:`Workload.next_requests`), an optional token budget for
the step (:meth:`Workload.token_budget`) and whether it is done
(:meth:`Workload.done`). Every random draw comes from ``numpy.random.default_rng(seed)``
and arrivals are keyed to the step index, never to wall time, so the schedule
depends only on the seed, the parameters and the engine's (deterministic)
scheduler. Nothing here imports vLLM.

Workloads (see each class for its parameters):

``mixed``
    bursty arrivals, log-uniform prompt and output lengths, a per-phase token
    budget drawn log-uniformly below the cap (fills the middle of the S range).
``decode_sweep``
    steady decode at B = 1, 2, 4, ... 64, at two prompt (context) lengths.
``prefill_sweep``
    one-step prefills at S log-spaced from 16 to the cap: one request, several
    requests, or one request with prior context (a long prompt whose last
    chunk is S).
``fixed_tokens``
    steps pinned at S = cap by a permanent prompt backlog, with B and the chunk
    mix varied through per-phase output lengths (the slice of docs/model.md,
    Secondary factors).
``closed_loop``
    N requests, C in flight, fixed prompt and output lengths (docs/model.md,
    Closed-loop benchmark: 40 requests, concurrency 8, 32 prompt tokens, 50
    output tokens).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from perfmodel._checks import check_int_range, check_number
from perfmodel.errors import InputError

__all__ = [
    "WORKLOADS",
    "ClosedLoop",
    "DecodeSweep",
    "EngineView",
    "FixedTokens",
    "Mixed",
    "PrefillSweep",
    "RequestSpec",
    "Workload",
    "make_workload",
]

VOCAB_SIZE = 32000
_FIRST_TOKEN_ID = 3  # leave 0..2 (pad/bos/eos in Llama vocabularies) unused


@dataclass(frozen=True)
class RequestSpec:
    """One request a workload asks the driver to add.

    ``name`` is the workload's own id (the engine may rename it internally);
    ``max_tokens`` output tokens are generated with EOS ignored, so a request
    lives exactly ``max_tokens`` output tokens.
    """

    name: str
    prompt_token_ids: tuple[int, ...]
    max_tokens: int

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_token_ids)


@dataclass(frozen=True)
class EngineView:
    """What a workload sees before engine step ``step`` (0-based)."""

    step: int
    num_unfinished: int
    num_waiting: int
    finished: tuple[str, ...] = ()


def _check_int(name: str, value: Any, low: int, high: int | None = None) -> int:
    return check_int_range(f"argument {name!r}", value, low, high)


def _check_float(name: str, value: Any, low: float, high: float) -> float:
    return check_number(f"argument {name!r}", value, lo=low, hi=high)


def _check_engine(p: dict[str, Any]) -> dict[str, int]:
    """The engine settings every workload has: ``token_cap`` >= 16, ``max_num_seqs`` >= 1."""
    return {"token_cap": _check_int("token_cap", p["token_cap"], 16),
            "max_num_seqs": _check_int("max_num_seqs", p["max_num_seqs"], 1)}


def _check_ordered(out: dict[str, Any], *pairs: tuple[str, str]) -> None:
    """Raise unless ``out[lo] <= out[hi]`` for every ``(lo, hi)`` of ``pairs``."""
    for lo, hi in pairs:
        if out[lo] > out[hi]:
            raise InputError(f"argument {lo!r} ({out[lo]}) exceeds {hi!r} ({out[hi]})")


def _check_int_tuple(name: str, value: Any, low: int) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise InputError(f"argument {name!r} must be a list of integers, got {value!r}")
    out = tuple(_check_int(f"{name}[{i}]", v, low) for i, v in enumerate(value))
    if not out:
        raise InputError(f"argument {name!r} must not be empty")
    return out


class Workload:
    """Base class: a seeded request stream keyed to engine step indices.

    Subclasses set ``name`` and ``defaults`` (every parameter with its default)
    and implement :meth:`next_requests` and :meth:`done`. ``params`` holds the
    resolved parameters (JSON-safe); ``engine_overrides()`` gives the engine
    settings the workload needs (token cap, maximum running requests).
    """

    name: ClassVar[str] = ""
    defaults: ClassVar[dict[str, Any]] = {}
    open_ended: ClassVar[bool] = True  # runs until the step budget is spent

    def __init__(self, seed: int, steps: int | None, **params: Any) -> None:
        self.seed = _check_int("seed", seed, 0)
        if steps is None:
            if self.open_ended:
                raise InputError(f"argument 'steps' is required for workload {self.name!r}")
        else:
            steps = _check_int("steps", steps, 1)
        self.steps = steps
        unknown = sorted(set(params) - set(self.defaults))
        if unknown:
            raise InputError(
                f"workload {self.name!r} has no parameter(s) {unknown}; "
                f"known: {sorted(self.defaults)}"
            )
        merged = {**self.defaults, **params}
        self.params = self._validate(merged)
        self.rng = np.random.default_rng(self.seed)
        self._counter = 0

    # -- interface ---------------------------------------------------------------
    def _validate(self, p: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def engine_overrides(self) -> dict[str, int]:
        """Engine settings this workload needs (``max_num_batched_tokens``, ``max_num_seqs``)."""
        return {
            "max_num_batched_tokens": int(self.params["token_cap"]),
            "max_num_seqs": int(self.params["max_num_seqs"]),
        }

    def token_budget(self, step: int) -> int | None:
        """Token budget for engine step ``step``; ``None`` keeps the engine's cap."""
        return None

    def next_requests(self, view: EngineView) -> list[RequestSpec]:
        raise NotImplementedError

    def done(self, view: EngineView) -> bool:
        return False

    def describe(self) -> dict[str, Any]:
        """JSON-safe description: name, seed, steps and resolved parameters."""
        return {"name": self.name, "seed": self.seed, "steps": self.steps,
                "params": dict(self.params), "engine_overrides": self.engine_overrides()}

    # -- helpers -----------------------------------------------------------------
    def _request(self, prompt_len: int, max_tokens: int) -> RequestSpec:
        ids = self.rng.integers(_FIRST_TOKEN_ID, VOCAB_SIZE, size=int(prompt_len))
        spec = RequestSpec(f"{self.name}-{self._counter:06d}",
                           tuple(int(t) for t in ids), int(max_tokens))
        self._counter += 1
        return spec

    def _log_uniform_int(self, low: int, high: int) -> int:
        if high <= low:
            return int(low)
        x = math.exp(self.rng.uniform(math.log(low), math.log(high + 1)))
        return int(min(high, max(low, math.floor(x))))


class Mixed(Workload):
    """Bursty arrivals of requests with log-uniform prompt and output lengths.

    Time is cut into phases of ``phase_steps`` steps. Each phase draws a token
    budget log-uniform in [``budget_min``, ``token_cap``] and a concurrency
    limit log-uniform in [1, ``max_inflight``]: low limits give decode steps at
    small B, high ones long decode batches, and the budget spreads full prefill
    steps over the middle of the S range instead of piling them at the cap.
    Each step a burst arrives with probability ``burst_prob``, of size
    1 + Poisson(``burst_mean`` - 1); an idle engine with nothing queued gets a
    burst at once (idle time carries no step). Arrivals wait in a client-side
    queue (at most ``queue_max``; later arrivals are dropped) and are released
    while fewer requests than the phase's limit are unfinished. Prompt lengths
    are log-uniform in [``prompt_min``, ``prompt_max``] (prompts above the
    budget are chunked, giving prefill chunks with prior context), output
    lengths log-uniform in [``output_min``, ``output_max``]. The phase draws
    come from their own generator, so they do not depend on arrivals.
    """

    name = "mixed"
    defaults: ClassVar[dict[str, Any]] = {
        "token_cap": 512, "max_num_seqs": 64, "burst_prob": 0.2, "burst_mean": 2.0,
        "max_inflight": 32, "queue_max": 32, "prompt_min": 4, "prompt_max": 1024,
        "output_min": 1, "output_max": 64, "budget_min": 12, "phase_steps": 25,
    }

    def _validate(self, p):
        out = _check_engine(p)
        cap = out["token_cap"]
        out |= {
            "burst_prob": _check_float("burst_prob", p["burst_prob"], 0.0, 1.0),
            "burst_mean": _check_float("burst_mean", p["burst_mean"], 1.0, 1e4),
            "max_inflight": _check_int("max_inflight", p["max_inflight"], 1),
            "queue_max": _check_int("queue_max", p["queue_max"], 1),
            "prompt_min": _check_int("prompt_min", p["prompt_min"], 1),
            "prompt_max": _check_int("prompt_max", p["prompt_max"], 1),
            "output_min": _check_int("output_min", p["output_min"], 1),
            "output_max": _check_int("output_max", p["output_max"], 1),
            "budget_min": _check_int("budget_min", p["budget_min"], 1, cap),
            "phase_steps": _check_int("phase_steps", p["phase_steps"], 1),
        }
        _check_ordered(out, ("prompt_min", "prompt_max"), ("output_min", "output_max"))
        return out

    def __init__(self, seed, steps, **params):
        super().__init__(seed, steps, **params)
        self._queue: list[RequestSpec] = []
        self._phases: list[tuple[int, int]] = []
        self._phase_rng = np.random.default_rng([self.seed, 1])

    def _phase(self, step: int) -> tuple[int, int]:
        """(token budget, concurrency limit) of the phase holding ``step``."""
        p = self.params
        while len(self._phases) <= step // p["phase_steps"]:
            u_b, u_c = self._phase_rng.uniform(0.0, 1.0, size=2)
            lo, hi = math.log(p["budget_min"]), math.log(p["token_cap"])
            budget = round(math.exp(lo + u_b * (hi - lo)))
            limit = round(math.exp(u_c * math.log(p["max_inflight"])))
            self._phases.append((min(p["token_cap"], max(p["budget_min"], budget)),
                                 min(p["max_inflight"], max(1, limit))))
        return self._phases[step // p["phase_steps"]]

    def token_budget(self, step):
        return self._phase(step)[0]

    def next_requests(self, view):
        p = self.params
        idle = view.num_unfinished == 0 and not self._queue
        if self.rng.random() < p["burst_prob"] or idle:
            size = 1 + int(self.rng.poisson(p["burst_mean"] - 1.0))
            for _ in range(size):
                plen = self._log_uniform_int(p["prompt_min"], p["prompt_max"])
                olen = self._log_uniform_int(p["output_min"], p["output_max"])
                spec = self._request(plen, olen)
                if len(self._queue) < p["queue_max"]:
                    self._queue.append(spec)
        free = max(0, self._phase(view.step)[1] - view.num_unfinished)
        released, self._queue = self._queue[:free], self._queue[free:]
        return released


class DecodeSweep(Workload):
    """Steady decode at batch sizes ``levels``, each at the prompt lengths ``prompt_lens``.

    The (B, prompt length) combinations run one at a time in a seeded random
    order (so a slow drift of the host does not line up with B). Each starts
    when the engine is idle: B requests with the same prompt length, each
    generating ``1 + decode_steps`` tokens, where ``decode_steps`` is
    ``steps // number of combinations`` unless given. Context grows by one
    token per decode step.
    """

    name = "decode_sweep"
    open_ended = False
    defaults: ClassVar[dict[str, Any]] = {"token_cap": 512, "max_num_seqs": 64,
                "levels": (1, 2, 4, 8, 16, 32, 64), "prompt_lens": (32, 256),
                "decode_steps": None}

    def _validate(self, p):
        out = {
            "token_cap": _check_int("token_cap", p["token_cap"], 16),
            "levels": _check_int_tuple("levels", p["levels"], 1),
            "prompt_lens": _check_int_tuple("prompt_lens", p["prompt_lens"], 1),
            "decode_steps": (None if p["decode_steps"] is None
                             else _check_int("decode_steps", p["decode_steps"], 1)),
        }
        out["max_num_seqs"] = max(_check_int("max_num_seqs", p["max_num_seqs"], 1),
                                  max(out["levels"]))
        return out

    def __init__(self, seed, steps, **params):
        super().__init__(seed, steps, **params)
        p = self.params
        combos = [(b, pl) for b in p["levels"] for pl in p["prompt_lens"]]
        order = self.rng.permutation(len(combos))
        self.plan = [combos[i] for i in order]
        if p["decode_steps"] is None:
            if self.steps is None:
                raise InputError("workload 'decode_sweep' needs 'steps' or 'decode_steps'")
            p["decode_steps"] = max(2, self.steps // len(self.plan) - 1)
        self._next = 0

    def next_requests(self, view):
        if view.num_unfinished or self._next >= len(self.plan):
            return []
        b, plen = self.plan[self._next]
        self._next += 1
        return [self._request(plen, 1 + self.params["decode_steps"]) for _ in range(b)]

    def done(self, view):
        return self._next >= len(self.plan) and view.num_unfinished == 0


class PrefillSweep(Workload):
    """One-step prefills at S log-spaced from ``s_min`` to ``token_cap``.

    Items, each run alone on an idle engine with ``max_tokens = 1`` so no decode
    follows: ``single`` (one prompt of S tokens, context 0); ``multi`` (S split
    into m near-equal prompts, m drawn from ``multi_sizes``, context 0);
    ``context`` (one prompt of k*cap + S tokens, k drawn from
    ``context_chunks``: k full chunks at the cap, then a last chunk of S tokens
    with k*cap tokens of prior context). The grid of ``n_points`` S values x
    variants is shuffled with the seed and repeated until ``steps`` is reached.
    """

    name = "prefill_sweep"
    open_ended = True
    defaults: ClassVar[dict[str, Any]] = {"token_cap": 512, "max_num_seqs": 64, "s_min": 16, "n_points": 12,
                "variants": ("single", "multi", "context"), "multi_sizes": (2, 4, 8),
                "context_chunks": (1, 2)}

    def _validate(self, p):
        cap = _check_int("token_cap", p["token_cap"], 16)
        variants = tuple(p["variants"]) if not isinstance(p["variants"], str) else (
            p["variants"],)
        bad = [v for v in variants if v not in ("single", "multi", "context")]
        if bad or not variants:
            raise InputError(f"argument 'variants' must use 'single', 'multi', 'context'; "
                             f"got {list(variants)}")
        return {
            "token_cap": cap,
            "max_num_seqs": _check_int("max_num_seqs", p["max_num_seqs"], 1),
            "s_min": _check_int("s_min", p["s_min"], 1, cap),
            "n_points": _check_int("n_points", p["n_points"], 1),
            "variants": variants,
            "multi_sizes": _check_int_tuple("multi_sizes", p["multi_sizes"], 2),
            "context_chunks": _check_int_tuple("context_chunks", p["context_chunks"], 1),
        }

    def __init__(self, seed, steps, **params):
        super().__init__(seed, steps, **params)
        p = self.params
        grid = np.geomspace(p["s_min"], p["token_cap"], p["n_points"])
        self.s_values = tuple(sorted({round(float(s)) for s in grid}))
        self._items: list[tuple[str, int]] = []

    def _refill(self):
        items = [(v, s) for s in self.s_values for v in self.params["variants"]]
        order = self.rng.permutation(len(items))
        self._items.extend(items[i] for i in order)

    def next_requests(self, view):
        if view.num_unfinished:
            return []
        if not self._items:
            self._refill()
        variant, s = self._items.pop(0)
        p = self.params
        if variant == "single":
            return [self._request(s, 1)]
        if variant == "multi":
            sizes = [m for m in p["multi_sizes"] if m <= s] or [1]
            m = int(self.rng.choice(sizes))
            parts = [s // m + (1 if i < s % m else 0) for i in range(m)]
            return [self._request(n, 1) for n in parts]
        k = int(self.rng.choice(p["context_chunks"]))
        return [self._request(k * p["token_cap"] + s, 1)]


class FixedTokens(Workload):
    """Steps pinned at S = ``token_cap`` by a permanent prompt backlog.

    Before each step, requests are added until at least ``backlog`` are
    waiting, so every step fills its token budget (decodes first, then prefill
    chunks). Prompts are log-uniform in [``prompt_min``, ``prompt_max``]; the
    output length is log-uniform in [1, m], with m redrawn every
    ``phase_steps`` steps from ``output_max_levels``: short outputs give few
    running decodes (small B, large chunks), long outputs many (large B, small
    chunks). ``max_num_seqs`` must stay above the running count, or steps fall
    below the cap (they are kept and can be filtered on S).
    """

    name = "fixed_tokens"
    defaults: ClassVar[dict[str, Any]] = {"token_cap": 512, "max_num_seqs": 256, "backlog": 8, "prompt_min": 16,
                "prompt_max": 1024, "output_max_levels": (4, 16, 64, 128), "phase_steps": 100}

    def _validate(self, p):
        out = _check_engine(p) | {
            "backlog": _check_int("backlog", p["backlog"], 1),
            "prompt_min": _check_int("prompt_min", p["prompt_min"], 1),
            "prompt_max": _check_int("prompt_max", p["prompt_max"], 1),
            "output_max_levels": _check_int_tuple("output_max_levels",
                                                  p["output_max_levels"], 1),
            "phase_steps": _check_int("phase_steps", p["phase_steps"], 1),
        }
        _check_ordered(out, ("prompt_min", "prompt_max"))
        return out

    def __init__(self, seed, steps, **params):
        super().__init__(seed, steps, **params)
        self._phase_rng = np.random.default_rng([self.seed, 2])
        self._phase_max: dict[int, int] = {}

    def _output_max(self, step):
        phase = step // self.params["phase_steps"]
        while len(self._phase_max) <= phase:
            levels = self.params["output_max_levels"]
            self._phase_max[len(self._phase_max)] = int(self._phase_rng.choice(levels))
        return self._phase_max[phase]

    def next_requests(self, view):
        p = self.params
        need = max(0, p["backlog"] - view.num_waiting)
        m = self._output_max(view.step)
        return [self._request(self._log_uniform_int(p["prompt_min"], p["prompt_max"]),
                              self._log_uniform_int(1, m)) for _ in range(need)]


class ClosedLoop(Workload):
    """``num_requests`` requests, at most ``concurrency`` in flight, fixed lengths.

    The reference closed loop by default (docs/model.md, Closed-loop benchmark):
    40 requests, 8 in flight, 32 prompt tokens, 50 output tokens. A new
    request is added as soon as one finishes (before the next step). ``steps`` is only a safety cap.
    """

    name = "closed_loop"
    open_ended = False
    defaults: ClassVar[dict[str, Any]] = {"token_cap": 512, "max_num_seqs": 64, "num_requests": 40, "concurrency": 8,
                "prompt_len": 32, "output_len": 50}

    def _validate(self, p):
        return _check_engine(p) | {
            "num_requests": _check_int("num_requests", p["num_requests"], 1),
            "concurrency": _check_int("concurrency", p["concurrency"], 1),
            "prompt_len": _check_int("prompt_len", p["prompt_len"], 1),
            "output_len": _check_int("output_len", p["output_len"], 1),
        }

    def __init__(self, seed, steps, **params):
        super().__init__(seed, steps, **params)
        self._issued = 0

    def next_requests(self, view):
        p = self.params
        free = min(p["concurrency"] - view.num_unfinished, p["num_requests"] - self._issued)
        out = [self._request(p["prompt_len"], p["output_len"]) for _ in range(max(0, free))]
        self._issued += len(out)
        return out

    def done(self, view):
        return self._issued >= self.params["num_requests"] and view.num_unfinished == 0


WORKLOADS: dict[str, type[Workload]] = {
    cls.name: cls for cls in (Mixed, DecodeSweep, PrefillSweep, FixedTokens, ClosedLoop)
}


def make_workload(name: str, seed: int, steps: int | None, **params: Any) -> Workload:
    """Build the workload ``name`` (one of :data:`WORKLOADS`) with its parameters.

    Parameters not given take the class defaults; unknown ones raise
    :class:`~perfmodel.errors.InputError`.
    """
    if name not in WORKLOADS:
        raise InputError(f"argument 'workload' must be one of {sorted(WORKLOADS)}, got {name!r}")
    return WORKLOADS[name](seed, steps, **params)
