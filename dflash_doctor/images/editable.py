"""Editable installs in an image: where a site directory sends Python for an engine's package.

An image may install an engine from a source checkout, editable (``pip install -e``
under one of the engine's ``checkouts``): the site directory then holds no
package, but a ``.pth`` line, setuptools' editable finder (its ``MAPPING``) or the
dist-info's ``direct_url.json`` (``dir_info``, ``editable``) names the directory that
does. They are read from the image's layers (the same ``.pth`` reading as the
collector's, ``probe.pth_entries``) and followed in the image's view alone: an entry
is a path inside the image, and one that climbs above the image's root with ``..``
is refused, never clamped to it.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from ..engines import Engine
from ..standalone.probe import pth_entries
from .layers import SITE_DIRS, read_packed

if TYPE_CHECKING:
    from .merge import View
MAX_POINTER_BYTES = 1024 * 1024  # a .pth, a finder or a direct_url.json: read at most this much of each


def checkout_of(view: View, site: str, engine: Engine, store: Path) -> str | None:
    """The directory (inside the image, without the leading ``/``) holding the engine's package that
    the site directory's editable install names, or None when it names none inside the image."""
    from .merge import resolve  # merge reads this module: imported when called

    for entry in _named(view, site, engine, store):
        path = inside(site, entry)
        if path is not None and resolve(view, posixpath.join(path, engine.package, "__init__.py")) is not None:
            return path
    return None


def sites_with_pointers(view: View) -> set[str]:
    """The site directories holding a .pth file or a dist-info's direct_url.json."""
    found = set()
    for path in view:
        parent = posixpath.dirname(path)
        if path.endswith(".pth") and posixpath.basename(parent) in SITE_DIRS:
            found.add(parent)
        elif path.endswith(".dist-info/direct_url.json"):
            site = posixpath.dirname(parent)
            if posixpath.basename(site) in SITE_DIRS:
                found.add(site)
    return found


def inside(base: str, entry: str) -> str | None:
    """``entry`` (absolute from the image's root, or relative to the directory ``base``) as a path
    inside the image; None when it climbs above the image's root."""
    parts = [] if entry.startswith("/") else [part for part in base.split("/") if part]
    for part in entry.split("/"):
        if part in ("", "."):
            continue
        if part != "..":
            parts.append(part)
        elif not parts:
            return None
        else:
            parts.pop()
    return "/".join(parts)


def _named(view: View, site: str, engine: Engine, store: Path) -> Iterator[str]:
    """What the site directory names, in the order Python would follow it: the .pth files'
    directories (in name order, as ``site`` reads them), then the engine's dist-info's editable URL."""
    prefix = site + "/"
    names = sorted(path[len(prefix) :] for path in view if path.startswith(prefix))
    for name in names:
        if name.endswith(".pth") and "/" not in name and not name.startswith("."):
            text = _text(view, prefix + name, store)
            yield from pth_entries(text, lambda module: _text(view, f"{prefix}{module}.py", store))
    for name in names:
        owner, _, rest = name.partition("/")
        if (
            rest == "direct_url.json"
            and owner.endswith(".dist-info")
            and engine.is_own_distribution(owner.split("-")[0])
        ):
            url = _editable_url(_text(view, prefix + name, store))
            if url is not None:
                yield url


def _editable_url(text: str) -> str | None:
    """The directory an editable install's direct_url.json names (a ``file:`` URL), or None."""
    try:
        data = json.loads(text) if text else None
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("dir_info"), dict) or not data["dir_info"].get("editable"):
        return None
    url = data.get("url")
    if not isinstance(url, str):
        return None
    parts = urlsplit(url)
    return unquote(parts.path) if parts.scheme == "file" and parts.netloc in ("", "localhost") else None


def _text(view: View, path: str, store: Path) -> str:
    """A file of the view as text (links followed inside the image), "" when it is not one."""
    from .merge import resolve

    real = resolve(view, path)
    entry = view.get(real) if real else None
    if entry is None or entry[0] != "file":
        return ""
    try:
        return read_packed(store, entry[1], MAX_POINTER_BYTES).decode("utf-8", "replace")
    except (OSError, ValueError):
        return ""
