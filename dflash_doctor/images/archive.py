"""A ``docker save`` archive: ``docker-archive:FILE[:NAME:TAG]``.

The archive has no registry manifest: its ``manifest.json`` names the config
and the layer tars, the config's file name is its digest (the image ID, which
names the image in reports) and its ``rootfs.diff_ids`` are the digests of the
uncompressed layers, verified as they stream like any blob. The archive's own
tar is read once, header by header, with the caps of a layer's tar (extended
headers) and at most MAX_ARCHIVE_MEMBERS members.
"""

from __future__ import annotations

import json
import posixpath
import re
import tarfile
from pathlib import Path
from typing import IO

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
    sha256_digest,
)
from .layers import BoundedTarInfo
from .manifest import MAX_LAYERS

HEX = re.compile(r"([0-9a-f]{64})")
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar"
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
# docker save writes a directory, VERSION, json and layer.tar per layer (or, since
# Docker 25, a blob and legacy links), and a handful of files for the whole archive.
MAX_ARCHIVE_MEMBERS = 8 * MAX_LAYERS + 64
MAX_LINK_HOPS = 8  # a layer stored once and linked from the others is one hop


class ArchiveSource(ImageSource):
    concurrent_blobs = False  # every blob is read through the one archive file

    def __init__(self, spec: str) -> None:
        self.reference = f"docker-archive:{spec}"
        path, name = Path(spec), None
        if not path.is_file() and ":" in spec:
            first, _, name = spec.partition(":")
            path = Path(first)
        self.path, self.name = path, name
        handle = open_regular(path, self.reference)
        try:
            self.archive = tarfile.open(fileobj=handle, mode="r:*", tarinfo=BoundedTarInfo)
            self._members = self._scan()
        except (tarfile.TarError, OSError, EOFError, ValueError) as exc:
            handle.close()
            raise ImageError(
                f"{self.reference}: not a docker archive: {getattr(exc, 'strerror', None) or exc}"
            ) from None
        self._blobs: dict[str, str] = {}  # digest -> member name

    def _scan(self) -> dict[str, tarfile.TarInfo]:
        """Every member by name (the last of a name wins, as in tar), refused past the cap."""
        members = {}
        for count, member in enumerate(iter(self.archive.next, None), 1):
            if count > MAX_ARCHIVE_MEMBERS:
                raise ImageError(
                    f"{self.reference}: more than {MAX_ARCHIVE_MEMBERS} members (the cap on archive members)"
                )
            members[member.name] = member
        return members

    def close(self) -> None:
        self.archive.close()

    def _open(self, name: str, what: str) -> IO[bytes]:
        """A member's contents; links are followed here, a few hops at most (tarfile would recurse)."""
        member = self._members.get(name.rstrip("/"))
        for _ in range(MAX_LINK_HOPS):
            if member is None or not (member.issym() or member.islnk()):
                break
            target = (
                posixpath.join(posixpath.dirname(member.name), member.linkname) if member.issym() else member.linkname
            )
            member = self._members.get(posixpath.normpath(target))
        handle = self.archive.extractfile(member) if member is not None and member.isfile() else None
        if handle is None:
            raise ImageError(f"{what}: {name[:200]} is missing from {self.path}")
        return handle

    def _member_bytes(self, name: str, what: str) -> bytes:
        data = self._open(name, what).read(MAX_MANIFEST_BYTES + 1)
        if len(data) > MAX_MANIFEST_BYTES:
            raise ImageError(f"{what}: {name[:200]} is larger than {MAX_MANIFEST_BYTES} bytes (the cap on manifests)")
        return data

    def top(self) -> Blob:
        listing = load_json(
            self._member_bytes("manifest.json", self.reference), f"{self.reference}: manifest.json", list
        )
        entries = [e for e in listing if isinstance(e, dict)]
        tags_of = {id(e): [t for t in as_list(e.get("RepoTags")) if isinstance(t, str)] for e in entries}
        if self.name is not None:
            entries = [e for e in entries if any(t == self.name or t.endswith("/" + self.name) for t in tags_of[id(e)])]
        if len(entries) != 1:
            tags = sorted(t[:80] for e in entries for t in tags_of[id(e)])
            raise ImageError(
                f"{self.reference}: {len(entries)} matching images in the archive; name one as "
                f"docker-archive:FILE:NAME:TAG (tags: {listed(tags)})"
            )
        entry = entries[0]
        config_name, layer_names = entry.get("Config"), entry.get("Layers")
        if (
            not isinstance(config_name, str)
            or not isinstance(layer_names, list)
            or not all(isinstance(n, str) for n in layer_names)
        ):
            raise ImageError(f"{self.reference}: manifest.json names no config or layers")
        config_data = self._member_bytes(config_name, f"{self.reference}: config")
        config_digest = sha256_digest(config_data)
        named = HEX.search(config_name)
        if named and f"sha256:{named.group(1)}" != config_digest:
            raise ImageError(
                f"{self.reference}: config {config_name[:200]} does not match its digest; the archive is damaged or "
                "tampered with"
            )
        self._blobs[config_digest] = config_name
        diff_ids = as_dict(as_dict(load_json(config_data, f"{self.reference}: the config")).get("rootfs")).get(
            "diff_ids"
        )
        if not isinstance(diff_ids, list):
            raise ImageError(f"{self.reference}: the config has no rootfs.diff_ids")
        if len(diff_ids) != len(layer_names):
            raise ImageError(f"{self.reference}: {len(layer_names)} layers but {len(diff_ids)} diff_ids")
        layers = []
        for name, diff_id in zip(layer_names, diff_ids):
            digest = check_digest(diff_id, f"{self.reference}: diff_id")
            self._blobs[digest] = name
            layers.append({"mediaType": LAYER_TYPE, "digest": digest})
        manifest = {
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "layers": layers,
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_digest,
                "size": len(config_data),
            },
        }
        return Blob(MANIFEST_TYPE, json.dumps(manifest).encode(), config_digest)

    def manifest(self, digest: str) -> Blob:
        raise ImageError(f"{self.reference}: a docker archive holds no image index")

    def open_blob(self, digest: str, size: int | None, what: str, progress: OnRead | None = None) -> VerifiedStream:
        name = self._blobs.get(check_digest(digest, what))
        if name is None:
            raise ImageError(f"{what}: {digest} is missing from {self.path}")
        return VerifiedStream(self._open(name, what), digest, size, what, progress)
