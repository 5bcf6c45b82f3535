"""A package's .py files by their metadata: whether a search of it would read
the same bytes again, without reading them.

A search for moved code reads every .py file of the package (0.35 s on
0.33.0; every check of 0.34.0 makes one). The results cache skips repeating
it while each file keeps its inode, size, mode, mtime and ctime: the kernel
sets ctime to the current time on every write and on ``os.utime``, and nothing
puts it back. A file whose mtime or ctime is within ``RACY_NS`` of the stamp
could change again within the same clock tick without either moving, so it is
recorded by its sha256 instead (git's "racily clean" entries). The stamp is
taken before the search reads anything: a file written during the search has a
newer ctime than the one recorded, and the next check repeats the search.
"""

from __future__ import annotations

import hashlib
import os
import time

from .standalone.probe import python_files, read_regular

RACY_NS = 2_000_000_000
Row = list[str | int | None]


def stamp(root: str, package: str) -> list[Row]:
    """One row per .py file of ``root/package``, in the order a search reads them."""
    now = time.time_ns()
    return [_row(relpath, path, now) for relpath, path in python_files(root, package)]


def unchanged(root: str, package: str, rows: list[Row]) -> bool:
    """Whether every file is still the one ``rows`` recorded, and no file came or went."""
    current = stamp(root, package)
    if current == rows:
        return True
    if [row[0] for row in current] != [row[0] for row in rows]:
        return False
    # A file recorded by its digest may have settled since: its bytes decide.
    return all(
        now == then or (then[1] == "sha256" and _digest(os.path.join(root, str(then[0]))) == then[2])
        for now, then in zip(current, rows)
    )


def _digest(path: str) -> str | None:
    data, _ = read_regular(path)
    return None if data is None else hashlib.sha256(data).hexdigest()


def _row(relpath: str, path: str, now: int) -> Row:
    try:
        info = os.stat(path)
    except OSError:
        return [relpath, "gone"]
    if now - max(info.st_mtime_ns, info.st_ctime_ns) < RACY_NS:
        return [relpath, "sha256", _digest(path)]
    return [relpath, info.st_ino, info.st_size, info.st_mode, info.st_mtime_ns, info.st_ctime_ns]
