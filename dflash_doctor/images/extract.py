"""An image's engine files as a directory per engine it holds: layers read once, remembered per digest.

Under the images directory (``<cache>/images``, or a scratch directory when
caches are off): ``files/<hex>.pack`` each layer's kept contents,
``layers/<format>-<hex>.json`` what each layer held (so an image sharing base layers
downloads only its new ones), ``trees/<format>-<engine>-<hex>/`` the assembled tree of
an image (by its manifest digest, per engine), with ``image.json`` written last
as the mark that it is complete, and ``held/<format>-<hex>.json`` the engines the image holds.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from ..engines import ENGINES, Engine
from ..paths import write_atomically
from .archive import ArchiveSource
from .interface import ImageError, ImageSource
from .layers import Budget, LayerIndex, load_index, read_layer, save_index
from .layout import LayoutSource
from .manifest import Image, Layer, resolve_image
from .merge import find_site, installs_of, merge, tree_files
from .registry import RegistrySource

if TYPE_CHECKING:
    from rich.progress import Progress

LABELS = ("org.opencontainers.image.revision", "org.opencontainers.image.version", "org.opencontainers.image.source")
# bump when what a tree holds changes (2: transformers config sources; 3: the dist-info of vllm-named
# distributions; 4: entry points; 5: editable checkouts)
TREE_FORMAT = "5"
# Bump when what a layer index keeps changes (layers.wanted: every engine's files, so a new engine bumps it).
LAYER_FORMAT = "6"  # 5: SGLang registered; 6: .pth files, editable finders and the engines' checkouts
LAYER_JOBS = 4


@dataclasses.dataclass(frozen=True)
class ImageTree:
    root: Path  # holds the engine's package (vllm/) and the dist-info of the distributions named after it
    reference: str
    digest: str
    platform: str
    site: str  # the site directory inside the image
    python: str | None  # the interpreter on the image's PATH that imports it
    labels: tuple[tuple[str, str], ...]
    engine: Engine  # whose package the tree holds
    checkout: str | None = None  # an editable install: the directory inside the image holding the package


def open_source(reference: str, insecure: tuple[str, ...] = (), timeout: float = 30.0) -> ImageSource:
    """``oci:DIR[:TAG]``, ``docker-archive:FILE``, else a registry reference (``docker://`` optional)."""
    if reference.startswith("oci:"):
        return LayoutSource(reference[len("oci:") :])
    if reference.startswith("docker-archive:"):
        return ArchiveSource(reference[len("docker-archive:") :])
    return RegistrySource(reference.removeprefix("docker://"), insecure, timeout)


def image_trees(
    source: ImageSource, platform: str, images_dir: Path, engines: tuple[Engine, ...], progress: bool = False
) -> list[ImageTree]:
    """The tree of each of ``engines`` whose package the image holds, in their order (ImageError when none does).
    Which engines an image holds is remembered per image digest, so a second check reads no layer."""
    image = resolve_image(source, platform)
    labels = tuple((name, image.labels[name]) for name in LABELS if name in image.labels)
    digest = image.digest.split(":", 1)[1]
    trees = {engine: images_dir / "trees" / f"{TREE_FORMAT}-{engine.name}-{digest}" for engine in engines}
    held_file = images_dir / "held" / f"{TREE_FORMAT}-{digest}.json"
    held = _load_held(held_file)
    metas = {engine: _load_meta(trees[engine]) for engine in engines if held is None or engine.name in held}
    if held is None or None in metas.values():
        try:
            for name in ("files", "layers", "trees", "held", "tmp"):
                (images_dir / name).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ImageError(f"cannot create the image cache {images_dir}: {exc.strerror or exc}") from None
        indexes = _layer_indexes(source, image, images_dir, progress)
        view = merge(indexes)
        store = images_dir / "files"
        held = [engine.name for engine in ENGINES.values() if installs_of(view, engine, store)]
        metas = {}
        for engine in engines:
            if engine.name not in held:
                continue
            done = _load_meta(trees[engine])
            if done is None:
                site = find_site(view, image.env, store, engine)
                done = {"site": site.directory, "python": site.python, "checkout": site.checkout}
                _write_tree(tree_files(view, site, engine), images_dir, trees[engine], done)
            metas[engine] = done
        write_atomically(held_file, json.dumps(held))
    if not metas:
        packages = " or ".join(engine.package for engine in engines)
        raise ImageError(f"no {packages} package in the image (looked in every site-packages and dist-packages)")
    return [
        ImageTree(
            trees[engine] / "root",
            source.reference,
            image.digest,
            image.platform,
            "/" + done["site"],
            done["python"],
            labels,
            engine,
            "/" + done["checkout"] if done.get("checkout") else None,
        )
        for engine, done in metas.items()
        if done is not None
    ]


def _load_held(path: Path) -> list[str] | None:
    """The engines an image holds, as a check of it wrote them (None: not known yet)."""
    try:
        held = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return held if isinstance(held, list) and all(isinstance(name, str) for name in held) else None


def _load_meta(tree_dir: Path) -> dict | None:
    try:
        meta = json.loads((tree_dir / "image.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) and "site" in meta else None


def _layer_indexes(source: ImageSource, image: Image, images_dir: Path, progress: bool) -> list[LayerIndex]:
    """Each layer's index, from the cache or read as it downloads (a bar per layer on a terminal)."""
    bar = None
    if progress:
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

        bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            console=Console(file=sys.stderr),
            transient=True,
        )
        bar.start()
    try:
        # Layers stream side by side: a large base layer is mostly I/O, zlib and sha256 (no GIL),
        # which overlaps with the Python-heavy tar of the layer holding the engine.
        budget = Budget(source.reference)
        with ThreadPoolExecutor(max_workers=LAYER_JOBS if source.concurrent_blobs else 1) as pool:
            futures = [pool.submit(_layer_index, source, layer, images_dir, bar, budget) for layer in image.layers]
            try:
                return [future.result() for future in futures]
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
    finally:
        if bar is not None:
            bar.stop()


def _layer_index(
    source: ImageSource, layer: Layer, images_dir: Path, bar: Progress | None, budget: Budget
) -> LayerIndex:
    name = layer.digest.split(":", 1)[1]
    path = images_dir / "layers" / f"{LAYER_FORMAT}-{name}.json"
    index = load_index(path)
    if index is not None:
        return budget.index(index)
    what = f"{source.reference}: layer {layer.digest}"
    advance = None
    if bar is not None:
        task = bar.add_task(layer.digest[7:19], total=layer.size)
        advance = lambda n: bar.advance(task, n)  # noqa: E731
    stream = source.open_blob(layer.digest, layer.size, what, advance)
    index = read_layer(stream, layer.media_type, images_dir / "files" / f"{name}.pack", what, budget)
    try:
        save_index(index, path)
    except OSError as exc:
        raise ImageError(f"cannot write {path}: {exc.strerror or exc}") from None
    return index


def _write_tree(files: dict[str, str], images_dir: Path, tree_dir: Path, meta: dict) -> None:
    """Copy the site's files into a fresh directory, then move it in place whole."""
    staging = Path(tempfile.mkdtemp(prefix="tree.", dir=images_dir / "tmp"))
    try:
        root = staging / "root"
        made: set[str] = set()
        packs: dict[str, BinaryIO] = {}
        try:
            for relpath, where in sorted(files.items()):
                directory = os.path.join(
                    root, os.path.dirname(relpath)
                )  # normalised at read time: no '..', no absolute part
                if directory not in made:
                    os.makedirs(directory, exist_ok=True)
                    made.add(directory)
                pack, offset, size = where.rsplit(":", 2)
                if pack not in packs:
                    packs[pack] = open(images_dir / "files" / pack, "rb")
                packs[pack].seek(int(offset))
                with open(os.path.join(root, relpath), "wb") as out:
                    out.write(packs[pack].read(int(size)))
        finally:
            for handle in packs.values():
                handle.close()
        (staging / "image.json").write_text(json.dumps(meta), encoding="utf-8")
        if tree_dir.exists():  # an interrupted earlier run, or a concurrent one
            shutil.rmtree(tree_dir, ignore_errors=True)
        os.replace(staging, tree_dir)
    except OSError as exc:
        raise ImageError(f"cannot assemble the image's tree in {images_dir}: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
