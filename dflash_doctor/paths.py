"""Where the tool keeps its own files, and how it writes any file."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .model import ToolError


def cache_dir() -> Path:
    """``$DFLASH_DOCTOR_CACHE``, else ``$XDG_CACHE_HOME/dflash-doctor``, else ``~/.cache/dflash-doctor``."""
    configured = os.environ.get("DFLASH_DOCTOR_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dflash-doctor"


def caches_disabled() -> bool:
    """``DFLASH_DOCTOR_NO_CACHE`` set: every result is computed afresh, nothing cached is read or written."""
    return bool(os.environ.get("DFLASH_DOCTOR_NO_CACHE"))


def write_atomically(path: Path, text: str) -> None:
    """Write a whole file or nothing: temp file in the same directory, fsync, rename."""
    directory = path.parent if str(path.parent) else Path(".")
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    except OSError as exc:
        raise ToolError(f"cannot write {path}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except OSError as exc:
        Path(temp).unlink(missing_ok=True)
        raise ToolError(f"cannot write {path}: {exc.strerror}") from None
