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
"""
from __future__ import annotations

import hashlib
import http.client
import json
import logging
import math
import os
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from perfmodel._io import atomic_open, sha256_file
from perfmodel.errors import ChecksumError, DataUnavailableError, InputError

__all__ = [
    "CITATIONS",
    "ENV_HOME",
    "ENV_MIRROR",
    "ENV_OFFLINE",
    "REGISTRY",
    "SPLITWISE_EXCLUSIONS",
    "VIDUR_NUM_LAYERS",
    "Dataset",
    "VidurProfile",
    "data_home",
    "distserve_coefficients",
    "fetch",
    "get_dataset",
    "list_datasets",
    "load_distserve",
    "load_llm_inference_bench",
    "load_llm_inference_bench_ttft",
    "load_sarathi",
    "load_splitwise",
    "load_vidur_profile",
    "sarathi_steps",
    "sha256_file",
    "splitwise_steps",
    "vidur_mixes",
    "vidur_steps",
]

log = logging.getLogger(__name__)

ENV_MIRROR = "PERFMODEL_DATA_MIRROR"
ENV_HOME = "PERFMODEL_DATA_HOME"
ENV_OFFLINE = "PERFMODEL_OFFLINE"
_TIMEOUT_S = 60
_CHUNK = 1 << 16

# ---------------------------------------------------------------------------
# registry
# ---------------------------------------------------------------------------

#: citation key -> reference
CITATIONS: dict[str, str] = {
    "patel2024splitwise": (
        "Patel, P., Choukse, E., Zhang, C., Shah, A., Goiri, I., Maleki, S., Bianchini, R. "
        "(2024). Splitwise: Efficient generative LLM inference using phase splitting. ISCA 2024. "
        "Data: https://github.com/Mutinifni/splitwise-sim"),
    "agrawal2024sarathi": (
        "Agrawal, A., Kedia, N., Panwar, A., Mohan, J., Kwatra, N., Gulavani, B., Tumanov, A., "
        "Ramjee, R. (2024). Taming throughput-latency tradeoff in LLM inference with "
        "Sarathi-Serve. OSDI 2024. Data: https://github.com/microsoft/sarathi-serve"),
    "chitty2024llminferencebench": (
        "Chitty-Venkata, K. T., Raskar, S., Kale, B., et al. (2024). LLM-Inference-Bench: "
        "Inference benchmarking of large language models on AI accelerators. arXiv:2411.00136. "
        "Data: https://github.com/argonne-lcf/LLM-Inference-Bench"),
    "agrawal2024vidur": (
        "Agrawal, A., Kedia, N., Mohan, J., Panwar, A., Kwatra, N., Gulavani, B., Ramjee, R., "
        "Tumanov, A. (2024). Vidur: A large-scale simulation framework for LLM inference. "
        "MLSys 2024. Data: https://github.com/microsoft/vidur"),
    "zhong2024distserve": (
        "Zhong, Y., Liu, S., Chen, J., Hu, J., Zhu, Y., Liu, X., Jin, X., Zhang, H. (2024). "
        "DistServe: Disaggregating prefill and decoding for goodput-optimized large language "
        "model serving. OSDI 2024. Data: https://github.com/LLMServe/DistServe"),
    "nist_strd_nls": (
        "NIST Information Technology Laboratory. Statistical Reference Datasets: Nonlinear "
        "Regression. https://www.itl.nist.gov/div898/strd/nls/nls_main.shtml"),
}


@dataclass(frozen=True)
class Dataset:
    """One public file: where it lives, what it must hash to, whose it is.

    Attributes
    ----------
    name : registry name, e.g. ``'splitwise/perf_model'``
    path : path under the mirror / cache, e.g. ``'splitwise-sim/data/perf_model.csv'``
    url : upstream raw URL at the pinned commit
    sha256 : hex digest of the file's bytes
    license : SPDX-style licence of the upstream repository
    citation : key into :data:`CITATIONS`
    description : one line
    alt_urls : further URLs tried in order when ``url`` fails or does not match
    """

    name: str
    path: str
    url: str
    sha256: str
    license: str
    citation: str
    description: str = ""
    alt_urls: tuple[str, ...] = ()

    @property
    def urls(self) -> tuple[str, ...]:
        return (self.url, *self.alt_urls)


def _raw(repo: str, commit: str, path: str) -> str:
    return f"https://raw.githubusercontent.com/{repo}/{commit}/{path}"


_SPLITWISE = ("Mutinifni/splitwise-sim", "8f99e7dc9b407f4ce2488d03dd44c0b8b946dab0")
_SARATHI = ("microsoft/sarathi-serve", "02d2567eb169d947c7093f57b5b74ad602615947")
_LIB = ("argonne-lcf/LLM-Inference-Bench", "4211f5d4e9bc0145ed541b6d372d5d8223b44235")
_VIDUR = ("microsoft/vidur", "acb95f6cd118071401fa805a0b0bc11bd2018fc6")
_DISTSERVE = ("LLMServe/DistServe", "82831f1604cc6b10bebd360f6c437a07790dde9f")
_LMFIT = ("lmfit/lmfit-py", "fe389bbbd1fe936cd73742bd81fc6fce7ac92858")
_NIST_URL = "https://www.itl.nist.gov/div898/strd/nls/data/LINKS/DATA/{}.dat"

# (name, mirror path, upstream path, sha256, description)
_GITHUB_FILES = [
    (_SPLITWISE, "MIT", "patel2024splitwise", [
        ("splitwise/perf_model", "splitwise-sim/data/perf_model.csv", "data/perf_model.csv",
         "dbbe505d1d64fc4bd1ec03c50edf944643586de4f68a81e94cbd55dd5bdfbf41",
         "static-batch prefill / mean decode iteration times, Llama2-70B, BLOOM-176B, A100/H100"),
    ]),
    (_SARATHI, "Apache-2.0", "agrawal2024sarathi", [
        ("sarathi/figure-2/decode", "sarathi-serve/osdi-experiments/figure-2/decode.csv",
         "osdi-experiments/figure-2/decode.csv",
         "0dd538d68934e2c8aa85e359a79abdb1b19cdfab9e632701a7676a599766afda",
         "Yi-34B TP2 A100: decode-only batch times, B = 1..128 (seconds)"),
        ("sarathi/figure-2/prefill", "sarathi-serve/osdi-experiments/figure-2/prefill.csv",
         "osdi-experiments/figure-2/prefill.csv",
         "5b889cb8db8bdf71c88c7a8b4b7b1ebbdca2fa9009749cce56c6f89e299fcd43",
         "Yi-34B TP2 A100: prefill-only batch times, 128..16384 tokens (seconds)"),
        ("sarathi/figure-9/chunking-overhead",
         "sarathi-serve/osdi-experiments/figure-9/chunking-overhead.csv",
         "osdi-experiments/figure-9/chunking-overhead.csv",
         "7e5fa6e1da5dc84d06b26af9f9551d8833840d0b1edda9594afd110f7d0743a0",
         "whole-prompt prefill time (ms) of 2k..16k prompts under chunk sizes 512..16384"),
        ("sarathi/table-2/results", "sarathi-serve/osdi-experiments/table-2/results.csv",
         "osdi-experiments/table-2/results.csv",
         "1b85ef4f77ef51861ef8dfd55a9679a0481c725126dbc91cc438edd8c69faeb8",
         "Yi-34B TP2 A100: decode-only, hybrid and prefill-only specimen batches (ms)"),
    ]),
    (_LIB, "BSD-3-Clause", "chitty2024llminferencebench", [
        ("llm-inference-bench/all_results", "LLM-Inference-Bench/Plots/All_results.csv",
         "Plots/All_results.csv",
         "631a12e08c786ce2d4bdfdc0f67b93234360682cb4b36c93806270ddcfd58412",
         "static-batch request latency, B requests of L in = L out tokens, many accelerators"),
        ("llm-inference-bench/ttft", "LLM-Inference-Bench/Plots/Fig_21/all_results_TTFT.csv",
         "Plots/Fig_21/all_results_TTFT.csv",
         "33046baa43ca27f8e5cff5dcf56d3167ceba7c74aac4171ceefd2a3ce0280341",
         "time to first token, 16 x 1024-token prompts (seconds)"),
        ("llm-inference-bench/ttft_itl",
         "LLM-Inference-Bench/Plots/Fig_22/all_results_TTFT_ITL.csv",
         "Plots/Fig_22/all_results_TTFT_ITL.csv",
         "97b406122a3015ecadfb8c96b57edcc3f31186f70ffbf3eddf100b51c02b452d",
         "TTFT and end latency, 16 x 1024-token prompts (seconds)"),
        ("llm-inference-bench/tp_pp", "LLM-Inference-Bench/Plots/Fig_5_a/TP_PP_Results.csv",
         "Plots/Fig_5_a/TP_PP_Results.csv",
         "d5fe6955a22a4e754218f5cbf24e3518c227b25ce741523085afc7d259af2c37",
         "tensor vs pipeline parallel request latency (seconds)"),
    ]),
    (_VIDUR, "MIT", "agrawal2024vidur", [
        ("vidur/attention", "vidur-codellama34b-tp2-a100/attention.csv",
         "data/profiling/a100/attention.csv",
         "83f4bb3ac779878b98457d1e596b324206c6c39d8bf4b25f35a1f14ccbd8af24",
         "per-operator attention times (ms), CodeLlama-34B TP2 A100"),
        ("vidur/mlp", "vidur-codellama34b-tp2-a100/mlp.csv", "data/profiling/a100/mlp.csv",
         "290d864fbb94a243e7d8f76de3922965b20a24b7a566a65d8f943bdab5add635",
         "per-operator MLP / projection / norm times (ms) by num_tokens, CodeLlama-34B TP2 A100"),
        ("vidur/cpu_overheads", "vidur-codellama34b-tp2-a100/cpu_overheads.csv",
         "data/profiling/a100/cpu_overheads.csv",
         "ff9f1bb106443f992899f6e8acda6b9e66ed05767860f7d28a8b183318270b18",
         "CPU-side per-step overheads (ms) by batch size (not GPU step latency)"),
    ]),
    (_DISTSERVE, "Apache-2.0", "zhong2024distserve", [
        ("distserve/profiler-distserve",
         "DistServe/simdistserve/estimators/profile_data/profiler-a100-80g.distserve.json",
         "simdistserve/estimators/profile_data/profiler-a100-80g.distserve.json",
         "f5daa7346d6c0e3a69a830ac4ece11432891e09d610bcf3125d916c48b31f512",
         "fitted prefill/decode coefficients, DistServe engine, A100-80GB, OPT-13B/66B"),
        ("distserve/profiler-vllm",
         "DistServe/simdistserve/estimators/profile_data/profiler-a100-80g.vllm.json",
         "simdistserve/estimators/profile_data/profiler-a100-80g.vllm.json",
         "ab24e00e0e1165fc45c9fbaeaa36aeb1f67cfe21d3961cb995b385a31c95f751",
         "fitted prefill/decode coefficients, vLLM engine, A100-80GB, OPT-13B/66B"),
        ("distserve/max_num_tokens",
         "DistServe/simdistserve/estimators/profile_data/max_num_tokens.csv",
         "simdistserve/estimators/profile_data/max_num_tokens.csv",
         "7a70549e4235a6d45fec6a311a5acf3078c1e5400709450e09afcb8be9ca09d3",
         "KV-cache token capacity by model, TP and PP"),
    ]),
]

_NIST_SHA256 = {
    "Bennett5": "e2be71fffe2a78821361ff3e71eef4549df7015911e3e8e893f3914829872ab4",
    "BoxBOD": "406992ecdd177696e45662e927ad26947d9f3b095e02537d50fc880f982d720a",
    "Chwirut1": "a934a583464358c8cb3f67d27a016c15ab90dadfbf5303079b33dd284134b55b",
    "Chwirut2": "968142c6f5427d87b1fed1e1bfc8cfce1f7ae8c6b89d3fbfb4960d7ced3c1e11",
    "DanWood": "e8d05d54bc3646796cf8d5291c5e39c826049df4771587263357d76c18c393c2",
    "ENSO": "f27b059fb680f986a0eb44a54fa4705bff1bd2ba4b0214bb680c19e2d66f2972",
    "Eckerle4": "b91c6505f0f0c8504e1b4c87b2a043368a8e18bd5ecb5efeb7a0fb346e9a3e10",
    "Gauss1": "c7ce799e2a6667ae682152a816e7105645d0ae50acf968339862ace9dd51e8f2",
    "Gauss2": "77182830681f7b4ec1eab70e44e2e63b793022a779a40e495201ee3a4a63f618",
    "Gauss3": "14c252a4d796a582af55f3a4fa5f4be3b32cd02798073a526cc5ced565117a03",
    "Hahn1": "251ab6520101c6a14d50a3f3b9472b4ab9f720852efbd735c7a3aee12a9c65f5",
    "Kirby2": "64f9f1c525a76d0ca56de05bf8f053dcced5f91a6eeb156051dbcb5b9b81c374",
    "Lanczos1": "42a9c2d11fd7cbfd88f9d1e56e25fc9ec8fe89a684f452feee74c0f59ede0efc",
    "Lanczos2": "4a3aaac05a11811d36c473bb505f8c9183b4060a3586a876813bedd81290116f",
    "Lanczos3": "1a9fc8e9adefdd5222ce99d71e640605b4093778af3b31f0f186bd1036cece09",
    "MGH09": "6913c6e6f158da10d70154b6288883e81bc17f69e6092ae87ad44977552d18bf",
    "MGH10": "f89e5ff39d3b77dcb8bd6df9c5f93ff9872350aadc902b68d718ee229c484fb4",
    "MGH17": "8f8c6156dce64a48fd475388401d0e51fd1ab08d55e2f72978b69e7256ae3674",
    "Misra1a": "45c8da1de19d1cd0bdcefe06e333dee7ec8b31fa5c58b4eada427a7777853650",
    "Misra1b": "521c50ed2063858bfa577c1413fbc07644c8425c8cd2819da004efc3c7b5c705",
    "Misra1c": "bf51450b3582c2bdc660fe4e7554db3210c8546b1b03429b092b6d57a5d48404",
    "Misra1d": "55a26f4017fe7580cc59692527068d29c94f95f27ca1f4472916d3ac29b663f8",
    "Nelson": "fc368adf8ac8c17658d3be390c73382398a17fd97786bcb83dd979e3c5946514",
    "Rat42": "a06bacb7113903cfbf607b5243d4525b58929172f60ac54c764a268525fdda83",
    "Rat43": "5bcbb16649254975701acb2e07a5658a2248ce90cc22bc6f52e35e2a4cc0ee9e",
    "Roszman1": "b62c19e840e9686ed11732bd45398e07efc240cb542ac11f1b7b77368f5a89e0",
    "Thurber": "b66224bd6ec25754af5ec16f00b25ce18ccc8c09b40ebe0acf8515d01abec0a4",
}
_NIST_MODELS_SHA256 = "adc0f27d43781e3da1e906d45175efa1040c3a399cd27d499953652729bdfb90"


def _build_registry() -> dict[str, Dataset]:
    reg: dict[str, Dataset] = {}
    for (repo, commit), lic, cite, files in _GITHUB_FILES:
        for name, path, upath, sha, desc in files:
            reg[name] = Dataset(name, path, _raw(repo, commit, upath), sha, lic, cite, desc)
    for prob, sha in sorted(_NIST_SHA256.items()):
        # NIST's own server first; lmfit's unchanged copy (what the digest was taken
        # from) as the fallback, in case NIST serves different line endings.
        reg[f"nist/{prob}"] = Dataset(
            f"nist/{prob}", f"nist-strd/{prob}.dat", _NIST_URL.format(prob), sha,
            "public-domain", "nist_strd_nls", f"NIST StRD non-linear regression problem {prob}",
            alt_urls=(_raw(*_LMFIT, f"NIST_STRD/{prob}.dat"),))
    reg["nist/Models"] = Dataset(
        "nist/Models", "nist-strd/Models", _raw(*_LMFIT, "NIST_STRD/Models"),
        _NIST_MODELS_SHA256, "public-domain", "nist_strd_nls",
        "the model formula of each StRD problem (lmfit's collation of the NIST headers)")
    return reg


#: every registered dataset, by name
REGISTRY: dict[str, Dataset] = _build_registry()


def list_datasets(prefix: str | None = None) -> list[Dataset]:
    """Registered datasets, sorted by name, optionally those whose name starts with ``prefix``.

    Examples
    --------
    >>> [d.name for d in list_datasets("vidur/")]
    ['vidur/attention', 'vidur/cpu_overheads', 'vidur/mlp']
    """
    if prefix is not None and not isinstance(prefix, str):
        raise InputError(f"prefix must be a string or None, got {type(prefix).__name__}")
    return [REGISTRY[k] for k in sorted(REGISTRY) if prefix is None or k.startswith(prefix)]


def get_dataset(name: str) -> Dataset:
    """The registry entry called ``name`` (InputError listing near names when unknown)."""
    if not isinstance(name, str):
        raise InputError(f"name must be a string, got {type(name).__name__}")
    try:
        return REGISTRY[name]
    except KeyError:
        stem = name.split("/")[0]
        near = [k for k in sorted(REGISTRY) if k.startswith(stem)] or sorted(
            {k.split("/")[0] + "/..." for k in REGISTRY})
        raise InputError(f"name {name!r} is not a registered dataset; "
                         f"known: {', '.join(near[:30])}") from None


# ---------------------------------------------------------------------------
# fetch: mirror -> cache -> download
# ---------------------------------------------------------------------------


def data_home() -> Path:
    """The download cache: ``$PERFMODEL_DATA_HOME``, else ``$XDG_CACHE_HOME/perfmodel``,
    else ``~/.cache/perfmodel``."""
    env = os.environ.get(ENV_HOME)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "perfmodel"


def _checksum_message(ds: Dataset, where: str, actual: str, extra: str = "") -> str:
    return (f"dataset {ds.name!r}: {where} has sha256 {actual}, expected {ds.sha256}"
            f"{extra}")


def _download(url: str, dest: Path, ds: Dataset) -> Path:
    """Stream ``url`` into a temporary file beside ``dest``; verify; rename atomically."""
    h = hashlib.sha256()
    req = urllib.request.Request(url, headers={"User-Agent": "perfmodel-datasets"})
    # a failed or unverified download leaves dest as it was (and no .part file)
    with atomic_open(dest, "wb", force=True, make_parents=True, fsync=True, suffix=".part") as out, \
            urllib.request.urlopen(req, timeout=_TIMEOUT_S) as resp:
        while chunk := resp.read(_CHUNK):
            h.update(chunk)
            out.write(chunk)
        actual = h.hexdigest()
        if actual != ds.sha256:
            raise ChecksumError(_checksum_message(
                ds, f"the download from {url}", actual, "; the downloaded file was not kept"))
    return dest


def fetch(name: str, *, download: bool = True) -> Path:
    """Local path of registered dataset ``name``: mirror, else cache, else download.

    Parameters
    ----------
    name : registry name, see :func:`list_datasets`
    download : allow step 3 (also disabled by ``PERFMODEL_OFFLINE=1``)

    Returns
    -------
    pathlib.Path of a file whose sha256 equals the registry's.

    Raises
    ------
    ChecksumError
        The mirror file, or every downloaded copy, has another digest.
    DataUnavailableError
        No mirror copy, no cached copy and no successful download.
    """
    ds = get_dataset(name)
    tried = []
    mirror = os.environ.get(ENV_MIRROR)
    if mirror:
        p = Path(mirror).expanduser() / ds.path
        if p.is_file():
            actual = sha256_file(p)
            if actual != ds.sha256:
                raise ChecksumError(_checksum_message(
                    ds, f"the mirror file {p}", actual,
                    f" (check {ENV_MIRROR}={mirror}; the mirror is left untouched)"))
            return p
        tried.append(f"no file {p} in the mirror {ENV_MIRROR}={mirror}")
    else:
        tried.append(f"{ENV_MIRROR} is not set")
    cached = data_home() / ds.path
    if cached.is_file():
        actual = sha256_file(cached)
        if actual == ds.sha256:
            return cached
        log.warning("%s", _checksum_message(ds, f"the cached file {cached}", actual,
                                            "; removing it and fetching again"))
        cached.unlink()
        tried.append(f"cached copy {cached} had sha256 {actual} (removed)")
    else:
        tried.append(f"no cached copy {cached}")
    offline = os.environ.get(ENV_OFFLINE, "").strip().lower() in ("1", "true", "yes")
    mismatch = None
    if download and not offline:
        for url in ds.urls:
            try:
                return _download(url, cached, ds)
            except ChecksumError as e:
                mismatch = e
                tried.append(str(e))
            except (urllib.error.URLError, http.client.HTTPException, OSError, TimeoutError,
                    ValueError) as e:
                tried.append(f"download {url} failed: {e}")
    else:
        tried.append("downloads disabled" + (f" ({ENV_OFFLINE}=1)" if offline else ""))
    if mismatch is not None:
        raise mismatch
    raise DataUnavailableError(
        f"dataset {ds.name!r} ({ds.path}) is unavailable: " + "; ".join(tried) + ". "
        f"Set {ENV_MIRROR} to a folder laid out like shared/data/external "
        f"(e.g. export {ENV_MIRROR}=/path/to/shared/data/external, holding {ds.path}), "
        f"or connect to the network, or put the file at {cached}.")


def _read_csv(name: str, **kw) -> pd.DataFrame:
    path = fetch(name)
    df = pd.read_csv(path, **kw)
    df.attrs["source"] = name
    df.attrs["sha256"] = REGISTRY[name].sha256
    return df


def _require_columns(df: pd.DataFrame, cols: Sequence[str], what: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise InputError(f"{what}: missing columns {missing} (has {list(df.columns)})")


def _ones(n: int) -> str:
    return ";".join(["1"] * int(n))


def _repeat(v: int, n: int) -> str:
    return ";".join([str(int(v))] * int(n))


# ---------------------------------------------------------------------------
# Splitwise
# ---------------------------------------------------------------------------

_SPLITWISE_COLS = ["model", "hardware", "prompt_size", "batch_size", "token_size", "peak_power",
                   "average_power", "prompt_time", "token_time", "e2e_time", "tensor_parallel"]

#: reasons for dropping Splitwise rows (see :func:`splitwise_steps`)
SPLITWISE_EXCLUSIONS = {
    "pcap": "hardware h100-80gb-pcap is synthetic (prompt_time = 1.30 x h100-80gb, "
            "token_time identical)",
    "tp2_p512_b64": "llama2-70b TP2 prompt_size 512 x batch_size 64 is anomalous "
                    "(~15x too fast per prompt token; likely capacity-limited runs)",
    "duplicate": "exact duplicate of an earlier row (the prompt 512 x batch 1 x 128-token "
                 "runs are repeated, value for value, in all three sweeps)",
}


def load_splitwise() -> pd.DataFrame:
    """SplitwiseSim ``data/perf_model.csv`` as published (1,260 rows, 11 columns).

    Columns: model, hardware, prompt_size, batch_size, token_size, peak_power,
    average_power, prompt_time (ms), token_time (ms), e2e_time (ms),
    tensor_parallel.  ``prompt_time`` is one prefill iteration over
    ``batch_size x prompt_size`` tokens, ``token_time`` the mean decode
    iteration time at ``batch_size``.  Nothing is dropped here; see
    :func:`splitwise_steps` for the exclusions.
    """
    df = _read_csv("splitwise/perf_model")
    _require_columns(df, _SPLITWISE_COLS, "splitwise/perf_model")
    return df


def _splitwise_exclusion(df: pd.DataFrame) -> pd.Series:
    reason = pd.Series("", index=df.index, dtype=object)
    reason[df.duplicated(keep="first")] = SPLITWISE_EXCLUSIONS["duplicate"]
    anom = ((df["model"] == "llama2-70b") & (df["tensor_parallel"] == 2)
            & (df["prompt_size"] == 512) & (df["batch_size"] == 64))
    reason[anom] = SPLITWISE_EXCLUSIONS["tp2_p512_b64"]
    reason[df["hardware"] == "h100-80gb-pcap"] = SPLITWISE_EXCLUSIONS["pcap"]
    return reason


def splitwise_steps(*, drop_excluded: bool = True) -> pd.DataFrame:
    """Splitwise measurements as engine steps (two per published row).

    Each kept row of ``perf_model.csv`` (one static-batch run of
    ``batch_size`` = B prompts of ``prompt_size`` = P tokens generating
    ``token_size`` = N tokens) becomes:

    * a **prefill step**: ``batch_size = B``, ``total_tokens = B*P``,
      ``duration_ms = prompt_time``, ``chunk_sizes`` = P repeated B times,
      ``context_lens`` = B zeros, ``num_prefill = B``, ``phase='prefill'``;
    * a **mean decode step**: ``batch_size = B``, ``total_tokens = B``,
      ``duration_ms = token_time`` (the run's mean decode-iteration time),
      ``chunk_sizes`` = B ones, ``context_lens`` = ``P + round(N/2)`` per
      request (the mid-run context: decode contexts run from about P to
      P + N), ``num_decode = B``, ``phase='decode'``.  The mean step equals
      the step at the mean context only for a step time linear in context.

    Extras: ``config`` = ``model/hardware/tpK/pP/bB/tN/phase`` (the 5
    replicate runs of one configuration share it), ``model``, ``hardware``,
    ``tp``, ``source``, ``row`` (0-based data row in the CSV),
    ``prompt_size``, ``token_size``.

    Excluded (``drop_excluded=True``), see :data:`SPLITWISE_EXCLUSIONS`;
    each row is counted under the first reason that applies, in this order:

    * ``hardware == 'h100-80gb-pcap'`` (420 rows): synthetic, prompt_time is
      exactly 1.30 x the h100-80gb rows and token_time identical;
    * llama2-70b, TP2, P=512, B=64 on a100-80gb and h100-80gb (10 rows):
      ~15x too fast per prompt token to be a full prefill of 32,768 tokens;
    * exact duplicates (80 rows): each (model, hardware, TP) block lists the
      P=512, B=1, N=128 configuration in each of its three sweeps (batch,
      prompt, output length) with the same 5 rows, value for value; the
      first copy is kept, so every configuration has 5 replicates (15 would
      overstate the replication and understate the noise floor).

    The counts (raw rows by reason) are returned in
    ``df.attrs['excluded']`` and a sentence in ``df.attrs['note']`` (also
    logged at INFO).  With ``drop_excluded=False`` the rows stay and a
    column ``excluded`` holds the reason ('' for kept rows).
    """
    if not isinstance(drop_excluded, (bool, np.bool_)):
        raise InputError(f"drop_excluded must be True or False, got {drop_excluded!r}")
    raw = load_splitwise()
    reason = _splitwise_exclusion(raw)
    counts = {r: int(n) for r, n in reason[reason != ""].value_counts().items()}
    src = raw.reset_index(drop=True).assign(row=np.arange(len(raw)), excluded=reason.to_numpy())
    if drop_excluded:
        src = src[src["excluded"] == ""]
    B = src["batch_size"].astype(int).to_numpy()
    P = src["prompt_size"].astype(int).to_numpy()
    N = src["token_size"].astype(int).to_numpy()
    ctx = P + np.rint(N / 2.0).astype(int)

    def cfg(phase):
        return (src["model"] + "/" + src["hardware"] + "/tp" + src["tensor_parallel"].astype(str)
                + "/p" + src["prompt_size"].astype(str) + "/b" + src["batch_size"].astype(str)
                + "/t" + src["token_size"].astype(str) + "/" + phase).to_numpy()

    common = {"model": src["model"].to_numpy(), "hardware": src["hardware"].to_numpy(),
              "tp": src["tensor_parallel"].astype(int).to_numpy(),
              "source": "splitwise/perf_model", "row": src["row"].to_numpy(),
              "prompt_size": P, "token_size": N}
    pre = pd.DataFrame(dict(
        batch_size=B, total_tokens=B * P, duration_ms=src["prompt_time"].to_numpy(float),
        chunk_sizes=[_repeat(p, b) for p, b in zip(P, B, strict=True)],
        context_lens=[_repeat(0, b) for b in B],
        num_decode=0, num_prefill=B, phase="prefill", config=cfg("prefill"), **common))
    dec = pd.DataFrame(dict(
        batch_size=B, total_tokens=B, duration_ms=src["token_time"].to_numpy(float),
        chunk_sizes=[_ones(b) for b in B],
        context_lens=[_repeat(c, b) for c, b in zip(ctx, B, strict=True)],
        num_decode=B, num_prefill=0, phase="decode", config=cfg("decode"), **common))
    if not drop_excluded:
        pre["excluded"] = src["excluded"].to_numpy()
        dec["excluded"] = src["excluded"].to_numpy()
    out = pd.concat([pre, dec], ignore_index=True)
    out = out.sort_values(["row", "phase"], ascending=[True, False], kind="stable")
    out = out.reset_index(drop=True)
    note = (f"splitwise/perf_model: {len(raw)} rows; "
            + ("; ".join(f"{'dropped' if drop_excluded else 'flagged'} {n} rows: {r}"
                         for r, n in counts.items()) or "nothing excluded")
            + f"; {len(out)} steps from {len(src)} rows")
    out.attrs.update(source="splitwise/perf_model", sha256=raw.attrs.get("sha256"),
                     excluded=counts, note=note)
    log.info("%s", note)
    return out


# ---------------------------------------------------------------------------
# Sarathi-Serve
# ---------------------------------------------------------------------------

_SARATHI_TABLES = {
    "figure-2/decode": "sarathi/figure-2/decode",
    "figure-2/prefill": "sarathi/figure-2/prefill",
    "figure-9/chunking-overhead": "sarathi/figure-9/chunking-overhead",
    "table-2/results": "sarathi/table-2/results",
}


def load_sarathi(table: str) -> pd.DataFrame:
    """One Sarathi-Serve OSDI artefact CSV as published.

    ``table`` is ``'figure-2/decode'``, ``'figure-2/prefill'`` (column
    ``batch_execution_time`` in SECONDS, ``operation_time_per_token`` in ms),
    ``'figure-9/chunking-overhead'`` (``prefill_execution_time`` in ms for a
    whole prompt processed in chunks) or ``'table-2/results'`` (ms).  Units
    as read from the folders' READMEs and checked against the per-token
    columns (``operation_time_per_token = 1000 x batch_execution_time /
    batch_num_tokens``; ``per_token_time = batch_execution_time /
    batch_num_tokens``).
    """
    if table not in _SARATHI_TABLES:
        raise InputError(f"table {table!r} is not one of {list(_SARATHI_TABLES)}")
    name = _SARATHI_TABLES[table]
    df = _read_csv(name, index_col=0 if table.startswith("figure-2") else None)
    df.index.name = None
    return df


def sarathi_steps(*, drop_warmup: bool = False) -> pd.DataFrame:
    """Sarathi-Serve specimen batches (Yi-34B, TP2, 2x A100-80GB PCIe) as steps.

    Small sanity anchors, 19 steps:

    * ``figure-2/decode.csv`` (8 rows): decode-only batches; ``batch_size =
      total_tokens = batch_num_tokens`` (B = 1..128), ``duration_ms = 1000 x
      batch_execution_time`` (the file is in seconds), ``num_decode = B``,
      ``phase='decode'``;
    * ``figure-2/prefill.csv`` (8 rows): one prompt per batch;
      ``batch_size = 1``, ``total_tokens = batch_num_prefill_tokens``
      (128..16384), ``duration_ms = 1000 x batch_execution_time``,
      ``phase='prefill'``;
    * ``table-2/results.csv`` (3 rows, already ms): decode-only B=4
      (68.1 ms), hybrid 1021 prefill tokens + 3 decodes (B=4, S=1024,
      217.6 ms, ``phase='mixed'``) and prefill-only 1024 tokens (217.2 ms).

    Not converted: ``chunk_sizes`` / ``context_lens`` (the files do not
    record the decode requests' context lengths, so the columns are left
    out for every row rather than guessed); ``figure-9`` (each row is the
    total time of a whole prompt over several chunked steps, of a model the
    README leaves ambiguous between Mistral-7B and Yi-34B; see
    :func:`load_sarathi`).

    Caveat: the 256-token prefill row is the run's first batch (Batch Id 0,
    no inter-batch delay) and, at 121.4 ms, slower than the 512-token batch
    (105.6 ms): likely warm-up.  It is kept unless ``drop_warmup=True``;
    either way ``df.attrs['notes']`` says so.

    Extras: ``num_decode``, ``num_prefill``, ``phase``, ``config``
    (``sarathi/<table>/<phase>/S<tokens>``), ``model='yi-34b'``,
    ``hardware='a100-80gb-pcie'``, ``tp=2``, ``source``, ``batch_id``.
    """
    if not isinstance(drop_warmup, (bool, np.bool_)):
        raise InputError(f"drop_warmup must be True or False, got {drop_warmup!r}")
    parts = []
    for table, phase in (("figure-2/decode", "decode"), ("figure-2/prefill", "prefill")):
        t = load_sarathi(table)
        _require_columns(t, ["batch_num_tokens", "batch_num_decode_tokens",
                             "batch_num_prefill_tokens", "batch_size", "batch_execution_time",
                             "Batch Id", "inter_batch_delay"], f"sarathi/{table}")
        S = t["batch_num_tokens"].astype(int).to_numpy()
        nd = t["batch_num_decode_tokens"].astype(int).to_numpy()
        npf = (t["batch_size"].astype(int).to_numpy() if phase == "prefill"
               else np.zeros(len(t), int))
        B = nd + npf
        parts.append(pd.DataFrame({
            "batch_size": B, "total_tokens": S,
            "duration_ms": 1000.0 * t["batch_execution_time"].to_numpy(float),
            "num_decode": nd, "num_prefill": npf, "phase": phase, "source": f"sarathi/{table}",
            "batch_id": t["Batch Id"].to_numpy(float),
            "warmup": ((t["Batch Id"].to_numpy(float) == 0)
                       & t["inter_batch_delay"].isna().to_numpy())}))
    t = load_sarathi("table-2/results")
    _require_columns(t, ["batch_num_prefill_tokens", "batch_num_decode_tokens", "batch_size",
                         "batch_num_tokens", "batch_execution_time", "Batch Id"], "sarathi/table-2")
    nd = t["batch_num_decode_tokens"].astype(int).to_numpy()
    npt = t["batch_num_prefill_tokens"].astype(int).to_numpy()
    B = t["batch_size"].astype(int).to_numpy()
    npf = B - nd
    phase = np.where(npt == 0, "decode", np.where(nd == 0, "prefill", "mixed"))
    parts.append(pd.DataFrame({
        "batch_size": B, "total_tokens": t["batch_num_tokens"].astype(int).to_numpy(),
        "duration_ms": t["batch_execution_time"].to_numpy(float), "num_decode": nd,
        "num_prefill": npf, "phase": phase, "source": "sarathi/table-2/results",
        "batch_id": t["Batch Id"].to_numpy(float),
        "warmup": False}))
    out = pd.concat(parts, ignore_index=True)
    out["config"] = out["source"] + "/" + out["phase"] + "/S" + out["total_tokens"].astype(str)
    out["model"], out["hardware"], out["tp"] = "yi-34b", "a100-80gb-pcie", 2
    warm = out.index[out["warmup"]]
    notes = [f"{out.loc[i, 'source']} S={out.loc[i, 'total_tokens']}: first batch of its run "
             f"(Batch Id 0, no inter-batch delay), {out.loc[i, 'duration_ms']:.1f} ms; likely "
             f"warm-up" + (" (dropped)" if drop_warmup else " (kept)") for i in warm]
    excluded = {}
    if drop_warmup and len(warm):
        excluded = {"first batch of the run (warm-up)": len(warm)}
        out = out.drop(index=warm)
    out = out.drop(columns="warmup").reset_index(drop=True)
    cols = ["batch_size", "total_tokens", "duration_ms", "num_decode", "num_prefill", "phase",
            "config", "model", "hardware", "tp", "source", "batch_id"]
    out = out[cols]
    out.attrs.update(source="sarathi", notes=notes, excluded=excluded)
    return out


# ---------------------------------------------------------------------------
# LLM-Inference-Bench
# ---------------------------------------------------------------------------

_LIB_RENAME = {"Hardware": "hardware", "Num of Hardware": "num_hardware", "Framework": "framework",
               "Model": "model", "Input Output Length": "L", "Batch Size": "B",
               "Latency": "latency_s", "Throughput": "throughput_tok_s"}


def _filter(df: pd.DataFrame, col: str, value, arg: str) -> pd.DataFrame:
    if value is None:
        return df
    vals = [value] if isinstance(value, str) else list(value)
    if not vals or not all(isinstance(v, str) for v in vals):
        raise InputError(f"{arg} must be a string or a list of strings, got {value!r}")
    have = {v.lower(): v for v in df[col].unique()}
    unknown = [v for v in vals if v.lower() not in have]
    if unknown:
        raise InputError(f"{arg}: {unknown} not found; available: {sorted(have.values())}")
    return df[df[col].isin([have[v.lower()] for v in vals])]


def load_llm_inference_bench(*, framework=None, hardware=None, model=None,
                             consistent_only: bool = False) -> pd.DataFrame:
    """LLM-Inference-Bench ``Plots/All_results.csv``: static-batch request latency.

    One row per (hardware, device count, framework, model, L, B): the total
    time ``latency_s`` to serve a static batch of ``B`` requests, each with
    ``L`` input and ``L`` output tokens.  Columns (renamed): ``hardware``,
    ``num_hardware``, ``framework``, ``model``, ``L``, ``B``, ``latency_s``,
    ``throughput_tok_s`` (published as ``2 B L / latency_s``), plus
    ``consistent`` (True where the published throughput equals ``2 B L /
    latency_s`` to 1e-4).  ``framework``, ``hardware``, ``model`` filter by
    exact, case-insensitive name (a string or list); an unknown name raises
    InputError listing the available ones.

    Kept in request form: no step conversion.  A step model ``T(B, S,
    chunks, contexts)`` is compared with a row by integrating it over the
    run::

        latency_s * 1000 ~= T_prefill(B, S = B*L)
                            + sum_{j=1}^{L-1} T_decode(B, S = B, context = L + j)

    (here ``L + j`` counts the token being decoded; in this
    project's schema, where ``context_lens`` is the tokens computed *before*
    the step, decode step ``j`` has ``context_lens = L + j - 1``).  This
    assumes every request runs the whole batch in lock-step, which a
    framework may not do, and the latency includes per-request overheads
    (tokenisation, scheduling) that are not step time.

    Caveat (found by inspection): the 1,161 llama.cpp rows with B > 1 have
    ``throughput = 2 L / latency`` (not ``2 B L / latency``) and latencies
    that barely change with B (slightly *below* B = 1): their "batch size"
    is evidently llama.cpp's prompt-processing batch (``-b``), not B
    concurrent requests.  They are flagged ``consistent = False``;
    ``consistent_only=True`` drops them.
    """
    if not isinstance(consistent_only, (bool, np.bool_)):
        raise InputError(f"consistent_only must be True or False, got {consistent_only!r}")
    raw = _read_csv("llm-inference-bench/all_results")
    _require_columns(raw, list(_LIB_RENAME), "llm-inference-bench/all_results")
    df = raw.rename(columns=_LIB_RENAME)
    df["consistent"] = np.isclose(df["throughput_tok_s"],
                                  2.0 * df["B"] * df["L"] / df["latency_s"], rtol=1e-4, atol=0)
    df = _filter(df, "framework", framework, "framework")
    df = _filter(df, "hardware", hardware, "hardware")
    df = _filter(df, "model", model, "model")
    if consistent_only:
        df = df[df["consistent"]]
    df = df.reset_index(drop=True)
    df.attrs.update(raw.attrs)
    return df


def load_llm_inference_bench_ttft(kind: str = "ttft_itl") -> pd.DataFrame:
    """LLM-Inference-Bench TTFT files: 16 prompts of 1,024 tokens, one output token.

    ``kind='ttft'`` reads ``Plots/Fig_21/all_results_TTFT.csv`` (``latency_s``
    = time to first token); ``kind='ttft_itl'`` reads
    ``Plots/Fig_22/all_results_TTFT_ITL.csv`` (``ttft_s`` and ``end_latency_s``).
    Columns are renamed to ``hardware, num_hardware, framework, model,
    input_len, output_len, B`` plus the latencies in seconds; the blank line
    under each header and the trailing space in ``'end_latency '`` are
    handled.  A TTFT row is close to one prefill step of ``S = 16 x 1024``
    tokens plus request overheads.
    """
    names = {"ttft": "llm-inference-bench/ttft", "ttft_itl": "llm-inference-bench/ttft_itl"}
    if kind not in names:
        raise InputError(f"kind {kind!r} is not one of {list(names)}")
    raw = _read_csv(names[kind], skip_blank_lines=True)
    raw.columns = [c.strip() for c in raw.columns]
    ren = {"Hardware": "hardware", "Num of Hardware": "num_hardware", "Framework": "framework",
           "Model": "model", "Input Length": "input_len", "Output Length": "output_len",
           "Batch Size": "B", "Latency": "latency_s", "TTFT Latency": "ttft_s",
           "end_latency": "end_latency_s"}
    _require_columns(raw, [c for c in ren if c not in ("Latency", "TTFT Latency", "end_latency")],
                     names[kind])
    df = raw.rename(columns=ren).dropna(how="all").reset_index(drop=True)
    df.attrs.update(raw.attrs)
    return df


# ---------------------------------------------------------------------------
# Vidur
# ---------------------------------------------------------------------------

#: CodeLlama-34B has 48 transformer layers
VIDUR_NUM_LAYERS = 48
_KV_GRANULARITY = 64
_TOKEN_ROUND = 8
#: per-layer operators looked up at the step's token count (Vidur's compute models)
_VIDUR_TOKEN_OPS = {
    "linear": ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj"),
    "other": ("input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add"),
}


class VidurProfile(NamedTuple):
    """Vidur's CodeLlama-34B TP2 A100 profile: three raw tables (times in ms)."""

    attention: pd.DataFrame
    mlp: pd.DataFrame
    cpu_overheads: pd.DataFrame


def load_vidur_profile() -> VidurProfile:
    """Vidur's per-operator profile tables for CodeLlama-34B, TP2, A100, as published.

    ``attention`` (14,658 rows): ``time_stats.{attn_input_reshape,
    attn_decode, attn_output_reshape, attn_prefill}.{min,max,mean,median,std}``
    by ``batch_size``, ``prefill_chunk_size``, ``kv_cache_size``,
    ``is_prefill`` (decode rows: ``prefill_chunk_size = 0``, B = 1..128;
    prefill rows: B = 1, chunk 64..4096 with prior context ``kv_cache_size``).
    Note: Vidur defines an ``attn_kv_cache_save`` operator, but this file
    has no such column.  ``mlp`` (261 rows): ``time_stats.{emb,
    input_layernorm, attn_pre_proj, attn_rope, attn_post_proj,
    post_attention_layernorm, mlp_up_proj, mlp_act, mlp_down_proj, add}.*`` by
    ``num_tokens`` (1..4096).  ``cpu_overheads`` (13 rows): CPU-side step
    overheads by batch size (not GPU step latency).
    """
    att = _read_csv("vidur/attention")
    mlp = _read_csv("vidur/mlp")
    cpu = _read_csv("vidur/cpu_overheads", index_col=0)
    _require_columns(att, ["batch_size", "prefill_chunk_size", "kv_cache_size", "is_prefill",
                           "time_stats.attn_decode.median", "time_stats.attn_prefill.median"],
                     "vidur/attention")
    _require_columns(mlp, ["num_tokens"] + [f"time_stats.{op}.median" for ops in
                                            _VIDUR_TOKEN_OPS.values() for op in ops], "vidur/mlp")
    return VidurProfile(att, mlp, cpu)


class _VidurTables:
    """Lookup tables (duplicates averaged) built from a :class:`VidurProfile`."""

    def __init__(self, prof: VidurProfile, stat: str):
        self.stat = stat
        mlp = prof.mlp
        cols = [f"time_stats.{op}.{stat}" for ops in _VIDUR_TOKEN_OPS.values() for op in ops]
        self.mlp = mlp.groupby("num_tokens")[cols].mean().sort_index()
        self.mlp_grid = self.mlp.index.to_numpy()
        att = prof.attention
        dec = att[~att["is_prefill"].astype(bool)]
        pre = att[att["is_prefill"].astype(bool)]
        self.dec = dec.groupby(["batch_size", "kv_cache_size"])[
            f"time_stats.attn_decode.{stat}"].mean()
        self.pre = pre.groupby(["prefill_chunk_size", "kv_cache_size"])[
            f"time_stats.attn_prefill.{stat}"].mean()
        self.dec_kv = {b: g.index.get_level_values(1).to_numpy()
                       for b, g in self.dec.groupby(level=0)}
        self.pre_chunks = np.unique(self.pre.index.get_level_values(0).to_numpy())
        self.pre_kv = {c: g.index.get_level_values(1).to_numpy()
                       for c, g in self.pre.groupby(level=0)}

    @staticmethod
    def _up(grid: np.ndarray, v: float):
        i = int(np.searchsorted(grid, v, side="left"))
        return None if i >= grid.size else grid[i]

    def compose(self, chunks: np.ndarray, ctx: np.ndarray):
        """(linear, attention, other) per-layer ms, or a string saying what is out of range."""
        S = int(chunks.sum())
        s_r = -(-S // _TOKEN_ROUND) * _TOKEN_ROUND
        tok = self._up(self.mlp_grid, s_r)
        if tok is None:
            return f"total tokens {S} (rounded {s_r}) > profiled {self.mlp_grid[-1]}"
        row = self.mlp.loc[tok]
        lin = sum(float(row[f"time_stats.{op}.{self.stat}"]) for op in _VIDUR_TOKEN_OPS["linear"])
        oth = sum(float(row[f"time_stats.{op}.{self.stat}"]) for op in _VIDUR_TOKEN_OPS["other"])
        attn = 0.0
        dec = chunks == 1
        if dec.any():
            bd = int(dec.sum())
            kv = int(np.mean(ctx[dec]))
            kv = -(-kv // _KV_GRANULARITY) * _KV_GRANULARITY
            if bd not in self.dec_kv:
                return f"decode batch {bd} > profiled {max(self.dec_kv)}"
            kv_g = self._up(self.dec_kv[bd], kv)
            if kv_g is None:
                return f"mean decode context {kv} > profiled {self.dec_kv[bd][-1]} at B={bd}"
            attn += float(self.dec.loc[(bd, kv_g)])
        pre = ~dec
        if pre.any():
            kv = int(np.sum(-(-ctx[pre] // _KV_GRANULARITY) * _KV_GRANULARITY))
            ch = round(math.sqrt(float(np.sum(chunks[pre].astype(float) ** 2))))
            ch_g = self._up(self.pre_chunks, ch)
            if ch_g is None:
                return f"prefill chunk {ch} > profiled {self.pre_chunks[-1]}"
            kv_g = self._up(self.pre_kv[ch_g], kv)
            if kv_g is None:
                return (f"prefill prior context {kv} > profiled {self.pre_kv[ch_g][-1]} "
                        f"at chunk {ch_g}")
            attn += float(self.pre.loc[(ch_g, kv_g)])
        return lin, attn, oth


def _int_list(s, what: str, row: int) -> np.ndarray:
    if isinstance(s, str):
        toks = [t for t in s.replace(",", ";").split(";") if t.strip() != ""]
        try:
            return np.array([int(t) for t in toks], dtype=np.int64)
        except ValueError:
            raise InputError(
                f"{what}: row {row} is not a ';'-joined list of integers: {s!r}") from None
    try:
        arr = np.asarray(s, dtype=np.int64).ravel()
    except (TypeError, ValueError):
        raise InputError(f"{what}: row {row} is not a list of integers: {s!r}") from None
    return arr


def _mix_arrays(mixes) -> list[tuple[np.ndarray, np.ndarray]]:
    if isinstance(mixes, pd.DataFrame):
        _require_columns(mixes, ["chunk_sizes", "context_lens"], "mixes")
        pairs = list(zip(mixes["chunk_sizes"], mixes["context_lens"], strict=True))
    else:
        try:
            pairs = [tuple(m) for m in mixes]
        except TypeError:
            raise InputError(f"mixes must be a DataFrame with chunk_sizes/context_lens or a list "
                             f"of (chunks, contexts) pairs, got {type(mixes).__name__}") from None
    out, bad = [], []
    for i, pr in enumerate(pairs):
        if len(pr) != 2:
            raise InputError(f"mixes: row {i} is not a (chunks, contexts) pair: {pr!r}")
        c = _int_list(pr[0], "mixes chunk_sizes", i)
        x = _int_list(pr[1], "mixes context_lens", i)
        if c.size == 0 or c.size != x.size or np.any(c < 1) or np.any(x < 0):
            bad.append(i)
        out.append((c, x))
    if not out:
        raise InputError("mixes is empty")
    if bad:
        raise InputError(f"mixes: {len(bad)} rows need equal-length chunk_sizes >= 1 and "
                         f"context_lens >= 0 (first rows {bad[:5]})")
    return out


def vidur_mixes(seed: int = 0) -> pd.DataFrame:
    """A seeded, documented set of step mixes inside Vidur's profiled range.

    Requests are listed prefill chunks first, then decodes (``chunk = 1``);
    ``context_lens`` is the prior context of each request.  Contexts are
    drawn from ``numpy.random.default_rng(seed)``; a draw outside the
    profile (see :func:`vidur_steps`) is redrawn.

    * ``decode`` (33): B in {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128}, three
      mixes each; contexts uniform on [lo, hi] with hi ~ U{128..4000},
      lo ~ U{16..hi};
    * ``prefill`` (30): one chunk in {64, 128, 256, 512, 768, 1024, 1536,
      2048, 3072, 4096}, prior context 0 for the first of three, the others
      uniform on [0, 4096 - chunk];
    * ``mixed`` (40): one chunk ~ U{64..2048} with prior context uniform on
      [0, 4096 - chunk], plus k ~ U{1..64} decodes with contexts U{16..4000};
    * ``mixed2`` (15): two chunks ~ U{64..1024} with prior contexts uniform on
      [0, 1024], plus k ~ U{0..32} decodes.

    Returns a DataFrame with ``chunk_sizes``, ``context_lens`` (';'-joined),
    ``kind`` and ``phase`` ('decode', 'prefill' or 'mixed', from the counts:
    a ``mixed2`` draw with no decodes is a 'prefill' step).
    """
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise InputError(f"seed must be an integer, got {seed!r}")
    rng = np.random.default_rng(int(seed))
    tables = _vidur_tables("median")
    rows = []

    def add(kind, draw):
        """Append draw() = (chunks, contexts), redrawing while it is outside the profile."""
        for _ in range(1000):
            c, x = (np.asarray(v, np.int64) for v in draw())
            if not isinstance(tables.compose(c, x), str):
                rows.append((kind, c, x))
                return
        raise RuntimeError(f"could not draw a profiled {kind} mix")  # pragma: no cover

    def decode_ctx(k):
        hi = int(rng.integers(128, 4001))
        lo = int(rng.integers(16, hi + 1))
        return rng.integers(lo, hi + 1, size=k)

    for b in (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128):
        for _ in range(3):
            add("decode", lambda b=b: (np.ones(b), decode_ctx(b)))
    for c in (64, 128, 256, 512, 768, 1024, 1536, 2048, 3072, 4096):
        add("prefill", lambda c=c: ([c], [0]))
        for _ in range(2):
            add("prefill", lambda c=c: ([c], [int(rng.integers(0, 4096 - c + 1))]))

    def mixed():
        c = int(rng.integers(64, 2049))
        k = int(rng.integers(1, 65))
        return (np.r_[c, np.ones(k, np.int64)],
                np.r_[int(rng.integers(0, 4096 - c + 1)), rng.integers(16, 4001, size=k)])

    def mixed2():
        k = int(rng.integers(0, 33))
        return (np.r_[rng.integers(64, 1025, size=2), np.ones(k, np.int64)],
                np.r_[rng.integers(0, 1025, size=2), rng.integers(16, 4001, size=k)])

    for _ in range(40):
        add("mixed", mixed)
    for _ in range(15):
        add("mixed2", mixed2)
    def phase(c):
        nd = int(np.sum(c == 1))
        return "decode" if nd == c.size else ("prefill" if nd == 0 else "mixed")

    return pd.DataFrame({
        "chunk_sizes": [";".join(map(str, c.tolist())) for _, c, _ in rows],
        "context_lens": [";".join(map(str, x.tolist())) for _, _, x in rows],
        "kind": [k for k, _, _ in rows],
        "phase": [phase(c) for _, c, _ in rows],
    })


_TABLE_CACHE: dict[tuple[str, str], _VidurTables] = {}


def _vidur_tables(stat: str) -> _VidurTables:
    key = (os.environ.get(ENV_MIRROR, ""), stat)
    if key not in _TABLE_CACHE:
        _TABLE_CACHE[key] = _VidurTables(load_vidur_profile(), stat)
    return _TABLE_CACHE[key]


def vidur_steps(mixes=None, *, seed: int = 0, stat: str = "median",
                num_layers: int = VIDUR_NUM_LAYERS) -> pd.DataFrame:
    """Step times composed from Vidur's operator profile, the way Vidur composes a step.

    For each mix (per-request prefill chunk sizes and prior contexts; a
    request with chunk 1 is a decode), with ``S`` = total tokens:

    * token-wise operators, looked up at ``S`` rounded up to a multiple of 8
      and then up to the next profiled ``num_tokens`` row: ``attn_pre_proj``,
      ``attn_post_proj``, ``mlp_up_proj``, ``mlp_down_proj`` (``linear``) and
      ``input_layernorm``, ``post_attention_layernorm``, ``attn_rope``,
      ``mlp_act``, ``add`` (``other``);
    * decode attention at (number of decodes, ``int(mean decode context)``
      rounded up to 64, then up to the next profiled ``kv_cache_size`` row);
    * prefill attention at (sum of the prefill requests' prior contexts, each
      rounded up to 64; ``round(sqrt(sum chunk^2))``), looked up as the next
      profiled chunk row and then its next ``kv_cache_size`` row;
    * step = ``num_layers`` (48) x (linear + attention + other).

    Column ``stat`` of each operator (``'median'``, as Vidur trains on, or
    'mean', 'min', 'max') is used; duplicated profile rows are averaged.

    Not composed (so the result is the GPU compute of one pipeline stage):
    tensor-parallel all-reduce (no all-reduce table in this profile), the
    KV-cache save operator (no ``attn_kv_cache_save`` column in the file
    although Vidur defines it), ``attn_input_reshape`` /
    ``attn_output_reshape`` and the embedding (not in Vidur's per-layer sum),
    CPU overheads (``cpu_overheads.csv`` is not GPU step time), and Vidur's
    optional batching-overhead fractions for GQA attention.  Vidur predicts
    each operator with a random forest fitted to these rows; here the
    profiled row at or just above the query is used instead (no
    extrapolation: a mix outside the profile raises InputError).  The
    result is deterministic (no noise), so fitting it measures a latency
    model's misspecification against an additive per-operator composition.

    Parameters
    ----------
    mixes : DataFrame with ``chunk_sizes`` and ``context_lens`` (';'-joined
        strings or sequences), a list of ``(chunks, contexts)`` pairs, or
        None for :func:`vidur_mixes` ``(seed)``
    seed : int, used only when ``mixes`` is None
    stat : 'median', 'mean', 'min' or 'max'
    num_layers : int, default 48 (CodeLlama-34B)

    Returns
    -------
    DataFrame in the step-trace schema: ``batch_size``, ``total_tokens``,
    ``duration_ms``, ``chunk_sizes``, ``context_lens``, ``num_decode``,
    ``num_prefill``, ``phase``, ``config`` (``vidur/<i>``), ``model``,
    ``hardware``, ``tp``, ``source``, and the parts ``linear_ms``,
    ``attention_ms``, ``other_ms`` (each x ``num_layers``); plus ``kind``
    when ``mixes`` has one (as :func:`vidur_mixes` gives).
    """
    if stat not in ("median", "mean", "min", "max"):
        raise InputError(f"stat {stat!r} is not one of 'median', 'mean', 'min', 'max'")
    if (not isinstance(num_layers, (int, np.integer)) or isinstance(num_layers, bool)
            or num_layers < 1):
        raise InputError(f"num_layers must be a positive integer, got {num_layers!r}")
    if mixes is None:
        mixes = vidur_mixes(seed)
    kinds = (mixes["kind"].tolist() if isinstance(mixes, pd.DataFrame) and "kind" in mixes
             else None)
    pairs = _mix_arrays(mixes)
    tables = _vidur_tables(stat)
    recs, bad = [], []
    for i, (c, x) in enumerate(pairs):
        r = tables.compose(c, x)
        if isinstance(r, str):
            bad.append((i, r))
            continue
        lin, attn, oth = (v * num_layers for v in r)
        nd = int(np.sum(c == 1))
        npf = int(c.size - nd)
        phase = "decode" if npf == 0 else ("prefill" if nd == 0 else "mixed")
        recs.append({"batch_size": int(c.size), "total_tokens": int(c.sum()),
                         "duration_ms": lin + attn + oth,
                         "chunk_sizes": ";".join(map(str, c.tolist())),
                         "context_lens": ";".join(map(str, x.tolist())),
                         "num_decode": nd, "num_prefill": npf, "phase": phase,
                         "config": f"vidur/{i}",
                         "model": "codellama-34b", "hardware": "a100", "tp": 2, "source": "vidur",
                         "linear_ms": lin, "attention_ms": attn, "other_ms": oth})
    if bad:
        raise InputError(f"mixes: {len(bad)} rows lie outside the Vidur profile "
                         f"(first: " + "; ".join(f"row {i}: {r}" for i, r in bad[:3]) + ")")
    out = pd.DataFrame(recs)
    if kinds is not None:
        out["kind"] = kinds
    out.attrs.update(source="vidur", stat=stat, num_layers=int(num_layers),
                     not_composed=["all_reduce (no table)", "attn_kv_cache_save (no column)",
                                   "attn_input/output_reshape", "emb", "cpu_overheads",
                                   "GQA batching-overhead fractions"])
    return out


# ---------------------------------------------------------------------------
# DistServe
# ---------------------------------------------------------------------------

_DISTSERVE_FILES = {"distserve": "distserve/profiler-distserve", "vllm": "distserve/profiler-vllm"}


def load_distserve(engine: str = "distserve") -> dict:
    """DistServe's ``profiler-a100-80g.<engine>.json`` as a dict (model -> TP -> coefficients)."""
    if engine not in _DISTSERVE_FILES:
        raise InputError(f"engine {engine!r} is not one of {list(_DISTSERVE_FILES)}")
    with open(fetch(_DISTSERVE_FILES[engine])) as f:
        return json.load(f)


def distserve_coefficients(engine: str | None = None, *, wide: bool = False) -> pd.DataFrame:
    """DistServe's fitted latency coefficients (A100-80GB SXM, OPT-13B / OPT-66B) as a table.

    DistServe's simulator (``simdistserve/estimators/time_estimator.py`` in
    its repository) predicts, in ms::

        prefill = a + b * sum_i l_i + c * sum_i l_i^2                  ["prefill"]
        decode  = a + b * sum_i context_i + c * B     ["decoding_smallbs"] if B < threshold
                                                      ["decoding_largebs"] otherwise

    with ``threshold = decoding_large_small_bs_threshold`` (95).  These are
    fitted coefficients, not measurements (the raw profiling database is not
    published).

    Parameters
    ----------
    engine : 'distserve', 'vllm' or None (both)
    wide : False: one row per (engine, model, tp, phase) with columns
        ``a, b, c, batch_min, batch_max`` (``phase`` in 'prefill',
        'decode_smallbs', 'decode_largebs'; the batch range where a decode
        row applies, NaN for prefill); True: one row per (engine, model, tp)
        with ``prefill_a..c``, ``decode_smallbs_a..c``, ``decode_largebs_a..c``,
        ``bs_threshold``.
    """
    engines = list(_DISTSERVE_FILES) if engine is None else [engine]
    for e in engines:
        if e not in _DISTSERVE_FILES:
            raise InputError(f"engine {e!r} is not one of {list(_DISTSERVE_FILES)} or None")
    if not isinstance(wide, (bool, np.bool_)):
        raise InputError(f"wide must be True or False, got {wide!r}")
    keys = {"prefill": "prefill", "decode_smallbs": "decoding_smallbs",
            "decode_largebs": "decoding_largebs"}
    rows = []
    for e in engines:
        for model, by_tp in load_distserve(e).items():
            for tp, d in by_tp.items():
                thr = int(d["decoding_large_small_bs_threshold"])
                for phase, key in keys.items():
                    a, b, c = (float(v) for v in d[key])
                    lo, hi = {"prefill": (np.nan, np.nan), "decode_smallbs": (1, thr - 1),
                              "decode_largebs": (thr, np.inf)}[phase]
                    rows.append({"engine": e, "model": model, "tp": int(tp), "phase": phase,
                                 "a": a, "b": b, "c": c, "batch_min": lo, "batch_max": hi,
                                 "bs_threshold": thr})
    df = pd.DataFrame(rows)
    if wide:
        w = df.pivot_table(index=["engine", "model", "tp", "bs_threshold"], columns="phase",
                           values=["a", "b", "c"], aggfunc="first")
        w.columns = [f"{ph}_{coef}" for coef, ph in w.columns]
        order = [f"{ph}_{k}" for ph in keys for k in "abc"]
        df = w[order].reset_index()
    df = df.sort_values(["engine", "model", "tp"], kind="stable").reset_index(drop=True)
    df.attrs["source"] = [_DISTSERVE_FILES[e] for e in engines]
    return df
