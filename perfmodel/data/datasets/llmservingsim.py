"""LLMServingSim 2.x public data: layer-profile bundles, model configs, serving runs.

Problem
-------
LLMServingSim (MIT, :data:`~perfmodel.data.datasets.registry.CITATIONS`
``cho2024llmservingsim``) publishes, at the pinned commit
(:data:`~perfmodel.data.datasets.registry.LLMSERVINGSIM`), real vLLM 0.19
measurements on two GPUs:

* *profile bundles* ``profiler/perf/<hw>/<org>/<model>/bf16/``: ``meta.yaml``
  and one ``tp<N>/`` folder per tensor-parallel degree with ``attention.csv``
  (a grid over prefill chunk, its KV context, number of decodes and their KV
  context), ``dense.csv`` (per-layer kernels by token count),
  ``per_sequence.csv`` (``lm_head`` / ``sampler`` by number of sequences),
  ``moe.csv`` (MoE models only, profiled at TP 1) and ``skew_fit.csv``
  (fitted decode-heterogeneity corrections).  All times are microseconds of a
  one-layer dummy model run with ``enforce_eager``; TP > 1 is emulated on one
  GPU by dividing the per-rank shapes (``meta.yaml`` ``hf_overrides``), so no
  timing contains a TP all-reduce.
* *model configs* ``configs/model/<org>/<model>.json``: HuggingFace
  ``config.json`` files;
* *serving runs* ``bench/examples/<hw>/<model>/``: 300 ShareGPT requests
  replayed on the real engine (``vllm/requests.jsonl``, ``vllm/meta.json``,
  ``vllm/timeseries.csv``, ``config.json``) with the peer simulator's
  prediction (``outputs/sim.csv``, ``validation/summary.txt``).

Every file is a registry entry (``llmservingsim/<upstream path>``) pinned by
sha256 and resolved by :func:`~perfmodel.data.datasets.fetch.fetch`.  The
loaders also accept a user's own bundle folder / config file (not verified:
there is no digest to verify against).

Verified against: the row counts, grid axes and column names of the
published files (``tests/data/test_datasets_llmservingsim.py``).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from perfmodel._io import read_parsed
from perfmodel.data.datasets.fetch import fetch
from perfmodel.data.datasets.registry import REGISTRY
from perfmodel.errors import InputError

__all__ = [
    "RUN_FILES",
    "SUPPORTED_ARCHITECTURES",
    "ModelConfig",
    "ProfileBundle",
    "list_profile_bundles",
    "list_serving_runs",
    "load_model_config",
    "load_peer_prediction",
    "load_peer_summary",
    "load_profile_bundle",
    "model_config_from_dict",
    "serving_run_dir",
]

_PREFIX = "llmservingsim/"
_PERF = _PREFIX + "profiler/perf/"
_RUNS = _PREFIX + "bench/examples/"
_CONFIGS = _PREFIX + "configs/model/"

#: the files of a serving run folder, relative to it
RUN_FILES: tuple[str, ...] = ("vllm/requests.jsonl", "vllm/meta.json", "vllm/timeseries.csv",
                              "config.json", "outputs/sim.csv", "validation/summary.txt")

#: HuggingFace ``model_type`` values whose decoder block the step composer knows
#: (attention + dense MLP, or attention + mixture of experts)
SUPPORTED_ARCHITECTURES: tuple[str, ...] = ("llama", "mistral", "qwen2", "qwen3", "qwen3_moe",
                                            "mixtral", "phimoe")

_BUNDLE_COLUMNS = {
    "attention.csv": ["prefill_chunk", "kv_prefill", "n_decode", "kv_decode", "time_us"],
    "dense.csv": ["layer", "tokens", "time_us"],
    "per_sequence.csv": ["layer", "sequences", "time_us"],
    "moe.csv": ["tokens", "activated_experts", "time_us"],
    "skew_fit.csv": ["pc", "n_label", "skew_rate_label", "kv_big_label", "kp_label", "alpha"],
}


@dataclass(frozen=True)
class ProfileBundle:
    """One tensor-parallel degree of a layer-profile bundle, as tidy DataFrames.

    Attributes
    ----------
    hardware, model, variant : the bundle's labels (``meta.yaml``)
    tp : tensor-parallel degree of the ``tp<N>/`` folder loaded
    attention : ``prefill_chunk, kv_prefill, n_decode, kv_decode, time_us``
    dense : ``layer, tokens, time_us`` (one decoder layer's kernels, plus
        ``embedding`` / ``final_layernorm`` run once per step)
    per_sequence : ``layer, sequences, time_us`` (``lm_head``, ``sampler``)
    moe : ``tokens, activated_experts, time_us`` or None (dense models)
    skew : the fitted alpha table ``skew_fit.csv`` or None
    alpha_default : the bundle's fallback alpha for this TP (None without skew fit)
    meta : ``meta.yaml`` as a dict
    source : the folder read
    """

    hardware: str
    model: str
    variant: str
    tp: int
    attention: pd.DataFrame = field(repr=False)
    dense: pd.DataFrame = field(repr=False)
    per_sequence: pd.DataFrame = field(repr=False)
    moe: pd.DataFrame | None = field(repr=False)
    skew: pd.DataFrame | None = field(repr=False)
    alpha_default: float | None
    meta: dict = field(repr=False)
    source: str = ""


@dataclass(frozen=True)
class ModelConfig:
    """The architecture numbers the step composer needs, from a HuggingFace config.

    ``head_dim`` falls back to ``hidden // heads`` only when the config has no
    ``head_dim`` (Qwen3 states it explicitly and the fallback would be wrong);
    ``experts`` reads ``num_experts`` or ``num_local_experts`` (0: dense);
    ``tie_word_embeddings`` says whether the LM head shares the embedding's
    weights (KV-cache sizing, :mod:`perfmodel.decisions.simulate.kvcache`).
    """

    name: str
    model_type: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    experts: int = 0
    experts_per_token: int = 0
    moe_intermediate: int = 0
    max_position: int = 0
    dtype: str = "bfloat16"
    tie_word_embeddings: bool = False

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes per token over all layers at 2 bytes per element (bf16/fp16)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 2


# ---------------------------------------------------------------------------
# registry lookups
# ---------------------------------------------------------------------------


def list_profile_bundles() -> pd.DataFrame:
    """The registered bundles: one row per ``hardware, model, variant, tp``."""
    rows = set()
    for name in REGISTRY:
        if name.startswith(_PERF) and "/tp" in name:
            hw, org, model, variant, tpdir = name[len(_PERF):].split("/")[:5]
            rows.add((hw, f"{org}/{model}", variant, int(tpdir[2:])))
    return pd.DataFrame(sorted(rows), columns=["hardware", "model", "variant", "tp"])


def list_serving_runs() -> pd.DataFrame:
    """The registered serving runs: ``hardware, model``."""
    rows = {tuple(n[len(_RUNS):].split("/")[:2]) for n in REGISTRY if n.startswith(_RUNS)}
    return pd.DataFrame(sorted(rows), columns=["hardware", "model"])


def _match_model(model: str, known: list[str], what: str) -> str:
    """``model`` as one of ``known`` ('org/name'; the bare name is accepted when unique)."""
    if model in known:
        return model
    hits = sorted({k for k in known if k.split("/")[-1] == model})
    if len(hits) == 1:
        return hits[0]
    raise InputError(f"model {model!r} has no registered {what}; known: {sorted(set(known))}")


def _check_str(name: str, value) -> str:
    if not isinstance(value, str | Path) or not str(value):
        raise InputError(f"{name} must be a non-empty string or path, got {value!r}")
    return str(value)


# ---------------------------------------------------------------------------
# profile bundles
# ---------------------------------------------------------------------------


def _read_table(path: Path, fname: str) -> pd.DataFrame:
    try:
        df = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as e:
        raise InputError(f"bundle file {path} cannot be read as CSV: {e}") from None
    missing = [c for c in _BUNDLE_COLUMNS[fname] if c not in df.columns]
    if missing:
        raise InputError(f"bundle file {path}: missing columns {missing} (has {list(df.columns)})")
    if fname != "skew_fit.csv":
        t = pd.to_numeric(df["time_us"], errors="coerce")
        bad = ~(t > 0) | ~t.map(math.isfinite)
        if bad.any():
            raise InputError(f"bundle file {path}: time_us must be finite and > 0; "
                             f"{int(bad.sum())} rows are not (first row {int(bad.idxmax())})")
    return df


def _read_meta(folder: Path) -> dict:
    p = folder / "meta.yaml"
    meta = read_parsed(p, yaml.safe_load, yaml.YAMLError,
                       missing=f"profile bundle {folder}: missing file meta.yaml",
                       invalid=f"profile bundle {p}: not valid YAML")
    if not isinstance(meta, dict):
        raise InputError(f"profile bundle {p}: expected a mapping at the top level")
    return meta


def _bundle_files(folder: Path, tp: int, files: dict[str, Path]) -> ProfileBundle:
    """Build the bundle from ``files`` (file name -> path) of ``folder``'s ``tp<tp>/``."""
    meta = _read_meta(folder) if "meta.yaml" not in files else _read_meta(files["meta.yaml"].parent)
    tables = {}
    for fname in ("attention.csv", "dense.csv", "per_sequence.csv"):
        if fname not in files or not files[fname].is_file():
            raise InputError(f"profile bundle {folder}: missing file tp{tp}/{fname}")
        tables[fname] = _read_table(files[fname], fname)
    moe = _read_table(files["moe.csv"], "moe.csv") if "moe.csv" in files else None
    skew = _read_table(files["skew_fit.csv"], "skew_fit.csv") if "skew_fit.csv" in files else None
    per_tp = ((meta.get("skew_fit") or {}).get("per_tp") or {}).get(tp) or {}
    alpha = per_tp.get("alpha_default")
    if skew is None or not (meta.get("skew_fit") or {}).get("enabled", False):
        skew, alpha = None, None
    return ProfileBundle(
        hardware=str(meta.get("hardware", folder.parts[-4] if len(folder.parts) > 3 else "")),
        model=str(meta.get("model", "")), variant=str(meta.get("variant", folder.name)), tp=tp,
        attention=tables["attention.csv"], dense=tables["dense.csv"],
        per_sequence=tables["per_sequence.csv"], moe=moe, skew=skew,
        alpha_default=None if alpha is None else float(alpha), meta=meta, source=str(folder))


def _tp_of(tp) -> int:
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise InputError(f"tp must be an integer >= 1, got {tp!r}")
    return tp


def _local_bundle(folder: Path, tp: int) -> ProfileBundle:
    if not folder.is_dir():
        raise InputError(f"profile bundle {folder}: no such folder")
    have = sorted(int(p.name[2:]) for p in folder.glob("tp*") if p.name[2:].isdigit())
    if tp not in have:
        raise InputError(f"profile bundle {folder}: TP {tp} not in bundle (has TP {have})")
    tdir = folder / f"tp{tp}"
    files = {f: tdir / f for f in _BUNDLE_COLUMNS if (tdir / f).is_file()}
    for f in ("attention.csv", "dense.csv", "per_sequence.csv"):
        files.setdefault(f, tdir / f)
    if "moe.csv" not in files and (folder / "tp1" / "moe.csv").is_file():
        files["moe.csv"] = folder / "tp1" / "moe.csv"  # MoE is profiled at TP 1 only
    return _bundle_files(folder, tp, files)


def load_profile_bundle(hardware, model: str | None = None, tp: int = 1,
                        variant: str = "bf16") -> ProfileBundle:
    """Load one TP degree of a layer-profile bundle.

    Parameters
    ----------
    hardware : a registered hardware label (``'RTXPRO6000'``, ``'RTX4090'``), or
        the path of a bundle folder (the one holding ``meta.yaml`` and
        ``tp<N>/``); then ``model`` must be None
    model : registered model, ``'org/name'`` or the bare name when unique
    tp : tensor-parallel degree; must have a ``tp<N>/`` folder.  A MoE bundle's
        ``moe.csv`` exists under ``tp1/`` only (upstream profiles experts at
        TP 1); it is used for every TP.
    variant : dtype variant folder (``'bf16'``)

    Returns
    -------
    ProfileBundle

    Raises
    ------
    InputError
        Unknown hardware/model, TP not in the bundle, a missing file or column,
        a non-positive time.
    """
    tp = _tp_of(tp)
    hw = _check_str("hardware", hardware)
    if model is None:
        return _local_bundle(Path(hw).expanduser(), tp)
    bundles = list_profile_bundles()
    sel = bundles[bundles.hardware == hw]
    if sel.empty:
        raise InputError(f"hardware {hw!r} has no registered profile bundle (and is not a "
                         f"folder given without model); known: {sorted(set(bundles.hardware))}")
    full = _match_model(_check_str("model", model), list(sel.model), f"profile bundle on {hw}")
    sel = sel[(sel.model == full) & (sel.variant == variant)]
    if sel.empty:
        raise InputError(f"variant {variant!r} of {full} on {hw} is not registered")
    have = sorted(sel.tp)
    if tp not in have:
        raise InputError(f"TP {tp} not in bundle {hw}/{full}/{variant} (has TP {have})")
    base = f"{_PERF}{hw}/{full}/{variant}"
    files = {"meta.yaml": fetch(f"{base}/meta.yaml")}
    for fname in _BUNDLE_COLUMNS:
        for t in (tp, 1) if fname == "moe.csv" else (tp,):
            if f"{base}/tp{t}/{fname}" in REGISTRY:
                files[fname] = fetch(f"{base}/tp{t}/{fname}")
                break
    return _bundle_files(files["meta.yaml"].parent, tp, files)


# ---------------------------------------------------------------------------
# model configs
# ---------------------------------------------------------------------------


def _int_field(cfg: dict, key: str, where: str, *, default=None) -> int:
    v = cfg.get(key, default)
    if v is None:
        raise InputError(f"model config {where}: missing field {key!r}")
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise InputError(f"model config {where}: field {key!r} must be an integer >= 0, got {v!r}")
    return v


def _parse_config(cfg: dict, name: str, where: str) -> ModelConfig:
    mtype = cfg.get("model_type")
    if mtype not in SUPPORTED_ARCHITECTURES:
        raise InputError(f"model config {where}: unknown architecture model_type={mtype!r} "
                         f"(the step composer knows {list(SUPPORTED_ARCHITECTURES)})")
    g = lambda k, **kw: _int_field(cfg, k, where, **kw)
    hidden, heads = g("hidden_size"), g("num_attention_heads")
    if heads == 0 or g("num_hidden_layers") == 0:
        raise InputError(f"model config {where}: num_attention_heads and num_hidden_layers "
                         "must be >= 1")
    experts = g("num_experts", default=cfg.get("num_local_experts", 0))
    return ModelConfig(
        name=name, model_type=mtype, layers=g("num_hidden_layers"), hidden=hidden, heads=heads,
        kv_heads=g("num_key_value_heads", default=heads),
        head_dim=g("head_dim", default=hidden // heads), intermediate=g("intermediate_size"),
        vocab=g("vocab_size"), experts=experts,
        experts_per_token=g("num_experts_per_tok", default=0) if experts else 0,
        moe_intermediate=g("moe_intermediate_size", default=0) if experts else 0,
        max_position=g("max_position_embeddings", default=0),
        dtype=str(cfg.get("torch_dtype", "bfloat16")),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)))


def model_config_from_dict(cfg, name: str = "model") -> ModelConfig:
    """A :class:`ModelConfig` from an already-parsed HuggingFace ``config.json`` dict.

    Raises
    ------
    InputError
        Not a mapping, a missing field, or an unknown architecture (as
        :func:`load_model_config`).
    """
    if isinstance(cfg, ModelConfig):
        return cfg
    if not isinstance(cfg, dict):
        raise InputError(f"model config must be a dict (a parsed config.json) or a ModelConfig, "
                         f"got {type(cfg).__name__}")
    return _parse_config(cfg, str(name), str(name))


def load_model_config(model) -> ModelConfig:
    """Parse a HuggingFace ``config.json`` into a :class:`ModelConfig`.

    Parameters
    ----------
    model : a registered model (``'meta-llama/Llama-3.1-8B'`` or the bare
        ``'Llama-3.1-8B'``), or the path of a JSON config file

    Raises
    ------
    InputError
        Unknown model, missing/unreadable file, a missing field, or an
        architecture (``model_type``) outside :data:`SUPPORTED_ARCHITECTURES`.
    """
    s = _check_str("model", model)
    p = Path(s).expanduser()
    if s.endswith(".json") or p.is_file():
        if not p.is_file():
            raise InputError(f"model config {p}: no such file")
        name, where = p.stem, str(p)
    else:
        known = [n[len(_CONFIGS):-5] for n in REGISTRY if n.startswith(_CONFIGS)
                 and n.endswith(".json")]
        name = _match_model(s, known, "model config")
        p, where = fetch(f"{_CONFIGS}{name}.json"), name
    try:
        cfg = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"model config {where}: cannot be read as JSON ({e})") from None
    if not isinstance(cfg, dict):
        raise InputError(f"model config {where}: expected a JSON object")
    return _parse_config(cfg, name, where)


# ---------------------------------------------------------------------------
# serving runs
# ---------------------------------------------------------------------------


def serving_run_dir(hardware: str, model: str) -> Path:
    """Folder of a registered serving run, every file of it checksum-verified.

    Parameters
    ----------
    hardware : ``'RTX4090'`` or ``'RTXPRO6000'`` (see :func:`list_serving_runs`)
    model : the run's model folder name (``'Llama-3.1-8B'``,
        ``'Qwen3-30B-A3B-Instruct-2507'``; an ``org/`` prefix is ignored)

    Returns
    -------
    pathlib.Path of the folder holding :data:`RUN_FILES` (in the mirror, or in
    the download cache laid out the same way).
    """
    hw = _check_str("hardware", hardware)
    name = _check_str("model", model).split("/")[-1]
    runs = list_serving_runs()
    if not ((runs.hardware == hw) & (runs.model == name)).any():
        raise InputError(f"no registered serving run {hw}/{name}; known: "
                         f"{[f'{h}/{m}' for h, m in runs.itertuples(index=False)]}")
    paths = [fetch(f"{_RUNS}{hw}/{name}/{f}") for f in RUN_FILES]
    return paths[RUN_FILES.index("config.json")].parent


def load_peer_prediction(run_dir) -> pd.DataFrame:
    """LLMServingSim's own per-request prediction of a run (``outputs/sim.csv``), in ms.

    Problem: comparing against the peer simulator needs its statistics
    computed with the run files' definitions, not copied from its summary.
    ``sim.csv`` gives nanosecond times per request (``arrival``, ``TTFT``,
    ``latency``, ``end_time``); this returns ``request_id, instance,
    prompt_tokens, output_tokens, ttft_ms, tpot_ms, latency_ms`` with
    TTFT = first token - arrival, latency = last token - arrival and
    TPOT = (latency - TTFT) / (output_tokens - 1) (NaN for one-token outputs).

    Verified against: the peer's ``validation/summary.txt`` (mean and
    percentiles agree to its printed 0.1 ms; ``tests/data/test_datasets_llmservingsim.py``).
    """
    p = Path(_check_str("run_dir", run_dir)) / "outputs" / "sim.csv"
    if not p.is_file():
        raise InputError(f"run folder {Path(run_dir).name!r}: missing outputs/sim.csv")
    try:
        d = pd.read_csv(p)
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as e:
        raise InputError(f"{p}: cannot be read as CSV ({e})") from None
    need = ["instance id", "request id", "input", "output", "TTFT", "latency"]
    missing = [c for c in need if c not in d.columns]
    if missing:
        raise InputError(f"{p}: missing columns {missing}")
    ttft, lat = d["TTFT"].astype(float) / 1e6, d["latency"].astype(float) / 1e6
    out = d["output"].astype(int)
    tpot = ((lat - ttft) / (out - 1)).where(out > 1)
    return pd.DataFrame({"request_id": d["request id"], "instance": d["instance id"],
                         "prompt_tokens": d["input"].astype(int), "output_tokens": out,
                         "ttft_ms": ttft, "tpot_ms": tpot, "latency_ms": lat})


def load_peer_summary(run_dir) -> pd.DataFrame:
    """The peer's printed comparison (``validation/summary.txt``) as a tidy frame.

    Returns ``metric`` (``ttft_ms``/``tpot_ms``/``latency_ms``), ``stat``
    (``mean``, ``p50``, ``p90``, ``p95``, ``p99``), ``vllm_ms``, ``sim_ms``,
    ``diff_pct`` as printed (0.1 ms / 0.1 % resolution).
    """
    p = Path(_check_str("run_dir", run_dir)) / "validation" / "summary.txt"
    if not p.is_file():
        raise InputError(f"run folder {Path(run_dir).name!r}: missing validation/summary.txt")
    metrics = {"TTFT": "ttft_ms", "TPOT": "tpot_ms", "Latency": "latency_ms"}
    stats = {"Mean": "mean", "Median": "p50", "P90": "p90", "P95": "p95", "P99": "p99"}
    rows = []
    for line in p.read_text().splitlines():
        f = line.split()
        if len(f) == 5 and f[0] in metrics and f[1] in stats:
            try:
                rows.append((metrics[f[0]], stats[f[1]], float(f[2]), float(f[3]),
                             float(f[4].rstrip("%"))))
            except ValueError:
                raise InputError(f"{p}: unreadable line {line!r}") from None
    if not rows:
        raise InputError(f"{p}: no 'TTFT Mean ...' lines")
    return pd.DataFrame(rows, columns=["metric", "stat", "vllm_ms", "sim_ms", "diff_pct"])
