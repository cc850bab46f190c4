"""DistServe fitted latency coefficients."""
from __future__ import annotations

import json
import logging

import numpy as np
import pandas as pd

from perfmodel.data.datasets.fetch import fetch
from perfmodel.errors import InputError

log = logging.getLogger(__name__)


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
