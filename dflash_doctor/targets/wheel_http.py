"""A wheel on the package index over HTTP, with the session pip would use (``pip_index``).

``open_wheel`` asks for the last ``TAIL`` bytes: a ``206 Partial Content`` makes
the wheel a ``RangeSource`` (each ``read`` one more range request); any other
success is the whole file, which ``download`` then saves (as for ``--full-wheel``
or a ``file://`` index), checking the sha256 the index states for it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..model import ToolError
from .pip_index import Located
from .wheel_ranges import TAIL

CHUNK = 64 * 1024  # a read blocks until it has this much: the progress bar moves by it
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+)")
# The bytes as stored: a range of an encoded body would be a range of other bytes.
_IDENTITY = {"Accept-Encoding": "identity"}

Advance = Callable[..., None]  # update(advance=bytes), as terminal.progress gives it


@dataclasses.dataclass(frozen=True)
class RangeSource:
    """The wheel at ``url`` (where the first range request ended up), ``size`` bytes, the last of which are ``tail``."""

    located: Located
    url: str
    size: int
    tail: bytes
    update: Advance
    deadline: float

    def fetched(self, start: int, end: int) -> int:
        return max(0, min(end, self.size - len(self.tail)) - start)

    def read(self, start: int, end: int) -> bytes:
        tail_start = self.size - len(self.tail)
        if start >= tail_start:
            return self.tail[start - tail_start : end - tail_start]
        response = _get(self.located, self.url, {"Range": f"bytes={start}-{end - 1}"})
        with response:
            if response.status_code != 206 or _range_of(response) != (start, end - 1, self.size):
                raise ToolError(
                    f"{self.located.shown} answered a range request with {response.status_code} "
                    f"{response.headers.get('Content-Range', '')} after honouring ranges"
                )
            return _body(response, end - start, self.located, self.update, self.deadline)


def open_wheel(located: Located, update: Advance, deadline: float) -> RangeSource | Any:
    """The wheel as a RangeSource when the server honours range requests, else the response that
    carries the whole file (for ``download``)."""
    response = _get(located, located.url, {"Range": f"bytes=-{TAIL}"})
    if response.status_code != 206:
        return response
    with response:
        found = _range_of(response)
        if found is None or found[1] != found[2] - 1:
            raise ToolError(
                f"{located.shown} answered a request for its last {TAIL} bytes with "
                f"{response.headers.get('Content-Range', 'no Content-Range')}"
            )
        start, end, size = found
        tail = _body(response, end - start + 1, located, update, deadline)
    return RangeSource(located, response.url, size, tail, update, deadline)


def download(located: Located, path: Path, update: Advance, deadline: float, response: Any = None) -> Path:
    """The whole wheel saved at ``path`` (from ``response`` when given), checked against the index's sha256
    when it states one."""
    if response is None:
        response = _get(located, located.url, {})
    digest = hashlib.sha256()
    with response, open(path, "wb") as out:
        length = response.headers.get("Content-Length", "")
        update(total=int(length) if length.isdigit() else None, completed=0)
        for chunk in _chunks(response, located):
            if time.monotonic() > deadline:
                raise ToolError(f"downloading {located.shown} took too long")
            out.write(chunk)
            digest.update(chunk)
            update(advance=len(chunk))
    if located.sha256 is not None and digest.hexdigest() != located.sha256.lower():
        raise ToolError(
            f"{located.filename} from {located.shown} does not match the sha256 the index states "
            f"({digest.hexdigest()}, index: {located.sha256}): refused, nothing cached"
        )
    return path


def _get(located: Located, url: str, headers: dict[str, str]) -> Any:
    from pip._vendor.requests import RequestException

    try:
        response = located.session.get(url, headers={**_IDENTITY, **headers}, stream=True)
    except RequestException as exc:
        raise ToolError(f"cannot download {located.shown}: {exc}") from None
    if response.status_code >= 400:
        response.close()
        raise ToolError(f"cannot download {located.shown}: {response.status_code} {response.reason}")
    return response


def _range_of(response: Any) -> tuple[int, int, int] | None:
    found = _CONTENT_RANGE.fullmatch(response.headers.get("Content-Range", "").strip())
    return (int(found.group(1)), int(found.group(2)), int(found.group(3))) if found else None


def _body(response: Any, length: int, located: Located, update: Advance, deadline: float) -> bytes:
    """Exactly ``length`` bytes of the response's body (a ToolError if it sends fewer or more)."""
    parts, got = [], 0
    for chunk in _chunks(response, located):
        got += len(chunk)
        if got > length:
            break
        parts.append(chunk)
        update(advance=len(chunk))
        if time.monotonic() > deadline:
            raise ToolError(f"downloading {located.shown} took too long")
    if got != length:
        raise ToolError(f"{located.shown} sent {got} bytes for a range of {length}")
    return b"".join(parts)


def _chunks(response: Any, located: Located) -> Iterator[bytes]:
    """The body as sent (never decoded); a ``file://`` answer is a plain file."""
    from pip._vendor.requests import RequestException
    from pip._vendor.urllib3.exceptions import HTTPError

    raw = response.raw
    try:
        if hasattr(raw, "stream"):
            yield from raw.stream(CHUNK, decode_content=False)
        else:
            yield from iter(lambda: raw.read(CHUNK), b"")
    except (RequestException, HTTPError, OSError) as exc:
        raise ToolError(f"downloading {located.shown} failed: {exc}") from None
