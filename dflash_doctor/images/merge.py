"""Layers stacked into one view, and the site-packages the image's Python imports.

The view is logical: paths and symlinks are followed in the merged indexes,
never on the disk, so a symlink in the image cannot point outside it.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from collections.abc import Iterator
from pathlib import Path

from ..engines import Engine
from .editable import checkout_of, sites_with_pointers
from .interface import ImageError
from .layers import SITE_DIRS, LayerIndex, read_packed

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # docker's, when the image sets none
MAX_HOPS = 40
MAX_VENV_CFG = 64 * 1024
VERSION = re.compile(r"python(3\.\d+)$")

View = dict[str, tuple[str, str]]


@dataclasses.dataclass(frozen=True)
class Site:
    """The site directory (inside the image) whose engine package (``vllm``) the image's Python imports."""

    directory: str
    python: str | None  # the interpreter on PATH that imports it, None when only one install exists
    checkout: str | None = None  # an editable install: the directory holding the package (editable.py)


class _Node:
    """One path of the merged view: its entry (None for a directory only) and what lies under it."""

    __slots__ = ("entry", "children")

    def __init__(self) -> None:
        self.entry: tuple[str, str] | None = None
        self.children: dict[str, _Node] = {}


def merge(indexes: list[LayerIndex]) -> View:
    """Apply each layer over the ones below: opaque dirs, whiteouts, then its own entries.

    The view is a tree of path parts, so hiding a directory drops its subtree at
    once: the merge costs the path parts the layers hold, whatever their whiteouts.
    """
    root = _Node()
    for index in indexes:
        for directory in index.opaque:
            node = _find(root, directory)
            if node is not None:
                node.children = {}
        for path in index.deleted:
            parent, name = posixpath.split(path)
            node = _find(root, parent)
            if node is not None:
                node.children.pop(name, None)
        for path, entry in index.entries.items():
            node = root
            for part in path.split("/"):
                child = node.children.get(part)
                if child is None:
                    child = node.children[part] = _Node()
                node = child
            node.entry = entry
            node.children = {}  # a file replacing a directory hides what was under it
    view: View = {}
    stack = [("", root)]
    while stack:
        prefix, node = stack.pop()
        if node.entry is not None:
            view[prefix] = node.entry
        stack.extend((f"{prefix}/{name}" if prefix else name, child) for name, child in node.children.items())
    return view


def _find(root: _Node, path: str) -> _Node | None:
    node = root
    for part in path.split("/") if path else ():
        child = node.children.get(part)
        if child is None:
            return None
        node = child
    return node


def resolve(view: View, path: str) -> str | None:
    """Follow symlinks inside the image (absolute targets from the image root); None if dangling."""
    for _ in range(MAX_HOPS):
        entry = view.get(path)
        if entry is None:
            return None
        if entry[0] != "link":
            return path
        target = entry[1]
        base = "/" if target.startswith("/") else "/" + posixpath.dirname(path)
        path = posixpath.normpath(posixpath.join(base, target)).lstrip("/")  # '..' stops at the image root
    return None


def installs_of(view: View, engine: Engine, store: Path) -> dict[str, str | None]:
    """The site directories (inside the image) that hold the engine's package, each with the checkout
    its editable install leads to (None: the package is in the site directory itself)."""
    init = f"/{engine.package}/__init__.py"
    installs: dict[str, str | None] = {
        path[: -len(init)]: None
        for path in view
        if path.endswith(init)
        and posixpath.basename(posixpath.dirname(posixpath.dirname(path))) in SITE_DIRS
        and resolve(view, path) is not None
    }
    for site in sites_with_pointers(view) - set(installs):
        checkout = checkout_of(view, site, engine, store)
        if checkout is not None:
            installs[site] = checkout
    return dict(sorted(installs.items()))


def find_site(view: View, env: dict[str, str], store: Path, engine: Engine) -> Site:
    """The interpreters on the image's PATH in order, each with its site dirs; the first holding the
    engine's package wins."""
    installs = installs_of(view, engine, store)
    if not installs:
        raise ImageError(f"no {engine.package} package in the image (looked in every site-packages and dist-packages)")
    for python in _interpreters(view, env.get("PATH") or DEFAULT_PATH):
        for directory in _site_dirs(view, python, store, list(installs)):
            if directory in installs:
                return Site(directory, "/" + python, installs[directory])
    if len(installs) == 1:
        directory, checkout = next(iter(installs.items()))
        return Site(directory, None, checkout)
    listed = ", ".join("/" + d for d in installs)
    raise ImageError(
        f"several {engine.package} installs ({listed}) and no Python on the image's PATH imports one of them"
    )


def _interpreters(view: View, path_env: str) -> Iterator[str]:
    seen: set[str] = set()
    for directory in path_env.split(":"):
        if not directory.startswith("/"):
            continue
        for name in ("python3", "python"):
            path = posixpath.normpath(posixpath.join(directory, name)).lstrip("/")
            if path in view and path not in seen and resolve(view, path) is not None:
                seen.add(path)
                yield path


def _site_dirs(view: View, python: str, store: Path, installs: list[str], depth: int = 0) -> list[str]:
    """Where ``python`` imports from, most preferred first (a venv's own dir, else its prefix's)."""
    root = posixpath.dirname(posixpath.dirname(python))
    config = _venv_config(view, posixpath.join(root, "pyvenv.cfg") if root else "pyvenv.cfg", store)
    if config is not None:
        matched = re.match(r"(3\.\d+)", config.get("version_info") or config.get("version") or "")
        sites = _versioned(root, "lib/python{}/site-packages", matched.group(1) if matched else None, installs)
        home = config.get("home", "")
        if config.get("include-system-site-packages", "").lower() == "true" and home.startswith("/") and depth == 0:
            base = posixpath.normpath(posixpath.join(home, "python3")).lstrip("/")
            sites += _site_dirs(view, base, store, installs, depth + 1)
        return sites
    real = resolve(view, python) or python
    found = VERSION.search(real)
    version = found.group(1) if found else None
    prefix = posixpath.dirname(posixpath.dirname(real))
    sites = []
    for pattern in (
        "lib/python{}/site-packages",
        "local/lib/python{}/dist-packages",
        "lib/python3/dist-packages",
        "lib/python{}/dist-packages",
    ):
        sites += _versioned(prefix, pattern, version, installs)
    return sites


def _versioned(prefix: str, pattern: str, version: str | None, installs: list[str]) -> list[str]:
    """``pattern`` under ``prefix`` for this version; for an unknown version, the installs it matches."""
    if version is not None or "{}" not in pattern:
        return [posixpath.join(prefix, pattern.format(version))]
    shape = re.compile(re.escape(posixpath.join(prefix, pattern)).replace(r"\{\}", r"3\.\d+") + "$")
    return [d for d in installs if shape.match(d)]


def _venv_config(view: View, path: str, store: Path) -> dict[str, str] | None:
    real = resolve(view, path)
    entry = view.get(real) if real else None
    if entry is None or entry[0] != "file":
        return None
    try:
        text = read_packed(store, entry[1], MAX_VENV_CFG).decode("utf-8", "replace")
    except (OSError, ValueError):
        return None
    pairs = (line.partition("=") for line in text.splitlines())
    return {key.strip(): value.strip() for key, sep, value in pairs if sep}


def tree_files(view: View, site: Site, engine: Engine) -> dict[str, str]:
    """relpath in the tree -> where its bytes are packed: the site directory's files, and for an
    editable install the engine's package from its checkout (as Python imports it through the site)."""
    files = site_files(view, site.directory)
    if site.checkout is not None:
        files |= {relpath: where for relpath, where in site_files(view, site.checkout).items() if engine.owns(relpath)}
    return files


def site_files(view: View, site: str) -> dict[str, str]:
    """relpath under the site dir -> where its bytes are packed (the engines' sources and dist-info), links followed."""
    prefix = site + "/" if site else ""
    files = {}
    for path in view:
        if not path.startswith(prefix):
            continue
        real = resolve(view, path)
        entry = view.get(real) if real else None
        if entry is not None and entry[0] == "file":
            files[path[len(prefix) :]] = entry[1]
    return files
