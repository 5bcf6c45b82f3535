"""An image in a registry, over the Distribution HTTP API v2 (no daemon).

HTTPS with the system CA store (``SSL_CERT_FILE`` adds a private CA); plain
HTTP only for hosts named with ``--insecure-registry``. Anonymous access,
``Basic`` auth, and the ``Bearer`` token challenge (Docker Hub, ghcr.io,
nvcr.io). Each request has one deadline (``timeout``) for its answer and for
every read; manifests and tokens are size-capped; redirects (blob CDNs) are
followed a few times, never from HTTPS down to HTTP, and credentials are not
sent to another host.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import re
import socket
import ssl
import threading
import time
import urllib.parse

from .auth import DOCKER_HUB, Credentials, basic_header, credentials_for, parse_challenge
from .interface import (
    MAX_MANIFEST_BYTES,
    Blob,
    ImageError,
    ImageSource,
    OnRead,
    VerifiedStream,
    as_dict,
    as_list,
    check_digest,
    sha256_digest,
)
from .manifest import ACCEPT

DOCKER_HUB_API = "registry-1.docker.io"
COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REPOSITORY = re.compile(rf"^{COMPONENT}(?:/{COMPONENT})*$")
DOMAIN = re.compile(
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(?::\d{1,5})?$|^\[[0-9a-fA-F:]+\](?::\d{1,5})?$"
)
TAG = re.compile(r"^[\w][\w.-]{0,127}$")
MAX_REDIRECTS = 5
MAX_TOKEN_BYTES = 1024 * 1024
MAX_ERROR_BYTES = 64 * 1024


@dataclasses.dataclass(frozen=True)
class Reference:
    registry: str  # host[:port]; docker.io for Docker Hub
    repository: str
    tag: str | None
    digest: str | None

    def __str__(self) -> str:
        name = f"{self.registry}/{self.repository}"
        return name + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")


def parse_reference(text: str) -> Reference:
    """docker's grammar: ``[host[:port]/]path[:tag][@sha256:...]``; Docker Hub and ``library/`` by default."""
    rest, _, digest = text.partition("@")
    if digest:
        check_digest(digest, f"image {text}")
    first, slash, remainder = rest.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, remainder
    else:
        registry, path = DOCKER_HUB, rest
    if registry in ("index.docker.io", DOCKER_HUB_API):
        registry = DOCKER_HUB
    path, _, tag = path.rpartition(":") if ":" in path.rsplit("/", 1)[-1] else (path, "", "")
    if registry == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"
    if not DOMAIN.match(registry) or not REPOSITORY.match(path) or (tag and not TAG.match(tag)):
        raise ImageError(
            f"not an image reference: {text!r} (expected e.g. vllm/vllm-openai:v0.20.1 or "
            "host:5000/team/vllm@sha256:...)"
        )
    return Reference(registry, path, tag or (None if digest else "latest"), digest or None)


class _Response:
    """A response whose body is read under the request's deadline."""

    def __init__(
        self,
        connection: http.client.HTTPConnection,
        response: http.client.HTTPResponse,
        deadline: float | None,
        what: str,
    ) -> None:
        self.connection = connection
        self.response = response
        self.status = response.status
        self.headers = response.headers
        self.deadline = deadline
        self.what = what

    def read(self, n: int = -1) -> bytes:
        if self.deadline is not None and time.monotonic() > self.deadline:
            self.close()
            raise ImageError(f"{self.what}: no complete answer within the deadline")
        try:
            return self.response.read(n) if n is not None and n >= 0 else self.response.read()
        except (socket.timeout, TimeoutError):
            self.close()
            raise ImageError(f"{self.what}: the registry stopped sending (timed out)") from None
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            raise ImageError(f"{self.what}: connection broken: {exc}") from None

    def read_capped(self, limit: int) -> bytes:
        parts: list[bytes] = []
        total = 0
        while True:
            data = self.read(64 * 1024)
            if not data:
                return b"".join(parts)
            total += len(data)
            if total > limit:
                self.close()
                raise ImageError(f"{self.what}: answer larger than {limit} bytes; refusing")
            parts.append(data)

    def close(self) -> None:
        self.connection.close()


class RegistrySource(ImageSource):
    def __init__(self, given: str, insecure: tuple[str, ...] = (), timeout: float = 30.0) -> None:
        self.reference = given
        self.ref = parse_reference(given)
        self.timeout = timeout
        self.api_host = DOCKER_HUB_API if self.ref.registry == DOCKER_HUB else self.ref.registry
        self.scheme = "http" if self.ref.registry in insecure or self.api_host in insecure else "https"
        self.insecure = insecure
        self._authorization: str | None = None
        self._credentials: Credentials | None = None
        self._looked_up = False
        self._lock = threading.Lock()  # layers are fetched from several threads
        self._ssl = ssl.create_default_context()  # honours SSL_CERT_FILE / SSL_CERT_DIR

    # ------------------------------------------------------------ the interface

    def top(self) -> Blob:
        return self._manifest(self.ref.digest or self.ref.tag or "latest", self.ref.digest)

    def manifest(self, digest: str) -> Blob:
        return self._manifest(digest, digest)

    def open_blob(self, digest: str, size: int | None, what: str, progress: OnRead | None = None) -> VerifiedStream:
        response = self._get(f"/v2/{self.ref.repository}/blobs/{check_digest(digest, what)}", {}, what, whole=False)
        if response.status != 200:
            raise self._failure(response, what)
        return VerifiedStream(response, digest, size, what, progress)

    # ------------------------------------------------------------ requests

    def _manifest(self, name: str, digest: str | None) -> Blob:
        what = f"{self.reference}: manifest" if digest is None else f"{self.reference}: manifest {digest}"
        response = self._get(f"/v2/{self.ref.repository}/manifests/{name}", {"Accept": ACCEPT}, what, whole=True)
        if response.status != 200:
            raise self._failure(response, what)
        data = response.read_capped(MAX_MANIFEST_BYTES)
        response.close()
        found = sha256_digest(data)
        if digest is not None and found != digest:
            raise ImageError(f"{what}: sha256 mismatch (got {found}); the manifest is damaged or tampered with")
        media_type = response.headers.get("Content-Type", "").split(";")[0].strip()
        return Blob(media_type, data, found)

    def _failure(self, response: _Response, what: str) -> ImageError:
        detail = ""
        try:
            body = json.loads(response.read_capped(MAX_ERROR_BYTES) or b"{}")
            errors = as_list(as_dict(body).get("errors"))
            if errors and isinstance(errors[0], dict):
                detail = f" ({str(errors[0].get('code', ''))[:80]}: {str(errors[0].get('message', ''))[:200]})"
        except (ValueError, RecursionError, ImageError):  # an error body that says nothing usable
            pass
        response.close()
        if response.status == 404:
            return ImageError(f"{what}: not found in {self.ref.registry}/{self.ref.repository}{detail}")
        if response.status in (401, 403):
            how = (
                "the credentials were refused"
                if self._credentials
                else "the registry needs credentials (docker login, or ~/.docker/config.json)"
            )
            return ImageError(f"{what}: access denied by {self.ref.registry}: {how}{detail}")
        return ImageError(f"{what}: the registry answered HTTP {response.status}{detail}")

    def _get(self, path: str, headers: dict[str, str], what: str, whole: bool) -> _Response:
        """GET with the current authorization; on a challenge, authorize once and retry."""
        url = f"{self.scheme}://{self.api_host}{path}"
        response = self._follow(url, headers, what, whole)
        if response.status == 401 and "www-authenticate" in response.headers:
            challenge = response.headers["WWW-Authenticate"]
            response.close()
            self._authorize(challenge, what)
            response = self._follow(url, headers, what, whole)
        return response

    def _follow(self, url: str, headers: dict[str, str], what: str, whole: bool) -> _Response:
        host = urllib.parse.urlsplit(url).netloc
        for _ in range(MAX_REDIRECTS + 1):
            sent = dict(headers)
            if self._authorization and urllib.parse.urlsplit(url).netloc == host:
                sent["Authorization"] = self._authorization
            response = self._request(url, sent, what, whole)
            if response.status not in (301, 302, 303, 307, 308):
                return response
            location = response.headers.get("Location", "")
            response.close()
            target = urllib.parse.urljoin(url, location)
            if urllib.parse.urlsplit(target).scheme not in ("https", "http") or (
                url.startswith("https:") and target.startswith("http:")
            ):
                raise ImageError(f"{what}: refusing a redirect to {target[:100]}")
            url = target
        raise ImageError(f"{what}: more than {MAX_REDIRECTS} redirects")

    def _request(self, url: str, headers: dict[str, str], what: str, whole: bool) -> _Response:
        parts = urllib.parse.urlsplit(url)
        connection: http.client.HTTPConnection
        if parts.scheme == "https":
            connection = http.client.HTTPSConnection(parts.netloc, timeout=self.timeout, context=self._ssl)
        else:
            connection = http.client.HTTPConnection(parts.netloc, timeout=self.timeout)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        deadline = time.monotonic() + self.timeout
        try:
            connection.request("GET", target, headers={"User-Agent": "dflash-doctor", **headers})
            response = connection.getresponse()
        except (socket.timeout, TimeoutError):
            connection.close()
            raise ImageError(f"{what}: {parts.netloc} did not answer within {self.timeout:g} s") from None
        except ssl.SSLError as exc:
            connection.close()
            verify = getattr(exc, "verify_message", None)
            reason = f"certificate verify failed: {verify}" if verify else exc.reason or str(exc)
            raise ImageError(
                f"{what}: TLS with {parts.netloc} failed ({reason}); for a private CA set SSL_CERT_FILE, "
                f"for a plain-HTTP registry pass --insecure-registry {parts.netloc}"
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            connection.close()
            raise ImageError(
                f"{what}: cannot connect to {parts.netloc}: {getattr(exc, 'strerror', None) or exc}"
            ) from None
        return _Response(connection, response, deadline if whole else None, what)

    # ------------------------------------------------------------ auth

    def _lookup(self) -> Credentials | None:
        if not self._looked_up:
            self._credentials = credentials_for(self.ref.registry)
            self._looked_up = True
        return self._credentials

    def _authorize(self, challenge: str, what: str) -> None:
        with self._lock:
            self._authorize_locked(challenge, what)

    def _authorize_locked(self, challenge: str, what: str) -> None:
        scheme, params = parse_challenge(challenge)
        credentials = self._lookup()
        if scheme == "basic":
            if credentials is None:
                raise ImageError(
                    f"{what}: {self.ref.registry} needs credentials (docker login, or ~/.docker/config.json)"
                )
            self._authorization = basic_header(credentials)
            return
        if scheme != "bearer" or not params.get("realm"):
            raise ImageError(f"{what}: unsupported authentication challenge from {self.ref.registry}: {challenge[:80]}")
        realm = params["realm"]
        parts = urllib.parse.urlsplit(realm)
        if parts.scheme not in ("https", "http") or (
            parts.scheme == "http" and parts.netloc not in self.insecure and self.scheme == "https"
        ):
            raise ImageError(f"{what}: refusing the token service {realm[:100]} (not HTTPS)")
        query = {"service": params.get("service", ""), "scope": f"repository:{self.ref.repository}:pull"}
        url = realm + ("&" if parts.query else "?") + urllib.parse.urlencode({k: v for k, v in query.items() if v})
        headers = {"Authorization": basic_header(credentials)} if credentials else {}
        response = self._request(url, headers, f"{what}: token from {parts.netloc}", whole=True)
        if response.status != 200:
            response.close()
            how = "the credentials were refused" if credentials else "anonymous access was refused"
            raise ImageError(f"{what}: the token service {parts.netloc} answered HTTP {response.status}: {how}")
        try:
            answer = json.loads(response.read_capped(MAX_TOKEN_BYTES))
            token = answer.get("token") or answer.get("access_token")
        except (ValueError, RecursionError, AttributeError):
            token = None
        response.close()
        if not isinstance(token, str) or not token:
            raise ImageError(f"{what}: the token service {parts.netloc} sent no token")
        self._authorization = f"Bearer {token}"
