"""The engine settings: :class:`EngineConfig` (vLLM's names) and its checks.

The scheduler and the event loop that use them are in :mod:`.loop` and :mod:`.events`.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from perfmodel._checks import check_choice, check_int_range, check_positive
from perfmodel.errors import InputError

POLICIES = ("decode_first", "prefill_first", "fcfs")
#: how requests are routed to data-parallel replicas
ROUTINGS = ("least_loaded", "round_robin")


@dataclass(frozen=True)
class EngineConfig:
    """The engine settings of one simulation (vLLM's names; see the module docstring).

    Parameters
    ----------
    max_num_seqs, max_num_batched_tokens : int >= 1, scheduler limits
    policy : ``'decode_first'`` (default), ``'prefill_first'`` or ``'fcfs'``
    enable_chunked_prefill : split prompts across steps (default True)
    long_prefill_token_threshold : int >= 0, cap on one prefill chunk (0: none)
    step_overhead_ms : float >= 0, time per step outside the model run
    step_noise_sd : float >= 0, sd of a multiplicative log-normal noise on the
        model time (0: deterministic step times)
    num_gpu_blocks : int >= 1 or None, KV-cache blocks per replica (None: no
        KV-cache limit, hence no preemption; see :func:`.kvcache.num_gpu_blocks`)
    block_size : int >= 1, tokens per KV block (vLLM's default 16)
    reserve_full_prompt : admit a waiting request only when the blocks of its
        whole prompt (all its tokens, for a preempted one) are free, not just
        those of its first chunk (vLLM's ``scheduler_reserve_full_isl``; only
        with ``num_gpu_blocks``)
    max_num_partial_prefills : int >= 0, most prefilling requests scheduled
        in one step (0: no cap; vLLM V1's scheduler does not apply one)
    data_parallel_size : int >= 1, replicas, each with its own scheduler and
        KV cache, stepping in lock step (a step lasts as long as the slowest
        replica's), as vLLM's data parallelism for MoE models does
    routing : ``'least_loaded'`` (vLLM's: the replica with the smallest
        ``4 * waiting + running``, lowest index on ties) or ``'round_robin'``
    request_intake_ms : float >= 0, the client round trip before the engine:
        time from a request's send time (its arrival, or a closed-loop
        client's re-issue) until the scheduler can see it (the API server's
        tokenisation and the hop to the engine core); default 0
    response_delay_ms : float >= 0, the round trip after the engine: time
        from the end of the step that samples a token until the client sees
        it (detokenisation, streaming).  It is added to a request's first-token
        and finish times (the client's view), and a closed-loop client issues
        its next request only that long after the engine finished the
        previous one; default 0.  docs/replay.md, Client round trip.

    The values are checked (and integral floats made ints) on construction,
    with the messages of the keyword arguments of :func:`simulate_closed_loop`.

    Examples
    --------
    >>> EngineConfig(max_num_batched_tokens=512, policy="fcfs").max_num_seqs
    256
    """

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    policy: str = "decode_first"
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0
    step_overhead_ms: float = 0.0
    step_noise_sd: float = 0.0
    num_gpu_blocks: int | None = None
    block_size: int = 16
    reserve_full_prompt: bool = True
    max_num_partial_prefills: int = 0
    data_parallel_size: int = 1
    routing: str = "least_loaded"
    request_intake_ms: float = 0.0
    response_delay_ms: float = 0.0

    def __post_init__(self):
        check_choice("policy", self.policy, POLICIES)
        checked = {
            "max_num_seqs": check_int_range("max_num_seqs", self.max_num_seqs, 1,
                                            integral_float=True),
            "max_num_batched_tokens": check_int_range("max_num_batched_tokens",
                                                      self.max_num_batched_tokens, 1,
                                                      integral_float=True),
            "enable_chunked_prefill": bool(self.enable_chunked_prefill),
            "long_prefill_token_threshold": check_int_range("long_prefill_token_threshold",
                                                            self.long_prefill_token_threshold,
                                                            0, integral_float=True),
            "step_overhead_ms": check_positive("step_overhead_ms", self.step_overhead_ms,
                                               allow_zero=True),
            "step_noise_sd": check_positive("step_noise_sd", self.step_noise_sd,
                                            allow_zero=True),
            "num_gpu_blocks": (None if self.num_gpu_blocks is None else
                               check_int_range("num_gpu_blocks", self.num_gpu_blocks, 1,
                                               integral_float=True)),
            "block_size": check_int_range("block_size", self.block_size, 1, integral_float=True),
            "reserve_full_prompt": bool(self.reserve_full_prompt),
            "max_num_partial_prefills": check_int_range("max_num_partial_prefills",
                                                        self.max_num_partial_prefills, 0,
                                                        integral_float=True),
            "data_parallel_size": check_int_range("data_parallel_size", self.data_parallel_size,
                                                  1, integral_float=True),
            "routing": check_choice("routing", self.routing, ROUTINGS),
            "request_intake_ms": check_positive("request_intake_ms", self.request_intake_ms,
                                                allow_zero=True),
            "response_delay_ms": check_positive("response_delay_ms", self.response_delay_ms,
                                                allow_zero=True),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    @property
    def client_delayed(self) -> bool:
        """True when a client round trip (intake or response delay) is modelled."""
        return self.request_intake_ms > 0 or self.response_delay_ms > 0

    @property
    def kv_limited(self) -> bool:
        """True when the KV cache has a finite number of blocks."""
        return self.num_gpu_blocks is not None

    def as_dict(self) -> dict[str, Any]:
        """The settings as a dict, in field order."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


_ENGINE_DEFAULTS = EngineConfig()


def _engine(engine: EngineConfig | None, **keywords) -> EngineConfig:
    """``engine``, or an :class:`EngineConfig` from the keyword arguments.

    With ``engine`` given, the keywords must be at their defaults.
    """
    if engine is None:
        return EngineConfig(**keywords)
    if not isinstance(engine, EngineConfig):
        raise InputError(f"engine must be an EngineConfig, got {type(engine).__name__}")
    both = sorted(k for k, v in keywords.items() if v != getattr(_ENGINE_DEFAULTS, k))
    if both:
        raise InputError(f"give the engine settings either as engine=EngineConfig(...) or as "
                         f"keyword arguments, not both (got {', '.join(both)})")
    return engine


