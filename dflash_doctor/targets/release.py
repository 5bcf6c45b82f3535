"""A released engine wheel (vLLM's, SGLang's) from the package index, kept in the
user cache; and the transformers wheel a release requires, fetched the same way.

pip says which wheel and how to reach it (``pip_index``: the user's pip
configuration). Only the engine's ``.py`` files (``vllm/**/*.py``) and the
dist-info are kept: where the
server honours range requests only those members are fetched (``wheel_http``,
``wheel_ranges``), else (or with ``--full-wheel``) the whole wheel is
downloaded, checked against the index's sha256, and deleted once read. Either
way every member kept is checked against the wheel's RECORD before it is
written. A second check of the same release reads the cache and touches no
network. Of a transformers wheel only the sources its config classes live in
are kept (``TRANSFORMERS_KEPT``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import functools
import hashlib
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ..engines import DEFAULT_ENGINE, Engine
from ..model import ToolError
from ..paths import FULL_WHEEL, OFFLINE, cache_dir, write_atomically
from ..terminal import progress
from ..paths import releases_dir
from . import ResolvedTarget
from .path import PathTarget
from .pip_index import locate
from .wheel_http import RangeSource, download, open_wheel
from .wheel_ranges import FileSource, extract

RELEASE = re.compile(r"\d+(\.\d+){1,3}((a|b|rc|\.post|\.dev)\d+)?")
DOWNLOAD_TIMEOUT_S = 1800
COMPLETE = ".complete"


def canonical_release(version: str) -> str:
    """The one spelling a release is checked and cached under: the tag form
    ``v0.20.1`` is ``0.20.1``, and ``0.20`` is ``0.20.0`` (the same release
    for the package index, PEP 440)."""
    text = version[1:] if version[:1] in ("v", "V") else version
    if not RELEASE.fullmatch(text):
        raise ToolError(f"not a release version: {version!r} (expected e.g. 0.20.1)")
    split = re.fullmatch(r"([\d.]+?)((?:a|b|rc|\.post|\.dev)\d+)?", text)
    assert split is not None  # RELEASE matched
    numbers, suffix = split.groups()
    parts = [str(int(part)) for part in numbers.split(".")]
    while len(parts) > 3 and parts[-1] == "0":
        parts.pop()
    return ".".join(parts + ["0"] * (3 - len(parts))) + (suffix or "")


def release_tree(version: str, engine: Engine = DEFAULT_ENGINE) -> Path:
    """The extracted tree of the engine's release ``version``, fetching it if needed."""
    version = canonical_release(version)
    dest = releases_dir(engine) / version
    project = engine.distribution
    with _one_fetch(dest):
        if (dest / COMPLETE).is_file():
            return dest
        if OFFLINE:
            raise ToolError(f"{engine.display} release {version} is not in the cache, and --offline fetches nothing")
        with _staging() as staging:
            with progress(f"{project} {version}: downloading the wheel", transfer=True) as update:
                tree, _ = _fetch(
                    project,
                    f"{project}=={version}",
                    engine.kept(),
                    staging,
                    update,
                    functools.partial(_same_release, project, version),
                    missing=f"{engine.display} release {version} is not on the package index",
                )
            return _publish(tree, dest, version)


def _same_release(project: str, version: str, filename: str) -> None:
    try:
        same = canonical_release(filename.split("-")[1]) == version
    except (IndexError, ToolError):
        same = False
    if not same:
        raise ToolError(f"pip chose {filename} for {project}=={version}")


# The transformers sources behaviour reads: the config base, the auto mapping, each model's config module.
TRANSFORMERS_KEPT = ("transformers/*.py", "transformers/models/auto/*.py", "transformers/models/*/configuration_*.py")


def transformers_tree(requirement: str) -> tuple[Path, str]:
    """The extracted sources of the newest transformers wheel satisfying
    ``requirement`` (a PEP 508 requirement on transformers, as a vLLM wheel states
    it), and its version: pip resolves it the first time, the user cache answers
    after that (``transformers/resolved/<sha256 of the requirement>`` names the version)."""
    root = cache_dir() / "transformers"
    pointer = root / "resolved" / hashlib.sha256(requirement.encode()).hexdigest()[:32]
    with _one_fetch(pointer):
        with contextlib.suppress(OSError, UnicodeDecodeError):
            version = pointer.read_text(encoding="utf-8").strip()
            if RELEASE.fullmatch(version) and (root / version / COMPLETE).is_file():
                return root / version, version
        if OFFLINE:
            raise ToolError(
                f"no transformers satisfying {requirement!r} is in the cache, and --offline fetches nothing"
            )
        with _staging() as staging:
            with progress(f"{requirement}: downloading the wheel", transfer=True) as update:
                tree, filename = _fetch(
                    "transformers",
                    requirement,
                    TRANSFORMERS_KEPT,
                    staging,
                    update,
                    functools.partial(_a_release, requirement),
                )
            version = filename.split("-")[1]
            dest = _publish(tree, root / version, version)
        try:
            pointer.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(pointer, version + "\n")
        except OSError as exc:
            raise ToolError(f"cannot write the cache file {pointer}: {exc.strerror or exc}") from None
    return dest, version


def _a_release(requirement: str, filename: str) -> None:
    if filename.count("-") < 2 or not RELEASE.fullmatch(filename.split("-")[1]):
        raise ToolError(f"pip chose {filename} for {requirement}")


_FETCHING: dict[Path, threading.Lock] = {}
_FETCHING_LOCK = threading.Lock()


@contextlib.contextmanager
def _one_fetch(key: Path) -> Iterator[None]:
    """One thread of this process fetches a given release (or transformers requirement) at a time: the others
    wait, then find it cached (``releases`` checks several releases at once, which may share a transformers).
    Other processes are told apart by ``_publish``."""
    with _FETCHING_LOCK:
        lock = _FETCHING.setdefault(key, threading.Lock())
    with lock:
        yield


@contextlib.contextmanager
def _staging() -> Iterator[Path]:
    """A fresh directory under the cache's ``tmp`` (the same file system as the cache)."""
    staging_root = cache_dir() / "tmp"
    try:
        staging_root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ToolError(f"cannot create the cache directory {staging_root}: {exc.strerror}") from None
    with tempfile.TemporaryDirectory(dir=staging_root) as staging:
        yield Path(staging)


def _publish(tree: Path, dest: Path, version: str) -> Path:
    """Move a complete extracted ``tree`` to ``dest``, unless another run got there first."""
    (tree / COMPLETE).write_text(version + "\n", encoding="utf-8")
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists():  # an interrupted earlier run, or a concurrent one
        if (dest / COMPLETE).is_file():
            return dest
        shutil.rmtree(dest, ignore_errors=True)
    try:
        os.replace(tree, dest)
    except OSError:
        if not (dest / COMPLETE).is_file():
            raise
    return dest


def _fetch(
    project: str,
    requirement: str,
    kept: tuple[str, ...],
    staging: Path,
    update: Callable[..., None],
    named: Callable[[str], None] = lambda filename: None,
    missing: str | None = None,
) -> tuple[Path, str]:
    """The tree of ``kept`` files (and the dist-info) of the wheel pip would download for ``requirement``,
    and the wheel's file name (first checked by ``named``). Read by range requests where the server honours
    them, else downloaded whole (``--full-wheel``, a ``file://`` index, a server that ignores ranges).
    ``missing`` is the error when the index has no such wheel."""
    located = locate(project, requirement, missing)
    tree, whole = staging / "tree", bool(FULL_WHEEL)
    label = f"{project} {located.filename.split('-')[1]}"  # what the bar says throughout: "vllm 0.34.0"
    deadline = time.monotonic() + DOWNLOAD_TIMEOUT_S
    wanted = functools.partial(is_kept, kept)
    try:
        named(located.filename)
        if whole and located.sha256 is None:
            raise ToolError(
                f"the package index states no sha256 for {located.filename}, so --full-wheel cannot check it"
            )
        response = None
        if not whole and located.url.startswith(("http://", "https://")):
            opened = open_wheel(located, update, deadline)
            if isinstance(opened, RangeSource):
                update(description=f"{label}: fetching the files kept (range requests)")
                fetched = len(opened.tail)
                extract(opened, wanted, tree, located.filename, lambda total: update(total=fetched + total))
                return tree, located.filename
            response = opened
        wheel = download(located, staging / "wheel.whl", update, deadline, response)  # never a name the index chose
        update(description=f"{label}: extracting the kept files")
        extract(FileSource.of(wheel), wanted, tree, located.filename)
    finally:
        located.session.close()
    return tree, located.filename


def is_kept(kept: tuple[str, ...], name: str) -> bool:
    """A file matching a pattern of ``kept``, or of the dist-info (``*`` stays
    within a directory, ``**`` crosses them)."""
    return any(_matches(name, pattern) for pattern in kept) or name.split("/", 1)[0].endswith(".dist-info")


def _matches(name: str, pattern: str) -> bool:
    if "**" in pattern:
        return fnmatch.fnmatchcase(name, pattern.replace("**", "*"))
    return name.count("/") == pattern.count("/") and fnmatch.fnmatchcase(name, pattern)


class ReleaseTarget:
    def __init__(self, version: str, engine: Engine = DEFAULT_ENGINE) -> None:
        self.version = canonical_release(version)
        self.engine = engine

    def resolve(self) -> ResolvedTarget:
        tree = release_tree(self.version, self.engine)
        resolved = PathTarget(tree, kind="release", details=(("release", self.version),), engine=self.engine).resolve()
        # The tree is the tool's cached copy: the release is named by its version (the SARIF category).
        return dataclasses.replace(resolved, info=dataclasses.replace(resolved.info, name=self.version))
