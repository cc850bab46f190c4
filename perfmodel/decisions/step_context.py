"""The context a step-level decision assumes: constants for the features it does not search.

Problem
-------
The SLA answers (:mod:`perfmodel.decisions.inversion`, the token budget of
:mod:`perfmodel.decisions.token_budget`) search over the batch size ``B`` and
the tokens per step ``S``; a context-aware model also needs its context
features (:data:`perfmodel.data.features.CONTEXT_KEYS`), which a point
``(B, S)`` does not fix.  The caller states them as constants by name, or as
``{'context_tokens': X}``: every request of a step at ``(B, S)`` computes
``S/B`` tokens on ``X`` cached ones, and the features follow from
:func:`perfmodel.data.features.uniform_batch_features` (constants given by name
win).  Features neither given nor implied are 0, i.e. their terms are left
out; :func:`context_assumption` says which rule an answer used, so that it
can be printed beside the answer.

Verified in ``tests/decisions/test_step_context.py`` (each message, the
precedence name > ``context_tokens`` > 0, ``context_tokens`` equal to the
uniform-batch features of :mod:`perfmodel.data.features`) and
``tests/decisions/test_sla.py`` (context features held constant in the answers).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from perfmodel._checks import check_real
from perfmodel.data.features import CONTEXT_KEYS, uniform_batch_features
from perfmodel.errors import InputError

__all__ = ["check_constants", "context_assumption", "fill_features"]

#: the features a decision searches over (never constants)
SEARCHED = ("B", "S")


def check_constants(features: Mapping | None) -> dict[str, float]:
    """Return the constants of ``features`` as floats, or raise naming the bad entry.

    Parameters
    ----------
    features : dict or None
        Model feature name -> number (``'B'`` and ``'S'`` are refused: they are
        searched), and optionally ``'context_tokens'`` (>= 0).

    Returns
    -------
    dict of str to float (empty for None)
    """
    if features is None:
        return {}
    if not isinstance(features, Mapping):
        raise InputError(f"features must be a dict of constants, got {type(features).__name__}")
    out = {}
    for k, v in features.items():
        if k in SEARCHED:
            raise InputError("features must not set 'B' or 'S' (they are searched)")
        x = check_real(f"features[{k!r}]", v)
        if k == "context_tokens" and x < 0:
            raise InputError(f"features['context_tokens'] must be >= 0, got {v!r}")
        out[k] = x
    return out


def context_assumption(requires, constants: Mapping[str, float]) -> dict[str, Any]:
    """What predictions with these constants assume about the model's context features.

    Parameters
    ----------
    requires : sequence of str
        The model's features (``model.requires``).
    constants : dict
        From :func:`check_constants`.

    Returns
    -------
    dict with ``context_aware`` (the model has context terms), ``context_tokens``
    (``X`` or None), ``constants`` (context features given by name) and
    ``rule`` (one sentence).
    """
    need = [k for k in requires if k in CONTEXT_KEYS]
    x = constants.get("context_tokens")
    given = sorted(k for k in need if k in constants)
    if not need:
        rule = "the model has no context terms"
    elif x is not None:
        rule = (f"every request of a step at (B, S) computes S/B tokens on {x:g} cached "
                "tokens")
    else:
        rule = "context features not given are 0 (their terms are left out)"
    return {"context_aware": bool(need), "context_tokens": x, "constants": given,
            "rule": rule}


def fill_features(feats: Mapping, requires, constants: Mapping[str, float]) -> dict:
    """The feature dict a model predicts on: ``feats`` (with ``B``, ``S``) plus the constants.

    Every feature in ``requires`` or ``constants`` that ``feats`` lacks is the
    constant given by name, else the one implied by ``context_tokens``, else 0;
    ``context_tokens`` itself is not a model feature and is dropped.
    """
    f = {k: np.asarray(v, float).ravel() for k, v in feats.items()}
    n = f["B"].size
    x = constants.get("context_tokens")
    implied = {}
    if x is not None and any(k not in f and k not in constants for k in requires):
        B = f["B"]
        implied = uniform_batch_features(B, f["S"] / np.maximum(B, 1e-12), np.full(n, x))
    for k in (*requires, *constants):
        if k not in f:
            f[k] = np.full(n, constants[k]) if k in constants else implied.get(k, np.zeros(n))
    f.pop("context_tokens", None)
    return f
