"""``TreeFiles`` over SFTP: the same guarantees as ``LocalFiles`` on another machine.

Everything goes over the ssh connection the check's probe used: one SFTP
session for the files, and one exec channel for the lock. The write is a
temp file created exclusively in the same directory, given the mode and
owner, fsynced with OpenSSH's ``fsync@openssh.com`` extension, then renamed
over the file with ``posix-rename@openssh.com``. A server without these
extensions is refused (nothing is changed). SFTP has no way to fsync a
directory, so the rename is atomic but its durability is the filesystem's
(journalled filesystems commit it within seconds).

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

from ..model import ToolError
from .files import TEMP_SUFFIX, FileStat

# Run by the remote interpreter: take the lock at once or say busy, then hold
# it until standard input ends (the channel closes, or the connection dies).
LOCK_HOLDER = (
    "import fcntl, os, sys\n"
    "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)\n"
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

    def __init__(self, client, root: str, python: str, location: str) -> None:
        import paramiko

        self.client = client
        self.root = root
        self.python = python
        self.location = location
        # What SFTP calls raise: OSError for the server's answers, the rest when the connection fails.
        self._failures = (OSError, EOFError, paramiko.SSHException, paramiko.SFTPError)
        try:
            self.sftp = client.open_sftp()
        except self._failures as exc:
            raise ToolError(f"{location}: cannot open an SFTP session: {_reason(exc)}") from None

    def _path(self, relpath: str) -> str:
        return posixpath.join(self.root, relpath) if relpath else self.root

    def read(self, relpath: str) -> bytes | None:
        try:
            with self.sftp.open(self._path(relpath), "rb") as handle:
                handle.prefetch()
                return handle.read()
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
        return FileStat(found.st_mode & 0o7777, found.st_uid, found.st_gid)

    def write_atomic(self, relpath: str, data: bytes, like: FileStat) -> None:
        from paramiko.sftp import CMD_EXTENDED

        path = self._path(relpath)
        temp = posixpath.join(posixpath.dirname(path), f".{posixpath.basename(path)}{TEMP_SUFFIX}")
        action = "write"
        try:
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
        path = self._path(relpath)
        if self.stat(relpath) is not None:
            return
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
        path = self._path(relpath)
        try:
            if stat.S_ISDIR(self.sftp.lstat(path).st_mode):
                self.sftp.rmdir(path)
            else:
                self.sftp.remove(path)
        except FileNotFoundError:
            return
        except self._failures as exc:
            raise ToolError(f"cannot remove {relpath}: {_reason(exc)}") from None

    def list_dir(self, relpath: str) -> list[str]:
        try:
            return sorted(self.sftp.listdir(self._path(relpath)))
        except FileNotFoundError:
            return []
        except self._failures as exc:
            raise ToolError(f"cannot list {relpath}: {_reason(exc)}") from None

    @contextlib.contextmanager
    def lock(self, relpath: str) -> Iterator[None]:
        command = f"{shlex.quote(self.python)} -c {shlex.quote(LOCK_HOLDER)} {shlex.quote(self._path(relpath))}"
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
