"""The per-step noise floor of a replicated trace (:func:`noise_floor`; no torch needed).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from perfmodel.errors import InputError


# --------------------------------------------------------------------------- noise floor
def noise_floor(df, *, window: int = 201, drift_by: str | None = "phase",
                duration_bins: Sequence[float] = (0.0, 5.0, 10.0, 30.0, math.inf)) -> dict:
    """Per-step noise floor: median coefficient of variation across replicates of a config.

    ``raw``: for each config seen in every replicate, CV = sd (ddof=1) / mean
    of its durations; the median (and 90th percentile) over configs, overall,
    per phase and per bin of the config's mean duration (``duration_bins``,
    ms). ``drift_removed``: the same after dividing each duration by
    exp(rolling median, over ``window`` steps in time order, of
    log(duration / config geometric mean)) -- the slow run-level drift of a
    shared host, reported separately (data/README.md, Noise floor and
    drift). With ``drift_by='phase'`` (default, when the column exists) the
    drift is estimated within each phase, since a
    host slowdown moves launch-bound decode steps more than GPU-bound prefill
    steps; ``None`` pools all steps. Also: the median ratio of each
    replicate to the per-config geometric mean, and the drift's range.

    Verified against synthetic replicates with a known 5% sd
    (tests/data/test_collect_torch.py: median CV of 3 draws ~ 0.05 * 0.83).
    """
    need = {"config", "replicate", "duration_ms", "step"}
    if not hasattr(df, "columns") or not need <= set(df.columns):
        raise InputError(f"noise_floor: df must have columns {sorted(need)}")
    if not isinstance(window, int) or window < 3:
        raise InputError(f"noise_floor: window={window!r} must be an integer >= 3")
    if drift_by is not None and drift_by not in df.columns:
        drift_by = None
    edges = np.asarray(duration_bins, dtype=float)
    if edges.ndim != 1 or edges.size < 2 or np.any(np.diff(edges) <= 0):
        raise InputError(f"noise_floor: duration_bins={duration_bins!r} must increase")
    d = df.sort_values("step").copy()
    nrep = d["replicate"].nunique()
    counts = d.groupby("config")["replicate"].nunique()
    full = counts.index[counts == nrep]
    d = d[d["config"].isin(full)].copy()
    if d.empty or nrep < 2:
        return {"n_configs": 0, "replicates": int(nrep)}
    logd = np.log(d["duration_ms"])
    lr = logd - logd.groupby(d["config"]).transform("mean")

    def rolling(x):
        return x.rolling(window, center=True, min_periods=max(3, window // 4)).median()

    drift = lr.groupby(d[drift_by]).transform(rolling) if drift_by else rolling(lr)
    d["corr"] = d["duration_ms"] * np.exp(-drift.fillna(0.0))

    def cv(col):
        g = d.groupby("config")[col]
        return g.std(ddof=1) / g.mean()

    groups = {}
    if "phase" in d:
        groups["by_phase"] = d.groupby("config")["phase"].first()
    mean_ms = d.groupby("config")["duration_ms"].mean()
    groups["by_duration_ms"] = pd.cut(mean_ms, edges, right=False).astype(str)
    res = {"n_configs": len(full), "replicates": int(nrep), "window": window,
           "drift_by": drift_by}
    for name, col in (("raw", "duration_ms"), ("drift_removed", "corr")):
        v = cv(col)
        entry = {"median_cv": float(v.median()), "p90_cv": float(v.quantile(0.9))}
        for gname, key in groups.items():
            entry[f"median_cv_{gname}"] = {
                str(k): {"median_cv": float(x.median()), "n_configs": len(x)}
                for k, x in v.groupby(key)}
        res[name] = entry
    res["replicate_median_ratio"] = {
        int(r): float(np.exp(g.median())) for r, g in lr.groupby(d["replicate"])}
    if "phase" in d:
        res["replicate_median_ratio_by_phase"] = {
            str(ph): {int(r): float(np.exp(x.median())) for r, x in g.groupby(d["replicate"])}
            for ph, g in lr.groupby(d["phase"])}
    res["drift_range"] = [float(np.exp(drift.min())), float(np.exp(drift.max()))]
    return res
