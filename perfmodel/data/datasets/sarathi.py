"""Sarathi-Serve OSDI artefact loaders and step converter."""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from perfmodel.data.datasets.fetch import _read_csv, _require_columns
from perfmodel.errors import InputError

log = logging.getLogger(__name__)


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
