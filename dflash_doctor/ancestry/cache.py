"""The landing index and patch-ids, cached in ``.git/dflash-doctor/`` (never through a symlink)."""

from __future__ import annotations

import dataclasses
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import quote

from ..model import ToolError
from ..paths import caches_disabled, write_atomically
from .git import NO_EXTERNAL_DIFF, Repository
from .refs import MainRef

_LANDED = re.compile(r"\(#(\d+)\)\s*$")
_REVERTED = re.compile(r'^Revert "(.*)"')
_PR_NUMBER = re.compile(r"\(#(\d+)\)")
_CACHE_HEADER = "# dflash-doctor {} v1"
_CACHED_TIP = re.compile(r"tip [0-9a-f]{40,64}")
_CACHED_LANDING = re.compile(r"[LR] \d+ [0-9a-f]{40,64}")
_CACHED_PATCH_ID = re.compile(r"[0-9a-f]{40,64} ([0-9a-f]{40,64}|-)")
_CACHE_LIMIT = 64 << 20  # bytes: a cache file larger than this was not written here


def _cache_usable(repository: Repository, path: Path) -> bool:
    """Every step of ``path`` below ``.git`` is absent or a real directory, and the file
    absent or a regular file: a planted symlink would lead reads and writes outside."""
    step = repository.cache_dir.parent
    for part in path.relative_to(step).parts:
        step = step / part
        try:
            mode = step.lstat().st_mode
        except FileNotFoundError:
            return True
        except OSError:
            return False
        if not (stat.S_ISREG(mode) if step == path else stat.S_ISDIR(mode)):
            return False
    return True


def _read_cache(repository: Repository, path: Path, kind: str) -> list[str] | None:
    if caches_disabled() or not _cache_usable(repository, path):
        return None
    try:
        with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK), "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return None
            data = handle.read(_CACHE_LIMIT + 1)
        lines = data.decode("utf-8").splitlines() if len(data) <= _CACHE_LIMIT else []
    except (OSError, UnicodeDecodeError):
        return None
    return lines[1:] if lines and lines[0] == _CACHE_HEADER.format(kind) else None


def _write_cache(repository: Repository, path: Path, kind: str, lines: Iterable[str]) -> None:
    """Best effort: a read-only or shallow repository is judged all the same, just not cached."""
    if repository.shallow or caches_disabled() or not _cache_usable(repository, path):
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, "\n".join([_CACHE_HEADER.format(kind), *lines]) + "\n")
    except (OSError, ToolError):
        pass


@dataclasses.dataclass
class LandingIndex:
    """First-parent commits of the main ref whose subject names a PR, newest first."""

    tip: str
    landed: dict[int, list[str]]
    reverted: dict[int, list[str]]

    def add_log(self, lines: Iterable[str]) -> None:
        for line in lines:
            sha, _, subject = line.split("\0", 2)
            landed = _LANDED.search(subject)
            if landed:
                self.landed.setdefault(int(landed.group(1)), []).append(sha)
            reverted = _REVERTED.match(subject)
            if reverted:
                for number in _PR_NUMBER.findall(reverted.group(1)):
                    self.reverted.setdefault(int(number), []).append(sha)

    def lines(self) -> list[str]:
        return (
            [f"tip {self.tip}"]
            + [f"L {pr} {sha}" for pr, shas in self.landed.items() for sha in shas]
            + [f"R {pr} {sha}" for pr, shas in self.reverted.items() for sha in shas]
        )

    @classmethod
    def parse(cls, lines: list[str]) -> LandingIndex | None:
        """The cached index; None when the file is not one this code wrote."""
        if not lines or not _CACHED_TIP.fullmatch(lines[0]):
            return None
        index = cls(lines[0][4:], {}, {})
        for line in lines[1:]:
            if not _CACHED_LANDING.fullmatch(line):
                return None
            kind, pr, sha = line.split()
            (index.landed if kind == "L" else index.reverted).setdefault(int(pr), []).append(sha)
        return index


def landing_index(repository: Repository, main: MainRef) -> LandingIndex:
    """Read from the cache, extended by the main-ref commits added since it was written."""
    path = repository.cache_dir / "landings" / quote(main.full, safe="")
    cached = LandingIndex.parse(_read_cache(repository, path, "landings") or [])
    if cached and cached.tip == main.sha:
        return cached
    log = ["log", "--first-parent", "--format=%H%x00%P%x00%s", main.sha]
    if cached:
        new = repository.lines(*log, f"^{cached.tip}")
        oldest_parent = new[-1].split("\0")[1].split(" ")[0] if new else None
        if oldest_parent == cached.tip:  # the cached tip is on the new first-parent line
            index = LandingIndex(main.sha, {}, {})
            index.add_log(new)
            for table, old in ((index.landed, cached.landed), (index.reverted, cached.reverted)):
                for pr, shas in old.items():
                    table.setdefault(pr, []).extend(shas)
            _write_cache(repository, path, "landings", index.lines())
            return index
    index = LandingIndex(main.sha, {}, {})
    index.add_log(repository.lines(*log))
    _write_cache(repository, path, "landings", index.lines())
    return index


class PatchIds:
    """``git patch-id --stable`` per commit, cached in the git dir (a commit's patch never changes)."""

    def __init__(self, repository: Repository) -> None:
        self.repository = repository
        self.path = repository.cache_dir / "patch-ids"
        self.known: dict[str, str | None] = {}
        for line in _read_cache(repository, self.path, "patch-ids") or []:
            if _CACHED_PATCH_ID.fullmatch(line):
                commit, patch_id = line.split()
                self.known[commit] = None if patch_id == "-" else patch_id
        self.added = False

    def of(self, commits: Iterable[str]) -> dict[str, str | None]:
        commits = list(dict.fromkeys(commits))
        todo = [commit for commit in commits if commit not in self.known]
        if todo:
            out = self.repository.git(
                "patch-id",
                "--stable",
                source=["diff-tree", "--stdin", "-p", "--no-color", *NO_EXTERNAL_DIFF],
                stdin_text="\n".join(todo) + "\n",
            )
            found = {commit: patch_id for patch_id, commit in (line.split() for line in out.splitlines() if line)}
            for commit in todo:
                self.known[commit] = found.get(commit)  # None: empty change
            self.added = True
        return {commit: self.known[commit] for commit in commits}

    def save(self) -> None:
        if self.added:
            _write_cache(self.repository, self.path, "patch-ids", (f"{c} {p or '-'}" for c, p in self.known.items()))
