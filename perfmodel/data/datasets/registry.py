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
    "cho2024llmservingsim": (
        "Cho, J., Kim, M., Choi, H., Heo, G., Park, J. (2024). LLMServingSim: A HW/SW "
        "co-simulation infrastructure for LLM inference serving at scale. IISWC 2024. "
        "Data (version 2.x, layer-profile bundles and vLLM serving runs): "
        "https://github.com/casys-kaist/LLMServingSim"),
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
#: LLMServingSim 2.x at commit 5daddb2 ("Key bench/examples by hardware, and land the RTX 4090
#: validation"), the one its bundles and serving runs were published with
LLMSERVINGSIM = ("casys-kaist/LLMServingSim", "5daddb21a545658d5150b535712d0494584b5278")
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

#: LLMServingSim files: (upstream path, sha256); registry name = 'llmservingsim/' + path
_LLMSERVINGSIM_FILES = [
    ("bench/examples/RTX4090/Llama-3.1-8B/config.json",
     "cb99198f062defb7ca947a3d8e81f273352637562c66eb75dc26e7e5ef3e2f8e"),
    ("bench/examples/RTX4090/Llama-3.1-8B/outputs/sim.csv",
     "bba65bc8131442e00edfdde93c10ed68551c29cf0d9adf7fb07ebfcbb3ac4767"),
    ("bench/examples/RTX4090/Llama-3.1-8B/validation/summary.txt",
     "80c1b498f741d798e705fc83dfe79394cabee41eb18cfba6957ae17f01062f25"),
    ("bench/examples/RTX4090/Llama-3.1-8B/vllm/meta.json",
     "56cbcb2a08e9fe6f67d60cad8ee545f86c874f82b46ab413da484f331417b2fc"),
    ("bench/examples/RTX4090/Llama-3.1-8B/vllm/requests.jsonl",
     "5a6f2a0b09d5eb84bd75b30ed625d883c22b4bcc0a839cd1128ae42f74ecc90d"),
    ("bench/examples/RTX4090/Llama-3.1-8B/vllm/timeseries.csv",
     "f99d474f8d8a2c52f986fb27e46832a1627fc908d7570852b016573b89ab3173"),
    ("bench/examples/RTXPRO6000/Llama-3.1-8B/config.json",
     "26c8b385dbb295de3653bac521fd42b99de03736b747f5d2f1cdf2e0c8abeae8"),
    ("bench/examples/RTXPRO6000/Llama-3.1-8B/outputs/sim.csv",
     "c58eb0d7da15c7144508a40e5347e51a78e2ecb6dd309ce809fb7751057da2d1"),
    ("bench/examples/RTXPRO6000/Llama-3.1-8B/validation/summary.txt",
     "40dbb4ac3fa2c1c1e0f65891b914de2af245192ef04e9ca25a74a3c5132a13c5"),
    ("bench/examples/RTXPRO6000/Llama-3.1-8B/vllm/meta.json",
     "c074b29bddabe66102e3e635dd7910c35927c3f52b73d58d8fa0798f38156ae4"),
    ("bench/examples/RTXPRO6000/Llama-3.1-8B/vllm/requests.jsonl",
     "0175b31b0ddc02b97eb6da1410dc80fc5900b8785c988e90cacee1021d644682"),
    ("bench/examples/RTXPRO6000/Llama-3.1-8B/vllm/timeseries.csv",
     "de884551204aeb9c12d8bed0fa78a5eb6b85e1e0bb173e9664fd6e5f26998aed"),
    ("bench/examples/RTXPRO6000/Qwen3-30B-A3B-Instruct-2507/config.json",
     "4dfe8adfbad964f1be88f07be44442745d84d176534c4c79280f95a34ff87bd4"),
    ("bench/examples/RTXPRO6000/Qwen3-30B-A3B-Instruct-2507/outputs/sim.csv",
     "e4582d622ed8cbbce889f105eea15d39227d15ecf18d099d1577a41ef07a7c54"),
    ("bench/examples/RTXPRO6000/Qwen3-30B-A3B-Instruct-2507/validation/summary.txt",
     "08e052fcf525e2d3a68d22f8a205a8bf15c06f4b0fe08c8b03e9d00b18f9366c"),
    ("bench/examples/RTXPRO6000/Qwen3-30B-A3B-Instruct-2507/vllm/meta.json",
     "ae871638b83fbf81bb8b6ac83b5fca00e1e40e5babd46612c0a9368bbcc05fe8"),
    ("bench/examples/RTXPRO6000/Qwen3-30B-A3B-Instruct-2507/vllm/requests.jsonl",
     "bde98fa878f59f1b3b8b8f9b3b09f8e1ae36be6a8f56040b9a80a97d00a7dc7b"),
    ("bench/examples/RTXPRO6000/Qwen3-30B-A3B-Instruct-2507/vllm/timeseries.csv",
     "320c75df0c57efd4c12c0dae59078c40718e74573974ac3ed286ec3f2e10387f"),
    ("configs/model/Qwen/Qwen3-30B-A3B-Instruct-2507.json",
     "0736f3bafb95cc658776c92ab34f5f98d8169634a3a36b84892d71448a1f19d3"),
    ("configs/model/Qwen/Qwen3-32B.json",
     "855a9d23f97f8771c84280619ae156c8f73c9cd64a5d53a059125b4aecab12d4"),
    ("configs/model/meta-llama/Llama-3.1-70B.json",
     "37653c55ea907be0dc75070afd416fc77e20981c60b7c7e9521ba343678c5349"),
    ("configs/model/meta-llama/Llama-3.1-8B.json",
     "54acfad3cffe057640904ca8a1e83525e6551c70c7a04c641f5a9eda0bbf64bd"),
    ("configs/model/microsoft/Phi-mini-MoE-instruct.json",
     "9594149f9fed36a5f74cace363b38423b39be5983c7146930c5569807cd2c90c"),
    ("configs/model/mistralai/Mixtral-8x7B-v0.1.json",
     "9d56d04b36d0fd12ff54ae4c5bac769cc176e254e64ff71144614b6318b40793"),
    ("profiler/perf/RTX4090/meta-llama/Llama-3.1-8B/bf16/meta.yaml",
     "9c99dc484f44f965e7cdb95767706973588b1462a20332ee6430767433732deb"),
    ("profiler/perf/RTX4090/meta-llama/Llama-3.1-8B/bf16/tp1/attention.csv",
     "60f0669b5e85467b18d0ca241a826c4376c530b22b74b7b20748a1955cf61949"),
    ("profiler/perf/RTX4090/meta-llama/Llama-3.1-8B/bf16/tp1/dense.csv",
     "4f5b0623f1fa27033752cc54807a4089c39205c7132a0bb196520249d9d9140a"),
    ("profiler/perf/RTX4090/meta-llama/Llama-3.1-8B/bf16/tp1/per_sequence.csv",
     "acbc8294d6749cb3ed8eaccb9ab561e62cacf9fbc06e6901c89646d750d94647"),
    ("profiler/perf/RTX4090/meta-llama/Llama-3.1-8B/bf16/tp1/skew.csv",
     "d7ee78f69aba661ad3f69ee5ebbc589e68f35690fb15e17d8cd84e5ac6fd29a0"),
    ("profiler/perf/RTX4090/meta-llama/Llama-3.1-8B/bf16/tp1/skew_fit.csv",
     "ac3391e1b764ed61b7e4c479c74bd35b0c949066c0b08ecc5f5fba75a9dc3b87"),
    ("profiler/perf/RTXPRO6000/Qwen/Qwen3-30B-A3B-Instruct-2507/bf16/meta.yaml",
     "e755433ea63a19e9d4a4919f04da412807aa520972dc97df3dfb8908b6a70f96"),
    ("profiler/perf/RTXPRO6000/Qwen/Qwen3-30B-A3B-Instruct-2507/bf16/tp1/attention.csv",
     "eea3376edc5329da5ceb9220a138895bf94ab063116a22919228f68a2d6015cc"),
    ("profiler/perf/RTXPRO6000/Qwen/Qwen3-30B-A3B-Instruct-2507/bf16/tp1/dense.csv",
     "90c13de3060552a314ed4819dcdbf82f843e292332054765abe8a0472d91ca96"),
    ("profiler/perf/RTXPRO6000/Qwen/Qwen3-30B-A3B-Instruct-2507/bf16/tp1/moe.csv",
     "aa6e29a17412a62234a6610d7a699f72e5938f09386374b635925c5db29045f6"),
    ("profiler/perf/RTXPRO6000/Qwen/Qwen3-30B-A3B-Instruct-2507/bf16/tp1/per_sequence.csv",
     "6221393b77135bdaa41e7abe9993a528b49ceb34f2475423c5236f970c711bcc"),
    ("profiler/perf/RTXPRO6000/Qwen/Qwen3-30B-A3B-Instruct-2507/bf16/tp1/skew.csv",
     "30500a2b8ea5b7124938dafe0529d846945a75a539b0b4f01f24c4ff42635fbb"),
    ("profiler/perf/RTXPRO6000/Qwen/Qwen3-30B-A3B-Instruct-2507/bf16/tp1/skew_fit.csv",
     "75ae7ef729152df4c1ed6f9ea4ca858949c789ad68f2de43531a9852cb91e950"),
    ("profiler/perf/RTXPRO6000/Qwen/Qwen3-30B-A3B-Instruct-2507/bf16/tp2/attention.csv",
     "0b0fb7a5436cb4bffba5e89397cf747064b1566e0053db4584c70d766d243b10"),
    ("profiler/perf/RTXPRO6000/Qwen/Qwen3-30B-A3B-Instruct-2507/bf16/tp2/dense.csv",
     "710f04261d67ec53639095cec91751c9a9dc1aa6f5b335c9decaee4802407633"),
    ("profiler/perf/RTXPRO6000/Qwen/Qwen3-30B-A3B-Instruct-2507/bf16/tp2/per_sequence.csv",
     "ed094edb86909d5ceaf9c9a0c14c1711508ffb6211f92196a0536dc6c65de097"),
    ("profiler/perf/RTXPRO6000/Qwen/Qwen3-30B-A3B-Instruct-2507/bf16/tp2/skew.csv",
     "af6b46855538a46fa743620afdfefc62c62a0ccf7da60b9aea30ba67adac12b1"),
    ("profiler/perf/RTXPRO6000/Qwen/Qwen3-30B-A3B-Instruct-2507/bf16/tp2/skew_fit.csv",
     "e82392fe1dd0382cc4953a5e488cc5aa815fac2baab7e956f75623a567af3081"),
    ("profiler/perf/RTXPRO6000/Qwen/Qwen3-32B/bf16/meta.yaml",
     "b072508a080674c8991a7777e5c6ec6991d46a2e16bf75ebafd1d5013b74b1eb"),
    ("profiler/perf/RTXPRO6000/Qwen/Qwen3-32B/bf16/tp1/attention.csv",
     "7198bb9b565dab1fa56ecb82ed40e7b138917482ec25fd601e84392201fd32ee"),
    ("profiler/perf/RTXPRO6000/Qwen/Qwen3-32B/bf16/tp1/dense.csv",
     "96d32cda00c850488fa4e215807c4015b471ccf9d4217d38e8cd8a5e13d338d3"),
    ("profiler/perf/RTXPRO6000/Qwen/Qwen3-32B/bf16/tp1/per_sequence.csv",
     "bca39f32ce77d4e3afb0ebb595d38b4813c4f239619dabadc8ca932575974b0e"),
    ("profiler/perf/RTXPRO6000/Qwen/Qwen3-32B/bf16/tp1/skew.csv",
     "0307d051862e6a84d4ca3d44dcc8ff4eda172060e8289e2e3af96585ec48a2d8"),
    ("profiler/perf/RTXPRO6000/Qwen/Qwen3-32B/bf16/tp1/skew_fit.csv",
     "fbb1e79885211fc46104aca1ddd8871e22bc54cce3fa1de9ec9558b1fc8f303c"),
    ("profiler/perf/RTXPRO6000/Qwen/Qwen3-32B/bf16/tp2/attention.csv",
     "2c4d98649967da9c79535421c7e71663daeff80e9049608072d0237befd522a7"),
    ("profiler/perf/RTXPRO6000/Qwen/Qwen3-32B/bf16/tp2/dense.csv",
     "4f3cf699af9eace4f570d83a5d36879e6db6bc6486e04feb1fa8c524e32e11a7"),
    ("profiler/perf/RTXPRO6000/Qwen/Qwen3-32B/bf16/tp2/per_sequence.csv",
     "99c417c98e382c911d280a07cbb5902f39af886bd264584faa48f37cfb743974"),
    ("profiler/perf/RTXPRO6000/Qwen/Qwen3-32B/bf16/tp2/skew.csv",
     "3e48068965831aa6dd3afeb48546081eb04f86e7a3c3d4d754812d02677c5817"),
    ("profiler/perf/RTXPRO6000/Qwen/Qwen3-32B/bf16/tp2/skew_fit.csv",
     "b9dff1dec77c7125f11bca319f1bdbdc1f5b8422e9cb2811f528628fd69fb47b"),
    ("profiler/perf/RTXPRO6000/meta-llama/Llama-3.1-8B/bf16/meta.yaml",
     "01c964ad3e8ce9604773e7c0b3ae815c22545385d789842a920d8f33b1ce8b98"),
    ("profiler/perf/RTXPRO6000/meta-llama/Llama-3.1-8B/bf16/tp1/attention.csv",
     "dd802390245b2c215a491b78c390482fbc6e49afc760182d7ce15fddff369175"),
    ("profiler/perf/RTXPRO6000/meta-llama/Llama-3.1-8B/bf16/tp1/dense.csv",
     "6f23be95325a16544319b78c477d71bec8996fdc826ae55140c36f36e17973c4"),
    ("profiler/perf/RTXPRO6000/meta-llama/Llama-3.1-8B/bf16/tp1/per_sequence.csv",
     "af9abb35ef5eb7c98e1856fa5fe5090008d8b98f1b6278b6d081577451d9c618"),
    ("profiler/perf/RTXPRO6000/meta-llama/Llama-3.1-8B/bf16/tp1/skew.csv",
     "7cf6ec2e063655b6ab4079c928849d0ec9a9559bab0b643c98584196cca471a2"),
    ("profiler/perf/RTXPRO6000/meta-llama/Llama-3.1-8B/bf16/tp1/skew_fit.csv",
     "89e8f8ffba2f8968485cd11d0ac9fd50b5b2bf2593bd73e326b81a2e5958c8c3"),
    ("profiler/perf/RTXPRO6000/meta-llama/Llama-3.1-8B/bf16/tp2/attention.csv",
     "d6231d664ba021c5b21f157adc815cc8afe7f52b3eb6e4f855a54386b448627d"),
    ("profiler/perf/RTXPRO6000/meta-llama/Llama-3.1-8B/bf16/tp2/dense.csv",
     "5f1c12baadd49a4f82cd3a9648724d2fc4fea954eb8d9c2e650afe03e3c3d53b"),
    ("profiler/perf/RTXPRO6000/meta-llama/Llama-3.1-8B/bf16/tp2/per_sequence.csv",
     "d1581678297ef0fe2d649608ed33805fb76a4d96c7766972e8b3f3bbee02a2c1"),
    ("profiler/perf/RTXPRO6000/meta-llama/Llama-3.1-8B/bf16/tp2/skew.csv",
     "29c90e6c474c1e037906b9e1ecc2e0ce3e566864115707e773b637ac9ac6ebba"),
    ("profiler/perf/RTXPRO6000/meta-llama/Llama-3.1-8B/bf16/tp2/skew_fit.csv",
     "7cd42482760299445e3e47024d3c71c8b04e6a9a51a36506dc60002f288685c2"),
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


def _lss_description(upath: str) -> str:
    """One line describing an LLMServingSim file from its place in the upstream tree."""
    parts = upath.split("/")
    if parts[0] == "profiler":
        hw, model, tail = parts[2], "/".join(parts[3:5]), "/".join(parts[6:])
        return f"vLLM 0.19 layer-profile bundle, {model} on {hw} (bf16): {tail}"
    if parts[0] == "configs":
        return f"HuggingFace architecture config of {'/'.join(parts[2:])[:-5]}"
    hw, model, tail = parts[2], parts[3], "/".join(parts[4:])
    return f"real vLLM 0.19 serving run, {model} on {hw} (300 ShareGPT requests): {tail}"


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
    repo, commit = LLMSERVINGSIM
    for upath, sha in _LLMSERVINGSIM_FILES:
        name = f"llmservingsim/{upath}"
        reg[name] = Dataset(name, name, _raw(repo, commit, upath), sha, "MIT",
                            "cho2024llmservingsim", _lss_description(upath))
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
