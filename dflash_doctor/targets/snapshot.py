"""A tree known only through a probe answer: from ssh, or from probe files."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ..engines import DEFAULT_ENGINE, Engine, of_package
from ..model import TargetInfo, ToolError
from ..standalone.probe import MAX_MORE_FILES, package_module
from ..source import SourceError, SourceTree
from . import NOT_RUN_HERE, ResolvedTarget
from .probing import held_back, parse_probe_output, read_probe_file

Contents = Callable[[], Mapping[str, str | None]]
# The host's answer for package module files the collector did not send: (paths, with their bytes).
More = Callable[[list[str], bool], Mapping[str, Any]]
# The host's answer for a search of a package directory: (names, directory, mentions).
Search = Callable[[list[str], str, bool], Mapping[str, Any]]
SHA256 = re.compile(r"[0-9a-f]{64}")
# Why a probe file's tree is judged by structure alone, and what judges it by behaviour.
FROM_FILE = (
    f"{NOT_RUN_HERE}; a probe file holds only the files the rules name, with no host to ask for the modules "
    "its code imports or looks up by name, as --host asks the host and --path reads the tree"
)


class SnapshotTree(SourceTree):
    """The files the probe sent; anything it did not send cannot be judged.

    A staged answer (ssh) holds back the bytes of most files and gives their
    sha256, computed on the host: the tree's ``state`` is known from those alone,
    so the results cache can answer without the bytes. ``contents`` fetches them
    all at the first read that needs one, each then checked against its digest.
    ``more`` asks the host for a module file of the package the collector did not
    send (one the tree's code imports, or looks up by its name): its digest when
    that is all a check needs, its bytes when it reads them. The host's answer is
    untrusted: only the path asked for is taken from it."""

    def __init__(
        self,
        answer: dict,
        engine: Engine = DEFAULT_ENGINE,
        contents: Contents | None = None,
        more: More | None = None,
        searcher: Search | None = None,
    ) -> None:
        super().__init__()
        self.engine = engine
        self.root = answer.get("root", "")
        self._files: dict[str, str | None] = answer.get("files", {})
        self._sha256: dict[str, str] = answer.get("sha256", {})
        self._errors: dict[str, str] = answer.get("file_errors", {})
        self._search: dict[str, list[str]] = answer.get("search", {})
        self._dist_info: dict[str, str] = answer.get("dist_info_files", {})
        self.python = f"{answer.get('python') or ''} {answer.get('python_version') or ''}".strip()
        self._held = (
            held_back(answer) if contents is not None else set()
        )  # elsewhere a digest without bytes is only a claim
        self._contents = contents
        self._more = more
        self._searcher = searcher
        self._more_held: set[str] = set()  # files whose digest came from ``more`` without their bytes

    def read(self, relpath: str) -> bytes | None:
        self._ask_host(relpath, True)
        if relpath in self._errors:
            raise SourceError(f"{relpath} {self._errors[relpath]}")
        if relpath in self._held and self._contents is not None:
            fetch, held, self._contents, self._held = self._contents, self._held, None, set()
            self._files.update((path, text) for path, text in fetch().items() if path in held)
        if relpath not in self._files:
            raise SourceError(f"{relpath} was not collected by the probe")
        text = self._files[relpath]
        if text is None:
            return None
        data = text.encode("latin-1")
        if hashlib.sha256(data).hexdigest() != self._sha256.get(relpath):
            raise SourceError(f"{relpath} arrived damaged (sha256 differs from the probe's)")
        return data

    def sha256(self, relpath: str, data: bytes) -> str:
        return self._sha256[relpath]  # ``read`` checked the bytes against it

    def digest(self, relpath: str) -> str | None:
        self._ask_host(relpath, False)
        if (relpath in self._held or relpath in self._more_held) and relpath not in self._errors:
            return self._sha256[relpath]  # the host's, before the bytes came (they are checked against it when read)
        return super().digest(relpath)

    def prefetch(self, relpaths: Iterable[str]) -> None:
        """The digests of every file in ``relpaths`` the collector did not send, asked of
        the host in as few round trips as it takes (a cache hit compares them all)."""
        if self._more is None:
            return
        wanted = [relpath for relpath in dict.fromkeys(relpaths) if self._unasked(relpath, False)]
        for start in range(0, len(wanted), MAX_MORE_FILES):
            self._ask(wanted[start : start + MAX_MORE_FILES], False)

    def _unasked(self, relpath: str, with_bytes: bool) -> bool:
        """Whether the host may be asked for ``relpath``: a module file of the package only
        (it asks the host for no other), of which the collector sent nothing (or only the digest)."""
        if relpath in self._more_held:  # its digest came without the bytes
            return with_bytes
        known = relpath in self._files or relpath in self._errors or relpath in self._held
        return not known and package_module(relpath, self.package)

    def _ask_host(self, relpath: str, with_bytes: bool) -> None:
        """Learn from the host what it holds at ``relpath`` when the collector sent nothing of it."""
        if self._more is not None and self._unasked(relpath, with_bytes):
            self._ask([relpath], with_bytes)

    def _ask(self, relpaths: list[str], with_bytes: bool) -> None:
        assert self._more is not None
        try:
            part = self._more(relpaths, with_bytes)
        except ToolError as exc:  # the host could not be asked: the files are unknown, not absent
            for relpath in relpaths:
                self._errors[relpath] = f"could not be fetched from the host: {exc}"
            return
        for relpath in relpaths:
            self._take(relpath, part, with_bytes)

    def _take(self, relpath: str, part: Mapping[str, Any], with_bytes: bool) -> None:
        """What the host's answer ``part`` says of ``relpath`` (nothing else of the answer is taken)."""
        files, sha256, errors = part.get("files", {}), part.get("sha256", {}), part.get("file_errors", {})
        self._more_held.discard(relpath)
        if relpath in errors:
            self._errors[relpath] = errors[relpath]
        elif relpath in files and files[relpath] is None:
            self._files[relpath] = None  # not there
        elif not SHA256.fullmatch(sha256.get(relpath) or ""):
            self._errors[relpath] = "was not answered for by the host"
        elif relpath in files:
            self._files[relpath], self._sha256[relpath] = files[relpath], sha256[relpath]
        elif with_bytes:
            self._errors[relpath] = "was not sent by the host"
        else:
            self._sha256[relpath] = sha256[relpath]
            self._more_held.add(relpath)

    def search(self, names: frozenset[str], under: str, mentions: bool) -> Mapping[str, list[str]]:
        """The collector's search for moved code where it answered these names; else the host's."""
        if under == self.package and not mentions and names <= set(self._search):
            return {name: list(self._search[name]) for name in names}
        if self._searcher is None:
            raise SourceError(f"{under} was not searched on the host, and there is no host to ask (a probe file)")
        try:
            part = self._searcher(sorted(names), under, mentions)
        except ToolError as exc:
            raise SourceError(f"{under} could not be searched on the host: {exc}") from None
        found = part.get("search")
        if part.get("error") or not isinstance(found, dict):
            raise SourceError(f"{under} could not be searched on the host: {part.get('error') or 'no answer'}")
        # only the names asked for, and only module files of the directory searched, are taken
        return {
            name: [
                relpath
                for relpath in _listed(found.get(name))
                if package_module(relpath, self.package) and relpath.startswith(under + "/")
            ]
            for name in names
        }

    def dist_info_text(self, name: str) -> str | None:
        return self._dist_info.get(name)


def _listed(value: object) -> list:
    return value if isinstance(value, list) else []


def snapshot_target(
    answer: dict,
    kind: str,
    who: str,
    details: tuple[tuple[str, str | int], ...] = (),
    contents: Contents | None = None,
    more: More | None = None,
    searcher: Search | None = None,
) -> ResolvedTarget:
    if answer.get("error"):
        raise ToolError(f"{who}: {answer['error']}")
    if "files" not in answer:
        raise ToolError(f"{who}: the probe answer has no files (was it made with `dflash-doctor probe-script`?)")
    try:  # the package the request named; an answer from before answers named it is vLLM's
        engine = of_package(answer["package"]) if "package" in answer else DEFAULT_ENGINE
    except LookupError as exc:
        raise ToolError(f"{who}: {exc}") from None
    host = answer.get("host") or who
    info = TargetInfo(
        kind, f"{host}:{answer.get('root', '')}", (("host", host), ("python", answer.get("python") or ""), *details)
    )
    return ResolvedTarget(SnapshotTree(answer, engine, contents, more, searcher), info)


class ProbeFileTarget:
    """One file written by the standalone probe script (``probe-script``)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def resolve(self) -> ResolvedTarget:
        answer = parse_probe_output(read_probe_file(self.path), f"probe file {self.path}")
        resolved = snapshot_target(answer, "probe", f"probe file {self.path}", (("probe_file", str(self.path)),))
        return dataclasses.replace(resolved, no_behaviour=FROM_FILE)
