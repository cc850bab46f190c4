"""Tests of perfmodel.data.trace_lists: the accepted and refused forms of a per-request list cell."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfmodel.data.trace_lists import parse_int_list, parse_list_cells, parse_list_column
from perfmodel.errors import InputError


@pytest.mark.parametrize("value,expected", [
    ("512;1;1", [512, 1, 1]), ("[512, 1, 1]", [512, 1, 1]), ("5", [5]), (5, [5]),
    ([3, 4], [3, 4]), ("", []), (" 2 ; 3 ", [2, 3]),
])
def test_parse_int_list_forms(value, expected):
    out = parse_int_list(value)
    assert out.dtype == np.int64 and out.tolist() == expected


@pytest.mark.parametrize("value", ["1;x", "1.5", "1;;2", None, 2.5])
def test_parse_int_list_rejects(value):
    with pytest.raises(InputError, match="parse_int_list"):
        parse_int_list(value)


def test_parse_list_column_flat_counts_and_status():
    cells = ["3;1;1", None, "1;x", [4, 5], "[6, 7]", 8, "", 9.0, True]
    col = parse_list_column(cells)
    assert col.flat.dtype == np.int64 and col.counts.dtype == np.int64
    assert col.flat.tolist() == [3, 1, 1, 4, 5, 6, 7, 8, 9]
    assert col.counts.tolist() == [3, 0, 0, 2, 2, 1, 0, 1, 0]
    assert col.ok.tolist() == [True, False, False, True, True, True, False, True, False]


def test_parse_list_cells_tells_missing_from_malformed():
    cells = parse_list_cells(pd.Series(["2;3", None, "", "a;1", "[4, 5]"], dtype=object))
    assert cells.missing.tolist() == [False, True, True, False, False]
    assert cells.bad.tolist() == [False, False, False, True, False]
    assert cells.strings.tolist() == ["2;3", "", "", "", "4;5"]  # normalised text, '' if not ok
