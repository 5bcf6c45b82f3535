"""``TreeFiles`` over SFTP: the same guarantees as ``LocalFiles`` on another machine.

Everything goes over the ssh connection the check's probe used: one SFTP
session for the files, and one exec channel for the lock. The write is a
temp file created exclusively in the same directory, given the mode and
owner, fsynced with OpenSSH's ``fsync@openssh.com`` extension, then renamed
over the file with ``posix-rename@openssh.com``. A server without these
extensions is refused (nothing is changed). SFTP has no way to fsync a
directory, so the rename is atomic but its durability is the filesystem's
(journalled filesystems commit it within seconds).

SFTP has no descriptors for directories and no descriptor-relative calls,
so each step re-checks its path just before it runs: the root must still
resolve (``realpath``) to the real path it had when the files were opened
and keep the owner and mode it had (a root swapped for a link, or a link
put on the way above it, is refused), every directory on the way is
``lstat``-ed from the root and a symlink is refused, a symlinked target file
is written at the real path the server resolves (inside the package only),
and files are created exclusively, so a planted link at the final name is
never followed. What stays possible is written in docs/security.md: a swap
within the one round trip between the check and the step, and a swap of
the root for another directory of the same owner and mode (SFTP gives no
inode numbers). The lock holder, which runs on the host, opens its path
component by component with ``O_NOFOLLOW``. Reads are bounded by the size
``stat`` gives on the open handle, then by reading at most the cap + 1.

The lock is ``flock`` on ``.dflash-doctor/lock`` taken by the remote
interpreter, held while its channel is open: it is the same lock a local
``patch --path`` on that machine takes, and it ends when dflash-doctor
exits or dies (sshd closes the channel, the holder reads end of input).
"""

from __future__ import annotations

import contextlib
import posixpath
import shlex
import stat
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..model import ToolError
from .caps import LIST_CAP, Cap
from .files import DIRECTORY, FILE, SYMLINK, TEMP_SUFFIX, FileStat, kind_of, outside_refusal, parts_of, symlink_refusal

if TYPE_CHECKING:
    import paramiko

# Run by the remote interpreter: take the lock at once or say busy, then hold
# it until standard input ends (the channel closes, or the connection dies).
LOCK_HOLDER = (
    "import fcntl, os, stat, sys\n"
    "fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)\n"
    "parts = sys.argv[2].split('/')\n"
    "for part in parts[:-1]:\n"
    "    fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)\n"
    "fd = os.open(parts[-1], os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644, dir_fd=fd)\n"
    "if not stat.S_ISREG(os.fstat(fd).st_mode):\n"
    "    sys.exit('not a regular file')\n"
    "try:\n"
    "    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
    "except OSError:\n"
    "    print('busy', flush=True)\n"
    "    sys.exit(1)\n"
    "print('held', flush=True)\n"
    "sys.stdin.buffer.read()\n"
)
LOCK_TIMEOUT = 60.0


class SftpFiles:
    """A tree on the host at the other end of ``client`` (an open paramiko SSHClient)."""

    def __init__(self, client: paramiko.SSHClient, root: str, python: str, location: str, package: str) -> None:
        import paramiko

        self.package = package
        self.client = client
        self.root = root
        self.python = python
        self.location = location
        # What SFTP calls raise: OSError for the server's answers, the rest when the connection fails.
        self._failures = (OSError, EOFError, paramiko.SSHException, paramiko.SFTPError)
        try:
            self.sftp = client.open_sftp()
            self.real_root = self.sftp.normalize(root)
            self._root_stat = self._root_identity()
        except self._failures as exc:
            raise ToolError(f"{location}: cannot open an SFTP session: {_reason(exc)}") from None
        if self._root_stat is None or self._root_stat[0] != DIRECTORY:
            raise ToolError(f"{location}: {root} is not a directory")

    def _root_identity(self) -> tuple[str, int, int, int] | None:
        """What SFTP can tell of the root: its kind, owner and mode (no inode numbers in SFTP v3)."""
        if self.sftp.normalize(self.real_root) != self.real_root:
            return None
        found = self.sftp.lstat(self.real_root)
        return kind_of(found.st_mode), found.st_uid, found.st_gid, found.st_mode & 0o7777

    def still_there(self) -> None:
        try:
            same = self._root_identity() == self._root_stat
        except self._failures:
            same = False
        if not same:
            raise ToolError(
                f"{self.location} was moved or replaced while dflash-doctor ran (its path no longer "
                "leads to the directory that was checked); nothing was changed"
            )

    def _path(self, relpath: str) -> str:
        """The remote path of ``relpath``, once the root is still the root it was
        and no directory on the way is a symlink (checked now, before each step)."""
        self.still_there()
        if not relpath:
            return self.real_root
        parts = parts_of(relpath)
        path = self.real_root
        for depth, part in enumerate(parts[:-1]):
            path = posixpath.join(path, part)
            try:
                kind = kind_of(self.sftp.lstat(path).st_mode)
            except FileNotFoundError:
                break  # the call on the whole path then finds nothing
            if kind == SYMLINK:
                raise symlink_refusal("/".join(parts[: depth + 1]), self.location)
            if kind != DIRECTORY:
                raise ToolError(
                    f"{'/'.join(parts[: depth + 1])} in {self.location} is not a directory; nothing was changed"
                )
        return posixpath.join(self.real_root, *parts)

    def real(self, relpath: str) -> str:
        parts_of(relpath)
        self.still_there()
        try:
            real = self.sftp.normalize(posixpath.join(self.real_root, relpath))
        except FileNotFoundError:
            return relpath  # nothing there to follow; reading it finds nothing
        except self._failures as exc:
            raise ToolError(f"cannot resolve {relpath}: {_reason(exc)}") from None
        inside = posixpath.relpath(real, self.real_root)
        if inside != self.package and not inside.startswith(self.package + "/"):
            raise outside_refusal(relpath, self.location, real, self.package)
        return inside

    def read(self, relpath: str, cap: Cap) -> bytes | None:
        found = self.stat(relpath)
        if found is None:
            return None
        if found.kind == SYMLINK:
            raise symlink_refusal(relpath, self.location)
        if found.kind != FILE:
            raise ToolError(f"{relpath} in {self.location} is not a regular file; nothing was changed")
        try:
            with self.sftp.open(self._path(relpath), "rb") as handle:
                opened = handle.stat()  # of the open handle: the file read, whatever the name names now
                if not stat.S_ISREG(opened.st_mode or 0):
                    raise ToolError(f"{relpath} in {self.location} is not a regular file; nothing was changed")
                cap.check(relpath, self.location, opened.st_size or 0)
                handle.prefetch(min(opened.st_size or 0, cap.limit))
                data = handle.read(cap.limit)
            cap.check(relpath, self.location, len(data))  # it grew since stat
            return data
        except FileNotFoundError:
            return None
        except self._failures as exc:
            raise ToolError(f"cannot read {relpath}: {_reason(exc)}") from None

    def stat(self, relpath: str) -> FileStat | None:
        try:
            found = self.sftp.lstat(self._path(relpath))
        except FileNotFoundError:
            return None
        except self._failures as exc:
            raise ToolError(f"cannot stat {relpath or self.location}: {_reason(exc)}") from None
        return FileStat(found.st_mode & 0o7777, found.st_uid, found.st_gid, kind_of(found.st_mode))

    def write_atomic(self, relpath: str, data: bytes, like: FileStat) -> None:
        from paramiko.sftp import CMD_EXTENDED

        action = "write"
        try:
            path = self._path(relpath)
            temp = posixpath.join(posixpath.dirname(path), f".{posixpath.basename(path)}{TEMP_SUFFIX}")
            # "x": O_CREAT|O_EXCL, so a symlink planted at the temp name is never followed.
            with self.sftp.open(temp, "wxb") as handle:
                handle.chmod(0o600)
                handle.write(data)
                handle.flush()
                found = handle.stat()
                if (found.st_uid, found.st_gid) != (like.uid, like.gid):
                    action = f"keep the owner {like.uid}:{like.gid} of"
                    handle.chown(like.uid, like.gid)  # before chmod: chown clears set-id bits
                action = f"keep the mode {like.mode:o} of"
                handle.chmod(like.mode)
                action = "fsync"
                self.sftp._request(CMD_EXTENDED, "fsync@openssh.com", handle.handle)  # paramiko has no public fsync
            action = "replace"
            self.sftp.posix_rename(temp, path)
        except self._failures as exc:
            with contextlib.suppress(*self._failures):
                self.sftp.remove(temp)
            raise ToolError(f"cannot {action} {relpath}: {_reason(exc)}; it is unchanged") from None

    def make_dir(self, relpath: str, like: FileStat) -> None:
        found = self.stat(relpath)
        if found is not None:
            if found.kind == SYMLINK:
                raise symlink_refusal(relpath, self.location)
            if found.kind != DIRECTORY:
                raise ToolError(f"{relpath} in {self.location} is not a directory; nothing was changed")
            return
        path = self._path(relpath)
        try:
            self.sftp.mkdir(path, 0o700)
        except self._failures as exc:
            raise ToolError(f"cannot create {relpath} in {self.location}: {_reason(exc)}") from None
        try:
            made = self.sftp.lstat(path)
            if (made.st_uid, made.st_gid) != (like.uid, like.gid):
                self.sftp.chown(path, like.uid, like.gid)
            self.sftp.chmod(path, like.mode)
        except self._failures as exc:
            with contextlib.suppress(*self._failures):
                self.sftp.rmdir(path)
            raise ToolError(f"cannot give {relpath} the owner and mode of {self.location}: {_reason(exc)}") from None

    def remove(self, relpath: str) -> None:
        try:
            path = self._path(relpath)
            if stat.S_ISDIR(self.sftp.lstat(path).st_mode):
                self.sftp.rmdir(path)
            else:
                self.sftp.remove(path)
        except FileNotFoundError:
            return
        except self._failures as exc:
            raise ToolError(f"cannot remove {relpath}: {_reason(exc)}") from None

    def list_dir(self, relpath: str) -> list[str]:
        found = self.stat(relpath)
        if found is not None and found.kind == SYMLINK:
            raise symlink_refusal(relpath, self.location)
        if found is None or found.kind != DIRECTORY:
            return []
        try:
            names = (entry.filename for entry in self.sftp.listdir_iter(self._path(relpath)))
            return sorted(LIST_CAP.names(relpath, self.location, names))
        except FileNotFoundError:
            return []
        except self._failures as exc:
            raise ToolError(f"cannot list {relpath}: {_reason(exc)}") from None

    @contextlib.contextmanager
    def lock(self, relpath: str) -> Iterator[None]:
        parts_of(relpath)
        self.still_there()
        command = " ".join(shlex.quote(word) for word in (self.python, "-c", LOCK_HOLDER, self.real_root, relpath))
        try:
            channel = self.client.get_transport().open_session()
            channel.settimeout(LOCK_TIMEOUT)
            channel.exec_command(command)
            answer = channel.makefile("rb").readline().strip()
        except self._failures as exc:
            raise ToolError(f"cannot take the lock {relpath} on {self.location}: {_reason(exc)}") from None
        try:
            if answer == b"busy":
                raise ToolError(
                    f"another dflash-doctor patch or restore is running on {self.location} "
                    f"(it holds {relpath}); nothing was changed"
                )
            if answer != b"held":
                errors = channel.makefile_stderr("rb").read().decode("utf-8", "replace").strip().splitlines()
                raise ToolError(f"cannot take the lock {relpath} on {self.location}: {(errors or ['no answer'])[-1]}")
            yield
        finally:
            with contextlib.suppress(*self._failures):
                channel.shutdown_write()  # the holder reads end of input and lets go
                channel.recv_exit_status()
            channel.close()


def _reason(exc: Exception) -> str:
    """paramiko sets strerror for errno errors; SFTP's generic failures carry only a message."""
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
