"""perfmodel: explain and predict the step latency of LLM serving engines.

The public entry points are importable from the package itself::

    from perfmodel import read_trace, fit_model

    fit = fit_model(read_trace("trace.csv"), "seed_id")
    print(fit.fit_report())

=================  ==========================================================
``read_trace``     read and validate a step trace (:mod:`perfmodel.data.trace`)
``fit_model``      fit a member of the model family (:mod:`perfmodel.core.fit`)
``FitResult``      a fitted model and its quality (:mod:`perfmodel.core.results`)
``get_model``      a registered model by name (:mod:`perfmodel.core.model`)
``MODELS``         every registered model, by name (:mod:`perfmodel.core.model`)
``RECOMMENDED``    the recommended model, with and without per-request context
``default_for``    the recommended model for a trace
=================  ==========================================================

They are loaded on first use (PEP 562), so ``import perfmodel`` costs nothing
and the bookkeeping modules ``perfmodel.report.pipeline`` and ``perfmodel.report.paperio``
still run with the standard library alone (no numpy).
"""
from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name -> the module that defines it
_EXPORTS = {
    "read_trace": "perfmodel.data.trace",
    "fit_model": "perfmodel.core.fit",
    "FitResult": "perfmodel.core.results",
    "get_model": "perfmodel.core.model",
    "MODELS": "perfmodel.core.model",
    "RECOMMENDED": "perfmodel.core.model",
    "default_for": "perfmodel.core.model",
}

__all__ = ["MODELS", "RECOMMENDED", "FitResult", "__version__", "default_for", "fit_model",
           "get_model", "read_trace"]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from perfmodel.core.fit import fit_model
    from perfmodel.core.model import MODELS, RECOMMENDED, default_for, get_model
    from perfmodel.core.results import FitResult
    from perfmodel.data.trace import read_trace


def __getattr__(name: str) -> Any:
    """Load a public entry point from its module on first access."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
