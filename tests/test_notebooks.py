"""Static checks of the paper notebooks, their parameter files, the pipeline and the paper inputs.

These tests do not execute notebooks (that is nbval's job:
``pytest --nbval-lax --nbval-sanitize-with notebooks/nbval_sanitize.cfg notebooks/*.ipynb``,
run by ``make test``).  They check the conventions the pipeline relies on: one markdown cell
first that names the outputs, exactly one ``parameters`` cell whose names match both parameter
files, kernelspec ``python3``, stored outputs small and free of absolute paths, every checked
cell with a stored plain-text output, every figure/table/number a notebook writes used by the
paper and every file the paper includes written by some notebook, and the behaviour of
``scripts/check_paper_inputs.py``.
"""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
NB_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NB_DIR.glob("*.ipynb"))
REQUIRED_PARAMS = {"dataset", "seed", "n_boot", "out", "quick"}
MAX_NOTEBOOK_BYTES = 200_000

pytestmark = pytest.mark.skipif(not NOTEBOOKS, reason="no notebooks in notebooks/")


def _load(nb: Path) -> dict:
    return json.loads(nb.read_text())


def _src(cell) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def _param_names(nb: dict) -> set[str]:
    cell = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
    tree = ast.parse(_src(cell))
    return {t.id for node in tree.body if isinstance(node, ast.Assign)
            for t in node.targets if isinstance(t, ast.Name)}


def _ids(paths):
    return [p.stem for p in paths]


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_structure(nb_path):
    nb = _load(nb_path)
    cells = nb["cells"]
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    assert cells[0]["cell_type"] == "markdown", "first cell must be markdown"
    intro = _src(cells[0])
    assert re.search(r"produces", intro), "first cell must say which figures/tables it produces"
    tagged = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1, f"{len(tagged)} cells tagged 'parameters' (need exactly one)"
    assert not any("injected-parameters" in c.get("metadata", {}).get("tags", []) for c in cells)
    names = _param_names(nb)
    assert REQUIRED_PARAMS <= names, f"parameters cell lacks {sorted(REQUIRED_PARAMS - names)}"
    # papermill cannot parse '=' or parentheses inside comments of the parameters cell reliably
    for line in _src(tagged[0]).splitlines():
        comment = line.split("#", 1)[1] if "#" in line else ""
        assert "=" not in comment, f"'=' in a parameters-cell comment confuses papermill: {line!r}"
    assert f'notebook_setup(out, "{nb_path.stem}")' in "".join(_src(c) for c in cells), \
        "the notebook must call paperio.notebook_setup(out, '<its own name>')"


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
@pytest.mark.parametrize("mode", ["quick", "full"])
def test_params_files_match_parameters_cell(nb_path, mode):
    p = NB_DIR / "params" / ("quick" if mode == "quick" else "") / f"{nb_path.stem}.yaml"
    assert p.is_file(), f"missing {p.relative_to(ROOT)}"
    params = yaml.safe_load(p.read_text())
    names = _param_names(_load(nb_path))
    assert set(params) == names, (f"{p.name}: keys {sorted(set(params) ^ names)} differ from "
                                  "the parameters cell")
    assert params["quick"] is (mode == "quick")
    assert params["out"] == ".."


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
@pytest.mark.parametrize("mode", ["quick", "full"])
def test_params_paths_exist(nb_path, mode):
    """Every parameter that names a repository path (``../...``) points at a committed file or
    folder, e.g. the stored coverage study that 04_uncertainty reads in full mode."""
    p = NB_DIR / "params" / ("quick" if mode == "quick" else "") / f"{nb_path.stem}.yaml"
    params = yaml.safe_load(p.read_text())
    missing = [f"{k}={v}" for k, v in params.items() if k != "out" and isinstance(v, str)
               and v.startswith("../") and not (NB_DIR / v).exists()]
    assert not missing, f"{p.relative_to(ROOT)}: paths that do not exist: {missing}"


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_quick_params_equal_notebook_defaults(nb_path):
    """nbval runs the stored notebook with its defaults: they must be the QUICK values."""
    nb = _load(nb_path)
    cell = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
    defaults = {}
    for node in ast.parse(_src(cell)).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            defaults[node.targets[0].id] = ast.literal_eval(node.value)
    quick = yaml.safe_load((NB_DIR / "params" / "quick" / f"{nb_path.stem}.yaml").read_text())
    assert quick == defaults


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_stored_outputs_for_nbval(nb_path):
    nb = _load(nb_path)
    assert nb_path.stat().st_size < MAX_NOTEBOOK_BYTES, "stored notebook too large: strip outputs"
    checked = [c for c in nb["cells"]
               if c["cell_type"] == "code" and "# NBVAL_CHECK_OUTPUT" in _src(c)]
    assert checked, "no cell marked # NBVAL_CHECK_OUTPUT"
    for c in nb["cells"]:
        if c["cell_type"] != "code":
            continue
        md = c.get("metadata", {})
        assert "papermill" not in md and "execution" not in md, "run metadata not stripped"
        for o in c.get("outputs", []):
            assert not any(k.startswith("image/") for k in o.get("data", {})), "image output stored"
            assert o.get("output_type") != "error", f"stored error output: {o.get('ename')}"
            text = json.dumps(o)
            assert str(ROOT) not in text, "absolute repository path in a stored output"
    for c in checked:
        outs = [o for o in c.get("outputs", []) if o.get("output_type") == "stream"
                and o.get("name") == "stdout"]
        assert outs, f"checked cell has no stored stdout (run `make notebooks-store`): {_src(c)[:60]!r}"


def _written_items(kind: str) -> set[str]:
    """Names of figures / tables a notebook writes (paper.figure(fig, 'x'), paper.table(df, 'x'))."""
    out = set()
    for nb in NOTEBOOKS:
        src = "".join(_src(c) for c in _load(nb)["cells"])
        out |= set(re.findall(rf"paper\.{kind}\([^,]+,\s*\"([A-Za-z0-9_.-]+)\"", src))
    return out


def test_paper_uses_every_generated_item_and_only_those():
    tex = (ROOT / "paper" / "main.tex").read_text()
    tex = "\n".join(re.sub(r"(?<!\\)%.*", "", line) for line in tex.splitlines())
    figs = set(re.findall(r"\\includegraphics(?:\[[^\]]*\])?\{([^}]+)\}", tex))
    tabs = {Path(t).stem for t in re.findall(r"\\input\{tables/([^}]+)\}", tex)}
    made_figs, made_tabs = _written_items("figure"), _written_items("table")
    assert figs <= made_figs, f"paper includes figures no notebook makes: {sorted(figs - made_figs)}"
    assert tabs <= made_tabs, f"paper inputs tables no notebook makes: {sorted(tabs - made_tabs)}"
    assert made_figs <= figs, f"figures made but not in the paper: {sorted(made_figs - figs)}"
    assert made_tabs <= tabs, f"tables made but not in the paper: {sorted(made_tabs - tabs)}"


# Quantities a number in prose or a caption may count or measure: a number followed by one of
# these (after a space, ~, \, or a hyphen, as in "2-core") is a result or a set-up fact and must
# come from a macro.  Plural forms are matched by the optional "s".
_UNITS = (r"ms|s|seconds?|minutes?|hours?|tokens?|layers?|requests?|steps?|prompts?|GPUs?|"
          r"cores?|vCPUs?|CPUs?|threads?|req/s|requests/s|tokens/s|tok/s|runs?|replicates?|"
          r"repeats?|configurations?|clients?|sequences?|heads?|files?|rows?|problems?|fits?|"
          r"groups?|draws?|resamples?|seeds?|folds?|blocks?|windows?|splits?|times|"
          r"in\s+flight|concurrent|GiB|GB|MiB|MB|KiB|kB|B/s|GB/s|TB/s|TFLOPS|W|x")
_NUM = r"\d+(?:\{,\}\d{3}|,\d{3})*(?:\.\d+)?"
# Names that carry digits are not quantities: model, hardware and engine identifiers, and the
# nominal levels and tuning constants of the statistics (95 % intervals, Huber's 1.345).
_NAME_ALLOWED = ("Llama-3-8B", "Llama-3.1-8B", "Llama2-70B", "Qwen2.5-7B", "Qwen3-30B-A3B",
                 "BLOOM-176B", "CodeLlama-34B", "Yi-34B", "RTX~PRO~6000", "RTX~4090",
                 "DGX-A100", "DGX-H100", "H100", "H200", "A100", "V1", "bfloat16", "float32",
                 "AR(1)", "HC3", "SHA-256", "OpenAI")
_LEVELS_ALLOWED = {"0.95", "0.9", "1.345", "95", "90", "0", "1"}


def _strip_balanced(text: str, command: str) -> tuple[str, list[str]]:
    """Remove every ``\\command{...}`` (balanced braces) from ``text``; return the rest and the
    removed arguments."""
    out, args, i = [], [], 0
    while (j := text.find(command + "{", i)) >= 0:
        out.append(text[i:j])
        k, depth = j + len(command) + 1, 1
        while k < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[k], 0)
            k += 1
        args.append(text[j + len(command) + 1:k - 1])
        out.append(" ")
        i = k
    out.append(text[i:])
    return "".join(out), args


def _hand_typed_numbers(tex: str) -> list[str]:
    """The numbers in a LaTeX document body that look typed by hand rather than taken from a
    macro of numbers.tex.

    Flags, outside equations, references and citations: decimals and percentages; numbers with
    a thousands separator (4,000); a number followed by a unit or a counted noun (50 ms,
    32 layers, 2-core, 10 requests/s, 40 requests); "N of its/the M" and "up to N"; a list of
    parallelism degrees; measured ratios in words ("threefold", "two thirds", "two to three
    orders of magnitude"); any number
    in a caption; and in inline math an upper-case variable set to a number ($B=8$) or a negative
    power of ten.  Allowed: the names in ``_NAME_ALLOWED`` (model, hardware and engine
    identifiers) and run names ("run 1"), the nominal levels
    and constants in ``_LEVELS_ALLOWED``, counts written in words, years inside citations (the
    citation keys are removed), section and table numbers (they come from ``\\ref``).
    """
    body = tex.split("\\begin{document}", 1)[-1]
    body = "\n".join(re.sub(r"(?<!\\)%.*", "", line) for line in body.splitlines())
    for name in _NAME_ALLOWED:
        body = body.replace(name, " ")
    # names of runs and leases ("run 1 to run 2", "runs 1, 2 and lease 2"), not counts
    body = re.sub(r"\b(runs?|leases?)~?\s*\d(\s*(,|and)\s*\d)*\b", " ", body)
    body = re.sub(r"\\(cite|ref|label|eqref|input|includegraphics|url|href|texttt|"
                  r"bibliography|bibliographystyle)\{[^}]*\}", " ", body)
    body = re.sub(r"\\(begin|end)\{[^}]*\}(\[[^\]]*\])?", " ", body)
    body = re.sub(r"[\d.]+\\(textwidth|linewidth|columnwidth|baselineskip)", " ", body)
    body = re.sub(r"\\resizebox\{[^}]*\}\{[^}]*\}", " ", body)
    math = re.findall(r"\$([^$]*)\$", body)
    body = re.sub(r"\$[^$]*\$|\\\[.*?\\\]|\\begin\{(equation|align)\*?\}.*?\\end\{\1\*?\}", " ",
                  body, flags=re.DOTALL)
    body, captions = _strip_balanced(body, "\\caption")
    num = rf"(?<![\w.\\-]){_NUM}(?![\w])"
    patterns = [
        rf"(?<![\w.\\]){_NUM}\s*\\,?\\%",  # percentages
        r"(?<![\w.\\])\d+\.\d+(?![\w])",  # decimals
        rf"(?<![\w.\\]){_NUM}(?=(?:~|\\,|\s+|-)(?:{_UNITS})(?![A-Za-z]))",  # quantities
        # a counted noun up to four words later: "27 NIST StRD non-linear regression problems"
        rf"(?<![\w.\\-]){_NUM}(?=(?:[\s~]+[A-Za-z][\w-]*){{1,4}}[\s~]+(?:{_UNITS})(?![A-Za-z]))",
        r"(?<![\w.\\])\d{1,3}(?:\{,\}\d{3}|,\d{3})+",  # thousands separators
        rf"(?<![\w.\\]){_NUM}(?=\s+of\s+(?:its|the)\s+\d)",  # "N of its M"
        rf"(?<=of its ){_NUM}|(?<=of the ){_NUM}(?![\w])|(?<=up to ){_NUM}(?![\w])",
        r"(?<=parallelism )\d+",  # "tensor parallelism 2, 4, 8": a configuration list
        # measured ratios rendered in words: "almost threefold", "about two thirds",
        # "two to three orders of magnitude"
        r"\b(?:two|three|four|five|six|ten)fold\b|\b(?:two|three|one) (?:thirds?|quarters?)\b",
        r"\b(?:one|two|three|four)(?: to (?:two|three|four|five))? orders? of magnitude\b",
    ]
    spans = {}
    for pat in patterns:
        for m in re.finditer(pat, body):
            spans.setdefault(m.start(), m.group(0))
    hits = [spans[k] for k in sorted(spans)]
    for cap in captions:
        hits += re.findall(num, re.sub(r"\$[^$]*\$", " ", cap))
    for m in math:
        hits += re.findall(rf"\b[A-Z]\s*=\s*({_NUM})(?![\w.])", m)
        hits += re.findall(r"\d+\^\{?-\d+\}?", m)  # a measured magnitude: order $10^{-25}$
    return [h for h in hits if re.sub(r"\s*\\,?\\%$", "", h.strip()) not in _LEVELS_ALLOWED]


@pytest.mark.parametrize("text, flagged", [
    ("a step of 50 ms here", ["50"]),
    ("on a 2-core host", ["2"]),
    ("8 of its 32 layers", ["8", "32"]),
    ("contexts up to 8192 tokens", ["8192"]),
    ("fit to 4,000 composed steps", ["4,000"]),
    ("at 6 requests/s over", ["6"]),
    ("an error of 3.5\\,\\% here", ["3.5\\,\\%"]),
    ("\\caption{Runs (40 requests, 8 in flight).}", ["40", "8"]),
    ("decode steps at $B=8$ differ", ["8"]),
    ("solves the 27 NIST StRD non-linear regression problems", ["27"]),
    ("a residual sum of squares of order $10^{-25}$", ["10^{-25}"]),
    ("Llama2-70B (tensor parallelism 2, 4, 8)", ["2"]),
    ("TPOT is over-predicted almost threefold", ["threefold"]),
    ("under-predicted by more than two thirds", ["two thirds"]),
    ("times span two to three orders of magnitude", ["two to three orders of magnitude"]),
    ("in 12 runs from two leases", ["12"]),
])
def test_hand_typed_check_flags_quantities(text, flagged):
    assert sorted(_hand_typed_numbers(text)) == sorted(flagged)


@pytest.mark.parametrize("text", [
    "the layer shapes of Llama-3-8B and Qwen2.5-7B on one H200, H100 or DGX-A100",
    "reaches \\CmpSeedAll\\,\\% held out, \\SynthN{} steps, 95\\,\\% intervals",
    "three of its eight parameters, Section~\\ref{sec:data}, \\cite{kwon2023vllm}",
    "$1-\\E^{-k_B B}$ at $B=1$ and \\[ T = 2 S \\]",
    "\\caption{Two runs in \\texttt{data/gpu-1/}, see Table~\\ref{tab:x}.}",
    "fitted on run 1 and predicting run 2 of the H100 traces",
    "calibrated across runs 1, 2 and lease~2, or runs 1 and 2, applied to lease 3",
])
def test_hand_typed_check_allows_names_words_and_macros(text):
    assert _hand_typed_numbers(text) == []


def test_paper_has_no_hand_typed_results():
    """Outside equations and references, numbers in the paper's prose and captions come from
    macros (numbers.tex): see ``_hand_typed_numbers`` for what is flagged and allowed."""
    bad = _hand_typed_numbers((ROOT / "paper" / "main.tex").read_text())
    assert not bad, f"numbers typed in the paper's text (use macros from numbers.tex): {bad[:20]}"


def test_pipeline_makefile_declares_targets():
    mk = (NB_DIR / "pipeline.mk").read_text()
    for target in ("notebooks:", "paper:", "paper-check:", "notebooks-store:", "nbval:"):
        assert re.search(rf"^{re.escape(target)}", mk, re.MULTILINE), f"pipeline.mk lacks {target}"
    for var in ("$(PY)", "$(VENV_STAMP)", "QUICK"):
        assert var in mk


# --- scripts/check_paper_inputs.py --------------------------------------------------------

SCRIPT = ROOT / "scripts" / "check_paper_inputs.py"


def _run_check(tmp_path, *extra):
    return subprocess.run([sys.executable, str(SCRIPT), "--tex", str(tmp_path / "paper/main.tex"),
                           "--stamp", str(tmp_path / "stamp"), *extra],
                          check=False, capture_output=True, text=True)


def _paper(tmp_path, body: str):
    (tmp_path / "paper" / "tables").mkdir(parents=True)
    (tmp_path / "figures").mkdir()
    (tmp_path / "paper" / "main.tex").write_text(
        "\\graphicspath{{../figures/}}\n\\begin{document}\n" + body + "\n\\end{document}\n")


def test_check_paper_inputs_passes_on_fresh_files(tmp_path):
    _paper(tmp_path, "\\input{numbers.tex}\n\\includegraphics[width=2cm]{fig}\n"
                     "\\input{tables/t.tex}\n% \\includegraphics{commented_out}\n")
    (tmp_path / "stamp").write_text("")
    old = time.time() - 100
    os.utime(tmp_path / "stamp", (old, old))
    for p in ("paper/numbers.tex", "figures/fig.pdf", "paper/tables/t.tex"):
        (tmp_path / p).write_text("x")
    r = _run_check(tmp_path)
    assert r.returncode == 0, r.stderr
    assert "all 3 files" in r.stdout


def test_check_paper_inputs_flags_missing_and_stale(tmp_path):
    _paper(tmp_path, "\\input{numbers.tex}\n\\includegraphics{fig}\n\\input{tables/gone.tex}\n")
    (tmp_path / "paper/numbers.tex").write_text("x")
    (tmp_path / "figures/fig.png").write_text("x")
    old = time.time() - 100
    for p in ("paper/numbers.tex", "figures/fig.png"):
        os.utime(tmp_path / p, (old, old))
    (tmp_path / "stamp").write_text("")
    r = _run_check(tmp_path, "--pdf", str(tmp_path / "paper/main.pdf"))
    assert r.returncode == 1
    assert "tables/gone.tex}: no such file" in r.stderr
    assert "fig.png is older than" in r.stderr
    assert "numbers.tex is older than" in r.stderr
    assert "main.pdf was not built" in r.stderr
    r = _run_check(tmp_path, "--allow", "numbers.tex", "--allow", "fig")
    assert "numbers.tex is older" not in r.stderr and "fig.png" not in r.stderr


def test_check_paper_inputs_bad_arguments(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "--tex", str(tmp_path / "none.tex"),
                        "--stamp", str(tmp_path / "none")], check=False, capture_output=True, text=True)
    assert r.returncode == 2 and "does not exist" in r.stderr
