"""Check results remembered by the content of the files they were read from.

Two entries: what the code's forms say (``checked_fixes``, which ``patch``
plans from) and the verdicts with behaviour (``judged_fixes``). The key is the
tool's own code, the bytes of the selected rule files and reference drafter
configs, whether the target runs behaviour, and the sha256 of every file the
rules name (anchors and behaviour files), so a hit is exactly the answer a
fresh evaluation would give. A run that had to search the package for moved
code is not cached (its answer depends on files outside the key). A hit needs
no parse, no libcst import and no child process. ``DFLASH_DOCTOR_NO_CACHE=1``
turns it off; a cache that cannot be read or written is skipped, never an error.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from .model import FixResult, ToolError
from .paths import cache_dir, caches_disabled, write_atomically
from .rules import Rule
from .source import SiteError, SourceTree

if TYPE_CHECKING:
    from .draft.config import DraftConfig
    from .behaviour.computed import Computed
    from .targets import ResolvedTarget

def checked_fixes(tree: SourceTree, rules: tuple[Rule, ...]) -> tuple[FixResult, ...]:
    """What the code's forms alone say."""
    files = sorted({a.file for rule in rules for a in rule.anchors} | {rule.applies.file for rule in rules})
    key = None if caches_disabled() else _key(tree, rules, files, "structure")
    if key is not None:
        cached = _load(key)
        if cached is not None:
            tree.remember_inspected(cached["inspected"])
            return tuple(FixResult.from_json(fix) for fix in cached["fixes"])
    from .engine import Checker

    checker = Checker(tree)
    fixes = checker.run(rules)
    if key is not None and not checker.scanned:
        _store(key, tree, fixes)
    return fixes


def judged_fixes(resolved: ResolvedTarget, rules: tuple[Rule, ...], user: DraftConfig | None = None) -> tuple[tuple[FixResult, ...], Computed | None]:
    """The verdicts: behaviour decides where the target can run the tree's code,
    structure explains; and what the tree computes for ``user``'s config (not cached)."""
    tree = resolved.tree
    files = sorted({relpath for rule in rules for relpath in rule.files})
    mode = "behaviour" if resolved.behaviour is not None else "structure only"
    key = None if caches_disabled() or user is not None else _key(tree, rules, files, mode, _references())
    if key is not None:
        cached = _load(key)
        if cached is not None:
            tree.remember_inspected(cached["inspected"])
            return tuple(FixResult.from_json(fix) for fix in cached["fixes"]), None
    from .verdicts import judge

    fixes, probes, scanned = judge(resolved, rules, user)
    if key is not None and not scanned:
        _store(key, tree, fixes)
    return fixes, probes


def _store(key: str, tree: SourceTree, fixes: tuple[FixResult, ...]) -> None:
    entry = {"inspected": tree.inspected(), "fixes": [fix.to_json() for fix in fixes]}
    try:
        path = _path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, json.dumps(entry))
    except (OSError, ToolError):
        pass


def _references() -> list[str]:
    from .behaviour.reference import reference_dir

    paths = sorted([*reference_dir().glob("*.json"), reference_dir() / "names.toml"])  # names.toml: the reasons' words
    return [hashlib.sha256(path.read_bytes()).hexdigest() for path in paths]


def _key(tree: SourceTree, rules: tuple[Rule, ...], files: list[str], mode: str, references: list[str] | None = None) -> str | None:
    try:
        material = {
            "tool": _tool_digest(),
            "mode": mode,
            "rules": [hashlib.sha256(rule.source.read_bytes()).hexdigest() for rule in rules],
            "references": references or [],
            "files": {relpath: tree.digest(relpath) for relpath in files},
        }
    except (OSError, SiteError):
        return None
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


@cache
def _tool_digest() -> str:
    """Hash of the package's own sources: a changed engine never reads old results."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).resolve().parent.rglob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _path(key: str) -> Path:
    return cache_dir() / "results" / key[:2] / f"{key}.json"


def _load(key: str) -> dict | None:
    try:
        entry = json.loads(_path(key).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, dict) and "fixes" in entry and "inspected" in entry else None
