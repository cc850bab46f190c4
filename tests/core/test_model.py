"""The model family: Jacobians, stability, identifiability mapping, monotonicity."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.core.model import MODELS, get_model
from perfmodel.errors import InputError

RNG = np.random.default_rng(0)
B = RNG.integers(1, 129, 60).astype(float)
S = B + RNG.integers(0, 4000, 60)
FEATS = {"B": B, "S": S, "attn_prefill": S * 37.0, "decode_ctx": B * 300.0, "ctx_sum": B * 300.0}


def _theta(m, rng):
    base = m.initial_guess(FEATS, 8 + 0.04 * S)
    return m.clip(base * np.exp(rng.uniform(-1, 1, m.n_params)))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_jacobian_matches_central_differences(name):
    m = get_model(name)
    rng = np.random.default_rng(1)
    for _ in range(5):
        th = _theta(m, rng)
        J = m.jacobian(th, FEATS)
        f = m.check_features(FEATS)
        for i in range(m.n_params):
            # complex-step derivative: exact to rounding, no cancellation
            h = 1e-30
            e = np.zeros(m.n_params, complex)
            e[i] = 1j * h
            num = np.imag(m._predict(th + e, f)) / h
            scale = np.max(np.abs(num)) + 1e-300
            assert np.max(np.abs(J[:, i] - num)) / scale < 1e-10, (name, m.param_names[i])


@pytest.mark.parametrize("name", sorted(MODELS))
def test_no_overflow_for_huge_steps(name):
    m = get_model(name)
    th = _theta(m, np.random.default_rng(2))
    f = {"B": np.array([1.0, 1e4, 1e6]), "S": np.array([1.0, 1e7, 1e9]),
         "attn_prefill": np.array([0.0, 1e12, 1e15]), "decode_ctx": np.array([0.0, 1e8, 1e10]),
         "ctx_sum": np.array([0.0, 1e8, 1e10])}
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        t = m.predict(th, f)
        J = m.jacobian(th, f)
    assert np.all(np.isfinite(t)) and np.all(np.isfinite(J)) and np.all(t > 0)


def test_seed_is_not_identifiable_and_maps_to_seed_id():
    seed, sid = get_model("seed"), get_model("seed_id")
    th = np.array([20.0, 0.3, 0.02, 30.0, 1.0, 5.0, 0.05, 0.002])
    scaled = th.copy()
    scaled[[0, 3, 4]] *= 7.5  # P_max, w_0, w_1 by one factor
    np.testing.assert_allclose(seed.predict(th, FEATS), seed.predict(scaled, FEATS), rtol=1e-12)
    np.testing.assert_allclose(seed.predict(th, FEATS), sid.predict(seed.to_identifiable(th), FEATS),
                               rtol=1e-12)
    back = seed.from_identifiable(seed.to_identifiable(th), p_max=th[0])
    np.testing.assert_allclose(back, th, rtol=1e-12)
    # the 8x8 Gauss-Newton matrix is singular: rank 7
    J = seed.jacobian(th, FEATS)
    assert np.linalg.matrix_rank(J / np.linalg.norm(J, axis=0)) == 7


def test_seed_gamma_reduces_to_seed_id():
    th = get_model("seed_id").initial_guess(FEATS, 8 + 0.04 * S)
    g = np.concatenate([th[:5], [0.0, 0.0], th[5:]])
    np.testing.assert_allclose(get_model("seed_gamma").predict(g, FEATS),
                               get_model("seed_id").predict(th, FEATS), rtol=1e-12)


def test_bad_theta_and_missing_features_are_named():
    m = get_model("seed_id")
    with pytest.raises(InputError, match="7 parameters"):
        m.predict([1.0, 2.0], FEATS)
    with pytest.raises(InputError, match="missing parameters"):
        m.predict({"tau_0": 1.0}, FEATS)
    with pytest.raises(InputError, match="chunk_sizes"):
        get_model("seed_ctx").predict(np.ones(9), {"B": B, "S": S})
    with pytest.raises(InputError, match="unknown model"):
        get_model("nope")


box = st.tuples(*[st.floats(1e-6, 50.0), st.floats(0.0, 50.0), st.floats(0.0, 1.0),
                  st.floats(1e-3, 5.0), st.floats(1e-5, 1.0), st.floats(0.0, 1.0),
                  st.floats(0.0, 0.1)])


@settings(max_examples=150, deadline=None)
@given(theta=box, b=st.integers(1, 512), s=st.integers(1, 100_000))
def test_predictions_positive_and_finite_over_box(theta, b, s):
    t = get_model("seed_id").predict(np.array(theta), {"B": np.array([b]), "S": np.array([s])})
    assert np.isfinite(t[0]) and t[0] > 0


@settings(max_examples=150, deadline=None)
@given(theta=box, b=st.integers(1, 512))
def test_monotone_in_s_when_no_fixed_work(theta, b):
    """With a_0 = 0, (a_1 S)/(1-e^{-k_S S}) is increasing in S: T is non-decreasing in S."""
    th = np.array(theta)
    th[1] = 0.0
    s = np.arange(1, 3000, dtype=float)
    t = get_model("seed_id").predict(th, {"B": np.full_like(s, b), "S": s})
    assert np.all(np.diff(t) >= -1e-9 * np.abs(t[1:]))


@settings(max_examples=100, deadline=None)
@given(theta=box, b=st.integers(1, 512))
def test_rising_branch_is_rising(theta, b):
    """From rising_from on, T never decreases in S (the SLA search relies on it)."""
    m = get_model("seed_id")
    th = np.array(theta)
    s0 = m.rising_from(th, b, s_max=1e5)
    s = np.arange(s0, s0 + 5000, dtype=float)
    t = m.predict(th, {"B": np.full_like(s, b), "S": s})
    assert np.all(np.diff(t) >= -1e-9 * np.abs(t[1:]))


@settings(max_examples=100, deadline=None)
@given(theta=box, s=st.integers(1, 100_000))
def test_non_increasing_in_b_without_per_request_cost(theta, s):
    """With tau_B = 0 the saturation factor only helps: T is non-increasing in B."""
    th = np.array(theta)
    th[5] = 0.0
    b = np.arange(1, 600, dtype=float)
    t = get_model("seed_id").predict(th, {"B": b, "S": np.full_like(b, s)})
    assert np.all(np.diff(t) <= 1e-9 * np.abs(t[1:]))


# ---------------------------------------------------------------------------
# the registry: members, recommendation, no import cycle
# ---------------------------------------------------------------------------

def test_registry_holds_every_member_in_order():
    from perfmodel.core import model_base, models_ctx, models_seed

    assert list(MODELS) == ["seed", "seed_id", "seed_gamma", "seed_ctx", "seed_kv", "seed_attn",
                            "seed_attn_kv", "seed_ctx_mono", "seed_ctx_mono_nokb",
                            "seed_ctx_mono_noks"]
    assert list(MODELS.values()) == [*models_seed.MEMBERS, *models_ctx.MEMBERS]
    assert all(isinstance(m, model_base.Model) for m in MODELS.values())
    assert get_model(MODELS["seed_id"]) is MODELS["seed_id"]
    with pytest.raises(InputError, match="unknown model 'nope'; known models"):
        get_model("nope")


def test_recommended_and_default_for():
    import pandas as pd

    from perfmodel.core.model import RECOMMENDED, default_for

    assert dict(RECOMMENDED) == {"context": "seed_ctx_mono", "no_context": "seed_id"}
    assert set(RECOMMENDED.values()) <= set(MODELS)
    with pytest.raises(TypeError):
        RECOMMENDED["context"] = "seed_id"  # read-only
    bs = pd.DataFrame({"batch_size": [1, 2], "total_tokens": [3, 4]})
    ctx = bs.assign(chunk_sizes=["3", "3;1"], context_lens=["0", "5;9"])
    assert default_for(bs) == "seed_id"
    assert default_for(ctx) == "seed_ctx_mono"
    assert default_for(ctx.assign(context_lens=["0", None])) == "seed_id"  # not on every row


def test_no_import_cycle_in_the_model_layer():
    """model_base, models_seed and models_ctx never import the registry perfmodel.core.model."""
    import ast
    from importlib.util import find_spec
    from pathlib import Path

    for name in ("perfmodel.core.model_base", "perfmodel.core.models_seed", "perfmodel.core.models_ctx",
                 "perfmodel.data.features"):
        tree = ast.parse(Path(find_spec(name).origin).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0, name  # the package imports absolutely
                assert node.module != "perfmodel.core.model", name
                assert node.module != "perfmodel" or all(a.name != "model" for a in node.names), name
            elif isinstance(node, ast.Import):
                assert all(a.name != "perfmodel.core.model" for a in node.names), name


def test_the_registry_is_complete_on_first_import():
    import subprocess
    import sys

    code = ("from perfmodel.core.model import get_model; import sys; "
            "print(get_model('seed_ctx_mono').n_params, 'perfmodel.core.model' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["9", "True"]
    code = "import perfmodel.core.models_ctx, sys; print('perfmodel.core.model' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("notebook", ["07_sla_and_sensitivity", "09_capacity_simulation"])
def test_decision_notebooks_fit_the_model_of_record(notebook):
    """The SLA, token budget and capacity simulation fit the model of record, never a member
    named by hand (the other members are labelled alternatives only)."""
    import json
    import re
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "notebooks" / f"{notebook}.ipynb"
    if not path.exists():
        pytest.skip(f"{path.name} is not in this checkout")
    cells = json.loads(path.read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    assert "default_for(df)" in code
    named = re.findall(r"fit_model\([^,()]+,\s*['\"](\w+)['\"]", code)
    assert named == [], f"{notebook} fits {named} by name"


def test_the_ablations_are_the_record_with_one_saturation_factor_at_its_limit():
    # seed_ctx_mono with k_B (k_S) so large that u(B) = 1 (v(S) = 1) to double precision
    # predicts what the ablation predicts with the other parameters equal
    import numpy as np

    from perfmodel.stats.compare import DEFAULT_MODELS

    rec = MODELS["seed_ctx_mono"]
    rng = np.random.default_rng(3)
    n = 50
    f = {"B": rng.integers(1, 64, n).astype(float), "S": rng.integers(1, 4096, n).astype(float),
         "attn_prefill": rng.uniform(0, 1e3, n), "ctx_sum": rng.uniform(0, 1e3, n)}
    th = dict(zip(rec.param_names, rec.clip(rng.uniform(0.01, 1.0, len(rec.params)))))
    for name, k in (("seed_ctx_mono_nokb", "k_B"), ("seed_ctx_mono_noks", "k_S")):
        abl = MODELS[name]
        assert abl.ablation_of == "seed_ctx_mono" and name not in DEFAULT_MODELS
        assert k not in abl.param_names and len(abl.params) == len(rec.params) - 1
        limit = {**th, k: 100.0}       # 1 - exp(-100) == 1 in double precision (B, S >= 1)
        full = rec.predict(np.array([limit[p] for p in rec.param_names]), f)
        ab = abl.predict(np.array([th[p] for p in abl.param_names]), f)
        np.testing.assert_allclose(ab, full, rtol=1e-12)
        # and the Jacobian agrees with finite differences (the fitter relies on it)
        x = np.array([th[p] for p in abl.param_names])
        J = abl.jacobian(x, f)
        for j in range(x.size):
            h = 1e-5 * max(abs(x[j]), 1e-3)
            e = np.zeros_like(x)
            e[j] = h
            fd = (abl.predict(x + e, f) - abl.predict(x - e, f)) / (2 * h)
            np.testing.assert_allclose(J[:, j], fd, rtol=1e-5, atol=1e-9)
