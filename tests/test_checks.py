"""Tests of perfmodel._checks: one argument check per kind of argument."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfmodel._checks import (
    check_choice,
    check_int_range,
    check_number,
    check_positive,
    check_probability,
    check_real,
    check_vector,
    nonpositive_rows_text,
    rows_text,
)
from perfmodel.errors import InputError


def test_check_int_range_accepts_integers_in_range():
    assert check_int_range("n", 3, 1) == 3
    assert type(check_int_range("n", np.int64(3), 1, 5)) is int
    assert check_int_range("n", 5, hi=5) == 5
    assert check_int_range("n", -7) == -7


@pytest.mark.parametrize("value,kw,msg", [
    (0, {"lo": 1}, "n must be an integer >= 1, got 0"),
    (9, {"lo": 1, "hi": 5}, "n must be an integer in [1, 5], got 9"),
    (9, {"hi": 5}, "n must be an integer <= 5, got 9"),
    (True, {"lo": 0}, "n must be an integer >= 0, got True"),
    (np.bool_(True), {"lo": 0}, "n must be an integer >= 0, got "),
    (2.0, {"lo": 1}, "n must be an integer >= 1, got 2.0"),
    ("3", {}, "n must be an integer, got '3'"),
    (None, {"lo": 1}, "n must be an integer >= 1, got None"),
])
def test_check_int_range_messages(value, kw, msg):
    with pytest.raises(InputError) as e:
        check_int_range("n", value, **kw)
    assert str(e.value).startswith(msg)


def test_check_int_range_integral_floats_on_request():
    assert check_int_range("n", 8.0, 1, integral_float=True) == 8
    assert check_int_range("n", np.float32(8.0), 1, integral_float=True) == 8
    for bad in (8.5, float("nan"), float("inf"), 0.0):
        with pytest.raises(InputError, match="n must be an integer >= 1"):
            check_int_range("n", bad, 1, integral_float=True)


def test_check_number_bounds_and_types():
    assert check_number("x", 2) == 2.0 and type(check_number("x", np.float32(2))) is float
    assert check_number("x", np.array(1.5)) == 1.5
    assert check_number("x", 0.0, lo=0.0) == 0.0
    cases = [
        (float("nan"), {}, "x must be a finite number, got nan"),
        ("1", {}, "x must be a finite number, got '1'"),
        (False, {}, "x must be a finite number, got False"),
        (object, {}, "x must be a finite number, got"),
        (-1, {"lo": 0}, "x must be >= 0, got -1"),
        (0, {"lo": 0, "lo_open": True}, "x must be > 0, got 0"),
        (2, {"hi": 1}, "x must be <= 1, got 2"),
        (1, {"hi": 1, "hi_open": True}, "x must be < 1, got 1"),
        (3, {"lo": 0, "hi": 1}, "x must be in [0, 1], got 3"),
        (0, {"lo": 0, "hi": 1, "lo_open": True}, "x must be in (0, 1], got 0"),
    ]
    for value, kw, msg in cases:
        with pytest.raises(InputError) as e:
            check_number("x", value, **kw)
        assert str(e.value).startswith(msg), (value, kw, str(e.value))


def test_check_positive():
    assert check_positive("rate", 0.5) == 0.5
    assert check_positive("sd", 0, allow_zero=True) == 0.0
    with pytest.raises(InputError, match=r"^rate must be a positive finite number, got 0$"):
        check_positive("rate", 0)
    with pytest.raises(InputError, match=r"^sd must be a non-negative finite number, got -1$"):
        check_positive("sd", -1, allow_zero=True)
    with pytest.raises(InputError, match=r"^t must be a positive finite number of ms, got inf$"):
        check_positive("t", float("inf"), unit="ms")
    with pytest.raises(InputError, match="rate must be a positive finite number, got 'x'"):
        check_positive("rate", "x")


def test_check_probability():
    assert check_probability("q", 0.95) == 0.95
    assert check_probability("q", 1, closed=True) == 1.0
    for bad in (0, 1, -0.1, float("nan"), "0.5", None):
        with pytest.raises(InputError, match=r"q must be a probability in \(0, 1\)"):
            check_probability("q", bad)
    with pytest.raises(InputError, match=r"q must be a probability in \[0, 1\], got 2"):
        check_probability("q", 2, closed=True)


def test_check_real_is_what_float_accepts_if_finite():
    assert check_real("x", "2.5") == 2.5
    assert check_real("x", True) == 1.0
    assert type(check_real("x", np.float32(0.5))) is float
    for bad, msg in [("a", "x must be a number, got 'a'"), (None, "x must be a number, got None"),
                     ([1, 2], "x must be a number, got [1, 2]"),
                     (float("inf"), "x must be finite, got inf"), ("nan", "x must be finite, got 'nan'")]:
        with pytest.raises(InputError) as e:
            check_real("x", bad)
        assert str(e.value) == msg
    # the strict check refuses what check_real lets through
    with pytest.raises(InputError, match="x must be a finite number, got '2.5'"):
        check_number("x", "2.5")


def test_check_choice():
    assert check_choice("policy", "fcfs", ("fcfs", "decode_first")) == "fcfs"
    with pytest.raises(InputError, match=r"policy must be one of \['fcfs'\], got 'x'"):
        check_choice("policy", "x", ["fcfs"])
    with pytest.raises(InputError, match="must be one of"):
        check_choice("policy", ["unhashable"], {"fcfs"})


def test_nonpositive_rows_text_counts_every_bad_time_and_shows_five():
    y = np.array([1.0, np.nan, -1.0, 0.0, 2.0, np.inf, 0.0, 0.0, 3.0])
    assert nonpositive_rows_text(y) == "6 bad rows (first [1, 2, 3, 5, 6])"
    assert nonpositive_rows_text([2.0, 0.0]) == "1 bad rows (first [1])"
    assert nonpositive_rows_text([0.5, 1e-9, 7.0]) == ""


def test_rows_text():
    mask = np.zeros(12, bool)
    mask[[1, 3, 4, 5, 8, 11]] = True
    assert rows_text(mask) == "rows [1, 3, 4, 5, 8, ...] (6 of 12)"
    assert rows_text(mask, k=6) == "rows [1, 3, 4, 5, 8, 11] (6 of 12)"
    idx = pd.Index([f"r{i}" for i in range(12)])
    assert rows_text(mask[:4], idx[:4]) == "rows ['r1', 'r3'] (2 of 4)"
    assert rows_text([False, True], pd.RangeIndex(10, 12)) == "rows [11] (1 of 2)"


def test_check_vector():
    np.testing.assert_array_equal(check_vector("`x`", [[1], [2]]), [1.0, 2.0])
    cases = [
        (None, {}, "`x` is required, got None"),
        (["a"], {}, "`x` must be numeric"),
        (np.ones((2, 2)), {}, "`x` must be 1-D, got shape (2, 2)"),
        ([1, 2], {"n": 3}, "`x` has length 2, expected 3 (the length of `resid`)"),
        ([1, np.nan, 2], {}, "`x` has non-finite values (NaN or inf) at rows [1] (1 of 3)"),
        ([1, 2], {"min_n": 3}, "`x` has 2 values, this test needs at least 3"),
        ([2.0, 2.0], {"nonconstant": True}, "`x` is constant (np.float64(2.0) for all 2 rows)"),
    ]
    for value, kw, msg in cases:
        with pytest.raises(InputError) as e:
            check_vector("`x`", value, **kw)
        got = str(e.value).replace("(2.0 for", "(np.float64(2.0) for")  # numpy < 2 repr
        assert got.startswith(msg), (msg, str(e.value))


def test_the_module_imports_without_numpy():
    """_checks (like _io) is importable with the standard library alone."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['numpy'] = None; import perfmodel._checks as c, "
            "perfmodel._io as i; print(c.check_int_range('n', 3, 1), i.json_safe([1.5]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "3 [1.5]"
