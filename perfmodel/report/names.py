"""Prose names of the models and baselines, for figures and tables a reader sees.

Problem
-------
Code and the command line name a candidate by its registry identifier
(``seed_ctx_mono``, ``constant_throughput``: :data:`perfmodel.core.model.MODELS`,
:data:`perfmodel.stats.baselines.BASELINES`); a figure or table of the paper
should name it in words, the same words everywhere (the labels of the
comparison notebooks, e.g. "seed (identifiable)", "DistServe form").  This
module is the one mapping from identifier to prose name, for the candidates
and for the simulator's batching policies
(:data:`perfmodel.decisions.simulate.engine.POLICIES`).  It imports nothing,
so the report layer stays importable without numpy.

Verified against: ``tests/report/test_names.py`` checks that every registered
model, baseline and batching policy has a distinct prose name.
"""
from __future__ import annotations

from types import MappingProxyType

from perfmodel.errors import InputError

__all__ = ["POLICY_PROSE_NAMES", "PROSE_NAMES", "policy_prose_name", "prose_name"]

#: registry identifier -> prose name (models first, then baselines)
PROSE_NAMES = MappingProxyType({
    "seed": "seed (8 parameters)",
    "seed_id": "seed (identifiable)",
    "seed_gamma": "seed + gamma",
    "seed_ctx": "seed + context",
    "seed_kv": "seed + KV reads",
    "seed_attn": "seed + attention in work",
    "seed_attn_kv": "seed + attention and KV",
    "seed_ctx_mono": "seed + context (monotone)",
    "seed_ctx_mono_nokb": "seed + context, no batch saturation (ablation)",
    "seed_ctx_mono_noks": "seed + context, no token saturation (ablation)",
    "linear": "linear",
    "poly2": "quadratic",
    "poly3": "cubic",
    "constant_throughput": "constant throughput",
    "distserve": "DistServe form",
    "random_forest": "random forest",
    "nnls_ctx": "non-negative linear (ablation)",
    "splitwise_interp": "Splitwise interpolation",
    "roofline": "roofline (datasheet peaks)",
    "trained_roofline": "trained roofline",
})


def prose_name(name: str, *, record: str | None = None) -> str:
    """The prose name of the model or baseline called ``name``.

    Parameters
    ----------
    name : str
        A registry identifier (:data:`PROSE_NAMES`).
    record : str or None
        The identifier of the model of record; when ``name`` is it, the
        result is ``"model of record (<prose name>)"``.

    Raises
    ------
    InputError
        ``name`` is not a string or has no prose name.

    Examples
    --------
    >>> prose_name("constant_throughput")
    'constant throughput'
    >>> prose_name("seed_ctx_mono", record="seed_ctx_mono")
    'model of record (seed + context (monotone))'
    """
    if not isinstance(name, str):
        raise InputError(f"name must be a registry identifier (str), got {name!r}")
    try:
        prose = PROSE_NAMES[name]
    except KeyError:
        raise InputError(f"no prose name for {name!r}; known: {sorted(PROSE_NAMES)}") from None
    return f"model of record ({prose})" if name == record else prose


#: batching-policy identifier -> prose name (perfmodel.decisions.simulate.engine.POLICIES)
POLICY_PROSE_NAMES = MappingProxyType({
    "decode_first": "decode first",
    "prefill_first": "prefill first",
    "fcfs": "first come, first served",
})


def policy_prose_name(name: str) -> str:
    """The prose name of the batching policy called ``name`` (e.g. ``'decode_first'``).

    Raises
    ------
    InputError
        ``name`` is not a string or not a known policy.

    Examples
    --------
    >>> policy_prose_name("decode_first")
    'decode first'
    """
    if not isinstance(name, str) or name not in POLICY_PROSE_NAMES:
        raise InputError(f"no prose name for the policy {name!r}; known: "
                         f"{sorted(POLICY_PROSE_NAMES)}")
    return POLICY_PROSE_NAMES[name]
