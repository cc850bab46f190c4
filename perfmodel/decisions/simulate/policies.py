"""Scheduling-policy evaluation: :func:`evaluate_policies`, :func:`pareto_front` and
its plots.
"""
from __future__ import annotations

from collections.abc import Mapping
from itertools import product

import numpy as np
import pandas as pd

from perfmodel.decisions.simulate._common import _check_model
from perfmodel.decisions.simulate.engine import EngineConfig, _engine
from perfmodel.decisions.simulate.workload import simulate_closed_loop, simulate_open_loop
from perfmodel.errors import InputError

# ---------------------------------------------------------------------------
# policy evaluation
# ---------------------------------------------------------------------------

_METRICS = ("output_throughput_tok_s", "request_throughput_req_s", "median_e2e_s", "p90_e2e_s",
            "median_ttft_s", "p90_ttft_s", "mean_tpot_ms", "p90_tpot_ms", "n_steps",
            "mean_batch_size")


def evaluate_policies(model, workload: Mapping, *, policies=("decode_first", "prefill_first"),
                      max_num_batched_tokens=(256, 512, 1024, 2048),
                      max_num_seqs=(256,), long_prefill_token_threshold=(0,),
                      step_overhead_ms: float = 0.0, seed: int = 0,
                      seeds=None, engine: EngineConfig | None = None) -> pd.DataFrame:
    """Sweep batching policies with the simulator: throughput against latency.

    Problem: compare batching policies (docs/model.md, Closed-loop benchmark): chunk sizes
    (``max_num_batched_tokens``, ``long_prefill_token_threshold``),
    decode-first against prefill-first, and admission thresholds
    (``max_num_seqs``) on one workload.  Every combination of the given
    values is simulated (same ``seed``, so the same arrivals).

    Parameters
    ----------
    model : fitted step model (``.predict``)
    workload : closed loop ``{'num_requests', 'concurrency', 'prompt_tokens',
        'output_tokens'}`` or open loop ``{'rate', 'num_requests',
        'prompt_tokens', 'output_tokens'}`` (or ``'arrival_times'``)
    policies, max_num_batched_tokens, max_num_seqs, long_prefill_token_threshold :
        sequences of values to combine
    seed, seeds : one arrival seed, or several (``seeds`` wins): with several,
        every setting is simulated once per seed (the same arrivals for every
        setting), the metrics are the means over seeds, and the Pareto front
        counts a setting as dominated only where the paired seed-to-seed
        differences are significant (:func:`pareto_front` with ``samples``)
    engine : EngineConfig, optional
        The settings every run shares (``step_overhead_ms``,
        ``enable_chunked_prefill``, ``step_noise_sd``), instead of
        ``step_overhead_ms`` (which must then be left at 0); its ``policy``,
        ``max_num_batched_tokens``, ``max_num_seqs`` and
        ``long_prefill_token_threshold`` are replaced by each combination of
        the grids above

    Returns
    -------
    DataFrame, one row per combination: the settings and the metrics
    ``output_throughput_tok_s, request_throughput_req_s, median_e2e_s,
    p90_e2e_s, median_ttft_s, p90_ttft_s, mean_tpot_ms, p90_tpot_ms, n_steps,
    mean_batch_size`` (means over seeds), ``n_seeds``, the standard errors
    ``output_throughput_tok_s_se`` and ``median_e2e_s_se`` over seeds, plus
    ``pareto`` (True where no other row has both higher throughput and lower
    median e2e latency, beyond the seed-to-seed spread when there are several
    seeds).  A single seed gives a front that can hinge on differences far
    inside the simulator's noise (0.1 % in throughput): use several.
    """
    _check_model(model)
    if not isinstance(workload, Mapping):
        raise InputError(f"workload must be a dict, got {type(workload).__name__}")
    closed = "concurrency" in workload
    keys = (("num_requests", "concurrency", "prompt_tokens", "output_tokens") if closed
            else ("prompt_tokens", "output_tokens"))
    missing = [k for k in keys if k not in workload]
    if missing:
        raise InputError(f"workload is missing {missing}")
    poisson = {"rate", "num_requests"} <= set(workload)
    if not closed and "arrival_times" not in workload and not poisson:
        raise InputError("open-loop workload needs 'rate' and 'num_requests' or 'arrival_times'")
    grids = {}
    for name, vals in (("policy", policies), ("max_num_batched_tokens", max_num_batched_tokens),
                       ("max_num_seqs", max_num_seqs),
                       ("long_prefill_token_threshold", long_prefill_token_threshold)):
        vals = [vals] if isinstance(vals, (str, int, np.integer)) else list(vals)
        if not vals:
            raise InputError(f"{name} grid is empty")
        grids[name] = vals
    seeds = [seed] if seeds is None else [int(v) for v in np.atleast_1d(seeds)]
    if not seeds:
        raise InputError("seeds is empty")
    if engine is None:
        shared = {"step_overhead_ms": step_overhead_ms}
    else:
        shared = _engine(engine, step_overhead_ms=step_overhead_ms).as_dict()
        shared = {k: shared[k] for k in ("enable_chunked_prefill", "step_overhead_ms",
                                         "step_noise_sd")}
    rows, per_seed = [], []
    for pol, K, M, thr in product(*grids.values()):
        runs = []
        for sd in seeds:
            kw = {"max_num_seqs": M, "max_num_batched_tokens": K, "policy": pol,
                  "long_prefill_token_threshold": thr, **shared, "seed": sd, "keep_steps": True}
            if closed:
                r = simulate_closed_loop(model, workload["num_requests"],
                                         workload["concurrency"], workload["prompt_tokens"],
                                         workload["output_tokens"], **kw)
            else:
                r = simulate_open_loop(model, prompt_tokens=workload["prompt_tokens"],
                                       output_tokens=workload["output_tokens"],
                                       rate=workload.get("rate"),
                                       num_requests=workload.get("num_requests"),
                                       arrival_times=workload.get("arrival_times"), **kw)
            d = r.to_dict()
            runs.append([np.nan if d.get(m) is None else float(d[m]) for m in _METRICS])
        runs = np.asarray(runs)
        per_seed.append(runs)
        n = len(seeds)
        se = runs.std(axis=0, ddof=1) / np.sqrt(n) if n > 1 else np.zeros(len(_METRICS))
        rows.append({"policy": pol, "max_num_batched_tokens": K, "max_num_seqs": M,
                     "long_prefill_token_threshold": thr,
                     **dict(zip(_METRICS, runs.mean(axis=0))), "n_seeds": n,
                     "output_throughput_tok_s_se": se[_METRICS.index("output_throughput_tok_s")],
                     "median_e2e_s_se": se[_METRICS.index("median_e2e_s")]})
    df = pd.DataFrame(rows)
    if len(seeds) == 1:
        df["n_steps"] = df["n_steps"].astype(int)
    stack = np.stack(per_seed)                       # settings x seeds x metrics
    samples = {m: stack[:, :, i] for i, m in enumerate(_METRICS)}
    df["pareto"] = pareto_front(df, samples=samples)
    return df


def pareto_front(df: pd.DataFrame, x: str = "median_e2e_s",
                 y: str = "output_throughput_tok_s", *, samples=None,
                 z: float = 2.0) -> np.ndarray:
    """Boolean mask of rows not dominated in (lower ``x``, higher ``y``).

    Without ``samples``, row ``j`` dominates row ``i`` when it is at least as
    good in both and better in one.  With ``samples`` (``{column: array of
    shape (rows, seeds)}``, the per-seed values behind the means, paired by
    seed), ``j`` dominates ``i`` only when it is better in one metric by more
    than ``z`` standard errors of the paired difference and not worse by more
    than ``z`` standard errors in the other: settings whose differences lie
    inside the seed-to-seed spread do not dominate each other.  With one seed
    the two rules agree.
    """
    for c in (x, y):
        if c not in df.columns:
            raise InputError(f"column {c!r} not in the table (columns: {list(df.columns)})")
    if not (np.isfinite(z) and z >= 0):
        raise InputError(f"z must be a finite number >= 0, got {z!r}")
    if samples is None:
        X = df[x].to_numpy(float)[:, None]
        Y = df[y].to_numpy(float)[:, None]
    else:
        X = np.asarray(samples[x], float)
        Y = np.asarray(samples[y], float)
        if X.shape != Y.shape or X.ndim != 2 or X.shape[0] != len(df):
            raise InputError(f"samples must hold ({len(df)}, seeds) arrays for {x!r} and {y!r}")

    def gain(A, i, j, sign):
        # mean paired improvement of j over i (sign +1: larger is better) and its s.e.
        d = sign * (A[j] - A[i])
        se = d.std(ddof=1) / np.sqrt(d.size) if d.size > 1 else 0.0
        return d.mean(), se

    keep = np.ones(len(df), bool)
    for i in range(len(df)):
        for j in range(len(df)):
            if i == j:
                continue
            gx, sx = gain(X, i, j, -1.0)
            gy, sy = gain(Y, i, j, +1.0)
            better = (gx > z * sx and gx > 0) or (gy > z * sy and gy > 0)
            not_worse = gx >= -z * sx and gy >= -z * sy
            if better and not_worse:
                keep[i] = False
                break
    return keep


_UNITS = (("_tok_s", "tokens/s"), ("_req_s", "requests/s"), ("_ms", "ms"), ("_s", "s"))
_WORDS = {"e2e": "end-to-end latency", "ttft": "TTFT", "tpot": "TPOT"}


def metric_label(name: str) -> str:
    """Axis label with its unit for a metric column, e.g. ``"median_e2e_s"``.

    ``output_throughput_tok_s`` -> ``"output throughput (tokens/s)"``,
    ``median_e2e_s`` -> ``"median end-to-end latency (s)"``; a name without a
    known unit suffix (an engine setting such as ``max_num_seqs``, a count such
    as ``n_steps``) is returned unchanged.
    """
    if not isinstance(name, str) or not name:
        raise InputError(f"metric name must be a non-empty string, got {name!r}")
    for suffix, text in _UNITS:
        if name.endswith(suffix) and len(name) > len(suffix):
            words = " ".join(_WORDS.get(w, w) for w in name[: -len(suffix)].split("_"))
            return f"{words} ({text})"
    return name


def _get_ax(ax):
    from perfmodel.plotting import get_ax

    return get_ax(ax)


def plot_policy_frontier(df: pd.DataFrame, ax=None, *, x: str = "median_e2e_s",
                         y: str = "output_throughput_tok_s", by: str = "policy"):
    """Throughput against latency, one marker per setting, the Pareto front as a line.

    ``df`` is the output of :func:`evaluate_policies`; points are grouped
    (coloured) by the column ``by``; the front is its ``pareto`` column when
    present (else :func:`pareto_front` of the means).  Returns the ``ax``.
    """
    if not isinstance(df, pd.DataFrame) or len(df) == 0:
        raise InputError("df must be a non-empty DataFrame from evaluate_policies")
    for c in (x, y, by):
        if c not in df.columns:
            raise InputError(f"column {c!r} not in the table (columns: {list(df.columns)})")
    ax = _get_ax(ax)
    for key, g in df.groupby(by, sort=True):
        ax.scatter(g[x], g[y], label=f"{by}={key}", alpha=0.8)
    # the front evaluate_policies judged against the seed spread, when it is there
    mask = df["pareto"].to_numpy(bool) if "pareto" in df.columns else pareto_front(df, x, y)
    front = df[mask].sort_values(x)
    ax.plot(front[x], front[y], "k--", lw=1, label="Pareto front")
    ax.set_xlabel(metric_label(x))
    ax.set_ylabel(metric_label(y))
    ax.legend(fontsize="small")
    return ax


def plot_policy_contour(df: pd.DataFrame, ax=None, *, x: str = "max_num_batched_tokens",
                        y: str = "max_num_seqs", z: str = "output_throughput_tok_s",
                        levels: int = 10):
    """Contour of a metric over two settings (rows of :func:`evaluate_policies`).

    Needs at least three distinct (x, y) points not on one line; when several
    rows share an (x, y) (e.g. several policies), filter ``df`` first.
    Returns the ``ax``.
    """
    if not isinstance(df, pd.DataFrame) or len(df) == 0:
        raise InputError("df must be a non-empty DataFrame from evaluate_policies")
    for c in (x, y, z):
        if c not in df.columns:
            raise InputError(f"column {c!r} not in the table (columns: {list(df.columns)})")
    if df.duplicated([x, y]).any():
        raise InputError(f"several rows share the same ({x}, {y}); filter df (e.g. by policy) "
                         "first")
    if df[x].nunique() < 2 or df[y].nunique() < 2:
        raise InputError(f"a contour needs at least two distinct values of {x} and of {y}")
    ax = _get_ax(ax)
    piv = df.pivot(index=y, columns=x, values=z).sort_index().sort_index(axis=1)
    cs = ax.contourf(piv.columns.to_numpy(float), piv.index.to_numpy(float),
                     piv.to_numpy(float), levels=levels)
    ax.figure.colorbar(cs, ax=ax, label=metric_label(z))
    ax.set_xlabel(metric_label(x))
    ax.set_ylabel(metric_label(y))
    return ax
