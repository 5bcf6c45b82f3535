"""What every image source provides: the top manifest and verified blob streams."""

from __future__ import annotations

import abc
import dataclasses
import hashlib
import json
import os
import re
import stat
from pathlib import Path
from collections.abc import Callable
from typing import Any, BinaryIO, Protocol, overload

from ..model import ToolError

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
MAX_MANIFEST_BYTES = 4 * 1024 * 1024  # the registry's own limit for manifests
CHUNK = 1024 * 1024
JSON = dict[str, Any]  # a JSON object from an image (its fields are checked where they are read)
OnRead = Callable[[int], object]  # told the size of each read (a progress bar)


class ImageError(ToolError):
    """The image cannot be read: reported as one line, exit code 3."""


def check_digest(digest: object, what: str) -> str:
    """A ``sha256:<64 hex>`` digest, refused otherwise (it becomes part of paths and URLs)."""
    if not isinstance(digest, str) or not DIGEST.match(digest):
        raise ImageError(f"{what}: not a sha256 digest: {str(digest)[:80]!r}")
    return digest


@overload
def load_json(data: bytes, what: str) -> JSON: ...
@overload
def load_json(data: bytes, what: str, expected: type[list[Any]]) -> list[Any]: ...
def load_json(data: bytes, what: str, expected: type[JSON] | type[list[Any]] = dict) -> JSON | list[Any]:
    """A JSON object (or ``expected``), else an ImageError: not JSON, an integer past Python's
    digit limit, nested too deep for the parser, or of another type."""
    try:
        document = json.loads(data)
    except (ValueError, RecursionError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else "not JSON"
        raise ImageError(f"{what} is {why}") from None
    if not isinstance(document, expected):
        raise ImageError(f"{what} is not a JSON {'object' if expected is dict else 'array'}")
    return document


def open_regular(path: Path, what: str) -> BinaryIO:
    """A local image file opened for reading, refused unless it is a regular file: the open never blocks (a FIFO)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        raise ImageError(f"{what}: no such file: {path}") from None
    except OSError as exc:
        raise ImageError(f"{what}: cannot read {path}: {exc.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ImageError(f"{what}: {path} is not a regular file")
    return os.fdopen(fd, "rb")


def listed(names: list[str], most: int = 10) -> str:
    """Names for a one-line message: the first ``most`` of them, a character that is not printable as ``?``
    (the names come from the image: a newline in one must not break the line)."""
    shown = ["".join(c if c.isprintable() else "?" for c in name) for name in names[:most]]
    return ", ".join(shown) + (f", ... ({len(names)} in all)" if len(names) > most else "") or "none"


def as_dict(value: object) -> JSON:
    """A JSON field that should be an object, or {} (a field of the wrong type is treated as absent)."""
    return value if isinstance(value, dict) else {}


def as_list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclasses.dataclass(frozen=True)
class Blob:
    """A manifest or config: its bytes, verified against ``digest``."""

    media_type: str
    data: bytes
    digest: str


class Raw(Protocol):
    """What a blob's bytes are read from: a file, a tar member or a registry's response."""

    def read(self, n: int = -1, /) -> bytes: ...

    def close(self) -> None: ...


class VerifiedStream:
    """Reads a blob and fails at its end unless size and sha256 are what the manifest says."""

    def __init__(self, raw: Raw, digest: str, size: int | None, what: str, progress: OnRead | None = None) -> None:
        self.raw = raw
        self.digest = check_digest(digest, what)
        self.size = size
        self.what = what
        self.progress = progress
        self._hash = hashlib.sha256()
        self._read = 0
        self._done = False

    def read(self, n: int = -1) -> bytes:
        if self._done:
            return b""
        data = self.raw.read(CHUNK if n is None or n < 0 else n)
        if data:
            self._take(data)
        else:
            self.finish()
        return data

    def finish(self) -> None:
        """Read to the end and verify (the tar reader may stop before the padding)."""
        if self._done:
            return
        self._done = True
        try:
            while data := self.raw.read(CHUNK):
                self._take(data)
        finally:
            self.raw.close()
        if self.size is not None and self._read != self.size:
            raise ImageError(f"{self.what}: {self._read} bytes, its manifest gives {self.size}")
        found = "sha256:" + self._hash.hexdigest()
        if found != self.digest:
            raise ImageError(
                f"{self.what}: sha256 mismatch (expected {self.digest}, got {found}); the blob is damaged or "
                "tampered with"
            )

    def _take(self, data: bytes) -> None:
        if self.size is not None and self._read + len(data) > self.size:
            raise ImageError(f"{self.what}: longer than the {self.size} bytes its manifest gives")
        self._hash.update(data)
        self._read += len(data)
        if self.progress is not None:
            self.progress(len(data))


class ImageSource(abc.ABC):
    """Where an image's manifests and blobs come from."""

    reference: str  # as the user gave it
    concurrent_blobs = True  # open_blob may be called from several threads at once

    @abc.abstractmethod
    def top(self) -> Blob:
        """The manifest or index the reference names, verified when the reference pins a digest."""

    @abc.abstractmethod
    def manifest(self, digest: str) -> Blob:
        """A manifest an index points to, verified against ``digest``."""

    @abc.abstractmethod
    def open_blob(self, digest: str, size: int | None, what: str, progress: OnRead | None = None) -> VerifiedStream:
        """A config or layer as a stream; its sha256 is checked as it is read."""

    def close(self) -> None:  # noqa: B027 - a source with nothing to release keeps this
        """Release connections or files (a source is used by one image)."""

    def read_blob(self, digest: str, size: int | None, what: str, limit: int = MAX_MANIFEST_BYTES) -> bytes:
        """A small blob (a config) whole, refused past ``limit``."""
        if size is not None and size > limit:
            raise ImageError(f"{what}: {size} bytes, more than the {limit} allowed")
        stream = self.open_blob(digest, size, what)
        parts, total = [], 0
        while True:
            data = stream.read(CHUNK)
            if not data:
                break
            total += len(data)
            if total > limit:
                raise ImageError(f"{what}: more than the {limit} bytes allowed")
            parts.append(data)
        return b"".join(parts)
