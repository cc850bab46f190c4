"""Pipeline helpers for ``notebooks/pipeline.mk`` (stdlib only): the dependency scan of
notebooks on package sources, and the stripping of executed notebooks.

See :mod:`perfmodel.report.paperio`; verified in ``tests/report/test_paperio.py``.
"""
from __future__ import annotations

import ast
import json
import os
from pathlib import Path

from perfmodel.errors import InputError
from perfmodel.report.paperio._common import (
    _atomic_write,
)

# ---------------------------------------------------------------------------
# pipeline helpers: dependency scan and notebook stripping (stdlib only)
# ---------------------------------------------------------------------------

def _imports_of(tree: ast.AST, package: str, here: tuple[str, ...]) -> set[str]:
    """Dotted module paths inside ``package`` (relative to it; ``""`` is the package
    itself) that the syntax tree imports.  ``here`` is the package that holds the
    module (for relative imports); ``from a import b`` counts ``a`` and, where ``b``
    is a module, ``a.b`` (a name that is not a module resolves to no file)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == package:
                    found.add(".".join(parts[1:]))
        elif isinstance(node, ast.ImportFrom):
            mod = (node.module or "").split(".") if node.module else []
            if node.level > 0:
                if node.level - 1 > len(here):
                    continue
                base = [*here[:len(here) - (node.level - 1)], *mod]
            elif mod and mod[0] == package:
                base = mod[1:]
            else:
                continue
            found.add(".".join(base))
            found.update(".".join([*base, a.name]) for a in node.names if a.name != "*")
    return found


def _module_name(path: Path, pkg: Path) -> tuple[tuple[str, ...], str]:
    """(the package holding ``path``, its dotted module path), both relative to ``pkg``."""
    parts = path.relative_to(pkg).with_suffix("").parts
    if parts[-1] == "__init__":
        return parts[:-1], ".".join(parts[:-1])
    return parts[:-1], ".".join(parts)


def _module_imports(path: Path, package: str, pkg: Path | None = None) -> set[str]:
    """Dotted modules of ``package`` (folder ``pkg``, default ``path``'s folder) that the
    Python source ``path`` imports."""
    pkg = path.parent if pkg is None else pkg
    here, name = _module_name(path, pkg)
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except SyntaxError:  # a file being edited: depend on every module beside it (conservative)
        return {_module_name(p, pkg)[1] for p in path.parent.glob("*.py")} - {name}
    return _imports_of(tree, package, here) - {name}


def _notebook_imports(nb_path: Path, package: str) -> set[str]:
    nb = json.loads(nb_path.read_text())
    src = "\n".join("".join(c.get("source", "")) for c in nb.get("cells", [])
                    if c.get("cell_type") == "code")
    src = "\n".join(line for line in src.splitlines() if not line.lstrip().startswith(("%", "!")))
    return _imports_of(ast.parse(src), package, ())


def notebook_deps(nb_path: str | os.PathLike, package_dir: str | os.PathLike) -> list[Path]:
    """Package source files a notebook depends on: its imports, closed transitively.

    ``package_dir`` is the package folder (``perfmodel/``).  Imports resolve to
    dotted module paths at any depth (``from perfmodel.core import fit``,
    ``from ..data.trace import x``); a module brings the ``__init__.py`` of every
    package above it (importing it runs them), and a package its ``__init__.py``.
    ``__init__.py`` and ``errors.py`` are always included.
    """
    nb_path, pkg = Path(nb_path), Path(package_dir)
    if not nb_path.is_file():
        raise InputError(f"notebook {nb_path} does not exist")
    if not (pkg / "__init__.py").is_file():
        raise InputError(f"package_dir {pkg} has no __init__.py")
    package = pkg.name

    def files_of(mod: str) -> list[Path]:
        parts = mod.split(".") if mod else []
        out = [pkg.joinpath(*parts[:i], "__init__.py") for i in range(len(parts))]
        if parts and pkg.joinpath(*parts[:-1], f"{parts[-1]}.py").is_file():
            out.append(pkg.joinpath(*parts[:-1], f"{parts[-1]}.py"))
        elif pkg.joinpath(*parts, "__init__.py").is_file():
            out.append(pkg.joinpath(*parts, "__init__.py"))
        else:
            return []  # an attribute, not a module
        return [f for f in out if f.is_file()]

    todo = {"", "errors"} | _notebook_imports(nb_path, package)
    seen: set[str] = set()
    files: set[Path] = set()
    while todo:
        mod = todo.pop()
        if mod in seen:
            continue
        seen.add(mod)
        for f in files_of(mod):
            if f not in files:
                files.add(f)
                todo |= _module_imports(f, package, pkg) - seen
    return sorted(files)


def strip_notebook(path: str | os.PathLike, *, keep_images: bool = False,
                   keep_stderr: bool = False) -> bool:
    """Strip run noise from an executed notebook in place; True when it changed.

    Removes papermill's per-cell and notebook metadata, execution timestamps,
    the ``injected-parameters`` cell, widget state, (unless ``keep_images``)
    image outputs and (unless ``keep_stderr``) stderr streams such as warnings,
    which carry absolute paths, so the committed notebook keeps only small
    text outputs for nbval.  Execution counts are renumbered 1, 2, ...
    """
    p = Path(path)
    if not p.is_file():
        raise InputError(f"notebook {p} does not exist")
    raw = p.read_text()
    nb = json.loads(raw)
    cells = []
    count = 0
    for c in nb.get("cells", []):
        md = c.get("metadata", {})
        if "injected-parameters" in md.get("tags", []):
            continue
        md.pop("papermill", None)
        md.pop("execution", None)
        md.pop("ExecuteTime", None)
        if c.get("cell_type") == "code":
            count += 1
            c["execution_count"] = count
            outs = []
            for o in c.get("outputs", []):
                if o.get("output_type") == "stream" and o.get("name") == "stderr" \
                        and not keep_stderr:
                    continue  # warnings carry absolute paths and vary between machines
                if "execution_count" in o:
                    o["execution_count"] = count
                o.get("metadata", {}).pop("papermill", None)
                data = o.get("data")
                if data is not None and not keep_images:
                    for k in [k for k in data if k.startswith("image/")]:
                        del data[k]
                    if not data:
                        continue
                    o["metadata"] = {}
                outs.append(o)
            c["outputs"] = outs
        cells.append(c)
    nb["cells"] = cells
    meta = nb.get("metadata", {})
    for k in ("papermill", "widgets", "execution"):
        meta.pop(k, None)
    text = json.dumps(nb, indent=1, ensure_ascii=False, sort_keys=True) + "\n"
    if text == raw:
        return False
    _atomic_write(p, text)
    return True
