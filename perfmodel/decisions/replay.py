"""Engine settings and step model of a serving-run replay, from the run folder and the bundle.

Problem
-------
Replaying a published vLLM run (``perfmodel replay``, the validation table of
:mod:`perfmodel.decisions.replay_validation`) needs the simulator's engine
settings (scheduler limits, data parallelism, KV-cache blocks) and a step
model, both derived the same way every time: from the run folder's engine
settings (:func:`perfmodel.data.requests.load_run_dir`), the model's
architecture config and the layer-profile bundle, never from the measured
request timings.  This module is that one derivation; docs/replay.md
describes the choices (vLLM V1 ``fcfs`` scheduling, the KV-cache block
formula, expert parallelism over the data-parallel ranks).

Verified against: ``perfmodel replay``'s output on the published runs
(``tests/cli/test_replay.py``), hand-computed settings and all-to-all times
(``tests/decisions/test_replay_settings.py``) and the KV blocks vLLM logged
on the RTX 4090 run (``tests/decisions/test_kvcache.py``).
"""
from __future__ import annotations

from dataclasses import fields

import pandas as pd

from perfmodel.decisions.simulate import EngineConfig, num_gpu_blocks
from perfmodel.errors import InputError

__all__ = ["FROM_RUN", "WithAllToAll", "ep_all_to_all_ms", "fit_for_run", "run_engine_settings",
           "run_parallelism"]

#: EngineConfig fields a run folder sets (vLLM's names in meta.json)
FROM_RUN: tuple[str, ...] = ("max_num_seqs", "max_num_batched_tokens",
                             "long_prefill_token_threshold", "enable_chunked_prefill",
                             "block_size", "data_parallel_size")
_FIELDS = {f.name for f in fields(EngineConfig)}


def run_parallelism(run: dict, tp: int | None = None) -> tuple[int, int]:
    """Tensor- and expert-parallel degrees ``(tp, ep)`` of a run's settings.

    Expert parallelism spans the data-parallel ranks when the run enabled it
    (vLLM's ``enable_expert_parallel``): ``ep = tp * data_parallel_size``.
    """
    if not isinstance(run, dict):
        raise InputError(f"run must be the settings dict of load_run_dir, got {type(run).__name__}")
    tp = int(tp or run.get("tensor_parallel_size") or 1)
    ep = tp * int(run.get("data_parallel_size") or 1) if run.get("enable_expert_parallel") else 1
    return tp, ep


def run_engine_settings(run: dict, model_config=None, *, overrides: dict | None = None,
                        gpu_memory_bytes: float | None = None,
                        gpu_memory_utilization: float | None = None, tp: int | None = None,
                        activation_reserve_bytes: float = 0.0) -> tuple[dict, dict]:
    """EngineConfig keywords of a replay and where the KV-cache size came from.

    Precedence: ``overrides`` (EngineConfig field -> value) > the run's settings
    > the replay defaults (``policy='fcfs'``, vLLM V1).  The KV-cache blocks are
    ``overrides['num_gpu_blocks']``, else those vLLM logged (``num_gpu_blocks``
    in the run's meta.json), else the formula of
    :func:`perfmodel.decisions.simulate.num_gpu_blocks` when a model config and
    the GPU memory are known, else unlimited.

    Parameters
    ----------
    run : settings dict of :func:`perfmodel.data.requests.load_run_dir` (may be {})
    model_config : ModelConfig, config dict, config path or None
    overrides : EngineConfig keywords to force
    gpu_memory_bytes, gpu_memory_utilization, tp : override the run's
    activation_reserve_bytes : memory vLLM keeps besides weights and KV (0: upper bound)

    Returns
    -------
    (dict, dict)
        EngineConfig keywords, and the KV-cache notes (``num_gpu_blocks_source``
        and the formula's inputs when it was used).
    """
    overrides = dict(overrides or {})
    bad = sorted(set(overrides) - _FIELDS)
    if bad:
        raise InputError(f"overrides: unknown EngineConfig fields {bad}")
    kw: dict = {"policy": "fcfs"}
    kw.update({k: run[k] for k in FROM_RUN if run.get(k) is not None})
    kw.update(overrides)
    if "num_gpu_blocks" in overrides:
        return kw, {"num_gpu_blocks_source": "option"}
    mem = gpu_memory_bytes or run.get("gpu_memory_bytes")
    if run.get("num_gpu_blocks"):
        kw["num_gpu_blocks"] = int(run["num_gpu_blocks"])
        return kw, {"num_gpu_blocks_source": "logged by vLLM in vllm/meta.json"}
    if model_config is None or not mem:
        return kw, {"num_gpu_blocks_source": "none: no KV-cache limit (no preemption)"}
    if isinstance(model_config, str):
        from perfmodel.data.datasets.llmservingsim import load_model_config

        model_config = load_model_config(model_config)
    util = gpu_memory_utilization or run.get("gpu_memory_utilization") or 0.9
    tp_, _ = run_parallelism(run, tp)
    ep = tp_ * int(kw.get("data_parallel_size", 1)) if run.get("enable_expert_parallel") else 1
    kw["num_gpu_blocks"] = num_gpu_blocks(
        model_config, gpu_memory_bytes=mem, gpu_memory_utilization=util, tp=tp_, ep=ep,
        block_size=int(kw.get("block_size", 16)), activation_reserve_bytes=activation_reserve_bytes)
    return kw, {"num_gpu_blocks_source": "formula (docs/replay.md, Simulator)",
                "gpu_memory_bytes": mem, "gpu_memory_utilization": util, "expert_parallel": ep,
                "activation_reserve_gib": activation_reserve_bytes / 2**30}


def fit_for_run(profile, model_config, work: pd.DataFrame, engine_kw: dict, *, tp: int = 1,
                ep: int = 1, model=None):
    """The step model of a replay: ``model`` fitted on steps composed from the bundle.

    The composed design covers the engine's range: ``B`` up to
    ``max_num_seqs``, ``S`` up to ``max_num_batched_tokens`` and contexts up to
    the longest request of ``work`` (prompt + output tokens; lengths only, no
    timings).  See :func:`perfmodel.core.compose.fit_from_profile`.

    Returns
    -------
    (FitResult, dict)
        The fit and its report (error against the composed steps, ...).
    """
    from perfmodel.core.compose import fit_from_profile

    if not isinstance(work, pd.DataFrame) or not {"prompt_tokens", "output_tokens"} <= set(work):
        raise InputError("work must be a workload DataFrame with prompt_tokens and output_tokens")
    defaults = EngineConfig()
    max_context = int((work["prompt_tokens"] + work["output_tokens"]).max())
    extra = {"ep": ep} if ep > 1 else {}
    if model is not None:
        extra["model"] = model
    return fit_from_profile(
        profile, model_config, tp=tp,
        max_num_seqs=engine_kw.get("max_num_seqs", defaults.max_num_seqs),
        max_num_batched_tokens=engine_kw.get("max_num_batched_tokens",
                                             defaults.max_num_batched_tokens),
        max_context=max_context, **extra)


def ep_all_to_all_ms(S, config, *, ep: int, link_bw_gbs: float, link_latency_us: float,
                     dtype_bytes: int = 2):
    """Expert-parallel dispatch + combine time of one step (ms), which the bundle does not hold.

    The bundle times every layer on one GPU, so an expert-parallel run's
    all-to-all around each MoE block is missing from composed steps
    (docs/replay.md, Step composition).  This prices it as vLLM's
    all-gather / reduce-scatter exchange between the data-parallel ranks:
    per MoE layer, twice (dispatch, combine), one link latency plus the
    hidden states of the other ranks' tokens (equal loading assumed, as in
    the composer's MoE term) over the link::

        t = layers * 2 * (latency + (ep - 1) * S * hidden * dtype_bytes / bandwidth)

    Zero when ``ep == 1``.  The link figures are the run's ``config.json``
    (the cluster description LLMServingSim simulates), not a measurement:
    the term is an estimate of the omitted communication, not a fit.

    Parameters
    ----------
    S : array_like, tokens of the step on one rank
    config : ModelConfig (``layers``, ``hidden``)
    ep : expert-parallel degree
    link_bw_gbs, link_latency_us : the inter-GPU link (GB/s, microseconds)
    """
    import numpy as np

    from perfmodel._checks import check_int_range, check_positive

    ep = check_int_range("ep", ep, 1)
    bw = check_positive("link_bw_gbs", link_bw_gbs) * 1e9
    lat = check_positive("link_latency_us", link_latency_us, allow_zero=True) * 1e-6
    S = np.asarray(S, dtype=float)
    if ep == 1:
        return np.zeros_like(S)
    per_layer = 2.0 * (lat + (ep - 1) * S * config.hidden * dtype_bytes / bw)
    return config.layers * per_layer * 1e3


class WithAllToAll:
    """A step model plus :func:`ep_all_to_all_ms` of each step's ``S`` (``.predict(features)``)."""

    def __init__(self, base, config, *, ep: int, link_bw_gbs: float, link_latency_us: float):
        if not callable(getattr(base, "predict", None)):
            raise InputError("base must have a .predict(features) method (e.g. a FitResult)")
        self.base, self.config, self.ep = base, config, ep
        self.link_bw_gbs, self.link_latency_us = link_bw_gbs, link_latency_us
        self.model = getattr(base, "model", None)       # the simulator reads model.requires
        self.model_name = f"{getattr(base, 'model_name', 'model')} + EP all-to-all"

    def predict(self, features):
        import numpy as np

        return np.asarray(self.base.predict(features), dtype=float) + ep_all_to_all_ms(
            features["S"], self.config, ep=self.ep, link_bw_gbs=self.link_bw_gbs,
            link_latency_us=self.link_latency_us)
