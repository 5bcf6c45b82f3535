"""Read-only access to an engine's tree (vLLM's, SGLang's): files, symbol location, parse caches.

Location is cheap (stdlib ``ast`` over the few files the rules name, one
byte scan of the package when a symbol moved); libcst parses only the
located function or class, never whole files.
"""

from __future__ import annotations

import ast
import re
import dataclasses
import hashlib
import textwrap
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from . import stamp
from .imports import loaded_instead
from .engines import DEFAULT_ENGINE, Engine
from .model import ToolError
from .plugins import Plugin, installed_plugins
from .standalone.probe import metadata_path, python_texts, read_regular, scan_texts

if TYPE_CHECKING:
    import libcst as cst

# vLLM's largest source file is 0.3 MB; parsing costs some 300 times a file's size in memory.
MAX_SOURCE_BYTES = 2 * 1024 * 1024
# ast.parse is not thread-safe on CPython 3.11 before 3.11.8 ("AST constructor
# recursion depth mismatch", gh-106905); parsing is GIL-bound anyway, so fleet
# checks lose nothing by taking turns here while their network waits overlap.
_AST_LOCK = threading.Lock()
# ``SourceTree.state`` of a file that is not there.
ABSENT = "absent"


class SourceError(ToolError):
    """A file the rules need cannot be read as Python; the reason is user-facing."""


@dataclasses.dataclass(frozen=True)
class Symbol:
    """A located function or class."""

    file: str
    qualname: str
    node: Definition
    parsed: "ParsedFile"

    @property
    def line(self) -> int:
        return self.node.lineno

    def cst(self) -> tuple[cst.Module, int]:
        """The symbol alone as a libcst module, and the line offset to add back."""
        import libcst as cst

        lines = self.parsed.text.splitlines(keepends=True)
        first = self.node.lineno - 1
        segment = textwrap.dedent("".join(lines[first : self.node.end_lineno]))
        try:
            return cst.parse_module(segment), first
        except cst.ParserSyntaxError:
            # Dedent fails on bodies holding less-indented string literals: parse
            # the whole file once and take the statement from there.
            module = cst.parse_module(self.parsed.text)
            return cst.Module(body=[_cst_statement_at(module, self.node.lineno)]), 0


def parse_python(text: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse`` that is safe to call from several threads at once."""
    with _AST_LOCK:
        return ast.parse(text, filename=filename)


def literal_value(source: str) -> object:
    """``ast.literal_eval`` under the same lock (it parses too); None if not a literal."""
    try:
        with _AST_LOCK:
            return ast.literal_eval(source)
    except (ValueError, SyntaxError):
        return None


class ParsedFile:
    def __init__(self, relpath: str, data: bytes) -> None:
        self.relpath = relpath
        self.sha256 = hashlib.sha256(data).hexdigest()
        if len(data) > MAX_SOURCE_BYTES:  # a snapshot's files were bounded by the remote probe: checked again here
            raise SourceError(f"{relpath} is {len(data)} bytes, too large for a Python source")
        if b"\x00" in data:
            raise SourceError(f"{relpath} is a binary file, not Python source")
        try:
            self.text = data.decode("utf-8-sig")  # Python reads a source that starts with a BOM (SGLang ships one)
        except UnicodeDecodeError as exc:
            raise SourceError(f"{relpath} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        try:
            self.tree = parse_python(self.text, relpath)
        except SyntaxError as exc:
            raise SourceError(f"{relpath} does not parse: {exc.msg} (line {exc.lineno})") from None
        self._by_qualname: dict[str, list[Definition]] | None = None
        self._by_name: dict[str, list[tuple[str, Definition]]] | None = None
        self._lines: list[str] | None = None

    def lines(self, first: int, last: int) -> str:
        """Lines ``first`` to ``last`` (1-based, both included) of the text."""
        if self._lines is None:
            self._lines = self.text.splitlines(keepends=True)
        return "".join(self._lines[first - 1 : last])

    def symbols(self, qualname: str) -> list[Symbol]:
        """Defs with this qualified name; else defs with the same last name (moved)."""
        wanted_name = search_name(qualname)
        defs = self._defs()
        exact = [Symbol(self.relpath, qualname, node, self) for node in defs[0].get(qualname, ())]
        if exact or wanted_name.startswith("__"):
            return exact
        return [Symbol(self.relpath, found, node, self) for found, node in defs[1].get(wanted_name, ())]

    def _defs(self) -> tuple[dict[str, list[Definition]], dict[str, list[tuple[str, Definition]]]]:
        """The file's defs by qualified name and by name, in file order: walked once
        (a check asks for hundreds of names, most of them in a few files)."""
        if self._by_qualname is None:
            by_qualname: dict[str, list[Definition]] = {}
            by_name: dict[str, list[tuple[str, Definition]]] = {}
            for found, node in _walk_defs(self.tree, ""):
                by_qualname.setdefault(found, []).append(node)
                by_name.setdefault(node.name, []).append((found, node))
            self._by_name = by_name
            self._by_qualname = by_qualname
        assert self._by_name is not None
        return self._by_qualname, self._by_name


def search_name(qualname: str) -> str:
    """The name to look for when a symbol moved: a method's own name, or its
    class's name for dunder methods (every class has an ``__init__``)."""
    parts = qualname.split(".")
    if parts[-1].startswith("__") and len(parts) > 1:
        return parts[-2]
    return parts[-1]


Located = dict[tuple[str, str], "list[Symbol] | SourceError"]  # (file, qualname) -> its definitions


def locate(
    tree: SourceTree, wanted: Iterable[tuple[str, str]], required: Iterable[tuple[str, str]]
) -> tuple[Located, bool]:
    """(file, qualname) -> the definitions found, or the SourceError that stopped the
    search; and whether the package was scanned for moved code.

    Only ``required`` pairs are looked for elsewhere in the package when their file
    lacks them, one scan for all: an optional one names a variant most trees lack
    (older releases), and a scan per run for each would cost more than the whole check.
    """
    required = set(required)
    found: dict[tuple[str, str], list[Symbol] | SourceError] = {}
    for file, qualname in sorted(set(wanted)):
        try:
            parsed = tree.parsed(file)
            found[(file, qualname)] = parsed.symbols(qualname) if parsed else []
        except SourceError as exc:
            found[(file, qualname)] = exc
    moved = {search_name(key[1]): key for key, hit in found.items() if hit == [] and key in required}
    try:
        searched = tree.files_defining(moved) if moved else {}
    except SourceError as exc:  # a probe file's tree, asked for a name its collector did not search for
        found.update((key, exc) for key in moved.values())
        return found, True
    for name, files in searched.items():
        symbols: list[Symbol] = []
        for other in files:
            try:
                parsed = tree.parsed(other)
            except SourceError:
                continue  # a broken unrelated file does not hide the definition
            symbols.extend(parsed.symbols(moved[name][1]) if parsed else [])
        found[moved[name]] = symbols
    return found, bool(moved)


Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")


def _walk_defs(node: ast.AST, prefix: str) -> Iterator[tuple[str, Definition]]:
    """Defs in statement position only: expressions cannot hold a def."""
    for field in _BODIES:
        for child in getattr(node, field, ()) or ():
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                qualname = f"{prefix}{child.name}"
                yield qualname, child
                yield from _walk_defs(child, qualname + ".")
            elif isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case)):
                yield from _walk_defs(child, prefix)


def _cst_statement_at(module: cst.Module, line: int) -> cst.FunctionDef | cst.ClassDef:
    import libcst as cst
    from libcst.metadata import PositionProvider

    wrapper = cst.MetadataWrapper(module, unsafe_skip_copy=True)
    positions = wrapper.resolve(PositionProvider)
    for node, position in positions.items():
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)) and position.start.line <= line:
            header = position.start.line + len(node.decorators) if node.decorators else position.start.line
            if header == line or position.start.line == line:
                return node
    raise SourceError(f"cannot isolate the definition at line {line}")


@dataclasses.dataclass(frozen=True)
class Scan:
    """One search of a tree: in and below the package directory ``under``, for the files
    that define ``names`` or (``mentions``) name them."""

    under: str
    mentions: bool
    names: frozenset[str]


class SourceTree:
    """The files of an engine's package, wherever they are, parsed at most once.

    Subclasses say how bytes are read and how moved symbols are searched:
    ``DirectoryTree`` on this machine; a probe snapshot for remote trees.
    Every answer about the tree reads it through ``data`` (``parsed``,
    ``digest``) and ``files_defining``, which remember what they found, a file
    that was not there included: ``reads`` and ``scans`` are what an answer
    depended on, the record the results cache checks a hit against.
    """

    engine: Engine = DEFAULT_ENGINE  # the engine whose package the tree holds (the target that made the tree says)
    python = ""  # the interpreter a remote tree's code runs on ("": this machine's, the tool's own)

    def __init__(self) -> None:
        self._data: dict[str, bytes | None | SourceError] = {}
        self._digests: dict[str, str] = {}
        self._parsed: dict[str, ParsedFile | SourceError | None] = {}
        self._scans: dict[Scan, dict[str, list[str]]] = {}
        self.stamping = False  # whether to take ``search_stamps`` (the results cache keeps them)
        self.search_stamps: dict[str, list | None] = {}  # directory -> ``package_stamp`` before its first search
        self._remembered: dict[str, str] = {}

    def read(self, relpath: str) -> bytes | None:
        """The file's bytes, None if it does not exist; raises SourceError."""
        raise NotImplementedError

    def search(self, names: frozenset[str], under: str, mentions: bool) -> Mapping[str, list[str]]:
        """Which .py files in and below the package directory ``under`` define each name
        (``def``/``class``), or with ``mentions`` name it anywhere; raises SourceError."""
        raise NotImplementedError

    @property
    def package(self) -> str:
        return self.engine.package

    def files_defining(self, names: Iterable[str], under: str = "") -> Mapping[str, list[str]]:
        """``search`` for definitions, once per set of names and directory (the package by default)."""
        return self._searched(Scan(under or self.package, False, frozenset(names)))

    def files_mentioning(self, names: Iterable[str], under: str) -> Mapping[str, list[str]]:
        """``search`` for the files naming each name, once per set of names and directory."""
        return self._searched(Scan(under, True, frozenset(names)))

    def _searched(self, scan: Scan) -> Mapping[str, list[str]]:
        if scan not in self._scans:
            if self.stamping and scan.under not in self.search_stamps:
                self.search_stamps[scan.under] = self.package_stamp(scan.under)
            found = self.search(scan.names, scan.under, scan.mentions)
            self._scans[scan] = {name: list(files) for name, files in found.items()}
        return {name: list(files) for name, files in self._scans[scan].items()}

    def package_stamp(self, under: str) -> list | None:
        """What a search of the directory ``under`` reads, cheaply (``stamp.py``); None when
        repeating the search is cheap anyway (a snapshot's)."""
        return None

    def package_unchanged(self, under: str, rows: list) -> bool:
        """Whether a search of ``under`` would read the same files as when ``package_stamp`` gave ``rows``."""
        return False

    def dist_info_text(self, name: str) -> str | None:
        """A file of the dist-info that owns the package (METADATA, RECORD, direct_url.json), whatever
        the distribution's name; an .egg-info's PKG-INFO stands for METADATA."""
        raise NotImplementedError

    def data(self, relpath: str) -> bytes | None:
        """``read`` once per file; raises SourceError."""
        if relpath not in self._data:
            try:
                self._data[relpath] = self.read(relpath)
            except SourceError as exc:
                self._data[relpath] = exc
        result = self._data[relpath]
        if isinstance(result, SourceError):
            raise result
        return result

    def digest(self, relpath: str) -> str | None:
        """sha256 of the file's bytes, None when it does not exist; raises SourceError."""
        data = self.data(relpath)
        if data is None:
            return None
        if relpath not in self._digests:
            self._digests[relpath] = self.sha256(relpath, data)
        return self._digests[relpath]

    def sha256(self, relpath: str, data: bytes) -> str:
        """The digest of ``data``, read from ``relpath`` (a snapshot knows it already)."""
        return hashlib.sha256(data).hexdigest()

    def prefetch(self, relpaths: Iterable[str]) -> None:
        """Make ready to answer ``state`` for each of ``relpaths`` at once (a remote tree asks
        its host in one round trip what it would otherwise ask one file at a time)."""

    def state(self, relpath: str) -> str:
        """What ``relpath`` holds, as one string: its sha256, ``ABSENT``, or the error reading it gave."""
        try:
            digest = self.digest(relpath)
        except SourceError as exc:
            return f"error: {exc}"
        if digest is None:
            return ABSENT
        instead = self.shadowed(relpath)  # what Python would load in its place is part of what the tree reads
        return digest if instead is None else f"{digest}; {instead}"

    def plugin_state(self) -> str:
        """The engine's plugins beside the tree as the check judges them, as one string."""
        plugins = sorted((p.distribution, p.group, p.name, p.target, sorted(p.names), p.read) for p in self.plugins())
        return hashlib.sha256(repr(plugins).encode()).hexdigest()

    def reads(self) -> dict[str, str]:
        """relpath -> ``state`` of every file read so far, the ones that were not there included."""
        return {relpath: self.state(relpath) for relpath in list(self._data)}

    def scans(self) -> list[tuple[str, bool, list[str], dict[str, list[str]]]]:
        """(directory, mentions, names, what the search found) of every search of the package so far."""
        return [
            (scan.under, scan.mentions, sorted(scan.names), {name: list(files) for name, files in found.items()})
            for scan, found in self._scans.items()
        ]

    def parsed(self, relpath: str) -> ParsedFile | None:
        """The parsed file, None when it does not exist; raises SourceError."""
        if relpath not in self._parsed:
            try:
                data = self.data(relpath)
                self._parsed[relpath] = None if data is None else ParsedFile(relpath, data)
            except SourceError as exc:
                self._parsed[relpath] = exc
        result = self._parsed[relpath]
        if isinstance(result, SourceError):
            raise result
        return result

    def shadowed(self, relpath: str) -> str | None:
        """Why Python would load something else than ``relpath`` for its module
        (see ``imports``); None when it loads this file or nobody can tell."""
        return None

    def plugins(self) -> tuple[Plugin, ...]:
        """The engine's plugins installed beside the tree (none known: empty)."""
        return ()

    def remember_inspected(self, digests: Mapping[str, str]) -> None:
        """Files a cached result read: they count as inspected without a parse."""
        self._remembered.update(digests)

    def inspected(self) -> dict[str, str]:
        """relpath -> sha256 of every file read that parsed (or a cached result read)."""
        parsed = {path: p.sha256 for path, p in self._parsed.items() if isinstance(p, ParsedFile)}
        return {**self._remembered, **parsed}


MAX_KEPT_SEARCH_BYTES = 16 << 20  # a directory searched more than once is read once when no larger
WORD = re.compile(rb"\w+")  # a whole word, bounded as the mention pattern's \b bounds a name (ASCII)


class DirectoryTree(SourceTree):
    """A tree on this machine: ``root`` holds the engine's package (``vllm/``; and maybe dist-info)."""

    def __init__(self, root: Path, dist_info: Path | None, engine: Engine = DEFAULT_ENGINE) -> None:
        super().__init__()
        self.engine = engine
        self._shadows: dict[str, str | None] = {}
        self._listings: dict[str, list[str]] = {}  # directory -> its names, for loaded_instead
        self._plugins: tuple[Plugin, ...] | None = None
        self._texts: dict[str, list[tuple[str, bytes]]] = {}  # a searched directory's files, when small
        self._words: dict[str, list[tuple[str, frozenset[bytes]]]] = {}  # and each file's words
        self.root = root
        self.dist_info = dist_info

    def dist_info_text(self, name: str) -> str | None:
        """None when absent or unreadable (not a regular file, over the cap): provenance is then unknown."""
        if self.dist_info is None:
            return None
        data, _ = read_regular(metadata_path(str(self.dist_info), name), MAX_SOURCE_BYTES)
        return None if data is None else data.decode("utf-8", "replace")

    def read(self, relpath: str) -> bytes | None:
        data, reason = read_regular(str(self.root / relpath), MAX_SOURCE_BYTES)
        if reason is not None:
            raise SourceError(f"{relpath} {reason}")
        return data

    def search(self, names: frozenset[str], under: str, mentions: bool) -> Mapping[str, list[str]]:
        if under in self._texts:  # a directory searched again, for other names (the capture question's rounds)
            if mentions and all(name.isascii() for name in names):  # each file's words, split once
                if under not in self._words:
                    self._words[under] = [(path, frozenset(WORD.findall(data))) for path, data in self._texts[under]]
                rows = self._words[under]
                return {name: [path for path, words in rows if name.encode() in words] for name in sorted(names)}
            return scan_texts(self._texts[under], names, mentions)
        kept: list[tuple[str, bytes]] = []

        def reading() -> Iterator[tuple[str, bytes]]:
            size = 0
            for relpath, data in python_texts(str(self.root), under):
                size += len(data)
                if size <= MAX_KEPT_SEARCH_BYTES:
                    kept.append((relpath, data))
                yield relpath, data
            if size <= MAX_KEPT_SEARCH_BYTES:
                self._texts[under] = kept

        return scan_texts(reading(), names, mentions)

    def shadowed(self, relpath: str) -> str | None:
        # asked for every file read, by the verdicts and again by the results cache: once per file
        if relpath not in self._shadows:
            self._shadows[relpath] = loaded_instead(self.root, relpath, self._listings)
        return self._shadows[relpath]

    def plugins(self) -> tuple[Plugin, ...]:
        if self._plugins is None:  # a site-packages may hold hundreds of distributions: read once per tree
            self._plugins = installed_plugins(self.root, self.engine)
        return self._plugins

    def package_stamp(self, under: str) -> list | None:
        return stamp.stamp(str(self.root), under)

    def package_unchanged(self, under: str, rows: list) -> bool:
        return stamp.unchanged(str(self.root), under, rows)
