"""NIST StRD non-linear regression: parser, analytic Jacobians, fitter vs certified values.

The fitter check follows McCullough (1998): from each of NIST's two starting
points, :func:`perfmodel.core.fit.fit_curve` (analytic Jacobian, xtol = ftol =
gtol = 1e-15) must reproduce every certified parameter to LRE >= 6 and every
certified standard deviation to LRE >= 4.  A case that genuinely fails is
marked ``xfail(strict=True)`` with the measured reason; the check itself is
never loosened.
"""
from __future__ import annotations

import numpy as np
import pytest

from perfmodel.core import nist
from perfmodel.errors import InputError

PARAM_DIGITS = 6.0
STDERR_DIGITS = 4.0


@pytest.fixture(scope="module")
def problems():
    from perfmodel.errors import DataUnavailableError

    try:
        return {name: nist.load_problem(name) for name in nist.PROBLEMS}
    except DataUnavailableError as e:
        pytest.skip(f"NIST StRD files unreachable (no mirror, cache or network): {e}")


# ---------------------------------------------------------------------------
# parser
# ---------------------------------------------------------------------------

def test_there_are_27_problems_in_nist_order():
    assert len(nist.PROBLEMS) == 27
    assert nist.PROBLEMS[0] == "Misra1a" and nist.PROBLEMS[-1] == "Bennett5"


def test_parse_mgh09_values(problems):
    p = problems["MGH09"]
    assert p.difficulty == "higher"
    assert p.n_obs == 11 and p.n_params == 4 and p.dof == 7
    # y is the FIRST data column, x the second
    assert p.y[0] == pytest.approx(1.957000e-01) and p.x[0] == pytest.approx(4.0)
    assert p.y[-1] == pytest.approx(2.460000e-02) and p.x[-1] == pytest.approx(6.25e-02)
    np.testing.assert_array_equal(p.start1, [25, 39, 41.5, 39])
    np.testing.assert_array_equal(p.start2, [0.25, 0.39, 0.415, 0.39])
    assert p.certified_params[0] == 1.9280693458e-01
    assert p.certified_stderr[3] == 9.0025542308e-02
    assert p.certified_rss == 3.0750560385e-04
    assert p.residual_sd == 6.6279236551e-03


def test_parse_nelson_has_two_predictors_and_log_response(problems):
    p = problems["Nelson"]
    assert p.x.shape == (128, 2)
    assert p.model.log_response
    np.testing.assert_allclose(p.target, np.log(p.y))
    assert p.y[0] == 15.0 and tuple(p.x[0]) == (1.0, 180.0)


@pytest.mark.parametrize("name", nist.PROBLEMS)
def test_parsed_problem_is_self_consistent(problems, name):
    p = problems[name]
    assert p.name == name
    assert p.difficulty in ("lower", "average", "higher")
    assert p.dof == p.n_obs - p.n_params
    for arr in (p.start1, p.start2, p.certified_params, p.certified_stderr):
        assert arr.shape == (p.n_params,)
    # the certified residual SD is sqrt(RSS / dof)
    assert p.residual_sd**2 * p.dof == pytest.approx(p.certified_rss, rel=1e-9)
    assert p.jac(p.start1).shape == (p.n_obs, p.n_params)


def test_rat43_stated_dof_is_corrected_with_a_note(problems):
    p = problems["Rat43"]
    assert p.dof == 11
    assert any("9 degrees of freedom" in n for n in p.notes)


def _layout(dof="7"):
    header = ["NIST/ITL StRD", "Dataset Name:  MGH09             (MGH09.dat)", "",
              "File Format:   ASCII",
              "               Starting Values   (lines 41 to 44)",
              "               Certified Values  (lines 41 to 49)",
              "               Data              (lines 61 to 71)"]
    lines = header + [""] * (40 - len(header))
    lines[25] = "               Higher Level of Difficulty"
    lines[28] = "               4 Parameters (b1 to b4)"
    lines += ["  b1 =   25          0.25          1.9280693458E-01  1.1435312227E-02",
              "  b2 =   39          0.39          1.9128232873E-01  1.9633220911E-01",
              "  b3 =   41.5        0.415         1.2305650693E-01  8.0842031232E-02",
              "  b4 =   39          0.39          1.3606233068E-01  9.0025542308E-02",
              "",
              "Residual Sum of Squares:                    3.0750560385E-04",
              "Residual Standard Deviation:                6.6279236551E-03",
              f"Degrees of Freedom:                                {dof}",
              "Number of Observations:                           11"]
    lines += [""] * (59 - len(lines))
    lines += ["Data:  y               x"]
    lines += [f"       {0.1 + i / 100:.6E}    {1 + i:.6E}" for i in range(11)]
    return lines


def test_parse_synthetic_layout_roundtrip():
    p = nist.parse_dat("\n".join(_layout()), source="synthetic")
    assert p.n_obs == 11 and p.y[3] == pytest.approx(0.13) and p.x[3] == pytest.approx(4.0)


@pytest.mark.parametrize("mutate, message", [
    (lambda L: L.__setitem__(6, "               Data              (lines 61 to 75)"),
     "inconsistent line ranges"),
    (lambda L: L.__setitem__(41, "  b2 =   39 0.39 oops 1"), "line 42"),
    (lambda L: L.__setitem__(59, "Values:  y  x"), "'Data: y x' header"),
    (lambda L: L.__setitem__(65, "   1.0"), "same >= 2 columns"),
    (lambda L: (L.__setitem__(47, "Degrees of Freedom:     5"),
                L.__setitem__(46, "Residual Standard Deviation:   1.0E-02")),
     "degrees of freedom 5"),
])
def test_parse_rejects_malformed_files(mutate, message):
    lines = _layout()
    mutate(lines)
    with pytest.raises(InputError, match=message):
        nist.parse_dat("\n".join(lines), source="bad.dat")


def test_parse_accepts_a_wrong_dof_only_when_the_certified_sd_confirms_n_minus_p():
    lines = _layout()
    lines[47] = "Degrees of Freedom:     5"
    p = nist.parse_dat("\n".join(lines), source="synthetic")
    assert p.dof == 7 and "5 degrees of freedom" in p.notes[0]


def test_parse_rejects_non_nist_text():
    with pytest.raises(InputError, match="Dataset Name"):
        nist.parse_dat("hello\nworld", source="x.txt")


def test_load_problem_rejects_unknown_name():
    with pytest.raises(InputError, match="not a NIST StRD problem"):
        nist.load_problem("Misra9z")


# ---------------------------------------------------------------------------
# models and analytic Jacobians
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", nist.PROBLEMS)
def test_model_reproduces_certified_rss(problems, name):
    """RSS of the model at the certified parameters equals the certified RSS.

    Lanczos1 is the exception that proves the rule: its certified RSS
    (1.4e-25) is far below what the 11-digit rounding of the certified
    parameters allows, so there the RSS at the rounded values can only be
    larger (it is ~4e-21).
    """
    p = problems[name]
    r = p.target - p.func(p.certified_params)
    rss = float(r @ r)
    if name == "Lanczos1":
        assert rss > p.certified_rss
    else:
        assert nist.lre(rss, p.certified_rss)[0] >= 9.0


@pytest.mark.parametrize("name", nist.PROBLEMS)
def test_analytic_jacobian_matches_central_differences(problems, name):
    """Each analytic Jacobian column equals central differences at start 1, start 2 and
    the certified point, to 1e-6 of the column's scale plus the differences' rounding
    noise (~eps |f| / h); a wrong derivative is off by O(1) of the column."""
    p = problems[name]
    eps = np.finfo(float).eps
    for b in (p.start1, p.start2, p.certified_params):
        J = p.jac(b)
        f0 = p.func(b)
        assert np.all(np.isfinite(J)) and np.all(np.isfinite(f0))
        fd = np.empty_like(J)
        hs = np.where(b != 0, 1e-6 * np.abs(b), 1e-8)
        for k in range(b.size):
            up, dn = b.copy(), b.copy()
            up[k] += hs[k]
            dn[k] -= hs[k]
            fd[:, k] = (p.func(up) - p.func(dn)) / (2 * hs[k])
        tol = 1e-6 * np.max(np.abs(fd), axis=0) + 50 * eps * np.max(np.abs(f0)) / hs
        err = np.max(np.abs(J - fd), axis=0)
        assert np.all(err <= tol), f"{name} at {b}: column errors {err}, tolerances {tol}"


# ---------------------------------------------------------------------------
# LRE
# ---------------------------------------------------------------------------

def test_lre_counts_agreeing_digits():
    np.testing.assert_allclose(nist.lre([1.000001, 2.0], [1.0, 2.0 + 2e-4]),
                               [6.0, -np.log10(2e-4 / 2.0002)], rtol=1e-6)
    assert nist.lre(3.14, 3.14)[0] == 11.0
    assert nist.lre(np.nan, 1.0)[0] == 0.0
    assert nist.lre(1e-8, 0.0)[0] == pytest.approx(8.0)
    assert nist.lre(-5.0, 5.0)[0] == 0.0
    with pytest.raises(InputError, match="shape"):
        nist.lre([1.0, 2.0], [1.0])


# ---------------------------------------------------------------------------
# the fitter against the certified values
# ---------------------------------------------------------------------------

# Measured with perfmodel.core.fit.fit_curve (scipy least_squares 'trf', x_scale='jac',
# analytic Jacobian, tolerances 1e-15).  Lanczos1 reaches the certified parameters
# (min LRE 10.6) but its certified RSS, 1.4308e-25 (residuals ~8e-14), is below the
# resolution of the model evaluated in float64 (max |f64 - f80| = 1.7e-16 at the
# optimum): the fitted RSS is 1.42975e-25 from start 1 and 1.42788e-25 from start 2,
# RSS LRE 3.1 / 2.7, so s and every standard error agree to LRE 3.4 / 3.0 only.
_XFAIL = {
    ("Lanczos1", 1): "float64 floor: params LRE 10.6 but RSS 1.42975e-25 vs certified "
                     "1.43079e-25 (LRE 3.1) -> stderr LRE 3.4 < 4",
    ("Lanczos1", 2): "float64 floor: params LRE 10.6 but RSS 1.42788e-25 vs certified "
                     "1.43079e-25 (LRE 2.7) -> stderr LRE 3.0 < 4",
}

_CASES = [pytest.param(name, start, id=f"{name}-start{start}",
                       marks=([pytest.mark.xfail(strict=True, reason=_XFAIL[(name, start)])]
                              if (name, start) in _XFAIL else []))
          for name in nist.PROBLEMS for start in (1, 2)]


@pytest.mark.parametrize("name, start", _CASES)
def test_fit_curve_reproduces_certified_values(problems, name, start):
    pytest.importorskip("perfmodel.core.fit")
    check = nist.solve(problems[name], start)
    fit = check.fit
    assert check.min_param_lre >= PARAM_DIGITS, (
        f"{name} start {start}: param LRE {np.round(check.param_lre, 1)}, RSS {fit.rss:.6g} "
        f"(certified {problems[name].certified_rss:.6g}), status {fit.status} {fit.message}")
    assert check.min_stderr_lre >= STDERR_DIGITS, (
        f"{name} start {start}: stderr LRE {np.round(check.stderr_lre, 1)}")


def test_solve_accepts_a_name_and_rejects_a_bad_start(problems):
    pytest.importorskip("perfmodel.core.fit")
    c = nist.solve("Misra1a", 1)
    assert c.problem == "Misra1a" and c.passed()
    with pytest.raises(InputError, match="start must be 1 or 2"):
        nist.solve(problems["Misra1a"], 3)
