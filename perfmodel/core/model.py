"""The registry of the step-latency model family and the recommended member.

Problem
-------
Code, reports, the command line and the notebooks refer to models by name
(``fit_model(df, "seed_id")``, ``perfmodel fit --model ...``) and need one
answer to "which model should this trace get?".  This module is the one
place for both: :data:`MODELS` maps every member's name to its instance,
:func:`get_model` looks one up, and :data:`RECOMMENDED` with
:func:`default_for` state the recommendation.

Members
-------
The members are defined in two modules on the base of
:mod:`perfmodel.core.model_base`, which import nothing from this one:

* :mod:`perfmodel.core.models_seed`: the throughput-saturation form of the source
  documents: ``seed`` (8 parameters, not identifiable, fitted through
  ``seed_id``), ``seed_id``, ``seed_gamma`` and ``seed_ctx``;
* :mod:`perfmodel.core.models_ctx`: the context-aware members that keep the
  saturation core: ``seed_kv``, ``seed_attn``, ``seed_attn_kv`` and
  ``seed_ctx_mono``.

Model of record
---------------
``RECOMMENDED['context']`` (``seed_ctx_mono``) for a trace with per-request
``chunk_sizes`` and ``context_lens`` on every row, ``RECOMMENDED['no_context']``
(``seed_id``) otherwise: the one model every decision path, notebook and
table uses (README, "Model of record"); the other members are labelled
alternatives.  Chosen by nested cross-validation
(:func:`perfmodel.stats.selection.nested_select`, ``scripts/evaluate_protocol.py``)
and frozen before any confirmation data was collected: a change here is a
change of the model of record and needs a new nested selection.
``perfmodel fit --model auto`` applies :func:`default_for`.

The classes are re-exported here, so ``from perfmodel.core.model import
SeedIdModel`` keeps working.
"""
from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from perfmodel.core import models_ctx, models_seed
from perfmodel.core.model_base import Model, Param
from perfmodel.core.models_ctx import (
    SatCtxModel,
    SeedAttnKvModel,
    SeedAttnModel,
    SeedCtxMonoModel,
    SeedKvModel,
)
from perfmodel.core.models_seed import (
    SaturationBase,
    SeedCtxModel,
    SeedGammaModel,
    SeedIdModel,
    SeedModel,
)
from perfmodel.errors import InputError

__all__ = [
    "MODELS",
    "RECOMMENDED",
    "Model",
    "Param",
    "SatCtxModel",
    "SaturationBase",
    "SeedAttnKvModel",
    "SeedAttnModel",
    "SeedCtxModel",
    "SeedCtxMonoModel",
    "SeedGammaModel",
    "SeedIdModel",
    "SeedKvModel",
    "SeedModel",
    "default_for",
    "get_model",
    "register",
]

MODELS: dict[str, Model] = {}

#: the model of record by kind of trace: ``'context'`` (per-request chunk sizes and
#: contexts on every row) or ``'no_context'`` (``B`` and ``S`` only); frozen (module docstring)
RECOMMENDED: Mapping[str, str] = MappingProxyType({
    "context": SeedCtxMonoModel.name,
    "no_context": SeedIdModel.name,
})


def register(model: Model) -> Model:
    """Add ``model`` to :data:`MODELS` under ``model.name``."""
    if not model.name:
        raise InputError("a model needs a non-empty name")
    MODELS[model.name] = model
    return model


def get_model(name) -> Model:
    """Return the registered model called ``name`` (or ``name`` itself if a Model)."""
    if isinstance(name, Model):
        return name
    try:
        return MODELS[name]
    except KeyError:
        raise InputError(f"unknown model {name!r}; known models: {sorted(MODELS)}") from None


def default_for(trace) -> str:
    """Name of the recommended model for ``trace``.

    Problem: ``--model auto``, the scripts and the notebooks must pick the
    same model for the same trace.

    Parameters
    ----------
    trace : pandas.DataFrame
        A step trace in the canonical schema (:func:`perfmodel.data.trace.read_trace`).

    Returns
    -------
    str
        ``RECOMMENDED['context']`` when every row has ``chunk_sizes`` and
        ``context_lens`` (:func:`perfmodel.data.trace.has_context`), else
        ``RECOMMENDED['no_context']``.
    """
    from perfmodel.data.trace import has_context  # lazy: the model layer does not need pandas

    return RECOMMENDED["context" if has_context(trace) else "no_context"]


for _m in (*models_seed.MEMBERS, *models_ctx.MEMBERS):
    register(_m)
