"""SplitwiseSim ``perf_model.csv`` loader and step converter."""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from perfmodel.data.datasets.fetch import _ones, _read_csv, _repeat, _require_columns
from perfmodel.errors import InputError

log = logging.getLogger(__name__)


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
