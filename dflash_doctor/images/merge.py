"""Layers stacked into one view, and the site-packages the image's Python imports.

The view is logical: paths and symlinks are followed in the merged indexes,
never on the disk, so a symlink in the image cannot point outside it.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from pathlib import Path

from ..engines import Engine
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
        node = node.children.get(part)
        if node is None:
            return None
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


def installs_of(view: View, engine: Engine) -> list[str]:
    """The site directories (inside the image) that hold the engine's package."""
    init = f"/{engine.package}/__init__.py"
    return sorted(
        path[: -len(init)]
        for path in view
        if path.endswith(init)
        and posixpath.basename(posixpath.dirname(posixpath.dirname(path))) in SITE_DIRS
        and resolve(view, path) is not None
    )


def find_site(view: View, env: dict[str, str], store: Path, engine: Engine) -> Site:
    """The interpreters on the image's PATH in order, each with its site dirs; the first
    holding the engine's package wins."""
    installs = installs_of(view, engine)
    if not installs:
        raise ImageError(f"no {engine.package} package in the image (looked in every site-packages and dist-packages)")
    for python in _interpreters(view, env.get("PATH") or DEFAULT_PATH):
        for directory in _site_dirs(view, python, store, installs):
            if directory in installs:
                return Site(directory, "/" + python)
    if len(installs) == 1:
        return Site(installs[0], None)
    listed = ", ".join("/" + d for d in installs)
    raise ImageError(
        f"several {engine.package} installs ({listed}) and no Python on the image's PATH imports one of them"
    )


def _interpreters(view: View, path_env: str):
    seen = set()
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
        version = re.match(r"(3\.\d+)", config.get("version_info") or config.get("version") or "")
        sites = _versioned(root, "lib/python{}/site-packages", version.group(1) if version else None, installs)
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


def site_files(view: View, site: str) -> dict[str, str]:
    """relpath under the site dir -> where its bytes are packed (the engines' sources and dist-info), links followed."""
    prefix = site + "/"
    files = {}
    for path in view:
        if not path.startswith(prefix):
            continue
        real = resolve(view, path)
        entry = view.get(real) if real else None
        if entry is not None and entry[0] == "file":
            files[path[len(prefix) :]] = entry[1]
    return files
