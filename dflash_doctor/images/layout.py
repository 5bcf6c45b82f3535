"""An OCI image layout on disk: ``oci:DIR[:TAG]`` (``index.json`` and ``blobs/sha256/``)."""

from __future__ import annotations

import json
from pathlib import Path

from .interface import MAX_MANIFEST_BYTES, Blob, ImageError, ImageSource, VerifiedStream, check_digest

REF_NAME = "org.opencontainers.image.ref.name"

def split_layout(spec: str) -> tuple[Path, str | None]:
    """``DIR[:TAG]``: a tag after the last colon, unless that names an existing directory."""
    directory, sep, tag = spec.rpartition(":")
    if sep and directory and "/" not in tag and not Path(spec).is_dir():
        return Path(directory), tag
    return Path(spec), None

class LayoutSource(ImageSource):
    def __init__(self, spec: str) -> None:
        self.reference = f"oci:{spec}"
        self.directory, self.tag = split_layout(spec)
        if not (self.directory / "index.json").is_file():
            raise ImageError(f"{self.reference}: not an OCI image layout (no index.json in {self.directory})")

    def top(self) -> Blob:
        index = _read_json(self.directory / "index.json", self.reference)
        entries = [e for e in index.get("manifests") or [] if isinstance(e, dict)]
        if self.tag is not None:
            entries = [e for e in entries if (e.get("annotations") or {}).get(REF_NAME) == self.tag]
            if not entries:
                raise ImageError(f"{self.reference}: no image tagged {self.tag!r} in {self.directory}/index.json")
        if len(entries) != 1:
            tags = sorted(str((e.get("annotations") or {}).get(REF_NAME)) for e in entries)
            raise ImageError(f"{self.reference}: {len(entries)} images in the layout; name one as oci:DIR:TAG (tags: {', '.join(tags)})")
        entry = entries[0]
        blob = self.manifest(check_digest(entry.get("digest"), f"{self.reference}: index.json"))
        return Blob(str(entry.get("mediaType") or ""), blob.data, blob.digest)

    def manifest(self, digest: str) -> Blob:
        data = self.read_blob(digest, None, f"{self.reference}: manifest {digest}", MAX_MANIFEST_BYTES)
        return Blob(_media_type(data), data, digest)

    def open_blob(self, digest: str, size: int | None, what: str, progress=None) -> VerifiedStream:
        path = self.directory / "blobs" / "sha256" / check_digest(digest, what).split(":", 1)[1]
        try:
            handle = open(path, "rb")
        except FileNotFoundError:
            raise ImageError(f"{what}: blob missing from the layout ({path})") from None
        except OSError as exc:
            raise ImageError(f"{what}: cannot read {path}: {exc.strerror}") from None
        return VerifiedStream(handle, digest, size, what, progress)

def _read_json(path: Path, what: str) -> dict:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_MANIFEST_BYTES + 1)
    except OSError as exc:
        raise ImageError(f"{what}: cannot read {path}: {exc.strerror}") from None
    if len(data) > MAX_MANIFEST_BYTES:
        raise ImageError(f"{what}: {path} is larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        document = json.loads(data)
    except ValueError:
        raise ImageError(f"{what}: {path} is not JSON") from None
    if not isinstance(document, dict):
        raise ImageError(f"{what}: {path} is not a JSON object")
    return document

def _media_type(data: bytes) -> str:
    try:
        document = json.loads(data)
    except ValueError:
        return ""
    return str(document.get("mediaType") or "") if isinstance(document, dict) else ""
