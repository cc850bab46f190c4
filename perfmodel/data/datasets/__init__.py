"""Public datasets: a registry with pinned sources and checksums, and loaders.

Problem
-------
The project tests its step-latency model against other people's public
measurements.  Each file must be the exact bytes that were inspected, come
from a stated upstream commit under a stated licence, and be reachable with
or without a network.  :func:`fetch` resolves a registry name to a local
file in this order:

1. the mirror folder ``$PERFMODEL_DATA_MIRROR`` (laid out like
   ``shared/data/external``: ``<mirror>/<Dataset.path>``), sha256-verified;
2. the cache ``$PERFMODEL_DATA_HOME`` (default ``$XDG_CACHE_HOME/perfmodel``
   or ``~/.cache/perfmodel``), sha256-verified (a corrupt cached copy is
   removed and fetched again);
3. a download of the upstream file at the pinned commit with
   :mod:`urllib` into the cache (temporary file, then an atomic rename),
   sha256-verified: a mismatch raises :class:`~perfmodel.errors.ChecksumError`
   naming the file, the expected and the actual digest, and the bad file is
   not kept.  ``PERFMODEL_OFFLINE=1`` skips this step.

With neither mirror, cache nor network it raises
:class:`~perfmodel.errors.DataUnavailableError` saying how to set
``PERFMODEL_DATA_MIRROR``.  The sha256 digests were computed from the files
at the pinned commits: each :class:`Dataset` entry gives the upstream URL at
its commit, the licence and the citation, and each loader's docstring the
caveats found by inspection.

The loaders below turn the files into DataFrames; the ``*_steps``
converters return the step-trace schema (``batch_size``, ``total_tokens``,
``duration_ms`` and the documented extras, see ``perfmodel.data.trace``).

Datasets
--------
splitwise/*            SplitwiseSim ``perf_model.csv`` (MIT), Patel et al. 2024
sarathi/*              Sarathi-Serve OSDI artefacts (Apache-2.0), Agrawal et al. 2024
llm-inference-bench/*  LLM-Inference-Bench plots data (BSD-3-Clause), Chitty-Venkata et al. 2024
vidur/*                Vidur per-operator profile, CodeLlama-34B TP2 A100 (MIT), Agrawal et al. 2024
distserve/*            DistServe fitted latency coefficients (Apache-2.0), Zhong et al. 2024
nist/*                 NIST StRD non-linear regression (public domain)
llmservingsim/*        LLMServingSim 2.x vLLM GPU layer-profile bundles, model configs and
                       serving runs (MIT), Cho et al. 2024; loaders in
                       :mod:`perfmodel.data.datasets.llmservingsim`

Modules
-------
``registry`` (the entries), ``fetch`` (mirror -> cache -> download), and one
module of loaders per source: ``splitwise``, ``sarathi``,
``llm_inference_bench``, ``vidur``, ``distserve``, ``llmservingsim``.
"""
from __future__ import annotations

from perfmodel._io import sha256_file
from perfmodel.data.datasets.distserve import distserve_coefficients, load_distserve
from perfmodel.data.datasets.fetch import data_home, fetch
from perfmodel.data.datasets.llm_inference_bench import (
    load_llm_inference_bench,
    load_llm_inference_bench_ttft,
)
from perfmodel.data.datasets.llmservingsim import (
    ModelConfig,
    ProfileBundle,
    load_model_config,
    load_profile_bundle,
    serving_run_dir,
)
from perfmodel.data.datasets.registry import (
    CITATIONS,
    ENV_HOME,
    ENV_MIRROR,
    ENV_OFFLINE,
    REGISTRY,
    Dataset,
    get_dataset,
    list_datasets,
)
from perfmodel.data.datasets.sarathi import load_sarathi, sarathi_steps
from perfmodel.data.datasets.splitwise import SPLITWISE_EXCLUSIONS, load_splitwise, splitwise_steps
from perfmodel.data.datasets.vidur import (
    VIDUR_NUM_LAYERS,
    VidurProfile,
    load_vidur_profile,
    vidur_mixes,
    vidur_steps,
)

__all__ = [
    "CITATIONS",
    "ENV_HOME",
    "ENV_MIRROR",
    "ENV_OFFLINE",
    "REGISTRY",
    "SPLITWISE_EXCLUSIONS",
    "VIDUR_NUM_LAYERS",
    "Dataset",
    "ModelConfig",
    "ProfileBundle",
    "VidurProfile",
    "data_home",
    "distserve_coefficients",
    "fetch",
    "get_dataset",
    "list_datasets",
    "load_distserve",
    "load_llm_inference_bench",
    "load_llm_inference_bench_ttft",
    "load_model_config",
    "load_profile_bundle",
    "load_sarathi",
    "load_splitwise",
    "load_vidur_profile",
    "sarathi_steps",
    "serving_run_dir",
    "sha256_file",
    "splitwise_steps",
    "vidur_mixes",
    "vidur_steps",
]

