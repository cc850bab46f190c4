"""Collect a GPU step-latency trace from a PyTorch Llama-style harness.

The harness (:mod:`perfmodel.data.collect_torch.harness`, which needs ``torch``)
builds a randomly initialised Llama-style decoder from a JSON config, runs
"engine steps" of packed ragged batches (B requests, request i with a chunk of
c_i new tokens and ctx_i tokens already in its KV cache) and times each step
with CUDA events. ``python -m perfmodel.data.collect_torch --help`` runs it.

This package's ``__init__`` imports nothing heavy, so that ``perfmodel`` stays
importable without torch.
"""
from __future__ import annotations

__all__: list[str] = []
