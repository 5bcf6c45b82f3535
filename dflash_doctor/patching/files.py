"""File operations of patch and restore, behind one small interface.

Every path is relative to the tree root (the directory that holds ``vllm/``).
``LocalFiles`` works on this machine; a remote implementation (SFTP) gives
the same guarantees with a remote temp file and posix-rename.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from ..model import ToolError

TEMP_SUFFIX = ".dflash-doctor-tmp"


@dataclasses.dataclass(frozen=True)
class FileStat:
    mode: int  # permission bits only
    uid: int
    gid: int


class TreeFiles(Protocol):
    location: str  # shown in messages

    def read(self, relpath: str) -> bytes | None:
        """The file's bytes, None if it does not exist; raises ToolError."""

    def stat(self, relpath: str) -> FileStat | None:
        """Mode and owner, None if it does not exist; raises ToolError."""

    def write_atomic(self, relpath: str, data: bytes, like: FileStat) -> None:
        """Replace the file with ``data`` or leave it as it was: a temp file in
        the same directory (``.<name>.dflash-doctor-tmp``) is written, given
        ``like``'s mode and owner, fsynced, then renamed over the file; the
        directory is fsynced. Raises ToolError ("... it is unchanged"), after
        removing the temp file."""

    def make_dir(self, relpath: str, like: FileStat) -> None:
        """Create the directory (parents must exist) with ``like``'s mode and owner; fine if it exists."""

    def remove(self, relpath: str) -> None:
        """Remove a file or an empty directory; fine if it does not exist."""

    def list_dir(self, relpath: str) -> list[str]:
        """Names in the directory; empty if it does not exist."""

    def lock(self, relpath: str) -> contextlib.AbstractContextManager[None]:
        """Hold an exclusive lock on this file (created if needed) or raise
        ToolError at once; the lock ends with the process if it dies."""


class LocalFiles:
    """A tree on this machine."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.location = str(root)

    def _path(self, relpath: str) -> Path:
        return self.root / relpath if relpath else self.root

    def read(self, relpath: str) -> bytes | None:
        try:
            return self._path(relpath).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ToolError(f"cannot read {relpath}: {exc.strerror}") from None

    def stat(self, relpath: str) -> FileStat | None:
        try:
            found = os.stat(self._path(relpath), follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ToolError(f"cannot stat {relpath or self.location}: {exc.strerror}") from None
        return FileStat(found.st_mode & 0o7777, found.st_uid, found.st_gid)

    def write_atomic(self, relpath: str, data: bytes, like: FileStat) -> None:
        path = self._path(relpath)
        temp = path.with_name(f".{path.name}{TEMP_SUFFIX}")
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
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
            os.replace(temp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise ToolError(f"cannot {action} {relpath}: {exc.strerror}; it is unchanged") from None
        _fsync_directory(path.parent)

    def make_dir(self, relpath: str, like: FileStat) -> None:
        path = self._path(relpath)
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            return
        except OSError as exc:
            raise ToolError(f"cannot create {relpath} in {self.location}: {exc.strerror}") from None
        try:
            os.chown(path, like.uid, like.gid)
            os.chmod(path, like.mode)
        except OSError as exc:
            with contextlib.suppress(OSError):
                path.rmdir()
            raise ToolError(f"cannot give {relpath} the owner and mode of {self.location}: {exc.strerror}") from None
        _fsync_directory(path.parent)

    def remove(self, relpath: str) -> None:
        path = self._path(relpath)
        try:
            if path.is_dir() and not path.is_symlink():
                path.rmdir()
            else:
                path.unlink()
        except FileNotFoundError:
            return
        except OSError as exc:
            raise ToolError(f"cannot remove {relpath}: {exc.strerror}") from None

    def list_dir(self, relpath: str) -> list[str]:
        try:
            return sorted(os.listdir(self._path(relpath)))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise ToolError(f"cannot list {relpath}: {exc.strerror}") from None

    @contextlib.contextmanager
    def lock(self, relpath: str) -> Iterator[None]:
        import fcntl

        path = self._path(relpath)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise ToolError(f"cannot open the lock {relpath}: {exc.strerror}") from None
        try:
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


def _fsync_directory(directory: Path) -> None:
    """Make a rename durable; some filesystems cannot fsync a directory, which is not an error."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
