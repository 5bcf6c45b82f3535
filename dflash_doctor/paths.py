"""Where the tool keeps its own files, and how it reads and writes any file."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .model import ToolError

if TYPE_CHECKING:
    from .engines import Engine


def cache_dir() -> Path:
    """``$DFLASH_DOCTOR_CACHE``, else ``$XDG_CACHE_HOME/dflash-doctor``, else ``~/.cache/dflash-doctor``."""
    configured = os.environ.get("DFLASH_DOCTOR_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dflash-doctor"


def releases_dir(engine: Engine) -> Path:
    """Where the engine's extracted releases are kept in the user cache: one directory per release,
    named by its version."""
    return cache_dir() / engine.cache / "releases"


def caches_disabled() -> bool:
    """``DFLASH_DOCTOR_NO_CACHE`` set: every result is computed afresh, nothing cached is read or written."""
    return bool(os.environ.get("DFLASH_DOCTOR_NO_CACHE"))


class Switch:
    """A process-wide setting, on within ``on()`` (nested uses stack): what a command's
    option asks of code far below it, such as the wheel download."""

    def __init__(self) -> None:
        self._stack: list[bool] = []

    @contextlib.contextmanager
    def on(self, value: bool = True) -> Iterator[None]:
        self._stack.append(value)
        try:
            yield
        finally:
            self._stack.pop()

    def __bool__(self) -> bool:
        return any(self._stack)


OFFLINE = Switch()  # --offline: nothing is fetched from the network; what the cache lacks is an error
FULL_WHEEL = Switch()  # --full-wheel: a wheel is downloaded whole and checked against the index's sha256


def read_file(path: Path, limit: int, what: str) -> bytes:
    """The bytes of a file the user named; a ToolError unless it is a regular file of at most ``limit`` bytes.

    A FIFO or a device (a link to /dev/zero) is refused before it is read.
    """
    from .standalone.probe import read_regular  # --help: probe pulls in socket; paths is loaded at start

    data, reason = read_regular(str(path), limit)
    if data is None:
        raise ToolError(f"{what} {path} {reason or 'does not exist'}")
    return data


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def write_atomically(path: Path, text: str) -> None:
    """Write a whole file or nothing: temp file in the same directory, fsync, rename.

    What ``path`` names is replaced, never written through: a symlink is
    replaced by the file (nothing is written where it points), and a FIFO, a
    device or a directory there is refused.
    """
    try:
        mode = path.lstat().st_mode
    except OSError:
        mode = None
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        raise ToolError(f"cannot write {path}: not a regular file")
    directory = path.parent if str(path.parent) else Path(".")
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    except OSError as exc:
        raise ToolError(f"cannot write {path}: {exc.strerror}") from None
    try:
        # mkstemp makes the file 0600; a report is an ordinary file, so the umask decides.
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except OSError as exc:
        Path(temp).unlink(missing_ok=True)
        raise ToolError(f"cannot write {path}: {exc.strerror}") from None
