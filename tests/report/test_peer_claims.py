"""Tests of perfmodel.report.peer_claims: the committed claims file and malformed files."""
from __future__ import annotations

from pathlib import Path

import pytest

from perfmodel.errors import InputError
from perfmodel.report.peer_claims import (
    BOUNDS,
    COLUMNS,
    bib_keys,
    format_claim,
    load_peer_claims,
)

ROOT = Path(__file__).resolve().parents[2]
CLAIMS = ROOT / "data" / "literature" / "peer_claims.csv"
BIB = ROOT / "paper" / "refs.bib"

HEADER = ",".join(COLUMNS)
GOOD = ("Vidur,agrawal2024vidur,inference latency,operator profiles,latency error,<,9,abstract,"
        "several LLMs,https://arxiv.org/abs/2405.05465")


def _write(tmp_path, *lines, name="claims.csv"):
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def test_committed_claims_load_and_cite_known_references():
    claims = load_peer_claims(CLAIMS, bib=BIB)
    assert list(claims.columns) == list(COLUMNS)
    assert {"Vidur", "LLMServingSim", "LLMServingSim 2.0", "BLIS"} <= set(claims["system"])
    assert set(claims["stated_bound"]) <= set(BOUNDS)
    assert claims["stated_value"].between(0, 100, inclusive="right").all()
    assert claims["source"].str.match(r"https?://").all()


def test_good_file_parses_values_and_strips_blanks(tmp_path):
    p = _write(tmp_path, HEADER, GOOD.replace("<,9,", " = , 14.7 ,"), "")
    claims = load_peer_claims(p)
    assert claims.loc[0, "stated_bound"] == "="
    assert claims.loc[0, "stated_value"] == pytest.approx(14.7)
    assert len(claims) == 1


def test_columns_in_another_order_are_read_by_name(tmp_path):
    cols = list(COLUMNS)
    vals = GOOD.split(",")
    order = cols[::-1]
    p = _write(tmp_path, ",".join(order), ",".join(vals[cols.index(c)] for c in order))
    claims = load_peer_claims(p)
    assert list(claims.columns) == cols
    assert claims.loc[0, "system"] == "Vidur"


@pytest.mark.parametrize("lines, message", [
    ((), "is empty"),
    ((HEADER,), "no claims"),
    ((HEADER.replace(",where", ""), GOOD), "missing ['where']"),
    ((HEADER + ",note", GOOD + ",x"), "unknown ['note']"),
    ((HEADER, GOOD + ",extra"), "11 fields, the header has 10"),
    ((HEADER, GOOD.replace("several LLMs", "")), "empty ['evaluated_on']"),
    ((HEADER, GOOD.replace(",<,", ",median,")), "stated_bound 'median'"),
    ((HEADER, GOOD.replace(",9,", ",nine,")), "stated_value 'nine' is not a number"),
    ((HEADER, GOOD.replace(",9,", ",140,")), "not a percentage"),
    ((HEADER, GOOD.replace(",9,", ",nan,")), "not a percentage"),
    ((HEADER, GOOD.replace("agrawal2024vidur", "agrawal 2024")), "is not a BibTeX key"),
    ((HEADER, GOOD.replace("https://arxiv.org/abs/2405.05465", "/work/x.pdf")), "not a public http"),
    ((HEADER, GOOD, GOOD), "the same claim as line 2"),
    ((HEADER, GOOD.replace("several LLMs", '"unclosed')), "not valid CSV"),
])
def test_malformed_files_are_refused_with_the_problem_named(tmp_path, lines, message):
    p = _write(tmp_path, *lines) if lines else tmp_path / "empty.csv"
    if not lines:
        p.write_text("")
    with pytest.raises(InputError) as e:
        load_peer_claims(p)
    assert message in str(e.value)
    assert str(p) in str(e.value)


def test_error_names_the_line_of_the_bad_row(tmp_path):
    p = _write(tmp_path, HEADER, GOOD, GOOD.replace(",9,", ",-3,").replace("several", "other"))
    with pytest.raises(InputError, match=r"line 3: stated_value '-3'"):
        load_peer_claims(p)


def test_missing_file_and_unknown_bibkey_are_refused(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_peer_claims(tmp_path / "none.csv")
    p = _write(tmp_path, HEADER, GOOD.replace("agrawal2024vidur", "nobody2099"))
    with pytest.raises(InputError, match=r"bibkeys not in .*\['nobody2099'\]"):
        load_peer_claims(p, bib=BIB)
    with pytest.raises(InputError, match="bibliography"):
        load_peer_claims(p, bib=tmp_path / "none.bib")


def test_non_utf8_file_is_refused(tmp_path):
    p = tmp_path / "latin1.csv"
    p.write_bytes((HEADER + "\n" + GOOD.replace("several", "s\xe9veral") + "\n").encode("latin-1"))
    with pytest.raises(InputError, match="not UTF-8"):
        load_peer_claims(p)


def test_bib_keys_reads_entry_keys(tmp_path):
    b = tmp_path / "r.bib"
    b.write_text("@article{a1,\n title={x}}\n@misc{ b-2 ,\n}\n% @book{c3,\n")
    assert {"a1", "b-2"} <= bib_keys(b)
    assert "agrawal2024vidur" in bib_keys(BIB)


@pytest.mark.parametrize("bound, value, text", [("<", 9.0, "$<$\\,9"), ("=", 1.9, "1.9"),
                                                ("<", 14.7, "$<$\\,14.7"), ("=", 0.97, "0.97")])
def test_format_claim_prints_the_number_as_stated(bound, value, text):
    assert format_claim(bound, value) == text


@pytest.mark.parametrize("bound, value", [("median", 1.0), ("<", float("nan")), ("=", "9"),
                                          ("=", True)])
def test_format_claim_rejects_bad_arguments(bound, value):
    with pytest.raises(InputError):
        format_claim(bound, value)
