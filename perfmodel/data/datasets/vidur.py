"""Vidur per-operator profile loader and step composer."""
from __future__ import annotations

import logging
import math
import os
from typing import NamedTuple

import numpy as np
import pandas as pd

from perfmodel.data.datasets.fetch import _read_csv, _require_columns
from perfmodel.data.datasets.registry import ENV_MIRROR
from perfmodel.errors import InputError

log = logging.getLogger(__name__)


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
