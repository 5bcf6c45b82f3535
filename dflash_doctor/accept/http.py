"""HTTP requests to a server that may be hostile: one deadline for the whole
request (connect, headers, body; a server sending a byte a second cannot
outlast it), a cap on the body, redirects only to http/https on the same host,
and only short sanitized excerpts of what the server sent in messages."""

from __future__ import annotations

import http.client
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import IO, Any

MAX_BODY_BYTES = 16 * 1024 * 1024  # vLLM's /metrics is well under 1 MiB; an API answer smaller still


class Refused(Exception):
    """The server's answer is refused (too large, a redirect elsewhere)."""


def excerpt(text: str, length: int = 60) -> str:
    """At most ``length`` characters of server text, non-ASCII and control characters escaped."""
    return ascii(text[:length])[1:-1] + ("..." if len(text) > length else "")


class _Deadline:
    """Shuts down every socket of the request when the time is up, wherever it blocks."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def left(self) -> float:
        return max(0.001, self.end - time.monotonic())

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if self.expired:
                _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                _shut(sock)

    def __enter__(self) -> "_Deadline":
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _watched(base: type[http.client.HTTPConnection], deadline: _Deadline) -> Callable[..., http.client.HTTPConnection]:
    def connection(host: str, /, **kwargs: Any) -> http.client.HTTPConnection:  # as urllib's do_open calls it
        conn = base(host, **kwargs)

        def create_connection(
            address: tuple[str, int], timeout: float | None = None, source_address: tuple[str, int] | None = None
        ) -> socket.socket:
            sock = socket.create_connection(address, deadline.left(), source_address)
            deadline.watch(sock)
            return sock

        # the raw socket, before any TLS handshake; typeshed's http.client stub omits the private attribute
        conn._create_connection = create_connection  # type: ignore[attr-defined]
        return conn

    return connection


class _HttpHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self._connection = _watched(http.client.HTTPConnection, deadline)

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._connection, req)


class _HttpsHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self._connection = _watched(http.client.HTTPSConnection, deadline)

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        # typeshed's urllib.request stub omits HTTPSHandler's private _context (set by its __init__)
        return self.do_open(self._connection, req, context=self._context)  # type: ignore[attr-defined]


class _SameHostRedirects(urllib.request.HTTPRedirectHandler):
    """Checked before urllib's own rules (which would follow ``ftp://`` and any host)."""

    def http_error_302(
        self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str, headers: http.client.HTTPMessage
    ) -> http.client.HTTPResponse | None:
        newurl = urllib.parse.urljoin(req.full_url, headers.get("location") or headers.get("uri") or "")
        target, origin = urllib.parse.urlsplit(newurl), urllib.parse.urlsplit(req.full_url)
        if target.scheme not in ("http", "https") or target.hostname != origin.hostname:
            raise Refused(f"redirected to {excerpt(newurl)}: only http(s) on the same host is followed")
        return super().http_error_302(req, fp, code, msg, headers)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302


def fetch(request: urllib.request.Request, timeout: float) -> bytes:
    """The body of a 2xx answer, read within ``timeout`` seconds overall.

    Raises urllib's HTTPError/URLError, TimeoutError when the deadline passes,
    Refused, or http.client.HTTPException for a broken answer."""
    with _Deadline(timeout) as deadline:
        opener = urllib.request.build_opener(_HttpHandler(deadline), _HttpsHandler(deadline), _SameHostRedirects())
        try:
            with opener.open(request, timeout=timeout) as response:
                body = response.read(MAX_BODY_BYTES + 1)
        except (OSError, http.client.HTTPException) as exc:
            if deadline.expired and not isinstance(exc, urllib.error.HTTPError):
                raise TimeoutError from None
            raise
        if deadline.expired:
            raise TimeoutError
    if len(body) > MAX_BODY_BYTES:
        raise Refused(f"the answer is larger than {MAX_BODY_BYTES // (1024 * 1024)} MiB")
    return body
