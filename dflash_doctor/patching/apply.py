"""Write a patch plan, or undo it, with the safety rules of the patch command.

Under the lock, before anything is written: every file must still have the
bytes the check read, and every new source must compile. Then, per file: the
original goes to the backup, the manifest records the change, and the file is
replaced atomically with its mode and owner kept. Restore writes the backup
back, only over a file that still has the bytes the patch wrote.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
from collections.abc import Iterator
from pathlib import PurePosixPath

from ..model import ToolError
from .caps import BACKUP_CAP, FILE_CAP, PYC_HEADER
from .files import DIRECTORY, FILE, SYMLINK, TEMP_SUFFIX, FileStat, LinkRefused, TreeFiles, symlink_refusal
from .plan import FileChange
from .state import (
    APPLIED,
    BACKUPS,
    CHANGED,
    LOCK,
    MANIFEST,
    STATE_DIR,
    AppliedPatch,
    PatchedFile,
    State,
    read_state,
    sha256,
    write_state,
)


def apply_changes(files: TreeFiles, changes: tuple[FileChange, ...], tool_version: str) -> None:
    applied_at = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    reals = _real_paths(files, [change.file for change in changes])
    with _locked_state(files, list(reals.values())) as (state, like):
        for change in changes:
            current = files.read(reals[change.file], FILE_CAP)
            if current is None or sha256(current) != change.sha256_before:
                now = "is gone" if current is None else f"has sha256 {sha256(current)[:12]}"
                raise ToolError(
                    f"{change.file} changed since it was checked (it {now}, the check read "
                    f"{change.sha256_before[:12]}); nothing was changed: run patch again"
                )
            try:
                compile(change.after, change.file, "exec", dont_inherit=True)
            except (SyntaxError, ValueError) as exc:
                raise ToolError(f"the patched {change.file} does not compile ({exc}); nothing was changed") from None
        files.still_there()  # writes go to the tree held since before the check; a swapped path is refused
        done: list[str] = []
        for change in changes:
            patches = tuple(
                AppliedPatch(site.fix, site.symbol, site.form, site.produces, tool_version, applied_at)
                for site in change.sites
            )
            try:
                _write_patched(files, state, like, change, reals[change.file], patches)
            except ToolError as exc:
                if done:
                    raise ToolError(f"{exc} (already patched in this run: {', '.join(done)})") from None
                raise
            done.append(change.file)


def _real_paths(files: TreeFiles, relpaths: list[str]) -> dict[str, str]:
    """Where each file is written: its real path (a symlinked file is written
    at its target, inside the tree's package); two names of one file are refused."""
    reals = {relpath: files.real(relpath) for relpath in relpaths}
    if len(set(reals.values())) < len(reals):
        raise ToolError(f"two of {', '.join(sorted(reals))} are the same file (symlinks); nothing was changed")
    return reals


def _write_patched(
    files: TreeFiles, state: State, like: FileStat, change: FileChange, real: str, patches: tuple[AppliedPatch, ...]
) -> None:
    """``change.file`` is what the check read and the manifest records; ``real`` is written."""
    mode = files.stat(real)
    if mode is None:
        raise ToolError(f"{change.file} is gone; nothing was changed for it")
    entry = state.get(change.file)
    fresh_backup = False
    if entry is not None and entry.status(change.sha256_before) == APPLIED:
        # Patched before for another fix: the backup already holds the original.
        new_entry = PatchedFile(change.file, entry.sha256_before, change.sha256_after, entry.patches + patches)
        backup = files.read(new_entry.backup, BACKUP_CAP)
        if backup is None or sha256(backup) != new_entry.sha256_before:
            raise ToolError(
                f"the backup {new_entry.backup} of {change.file} is missing or damaged; {change.file} is unchanged"
            )
    else:
        # First patch of this file, or a record of bytes it no longer has (reinstalled since).
        new_entry = PatchedFile(change.file, change.sha256_before, change.sha256_after, patches)
        backup = files.read(new_entry.backup, BACKUP_CAP)
        if backup is None or sha256(backup) != new_entry.sha256_before:
            try:
                files.write_atomic(new_entry.backup, change.before, mode)
            except ToolError as exc:
                raise ToolError(f"cannot keep a backup of {change.file}, so it is unchanged: {exc}") from None
            fresh_backup = True
    previous = dict(state)
    state[change.file] = new_entry
    write_state(files, state, like)
    try:
        files.write_atomic(real, change.after, mode)
    except ToolError:
        state.clear()
        state.update(previous)
        with contextlib.suppress(ToolError):
            write_state(files, state, like)
            if fresh_backup and _unused(state, new_entry.backup):
                files.remove(new_entry.backup)
        raise
    if entry is not None and _unused(state, entry.backup):
        files.remove(entry.backup)
    try:
        drop_stale_bytecode(files, change.file)
    except ToolError as exc:
        raise ToolError(
            f"{change.file} is patched, but {exc}: remove it by hand, or Python may run the old code"
        ) from None


@dataclasses.dataclass(frozen=True)
class RestorePlan:
    restore: tuple[PatchedFile, ...]  # files that still have the patched bytes
    forget: tuple[PatchedFile, ...]  # records of files that already have their original bytes


def plan_restore(files: TreeFiles, only: frozenset[str] | None) -> RestorePlan:
    return _restore_plan(files, read_state(files), only)


def _restore_plan(files: TreeFiles, state: State, only: frozenset[str] | None) -> RestorePlan:
    selected = [entry for entry in state.values() if only is None or entry.fixes & only]
    restore: list[PatchedFile] = []
    forget: list[PatchedFile] = []
    for entry in selected:
        others = entry.fixes - only if only is not None else frozenset()
        if others:
            raise ToolError(
                f"{entry.file} also holds the patch for {', '.join(sorted(others))}: "
                "restore those too (--only each) or everything; nothing was changed"
            )
        current = files.read(files.real(entry.file), FILE_CAP)
        status = entry.status(None if current is None else sha256(current))
        if status == CHANGED:
            now = "is gone" if current is None else f"has sha256 {sha256(current)[:12]}"
            raise ToolError(
                f"{entry.file} was changed since dflash-doctor patched it (it {now}, the patch wrote "
                f"{entry.sha256_after[:12]}); not restoring over someone else's edit. Nothing was changed; "
                f"the original is in {entry.backup}"
            )
        if status == APPLIED:
            _backup_of(files, entry)  # decided before anything is said or written
        (restore if status == APPLIED else forget).append(entry)
    return RestorePlan(tuple(restore), tuple(forget))


def apply_restore(files: TreeFiles, plan: RestorePlan) -> None:
    only = frozenset(fix for entry in plan.restore + plan.forget for fix in entry.fixes)
    reals = _real_paths(files, [entry.file for entry in plan.restore])
    with _locked_state(files, list(reals.values())) as (state, like):
        again = _restore_plan(files, state, only)  # the same judgement, now under the lock
        if {e.file for e in again.restore} != {e.file for e in plan.restore}:
            raise ToolError(
                "the patched files changed while restore was asking; nothing was changed: run restore again"
            )
        files.still_there()
        for entry in again.restore:
            original = _backup_of(files, entry)
            real = files.real(entry.file)
            if real != reals[entry.file]:
                raise ToolError(
                    f"{entry.file} was relinked while restore was asking; nothing was changed: run restore again"
                )
            mode = files.stat(real)
            if mode is None:
                raise ToolError(
                    f"{entry.file} was removed while restore ran; it is not restored (its original is in "
                    f"{entry.backup})"
                )
            files.write_atomic(real, original, mode)
            drop_stale_bytecode(files, entry.file)
            _forget(files, state, like, entry)
        for entry in again.forget:
            _forget(files, state, like, entry)


def _backup_of(files: TreeFiles, entry: PatchedFile) -> bytes:
    original = files.read(entry.backup, BACKUP_CAP)
    if original is None or sha256(original) != entry.sha256_before:
        raise ToolError(f"the backup {entry.backup} of {entry.file} is missing or damaged; {entry.file} is unchanged")
    return original


def _forget(files: TreeFiles, state: State, like: FileStat, entry: PatchedFile) -> None:
    del state[entry.file]
    write_state(files, state, like)
    if _unused(state, entry.backup):
        files.remove(entry.backup)


def _unused(state: State, backup: str) -> bool:
    return all(other.backup != backup for other in state.values())


@contextlib.contextmanager
def _locked_state(files: TreeFiles, writing: list[str]) -> Iterator[tuple[State, FileStat]]:
    """The manifest under the lock, and how state files are created (the
    owner of the directory that holds the package). Temp files an interrupted run
    left beside the files about to be written are removed first. When
    nothing stays patched, the state directory is removed again, so a
    restored tree is the tree it was."""
    root = files.stat("")
    if root is None:
        raise ToolError(f"{files.location} is gone")
    dir_like = FileStat(0o755, root.uid, root.gid)
    like = FileStat(0o644, root.uid, root.gid)
    _check_state_paths(files)
    read_state(files)  # a manifest this tool did not write is refused before anything is created
    files.make_dir(STATE_DIR, dir_like)
    with files.lock(LOCK):
        try:
            state = read_state(files)
            files.make_dir(BACKUPS, dir_like)
            _remove_temps(files, [MANIFEST, *writing])
            yield state, like
        finally:
            with contextlib.suppress(ToolError):
                if files.stat(MANIFEST) is None:
                    _remove_state_dir(files)


def _check_state_paths(files: TreeFiles) -> None:
    """Refuse a planted state before creating anything: each state path is
    absent or of its kind, never a symlink (stat never follows one, and a
    symlinked directory on the way is refused by ``files`` itself)."""
    for relpath, kind in ((STATE_DIR, DIRECTORY), (BACKUPS, DIRECTORY), (LOCK, FILE), (MANIFEST, FILE)):
        found = files.stat(relpath)
        if found is None:
            continue
        if found.kind == SYMLINK:
            raise symlink_refusal(relpath, files.location)
        if found.kind != kind:
            raise ToolError(f"{relpath} in {files.location} is not a {kind}; nothing was changed")


def _remove_state_dir(files: TreeFiles) -> None:
    """Each part on its own: a backups directory someone else filled stays, the lock we made goes."""
    with contextlib.suppress(ToolError):
        _remove_temps(files, [MANIFEST])
    for relpath in (BACKUPS, LOCK, STATE_DIR):  # the lock is still held by us: a waiting run fails at once
        with contextlib.suppress(ToolError):
            files.remove(relpath)


def _remove_temps(files: TreeFiles, relpaths: list[str]) -> None:
    """Temp files an interrupted write left: beside these files, and among the backups."""
    backups = [f"{BACKUPS}/{name}" for name in files.list_dir(BACKUPS) if name.endswith(TEMP_SUFFIX)]
    for relpath in relpaths:
        path = PurePosixPath(relpath)
        files.remove(str(path.with_name(f".{path.name}{TEMP_SUFFIX}")))
    for relpath in backups:
        files.remove(relpath)


def drop_stale_bytecode(files: TreeFiles, relpath: str) -> None:
    """Remove bytecode of this file that Python would use without looking at
    the source again (unchecked hash-based .pyc); timestamp and checked pycs
    notice the new bytes by themselves."""
    path = PurePosixPath(relpath)
    try:
        # beside the name Python imports, in the directory's real place
        cache = f"{files.real(str(path.parent))}/__pycache__"
        names = files.list_dir(cache)
    except LinkRefused:
        return  # a __pycache__ reached through a link is not the tree's to clean
    for name in names:
        if not (name.startswith(f"{path.stem}.") and name.endswith(".pyc")):
            continue
        try:
            header = files.read(f"{cache}/{name}", PYC_HEADER) or b""
        except LinkRefused:
            continue
        flags = int.from_bytes(header[4:8], "little")
        if flags & 0b01 and not flags & 0b10:
            files.remove(f"{cache}/{name}")
