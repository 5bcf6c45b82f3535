"""A real package index on 127.0.0.1: nginx serving a static PEP 503 simple index.

``/simple/vllm/index.html`` links each wheel under ``/files/`` with its
``#sha256=``; nginx answers range requests (or, with ``ranges=False``, ignores
them: ``max_ranges 0``), optionally over TLS (a self-signed certificate made
by openssl), behind basic auth (an htpasswd from ``openssl passwd``) and paced
(``limit_rate``). Its access log records the bytes each answer carried.
``build_wheel`` makes a wheel of real files (a release tree from the cache) with
a correct RECORD, plus incompressible members standing in for the shared objects.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import time
import zipfile
from collections.abc import Iterable
from pathlib import Path

from sshd import free_port

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def record_digest(data: bytes) -> str:
    """A RECORD's digest: urlsafe base64 of the sha256, without padding."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")


def build_wheel(
    path: Path,
    tree: Path,
    version: str,
    only: Iterable[str] | None = None,
    blobs: int = 0,
    altered: str | None = None,
    extra: dict[str, bytes] | None = None,
) -> Path:
    """A wheel at ``path`` of the ``vllm/**.py`` files (or ``only`` those) and the dist-info of the release
    ``tree``, its RECORD rewritten to the bytes written, plus ``blobs`` MB of incompressible ``.so`` members
    spread among them and the ``extra`` members; ``altered`` names a member whose bytes then differ from its
    RECORD line."""
    dist_info = f"vllm-{version}.dist-info"
    names = sorted(str(p.relative_to(tree)) for p in tree.glob("vllm/**/*.py")) if only is None else list(only)
    files = {name: (tree / name).read_bytes() for name in names} | (extra or {})
    for source in sorted((tree / dist_info).rglob("*")):
        if source.is_file() and source.name != "RECORD":
            files[source.relative_to(tree).as_posix()] = source.read_bytes()
    pieces = max(1, blobs // 8)
    for number in range(pieces if blobs else 0):  # big members among the sources, as vLLM's .so files are
        files[f"vllm/_blob{number}/_C.abi3.so"] = os.urandom(blobs * 1024 * 1024 // pieces)
    record = "".join(f"{name},{record_digest(data)},{len(data)}\n" for name, data in files.items())
    files[f"{dist_info}/RECORD"] = (record + f"{dist_info}/RECORD,,\n").encode()
    if altered is not None:
        files[altered] = files[altered] + b"\n# one line more than the RECORD says\n"
    with zipfile.ZipFile(path, "w") as archive:
        for name in sorted(files, key=lambda name: (name.startswith(dist_info), name)):  # dist-info last
            kind = zipfile.ZIP_STORED if name.endswith(".so") else zipfile.ZIP_DEFLATED
            archive.writestr(name, files[name], compress_type=kind)
    return path


class NginxIndex:
    """nginx serving ``wheels`` as the simple index of ``vllm`` at ``self.url``."""

    def __init__(
        self,
        root: Path,
        wheels: list[Path],
        ranges: bool = True,
        tls: tuple[Path, Path] | None = None,
        users: dict[str, str] | None = None,
        rate: str | None = None,
    ) -> None:
        self.root, self.wheels = root, wheels
        www = root / "www"
        (www / "simple" / "vllm").mkdir(parents=True)
        (www / "files").mkdir()
        links = []
        for wheel in wheels:
            try:
                os.link(wheel, www / "files" / wheel.name)
            except OSError:
                shutil.copy(wheel, www / "files" / wheel.name)
            digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
            links.append(f'<a href="/files/{wheel.name}#sha256={digest}">{wheel.name}</a>')
        (www / "simple" / "vllm" / "index.html").write_text(
            "<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n"
        )
        lines = []
        if users:
            htpasswd = root / "htpasswd"
            entries = [
                f"{user}:"
                + subprocess.run(
                    ["openssl", "passwd", "-apr1", password], capture_output=True, text=True, check=True
                ).stdout.strip()
                for user, password in users.items()
            ]
            htpasswd.write_text("\n".join(entries) + "\n")
            lines += ['auth_basic "index";', f"auth_basic_user_file {htpasswd};"]
        if not ranges:
            lines.append("max_ranges 0;")
        if rate:
            lines.append(f"limit_rate {rate};")
        if tls:
            lines += [f"ssl_certificate {tls[0]};", f"ssl_certificate_key {tls[1]};"]
        self.port = free_port()
        scheme = "https" if tls else "http"
        self.url = f"{scheme}://127.0.0.1:{self.port}/simple"
        self.log = root / "access.log"
        temp = root / "temp"
        temp.mkdir()
        user = "user root;" if os.geteuid() == 0 else ""  # workers read files under a private tmp_path
        (root / "nginx.conf").write_text(f"""
{user}
daemon off;
worker_processes 1;
pid {root}/nginx.pid;
error_log {root}/error.log;
events {{ worker_connections 128; }}
http {{
    log_format counted '$request_method $uri $status $body_bytes_sent $msec $request_time';
    access_log {self.log} counted;
    client_body_temp_path {temp}/body; proxy_temp_path {temp}/proxy; fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi; scgi_temp_path {temp}/scgi;
    types {{ text/html html; }}
    default_type application/octet-stream;
    server {{
        listen 127.0.0.1:{self.port}{" ssl" if tls else ""};
        root {www};
        index index.html;
        {" ".join(lines)}
    }}
}}
""")
        self.process = subprocess.Popen(
            [NGINX, "-p", str(root), "-c", str(root / "nginx.conf"), "-e", str(root / "error.log")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while not (root / "nginx.pid").exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("nginx did not start: " + (root / "error.log").read_text(errors="replace")[-2000:])
            time.sleep(0.02)

    def file_bytes(self) -> int:
        """Bytes of wheel files the server has sent (every answer under /files/)."""
        return sum(int(line.split()[3]) for line in self.requests())

    def requests(self) -> list[str]:
        """The access log's lines for files: method, path, status, bytes sent, time it ended, seconds it took."""
        if not self.log.exists():
            return []
        return [line for line in self.log.read_text().splitlines() if line.split()[1].startswith("/files/")]

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


def self_signed(root: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 made by openssl, and its key."""
    cert, key = root / "cert.pem", root / "key.pem"
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
