"""Every reference a reader meets in the repository can be opened.

Comments, docstrings, notebooks, scripts and docs cite ``docs/*.md`` sections, ``README.md``
sections and modules; they must not cite files that are not in the repository (the
developers' notes, a data mirror's provenance files) or internal document and issue numbers.
``docs/model.md``'s parameter table must agree with the models' ``Param`` entries.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from perfmodel.core.model import MODELS

ROOT = Path(__file__).resolve().parents[1]
SELF = Path(__file__).resolve()
TEXT_SUFFIXES = {".py", ".sh", ".md", ".ipynb", ".txt", ".toml", ".yaml", ".yml", ".cfg",
                 ".mk", ".json", ".tex", ".rst"}

#: references a reader of the repository cannot open (pattern -> what it is)
UNREACHABLE = {
    r"\b(?:MODEL|CONTRACT|STYLE|DATA|TOOLCHAIN)\.md\b": "developers' notes outside the repository",
    r"SOURCE\.txt": "a data mirror's provenance file (cite perfmodel/data/datasets/ or upstream)",
    r"\b[Ss]eeds?[ -]?0\d\d\b": "an internal document number",
    r"\b[Ss]ource (?:document|report)s?\b": "internal documents",
    r"\b[Ii]ssues? \d+\b": "an internal issue number (state the reason instead)",
}

#: a cited Markdown file: `path.md#anchor`, `path.md, Section` or `path.md (Section)`
CITATION = re.compile(
    r"`?(?P<path>(?:[\w.-]+/)*[\w.-]+\.md)`?"
    r"(?:#(?P<anchor>[\w-]+)|,\s+(?P<sec>[A-Z][\w -]*\w)(?=[)\],.:;]|$)"
    r"|\s+\((?P<psec>[A-Z][\w -]*\w)\))")


def _scanned_files() -> list[Path]:
    files: list[Path] = []
    for folder in ("perfmodel", "scripts", "tests", "benchmarks", "docs"):
        files += [p for p in (ROOT / folder).rglob("*")
                  if p.is_file() and p.suffix in TEXT_SUFFIXES and "__pycache__" not in p.parts]
    files += sorted((ROOT / "notebooks").glob("*.ipynb"))
    files += [ROOT / "README.md", ROOT / "Makefile", ROOT / "notebooks" / "pipeline.mk",
              ROOT / "data" / "README.md", *sorted((ROOT / "data").glob("*/README.md"))]
    return sorted({p.resolve() for p in files if p.is_file() and p.resolve() != SELF})


FILES = _scanned_files()


def _text(path: Path) -> str:
    """The file's text; for a notebook, its cells' sources (not the stored outputs)."""
    raw = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix != ".ipynb":
        return raw
    cells = json.loads(raw)["cells"]
    return "\n".join("".join(c["source"]) if isinstance(c["source"], list) else c["source"]
                     for c in cells)


def _flat(text: str) -> str:
    """One line: wrapped comments and docstrings joined, so a citation may span lines."""
    return re.sub(r"\s*\n\s*(?:#+\s+)?", " ", text)


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _headings(md: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", md.read_text(encoding="utf-8"), flags=re.DOTALL)
    return [m.group(1).strip() for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*$", text, re.MULTILINE)]


def _rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


def test_the_scan_covers_the_repository():
    names = {_rel(p) for p in FILES}
    assert {"perfmodel/core/model.py", "README.md", "docs/model.md", "scripts/collect_all.sh"} <= names
    assert any(n.startswith("notebooks/") and n.endswith(".ipynb") for n in names)
    assert "tests/test_docs.py" not in names


@pytest.mark.parametrize("pattern", list(UNREACHABLE), ids=list(UNREACHABLE.values()))
def test_no_unreachable_references(pattern):
    rx = re.compile(pattern)
    hits = []
    for p in FILES:
        for i, line in enumerate(_text(p).splitlines(), 1):
            if rx.search(line):
                hits.append(f"{_rel(p)}:{i}: {line.strip()[:100]}")
    assert not hits, (f"{UNREACHABLE[pattern]}; cite docs/model.md, README.md, data/README.md, "
                      "a module or a public reference instead:\n" + "\n".join(hits))


def test_cited_docs_exist():
    cited = {}
    for p in FILES:
        for path in re.findall(r"(?<![\w/.-])docs/[\w./-]*\w\.md\b", _text(p)):
            cited.setdefault(path, _rel(p))
    assert "docs/model.md" in cited
    missing = [f"{src}: {path}" for path, src in cited.items() if not (ROOT / path).is_file()]
    assert not missing, "cited docs that do not exist:\n" + "\n".join(missing)


def test_cited_sections_exist():
    problems = []
    for p in FILES:
        for m in CITATION.finditer(_flat(_text(p))):
            path = m.group("path")
            target = ROOT / path
            if not target.is_file():
                if path.startswith("docs/"):
                    problems.append(f"{_rel(p)}: cites {path}, which does not exist")
                continue  # another project's README.md, named in passing
            section = m.group("sec") or m.group("psec")
            heads = _headings(target)
            if m.group("anchor") and m.group("anchor") not in {_slug(h) for h in heads}:
                problems.append(f"{_rel(p)}: {path}#{m.group('anchor')} is no heading's anchor")
            if section and not any(h.lower() == section.lower()
                                   or h.lower().startswith(section.lower() + " (") for h in heads):
                problems.append(f"{_rel(p)}: {path}, {section!r} is no heading of {path}")
    assert not problems, "\n".join(problems)


def test_citation_pattern_reads_the_forms_used():
    forms = {
        "(docs/model.md, Fit scales)": ("docs/model.md", None, "Fit scales"),
        "docs/model.md (Evaluation) calls": ("docs/model.md", None, "Evaluation"),
        "`docs/model.md#initialisation`": ("docs/model.md", "initialisation", None),
        "(`data/README.md`, Closed-loop runs)": ("data/README.md", None, "Closed-loop runs"),
        "docs/model.md, Closed-loop benchmark: 40": ("docs/model.md", None, "Closed-loop benchmark"),
    }
    for text, (path, anchor, section) in forms.items():
        m = CITATION.search(_flat(text))
        assert m and m.group("path") == path and m.group("anchor") == anchor, text
        assert (m.group("sec") or m.group("psec")) == section, text
    assert _flat("(docs/model.md,\n    #   Closed-loop benchmark)") == \
        "(docs/model.md, Closed-loop benchmark)"
    assert _slug("Closed-loop benchmark") == "closed-loop-benchmark"


def test_docs_point_only_inside_the_repository():
    for md in sorted((ROOT / "docs").rglob("*.md")):
        text = md.read_text(encoding="utf-8")
        assert "shared/" not in text and "../" not in text, f"{_rel(md)} points outside the repository"


def _doc_param_table() -> dict[str, tuple[str, float, float]]:
    text = (ROOT / "docs" / "model.md").read_text(encoding="utf-8")
    section = text.split("### Parameters", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+?) \| (\S+) \.\. (\S+) \|", section, re.MULTILINE)
    return {name: (unit, float(lo), float(hi)) for name, unit, lo, hi in rows}


def test_model_doc_parameter_table_matches_the_code():
    table = _doc_param_table()
    assert len(table) >= 10
    code = {}
    for model in MODELS.values():
        for prm in model.params:
            code.setdefault(prm.name, set()).add((prm.unit, prm.lower, prm.upper))
    assert set(table) == set(code), (f"missing from docs/model.md: {sorted(set(code) - set(table))}; "
                                     f"not a parameter: {sorted(set(table) - set(code))}")
    for name, row in table.items():
        assert row in code[name], f"docs/model.md: {name} is {row}, the code says {code[name]}"
