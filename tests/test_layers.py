"""The package graph of dflash_doctor has no cycles.

A node is a subpackage (``behaviour``) or a top-level module (``rules``); an edge
is any import between two nodes, at module level or inside a function, so a
cycle cannot hide behind a lazy import. docs/architecture.md lists the layers.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import dflash_doctor

REPO = Path(__file__).resolve().parent.parent  # the checkout's package and docs (CI tests an installed copy)
PACKAGE = REPO / dflash_doctor.__name__
ARCHITECTURE = REPO / "docs" / "architecture.md"


def node_of(module: str, nodes: set[str]) -> str | None:
    """The node of a dotted name inside the package (``dflash_doctor.behaviour.run`` → ``behaviour``)."""
    parts = module.split(".")
    if parts[0] != PACKAGE.name or len(parts) < 2:
        return None
    return parts[1] if parts[1] in nodes else None


def imported(path: Path, package: str) -> set[str]:
    """Every dotted name a module imports, anywhere in it (``from x import y`` gives ``x`` and ``x.y``)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names.add(module)
            names |= {f"{module}.{alias.name}" for alias in node.names}
    return names


def package_graph(root: Path) -> dict[str, set[str]]:
    """Node → the nodes it imports, for the package at ``root``."""
    nodes = {path.name for path in root.iterdir() if (path / "__init__.py").is_file()}
    nodes |= {path.stem for path in root.glob("*.py") if path.stem not in ("__init__", "__main__")}
    graph: dict[str, set[str]] = {node: set() for node in nodes}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        source = node_of(".".join((root.name, *parts)), nodes)
        if source is None:
            continue
        package = ".".join((root.name, *parts[:-1]))
        for name in imported(path, package):
            target = node_of(name, nodes)
            if target is not None and target != source:
                graph[source].add(target)
    return graph


def a_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of ``graph`` as its nodes in order, the first repeated at the end, or []."""
    state: dict[str, int] = {}  # 1 on the path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state and (found := visit(target)):
                return found
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def test_the_package_graph_has_no_cycle() -> None:
    cycle = a_cycle(package_graph(PACKAGE))
    assert cycle == [], "package cycle: " + " → ".join(cycle)


def documented_layers(text: str) -> dict[str, int]:
    """Node → its layer's number, from the numbered list under ``## Layers``."""
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    layers: dict[str, int] = {}
    for number, names in re.findall(r"^(\d+)\. \*\*\w+\*\*: ([^(\n]*)", section, re.M):
        layers |= {name: int(number) for name in re.findall(r"`(\w+)`", names)}
    return layers


def test_each_part_imports_only_its_layer_or_below() -> None:
    graph = package_graph(PACKAGE)
    layers = documented_layers(ARCHITECTURE.read_text())
    assert set(layers) == set(graph), "docs/architecture.md's layers list every part once"
    upward = sorted(f"{a} ({layers[a]}) → {b} ({layers[b]})" for a in graph for b in graph[a] if layers[b] > layers[a])
    assert upward == [], "imports from a higher layer"


def test_a_cycle_through_a_function_level_import_is_found(tmp_path: Path) -> None:
    root = tmp_path / PACKAGE.name
    (root / "low").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "low" / "__init__.py").write_text("from .inner import f\n")
    (root / "low" / "inner.py").write_text("def f():\n    from ..high import g\n    return g\n")
    (root / "high.py").write_text("from . import low\nimport dflash_doctor.mid\n")
    (root / "mid.py").write_text("from dflash_doctor.low.inner import f\n")
    graph = package_graph(root)
    assert graph == {"low": {"high"}, "high": {"low", "mid"}, "mid": {"low"}}
    assert a_cycle(graph) == ["high", "low", "high"]
    (root / "low" / "inner.py").write_text("def f():\n    return 1\n")
    assert a_cycle(package_graph(root)) == []
