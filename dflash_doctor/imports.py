"""What Python's import system loads for a module file of a tree on this
machine: the file read is not the code that runs when a package of the same
name, an extension module or an unchecked-hash ``.pyc`` comes first.

Python's path finder tries, in one directory, a package (``name/__init__``)
before ``name`` as a module, and extension modules before source; a ``.pyc``
in ``__pycache__`` whose flags say "unchecked hash" is loaded without reading
the source at all (PEP 552).

A check asks this of every file it reads, most of them in a few directories:
``listings`` keeps each directory's listing for the check (one tree's).
"""

from __future__ import annotations

import os
from pathlib import Path

PYC_FLAGS_OFFSET = 4  # after the 4-byte magic number
HASH_BASED = 0b01
CHECK_SOURCE = 0b10
EXTENSION_SUFFIXES = (".so", ".pyd")


def loaded_instead(root: Path, relpath: str, listings: dict[str, list[str]] | None = None) -> str | None:
    """Why Python would not run ``relpath`` (a ``.py`` under ``root``) as its module; None when it would."""
    top = str(root)
    listings = {} if listings is None else listings
    if not relpath.endswith(".py") or relpath.endswith("/__init__.py"):
        return _unchecked_pyc(top, relpath, listings)
    directory, _, filename = relpath.rpartition("/")
    stem = filename[: -len(".py")]
    package = f"{directory}/{stem}" if directory else stem
    for init in ("__init__.py", "__init__.pyc"):
        if os.path.isfile(os.path.join(top, package, init)):
            return f"Python imports the package {package}/ instead of {relpath}"
    for name in _listing(top, directory, listings):
        if name.startswith(f"{stem}.") and name.endswith(EXTENSION_SUFFIXES):
            return f"Python imports the extension module {directory}/{name} instead of {relpath}"
    return _unchecked_pyc(top, relpath, listings)


def _unchecked_pyc(top: str, relpath: str, listings: dict[str, list[str]]) -> str | None:
    directory, _, filename = relpath.rpartition("/")
    stem = filename[: -len(".py")]
    cache = f"{directory}/__pycache__" if directory else "__pycache__"
    for name in _listing(top, cache, listings):
        unchecked = name.startswith(f"{stem}.") and name.endswith(".pyc") and name.count(".") == 2
        if unchecked and _flags(os.path.join(top, cache, name)) == HASH_BASED:
            return f"{cache}/{name} is an unchecked-hash .pyc: Python runs it without reading {relpath}"
    return None


def _listing(top: str, directory: str, listings: dict[str, list[str]]) -> list[str]:
    if directory not in listings:
        try:
            listings[directory] = sorted(os.listdir(os.path.join(top, directory)))
        except OSError:
            listings[directory] = []
    return listings[directory]


def _flags(path: str) -> int | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        header = os.read(fd, PYC_FLAGS_OFFSET + 4)
    finally:
        os.close(fd)
    if len(header) < PYC_FLAGS_OFFSET + 4:
        return None
    return int.from_bytes(header[PYC_FLAGS_OFFSET:], "little") & (HASH_BASED | CHECK_SOURCE)
