"""File operations of patch and restore, behind one small interface.

Every path is relative to the tree root (the directory that holds the engine's
package, ``vllm/``) and is reached from the root without following a symlink: a
planted link (``.dflash-doctor``, ``backups``, a directory on the way) is refused,
never written through. A target file that is itself a symlink is written at its
real path, found with ``real``, and only when that lies inside the tree's
package. Every read is bounded by a ``Cap``. ``LocalFiles`` holds the root
open from the start, so nothing is reached by name once the tree is opened;
``sftp_files.SftpFiles`` does what SFTP allows (re-checks with ``lstat``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import posixpath
import stat
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from ..model import ToolError
from .beneath import DIR_FLAGS, WalkError, open_dir
from .caps import LIST_CAP, Cap

TEMP_SUFFIX = ".dflash-doctor-tmp"

FILE = "file"
DIRECTORY = "directory"
SYMLINK = "symlink"
OTHER = "other"


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
    """A path that is a symlink, or leads out of the tree's package: never used."""


def symlink_refusal(relpath: str, location: str) -> LinkRefused:
    return LinkRefused(
        f"{relpath} in {location} is a symlink: patch and restore never write through one; nothing was changed"
    )


def outside_refusal(relpath: str, location: str, real: str, package: str) -> LinkRefused:
    return LinkRefused(
        f"{relpath} in {location} links to {real}, outside the tree's {package}/: "
        "patch and restore never write outside the tree; nothing was changed"
    )


class TreeFiles(Protocol):
    location: str  # shown in messages
    package: str  # the engine's package under the root: the only place written

    def real(self, relpath: str) -> str:
        """The path of the file ``relpath`` names once its symlinks are
        resolved, relative to the root; ToolError when that is outside ``package``."""

    def read(self, relpath: str, cap: Cap) -> bytes | None:
        """The regular file's bytes, None if it does not exist; raises ToolError
        (also for a symlink, a FIFO, a device, or a file over ``cap``)."""

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
        """Names in the directory; empty if it does not exist; ToolError past ``LIST_CAP``."""

    def lock(self, relpath: str) -> contextlib.AbstractContextManager[None]:
        """Hold an exclusive lock on this file (created if needed) or raise
        ToolError at once; the lock ends with the process if it dies."""

    def still_there(self) -> None:
        """Raise ToolError when the tree's path no longer names the tree these files hold."""


class LocalFiles:
    """A tree on this machine, held by one descriptor of its root from the moment
    it is opened: every path is resolved beneath that descriptor (``beneath``),
    and each directory, once opened, is kept, so the directory a file's bytes
    were checked in is the one its new bytes are renamed into."""

    def __init__(self, root: Path, package: str) -> None:
        self.location = str(root)
        self.package = package
        self.root = Path(os.path.realpath(root))
        try:
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise ToolError(f"cannot open {root}: {exc.strerror}") from None
        self._dirs: dict[str, int] = {"": fd}  # directory relpath -> its held descriptor
        weakref.finalize(self, _close_all, self._dirs)  # closed with the object, or at exit

    def still_there(self) -> None:
        held, named = os.fstat(self._dirs[""]), None
        with contextlib.suppress(OSError):
            named = os.stat(self.location)
        if named is None or (named.st_dev, named.st_ino) != (held.st_dev, held.st_ino):
            raise ToolError(
                f"{self.location} was moved or replaced while dflash-doctor ran (it no longer names the "
                "directory that was checked); nothing was changed"
            )

    def _dir(self, relpath: str) -> int:
        """The held descriptor of the directory ``relpath``, opened beneath the
        root the first time. FileNotFoundError when it is missing."""
        fd = self._dirs.get(relpath)
        if fd is None:
            parts = parts_of(relpath)
            try:
                fd = open_dir(self._dirs[""], parts)
            except WalkError as exc:
                raise self._not_a_directory("/".join(parts[: exc.depth + 1]), exc) from None
            self._dirs[relpath] = fd
        return fd

    def _forget_dir(self, relpath: str) -> None:
        for held in [name for name in self._dirs if name == relpath or name.startswith(f"{relpath}/")]:
            os.close(self._dirs.pop(held))

    def _parent(self, relpath: str) -> tuple[int, str]:
        """The held descriptor of the directory that holds ``relpath``, and its last name."""
        parent, _, name = relpath.rpartition("/")
        parts_of(relpath)
        return self._dir(parent), name

    def _not_a_directory(self, prefix: str, exc: OSError) -> ToolError:
        parent, name = self._parent(prefix)
        with contextlib.suppress(OSError):
            if stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
                return symlink_refusal(prefix, self.location)
        if exc.errno == errno.ENOTDIR:
            return ToolError(f"{prefix} in {self.location} is not a directory; nothing was changed")
        return ToolError(f"cannot open {prefix} in {self.location}: {exc.strerror}; nothing was changed")

    def _open(self, parent: int, name: str, relpath: str, flags: int, mode: int = 0o644) -> int:
        """``name`` opened without following a symlink; a symlink is refused."""
        try:
            return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=parent)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise symlink_refusal(relpath, self.location) from None
            raise

    def real(self, relpath: str) -> str:
        """Symlinks resolved by reading them beneath the root (``readlinkat``),
        never by name: an absolute link counts only when it names a path under
        the root's real path."""
        pending = parts_of(relpath)
        done: list[str] = []
        links = 0
        while pending:
            part = pending.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                if not done:
                    raise outside_refusal(
                        relpath,
                        self.location,
                        posixpath.normpath("/".join([str(self.root), part, *pending])),
                        self.package,
                    )
                done.pop()
                continue
            try:
                parent = self._dir("/".join(done))
                found = os.stat(part, dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                done += [part, *pending]  # nothing there to follow; reading it finds nothing
                break
            except OSError as exc:
                raise ToolError(f"cannot resolve {relpath}: {exc.strerror}") from None
            if not stat.S_ISLNK(found.st_mode):
                done.append(part)
                continue
            links += 1
            if links > 40:
                raise ToolError(f"cannot resolve {relpath}: too many levels of symbolic links")
            target = os.readlink(part, dir_fd=parent)
            if target.startswith("/"):
                inside = os.path.relpath(target, self.root) if target.startswith(f"{self.root}/") else None
                if inside is None:
                    raise outside_refusal(
                        relpath, self.location, posixpath.normpath("/".join([target, *pending])), self.package
                    )
                done, pending = [], [*inside.split("/"), *pending]
            else:
                pending = [*target.split("/"), *pending]
        inside = "/".join(done)
        if inside != self.package and not inside.startswith(self.package + "/"):
            raise outside_refusal(
                relpath, self.location, str(self.root / inside) if inside else str(self.root), self.package
            )
        return inside

    def read(self, relpath: str, cap: Cap) -> bytes | None:
        try:
            parent, name = self._parent(relpath)
            fd = self._open(parent, name, relpath, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ToolError(f"cannot read {relpath}: {exc.strerror}") from None
        with os.fdopen(fd, "rb") as handle:
            found = os.fstat(handle.fileno())
            if not stat.S_ISREG(found.st_mode):
                raise ToolError(f"{relpath} in {self.location} is not a regular file; nothing was changed")
            cap.check(relpath, self.location, found.st_size)
            try:
                data = handle.read(cap.limit)
            except OSError as exc:
                raise ToolError(f"cannot read {relpath}: {exc.strerror}") from None
            cap.check(relpath, self.location, len(data))  # it grew since fstat
            return data

    def stat(self, relpath: str) -> FileStat | None:
        try:
            if not relpath:
                found = os.fstat(self._dirs[""])
            else:
                parent, name = self._parent(relpath)
                found = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ToolError(f"cannot stat {relpath or self.location}: {exc.strerror}") from None
        return FileStat(found.st_mode & 0o7777, found.st_uid, found.st_gid, kind_of(found.st_mode))

    def write_atomic(self, relpath: str, data: bytes, like: FileStat) -> None:
        try:
            parent, name = self._parent(relpath)
            self._write_in(parent, name, relpath, data, like)
        except OSError as exc:
            raise ToolError(f"cannot write {relpath}: {exc.strerror}; it is unchanged") from None

    def _write_in(self, parent: int, name: str, relpath: str, data: bytes, like: FileStat) -> None:
        temp = f".{name}{TEMP_SUFFIX}"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=parent)  # an interrupted run's; a planted link is removed, never followed
        try:
            fd = os.open(
                temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=parent
            )
        except OSError as exc:
            raise ToolError(f"cannot write {relpath}: {exc.strerror}; it is unchanged") from None
        action = "write"
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
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
            parent, name = self._parent(relpath)
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
                fd = os.open(name, DIR_FLAGS, dir_fd=parent)
                try:
                    os.fchown(fd, like.uid, like.gid)
                    os.fchmod(fd, like.mode)
                except OSError:
                    os.close(fd)
                    raise
            except OSError as exc:
                with contextlib.suppress(OSError):
                    os.rmdir(name, dir_fd=parent)
                raise ToolError(
                    f"cannot give {relpath} the owner and mode of {self.location}: {exc.strerror}"
                ) from None
            self._dirs[relpath] = fd  # the directory just made is the one used from now on
            _fsync(parent)
        except OSError as exc:
            raise ToolError(f"cannot create {relpath} in {self.location}: {exc.strerror}") from None

    def remove(self, relpath: str) -> None:
        try:
            parent, name = self._parent(relpath)
            if stat.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
                self._forget_dir(relpath)
                os.rmdir(name, dir_fd=parent)
            else:
                os.unlink(name, dir_fd=parent)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise ToolError(f"cannot remove {relpath}: {exc.strerror}") from None

    def list_dir(self, relpath: str) -> list[str]:
        try:
            parent, name = self._parent(relpath)
            fd = self._open(parent, name, relpath, os.O_RDONLY | os.O_DIRECTORY)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise ToolError(f"cannot list {relpath}: {exc.strerror}") from None
        try:
            with os.scandir(fd) as found:
                return sorted(LIST_CAP.names(relpath, self.location, (entry.name for entry in found)))
        except OSError as exc:
            raise ToolError(f"cannot list {relpath}: {exc.strerror}") from None
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def lock(self, relpath: str) -> Iterator[None]:
        import fcntl  # POSIX only: the module is imported wherever a target is

        try:
            parent, name = self._parent(relpath)
            fd = self._open(parent, name, relpath, os.O_RDWR | os.O_CREAT)  # flock'ed, never read
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


def _close_all(held: dict[str, int]) -> None:
    for fd in held.values():
        with contextlib.suppress(OSError):
            os.close(fd)
    held.clear()


def _fsync(directory: int) -> None:
    """Make a rename durable; some filesystems cannot fsync a directory, which is not an error."""
    with contextlib.suppress(OSError):
        os.fsync(directory)
