"""A container image, read from a registry, an OCI layout or a docker archive.

The image's engine files (of each engine it holds) land in the user cache (or a scratch directory that
lives as long as the target when caches are off); the check then reads them
like any directory tree. The code is the image's, not the operator's.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from ..engines import ENGINES, DEFAULT_ENGINE, Engine
from ..model import TargetInfo
from ..paths import cache_dir, caches_disabled
from ..provenance import find_dist_info
from ..source import DirectoryTree
from . import ResolvedTarget, Target, local

if TYPE_CHECKING:
    from ..images.extract import ImageTree

REVISION_LABEL = "org.opencontainers.image.revision"
READ_ONLY = (
    "an image cannot be patched in place: patch it when it is built, with "
    "`RUN dflash-doctor patch --path SITE-PACKAGES --yes` in its Dockerfile (see docs/images.md)"
)


@dataclasses.dataclass(frozen=True)
class ImageOptions:
    platform: str = "linux/amd64"
    insecure: tuple[str, ...] = ()  # registries spoken to over plain HTTP
    timeout: float = 30.0
    progress: bool = False


class ImageTarget:
    def __init__(self, reference: str, options: ImageOptions, engine: Engine | None = DEFAULT_ENGINE) -> None:
        self.reference = reference
        self.options = options
        self.engine = engine  # None: every registered engine whose package the image holds (the first, resolved alone)
        self._scratch: tempfile.TemporaryDirectory | None = None
        self._tree: ImageTree | None = None  # found by per_engine

    def per_engine(self) -> list[tuple[Engine, Target]]:
        """The image's tree of each engine it holds (its layers read once), each checked on its own."""
        found: list[tuple[Engine, Target]] = []
        for tree in self._trees():
            each = ImageTarget(self.reference, self.options, tree.engine)
            each._scratch, each._tree = self._scratch, tree  # the scratch directory lives as long as each of them
            found.append((tree.engine, each))
        return found

    def resolve(self) -> ResolvedTarget:
        tree = self._tree or self._trees()[0]
        details = (
            ("reference", tree.reference),
            ("digest", tree.digest),
            ("platform", tree.platform),
            ("site", tree.site),
            *((("checkout", tree.checkout),) if tree.checkout else ()),
            *((("python", tree.python),) if tree.python else ()),
            *tree.labels,
        )
        commit = dict(tree.labels).get(REVISION_LABEL)
        # The image's code runs only in the isolated child, like any tree on this machine.
        info = TargetInfo("image", tree.reference, details, name=f"{tree.reference}@{tree.digest}")
        resolved = local(DirectoryTree(tree.root, find_dist_info(tree.root, tree.engine.package), tree.engine), info)
        return dataclasses.replace(
            resolved,
            build_commit=(commit, f"{REVISION_LABEL} label") if commit else None,
            files=None,
            no_files=READ_ONLY,
        )

    def _trees(self) -> list[ImageTree]:
        from ..images.extract import image_trees, open_source  # startup: ssl, http.client, tarfile only for an image

        source = open_source(self.reference, self.options.insecure, self.options.timeout)
        try:
            engines = tuple(ENGINES.values()) if self.engine is None else (self.engine,)
            return image_trees(source, self.options.platform, self._images_dir(), engines, self.options.progress)
        finally:
            source.close()

    def _images_dir(self) -> Path:
        if not caches_disabled():
            return cache_dir() / "images"
        if self._scratch is None:
            self._scratch = tempfile.TemporaryDirectory(prefix="dflash-doctor-image.")
        return Path(self._scratch.name)
