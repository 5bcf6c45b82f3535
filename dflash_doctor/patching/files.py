"""File operations of patch and restore, behind one small interface.

Every path is relative to the tree root (the directory that holds ``vllm/``)
and is reached from the root one component at a time without following a
symlink: a planted link (``.dflash-doctor``, ``backups``, a directory on the
way) is refused, never written through. A target file that is itself a
symlink is written at its real path, found with ``real``, and only when that
lies inside the tree's ``vllm/``. ``LocalFiles`` works on this machine; a
remote implementation (SFTP) gives the same guarantees with a remote temp
file and posix-rename.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from ..model import ToolError

TEMP_SUFFIX = ".dflash-doctor-tmp"

FILE = "file"
DIRECTORY = "directory"
SYMLINK = "symlink"
OTHER = "other"

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclasses.dataclass(frozen=True)
class FileStat:
    mode: int  # permission bits only
    uid: int
    gid: int
    kind: str = FILE  # FILE, DIRECTORY, SYMLINK or OTHER, of the path itself (never followed)


def kind_of(st_mode: int) -> str:
    if stat.S_ISLNK(st_mode):
        return SYMLINK
    if stat.S_ISDIR(st_mode):
        return DIRECTORY
    return FILE if stat.S_ISREG(st_mode) else OTHER


def parts_of(relpath: str) -> list[str]:
    """The components of a plain relative path; ToolError for an absolute
    path, ``..``, ``.``, empty components or NUL."""
    parts = relpath.split("/")
    if relpath.startswith("/") or "\0" in relpath or any(part in ("", ".", "..") for part in parts):
        raise ToolError(f"refusing the path {relpath!r}: not a plain relative path inside the tree")
    return parts


class LinkRefused(ToolError):
    """A path that is a symlink, or leads out of the tree's ``vllm/``: never used."""


def symlink_refusal(relpath: str, location: str) -> LinkRefused:
    return LinkRefused(f"{relpath} in {location} is a symlink: patch and restore never write through one; nothing was changed")


def outside_refusal(relpath: str, location: str, real: str) -> LinkRefused:
    return LinkRefused(
        f"{relpath} in {location} links to {real}, outside the tree's vllm/: "
        "patch and restore never write outside the tree; nothing was changed"
    )


class TreeFiles(Protocol):
    location: str  # shown in messages

    def real(self, relpath: str) -> str:
        """The path of the file ``relpath`` names once its symlinks are
        resolved, relative to the root; ToolError when that is outside ``vllm/``."""

    def read(self, relpath: str) -> bytes | None:
        """The regular file's bytes, None if it does not exist; raises ToolError
        (also for a symlink, a FIFO or a device)."""

    def stat(self, relpath: str) -> FileStat | None:
        """Mode, owner and kind of the path itself, None if it does not exist; raises ToolError."""

    def write_atomic(self, relpath: str, data: bytes, like: FileStat) -> None:
        """Replace the file with ``data`` or leave it as it was: a temp file in
        the same directory (``.<name>.dflash-doctor-tmp``) is created
        exclusively, given ``like``'s mode and owner, fsynced, then renamed
        over the file; the directory is fsynced. Raises ToolError ("... it is
        unchanged"), after removing the temp file."""

    def make_dir(self, relpath: str, like: FileStat) -> None:
        """Create the directory (parents must exist) with ``like``'s mode and
        owner; fine if a directory (not a symlink) is there."""

    def remove(self, relpath: str) -> None:
        """Remove a file, a symlink or an empty directory; fine if it does not exist."""

    def list_dir(self, relpath: str) -> list[str]:
        """Names in the directory; empty if it does not exist."""

    def lock(self, relpath: str) -> contextlib.AbstractContextManager[None]:
        """Hold an exclusive lock on this file (created if needed) or raise
        ToolError at once; the lock ends with the process if it dies."""


class LocalFiles:
    """A tree on this machine, reached through directory descriptors."""

    def __init__(self, root: Path) -> None:
        self.root = Path(os.path.realpath(root))
        self.location = str(root)

    @contextlib.contextmanager
    def _parent(self, relpath: str) -> Iterator[tuple[int, str]]:
        """A descriptor of the directory that holds ``relpath``, reached from
        the root without following a symlink, and ``relpath``'s last name.
        Raises FileNotFoundError when a directory on the way is missing."""
        parts = parts_of(relpath)
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for depth, part in enumerate(parts[:-1]):
                try:
                    inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise self._not_a_directory("/".join(parts[: depth + 1]), fd, part) from None
                    raise
                os.close(fd)
                fd = inner
            yield fd, parts[-1]
        finally:
            os.close(fd)

    def _not_a_directory(self, prefix: str, parent: int, name: str) -> ToolError:
        with contextlib.suppress(OSError):
            if stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
                return symlink_refusal(prefix, self.location)
        return ToolError(f"{prefix} in {self.location} is not a directory; nothing was changed")

    def _open(self, parent: int, name: str, relpath: str, flags: int, mode: int = 0o644) -> int:
        """``name`` opened without following a symlink; a symlink is refused."""
        try:
            return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=parent)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise symlink_refusal(relpath, self.location) from None
            raise

    def real(self, relpath: str) -> str:
        parts_of(relpath)
        real = os.path.realpath(self.root / relpath)
        inside = os.path.relpath(real, self.root)
        if inside != "vllm" and not inside.startswith("vllm/"):
            raise outside_refusal(relpath, self.location, real)
        return Path(inside).as_posix()

    def read(self, relpath: str) -> bytes | None:
        try:
            with self._parent(relpath) as (parent, name):
                fd = self._open(parent, name, relpath, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ToolError(f"cannot read {relpath}: {exc.strerror}") from None
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise ToolError(f"{relpath} in {self.location} is not a regular file; nothing was changed")
            try:
                return handle.read()
            except OSError as exc:
                raise ToolError(f"cannot read {relpath}: {exc.strerror}") from None

    def stat(self, relpath: str) -> FileStat | None:
        try:
            if not relpath:
                found = os.stat(self.root)
            else:
                with self._parent(relpath) as (parent, name):
                    found = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ToolError(f"cannot stat {relpath or self.location}: {exc.strerror}") from None
        return FileStat(found.st_mode & 0o7777, found.st_uid, found.st_gid, kind_of(found.st_mode))

    def write_atomic(self, relpath: str, data: bytes, like: FileStat) -> None:
        try:
            with self._parent(relpath) as (parent, name):
                self._write_in(parent, name, relpath, data, like)
        except OSError as exc:
            raise ToolError(f"cannot write {relpath}: {exc.strerror}; it is unchanged") from None

    def _write_in(self, parent: int, name: str, relpath: str, data: bytes, like: FileStat) -> None:
        temp = f".{name}{TEMP_SUFFIX}"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=parent)  # an interrupted run's; a planted link is removed, never followed
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=parent)
        except OSError as exc:
            raise ToolError(f"cannot write {relpath}: {exc.strerror}; it is unchanged") from None
        action = "write"
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                if (os.fstat(fd).st_uid, os.fstat(fd).st_gid) != (like.uid, like.gid):
                    action = f"keep the owner {like.uid}:{like.gid} of"
                    os.fchown(fd, like.uid, like.gid)  # before chmod: chown clears set-id bits
                action = f"keep the mode {like.mode:o} of"
                os.fchmod(fd, like.mode)
                action = "write"
                os.fsync(fd)  # data, mode and owner are durable before the rename
            finally:
                os.close(fd)
            action = "replace"
            os.replace(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=parent)
            raise ToolError(f"cannot {action} {relpath}: {exc.strerror}; it is unchanged") from None
        _fsync(parent)

    def make_dir(self, relpath: str, like: FileStat) -> None:
        try:
            with self._parent(relpath) as (parent, name):
                try:
                    os.mkdir(name, 0o700, dir_fd=parent)
                except FileExistsError:
                    kind = kind_of(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
                    if kind == SYMLINK:
                        raise symlink_refusal(relpath, self.location) from None
                    if kind != DIRECTORY:
                        raise ToolError(f"{relpath} in {self.location} is not a directory; nothing was changed") from None
                    return
                try:
                    fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
                    try:
                        os.fchown(fd, like.uid, like.gid)
                        os.fchmod(fd, like.mode)
                    finally:
                        os.close(fd)
                except OSError as exc:
                    with contextlib.suppress(OSError):
                        os.rmdir(name, dir_fd=parent)
                    raise ToolError(
                        f"cannot give {relpath} the owner and mode of {self.location}: {exc.strerror}"
                    ) from None
                _fsync(parent)
        except OSError as exc:
            raise ToolError(f"cannot create {relpath} in {self.location}: {exc.strerror}") from None

    def remove(self, relpath: str) -> None:
        try:
            with self._parent(relpath) as (parent, name):
                if stat.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
                    os.rmdir(name, dir_fd=parent)
                else:
                    os.unlink(name, dir_fd=parent)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise ToolError(f"cannot remove {relpath}: {exc.strerror}") from None

    def list_dir(self, relpath: str) -> list[str]:
        try:
            with self._parent(relpath) as (parent, name):
                fd = self._open(parent, name, relpath, os.O_RDONLY | os.O_DIRECTORY)
            try:
                return sorted(os.listdir(fd))
            finally:
                os.close(fd)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise ToolError(f"cannot list {relpath}: {exc.strerror}") from None

    @contextlib.contextmanager
    def lock(self, relpath: str) -> Iterator[None]:
        import fcntl  # POSIX only: the module is imported wherever a target is

        try:
            with self._parent(relpath) as (parent, name):
                fd = self._open(parent, name, relpath, os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            raise ToolError(f"cannot open the lock {relpath}: {exc.strerror}") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ToolError(f"the lock {relpath} in {self.location} is not a regular file; nothing was changed")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ToolError(
                    f"another dflash-doctor patch or restore is running on {self.location} "
                    f"(it holds {relpath}); nothing was changed"
                ) from None
            yield
        finally:
            os.close(fd)


def _fsync(directory: int) -> None:
    """Make a rename durable; some filesystems cannot fsync a directory, which is not an error."""
    with contextlib.suppress(OSError):
        os.fsync(directory)
