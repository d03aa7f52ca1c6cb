"""The layout the code promises (docs/architecture.md, "Packages"), read from its imports.

Every `import` and `from … import` in the product packages is read with `ast` (lazy ones
inside functions too), so an arrow nobody meant shows up here, not in a review: no
import circle between modules, no import up the layers, and no folder of more than 16
modules.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
#: The product packages, lowest first: each may import only itself and what is below it.
LAYERS = ("engine", "streaming", "server", "sensestream")
#: streaming's one window on the engine: the plain data types it trades in.
STREAMING_FROM_ENGINE = ("engine.types",)
MAX_MODULES = 16


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def product_files() -> Iterator[Path]:
    for package in (*LAYERS, "web_client"):
        yield from sorted((REPO / package).rglob("*.py"))


def imports_of(path: Path) -> set[str]:
    """The project modules `path` imports (a `from X import name` counts as X.name when
    that is a module, else X)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    own = module_name(path)
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package of this module
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    modules = {module_name(p) for p in product_files()}
    return {name for name in found if name in modules and name != own}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in product_files()}


def layer(module: str) -> int:
    top = module.split(".", maxsplit=1)[0]
    return LAYERS.index(top) if top in LAYERS else -1


def test_no_import_runs_up_the_layers(graph: dict[str, set[str]]) -> None:
    upward = [
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if layer(target) > layer(module)
    ]
    assert not upward, upward


def test_streaming_takes_only_the_engines_types(graph: dict[str, set[str]]) -> None:
    wider = [
        f"{module} -> {target}"
        for module, targets in graph.items()
        if module.startswith("streaming")
        for target in targets
        if target.startswith("engine") and target not in STREAMING_FROM_ENGINE
    ]
    assert not wider, wider


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            members = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                members.append(member)
                if member == node:
                    break
            if len(members) > 1:
                found.append(sorted(members))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circle(graph: dict[str, set[str]]) -> None:
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_circle() -> None:
    toy = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(toy) == [["a", "b", "c"]]


def test_no_folder_holds_more_than_16_modules() -> None:
    folders = {p.parent for p in product_files()}
    crowded = {
        str(folder.relative_to(REPO)): count
        for folder in folders
        if (count := len(list(folder.glob("*.py")))) > MAX_MODULES
    }
    assert not crowded, crowded
