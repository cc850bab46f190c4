"""Tests of perfmodel.report.paperio: macros, fragments, tables, figures, deps, stripping."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfmodel.errors import InputError
from perfmodel.report import paperio as pio

ROOT = Path(__file__).resolve().parents[2]


# --- numbers -----------------------------------------------------------------

@pytest.mark.parametrize("value, kw, text", [
    (0.0123, {"digits": 2}, "0.012"),
    (0.5, {"digits": 2}, "0.50"),            # keeps the requested precision
    (9.996, {"digits": 3}, "10.0"),          # rounds before choosing decimals
    (-2.5, {"digits": 2}, "$-$2.5"),
    (3058, {}, "3058"),                   # integers exactly
    (30580, {}, "30{,}580"),
    (np.int64(7), {}, "7"),
    (12345678.0, {"digits": 3}, r"\ensuremath{1.23\times 10^{7}}"),
    (1e-5, {"digits": 2}, r"\ensuremath{1.0\times 10^{-5}}"),
    (3.14159, {"digits": 2, "fixed": True}, "3.14"),
    (12.34, {"digits": 3, "percent": True}, r"12.3\%"),
    (float("nan"), {}, "n/a"),
    (-0.0001, {"digits": 1, "fixed": True}, "0.0"),  # no negative zero
    ("raw", {}, "raw"),
])
def test_format_number(value, kw, text):
    assert pio.format_number(value, **kw) == text


@pytest.mark.parametrize("args, kw, text", [
    ((2.61, 2.42, 2.83), {}, "+3 [+2, +3]*"),
    ((0.04, -0.26, 0.31), {}, "+0 [-0, +0]"),
    ((0.3, 0.04, 0.6), {}, "+0 [+0, +1]*"),                 # star decided before rounding
    ((-0.5, -0.6, -0.3), {}, "-0 [-1, -0]*"),               # an end keeps its sign
    ((0.0, -0.0, 0.0), {}, "+0 [+0, +0]"),                  # exact zeros: no negative zero
    ((4.9, 2.2, 7.9), {}, "+5 [+2, +8]*"),
    ((17.4, 11.6, 21.4), {}, "+17 [+12, +21]*"),
    ((2.61, 2.42, 2.83), {"decimals": 1}, "+2.6 [+2.4, +2.8]*"),
    ((0.4, -0.01, 0.8), {"decimals": 1}, "+0.4 [-0.0, +0.8]"),
    ((-2.2, -3.41, -0.02), {"decimals": 1}, "-2.2 [-3.4, -0.0]*"),
    ((-3.2, -4.1, -2.3), {"point": False}, "[-4, -2]*"),
    ((1.26, 0.5, 2.0), {"star": False}, "+1 [+0, +2]"),
    ((float("nan"), 0.0, 1.0), {}, "--"),
    ((-0.4, -1.3, 0.5), {"latex": True}, "$-$0 [$-$1, $+$0]"),
])
def test_format_paired(args, kw, text):
    assert pio.format_paired(*args, **kw) == text


def test_interval_excludes_zero_and_checks():
    assert pio.interval_excludes_zero(0.01, 2.0) and pio.interval_excludes_zero(-2.0, -0.01)
    assert not pio.interval_excludes_zero(-0.1, 0.1) and not pio.interval_excludes_zero(0.0, 1.0)
    assert not pio.interval_excludes_zero(float("nan"), 1.0)
    with pytest.raises(InputError, match="lo must not exceed hi"):
        pio.interval_excludes_zero(1.0, 0.0)
    with pytest.raises(InputError, match="decimals"):
        pio.format_paired(1.0, 0.0, 2.0, decimals=-1)
    with pytest.raises(InputError, match="lo must be a real number"):
        pio.format_paired(1.0, "a", 2.0)


@pytest.mark.parametrize("bad", [None, True, [1.0], {"a": 1}])
def test_format_number_rejects_non_numbers(bad):
    with pytest.raises(InputError, match="real number"):
        pio.format_number(bad)


def test_format_number_rejects_bad_digits():
    with pytest.raises(InputError, match="digits"):
        pio.format_number(1.0, digits=-1)


def test_macro_name():
    assert pio.macro_name("nb02", "tau_0", "ci") == "NbZeroTwoTauZeroCi"
    assert pio.macro_name("splitwise", "MAPE") == "SplitwiseMAPE"
    with pytest.raises(InputError):
        pio.macro_name("__")
    with pytest.raises(InputError):
        pio.macro_name()


def test_count_word_spells_small_counts_and_refuses_what_is_not_a_count():
    import numpy as np

    assert [pio.count_word(n) for n in (0, 1, 2, 3, 4, 9)] == [
        "zero", "one", "two", "three", "four", "nine"]
    assert pio.count_word(np.int64(4)) == "four"
    assert pio.count_word(10) == "10" and pio.count_word(12) == "12"
    for bad in (-1, 2.0, True, "3", None):
        with pytest.raises(InputError, match="count_word"):
            pio.count_word(bad)


def test_word_list_joins_as_prose_and_refuses_what_is_not_a_list_of_words():
    assert pio.word_list([]) == "none"
    assert pio.word_list([], empty="no data set") == "no data set"
    assert pio.word_list(["H200"]) == "H200"
    assert pio.word_list(("H200", "H100")) == "H200 and H100"
    assert pio.word_list(iter(["a", "b", "c"])) == "a, b and c"
    for bad in ("abc", None, 3, ["a", 2], ["a", ""]):
        with pytest.raises(InputError, match="word_list"):
            pio.word_list(bad)


def test_format_estimate_prints_the_value_and_its_interval():
    assert pio.format_estimate(0.2712, 0.1399, 0.3871) == "0.27 [0.14, 0.39]"
    assert pio.format_estimate(0.0, 0.0, 0.31) == "0 [0, 0.31]"
    assert pio.format_estimate(1.412, 1.381, 1.437) == "1.41 [1.38, 1.44]"  # ends kept apart
    assert pio.format_estimate(2.0, 2.0, 2.0) == "2.0 [2.0, 2.0]"
    assert pio.format_estimate(float("nan"), 0.0, 1.0) == "--"
    for bad in ((1.0, 2.0, 3.0), ("x", 0, 1), (True, 0, 1)):
        with pytest.raises(InputError, match="format_estimate"):
            pio.format_estimate(*bad)


def test_write_numbers_is_deterministic_and_sorted(tmp_path):
    vals = {"Zeta": 1.23456, "Alpha": 7, "Mid": "text"}
    out = pio.write_numbers(vals, "nbx", folder=tmp_path)
    assert list(out) == ["Alpha", "Mid", "Zeta"]
    first = (tmp_path / "nbx.tex").read_text()
    pio.write_numbers(dict(reversed(list(vals.items()))), "nbx", folder=tmp_path)
    assert (tmp_path / "nbx.tex").read_text() == first
    lines = [x for x in first.splitlines() if not x.startswith("%")]
    assert lines == [r"\newcommand{\Alpha}{7}", r"\newcommand{\Mid}{text}",
                     r"\newcommand{\Zeta}{1.23}"]
    assert pio.read_numbers(tmp_path / "nbx.tex") == {"Alpha": "7", "Mid": "text", "Zeta": "1.23"}


def test_write_numbers_per_name_options(tmp_path):
    out = pio.write_numbers({"A": 0.123456, "B": 12.3456}, "f", folder=tmp_path,
                            digits={"A": 2}, fixed=["B"], percent=["B"])
    assert out == {"A": "0.12", "B": r"12.346\%"}


@pytest.mark.parametrize("vals, match", [
    ({"bad_name": 1.0}, "letters only"),
    ({"With1Digit": 1.0}, "letters only"),
    ({}, "non-empty"),
    ({"Ok": object()}, "number 'Ok'"),
])
def test_write_numbers_rejects(tmp_path, vals, match):
    with pytest.raises(InputError, match=match):
        pio.write_numbers(vals, "f", folder=tmp_path)


def test_write_numbers_rejects_bad_fragment(tmp_path):
    with pytest.raises(InputError, match="fragment"):
        pio.write_numbers({"A": 1}, "../escape", folder=tmp_path)


def test_assemble_numbers_joins_and_detects_duplicates(tmp_path):
    pio.write_numbers({"A": 1, "B": 2}, "01_a", folder=tmp_path / "n")
    pio.write_numbers({"C": 3}, "02_b", folder=tmp_path / "n")
    out = pio.assemble_numbers(tmp_path / "n", tmp_path / "numbers.tex")
    assert pio.read_numbers(out) == {"A": "1", "B": "2", "C": "3"}
    text = out.read_text()
    assert text.index("01_a.tex") < text.index("02_b.tex")
    pio.write_numbers({"B": 9}, "03_c", folder=tmp_path / "n")
    with pytest.raises(InputError, match=r"defined twice: \['B'\] in 03_c.tex and 01_a.tex"):
        pio.assemble_numbers(tmp_path / "n", tmp_path / "numbers.tex")


def test_read_numbers_rejects_foreign_lines(tmp_path):
    p = tmp_path / "x.tex"
    p.write_text("\\def\\A{1}\n")
    with pytest.raises(InputError, match="x.tex:1"):
        pio.read_numbers(p)


def test_paper_outputs_accumulates_numbers(tmp_path):
    out = pio.PaperOutputs(tmp_path, "05_nb")
    assert out.numbers({"A": 0.5}, digits=1) == {"A": "0.5"}
    assert out.numbers({"B": 12.5}, percent=True) == {"B": r"12.5\%"}
    assert pio.read_numbers(tmp_path / "paper/numbers/05_nb.tex") == {"A": "0.5", "B": r"12.5\%"}
    with pytest.raises(InputError, match="root"):
        pio.PaperOutputs(tmp_path / "missing", "x")


# --- tables ------------------------------------------------------------------

def test_table_tex_booktabs_and_escaping():
    df = pd.DataFrame({"param": ["tau_0", "a&b"], "value": [1.23456, np.nan], "n": [3, 40000]})
    tex = pio.table_tex(df, columns={"param": r"$\theta$"}, formats={"value": 2})
    lines = tex.splitlines()
    assert lines[0] == r"\begin{tabular}{lrr}"
    assert lines[1:4] == [r"\toprule", r"$\theta$ & value & n \\", r"\midrule"]
    assert lines[4] == r"tau\_0 & 1.2 & 3 \\"
    assert lines[5] == r"a\&b & -- & 40{,}000 \\"
    assert lines[-2:] == [r"\bottomrule", r"\end{tabular}"]


def test_table_tex_callable_format_index_and_midrules():
    df = pd.DataFrame({"x": [1.0, 2.0, 3.0]}, index=pd.Index(["a", "b", "c"], name="k"))
    tex = pio.table_tex(df, index=True, formats={"x": lambda v: f"[{v:.0f}]"}, midrules=[2])
    body = tex.splitlines()[4:-2]
    assert body == [r"a & [1] \\", r"b & [2] \\", r"\midrule", r"c & [3] \\"]


@pytest.mark.parametrize("df, kw, match", [
    ([1, 2], {}, "DataFrame"),
    (pd.DataFrame(), {}, "empty"),
    (pd.DataFrame({"a": [1]}), {"columns": {"b": "B"}}, r"\['b'\]"),
    (pd.DataFrame({"a": [1]}), {"align": ""}, "align"),
])
def test_table_tex_rejects(df, kw, match):
    with pytest.raises(InputError, match=match):
        pio.table_tex(df, **kw)


def test_write_table_header_names_notebook(tmp_path):
    p = pio.write_table(pd.DataFrame({"a": [1]}), "t1", folder=tmp_path, notebook="02_fit")
    text = p.read_text()
    assert text.startswith("% Generated by notebook 02_fit")
    assert "make nb-02_fit" in text


# --- figures -----------------------------------------------------------------

def test_save_figure_is_reproducible(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1], [0, 1])
    paths = pio.save_figure(fig, "f", folder=tmp_path)
    assert [p.name for p in paths] == ["f.pdf", "f.png"]
    first = [p.read_bytes() for p in paths]
    assert first[0].startswith(b"%PDF") and b"CreationDate" not in first[0]
    pio.save_figure(fig, "f", folder=tmp_path)
    assert [p.read_bytes() for p in paths] == first
    plt.close(fig)
    with pytest.raises(InputError, match="formats"):
        pio.save_figure(fig, "g", folder=tmp_path, formats=("jpg",))
    with pytest.raises(InputError, match="Figure"):
        pio.save_figure("not a figure", "g", folder=tmp_path)


# --- pipeline helpers --------------------------------------------------------

def _nb(cells):
    return {"cells": cells, "metadata": {"kernelspec": {"name": "python3"}, "papermill": {"x": 1}},
            "nbformat": 4, "nbformat_minor": 5}


def _code(src, outputs=(), tags=()):
    return {"cell_type": "code", "source": src, "execution_count": 9,
            "metadata": {"tags": list(tags), "papermill": {"duration": 1.0},
                         "execution": {"iopub.status.busy": "2024"}},
            "outputs": list(outputs)}


def test_notebook_deps_closes_over_package_imports(tmp_path):
    pkg = tmp_path / "pkgx"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "errors.py").write_text("")
    (pkg / "a.py").write_text("from .b import f\nimport numpy\n")
    (pkg / "b.py").write_text("from . import c\n")
    (pkg / "c.py").write_text("")
    (pkg / "unused.py").write_text("")
    nb = tmp_path / "n.ipynb"
    nb.write_text(json.dumps(_nb([_code("%matplotlib inline\nfrom pkgx import a\nimport os\n")])))
    got = [p.name for p in pio.notebook_deps(nb, pkg)]
    assert got == ["__init__.py", "a.py", "b.py", "c.py", "errors.py"]


def test_notebook_deps_resolves_dotted_modules_in_subpackages(tmp_path):
    """Subpackages: ``from pkgx.core import fit`` and ``from ..data.trace import x`` name
    modules at any depth; each brings the __init__.py above it, never its siblings."""
    pkg = tmp_path / "pkgx"
    for sub in ("", "core", "data", "report"):
        (pkg / sub).mkdir(parents=True, exist_ok=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "errors.py").write_text("")
    (pkg / "core" / "fit.py").write_text("from ..data.trace import read\nfrom . import model\n")
    (pkg / "core" / "model.py").write_text("import pkgx.data.features\n")
    (pkg / "core" / "unused.py").write_text("")
    (pkg / "data" / "trace.py").write_text("from pkgx.errors import E\n")
    (pkg / "data" / "features.py").write_text("")
    (pkg / "data" / "unused.py").write_text("")
    (pkg / "report" / "paperio.py").write_text("")
    nb = tmp_path / "n.ipynb"
    nb.write_text(json.dumps(_nb([_code("from pkgx.core import fit\nimport pkgx.report.paperio\n")])))
    got = [p.relative_to(pkg).as_posix() for p in pio.notebook_deps(nb, pkg)]
    assert got == ["__init__.py", "core/__init__.py", "core/fit.py", "core/model.py",
                   "data/__init__.py", "data/features.py", "data/trace.py", "errors.py",
                   "report/__init__.py", "report/paperio.py"]


def test_strip_notebook(tmp_path):
    nb = _nb([
        _code("x = 1", tags=["parameters"]),
        _code("x = 2", tags=["injected-parameters"]),
        _code("print(x)", outputs=[
            {"output_type": "stream", "name": "stdout", "text": "2\n"},
            {"output_type": "stream", "name": "stderr", "text": "/abs/path.py:1: Warning\n"},
            {"output_type": "display_data", "metadata": {}, "data": {"image/png": "AAAA"}},
            {"output_type": "execute_result", "execution_count": 9, "metadata": {},
             "data": {"text/plain": "3", "image/png": "BBBB"}},
        ]),
    ])
    p = tmp_path / "n.ipynb"
    p.write_text(json.dumps(nb))
    assert pio.strip_notebook(p) is True
    out = json.loads(p.read_text())
    assert len(out["cells"]) == 2
    assert "papermill" not in out["metadata"]
    c = out["cells"][1]
    assert c["execution_count"] == 2 and "papermill" not in c["metadata"]
    assert "execution" not in c["metadata"]
    assert c["outputs"][0]["text"] == "2\n"
    assert c["outputs"][1]["data"] == {"text/plain": "3"}
    assert c["outputs"][1]["execution_count"] == 2
    assert pio.strip_notebook(p) is False  # idempotent


def test_find_root(tmp_path):
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "a" / "b").mkdir(parents=True)
    assert pio.find_root(tmp_path / "a" / "b") == tmp_path.resolve()
    assert pio.find_root(ROOT / "tests") == ROOT


def test_cli_assemble_and_deps(tmp_path):
    pio.write_numbers({"A": 1}, "x", folder=tmp_path / "n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "perfmodel.report.paperio", "assemble", "--folder",
                        str(tmp_path / "n"), "--out", str(tmp_path / "numbers.tex")],
                       check=False, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert pio.read_numbers(tmp_path / "numbers.tex") == {"A": "1"}
    r = subprocess.run([sys.executable, "-m", "perfmodel.report.paperio", "assemble", "--folder",
                        str(tmp_path / "n"), "--out", str(tmp_path / "missing" / "x.tex")],
                       check=False, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0  # creates the folder
    r = subprocess.run([sys.executable, "-m", "perfmodel.report.paperio", "strip",
                        str(tmp_path / "nope.ipynb")], check=False, capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "does not exist" in r.stderr


def test_paper_output_override_keeps_the_paper_untouched(tmp_path, monkeypatch):
    """Under nbval (make test) outputs go to PERFMODEL_PAPER_OUTPUT, never into the paper."""
    from perfmodel.report import paperio

    repo = Path(__file__).resolve().parents[2]
    monkeypatch.setenv("PERFMODEL_PAPER_OUTPUT", str(tmp_path / "scratch"))
    paper = paperio.notebook_setup(repo, "zz_override_test", style=False)
    paper.numbers({"ZzOverride": 1})
    assert (tmp_path / "scratch" / "paper" / "numbers" / "zz_override_test.tex").exists()
    assert not (repo / "paper" / "numbers" / "zz_override_test.tex").exists()


def test_interactive_run_writes_to_scratch_not_the_paper(tmp_path, monkeypatch, capsys):
    """A notebook run outside the pipeline (no PERFMODEL_PAPER_OUTPUT) never touches the paper."""
    from perfmodel.report import paperio

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "pyproject.toml").write_text("")
    monkeypatch.delenv("PERFMODEL_PAPER_OUTPUT", raising=False)
    paper = paperio.notebook_setup(repo, "zz_scratch_test", style=False)
    paper.numbers({"ZzScratch": 1})
    assert (repo / "build" / "scratch" / "paper" / "numbers" / "zz_scratch_test.tex").exists()
    assert not (repo / "paper").exists()
    assert "build/scratch" in capsys.readouterr().out


def test_param_tex_gives_the_papers_symbols():
    assert pio.param_tex("tau_0") == r"$\tau_{0}$"
    assert pio.param_tex("k_B") == "$k_{B}$"
    assert pio.param_tex("c_kv_mixed") == r"$c_{\mathrm{mix}}$"
    assert pio.param_tex("c_attn") == r"$c_{\mathrm{attn}}$"
    assert pio.param_tex("gamma_S") == r"$\gamma_{S}$"
    for bad in ("", "k B", "$k_B$", None, "1x"):
        with pytest.raises(InputError, match="parameter name"):
            pio.param_tex(bad)


def test_printed_font_pt_scales_with_the_shown_width(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot([0, 1], [0, 1])
    ax.set_xlabel("x", fontsize=12)
    ax.tick_params(labelsize=10)
    saved = pio.save_figure(fig, "f", folder=tmp_path, formats=("pdf",))[0]
    # the width save_figure writes (tight box + padding), read back from the PDF's media box
    import re

    box = re.search(rb"/MediaBox \[\s*0 0 ([0-9.]+) ([0-9.]+)\s*\]", saved.read_bytes())
    width_in = float(box.group(1)) / 72
    got = pio.printed_font_pt(fig, 4.0)
    assert got == pytest.approx(10 * 4.0 / width_in, rel=0.02)  # the ticks are the smallest text
    assert pio.printed_font_pt(fig, 8.0) == pytest.approx(2 * got)
    out = pio.PaperOutputs(tmp_path, "nb")
    with pytest.raises(InputError, match="prints at"):
        out.figure(fig, "small", shown_width=2.0)
    assert not (tmp_path / "figures" / "small.pdf").exists()
    assert [p.name for p in out.figure(fig, "big", shown_width=8.0)] == ["big.pdf", "big.png"]
    with pytest.raises(InputError, match="shown_width"):
        pio.printed_font_pt(fig, 0)
    plt.close(fig)


def test_printed_font_pt_counts_mathtext_scripts_at_their_drawn_size(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.font_manager import FontProperties
    from matplotlib.mathtext import MathTextParser

    # the factor is matplotlib's own: the exponent of an 8 pt $10^{2}$ is drawn at 5.6 pt
    glyphs = MathTextParser("path").parse(r"$10^{2}$", dpi=72, prop=FontProperties(size=8)).glyphs
    assert [g[1] for g in glyphs] == pytest.approx([8.0, 8.0, 8.0 * pio.SCRIPT_SCALE])
    assert pio.SCRIPT_SCALE == pytest.approx(0.7)

    def shown_at_own_width(label):
        fig, ax = plt.subplots(figsize=(3, 2))
        ax.set_xticks([0.5], [label], fontsize=8)
        ax.set_yticks([])
        fig.canvas.draw()
        width = fig.get_tightbbox(fig.canvas.get_renderer()).width + 0.2  # as saved
        try:
            return pio.printed_font_pt(fig, width)
        finally:
            plt.close(fig)

    assert shown_at_own_width(r"$10^{2}$") == pytest.approx(5.6)
    assert shown_at_own_width(r"$\tau_{0}$") == pytest.approx(5.6)
    assert shown_at_own_width("100") == pytest.approx(8.0)
    assert shown_at_own_width(r"cost \$5 or $x$") == pytest.approx(8.0)  # math, no script


def test_stack_breaks_a_header_into_lines():
    assert pio.stack("TTFT p50", "(ms)") == r"\begin{tabular}[b]{@{}c@{}}TTFT p50 \\{}(ms)\end{tabular}"
    assert pio.stack("one") == "one"
    assert pio.stack("a", "b", align="r").startswith(r"\begin{tabular}[b]{@{}r@{}}")
    with pytest.raises(InputError, match="one or more strings"):
        pio.stack()
    with pytest.raises(InputError, match="align"):
        pio.stack("a", "b", align="x")
    assert pio.stack("a", "b", valign="t").startswith(r"\begin{tabular}[t]{@{}c@{}}")
    with pytest.raises(InputError, match="valign"):
        pio.stack("a", "b", valign="m")
