"""Images for the tests: OCI layouts written here, and a real registry on 127.0.0.1.

``write_image`` writes an OCI image layout (gzip layers, config, manifest,
index.json entry) from layer descriptions; ``Registry`` runs Debian's
``docker-registry`` (the reference Distribution server), optionally with
htpasswd basic auth and TLS; ``push`` copies a layout into it with skopeo.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
import os
import random
import socket
import subprocess
import tarfile
import time
from pathlib import Path

from sshd import free_port
import tiers

REGISTRY = "/usr/bin/docker-registry"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
SITE = "usr/local/lib/python3.12/dist-packages"


@dataclasses.dataclass(frozen=True)
class Link:
    target: str


@dataclasses.dataclass(frozen=True)
class Random:
    """A file of ``size`` pseudo-random bytes (incompressible, the same for the same seed),
    written in chunks: a large unrelated base layer shared by several images."""

    size: int
    seed: int = 0


WHITEOUT = None  # a layer entry mapped to WHITEOUT deletes that path from the layers below


def tree_files(root: Path, site: str = SITE) -> dict[str, bytes]:
    """A tree on disk (vllm/ and dist-info) as layer entries under ``site``."""
    return {f"{site}/{p.relative_to(root).as_posix()}": p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def python_files(prefix: str = "usr", version: str = "3.12") -> dict[str, object]:
    """A Debian-like interpreter: bin/python3 -> python3.X (a stand-in binary)."""
    return {f"{prefix}/bin/python{version}": b"\x7fELF stand-in", f"{prefix}/bin/python3": Link(f"python{version}")}


class _Hashing(io.RawIOBase):
    def __init__(self, out) -> None:
        self.out, self.sha, self.size = out, hashlib.sha256(), 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self.sha.update(data)
        self.size += len(data)
        return self.out.write(data)


def _blob_path(layout: Path, digest: str) -> Path:
    return layout / "blobs" / "sha256" / digest.split(":", 1)[1]


def put_blob(layout: Path, data: bytes) -> dict:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    path = _blob_path(layout, digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return {"digest": digest, "size": len(data)}


class _RandomReader(io.RawIOBase):
    def __init__(self, size: int, seed: int) -> None:
        self.left, self.random = size, random.Random(seed)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = min(len(buffer), self.left)
        buffer[:n] = self.random.randbytes(n)
        self.left -= n
        return n


def write_layer(layout: Path, entries: dict[str, object]) -> tuple[dict, str]:
    """One gzip layer blob; returns (descriptor, diff_id)."""
    temp = layout / "blobs" / "sha256" / "layer.tmp"
    temp.parent.mkdir(parents=True, exist_ok=True)
    with open(temp, "wb") as raw:
        outer = _Hashing(raw)
        with gzip.GzipFile(fileobj=outer, mode="wb", compresslevel=1, mtime=0) as zipped:
            inner = _Hashing(zipped)
            with tarfile.open(fileobj=inner, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                for path, value in entries.items():
                    if value is WHITEOUT:
                        head, _, name = path.rpartition("/")
                        path, value = (f"{head}/" if head else "") + f".wh.{name}", b""
                    info = tarfile.TarInfo(path)
                    info.mtime = 0
                    if isinstance(value, Link):
                        info.type, info.linkname = tarfile.SYMTYPE, value.target
                        tar.addfile(info)
                    elif isinstance(value, Random):
                        info.size = value.size
                        tar.addfile(info, _RandomReader(value.size, value.seed))
                    else:
                        info.size, info.mode = len(value), 0o755 if "/bin/" in path else 0o644
                        tar.addfile(info, io.BytesIO(value))
    digest = "sha256:" + outer.sha.hexdigest()
    os.replace(temp, _blob_path(layout, digest))
    return {"mediaType": OCI_LAYER, "digest": digest, "size": outer.size}, "sha256:" + inner.sha.hexdigest()


def write_image(
    layout: Path,
    tag: str | None,
    layers: list,
    env: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    platform: tuple[str, str] = ("linux", "amd64"),
) -> dict:
    """An image in the layout (tagged in index.json when ``tag``); returns its manifest descriptor.
    A layer is a dict of entries, or what ``write_layer`` returned (a layer shared with another image)."""
    layout.mkdir(parents=True, exist_ok=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    written = [entries if isinstance(entries, tuple) else write_layer(layout, entries) for entries in layers]
    env = env or {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    config = {
        "architecture": platform[1],
        "os": platform[0],
        "config": {"Env": [f"{k}={v}" for k, v in env.items()], "Labels": labels or {}},
        "rootfs": {"type": "layers", "diff_ids": [diff_id for _, diff_id in written]},
    }
    config_descriptor = {
        "mediaType": "application/vnd.oci.image.config.v1+json",
        **put_blob(layout, json.dumps(config).encode()),
    }
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": config_descriptor,
        "layers": [d for d, _ in written],
    }
    descriptor = {
        "mediaType": OCI_MANIFEST,
        **put_blob(layout, json.dumps(manifest).encode()),
        "platform": {"architecture": platform[1], "os": platform[0]},
    }
    if tag is not None:
        tag_image(layout, descriptor, tag)
    return descriptor


def write_index(layout: Path, tag: str, manifests: list[dict]) -> dict:
    """A multi-platform index over manifests already in the layout."""
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests}
    descriptor = {"mediaType": OCI_INDEX, **put_blob(layout, json.dumps(index).encode())}
    tag_image(layout, descriptor, tag)
    return descriptor


def tag_image(layout: Path, descriptor: dict, tag: str) -> None:
    path = layout / "index.json"
    index = json.loads(path.read_text()) if path.exists() else {"schemaVersion": 2, "manifests": []}
    entry = {k: v for k, v in descriptor.items() if k != "platform"}
    entry["annotations"] = {"org.opencontainers.image.ref.name": tag}
    index["manifests"] = [
        m for m in index["manifests"] if m.get("annotations", {}).get("org.opencontainers.image.ref.name") != tag
    ]
    index["manifests"].append(entry)
    path.write_text(json.dumps(index))


class Registry:
    """``docker-registry serve`` on 127.0.0.1, storage in ``workdir``; basic auth for ``users``
    (htpasswd, bcrypt), TLS with ``tls`` (cert, key), or other ``auth`` config lines."""

    def __init__(
        self,
        workdir: Path,
        users: dict[str, str] | None = None,
        tls: tuple[Path, Path] | None = None,
        auth: list[str] | None = None,
    ) -> None:
        tiers.require("slow", "starts an image registry")
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir, self.port, self.tls = workdir, free_port(), tls
        self.storage = workdir / "storage"
        lines = [
            "version: 0.1",
            "log:",
            "  level: error",
            "  accesslog:",
            "    disabled: true",
            "storage:",
            "  filesystem:",
            f"    rootdirectory: {self.storage}",
            "  delete:",
            "    enabled: true",
            "http:",
            f"  addr: 127.0.0.1:{self.port}",
        ]
        if tls:
            lines += ["  tls:", f"    certificate: {tls[0]}", f"    key: {tls[1]}"]
        if users:
            import bcrypt

            htpasswd = workdir / "htpasswd"
            htpasswd.write_text(
                "".join(
                    f"{u}:{bcrypt.hashpw(p.encode(), bcrypt.gensalt(rounds=5)).decode()}\n" for u, p in users.items()
                )
            )
            lines += ["auth:", "  htpasswd:", "    realm: test-realm", f"    path: {htpasswd}"]
        lines += auth or []
        (workdir / "config.yml").write_text("\n".join(lines) + "\n")
        self.log = open(workdir / "registry.log", "wb")
        self.process = subprocess.Popen(
            [REGISTRY, "serve", str(workdir / "config.yml")], stdout=self.log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                if self.process.poll() is not None:
                    break
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"docker-registry did not start: {(workdir / 'registry.log').read_text()[-2000:]}")

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def push(self, layout: Path, tag: str, name: str, creds: str | None = None, all_platforms: bool = False) -> str:
        """skopeo copy oci:LAYOUT:TAG docker://HOST/NAME; returns the pushed reference."""
        ref = f"{self.host}/{name}"
        command = [
            "skopeo",
            "copy",
            "--quiet",
            "--dest-tls-verify=false",
            *(["--all"] if all_platforms else []),
            *(["--dest-creds", creds] if creds else []),
            f"oci:{layout}:{tag}",
            f"docker://{ref}",
        ]
        subprocess.run(command, check=True, capture_output=True, timeout=600)
        return ref

    def blob_file(self, digest: str) -> Path:
        hexd = digest.split(":", 1)[1]
        return self.storage / "docker/registry/v2/blobs/sha256" / hexd[:2] / hexd / "data"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


def make_cert(workdir: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 made with openssl: (cert, key); the cert is its own CA."""
    cert, key = workdir / "cert.pem", workdir / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def _b64url(data: bytes) -> str:
    import base64

    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class TokenServer:
    """A token service for the registry's ``auth: token`` mode (the Docker Hub flow): HTTPS on
    127.0.0.1, RS256 JWTs signed with the test certificate's key (sent in ``x5c``), pull and
    push granted to ``users``, an empty grant to anonymous callers, 401 for wrong passwords."""

    def __init__(self, cert: Path, key: Path, users: dict[str, str], service: str = "test-registry") -> None:
        tiers.require("slow", "starts a token server")
        import base64
        import http.server
        import ssl
        import threading
        import urllib.parse

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import padding

        self.service, self.issuer = service, "test-issuer"
        private = serialization.load_pem_private_key(key.read_bytes(), password=None)
        chain = [
            base64.b64encode(
                x509.load_pem_x509_certificate(cert.read_bytes()).public_bytes(serialization.Encoding.DER)
            ).decode()
        ]
        owner = self
        self.requests: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                owner.requests.append(self.path)
                user = None
                header = self.headers.get("Authorization", "")
                if header.startswith("Basic "):
                    name, _, password = base64.b64decode(header[6:]).decode().partition(":")
                    if users.get(name) != password:
                        self.send_response(401)
                        self.end_headers()
                        return
                    user = name
                access = []
                for scope in query.get("scope", []):
                    kind, _, rest = scope.partition(":")
                    name, _, actions = rest.rpartition(":")
                    if user is not None and kind == "repository":
                        access.append({"type": kind, "name": name, "actions": actions.split(",")})
                now = int(time.time())
                claims = {
                    "iss": owner.issuer,
                    "sub": user or "",
                    "aud": query.get("service", [""])[0],
                    "exp": now + 600,
                    "nbf": now - 60,
                    "iat": now - 60,
                    "jti": os.urandom(8).hex(),
                    "access": access,
                }
                head = _b64url(json.dumps({"alg": "RS256", "typ": "JWT", "x5c": chain}).encode())
                body = _b64url(json.dumps(claims).encode())
                signature = private.sign(f"{head}.{body}".encode(), padding.PKCS1v15(), hashes.SHA256())
                answer = json.dumps({"token": f"{head}.{body}.{_b64url(signature)}", "expires_in": 600}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert), str(key))
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.realm = f"https://127.0.0.1:{self.server.server_address[1]}/token"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def registry_auth(self, cert: Path) -> list[str]:
        """The registry config lines that send clients here."""
        return [
            "auth:",
            "  token:",
            f"    realm: {self.realm}",
            f"    service: {self.service}",
            f"    issuer: {self.issuer}",
            f"    rootcertbundle: {cert}",
        ]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
