"""From the reference's manifest or index to one platform's config and layers."""

from __future__ import annotations

import dataclasses

from .interface import Blob, ImageError, ImageSource, as_dict, as_list, check_digest, load_json

INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
ACCEPT = ", ".join(INDEX_TYPES + MANIFEST_TYPES)
LAYER_SUFFIXES = ("tar", "tar+gzip", "tar.gzip", "tar+zstd")
MAX_LAYERS = 128  # Docker stacks at most 128 layers (overlay2's lower directories); vllm/vllm-openai has a few dozen


@dataclasses.dataclass(frozen=True)
class Layer:
    digest: str
    size: int | None
    media_type: str


@dataclasses.dataclass(frozen=True)
class Image:
    """One platform's image: the manifest digest names it."""

    digest: str
    platform: str
    config: dict
    layers: tuple[Layer, ...]

    @property
    def labels(self) -> dict[str, str]:
        labels = as_dict(as_dict(self.config.get("config")).get("Labels"))
        return {k: v for k, v in labels.items() if isinstance(v, str)}  # labels are strings (image-spec)

    @property
    def env(self) -> dict[str, str]:
        env = as_list(as_dict(self.config.get("config")).get("Env"))
        pairs = (item.partition("=") for item in env if isinstance(item, str))
        return {name: value for name, _, value in pairs}


def parse_platform(text: str) -> tuple[str, str, str | None]:
    parts = text.split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise ImageError(f"not a platform: {text!r} (expected os/arch[/variant], e.g. linux/amd64)")
    return parts[0], parts[1], parts[2] if len(parts) == 3 else None


def resolve_image(source: ImageSource, platform: str) -> Image:
    """The image for ``platform``: picked from an index, or the single manifest."""
    wanted = parse_platform(platform)
    blob = source.top()
    document = load_json(blob.data, f"{source.reference}: manifest")
    media_type = _media_type(document, blob)
    if media_type in INDEX_TYPES or ("manifests" in document and "layers" not in document):
        descriptor = _pick(document, wanted, source.reference, platform)
        blob = source.manifest(check_digest(descriptor.get("digest"), f"{source.reference}: index entry"))
        document = load_json(blob.data, f"{source.reference}: manifest {blob.digest}")
        media_type = _media_type(document, blob)
    if media_type not in MANIFEST_TYPES and "layers" not in document:
        raise ImageError(
            f"{source.reference}: unsupported manifest type {media_type[:80]!r} (schema 1 manifests are not supported)"
        )
    config_ref = document.get("config")
    layers = document.get("layers")
    if not isinstance(config_ref, dict) or not isinstance(layers, list):
        raise ImageError(f"{source.reference}: the manifest has no config or layers")
    if len(layers) > MAX_LAYERS:
        raise ImageError(f"{source.reference}: {len(layers)} layers, more than {MAX_LAYERS} (the cap on layers)")
    config_digest = check_digest(config_ref.get("digest"), f"{source.reference}: config")
    config_bytes = source.read_blob(config_digest, _size(config_ref), f"{source.reference}: config {config_digest}")
    config = load_json(config_bytes, f"{source.reference}: the image config")
    found = "/".join(
        p for p in (config.get("os"), config.get("architecture"), config.get("variant")) if isinstance(p, str) and p
    )
    return Image(blob.digest, found or platform, config, tuple(_layer(item, source.reference) for item in layers))


def _media_type(document: dict, blob: Blob) -> str:
    given = document.get("mediaType")
    return given if isinstance(given, str) and given else blob.media_type


def _pick(index: dict, wanted: tuple[str, str, str | None], reference: str, platform: str) -> dict:
    entries = [e for e in as_list(index.get("manifests")) if isinstance(e, dict)]
    offered = []
    for entry in entries:
        plat = as_dict(entry.get("platform"))
        os_, arch, variant = (
            value if isinstance(value, str) else None
            for value in (plat.get("os"), plat.get("architecture"), plat.get("variant"))
        )
        if not os_ or os_ == "unknown":  # attestations and other non-image entries
            continue
        offered.append("/".join(p for p in (os_, arch, variant) if p))
        if (os_, arch) == wanted[:2] and (wanted[2] is None or wanted[2] == variant):
            return entry
    have = ", ".join(offered) or "none"
    raise ImageError(
        f"{reference}: no image for platform {platform} (the index offers: {have}); choose one with --platform"
    )


def _size(descriptor: dict) -> int | None:
    size = descriptor.get("size")
    return size if isinstance(size, int) and size >= 0 else None


def _layer(item: object, reference: str) -> Layer:
    if not isinstance(item, dict):
        raise ImageError(f"{reference}: a layer entry is not an object")
    media_type = str(item.get("mediaType") or "application/vnd.oci.image.layer.v1.tar")
    digest = check_digest(item.get("digest"), f"{reference}: layer")
    if "nondistributable" in media_type or "foreign" in media_type:
        raise ImageError(f"{reference}: layer {digest} is a foreign layer ({media_type}), not served by the registry")
    if not media_type.endswith(LAYER_SUFFIXES):
        raise ImageError(f"{reference}: layer {digest} has unsupported media type {media_type!r}")
    return Layer(digest, _size(item), media_type)
