"""What dflash-doctor patched in a tree, kept beside the package.

``.dflash-doctor/`` sits next to the engine's package (``vllm/``; a name Python can never import;
the remote probe collects the manifest too, so ssh checks are marked):
``manifest.json`` records each patched file with the sha256 of its original
and patched bytes and which fix, form and tool version did it; ``backups/``
holds the original bytes; ``lock`` serialises patch and restore.

The manifest is written before a file is replaced and the file is judged by
its bytes alone: it is patched when it has the recorded patched hash, the
original when it has the original hash, and changed by someone else
otherwise. So a run that dies at any point leaves a state that reads true.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any, ClassVar

from ..engines import ENGINES, Engine
from ..model import PRESENT, CheckReport, ToolError
from ..standalone.probe import PATCH_MANIFEST as MANIFEST
from ..standalone.probe import PATCH_STATE_DIR as STATE_DIR
from ..source import SourceError, SourceTree

from .caps import MANIFEST_CAP

if TYPE_CHECKING:
    from .files import FileStat, TreeFiles

LOCK = f"{STATE_DIR}/lock"
BACKUPS = f"{STATE_DIR}/backups"
SCHEMA = "dflash-doctor/patch-state/v1"

APPLIED = "applied"
ORIGINAL = "original"
CHANGED = "changed"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclasses.dataclass(frozen=True)
class AppliedPatch:
    fix: str
    symbol: str
    form: str  # the form the check found
    produces: str  # the present form the patch made
    tool_version: str
    applied_at: str


@dataclasses.dataclass(frozen=True)
class PatchedFile:
    file: str
    sha256_before: str  # the original bytes, kept in the backup
    sha256_after: str
    patches: tuple[AppliedPatch, ...]

    @property
    def backup(self) -> str:
        return backup_path(self.file, self.sha256_before)

    @property
    def fixes(self) -> frozenset[str]:
        return frozenset(patch.fix for patch in self.patches)

    def status(self, current_sha256: str | None) -> str:
        if current_sha256 == self.sha256_after:
            return APPLIED
        if current_sha256 == self.sha256_before:
            return ORIGINAL
        return CHANGED

    def to_json(self) -> dict[str, Any]:
        return {
            "sha256_before": self.sha256_before,
            "sha256_after": self.sha256_after,
            "backup": self.backup,
            "patches": [dataclasses.asdict(patch) for patch in self.patches],
        }


def backup_path(relpath: str, sha256_before: str) -> str:
    """Named after the file and its content; never ends in ``.py``."""
    return f"{BACKUPS}/{PurePosixPath(relpath).name}.{sha256_before[:16]}"


State = dict[str, PatchedFile]


def parse_state(text: str, package: str) -> State:
    """Raises ValueError when the manifest is not one this tool wrote: every
    entry names a ``.py`` file under ``package`` (``vllm/``) by a plain relative path, and
    every field has the type and shape this tool writes."""
    data = json.loads(text)
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("files"), dict):
        raise ValueError(f"not a {SCHEMA} manifest")
    state: State = {}
    for relpath, entry in data["files"].items():
        state[relpath] = _entry(relpath, entry, package)
    return state


_SHA256 = re.compile(r"[0-9a-f]{64}")
_PATCH_FIELDS = tuple(field.name for field in dataclasses.fields(AppliedPatch))


def _entry(relpath: str, entry: Any, package: str) -> PatchedFile:
    parts = relpath.split("/")
    if (
        parts[0] != package
        or not relpath.endswith(".py")
        or any(part in ("", ".", "..") for part in parts)
        or "\x00" in relpath
    ):
        raise ValueError(f"entry {relpath!r} is not a .py file under {package}/")
    if not isinstance(entry, dict):
        raise ValueError(f"entry {relpath!r}: not an object")
    for field in ("sha256_before", "sha256_after"):
        if not isinstance(entry.get(field), str) or not _SHA256.fullmatch(entry[field]):
            raise ValueError(f"entry {relpath!r}: {field} is not a sha256")
    patches = entry.get("patches")
    if not isinstance(patches, list) or not all(
        isinstance(patch, dict) and set(patch) == set(_PATCH_FIELDS) and all(isinstance(v, str) for v in patch.values())
        for patch in patches
    ):
        raise ValueError(f"entry {relpath!r}: patches is not a list of patch records")
    applied = tuple(AppliedPatch(**patch) for patch in patches)
    return PatchedFile(relpath, entry["sha256_before"], entry["sha256_after"], applied)


def read_state(files: TreeFiles) -> State:
    data = files.read(MANIFEST, MANIFEST_CAP)
    if data is None:
        return {}
    try:
        return parse_state(data.decode("utf-8"), files.package)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        other = _other_engine(data, files.package)
        if other is not None:  # one state directory beside the packages of a directory holding two engines
            raise ToolError(
                f"{MANIFEST} in {files.location} records patches of {other.display}'s files: patch and restore "
                f"one engine at a time (`dflash-doctor restore --engine {other.name}` first); nothing was changed"
            ) from None
        raise ToolError(f"{MANIFEST} in {files.location} cannot be read ({exc}); nothing was changed") from None


def _other_engine(data: bytes, package: str) -> Engine | None:
    """The registered engine, not ``package``'s, whose package holds every file a manifest this tool wrote names."""
    for engine in ENGINES.values():
        if engine.package == package:
            continue
        try:
            if parse_state(data.decode("utf-8"), engine.package):
                return engine
        except (ValueError, UnicodeDecodeError, RecursionError):
            continue
    return None


def write_state(files: TreeFiles, state: State, like: FileStat) -> None:
    """The manifest, atomically; no manifest at all when nothing is patched."""
    if not state:
        files.remove(MANIFEST)
        return
    data = {"schema": SCHEMA, "files": {relpath: state[relpath].to_json() for relpath in sorted(state)}}
    files.write_atomic(MANIFEST, (json.dumps(data, indent=2) + "\n").encode("utf-8"), like)


@dataclasses.dataclass(frozen=True)
class LocalPatches:
    """The report section of a tree dflash-doctor patched: each manifest entry and its status (not in the table)."""

    entries: tuple[tuple[str, PatchedFile], ...]  # (the file's status, its manifest entry)
    name: ClassVar[str] = "local_patches"

    def to_json(self) -> list[dict[str, Any]]:
        return [{"file": entry.file, "status": status, **entry.to_json()} for status, entry in self.entries]

    def lines(self) -> list[str]:
        return []


def mark_local_patches(report: CheckReport, tree: SourceTree) -> CheckReport:
    """Tell a patched tree from a release with the fix: evidence of a form a
    local patch made gets a note, the fix a reason, and the report a
    ``local_patches`` section. Trees without a manifest are left as they are."""
    try:
        data = tree.read(MANIFEST)
        state = parse_state(data.decode("utf-8"), tree.package) if data else {}
    except (SourceError, ValueError, UnicodeDecodeError, RecursionError):
        return report
    if not state:
        return report
    section = []
    applied: dict[tuple[str, str, str], AppliedPatch] = {}
    for relpath, entry in sorted(state.items()):
        try:
            status = entry.status(tree.digest(relpath))
        except SourceError:
            status = CHANGED
        section.append((status, entry))
        if status == APPLIED:
            for patch in entry.patches:
                applied[(relpath, patch.symbol, patch.produces)] = patch
    fixes = []
    for fix in report.fixes:
        evidence = []
        for item in fix.evidence:
            found = applied.get((item.file, item.symbol, item.form))
            if found is not None and found.fix == fix.id:
                note = f"patched locally by dflash-doctor {found.tool_version} on {found.applied_at} (was {found.form})"
                item = dataclasses.replace(item, note=note)
            evidence.append(item)
        marked = evidence != list(fix.evidence)
        reason = fix.reason
        if marked and fix.status == PRESENT:
            reason = "present because of a local dflash-doctor patch; `dflash-doctor restore` undoes it"
        fixes.append(dataclasses.replace(fix, evidence=tuple(evidence), reason=reason))
    return dataclasses.replace(report, fixes=tuple(fixes), sections=(*report.sections, LocalPatches(tuple(section))))
