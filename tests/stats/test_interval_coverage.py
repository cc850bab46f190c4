"""Per-regime coverage tally of prediction intervals, on hand-counted cases."""
import numpy as np
import pytest

from perfmodel.errors import InputError
from perfmodel.stats.interval_coverage import (
    calibrated_within_chance,
    consistent_with_level,
    coverage_by_regime,
    coverage_clusters,
    regime_masks,
    within_tolerance,
)
from perfmodel.stats.intervals import Interval

# six steps: measured y, predicted mu, and one interval per level
Y = np.array([1.0, 2.0, 3.0, 10.0, 20.0, 30.0])
MU = np.array([1.0, 2.0, 2.0, 12.0, 20.0, 40.0])
PHASE = ["decode-only", "decode-only", "mixed", "mixed", "prefill-heavy", "mixed"]
LENGTH = ["short", "short", "medium", "long", "long", "long"]
# level 0.8: [0.75 mu, 1.25 mu], relative width 0.5
LO8, HI8 = MU * 0.75, MU * 1.25
# level 0.9: lower bound -inf (one-sided), upper 1.1 * y except step 3 -> covers all but step 3
LO9, HI9 = np.full(6, -np.inf), np.where(np.arange(6) == 3, 9.0, Y * 1.1)


def test_regime_masks_orders_and_counts():
    m = regime_masks(PHASE, LENGTH, MU, long_ms=10)
    assert list(m) == ["all", "decode-only", "mixed", "prefill-heavy", "short", "medium",
                       "long", "predicted >= 10 ms"]
    assert [int(v.sum()) for v in m.values()] == [6, 2, 3, 1, 2, 1, 3, 3]
    assert list(regime_masks(PHASE)) == ["all", "decode-only", "mixed", "prefill-heavy"]
    assert "pred>=10ms" in regime_masks(PHASE, mu=MU, long_ms=10, long_label="pred>=10ms")


def test_coverage_by_regime_hand_counted():
    masks = regime_masks(PHASE, LENGTH, MU, long_ms=10)
    tab = coverage_by_regime(Y, MU, {0.8: (LO8, HI8), 0.9: Interval(0.9, "model", LO9, HI9, "", {})},
                             masks)
    # inside at 0.8: y in [0.75 mu, 1.25 mu]: 1 yes, 2 yes, 3 > 2.5 no, 10 in [9, 15] yes,
    # 20 yes, 30 in [30, 50] yes (bound included)
    inside8 = np.array([1, 1, 0, 1, 1, 1], bool)
    inside9 = np.array([1, 1, 1, 0, 1, 1], bool)
    got = tab.set_index(["regime", "level"])
    for reg, m in masks.items():
        assert got.loc[(reg, 0.8), "n"] == m.sum()
        assert got.loc[(reg, 0.8), "coverage"] == pytest.approx(inside8[m].mean())
        assert got.loc[(reg, 0.9), "coverage"] == pytest.approx(inside9[m].mean())
        assert got.loc[(reg, 0.8), "width"] == pytest.approx(0.5)  # 0.5 mu / mu everywhere
        assert got.loc[(reg, 0.9), "width"] == np.inf
    assert got.loc[("all", 0.8), "coverage"] == pytest.approx(5 / 6)
    assert got.loc[("mixed", 0.9), "coverage"] == pytest.approx(2 / 3)
    # regime-major rows in the order of masks, then levels
    assert list(tab["regime"][:4]) == ["all", "all", "decode-only", "decode-only"]
    assert list(tab["level"][:2]) == [0.8, 0.9]


def test_empty_regime_has_no_row():
    tab = coverage_by_regime(Y[:2], MU[:2], {0.8: (LO8[:2], HI8[:2])},
                             regime_masks(PHASE[:2], LENGTH[:2]))
    assert set(tab["regime"]) == {"all", "decode-only", "short"}
    assert (tab["coverage"] == 1.0).all()


@pytest.mark.parametrize("call, match", [
    (lambda: coverage_by_regime(Y, MU[:3], {0.8: (LO8, HI8)}, {}), "mu"),
    (lambda: coverage_by_regime(Y, MU, {}, {}), "bounds"),
    (lambda: coverage_by_regime(Y, MU, {1.5: (LO8, HI8)}, {}), "level"),
    (lambda: coverage_by_regime(Y, MU, {0.8: (LO8[:2], HI8)}, {}), "bounds"),
    (lambda: coverage_by_regime(Y, MU, {0.8: (LO8, HI8)}, {"x": np.ones(6)}), "masks"),
    (lambda: regime_masks(PHASE, LENGTH[:2]), "length"),
    (lambda: regime_masks(PHASE, long_ms=10), "mu"),
    (lambda: regime_masks(PHASE, mu=MU, long_ms=-1), "long_ms"),
])
def test_bad_input_raises(call, match):
    with pytest.raises(InputError, match=match):
        call()


def test_calibrated_within_chance_is_the_binomial_mass_inside_the_tolerance():
    from scipy import stats

    # 50 steps at level 0.8, tolerance 0.03: K/50 in [0.77, 0.83] <=> K in {39, 40, 41}
    direct = sum(stats.binom.pmf(k, 50, 0.8) for k in (39, 40, 41))
    assert calibrated_within_chance(50, 0.8, 0.03)[0] == pytest.approx(direct, rel=1e-12)
    # small cells rarely land within 3 points, large ones almost always
    p = calibrated_within_chance([50, 9000], [0.9, 0.9], 0.03)
    assert p[0] < 0.6 and p[1] > 0.999
    # and a simulation of calibrated cells agrees (2000 draws: s.e. about 0.011)
    rng = np.random.default_rng(0)
    sim = np.mean(np.abs(rng.binomial(200, 0.95, 2000) / 200 - 0.95) <= 0.03 + 1e-9)
    assert abs(sim - calibrated_within_chance(200, 0.95, 0.03)[0]) < 0.04


def test_consistent_with_level_is_the_exact_binomial_test():
    # 45 of 50 at 0.8: p = 0.09 (consistent at 5 %); 48 of 50: p < 0.01 (not)
    assert consistent_with_level([0.9, 0.96], [50, 50], 0.8).tolist() == [True, False]
    # the same share is consistent on few steps and not on many
    assert consistent_with_level(0.85, [40, 4000], [0.8, 0.8]).tolist() == [True, False]


def test_within_tolerance_counts_the_edge_as_within():
    # 0.77 at level 0.8 is 0.0300000000000000266 away in floating point: within
    assert within_tolerance([0.77, 0.769, 0.83, 0.831], 0.8, 0.03).tolist() == [
        True, False, True, False]
    assert within_tolerance(0.9, [0.8, 0.9, 0.95], 0.05).tolist() == [False, True, True]


def test_design_effect_of_a_cell_is_that_of_its_inside_indicators():
    from perfmodel.stats.uncertainty.clustering import intraclass_correlation

    rng = np.random.default_rng(3)
    n = 60
    y, mu = rng.lognormal(0, 0.2, n), np.ones(n)
    clusters = np.repeat(np.arange(12), 5)
    shift = np.repeat(rng.normal(0, 0.3, 12), 5)  # misses cluster: shared shift per cluster
    lo, hi = 0.8 + shift, 1.2 + shift
    masks = {"all": np.ones(n, bool), "half": np.arange(n) < 30}
    tab = coverage_by_regime(y, mu, {0.8: (lo, hi)}, masks, clusters=clusters)
    inside = (y >= lo) & (y <= hi)
    for reg, m in masks.items():
        want = intraclass_correlation(inside[m].astype(float), clusters[m]).design_effect
        assert tab.loc[tab.regime == reg, "design_effect"].item() == pytest.approx(want)
    assert "design_effect" not in coverage_by_regime(y, mu, {0.8: (lo, hi)}, masks).columns
    with pytest.raises(InputError, match="clusters"):
        coverage_by_regime(y, mu, {0.8: (lo, hi)}, masks, clusters=clusters[:-1])


def test_cluster_aware_reference_matches_clustered_simulation():
    # 40 clusters of 10 steps; each cluster's coverage ~ Beta with mean 0.9 and ICC 0.3
    # (design effect 1 + 9 * 0.3 = 3.7): the beta-binomial reference against 4000 draws
    rng = np.random.default_rng(1)
    g, m, p, icc = 40, 10, 0.9, 0.3
    s = 1 / icc - 1
    k = rng.binomial(m, rng.beta(p * s, (1 - p) * s, (4000, g))).sum(axis=1)
    sim = np.mean(np.abs(k / (g * m) - p) <= 0.03 + 1e-9)
    deff = 1 + (m - 1) * icc
    ref = calibrated_within_chance(g * m, p, 0.03, design_effect=deff)[0]
    assert abs(sim - ref) < 0.05  # moment match: 0.72 against 0.745 (s.e. 0.007)
    # independent steps would claim far more: the binomial reference is an upper bound
    assert calibrated_within_chance(g * m, p, 0.03)[0] > ref + 0.2
    assert calibrated_within_chance(g * m, p, 0.03, design_effect=1.0)[0] == pytest.approx(
        calibrated_within_chance(g * m, p, 0.03)[0], rel=1e-12)


def test_consistent_with_level_widens_with_the_design_effect():
    # 340 of 400 at 0.9: the binomial test rejects, with design effect 3.7 it does not
    assert consistent_with_level([0.85, 0.85], [400, 400], 0.9,
                                 design_effect=[1.0, 3.7]).tolist() == [False, True]
    # design effect 1 is scipy's binomtest
    from scipy import stats
    for k in (30, 36, 40, 44):
        assert consistent_with_level(k / 50, 50, 0.8, design_effect=1.0)[0] == (
            stats.binomtest(k, 50, 0.8).pvalue >= 0.05)


@pytest.mark.parametrize("call, match", [
    (lambda: calibrated_within_chance(0, 0.8, 0.03), "n must"),
    (lambda: calibrated_within_chance(10, 0.8, 0.03, design_effect=0.5), "design_effect"),
    (lambda: calibrated_within_chance(10, 0.8, 0.03, design_effect="x"), "design_effect"),
    (lambda: within_tolerance(1.2, 0.8, 0.03), "coverage"),
    (lambda: within_tolerance(0.8, 0.8, 0), "tolerance"),
    (lambda: within_tolerance(0.8, 1.0, 0.03), "level"),
    (lambda: calibrated_within_chance(10.5, 0.8, 0.03), "n must"),
    (lambda: calibrated_within_chance(10, 1.2, 0.03), "level"),
    (lambda: calibrated_within_chance(10, 0.8, -0.1), "tolerance"),
    (lambda: calibrated_within_chance([10, 20], [0.8, 0.9, 0.95], 0.03), "do not match"),
    (lambda: consistent_with_level(1.5, 10, 0.8), "coverage"),
    (lambda: consistent_with_level(0.5, 10, 0.8, alpha=2), "alpha"),
])
def test_sampling_reference_bad_input_raises(call, match):
    with pytest.raises(InputError, match=match):
        call()


def test_coverage_clusters_are_configurations_else_time_blocks():
    import pandas as pd

    df = pd.DataFrame({"batch_size": [1, 2, 1, 2], "total_tokens": [1, 2, 1, 2],
                       "duration_ms": [1.0, 2.0, 1.0, 2.0], "step": [0, 1, 2, 3]})
    assert coverage_clusters(df, block=2).tolist() == ["block:0", "block:0", "block:1",
                                                       "block:1"]
    cfg = df.assign(config=["a", "b", "a", "b"])
    assert coverage_clusters(cfg).tolist() == ["config:a", "config:b", "config:a", "config:b"]
    with pytest.raises(InputError, match="DataFrame"):
        coverage_clusters([1, 2])


# --- interval_check: the coverage `perfmodel predict --interval` reports on measured steps ---

def _checked(level, lo, hi, regime=None, **cols):
    import pandas as pd

    from perfmodel.stats.interval_coverage import interval_check

    df = pd.DataFrame({"duration_ms": Y, "config": [f"c{i}" for i in range(6)], **cols})
    iv = Interval(level, "conformal", lo, hi, "", {}, None, regime)
    return interval_check(df, MU, iv).set_index("regime")


def test_interval_check_hand_counted():
    reg = np.array([f"{p}|{ln}" for p, ln in zip(PHASE, LENGTH)], dtype=object)
    tab = _checked(0.8, LO8, HI8, reg)
    assert list(tab.index) == ["all", "decode-only", "mixed", "prefill-heavy", "short",
                               "medium", "long"]
    assert tab.loc["all", "n"] == 6 and tab.loc["all", "coverage"] == pytest.approx(5 / 6)
    # one configuration per step: no design effect, the binomial s.e.
    assert tab.loc["all", "design_effect"] == pytest.approx(1.0)
    assert tab.loc["all", "se"] == pytest.approx(np.sqrt(0.8 * 0.2 / 6))
    # 5/6 is 0.033 from 0.8: outside 3 points, yet 5 of 6 is no evidence against 0.8
    assert not tab.loc["all", "within_tolerance"] and tab.loc["all", "consistent"]
    assert tab.loc["medium", "coverage"] == 0.0 and not tab.loc["medium", "within_tolerance"]
    assert tab.loc["long", "width"] == pytest.approx(0.5)
    # p_within: no count of 6 steps is within 0.03 of 0.8 (4/6 = 0.667, 5/6 = 0.833), so even
    # a calibrated interval cannot pass on these six
    assert tab.loc["all", "p_within"] == 0.0


def test_p_within_of_independent_steps_is_the_binomial_mass_inside_the_tolerance():
    # 20 steps, each its own configuration (design effect 1): at 0.8 only 16 of 20 covered is
    # within 0.03 (15/20 = 0.75, 17/20 = 0.85), so p_within = P(K = 16), K ~ Binomial(20, 0.8)
    import pandas as pd

    from perfmodel.stats.interval_coverage import interval_check

    n = 20
    mu = np.full(n, 10.0)
    y = np.where(np.arange(n) < 15, 10.0, 20.0)  # 15 inside [5, 15], 5 outside
    df = pd.DataFrame({"duration_ms": y, "config": [f"c{i}" for i in range(n)]})
    iv = Interval(0.8, "conformal", mu / 2, mu * 1.5, "", {}, None,
                  np.array(["decode-only|short"] * n, dtype=object))
    tab = interval_check(df, mu, iv).set_index("regime")
    assert tab.loc["all", "design_effect"] == pytest.approx(1.0)
    assert tab.loc["all", "p_within"] == pytest.approx(0.8 ** 16 * 0.2 ** 4 * 4845, rel=1e-9)
    assert tab.loc["all", "coverage"] == 0.75 and not tab.loc["all", "within_tolerance"]


def test_check_summary_counts_cells_and_sets_them_against_a_calibrated_interval():
    import pandas as pd

    from perfmodel.stats.interval_coverage import check_summary

    tab = pd.DataFrame({"regime": ["all", "decode-only", "mixed", "short"],
                        "within_tolerance": [False, True, False, True],
                        "consistent": [False, True, True, True],
                        "p_within": [0.5, 0.6041, 0.7, 0.9]})
    line = check_summary(tab)
    # 'all' is not a regime cell; 0.6041 + 0.7 + 0.9 = 2.2 -> about 2; all three within: at
    # most the least likely cell's 0.6041, rounded UP (the 0.5 of 'all' is not a cell)
    assert line == ("regime x level cells within 0.03: 2 of 3 (a calibrated interval: about 2 "
                    "expected, and all 3 with a chance of at most 0.61, sampling alone); "
                    "consistent with the level: 3 of 3")
    assert "chance" not in check_summary(tab.iloc[:1])  # no cell: no chance to state
    with pytest.raises(InputError, match="interval_check table"):
        check_summary(tab.drop(columns="p_within"))


def test_all_cells_within_is_no_likelier_than_the_least_likely_cell():
    """The bound of check_summary holds on a simulated calibrated interval whose cells share
    steps (the phase and length cells of the same steps)."""
    rng = np.random.default_rng(3)
    n, level, reps = 300, 0.8, 4000
    phase = np.arange(n) % 2 == 0  # two phase cells and, across them, two length cells
    length = np.arange(n) < 120
    cells = [phase, ~phase, length, ~length]
    p_cell = [float(calibrated_within_chance([int(m.sum())], level, 0.03)[0]) for m in cells]
    inside = rng.random((reps, n)) < level
    all_within = np.all([np.abs(inside[:, m].mean(axis=1) - level) <= 0.03 + 1e-12
                         for m in cells], axis=0)
    assert all_within.mean() <= min(p_cell) + 3 * np.sqrt(min(p_cell) / reps)
    assert all_within.mean() < 0.5 * min(p_cell)  # and well below it here: a bound, not a value


@pytest.mark.parametrize("n", [50, 189, 900, 9000])
def test_a_design_effect_a_rounding_error_above_one_is_the_binomial(n):
    """An intraclass correlation of ~1e-16 (float noise of a cell without clustering) once
    reached scipy's beta-binomial with beta parameters of 1e15: it overflowed, and a cell a
    calibrated interval lands within almost surely got chance 0."""
    import warnings

    binomial = calibrated_within_chance([n], 0.9, 0.03)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for excess in (1e-15, 1e-13, 1e-10):
            got = calibrated_within_chance([n], 0.9, 0.03, design_effect=[1 + excess])
            assert got == pytest.approx(binomial, abs=1e-6)
            assert consistent_with_level([0.9], [n], [0.9], design_effect=[1 + excess])[0]
    # a real design effect still widens the reference
    assert calibrated_within_chance([n], 0.9, 0.03, design_effect=[3.0]) < binomial


def test_the_binomial_threshold_moves_no_chance_materially():
    """Just below and just above the intra-cell correlation taken as binomial, the chance a
    calibrated interval lands within the tolerance is the same to 1e-3 (n = 9000, where the
    threshold's design effect is largest)."""
    from perfmodel.stats.interval_coverage import _RHO_BINOMIAL

    n = 9000
    below, above = (1 + f * _RHO_BINOMIAL * (n - 1) for f in (0.99, 1.01))
    for level in (0.8, 0.9, 0.95):
        lo, hi = (calibrated_within_chance([n], level, 0.01, design_effect=[d])[0]
                  for d in (below, above))
        assert abs(lo - hi) < 1e-3


@pytest.mark.parametrize("value, side, text", [(0.3641, "upper", "0.37"),
                                               (0.9781, "lower", "0.97"),
                                               (0.31, "upper", "0.31"), (0.31, "lower", "0.31"),
                                               (0.0, "lower", "0.00"), (1.0, "upper", "1.00")])
def test_bound_text_rounds_outwards_so_the_printed_bound_holds(value, side, text):
    from perfmodel.stats.interval_coverage import bound_text

    assert bound_text(value, side) == text


@pytest.mark.parametrize("value, side, text", [(0.999999, "upper", "1.00"),
                                               (0.999999, "lower", "0.99"),
                                               (-1e-12, "lower", "0.00"),
                                               (1 + 1e-12, "upper", "1.00")])
def test_bound_text_at_the_ends_of_a_chance(value, side, text):
    from perfmodel.stats.interval_coverage import bound_text

    assert bound_text(value, side) == text


@pytest.mark.parametrize("kwargs, needle", [({"value": 0.5, "side": "middle"}, "side"),
                                            ({"value": float("nan"), "side": "upper"}, "value"),
                                            ({"value": float("inf"), "side": "upper"}, "value"),
                                            ({"value": -0.01, "side": "lower"}, "chance"),
                                            ({"value": 1.2, "side": "upper"}, "chance"),
                                            ({"value": 0.5, "side": "upper", "digits": 9},
                                             "digits")])
def test_bound_text_refuses_what_is_not_a_chance(kwargs, needle):
    from perfmodel.stats.interval_coverage import bound_text

    with pytest.raises(InputError, match=needle):
        bound_text(**kwargs)


def test_inside_interval_counts_the_edges_and_open_bounds_as_inside():
    from perfmodel.stats.interval_coverage import inside_interval, measured_times

    got = inside_interval([1.0, 2.0, 3.0, 4.0, np.nan], [1.0, -np.inf, 3.5, 0.0, 0.0],
                          [1.0, 1.5, 4.0, np.inf, 9.0])
    assert got.tolist() == [True, False, False, True, False]
    assert measured_times([1.0, 0.0, -2.0, np.nan, np.inf]).tolist() == [True] + [False] * 4


def test_interval_check_leaves_out_steps_without_a_measured_time():
    y = Y.copy()
    y[2] = np.nan  # the one step of LO8/HI8 outside the interval
    import pandas as pd

    from perfmodel.stats.interval_coverage import interval_check

    df = pd.DataFrame({"duration_ms": y, "config": list("abcdef")})
    reg = np.array([f"{p}|{ln}" for p, ln in zip(PHASE, LENGTH)], dtype=object)
    tab = interval_check(df, MU, Interval(0.8, "conformal", LO8, HI8, "", {}, None, reg))
    tab = tab.set_index("regime")
    assert tab.loc["all", "n"] == 5 and tab.loc["all", "coverage"] == 1.0
    assert "medium" not in tab.index  # its only step has no measured time


def test_interval_check_of_the_model_band_has_phases_only():
    import pandas as pd

    from perfmodel.stats.interval_coverage import interval_check

    # phases by the rule of perfmodel.stats.scores.regime: B = 1 decode step, a prefill chunk
    df = pd.DataFrame({"duration_ms": [1.0, 5.0], "batch_size": [4, 1],
                       "total_tokens": [4, 512], "config": ["a", "b"]})
    iv = Interval(0.9, "model", np.array([0.5, 1.0]), np.array([2.0, 4.0]), "", {})
    tab = interval_check(df, np.array([1.0, 2.0]), iv).set_index("regime")
    assert list(tab.index) == ["all", "decode-only", "prefill-heavy"]
    assert tab.loc["all", "coverage"] == 0.5 and tab.loc["prefill-heavy", "coverage"] == 0.0


def test_interval_check_known_truth_flags_the_regime_that_misses():
    # log errors N(0, 0.1); the interval mu * exp(+-z 0.1) is exact (0.9) on decode steps
    # and too narrow (half as wide: about 0.59) on mixed ones; 20 steps per time block
    import pandas as pd
    from scipy import stats

    from perfmodel.stats.interval_coverage import interval_check

    rng = np.random.default_rng(3)
    n = 4000
    mu = np.full(n, 10.0)
    y = mu * np.exp(0.1 * rng.standard_normal(n))
    phase = np.where(np.arange(n) % 2 == 0, "decode-only", "mixed")
    half = stats.norm.ppf(0.95) * 0.1 * np.where(phase == "mixed", 0.5, 1.0)
    iv = Interval(0.9, "conformal", mu * np.exp(-half), mu * np.exp(half), "", {}, None,
                  np.array([f"{p}|short" for p in phase], dtype=object))
    df = pd.DataFrame({"duration_ms": y, "config": [f"b{i // 20}" for i in range(n)]})
    tab = interval_check(df, mu, iv).set_index("regime")
    assert tab.loc["decode-only", "within_tolerance"] and tab.loc["decode-only", "consistent"]
    assert abs(tab.loc["mixed", "coverage"] - 0.59) < 0.04
    assert not tab.loc["mixed", "within_tolerance"] and not tab.loc["mixed", "consistent"]


@pytest.mark.parametrize("df, match", [
    ({"batch_size": [1] * 6}, "duration_ms"),
    ({"duration_ms": [np.nan, 0, -1, np.nan, 0, 0]}, "nothing to check"),
])
def test_interval_check_bad_input_raises(df, match):
    import pandas as pd

    from perfmodel.stats.interval_coverage import interval_check

    with pytest.raises(InputError, match=match):
        interval_check(pd.DataFrame(df), MU, Interval(0.8, "model", LO8, HI8, "", {}))


REG = np.array([f"{p}|{ln}" for p, ln in zip(PHASE, LENGTH)], dtype=object)


@pytest.mark.parametrize("mu, iv, tol, match", [
    (MU[:5], Interval(0.8, "conformal", LO8, HI8, "", {}, None, REG), 0.03, "mu"),
    (-MU, Interval(0.8, "conformal", LO8, HI8, "", {}, None, REG), 0.03, "positive"),
    (MU, Interval(0.8, "conformal", LO8[:5], HI8, "", {}, None, REG), 0.03, "one bound"),
    (MU, Interval(0.8, "conformal", HI8, LO8, "", {}, None, REG), 0.03, "lower <= upper"),
    (MU, Interval(0.8, "conformal", np.full(6, np.nan), HI8, "", {}, None, REG), 0.03, "NaN"),
    (MU, Interval(0.8, "conformal", LO8, HI8, "", {}, None, REG[:5]), 0.03, "one label"),
    (MU, Interval(0.8, "conformal", LO8, HI8, "", {}, None, np.array(["short"] * 6)), 0.03,
     "phase|length"),
    (MU, Interval(0.8, "conformal", LO8, HI8, "", {}, None, REG), -0.1, "tolerance"),
    (MU, (LO8, HI8), 0.03, "Interval"),
])
def test_interval_check_refuses_what_does_not_fit_the_steps(mu, iv, tol, match):
    import pandas as pd

    from perfmodel.stats.interval_coverage import interval_check

    df = pd.DataFrame({"duration_ms": Y, "config": list("abcdef")})
    with pytest.raises(InputError, match=match):
        interval_check(df, mu, iv, tol)


def test_integer_cluster_codes_are_the_labels_clusters():
    import pandas as pd

    df = pd.DataFrame({"step": range(60), "batch_size": 1, "total_tokens": 1, "duration_ms": 1.0})
    labels, codes = coverage_clusters(df), coverage_clusters(df, codes=True)
    assert codes.dtype.kind == "i"
    assert pd.factorize(labels)[0].tolist() == pd.factorize(codes)[0].tolist()
    cfg = pd.DataFrame({"config": ["a", "b", "a"], "duration_ms": 1.0})
    assert coverage_clusters(cfg, codes=True).tolist() == [0, 1, 0]
