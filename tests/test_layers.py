"""The package's layers: imports go only downward, and no module imports itself back.

Layers, lowest first (README, "Layout")::

    root helpers (perfmodel/*.py) < data < core < stats < decisions < report < cli

Every ``import`` statement counts, also one inside a function (a lazy import
is still a dependency).  Two exceptions, both of which import nothing at run
time that the rule could be about:

* imports under ``if TYPE_CHECKING:`` (``perfmodel/__init__.py`` names its
  lazily loaded re-exports there for type checkers; they never run);
* ``__main__`` modules, which are entry points: they may import any layer,
  and nothing may import them.
"""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "perfmodel"
LAYERS = ("", "data", "core", "stats", "decisions", "report", "cli")


def _modules() -> dict[str, Path]:
    """Dotted name -> file of every module in the package."""
    out = {}
    for f in sorted(PKG.rglob("*.py")):
        parts = ("perfmodel", *f.relative_to(PKG).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


MODULES = _modules()


def _layer(name: str) -> int:
    parts = name.split(".")
    if len(parts) > 2 and parts[1] in LAYERS:
        return LAYERS.index(parts[1])
    if len(parts) == 2 and parts[1] in LAYERS[1:]:  # the subpackage itself
        return LAYERS.index(parts[1])
    return 0  # perfmodel itself and the helpers at its root


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.AST):
    """Every Import/ImportFrom node, skipping the bodies of ``if TYPE_CHECKING:``."""
    todo = [tree]
    while todo:
        node = todo.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                todo.extend(child.orelse)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child
            todo.append(child)


def imports_of(name: str) -> set[str]:
    """Modules of the package that module ``name`` imports (resolved to known modules)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in _import_nodes(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                mod = ".".join([*base, *([node.module] if node.module else [])])
            else:
                mod = node.module or ""
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in MODULES else mod
                       for a in node.names]
        for t in targets:
            if t.split(".")[0] != "perfmodel":
                continue
            while t not in MODULES and "." in t:  # an attribute of a module
                t = t.rsplit(".", 1)[0]
            if t != name:
                found.add(t)
    return found


def _checked() -> list[str]:
    return [m for m in MODULES if not m.endswith("__main__")]


def test_the_layers_exist():
    for layer in LAYERS[1:]:
        assert f"perfmodel.{layer}" in MODULES, layer


@pytest.mark.parametrize("name", _checked())
def test_imports_only_go_down(name):
    mine = _layer(name)
    upward = sorted(t for t in imports_of(name) if _layer(t) > mine)
    assert not upward, (f"{name} (layer {LAYERS[mine] or 'root'}) imports higher layers: "
                        + ", ".join(f"{t} ({LAYERS[_layer(t)]})" for t in upward))


def test_nothing_imports_an_entry_point():
    for name in MODULES:
        bad = sorted(t for t in imports_of(name) if t.endswith("__main__"))
        assert not bad, (name, bad)


def test_no_import_cycle():
    graph = {m: imports_of(m) for m in _checked()}
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for t in sorted(graph.get(m, ())):
            if state.get(t) == 1:
                cycle = stack[stack.index(t):] + [t]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_the_checker_sees_lazy_relative_and_dotted_imports(tmp_path):
    """The resolver itself: a lazy import, a relative import and ``from pkg.sub import mod``."""
    src = ("def f():\n    from perfmodel.core import fit\n"
           "from ..data.trace import read_trace\nimport perfmodel.stats.validation as v\n"
           "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from perfmodel.cli import main\n")
    tree = ast.parse(src)
    nodes = list(_import_nodes(tree))
    assert len(nodes) == 4  # the TYPE_CHECKING import is skipped
    MODULES["perfmodel.stats._probe"] = tmp_path / "probe.py"
    (tmp_path / "probe.py").write_text(src)
    try:
        got = imports_of("perfmodel.stats._probe")
    finally:
        del MODULES["perfmodel.stats._probe"]
    assert got == {"perfmodel.core.fit", "perfmodel.data.trace", "perfmodel.stats.validation"}


def test_the_lazy_re_exports_point_at_real_modules():
    import perfmodel

    for name, module in perfmodel._EXPORTS.items():
        assert module in MODULES, (name, module)
        assert hasattr(importlib.import_module(module), name), (name, module)
        assert _layer(module) <= LAYERS.index("core"), (name, module)
