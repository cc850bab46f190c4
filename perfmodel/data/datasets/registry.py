"""The registry: pinned public files (upstream address, sha256, licence, citation)."""
from __future__ import annotations

from dataclasses import dataclass

from perfmodel.errors import InputError

ENV_MIRROR = "PERFMODEL_DATA_MIRROR"
ENV_HOME = "PERFMODEL_DATA_HOME"
ENV_OFFLINE = "PERFMODEL_OFFLINE"


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
