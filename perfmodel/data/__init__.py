"""Data layer: step traces, the per-step features, data sets, noise floors and the collectors.

Imports only the root helpers (``perfmodel.errors``, ``_io``, ``_checks``).
"""
