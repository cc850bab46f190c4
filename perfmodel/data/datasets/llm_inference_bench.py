"""LLM-Inference-Bench plots-data loaders."""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from perfmodel.data.datasets.fetch import _read_csv, _require_columns
from perfmodel.errors import InputError

log = logging.getLogger(__name__)


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
