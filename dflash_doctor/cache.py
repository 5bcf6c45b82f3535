"""Check results remembered with every file they were read from.

Two kinds of result: what the code's forms say (``structure_fixes``, which
``patch`` plans from) and the verdicts with behaviour (``judged_fixes``).
A key (the tool's own code, the bytes of the selected rule files and reference
drafter configs, what runs behaviour, and the state of every file the rules
name) selects a few candidate entries; each holds what its evaluation read
through the tree (``SourceTree.reads``: the sha256 of every file, files it
looked for and did not find, read errors; ``scans``: what a search of the
package for moved code found). A candidate is a hit only when the tree still
reads the same on every one of them, so a hit is the answer a fresh
evaluation would give, whichever files behaviour followed. A hit re-reads and
re-digests those files, and repeats a search unless no file of the package
changed by its metadata (``stamp.py``), but needs no parse, no libcst import
and no child process. A remote tree's states are the digests its collector
computed on the host (``targets/snapshot.py``), so an ssh check's hit needs
neither the files' bytes nor the host's behaviour child; checks in one process
under one key take turns (a fleet's hosts with the same files and interpreter:
the first one's answer is the others' hit). Unknown answers are kept like
the others; an evaluation whose behaviour child failed or timed out is not (its
answer depends on the machine's load, not on the files), nor one made offline
(what could not be fetched then is not the tree's answer).
``DFLASH_DOCTOR_NO_CACHE=1`` turns the cache off; one that cannot be read or
written is skipped, never an error.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
import threading
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from . import stamp
from .model import FixResult, ToolError
from .paths import cache_dir, OFFLINE, caches_disabled, write_atomically
from .standalone.probe import python_files
from .rules import Rule, for_engine, reference_dir
from .source import SourceError, SourceTree

if TYPE_CHECKING:
    from .draft.config import DraftConfig, TargetLayers
    from .behaviour.computed import Computed
    from .targets import ResolvedTarget

# Entries kept under one key: trees that differ only in files the rules do not name.
MAX_CANDIDATES = 8


def structure_fixes(tree: SourceTree, rules: tuple[Rule, ...]) -> tuple[FixResult, ...]:
    """What the code's forms alone say."""
    files = sorted({a.file for rule in rules for a in rule.anchors} | {rule.applies.file for rule in rules})
    key = None if caches_disabled() else _key(tree, rules, files, "structure")
    if key is not None:
        tree.stamping = True  # a stamp before the first search, should checking a candidate make it
        fixes = _hit(key, tree)
        if fixes is not None:
            return fixes
    from .structure.forms import FormReader  # heavy: libcst, which a warm check never imports

    fixes = FormReader(tree).run(rules)
    if key is not None:
        _store(key, tree, fixes)
    return fixes


def judged_fixes(
    resolved: ResolvedTarget,
    rules: tuple[Rule, ...],
    user: DraftConfig | None = None,
    target: TargetLayers | None = None,
) -> tuple[tuple[FixResult, ...], Computed | None]:
    """The verdicts: behaviour decides where the target can run the tree's code,
    structure explains; and what the tree computes for ``user``'s config (not cached),
    on ``target`` (from --target-config) where given.
    Each fix is judged by the rule of the tree's engine (``for_engine``)."""
    tree = resolved.tree
    rules = for_engine(rules, tree.engine.name)
    files = sorted({relpath for rule in rules for relpath in rule.files})
    where = (
        f"behaviour on {tree.python or 'this machine'}"
        if resolved.behaviour is not None
        else f"structure only: {resolved.no_behaviour}"
    )
    key = None if caches_disabled() or user is not None else _key(tree, rules, files, where, _references())
    if key is None:
        return _judged(resolved, rules, user, target, None)
    with _one_at_a_time(key):
        tree.stamping = True  # a stamp before the first search, should checking a candidate make it
        fixes = _hit(key, tree)
        if fixes is not None:
            return fixes, None
        return _judged(resolved, rules, user, target, key)


def _judged(
    resolved: ResolvedTarget,
    rules: tuple[Rule, ...],
    user: DraftConfig | None,
    target: TargetLayers | None,
    key: str | None,
) -> tuple[tuple[FixResult, ...], Computed | None]:
    """A fresh evaluation, kept under ``key`` (None: not kept)."""
    from .verdicts import judge  # warm check: verdicts pulls in every behaviour module, which a cache hit never needs

    fixes, probes, steady = judge(resolved, rules, user, target)
    if key is not None and steady and not OFFLINE:  # offline: what could not be fetched is not the tree's answer
        _store(key, resolved.tree, fixes)
    return fixes, probes


_keys_lock = threading.Lock()
_key_locks: dict[str, threading.Lock] = {}


@contextlib.contextmanager
def _one_at_a_time(key: str) -> Iterator[None]:
    """Checks in this process under one key take turns (a fleet's hosts with the same
    files): the first evaluates, the others then find its answer a hit."""
    with _keys_lock:
        lock = _key_locks.setdefault(key, threading.Lock())
    with lock:
        yield


def _hit(key: str, tree: SourceTree) -> tuple[FixResult, ...] | None:
    """The fixes of the first candidate under ``key`` the tree still reads the same as."""
    for entry in _load(key):
        try:
            tree.prefetch(entry["reads"])
            same = (
                all(tree.state(relpath) == state for relpath, state in entry["reads"].items())
                and (entry["plugins"] == tree.plugin_state())
                and _same_searches(tree, entry["scans"], entry["stamps"])
            )
            if same:
                tree.remember_inspected(entry["inspected"])
                return tuple(FixResult.from_json(fix) for fix in entry["fixes"])
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            continue  # an entry of another shape: never trusted
        except SourceError:
            continue  # a search it made cannot be repeated here: not known to be the same
    return None


def _same_searches(tree: SourceTree, scans: list, stamps: dict) -> bool:
    """Whether every search an entry's answer made would find the same files: its directory's
    stamp unchanged (no file read), else the search repeated."""
    unchanged: dict[str, bool] = {}
    for under, mentions, names, found in scans:
        if stamps.get(under) is not None:
            if under not in unchanged:
                unchanged[under] = tree.package_unchanged(under, stamps[under])
            if unchanged[under]:
                continue
        searched = tree.files_mentioning(names, under) if mentions else tree.files_defining(names, under)
        if searched != found:
            return False
    return True


def _store(key: str, tree: SourceTree, fixes: tuple[FixResult, ...]) -> None:
    reads = tree.reads()
    entry = {
        "reads": reads,
        "plugins": tree.plugin_state(),
        "scans": tree.scans(),
        "stamps": tree.search_stamps,
        "inspected": tree.inspected(),
        "fixes": [fix.to_json() for fix in fixes],
    }
    others = [old for old in _load(key) if old.get("reads") != reads]
    try:
        path = _path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, json.dumps({"entries": [entry, *others][:MAX_CANDIDATES]}))
    except (OSError, ToolError):
        pass


def _references() -> list[str]:
    paths = sorted([*reference_dir().glob("*.json"), reference_dir() / "names.toml"])  # names.toml: the reasons' words
    return [hashlib.sha256(path.read_bytes()).hexdigest() for path in paths]


def _key(
    tree: SourceTree, rules: tuple[Rule, ...], files: list[str], where: str, references: list[str] | None = None
) -> str | None:
    try:
        material = {
            "tool": _tool_digest(),
            "engine": tree.engine.name,  # a tree holding two engines is judged once for each
            "where": where,
            "rules": [hashlib.sha256(rule.source.read_bytes()).hexdigest() for rule in rules],
            "references": references or [],
            "files": {relpath: tree.state(relpath) for relpath in files},
            "transformers": _transformers(tree) if references is not None else [],
        }
    except OSError:
        return None
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def _transformers(tree: SourceTree) -> list[str]:
    from .behaviour.transformers import identity  # cheap reads; the module itself is light

    return identity(tree)


@cache
def _tool_digest() -> str:
    """Hash of the package's own sources and the Python running it: a changed engine never reads old results.
    Remembered under the sources' metadata (``stamp.py``, as a package search is): reading and hashing
    them all took ~7 ms of a warm check, their metadata ~2 ms."""
    package = Path(__file__).resolve().parent
    rows = stamp.stamp(str(package.parent), package.name)
    state = hashlib.sha256(json.dumps([sys.version, rows]).encode()).hexdigest()
    kept = cache_dir() / "tool.json"
    try:
        remembered = json.loads(kept.read_text(encoding="utf-8"))
        if (
            isinstance(remembered, dict)
            and remembered.get("state") == state
            and isinstance(remembered.get("digest"), str)
        ):
            return remembered["digest"]
    except (OSError, ValueError):
        pass
    digest = hashlib.sha256(sys.version.encode())
    for _, path in python_files(str(package.parent), package.name):
        digest.update(Path(path).read_bytes())
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(kept, json.dumps({"state": state, "digest": digest.hexdigest()}))
    except (OSError, ToolError):
        pass
    return digest.hexdigest()


def _path(key: str) -> Path:
    return cache_dir() / "results" / key[:2] / f"{key}.json"


def _load(key: str) -> list[dict]:
    try:
        stored = json.loads(_path(key).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    entries = stored.get("entries") if isinstance(stored, dict) else None
    return [entry for entry in entries if isinstance(entry, dict)] if isinstance(entries, list) else []
