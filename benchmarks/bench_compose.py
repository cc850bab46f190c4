"""Benchmark: composing engine steps from a layer-profile bundle, and fit_from_profile.

Composes a seeded :func:`perfmodel.core.compose.design_for_engine` design of
``--steps`` steps (RTX PRO 6000, Llama-3.1-8B, TP 1; max_num_seqs 128, token
budget 2048, contexts up to 4,765 tokens) and prints composed steps/s and the
ratio to computing the same steps' model features
(:func:`perfmodel.data.features.request_features`, the baseline, same
process).  Then times :func:`perfmodel.core.compose.fit_from_profile` (4,000
composed steps, the model of record) for each published bundle that has a
serving run, with its error against the composed steps.  The target is a few
seconds per fit: a whole replay must take <= 10 s.  The machine is shared:
absolute times drift with its load, the ratio less so.

Needs the LLMServingSim files in ``PERFMODEL_DATA_MIRROR`` (or the network).

Usage::

    python benchmarks/bench_compose.py [--steps 100000]
"""
from __future__ import annotations

import argparse
import json
import time

from perfmodel.core.compose import StepComposer, design_for_engine, fit_from_profile
from perfmodel.data.datasets.llmservingsim import (
    load_model_config,
    load_profile_bundle,
    serving_run_dir,
)
from perfmodel.data.features import request_features

RUNS = [("RTX4090", "meta-llama/Llama-3.1-8B", 1), ("RTXPRO6000", "meta-llama/Llama-3.1-8B", 1),
        ("RTXPRO6000", "Qwen/Qwen3-30B-A3B-Instruct-2507", 1),
        ("RTXPRO6000", "Qwen/Qwen3-30B-A3B-Instruct-2507", 2)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100_000)
    a = ap.parse_args(argv)

    comp = StepComposer(load_profile_bundle("RTXPRO6000", "Llama-3.1-8B"),
                        load_model_config("meta-llama/Llama-3.1-8B"))
    d = design_for_engine(128, 2048, 4765, n_steps=a.steps, seed=0)
    t0 = time.perf_counter()
    comp.compose(d)
    t_comp = time.perf_counter() - t0
    t0 = time.perf_counter()
    request_features(d.chunk, d.context, d.counts)
    t_feat = time.perf_counter() - t0
    print(f"compose {a.steps} steps: {t_comp:.2f} s ({a.steps / t_comp:,.0f} steps/s); "
          f"features of the same steps {t_feat:.2f} s; ratio {t_comp / t_feat:.1f}")

    for hw, model, ep in RUNS:
        run = serving_run_dir(hw, model)
        eng = json.loads((run / "vllm/meta.json").read_text())["engine_kwargs"]
        reqs = [json.loads(s) for s in (run / "vllm/requests.jsonl").read_text().splitlines()]
        longest = max(r["input_toks"] + r["output_toks"] for r in reqs)
        tp = eng["tensor_parallel_size"]
        t0 = time.perf_counter()
        _, rep = fit_from_profile(load_profile_bundle(hw, model, tp=tp), model, tp=tp,
                                  max_num_seqs=eng["max_num_seqs"],
                                  max_num_batched_tokens=eng["max_num_batched_tokens"],
                                  max_context=longest, ep=ep)
        wall = time.perf_counter() - t0
        print(f"{hw} {model} tp{tp} ep{ep}: fit_from_profile {wall:.1f} s "
              f"(compose {rep['compose_s']:.1f} s, fit {rep['fit_s']:.1f} s); {rep['model']} vs "
              f"composed steps: MAPE {rep['mape_pct']:.1f} %, p95 {rep['p95_abs_err_pct']:.0f} %, "
              f"max {rep['max_abs_err_pct']:.0f} %")


if __name__ == "__main__":
    main()
