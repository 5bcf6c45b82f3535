"""An OCI image layout on disk: ``oci:DIR[:TAG]`` (``index.json`` and ``blobs/sha256/``)."""

from __future__ import annotations

from pathlib import Path

from ..paths import read_file
from .interface import (
    MAX_MANIFEST_BYTES,
    Blob,
    ImageError,
    ImageSource,
    OnRead,
    VerifiedStream,
    as_dict,
    as_list,
    check_digest,
    listed,
    load_json,
    open_regular,
)

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
        path = self.directory / "index.json"
        index = load_json(read_file(path, MAX_MANIFEST_BYTES, f"{self.reference}:"), f"{self.reference}: {path}")
        entries = [e for e in as_list(index.get("manifests")) if isinstance(e, dict)]
        if self.tag is not None:
            entries = [e for e in entries if as_dict(e.get("annotations")).get(REF_NAME) == self.tag]
            if not entries:
                raise ImageError(f"{self.reference}: no image tagged {self.tag!r} in {self.directory}/index.json")
        if len(entries) != 1:
            tags = sorted(str(as_dict(e.get("annotations")).get(REF_NAME))[:80] for e in entries)
            raise ImageError(
                f"{self.reference}: {len(entries)} images in the layout; name one as oci:DIR:TAG (tags: {listed(tags)})"
            )
        entry = entries[0]
        blob = self.manifest(check_digest(entry.get("digest"), f"{self.reference}: index.json"))
        media_type = entry.get("mediaType")
        return Blob(media_type if isinstance(media_type, str) else "", blob.data, blob.digest)

    def manifest(self, digest: str) -> Blob:
        what = f"{self.reference}: manifest {digest}"
        data = self.read_blob(digest, None, what, MAX_MANIFEST_BYTES)
        media_type = load_json(data, what).get("mediaType")
        return Blob(media_type if isinstance(media_type, str) else "", data, digest)

    def open_blob(self, digest: str, size: int | None, what: str, progress: OnRead | None = None) -> VerifiedStream:
        path = self.directory / "blobs" / "sha256" / check_digest(digest, what).split(":", 1)[1]
        return VerifiedStream(open_regular(path, f"{what}: blob"), digest, size, what, progress)
