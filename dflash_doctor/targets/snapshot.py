"""A tree known only through a probe answer: from ssh, or from probe files."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from pathlib import Path

from ..engines import VLLM, Engine, of_package
from ..model import TargetInfo, ToolError
from ..source import SourceError, SourceTree
from . import ResolvedTarget
from .probing import held_back, parse_probe_output, read_probe_file

Contents = Callable[[], Mapping[str, str | None]]


class SnapshotTree(SourceTree):
    """The files the probe sent; anything it did not send cannot be judged.

    A staged answer (ssh) holds back the bytes of most files and gives their
    sha256, computed on the host: the tree's ``state`` is known from those alone,
    so the results cache can answer without the bytes. ``contents`` fetches them
    all at the first read that needs one, each then checked against its digest."""

    def __init__(self, answer: dict, engine: Engine = VLLM, contents: Contents | None = None) -> None:
        super().__init__()
        self.engine = engine
        self.root = answer.get("root", "")
        self._files: dict[str, str | None] = answer.get("files", {})
        self._sha256: dict[str, str] = answer.get("sha256", {})
        self._errors: dict[str, str] = answer.get("file_errors", {})
        self._search: dict[str, list[str]] = answer.get("search", {})
        self._dist_info: dict[str, str] = answer.get("dist_info_files", {})
        self.python = f"{answer.get('python') or ''} {answer.get('python_version') or ''}".strip()
        self._held = held_back(answer) if contents is not None else set()  # elsewhere a digest without bytes is only a claim
        self._contents = contents

    def read(self, relpath: str) -> bytes | None:
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
        if relpath in self._held and relpath not in self._errors:
            return self._sha256[relpath]  # the host's, before the bytes came (they are checked against it when read)
        return super().digest(relpath)

    def search(self, names: frozenset[str]) -> Mapping[str, list[str]]:
        return {name: list(self._search.get(name, [])) for name in names}

    def dist_info_text(self, name: str) -> str | None:
        return self._dist_info.get(name)


def snapshot_target(answer: dict, kind: str, who: str, details: tuple[tuple[str, str], ...] = (),
                    contents: Contents | None = None) -> ResolvedTarget:
    if answer.get("error"):
        raise ToolError(f"{who}: {answer['error']}")
    if "files" not in answer:
        raise ToolError(f"{who}: the probe answer has no files (was it made with `dflash-doctor probe-script`?)")
    try:  # the package the request named; an answer from before answers named it is vLLM's
        engine = of_package(answer["package"]) if "package" in answer else VLLM
    except LookupError as exc:
        raise ToolError(f"{who}: {exc}") from None
    host = answer.get("host") or who
    info = TargetInfo(kind, f"{host}:{answer.get('root', '')}", (("host", host), ("python", answer.get("python") or ""), *details))
    return ResolvedTarget(SnapshotTree(answer, engine, contents), info)


class ProbeFileTarget:
    """One file written by the standalone probe script (``probe-script``)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def resolve(self) -> ResolvedTarget:
        answer = parse_probe_output(read_probe_file(self.path), f"probe file {self.path}")
        return snapshot_target(answer, "probe", f"probe file {self.path}", (("probe_file", str(self.path)),))
