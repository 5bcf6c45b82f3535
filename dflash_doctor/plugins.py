"""An engine's plugins installed beside a tree: distributions whose entry points the
engine loads at start (its ``plugin_groups``; vLLM's ``vllm.general_plugins`` and
``vllm.platform_plugins``), where they can patch the engine's classes. A plugin whose
code names a definition on a fix's route may change what runs there; one that names
none is listed only."""

from __future__ import annotations

import ast
import configparser
import dataclasses
from pathlib import Path

from .engines import Engine
from .standalone.probe import read_regular

MAX_ENTRY_POINTS_BYTES = 256 * 1024
MAX_PLUGIN_SOURCE_BYTES = 2 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class Plugin:
    """One entry point the engine loads at start, and the names its module's code uses."""

    distribution: str
    group: str
    name: str
    target: str  # "module:attribute"
    names: frozenset[str]  # identifiers and strings in the plugin's module; empty when unread
    read: bool  # whether the plugin's module could be read

    def touches(self, route: set[str]) -> list[str]:
        return sorted(self.names & route)


def installed_plugins(root: Path, engine: Engine) -> tuple[Plugin, ...]:
    """Every entry point in the engine's plugin groups of the distributions in ``root``
    (a site-packages) whose code lives outside the engine's package."""
    found = []
    for meta in sorted([*root.glob("*.dist-info"), *root.glob("*.egg-info")]):
        data, _ = read_regular(str(meta / "entry_points.txt"), MAX_ENTRY_POINTS_BYTES)  # type: ignore[no-untyped-call]
        if not data:
            continue
        parser = configparser.ConfigParser(interpolation=None, delimiters=("=",))
        parser.optionxform = str  # type: ignore[assignment, method-assign]
        try:
            parser.read_string(data.decode("utf-8", "replace"))
        except configparser.Error:
            continue
        distribution = meta.name.split("-")[0]
        for group in engine.plugin_groups:
            if parser.has_section(group):
                for name, target in parser.items(group):
                    if target.strip().split(".")[0].split(":")[0] == engine.package:
                        continue  # the package's own plugins are the tree's code, judged with it
                    names, read = _module_names(root, target.strip())
                    found.append(Plugin(distribution, group, name, target.strip(), names, read))
    return tuple(found)


def _module_names(root: Path, target: str) -> tuple[frozenset[str], bool]:
    module = target.partition(":")[0].strip().replace(".", "/")
    for candidate in (f"{module}.py", f"{module}/__init__.py"):
        data, _ = read_regular(str(root / candidate), MAX_PLUGIN_SOURCE_BYTES)  # type: ignore[no-untyped-call]
        if data is None:
            continue
        try:
            tree = ast.parse(data)
        except (SyntaxError, ValueError):
            return frozenset(), False
        names: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                names.add(node.id)
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.alias):
                names.update(node.name.split("."))
            elif isinstance(node, ast.ImportFrom) and node.module:
                names.update(node.module.split("."))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 200:
                names.update(node.value.replace(":", ".").split("."))
        return frozenset(names), True
    return frozenset(), False
