"""Collect step traces from a real serving engine (vLLM, in-process).

``collect_vllm`` runs a seeded workload on an in-process vLLM engine and
writes a step trace (CSV), its metadata JSON and, for ``closed_loop``, a
summary JSON. vLLM itself is an optional dependency (the ``collect`` extra);
everything but starting the engine works without it. The command line,
``perfmodel collect vllm ...`` (``--json``: the final summary as JSON,
:func:`collect_summary`), lives in :mod:`perfmodel.cli.collect`;
``python -m perfmodel.data.collect vllm ...`` runs the same command stand-alone.
"""
from __future__ import annotations

from perfmodel.data.collect.machine_state import flag_contended, flag_contended_run
from perfmodel.data.collect.vllm_collector import (
                                              collect_summary,
                                              collect_vllm,
                                              drive,
                                              output_paths,
                                              schedule_signature,
)
from perfmodel.data.collect.workloads import WORKLOADS, make_workload

__all__ = [
                                              "WORKLOADS",
                                              "collect_summary",
                                              "collect_vllm",
                                              "drive",
                                              "flag_contended",
                                              "flag_contended_run",
                                              "make_workload",
                                              "output_paths",
                                              "schedule_signature",
]
