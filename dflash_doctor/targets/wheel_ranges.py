"""Some members of a wheel, read through its zip central directory and checked against its RECORD.

The bytes come from a ``Source``: a downloaded file, or the wheel on the index
read with HTTP range requests (``wheel_http``). The central directory says where
each member lies; the members wanted are fetched in few spans (neighbours
coalesced, several spans in flight), the RECORD first; every member is
decompressed and its size and digest compared with the RECORD's line for it
before it is written. A member the RECORD does not list, or lists with other
bytes, is a ToolError: the caller's staging tree is then never published.
"""

from __future__ import annotations

import base64
import concurrent.futures
import contextvars
import csv
import dataclasses
import hashlib
import io
import os
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from ..model import ToolError

TAIL = 64 * 1024  # the end of the wheel asked for first: the end of central directory, often the directory itself
GAP = 64 * 1024  # bytes between two wanted members fetched along rather than asked for apart
SPAN = 4 << 20  # at most this much in one request, so that several are in flight
JOBS = 4  # requests in flight
MAX_DIRECTORY = 64 << 20
MAX_MEMBER = (
    64 << 20
)  # a kept member (or the RECORD), packed or unpacked (vLLM's largest .py is under 1 MB): memory stays bounded
HASHES = ("sha256", "sha384", "sha512")  # what a RECORD line may name (PEP 376 / the wheel spec: not md5 or sha1)

_EOCD = struct.Struct("<4s4H2LH")
_EOCD64_LOCATOR = struct.Struct("<4sLQL")
_EOCD64 = struct.Struct("<4sQ2H2L4Q")
_CENTRAL = struct.Struct("<4s4B4HL2L5H2L")
_LOCAL = struct.Struct("<4s2B4HL2L2H")
_LOCAL_MOST = _LOCAL.size + 2 * 0xFFFF + 24  # a local header with the longest name and extra, and a data descriptor


class Source(Protocol):
    """The bytes of a wheel: ``size`` of them, ``read(start, end)`` any range, ``fetched(start, end)`` the
    bytes such a read moves over the network."""

    @property
    def size(self) -> int: ...

    def read(self, start: int, end: int) -> bytes: ...

    def fetched(self, start: int, end: int) -> int: ...


@dataclasses.dataclass(frozen=True)
class FileSource:
    path: Path
    size: int

    @classmethod
    def of(cls, path: Path) -> FileSource:
        return cls(path, path.stat().st_size)

    def read(self, start: int, end: int) -> bytes:
        with open(self.path, "rb") as handle:
            return os.pread(handle.fileno(), end - start, start)

    def fetched(self, start: int, end: int) -> int:
        return 0


@dataclasses.dataclass(frozen=True)
class Member:
    name: str
    offset: int  # of its local header
    end: int  # where the next member (or the central directory) starts, or sooner where its bytes must end
    compressed: int
    size: int
    method: int


def members(source: Source, wheel: str) -> list[Member]:
    """Every file of the wheel, in the order of its bytes."""
    tail_start = max(0, source.size - TAIL)
    tail = source.read(tail_start, source.size)
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or at + _EOCD.size > len(tail):
        raise ToolError(f"{wheel} is not a zip archive (no end of central directory)")
    _, _, _, _, count, length, offset, _ = _EOCD.unpack_from(tail, at)
    if count == 0xFFFF or 0xFFFFFFFF in (length, offset):
        locator = at - _EOCD64_LOCATOR.size
        if locator < 0 or tail[locator : locator + 4] != b"PK\x06\x07":
            raise ToolError(f"{wheel} is not a zip archive (a zip64 end without its locator)")
        record_at = _EOCD64_LOCATOR.unpack_from(tail, locator)[2]
        record = source.read(record_at, record_at + _EOCD64.size)
        if len(record) < _EOCD64.size or record[:4] != b"PK\x06\x06":
            raise ToolError(f"{wheel} is not a zip archive (no zip64 end of central directory)")
        count, length, offset = _EOCD64.unpack(record)[7:10]
    if length > MAX_DIRECTORY or offset + length > tail_start + at:
        raise ToolError(f"{wheel} is not a zip archive (its central directory lies outside it)")
    directory = tail[offset - tail_start : at] if offset >= tail_start else source.read(offset, offset + length)
    return _entries(directory[:length], count, offset, wheel)


def _entries(directory: bytes, count: int, end: int, wheel: str) -> list[Member]:
    found: list[tuple[str, int, int, int, int]] = []
    at = 0
    for _ in range(count):
        if directory[at : at + 4] != b"PK\x01\x02" or at + _CENTRAL.size > len(directory):
            raise ToolError(f"{wheel} is not a zip archive (a damaged central directory)")
        fields = _CENTRAL.unpack_from(directory, at)
        flags, method, compressed, size, name_length, extra_length, comment_length = (
            fields[5],
            fields[6],
            fields[10],
            fields[11],
            fields[12],
            fields[13],
            fields[14],
        )
        offset = fields[18]
        start = at + _CENTRAL.size
        raw = directory[start : start + name_length]
        extra = directory[start + name_length : start + name_length + extra_length]
        size, compressed, offset = _zip64(extra, size, compressed, offset)
        name = raw.decode("utf-8" if flags & 0x800 else "cp437", "replace")
        found.append((name, offset, compressed, size, method))
        at = start + name_length + extra_length + comment_length
    found.sort(key=lambda entry: entry[1])
    if found and found[-1][1] >= end:
        raise ToolError(f"{wheel} is not a zip archive (a member starts past its central directory)")
    ends = [entry[1] for entry in found[1:]] + [end]
    # A member ends where the next begins, or sooner: bytes no member claims are never fetched.
    return [
        Member(name, offset, min(stop, offset + _LOCAL_MOST + compressed), compressed, size, method)
        for (name, offset, compressed, size, method), stop in zip(found, ends)
    ]


def _zip64(extra: bytes, size: int, compressed: int, offset: int) -> tuple[int, int, int]:
    """The sizes and offset a zip64 extra field (0x0001) stands in for."""
    at = 0
    while at + 4 <= len(extra):
        kind, length = struct.unpack_from("<2H", extra, at)
        if kind == 1:
            values = iter(struct.unpack_from(f"<{min(length, len(extra) - at - 4) // 8}Q", extra, at + 4))
            size = next(values, size) if size == 0xFFFFFFFF else size
            compressed = next(values, compressed) if compressed == 0xFFFFFFFF else compressed
            offset = next(values, offset) if offset == 0xFFFFFFFF else offset
        at += 4 + length
    return size, compressed, offset


def safe(name: str) -> bool:
    """A relative path that stays in the tree, naming a file."""
    parts = name.split("/")
    return not (
        name.startswith("/")
        or "\\" in name
        or "\0" in name
        or name.endswith("/")
        or any(part in ("", ".", "..") for part in parts)
    )


def spans(chosen: list[Member]) -> list[tuple[int, int, list[Member]]]:
    """Ranges covering the ``chosen`` members (in the order of their bytes): neighbours closer than GAP
    share one, no range longer than SPAN unless one member is."""
    found: list[tuple[int, int, list[Member]]] = []
    for member in chosen:
        if found and member.offset - found[-1][1] <= GAP and member.end - found[-1][0] <= SPAN:
            start, _, group = found[-1]
            found[-1] = (start, member.end, [*group, member])
        else:
            found.append((member.offset, member.end, [member]))
    return found


Record = dict[str, tuple[str, str, int]]  # path -> (hash name, urlsafe base64 digest, size)


def read_record(text: bytes, wheel: str) -> Record:
    record: Record = {}
    try:
        rows = list(csv.reader(io.StringIO(text.decode("utf-8"))))
    except (UnicodeDecodeError, csv.Error):
        raise ToolError(f"the RECORD of {wheel} is not a CSV text") from None
    for row in rows:
        if len(row) >= 3 and "=" in row[1] and row[2].isdigit():
            kind, _, digest = row[1].partition("=")
            record[row[0]] = (kind, digest.rstrip("="), int(row[2]))
    return record


def unpack(member: Member, data: bytes, start: int, wheel: str) -> bytes:
    """The member's content from ``data`` (the bytes of a span beginning at ``start``)."""
    at = member.offset - start
    if data[at : at + 4] != b"PK\x03\x04" or at + _LOCAL.size > len(data):
        raise ToolError(f"{wheel} is not a zip archive ({member.name}: no local header where the directory says)")
    name_length, extra_length = _LOCAL.unpack_from(data, at)[10:12]
    begin = at + _LOCAL.size + name_length + extra_length
    if begin + member.compressed > member.end - start:
        raise ToolError(f"{wheel} is not a zip archive ({member.name} overlaps the next member)")
    body = data[begin : begin + member.compressed]
    if member.method == 0:
        return body
    if member.method != 8:
        raise ToolError(
            f"{wheel}: {member.name} is compressed with method {member.method} (only stored and deflate are read)"
        )
    inflater = zlib.decompressobj(-15)
    try:
        return inflater.decompress(body, member.size + 1)  # never more than the directory announces, plus one to tell
    except zlib.error:
        raise ToolError(f"{wheel}: {member.name} is not valid deflate data") from None


def verify(member: Member, content: bytes, record: Record, wheel: str) -> None:
    listed = record.get(member.name)
    if listed is None:
        raise ToolError(
            f"{member.name} in {wheel} is not in the wheel's RECORD (with a digest): refused, nothing cached"
        )
    kind, digest, size = listed
    if kind not in HASHES:
        raise ToolError(
            f"{member.name} in {wheel}: the RECORD's digest is {kind}, not one of {', '.join(HASHES)}: refused, "
            "nothing cached"
        )
    got = base64.urlsafe_b64encode(hashlib.new(kind, content).digest()).decode().rstrip("=")
    if len(content) != size or got != digest:
        raise ToolError(
            f"{member.name} in {wheel} does not match the wheel's RECORD ({kind} {got}, {len(content)} bytes; "
            f"RECORD: {digest}, {size} bytes): refused, nothing cached"
        )


def extract(
    source: Source,
    wanted: Callable[[str], bool],
    tree: Path,
    wheel: str,
    announce: Callable[[int], None] = lambda total: None,
) -> int:
    """Write the wanted members of the wheel (and its dist-info's RECORD) into ``tree``, each checked against
    the RECORD first; ``announce`` is told how many bytes fetching them moves. The number of members."""
    every = [member for member in members(source, wheel) if safe(member.name)]
    records = [m for m in every if m.name.count("/") == 1 and m.name.endswith(".dist-info/RECORD")]
    if len(records) != 1:
        raise ToolError(f"{wheel} has {'no' if not records else 'more than one'} .dist-info/RECORD: not a wheel")
    chosen = [member for member in every if member is not records[0] and wanted(member.name)]
    for member in [*chosen, *records]:
        if max(member.size, member.compressed) > MAX_MEMBER:
            raise ToolError(
                f"{member.name} in {wheel} is {max(member.size, member.compressed)} bytes, more than "
                f"{MAX_MEMBER >> 20} MiB: refused, nothing cached"
            )
    planned = spans(chosen)
    announce(sum(source.fetched(start, end) for start, end, _ in [(records[0].offset, records[0].end, []), *planned]))
    (record_member,) = records
    text = unpack(record_member, source.read(record_member.offset, record_member.end), record_member.offset, wheel)
    if len(text) != record_member.size:
        raise ToolError(f"{wheel}: its RECORD is not the size the directory says")
    record = read_record(text, wheel)
    made: set[Path] = set()
    _write(tree, record_member.name, text, made, wheel)
    context = contextvars.copy_context()  # the progress bar shown, in each worker
    with concurrent.futures.ThreadPoolExecutor(JOBS) as pool:
        fetched = [
            pool.submit(context.copy().run, _fetch_span, source, span, record, wheel, tree, made) for span in planned
        ]
        try:
            for future in concurrent.futures.as_completed(fetched):
                future.result()
        finally:
            for future in fetched:
                future.cancel()
    return len(chosen) + 1


def _fetch_span(
    source: Source, span: tuple[int, int, list[Member]], record: Record, wheel: str, tree: Path, made: set[Path]
) -> None:
    """Fetch one span and write its members, each checked against the RECORD before it is written."""
    start, end, group = span
    data = source.read(start, end)
    for member in group:
        content = unpack(member, data, start, wheel)
        verify(member, content, record, wheel)
        _write(tree, member.name, content, made, wheel)


def _write(tree: Path, name: str, content: bytes, made: set[Path], wheel: str) -> None:
    path = tree / name
    try:
        if path.parent not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            made.add(path.parent)
        with open(path, "wb") as handle:
            handle.write(content)
    except OSError as exc:  # a name that is also a directory's, or a full disk
        raise ToolError(f"cannot write {name} of {wheel} into the cache: {exc.strerror or exc}") from None
