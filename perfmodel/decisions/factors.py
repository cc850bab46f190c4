"""Secondary factors of the step time at a fixed token count (docs/model.md, Secondary factors).

Problem
-------
An analysis of 3,058 steps that all computed ``S = 4096`` tokens (mean
104.28 ms, sd 3.50 ms) asked what explains the remaining variation:
the spread of chunk sizes, the number of requests, the context already
computed, the decode/prefill mix.  It reported correlations, a random forest
(R^2 = 0.43) with feature importances, and a table of mean step time by the
number of running requests.  :func:`secondary_factors` produces the same
analysis on any trace with per-request ``chunk_sizes`` and ``context_lens``,
and adds how much of the variance a fitted model (e.g. the context-aware
``seed_ctx``) already explains.

Per-step features (from :func:`perfmodel.data.trace.step_features`)
--------------------------------------------------------------
``num_requests`` (B), ``chunk_sd`` (population sd of chunk sizes),
``max_chunk``, ``ctx_max``, ``ctx_sum`` (total prior context),
``attn`` (query-key pairs), ``num_decode`` / ``num_prefill`` (requests with
chunk 1 / > 1, or the trace's own columns), and -- when the collector
recorded them -- machine state (``involuntary_switches``, ``loadavg``), which
explains contention rather than workload (``cpu_ms`` is excluded: it is
measured over the step itself, so it tracks the duration by construction).  Features
constant on the slice are dropped (and listed).

Statistics
----------
Pearson ``r`` and Spearman ``rho`` with p-values (``scipy.stats``);
a random forest (``sklearn.ensemble.RandomForestRegressor``, seeded) with
out-of-bag R^2 and ``cv``-fold cross-validated R^2 (shuffled ``KFold``,
seeded), and permutation importance (``sklearn.inspection``) on a held-out
quarter (the decrease of R^2 when a feature is shuffled).  Verified on
synthetic slices with a known driver in ``tests/decisions/test_factors.py``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from perfmodel._checks import check_int_range
from perfmodel.errors import InputError

__all__ = [
    "FactorResult",
    "secondary_factors",
    "step_factor_table",
]

#: machine-state columns analysed when present.  ``cpu_ms`` (process CPU time *in* the step)
#: is left out: it measures the step itself (on a GPU host it tracks the wall time), so it
#: would "explain" the duration by leakage rather than cause.
MACHINE_COLUMNS = ("involuntary_switches", "loadavg")


def step_factor_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per-step candidate factors (see module docstring) for every row of a trace."""
    from perfmodel.data.trace import step_features

    if not isinstance(df, pd.DataFrame):
        raise InputError(f"df must be a pandas DataFrame, got {type(df).__name__}")
    f = step_features(df, counts_keys=True)
    out = pd.DataFrame({"num_requests": f["B"]}, index=df.index)
    if "chunk_sd" in f:
        out["chunk_sd"] = f["chunk_sd"]
        out["max_chunk"] = f["max_chunk"].astype(np.int64)
        out["ctx_max"] = f["ctx_max"]
        out["ctx_sum"] = f["ctx_sum"]
        out["attn"] = f["attn"]
        nd = f["n_decode"].astype(np.int64)
        out["num_decode"] = nd
        out["num_prefill"] = f["B"] - nd
    for c in ("num_decode", "num_prefill"):
        if c in df.columns:
            out[c] = pd.to_numeric(df[c], errors="coerce").to_numpy(float)
    for c in MACHINE_COLUMNS:
        if c in df.columns:
            out[c] = pd.to_numeric(df[c], errors="coerce").to_numpy(float)
    return out


@dataclass
class FactorResult:
    """Output of :func:`secondary_factors` (tables are DataFrames; see ``to_dict``)."""

    tokens: int
    tol: int
    n_steps: int
    mean_ms: float
    sd_ms: float
    cv: float
    features: pd.DataFrame
    dropped_features: list[str]
    correlations: pd.DataFrame
    rf_oob_r2: float | None
    rf_cv_r2: float | None
    importance: pd.DataFrame | None
    by_requests: pd.DataFrame
    model_r2: float | None = None
    model_r2_centered: float | None = None
    model_bias_ms: float | None = None
    model_name: str | None = None
    residual_rf_cv_r2: float | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        def f(x):
            return None if x is None or not np.isfinite(x) else float(x)

        def recs(df):
            if df is None:
                return None
            d = df.reset_index()
            return [{k: (f(v) if isinstance(v, (float, np.floating)) else
                         int(v) if isinstance(v, (int, np.integer)) else v)
                     for k, v in r.items()} for r in d.to_dict("records")]

        return {
            "tokens": self.tokens, "tol": self.tol, "n_steps": self.n_steps,
            "mean_ms": f(self.mean_ms), "sd_ms": f(self.sd_ms), "cv": f(self.cv),
            "dropped_features": list(self.dropped_features),
            "correlations": recs(self.correlations),
            "rf_oob_r2": f(self.rf_oob_r2), "rf_cv_r2": f(self.rf_cv_r2),
            "importance": recs(self.importance), "by_requests": recs(self.by_requests),
            "model": self.model_name, "model_r2": f(self.model_r2),
            "model_r2_centered": f(self.model_r2_centered), "model_bias_ms": f(self.model_bias_ms),
            "residual_rf_cv_r2": f(self.residual_rf_cv_r2), "notes": list(self.notes),
        }

    def report(self) -> str:
        """A text report: correlations, forest R^2 and importances, time by number of requests."""
        L = [f"steps with S = {self.tokens}" + (f" +/- {self.tol}" if self.tol else "") +
             f": {self.n_steps}",
             f"step time: mean {self.mean_ms:.4g} ms, sd {self.sd_ms:.4g} ms, CV {self.cv:.4f}",
             "", "correlation with step time (Pearson r, Spearman rho):"]
        for name, r in self.correlations.iterrows():
            L.append(f"  {name:<22} r = {r['pearson_r']:+.4f} (p {r['pearson_p']:.2g})   "
                     f"rho = {r['spearman_rho']:+.4f} (p {r['spearman_p']:.2g})")
        if self.rf_cv_r2 is not None:
            L += ["", (f"random forest: R^2 out-of-bag {self.rf_oob_r2:.4f}, "
                       f"cross-validated {self.rf_cv_r2:.4f}"),
                  "permutation importance (drop in held-out R^2):"]
            for name, r in self.importance.iterrows():
                L.append(f"  {name:<22} {r['importance_mean']:+.4f} +/- {r['importance_sd']:.4f}")
        L += ["", "step time by number of requests:",
              "  requests   mean (ms)   sd (ms)   steps"]
        for b, r in self.by_requests.iterrows():
            sd = "" if not np.isfinite(r["sd_ms"]) else f"{r['sd_ms']:.2f}"
            L.append(f"  {int(b):>8}   {r['mean_ms']:>9.2f}   {sd:>7}   {int(r['n']):>5}")
        if self.model_name is not None:
            L += ["", (f"model {self.model_name} on this slice: R^2 {self.model_r2:.4f} "
                       f"(centred, bias removed: {self.model_r2_centered:.4f}; "
                       f"bias {self.model_bias_ms:+.3g} ms)")]
            if self.residual_rf_cv_r2 is not None:
                L.append(f"random forest on the model's residuals: cross-validated R^2 "
                         f"{self.residual_rf_cv_r2:.4f} (what the factors add beyond the model)")
        if self.dropped_features:
            L.append(f"\nconstant on this slice (not analysed): {', '.join(self.dropped_features)}")
        for n in self.notes:
            L.append(f"note: {n}")
        return "\n".join(L)

    def __str__(self) -> str:
        return self.report()


def _rf(X: np.ndarray, y: np.ndarray, seed: int, n_estimators: int, cv: int):
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.inspection import permutation_importance
    from sklearn.model_selection import KFold, cross_val_score, train_test_split

    def make():
        return RandomForestRegressor(n_estimators=n_estimators, min_samples_leaf=5,
                                     oob_score=True, random_state=seed, n_jobs=1)

    rf = make().fit(X, y)
    oob = float(rf.oob_score_)
    kf = KFold(n_splits=cv, shuffle=True, random_state=seed)
    cvs = float(np.mean(cross_val_score(make(), X, y, cv=kf, scoring="r2")))
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, random_state=seed)
    m = make().fit(Xtr, ytr)
    pi = permutation_importance(m, Xte, yte, n_repeats=10, random_state=seed, scoring="r2")
    return oob, cvs, pi.importances_mean, pi.importances_std


def _select(df: pd.DataFrame, tokens: int, tol: int, need: int) -> np.ndarray:
    """The mask of steps with ``|S - tokens| <= tol``; at least ``need`` of them, or an
    InputError naming the nearest and the most common token counts of the trace."""
    S = pd.to_numeric(df["total_tokens"], errors="coerce").to_numpy(float)
    sel = np.abs(S - tokens) <= tol
    n = int(sel.sum())
    if n < need:
        vc = pd.Series(S[np.isfinite(S)]).value_counts()
        near = vc.iloc[np.argsort(np.abs(vc.index.to_numpy() - tokens))[:5]]
        hint = ", ".join(f"S={int(k)} ({int(v)} steps)" for k, v in near.items())
        common = ", ".join(f"S={int(k)} ({int(v)})" for k, v in vc.head(5).items())
        raise InputError(f"tokens={tokens}, tol={tol}: {n} steps selected, need at least "
                         f"{need}; nearest token counts: {hint}; most common: "
                         f"{common}")
    return sel


def _correlations(feats: pd.DataFrame, usable: list[str], y: np.ndarray) -> pd.DataFrame:
    """Pearson and Spearman correlation (with p-values) of each usable factor with ``y``,
    the strongest ``|r|`` first."""
    rows = []
    for c in usable:
        x = feats[c].to_numpy(float)
        pr = stats.pearsonr(x, y)
        sr = stats.spearmanr(x, y)
        rows.append((c, float(pr.statistic), float(pr.pvalue), float(sr.statistic),
                     float(sr.pvalue)))
    corr = pd.DataFrame(rows, columns=["feature", "pearson_r", "pearson_p", "spearman_rho",
                                       "spearman_p"]).set_index("feature")
    if len(corr):
        corr = corr.reindex(corr["pearson_r"].abs().sort_values(ascending=False).index)
    return corr


def _add_model(out: FactorResult, fit, sub: pd.DataFrame, y: np.ndarray) -> np.ndarray:
    """Set ``out``'s model fields (name, R^2, centred R^2, bias) for ``fit`` on the slice
    ``sub``; return the model's residuals ``y - fit.predict(sub)``."""
    yhat = np.asarray(fit.predict(sub), float).ravel()
    res = y - yhat
    ss = float(np.sum((y - y.mean()) ** 2))
    out.model_name = getattr(fit, "model_name", type(fit).__name__)
    out.model_r2 = 1.0 - float(np.sum(res**2)) / ss if ss > 0 else float("nan")
    out.model_r2_centered = (1.0 - float(np.sum((res - res.mean()) ** 2)) / ss
                             if ss > 0 else float("nan"))
    out.model_bias_ms = float(-res.mean())
    return res


def secondary_factors(df: pd.DataFrame, tokens: int, tol: int = 0, *, fit=None, seed: int = 0,
                      n_estimators: int = 200, cv: int = 5, min_steps: int = 20) -> FactorResult:
    """Explain the variation of step time among steps with (nearly) the same S.

    Problem: see the module docstring.  Select steps with
    ``|S - tokens| <= tol``, compute per-step factors, and measure how much of
    the step-time variance each explains.

    Parameters
    ----------
    df : step trace (canonical schema; ``chunk_sizes``/``context_lens`` give
        the per-request factors, without them only the number of requests
        and the trace's own count/machine columns are analysed)
    tokens : the fixed token count S
    tol : accept ``|S - tokens| <= tol`` (0: exactly ``tokens``)
    fit : optional fitted model (``.predict``, e.g. a ``seed_ctx`` FitResult):
        its R^2 on the slice, and a random forest on its residuals
    seed, n_estimators, cv : random-forest settings (seeded, reproducible)
    min_steps : fewest steps accepted for the analysis

    Returns
    -------
    FactorResult (``.report()`` gives a text report, ``.to_dict()`` JSON)
    """
    if not isinstance(df, pd.DataFrame):
        raise InputError(f"df must be a pandas DataFrame, got {type(df).__name__}")
    for c in ("total_tokens", "batch_size", "duration_ms"):
        if c not in df.columns:
            raise InputError(f"trace has no {c!r} column (columns: {list(df.columns)})")
    tokens = check_int_range("tokens", tokens, 1)
    tol = check_int_range("tol", tol, 0)
    cv = check_int_range("cv", cv, 2)
    n_estimators = check_int_range("n_estimators", n_estimators, 1)
    if fit is not None and not hasattr(fit, "predict"):
        raise InputError(f"fit must have .predict (a FitResult), got {type(fit).__name__}")
    sel = _select(df, tokens, tol, max(min_steps, cv))
    n = int(sel.sum())
    sub = df.loc[sel]
    y = pd.to_numeric(sub["duration_ms"], errors="coerce").to_numpy(float)
    if not np.all(np.isfinite(y)):
        raise InputError("duration_ms has non-numeric or non-finite values in the selected steps")
    feats = step_factor_table(sub)
    notes = []
    if "chunk_sd" not in feats.columns:
        notes.append("no chunk_sizes/context_lens in the trace: only the number of requests "
                     "(and count/machine columns) analysed")
    usable = [c for c in feats.columns
              if np.all(np.isfinite(feats[c].to_numpy(float))) and feats[c].nunique() > 1]
    dropped = [c for c in feats.columns if c not in usable]
    corr = _correlations(feats, usable, y)
    oob = cvr2 = None
    imp = None
    if usable:
        X = feats[usable].to_numpy(float)
        oob, cvr2, im, isd = _rf(X, y, seed, int(n_estimators), int(cv))
        imp = pd.DataFrame({"feature": usable, "importance_mean": im, "importance_sd": isd})
        imp = imp.set_index("feature").sort_values("importance_mean", ascending=False)
    else:
        notes.append("every candidate factor is constant on this slice: no random forest")
    g = pd.DataFrame({"num_requests": feats["num_requests"].astype(int).to_numpy(), "y": y})
    by = g.groupby("num_requests")["y"].agg(mean_ms="mean", sd_ms="std", n="count")
    out = FactorResult(
        tokens=int(tokens), tol=int(tol), n_steps=n, mean_ms=float(y.mean()),
        sd_ms=float(y.std(ddof=1)), cv=float(y.std(ddof=1) / y.mean()), features=feats.assign(
            duration_ms=y), dropped_features=dropped, correlations=corr, rf_oob_r2=oob,
        rf_cv_r2=cvr2, importance=imp, by_requests=by, notes=notes)
    if fit is not None:
        res = _add_model(out, fit, sub, y)
        if usable:
            out.residual_rf_cv_r2 = _rf(feats[usable].to_numpy(float), res, seed,
                                        int(n_estimators), int(cv))[1]
    return out
