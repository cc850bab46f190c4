"""compare(): no-leak folds, known-truth ranking, CLI; the context-aware model members."""
import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.core.model import MODELS, get_model
from perfmodel.data.trace import step_features
from perfmodel.errors import InputError
from perfmodel.stats.compare import compare, load_trace_arg

NEW = ("seed_kv", "seed_attn", "seed_attn_kv", "seed_ctx_mono")

#: seed_ctx_mono's parameters used to simulate a trace (values of the order fitted on data/gpu)
TRUTH = {"tau_0": 2.6, "a_1": 0.0055, "k_B": 2.0, "k_S": 0.004, "tau_B": 0.01, "tau_S": 1e-4,
             "c_attn": 5e-7, "c_kv": 1.2e-5, "c_kv_mixed": 3.8e-5}


def _steps(n_cfg, rng):
    rows = []
    for i in range(n_cfg):
        kind = ("decode", "prefill", "mixed")[i % 3]
        B = int(rng.integers(1, 65))
        L = int(rng.integers(16, 8000))
        if kind == "decode":
            chunks = [1] * B
        elif kind == "prefill":
            B = min(B, 8)
            chunks = rng.integers(16, 1024, B).tolist()
        else:
            chunks = [int(rng.integers(32, 2048))] + [1] * (B - 1)
        ctx = rng.integers(0, L, B).tolist()
        rows.append((B, int(sum(chunks)), ";".join(map(str, chunks)), ";".join(map(str, ctx)),
                     f"{kind}-{i}", kind))
    return pd.DataFrame(rows, columns=["batch_size", "total_tokens", "chunk_sizes",
                                       "context_lens", "config", "phase"])


def synthetic(n_cfg=90, reps=3, sigma=0.03, seed=0):
    """Replicated steps from seed_ctx_mono with log-normal noise (known truth and floor)."""
    rng = np.random.default_rng(seed)
    base = _steps(n_cfg, rng)
    mu = get_model("seed_ctx_mono").predict(TRUTH, base)
    df = base.loc[base.index.repeat(reps)].reset_index(drop=True)
    df["duration_ms"] = np.repeat(mu, reps) * np.exp(sigma * rng.standard_normal(len(df)))
    return df


# ---------------------------------------------------------------------------
# folds
# ---------------------------------------------------------------------------
def test_compare_scores_the_fold_engines_folds():
    """compare() and validation.cross_validate score one model on the same folds (those of
    validation.make_folds), so their grouped k-fold MAPEs agree; identical steps filed under
    another configuration (as Splitwise does) included."""
    from perfmodel.stats import validation as va
    from perfmodel.stats.baselines import get_baseline

    df = synthetic(n_cfg=30, reps=3)
    twin = df.iloc[[0]].assign(config="other-name")
    df = pd.concat([df, twin, twin.assign(config="third")], ignore_index=True)
    for cv, scheme in (("grouped", "grouped"), ("time", "expanding")):
        d = df.assign(step=np.random.default_rng(1).permutation(len(df))) if cv == "time" else df
        tab = compare(d, models=[], baselines=["linear"], cv=cv, k=4, seed=1,
                      in_sample=False).set_index("name")
        ref = va.cross_validate(d, lambda: get_baseline("linear", relative=True), scheme, k=4,
                                seed=1, by_regime=False)
        per_fold = ref[ref.fold.isin(range(4))]
        assert tab.loc["linear", "k"] == 4
        assert tab.loc["linear", "fold_mape_mean"] == pytest.approx(per_fold.MAPE.mean(), rel=1e-12)
        if cv == "grouped":
            pooled = ref[ref.fold == "pooled"].MAPE.iloc[0]
            assert tab.loc["linear", "MAPE"] == pytest.approx(pooled, rel=1e-12)
    # k is capped at the number of groups
    few = df[df["config"].isin(df["config"].unique()[:3])]
    assert compare(few, models=[], baselines=["linear"], k=5, in_sample=False)["k"].iloc[0] == 3


# ---------------------------------------------------------------------------
# compare
# ---------------------------------------------------------------------------
def test_compare_ranks_the_true_model_first_and_reaches_the_floor():
    df = synthetic()
    tab = compare(df, models=["seed_id", "seed_ctx_mono"], baselines=["linear", "distserve"],
                  k=5, n_starts=3)
    t = tab.set_index("name")
    assert (t["status"] == "ok").all()
    assert t["MAPE"].idxmin() == "seed_ctx_mono"
    assert t.loc["seed_ctx_mono", "MAPE"] < 0.8 * t.loc["seed_id", "MAPE"]
    assert t.loc["seed_ctx_mono", "MAPE"] < 0.8 * t.loc["linear", "MAPE"]
    # the true form on replicated data sits at its noise floor (median oracle of the replicates)
    floor = tab.attrs["noise_floor"]["oracle_median"]
    assert floor == pytest.approx(100 * 0.03 * np.sqrt(2 / np.pi), rel=0.2)
    assert 0.8 < t.loc["seed_ctx_mono", "ratio_to_floor"] < 1.25
    r = t.loc["seed_ctx_mono"]
    assert r["ratio_lo"] < r["ratio_to_floor"] < r["ratio_hi"] < 1.5
    # the true form passes the pure-error lack-of-fit test; the B,S-only seed form does not
    assert r["lof_p"] > 1e-3 and t.loc["seed_id", "lof_p"] < 1e-3
    assert tab.attrs["predictions"].shape == (len(df), 4)
    assert t.loc["seed_ctx_mono", "n_params"] == 9
    assert t.loc["seed_ctx_mono", "aic"] < t.loc["seed_id", "aic"]
    for r in ("decode-only", "mixed", "prefill-heavy"):
        assert np.isfinite(t.loc["seed_ctx_mono", f"MAPE_{r}"])
    assert t.loc["linear", "kind"] == "baseline" and t.loc["linear", "n_params"] == 3
    assert tab["n_test"].eq(len(df)).all()


def test_compare_information_criteria_use_the_fit_scale_residual():
    """AIC/BIC of a weight comparison come from (T - T_hat)/T, the residual the fit minimised."""
    from perfmodel.core.fit import fit_model
    from perfmodel.core.scale import WEIGHT
    from perfmodel.stats.adequacy import information_criteria
    from perfmodel.stats.baselines import get_baseline

    df = synthetic(n_cfg=30, reps=2)
    tab = compare(df, models=["seed_id"], baselines=["linear"], k=2, n_starts=1,
                  relative="weight").set_index("name")
    y = df["duration_ms"].to_numpy(float)
    fit = fit_model(df, "seed_id", relative="weight", n_starts=1)
    e = WEIGHT.residual(y, fit.predict(df))
    assert float(e @ e) == pytest.approx(fit.rss, rel=1e-9)
    k = int(tab.loc["seed_id", "n_params"])
    assert tab.loc["seed_id", "aic"] == pytest.approx(information_criteria(fit.rss, len(y), k)[0],
                                                     rel=1e-9)
    lin = get_baseline("linear", relative=True).fit(df)
    e = WEIGHT.residual(y, lin.predict(df))
    assert tab.loc["linear", "aic"] == pytest.approx(information_criteria(float(e @ e), len(y),
                                                                         3)[0], rel=1e-9)
    with pytest.raises(InputError, match="relative 'sqrt' is not one of"):
        compare(df, relative="sqrt")


def test_compare_skips_context_models_without_context_and_validates():
    df = synthetic(n_cfg=30, reps=2).drop(columns=["chunk_sizes", "context_lens"])
    tab = compare(df, models=["seed_id", "seed_ctx_mono"], baselines=["distserve"], k=3,
                  n_starts=2, in_sample=False)
    t = tab.set_index("name")
    assert t.loc["seed_id", "status"] == "ok" and np.isfinite(t.loc["seed_id", "MAPE"])
    assert t.loc["seed_ctx_mono", "status"].startswith("skipped: needs per-request")
    assert t.loc["distserve", "status"].startswith("skipped")
    assert np.isnan(t.loc["seed_id", "aic"])  # in_sample=False
    with pytest.raises(InputError, match="unknown models"):
        compare(df, models=["nope"])
    with pytest.raises(InputError, match="cv 'random'"):
        compare(df, cv="random")
    with pytest.raises(InputError, match="k must be"):
        compare(df, k=1)
    with pytest.raises(InputError, match="nothing to compare"):
        compare(df, models=[], baselines=[])


def test_load_trace_arg_names(tmp_path):
    with pytest.raises(InputError, match="neither a file nor a dataset"):
        load_trace_arg("no/such/file.csv")
    with pytest.raises(InputError, match="integer seed"):
        load_trace_arg("vidur:x")


def test_load_trace_arg_splitwise_group(fetch_or_skip):
    fetch_or_skip("splitwise/perf_model")
    df, label = load_trace_arg("splitwise:llama2-70b/a100/tp4")
    assert label == "splitwise_llama2-70b_a100-80gb_tp4" and len(df) == 190
    assert set(df["hardware"]) == {"a100-80gb"}
    with pytest.raises(InputError, match="matches"):
        load_trace_arg("splitwise:llama2-70b/h100-80gb-p/tp4")
    with pytest.raises(InputError, match="needs a group"):
        load_trace_arg("splitwise")


def test_compare_paired_differences_against_the_model_of_record():
    """The reference defaults to the model of record; every row's difference is the paired
    one of its out-of-fold predictions (protocol.paired_difference on the same clusters), the
    reference's row is 0 with no p, and a bad reference is refused by name."""
    from perfmodel.stats.protocol import paired_difference
    from perfmodel.stats.validation import fold_groups

    df = synthetic(n_cfg=30, reps=3)
    tab = compare(df, models=["seed_id", "seed_ctx_mono"], baselines=["linear"], k=3,
                  n_starts=1, in_sample=False, n_boot=200, seed=2)
    t = tab.set_index("name")
    assert tab.attrs["reference"] == "seed_ctx_mono"
    r = t.loc["seed_ctx_mono"]
    assert (r["diff_vs_ref"], r["diff_lo"], r["diff_hi"]) == (0, 0, 0) and np.isnan(r["p_vs_ref"])
    pred, y = tab.attrs["predictions"], df["duration_ms"].to_numpy()
    ref_err = np.abs(y - pred["seed_ctx_mono"].to_numpy()) / y
    for name in ("seed_id", "linear"):
        err = np.abs(y - pred[name].to_numpy()) / y
        want = paired_difference(err, ref_err, fold_groups(df), n_boot=200, seed=2)
        got = tuple(t.loc[name, ["diff_vs_ref", "diff_lo", "diff_hi", "p_vs_ref"]])
        assert got == pytest.approx(want)
        # every step predicted by both: the difference of the two MAPE columns
        assert got[0] == pytest.approx(t.loc[name, "MAPE"] - r["MAPE"])
        # the B,S-only forms are resolved worse than the true form
        assert got[1] > 0 and got[3] < 0.05
        assert t.loc[name, "MdAPE"] < t.loc[name, "MAPE"] and t.loc[name, "RMSLE"] > 0
    # without the model of record among the models: the first model; an explicit one
    assert compare(df, models=["seed_id"], baselines=["linear"], k=3, n_starts=1,
                   in_sample=False, n_boot=50).attrs["reference"] == "seed_id"
    alt = compare(df, models=["seed_id"], baselines=["linear"], k=3, n_starts=1,
                  in_sample=False, n_boot=50, reference="linear").set_index("name")
    assert alt.loc["linear", "diff_vs_ref"] == 0
    assert alt.loc["seed_id", "diff_vs_ref"] == pytest.approx(
        alt.loc["seed_id", "MAPE"] - alt.loc["linear", "MAPE"])
    with pytest.raises(InputError, match="reference 'poly2'"):
        compare(df, models=["seed_id"], baselines=["linear"], reference="poly2")


def test_cli_compare_writes_refuses_overwrite_and_emits_json(tmp_path, capsys):
    from perfmodel.cli.main import main

    trace = tmp_path / "t.csv"
    synthetic(n_cfg=30, reps=2).to_csv(trace, index=False)
    out = tmp_path / "table.csv"
    argv = ["compare", str(trace), "--models", "seed_id,seed_ctx_mono", "--baselines",
            "linear", "-k", "3", "--starts", "2", "-o", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "seed_ctx_mono" in text and "noise floor (configuration repeats)" in text
    tab = pd.read_csv(out)
    assert list(tab["name"]) == ["seed_id", "seed_ctx_mono", "linear"]
    before = out.read_text()
    assert main(argv) == 2  # exists, no --force
    assert "exists" in capsys.readouterr().err and out.read_text() == before
    assert main(argv + ["--force", "--json", "--cv", "extrapolate"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["cv"] == "extrapolate" and len(obj["rows"]) == 3
    assert obj["noise_floor"]["kind"] == "configuration repeats"
    assert obj["noise_floor_reason"] is None
    assert obj["reference"] == "seed_ctx_mono"
    rows = {r["name"]: r for r in obj["rows"]}
    assert rows["seed_ctx_mono"]["diff_vs_ref"] == 0 and rows["seed_ctx_mono"]["p_vs_ref"] is None
    assert rows["linear"]["diff_lo"] <= rows["linear"]["diff_vs_ref"] <= rows["linear"]["diff_hi"]
    assert np.isfinite(rows["linear"]["MdAPE"]) and np.isfinite(rows["linear"]["RMSLE"])
    assert main(["compare", str(trace), "--models", "seed_id", "--baselines", "linear",
                 "--reference", "forest", "-o", str(tmp_path / "y.csv")]) == 2
    assert "reference 'forest'" in capsys.readouterr().err
    assert not (tmp_path / "y.csv").exists()
    assert main(["compare", str(trace), "--models", "bogus", "-o", str(tmp_path / "x.csv")]) == 2
    assert "unknown models" in capsys.readouterr().err



@pytest.mark.parametrize("drop_config", [False, True])
def test_cli_compare_without_replicates_says_the_floor_is_not_available(tmp_path, capsys,
                                                                        drop_config):
    from perfmodel.cli.main import main

    d = synthetic(n_cfg=30, reps=1)  # every configuration once: nothing repeated
    if drop_config:
        d = d.drop(columns="config")
    trace = tmp_path / "t.csv"
    d.to_csv(trace, index=False)
    argv = ["compare", str(trace), "--models", "seed_id", "--baselines", "linear", "-k", "3",
            "--starts", "2", "-o", str(tmp_path / "table.csv")]
    assert main(argv) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert "noise floor: not available (the trace has no replicate steps" in head
    assert "(none)" not in head and not head.endswith("none")
    assert main([*argv, "--force", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["noise_floor"] is None
    assert obj["noise_floor_reason"].startswith("the trace has no replicate steps")
    assert obj["noise_floor_reason"] in head
    assert all(r["ratio_to_floor"] is None for r in obj["rows"])

# ---------------------------------------------------------------------------
# the context-aware members
# ---------------------------------------------------------------------------
def _feats(n=80, seed=0):
    df = synthetic(n_cfg=n, reps=1, seed=seed)
    return step_features(df)


@pytest.mark.parametrize("name", NEW)
def test_new_member_jacobian_by_complex_step(name):
    m = get_model(name)
    f = m.check_features(_feats())
    rng = np.random.default_rng(4)
    y = 3 + 0.01 * f["S"]
    for _ in range(4):
        th = m.clip(m.initial_guess(f, y) * np.exp(rng.uniform(-1.5, 1.5, m.n_params)))
        J = m.jacobian(th, f)
        for i in range(m.n_params):
            e = np.zeros(m.n_params, complex)
            e[i] = 1e-30j
            num = np.imag(m._predict(th + e, f)) / 1e-30
            scale = np.max(np.abs(num)) + 1e-300
            assert np.max(np.abs(J[:, i] - num)) / scale < 1e-10, (name, m.param_names[i])


@pytest.mark.parametrize("name", ["seed_kv", "seed_attn", "seed_attn_kv"])
def test_new_member_nests_seed_id(name):
    m, sid = get_model(name), get_model("seed_id")
    f = _feats()
    th_id = dict(zip(sid.param_names, sid.initial_guess(sid.check_features(f), 3 + 0.01 * f["S"])))
    th = [th_id.get(p, 0.0) for p in m.param_names]
    np.testing.assert_allclose(m.predict(th, f), sid.predict(th_id, f), rtol=1e-13)


def test_new_members_are_registered_with_units_and_readings():
    for name in NEW:
        m = MODELS[name]
        assert m.formula and all(p.unit and p.description for p in m.params)
        assert np.all(m.lower >= 0) and np.all(m.lower < m.upper)
    mono = get_model("seed_ctx_mono")
    assert "a_0" not in mono.param_names
    with pytest.raises(InputError, match="chunk_sizes"):
        mono.predict(np.ones(9), {"B": np.ones(2), "S": np.ones(2)})


def test_no_overflow_for_huge_steps():
    f = {"B": np.array([1.0, 1e4, 1e6]), "S": np.array([1.0, 1e7, 1e9]),
         "attn_prefill": np.array([0.0, 1e12, 1e15]), "decode_ctx": np.array([0.0, 1e8, 1e10]),
         "ctx_sum": np.array([0.0, 1e8, 1e10])}
    for name in NEW:
        m = get_model(name)
        th = m.initial_guess(f, np.array([1.0, 10.0, 100.0]))
        with np.errstate(over="raise", invalid="raise", divide="raise"):
            t, J = m.predict(th, f), m.jacobian(th, f)
        assert np.all(np.isfinite(t)) and np.all(np.isfinite(J)) and np.all(t > 0)


# Monotonicity of the recommended member over its fitted parameter box: each parameter from
# its lower bound to twice the largest value fitted on the real datasets (capped at the upper
# bound), log-uniform, plus the bound itself.  Largest fitted values, all steps, relative='log'
# (scripts/evaluate_all.py, adequacy_summary.csv: 8 Splitwise groups, Vidur, data/gpu).
FITTED_MAX = {"tau_0": 3.209, "a_1": 0.3746, "k_B": 674.4, "k_S": 0.008362, "tau_B": 0.3189,
              "tau_S": 0.08524, "c_attn": 2.227e-05, "c_kv": 3.802e-4, "c_kv_mixed": 2.127e-3}


def _box():
    m = get_model("seed_ctx_mono")
    lo = dict(zip(m.param_names, m.lower))
    parts = []
    for nm in m.param_names:
        hi = min(2 * FITTED_MAX[nm], float(m.upper[m.param_names.index(nm)]))
        a = max(lo[nm], hi * 1e-8)
        parts.append(st.one_of(st.just(lo[nm]), st.floats(np.log(a), np.log(hi)).map(np.exp)))
    return st.tuples(*parts)


@st.composite
def _step_and_token(draw):
    B = draw(st.integers(1, 64))
    chunks = [draw(st.sampled_from([1, 1, 2, 17, 128, 900, 4000])) for _ in range(B)]
    ctx = [draw(st.integers(0, 8192)) for _ in range(B)]
    i = draw(st.integers(0, B - 1))
    how = draw(st.sampled_from(["token", "context"]))
    c2, x2 = list(chunks), list(ctx)
    if how == "token":
        c2[i] += 1  # grows a chunk, or turns a decode into a 2-token chunk
    else:
        x2[i] += 1
    return chunks, ctx, c2, x2


def _frame(rows):
    return pd.DataFrame({"batch_size": [len(c) for c, _ in rows],
                         "total_tokens": [sum(c) for c, _ in rows],
                         "chunk_sizes": [";".join(map(str, c)) for c, _ in rows],
                         "context_lens": [";".join(map(str, x)) for _, x in rows]})


@settings(max_examples=300, deadline=None)
@given(theta=_box(), step=_step_and_token())
def test_recommended_member_never_falls_when_a_token_is_added(theta, step):
    """seed_ctx_mono: T(step + one token) >= T(step) at fixed B, over the fitted box."""
    c, x, c2, x2 = step
    m = get_model("seed_ctx_mono")
    t = m.predict(np.array(theta), step_features(_frame([(c, x), (c2, x2)])))
    assert t[1] >= t[0] * (1 - 1e-12)


def test_seed_attn_can_fall_when_a_decode_becomes_a_chunk():
    """The counterexample the recommended member avoids (so the property test can fail)."""
    m = get_model("seed_attn")
    th = {"tau_0": 2.6, "a_0": 0.0, "a_1": 0.0055, "k_B": 2.0, "k_S": 0.004, "a_attn": 5e-7,
          "tau_B": 0.01,
              "tau_S": 1e-4, "c_kv": 1.2e-5}
    f = step_features(_frame([([512, 1], [0, 8000]), ([512, 2], [0, 8000])]))
    t = m.predict(th, f)
    assert t[1] < t[0]


def test_grouped_cv_on_a_time_ordered_trace_uses_contiguous_folds():
    """Blocked folds: each test fold is one stretch of time, and little training is purged."""
    from perfmodel.stats.compare import _splits

    rng = np.random.default_rng(0)
    n = 600
    df = pd.DataFrame({"step": np.arange(n), "batch_size": rng.integers(1, 64, n),
                       "total_tokens": rng.permutation(np.arange(64, 64 + n)),  # no repeats
                       "duration_ms": rng.uniform(5, 50, n)})
    splits = _splits(df, "grouped", 3, 0, 0.8, None)
    assert len(splits) == 3
    for train, test in splits:
        t = np.sort(df["step"].to_numpy()[test])
        assert t[-1] - t[0] + 1 == t.size                 # one contiguous stretch
        assert train.size >= n - t.size - 2 * 24          # only the neighbours are purged


def test_compare_routes_the_trained_roofline_and_recovers_roofline_steps():
    """Steps generated from a known roofline (overhead + the slower of compute and memory): the
    trained roofline, given the model's shape through ``baseline_kwargs``, predicts the held-out
    configurations exactly and beats the other baselines; without per-request lists it is
    skipped, like every context-aware candidate."""
    from perfmodel.stats.baselines import TrainedRoofline

    cfg = {"hidden_size": 64, "intermediate_size": 256, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
           "vocab_size": 1000}
    base = _steps(60, np.random.default_rng(3))
    F, M = TrainedRoofline(model_config=cfg)._design(base, None).T
    pi, beta = np.median(F / M) * 1e6, 1e6  # the ridge inside the data
    df = base.assign(duration_ms=0.5 + np.maximum(F / pi, M / beta))
    kw = {"trained_roofline": {"model_config": cfg}}
    t = compare(df, models=[], baselines=["trained_roofline", "linear"], k=3, in_sample=False,
                baseline_kwargs=kw, n_boot=50).set_index("name")
    assert t.loc["trained_roofline", "status"] == "ok"
    assert t.loc["trained_roofline", "MAPE"] < 1e-4 < t.loc["linear", "MAPE"]
    t2 = compare(df.drop(columns=["chunk_sizes", "context_lens"]), models=[],
                 baselines=["trained_roofline", "linear"], k=3, in_sample=False,
                 baseline_kwargs=kw, n_boot=50).set_index("name")
    assert t2.loc["trained_roofline", "status"].startswith("skipped: needs per-request")


def test_in_sample_stats_is_compares_in_sample_row_and_detects_lack_of_fit():
    """in_sample_stats gives compare's in-sample columns for one candidate; on replicated data
    from the true model the lack-of-fit test does not reject, for a line it rejects."""
    from perfmodel.stats.compare import in_sample_stats, make_candidate

    df = synthetic(n_cfg=60, reps=3)
    tab = compare(df, models=["seed_ctx_mono"], baselines=["linear"], k=2, n_starts=2,
                  seed=0).set_index("name")
    for name, make in (("seed_ctx_mono", lambda: make_candidate("seed_ctx_mono", "model", n_starts=2,
                                                                seed=0)),
                       ("linear", lambda: make_candidate("linear", "baseline"))):
        row = in_sample_stats(df, make)
        for col in ("mape_in", "aic", "lof_F", "lof_p", "lof_sd_ratio", "lof_sd_lo", "lof_sd_hi"):
            assert row[col] == pytest.approx(tab.loc[name, col], rel=1e-6, abs=1e-12), (name, col)
    truth = in_sample_stats(df, lambda: make_candidate("seed_ctx_mono", "model", n_starts=2, seed=0))
    line = in_sample_stats(df, lambda: make_candidate("linear", "baseline"))
    assert truth["lof_p"] > 0.01 and line["lof_p"] < 1e-6 and line["lof_F"] > 10 * truth["lof_F"]
    # the effect size comes with its interval, which holds it; the line's excludes zero
    for r in (truth, line):
        assert r["lof_sd_lo"] <= r["lof_sd_ratio"] <= r["lof_sd_hi"]
    assert line["lof_sd_lo"] > 0 and truth["lof_sd_lo"] == 0.0
    with pytest.raises(InputError, match="duration_ms"):
        in_sample_stats(df.drop(columns="duration_ms"), lambda: make_candidate("linear", "baseline"))
    with pytest.raises(InputError, match="make must be a callable"):
        in_sample_stats(df, "linear")
