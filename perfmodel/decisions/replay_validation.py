"""Validation of the replay on the published vLLM GPU runs, against LLMServingSim.

Problem
-------
Does the step model of record, fitted on steps composed from a layer-profile
bundle (never on the measured timings), predict the TTFT, TPOT and latency a
real vLLM deployment measured, and how does it compare with the peer
simulator that published the runs?  :func:`validation_table` replays each
published run (:func:`~perfmodel.data.datasets.llmservingsim.list_serving_runs`)
as ``perfmodel replay`` does (:mod:`perfmodel.decisions.replay`) and returns
one tidy row per run x metric x statistic x source: the measured vLLM value,
perfmodel's prediction, LLMServingSim's (its ``outputs/sim.csv`` per-request
rows, same definitions) and the ablations:

* ``no KV limit``: unlimited KV cache, hence no preemption;
* ``decode_first``: the previous scheduler (decodes, then partial
  prefills, then admissions; vLLM V0 / Sarathi-Serve);
* ``seed_id``: the identifiable seed form instead of the model of record;
* ``+ EP all-to-all``: the expert-parallel exchange the bundle does not time,
  priced from the run's link description
  (:func:`perfmodel.decisions.replay.ep_all_to_all_ms`); equal to
  ``perfmodel`` on runs without expert parallelism.

Every setting comes from the run folder's engine settings and the bundle;
nothing is tuned per run.

Direct bundle lookup
--------------------
The simulator prices a step through ``model.predict(features)`` with the
per-step aggregate features of :mod:`perfmodel.data.features`; the composer
needs the per-request chunks and contexts (largest prefill chunk, mean and
maximum decode context, skew rate), which those features do not determine.
So the composer's ``step_ms`` cannot drive the simulator as a step-time
function.  :func:`fit_vs_lookup` measures instead what the substitution
would change: the fit's step times against the bundle's direct lookup on
the very steps the replay scheduled (``keep_steps``).

Verified against: the peer statistics recomputed from ``sim.csv`` agree with
its ``validation/summary.txt`` to the printed 0.1 ms
(``tests/decisions/test_replay_validation.py``).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from perfmodel.errors import InputError

__all__ = ["METRICS", "VARIANTS", "fit_vs_lookup", "peer_stats", "replay_run",
           "validation_table", "validation_wide"]

#: metric key -> label
METRICS = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "latency_ms": "latency"}
#: statistics tabulated
STATS = ("mean", "p99")
#: replay variants: label -> (step model name or None for the model of record,
#: EngineConfig overrides, add the EP all-to-all term)
VARIANTS: dict[str, tuple[str | None, dict, bool]] = {
    "perfmodel": (None, {}, False),
    "no KV limit": (None, {"num_gpu_blocks": None}, False),
    "decode_first": (None, {"policy": "decode_first"}, False),
    "seed_id": ("seed_id", {}, False),
    "+ EP all-to-all": (None, {}, True),
}
MEASURED, PEER = "vLLM (measured)", "LLMServingSim"


def peer_stats(run_dir, *, tolerance_ms: float = 0.051) -> dict:
    """LLMServingSim's statistics of a run, recomputed from its per-request rows.

    Also checks them against the peer's printed ``validation/summary.txt``
    (``tolerance_ms``: its 0.1 ms print resolution) and raises
    :class:`InputError` when they disagree.
    """
    from perfmodel.data.datasets.llmservingsim import load_peer_prediction, load_peer_summary
    from perfmodel.decisions.simulate import latency_stats

    d = load_peer_prediction(run_dir)
    st = latency_stats(d["ttft_ms"], d["tpot_ms"], d["latency_ms"])
    for r in load_peer_summary(run_dir).itertuples(index=False):
        if abs(st[r.metric][r.stat] - r.sim_ms) > tolerance_ms:
            raise InputError(f"{run_dir}: LLMServingSim {r.metric} {r.stat} recomputed "
                             f"{st[r.metric][r.stat]:.2f} ms, its summary prints {r.sim_ms}")
    return st


def _inputs(hardware: str, model: str):
    from perfmodel.data.datasets.llmservingsim import (
        load_model_config,
        load_profile_bundle,
        serving_run_dir,
    )
    from perfmodel.data.requests import load_run_dir
    from perfmodel.decisions.replay import run_parallelism

    run_dir = serving_run_dir(hardware, model)
    run, work = load_run_dir(run_dir)
    tp, ep = run_parallelism(run)
    cfg = load_model_config(run["model"])
    bundle = load_profile_bundle(hardware, run["model"], tp=tp)
    return run_dir, run, work, cfg, bundle, tp, ep


def replay_run(hardware: str, model: str, variants=None, *, keep_steps: bool = False) -> dict:
    """Replay one published run under each variant.

    Parameters
    ----------
    hardware, model : a registered serving run (``list_serving_runs``)
    variants : mapping label -> (step model or None, EngineConfig overrides,
        add the EP all-to-all term); None: :data:`VARIANTS`

    Returns
    -------
    dict
        ``stats`` (label -> latency statistics, with ``vLLM (measured)`` and
        ``LLMServingSim``), ``fits`` (step model -> fit report), ``engine``
        (label -> EngineConfig dict), ``kv`` (label -> KV notes),
        ``preemptions`` (label -> count), ``results`` (label ->
        SimulationResult, steps kept when ``keep_steps``) and the inputs
        (``run``, ``config``, ``bundle``, ``tp``, ``ep``).
    """
    from perfmodel.decisions.replay import WithAllToAll, fit_for_run, run_engine_settings
    from perfmodel.decisions.simulate import EngineConfig, latency_stats, simulate_open_loop

    variants = VARIANTS if variants is None else variants
    if not isinstance(variants, dict) or not variants:
        raise InputError("variants must be a non-empty dict label -> (model, overrides, "
                         "all_to_all)")
    run_dir, run, work, cfg, bundle, tp, ep = _inputs(hardware, model)
    out = {"stats": {MEASURED: latency_stats(work["ttft_ms"], work["tpot_ms"],
                                             work["latency_ms"]),
                     PEER: peer_stats(run_dir)},
           "fits": {}, "engine": {}, "kv": {}, "preemptions": {}, "results": {},
           "run": run, "config": cfg, "bundle": bundle, "tp": tp, "ep": ep}
    fits = {}
    for label, (model_name, overrides, all_to_all) in variants.items():
        kw, kv = run_engine_settings(run, cfg, overrides=overrides)
        if model_name not in fits:
            fits[model_name] = fit_for_run(bundle, cfg, work, kw, tp=tp, ep=ep, model=model_name)
            out["fits"][fits[model_name][1]["model"]] = fits[model_name][1]
        step_model = fits[model_name][0]
        if all_to_all and ep > 1:
            if not run.get("link_bw_gbs") or run.get("link_latency_us") is None:
                raise InputError(f"{hardware}/{model}: config.json gives no link_bw/link_latency "
                                 "for the all-to-all term")
            step_model = WithAllToAll(step_model, cfg, ep=ep, link_bw_gbs=run["link_bw_gbs"],
                                      link_latency_us=run["link_latency_us"])
        engine = EngineConfig(**kw)
        sim = simulate_open_loop(step_model, prompt_tokens=work["prompt_tokens"].to_numpy(),
                                 output_tokens=work["output_tokens"].to_numpy(),
                                 arrival_times=work["arrival_s"].to_numpy(), engine=engine,
                                 keep_steps=keep_steps)
        out["stats"][label] = sim.latency_stats()
        out["engine"][label], out["kv"][label] = engine.as_dict(), kv
        out["preemptions"][label] = int(sim.requests["num_preemptions"].sum())
        out["results"][label] = sim
    return out


def fit_vs_lookup(sim, bundle, config, *, tp: int = 1, ep: int = 1) -> dict:
    """The fit's step times against the bundle's direct lookup on a replay's own steps.

    Parameters
    ----------
    sim : SimulationResult with its steps kept (``keep_steps=True``)
    bundle, config, tp, ep : as for :class:`perfmodel.core.compose.StepComposer`

    Returns
    -------
    dict
        ``time_ratio`` (sum of fitted / sum of looked-up step times: the
        relative change of simulated busy time), ``mape_pct`` and
        ``bias_pct`` (mean signed relative error), each also by step kind
        (``decode`` steps: every chunk one token; ``prefill``: any larger
        chunk), ``n_steps`` and, with data-parallel replicas,
        ``lock_step_time_ratio`` (the same over lock steps, each the slowest
        replica's time).
    """
    from perfmodel.core.compose import StepComposer
    from perfmodel.data.trace import parse_int_list

    steps = getattr(sim, "steps", None)
    if steps is None or len(steps) == 0:
        raise InputError("sim has no steps: simulate with keep_steps=True")
    comp = StepComposer(bundle, config, tp=tp, ep=ep)
    chunks = [parse_int_list(v) for v in steps["chunk_sizes"]]
    ctx = [parse_int_list(v) for v in steps["context_lens"]]
    direct = comp.step_ms(chunks, ctx)
    fitted = steps["duration_ms"].to_numpy(float)
    rel = fitted / direct - 1.0
    dec = np.array([bool(np.all(c == 1)) for c in chunks])
    res = {"n_steps": int(direct.size)}
    if "replica" in steps and steps["replica"].nunique() > 1:
        # data-parallel replicas step in lock step: a step lasts as long as its slowest replica
        lock = pd.DataFrame({"step": steps["step"].to_numpy(), "fit": fitted, "direct": direct})
        g = lock.groupby("step")[["fit", "direct"]].max()
        res["lock_step_time_ratio"] = float(g["fit"].sum() / g["direct"].sum())
    for kind, sel in (("all", np.ones_like(dec)), ("decode", dec), ("prefill", ~dec)):
        if sel.any():
            res[kind] = {"n": int(sel.sum()),
                         "time_ratio": float(fitted[sel].sum() / direct[sel].sum()),
                         "mape_pct": float(100 * np.mean(np.abs(rel[sel]))),
                         "bias_pct": float(100 * np.mean(rel[sel]))}
    return res


def _label(hardware: str, model: str) -> str:
    return f"{hardware} / {model.split('/')[-1]}"


def validation_table(runs=None, variants=None, *, lookup: bool = True):
    """The replay validation table of the published runs (module docstring).

    Parameters
    ----------
    runs : DataFrame with ``hardware, model`` or list of pairs; None: every
        registered serving run
    variants : see :func:`replay_run`
    lookup : also compute :func:`fit_vs_lookup` on the model of record's replay

    Returns
    -------
    (DataFrame, dict)
        Tidy table ``run, metric, stat, source, value_ms, error_pct`` (error
        of ``source`` against the measured value, in percent; NaN for the
        measured rows), and per run label the details: fit reports, engine
        settings, KV notes, preemptions and the fit-vs-lookup check.
    """
    from perfmodel.data.datasets.llmservingsim import list_serving_runs

    if runs is None:
        runs = list_serving_runs()
    pairs = (list(runs[["hardware", "model"]].itertuples(index=False, name=None))
             if isinstance(runs, pd.DataFrame) else [tuple(r) for r in runs])
    if not pairs or any(len(p) != 2 for p in pairs):
        raise InputError("runs must list (hardware, model) pairs")
    rows, details = [], {}
    for hw, model in pairs:
        r = replay_run(hw, model, variants, keep_steps=lookup)
        label = _label(hw, model)
        meas = r["stats"][MEASURED]
        for source, st in r["stats"].items():
            for m, name in METRICS.items():
                for s in STATS:
                    v, ref = st[m][s], meas[m][s]
                    rows.append({"run": label, "metric": name, "stat": s, "source": source,
                                 "value_ms": v, "error_pct": (np.nan if source == MEASURED
                                                              else 100 * (v - ref) / ref)})
        details[label] = {k: r[k] for k in ("fits", "engine", "kv", "preemptions", "tp", "ep")}
        first = next(iter(r["results"]))
        if lookup:
            details[label]["fit_vs_lookup"] = fit_vs_lookup(
                r["results"][first], r["bundle"], r["config"], tp=r["tp"], ep=r["ep"])
    return pd.DataFrame(rows), details


def validation_wide(table: pd.DataFrame) -> pd.DataFrame:
    """One row per run x metric x statistic: measured and predicted ms, then every error (%).

    Columns: ``run, metric, stat, vLLM (ms), perfmodel (ms)``, then
    ``err <source> (%)`` for perfmodel, LLMServingSim and each ablation.
    """
    need = {"run", "metric", "stat", "source", "value_ms", "error_pct"}
    if not isinstance(table, pd.DataFrame) or not need <= set(table.columns):
        raise InputError(f"table must be validation_table's frame with columns {sorted(need)}")
    keys = ["run", "metric", "stat"]
    order = list(dict.fromkeys(table["source"]))
    val = table.pivot_table(index=keys, columns="source", values="value_ms", sort=False)
    err = table.pivot_table(index=keys, columns="source", values="error_pct", sort=False)
    out = pd.DataFrame({f"{MEASURED.split()[0]} (ms)": val[MEASURED],
                        "perfmodel (ms)": val["perfmodel"]})
    first = ["perfmodel", PEER]
    for s in first + [s for s in order if s not in first and s != MEASURED]:
        if s in err:
            out[f"err {s} (%)"] = err[s]
    return out.reset_index()
