"""A ``docker save`` archive: ``docker-archive:FILE[:NAME:TAG]``.

The archive has no registry manifest: its ``manifest.json`` names the config
and the layer tars, the config's file name is its digest (the image ID, which
names the image in reports) and its ``rootfs.diff_ids`` are the digests of the
uncompressed layers, verified as they stream like any blob.
"""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

from .interface import MAX_MANIFEST_BYTES, Blob, ImageError, ImageSource, VerifiedStream, check_digest, sha256_digest

HEX = re.compile(r"([0-9a-f]{64})")
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar"
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"


class ArchiveSource(ImageSource):
    concurrent_blobs = False  # every blob is read through the one archive file
    def __init__(self, spec: str) -> None:
        self.reference = f"docker-archive:{spec}"
        path, name = Path(spec), None
        if not path.is_file() and ":" in spec:
            first, _, name = spec.partition(":")
            path = Path(first)
        self.path, self.name = path, name
        try:
            self.archive = tarfile.open(path, "r:*")
        except FileNotFoundError:
            raise ImageError(f"{self.reference}: no such file: {path}") from None
        except (tarfile.TarError, OSError) as exc:
            raise ImageError(f"{self.reference}: not a docker archive: {getattr(exc, 'strerror', None) or exc}") from None
        self._blobs: dict[str, str] = {}  # digest -> member name

    def close(self) -> None:
        self.archive.close()

    def _member_bytes(self, name: str, what: str) -> bytes:
        try:
            handle = self.archive.extractfile(name)
        except KeyError:
            handle = None
        if handle is None:
            raise ImageError(f"{what}: {name} is missing from {self.path}")
        data = handle.read(MAX_MANIFEST_BYTES + 1)
        if len(data) > MAX_MANIFEST_BYTES:
            raise ImageError(f"{what}: {name} is larger than {MAX_MANIFEST_BYTES} bytes")
        return data

    def top(self) -> Blob:
        try:
            entries = json.loads(self._member_bytes("manifest.json", self.reference))
        except ValueError:
            raise ImageError(f"{self.reference}: manifest.json is not JSON") from None
        entries = [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
        if self.name is not None:
            entries = [e for e in entries if any(t == self.name or t.endswith("/" + self.name) for t in e.get("RepoTags") or [])]
        if len(entries) != 1:
            tags = sorted(t for e in entries for t in e.get("RepoTags") or [])
            raise ImageError(f"{self.reference}: {len(entries)} matching images in the archive; name one as docker-archive:FILE:NAME:TAG (tags: {', '.join(tags) or 'none'})")
        entry = entries[0]
        config_name, layer_names = str(entry.get("Config", "")), entry.get("Layers")
        if not isinstance(layer_names, list):
            raise ImageError(f"{self.reference}: manifest.json lists no layers")
        config_data = self._member_bytes(config_name, f"{self.reference}: config")
        config_digest = sha256_digest(config_data)
        named = HEX.search(config_name)
        if named and f"sha256:{named.group(1)}" != config_digest:
            raise ImageError(f"{self.reference}: config {config_name} does not match its digest; the archive is damaged or tampered with")
        self._blobs[config_digest] = config_name
        try:
            diff_ids = json.loads(config_data)["rootfs"]["diff_ids"]
        except (ValueError, KeyError, TypeError):
            raise ImageError(f"{self.reference}: the config has no rootfs.diff_ids") from None
        if not isinstance(diff_ids, list) or len(diff_ids) != len(layer_names):
            raise ImageError(f"{self.reference}: {len(layer_names)} layers but {len(diff_ids) if isinstance(diff_ids, list) else 0} diff_ids")
        layers = []
        for name, diff_id in zip(layer_names, diff_ids):
            digest = check_digest(diff_id, f"{self.reference}: diff_id")
            self._blobs[digest] = str(name)
            layers.append({"mediaType": LAYER_TYPE, "digest": digest})
        manifest = {"schemaVersion": 2, "mediaType": MANIFEST_TYPE, "layers": layers,
                    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": len(config_data)}}
        return Blob(MANIFEST_TYPE, json.dumps(manifest).encode(), config_digest)

    def manifest(self, digest: str) -> Blob:
        raise ImageError(f"{self.reference}: a docker archive holds no image index")

    def open_blob(self, digest: str, size: int | None, what: str, progress=None) -> VerifiedStream:
        name = self._blobs.get(check_digest(digest, what))
        handle = None
        if name is not None:
            try:
                handle = self.archive.extractfile(name)
            except KeyError:
                handle = None
        if handle is None:
            raise ImageError(f"{what}: {name or digest} is missing from {self.path}")
        return VerifiedStream(handle, digest, size, what, progress)
