"""A real package index on 127.0.0.1 for the download tests: a PEP 503 simple
index serving small ``vllm`` wheels built here (our own two-line package, plus
incompressible padding so the download takes a moment), slowly on purpose so
a terminal sees the progress bar move."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import tiers

VERSION = "0.99.0"

WHEEL = f"vllm-{VERSION}-py3-none-any.whl"

PADDING = 2_500_000  # bytes of the wheel that are not kept (not .py)


def build_wheel(version: str = VERSION) -> bytes:
    files = {
        "vllm/__init__.py": f'__version__ = "{version}"\n'.encode(),
        "vllm/_version.py": f'__version__ = version = "{version}"\n'.encode(),
        "vllm/padding.bin": os.urandom(PADDING),
        f"vllm-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n".encode(),
        f"vllm-{version}.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = "".join(f"{name},sha256={digest(data)},{len(data)}\n" for name, data in files.items())
    record += f"vllm-{version}.dist-info/RECORD,,\n"
    files[f"vllm-{version}.dist-info/RECORD"] = record.encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def digest(data: bytes) -> str:
    """A RECORD's digest: urlsafe base64 of the sha256, without padding."""
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")


class Index:
    """A PEP 503 simple index for ``vllm`` with the given wheels; files are
    sent in ``chunks`` pieces over ``seconds``."""

    def __init__(self, wheels: dict[str, bytes], seconds: float = 0.0, chunks: int = 20) -> None:
        tiers.require("slow", "starts a package index that serves slowly")
        self.wheels, self.seconds, self.chunks = wheels, seconds, chunks
        self.downloads: list[str] = []
        index = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/simple/vllm":
                    links = "".join(
                        f'<a href="/files/{name}#sha256={hashlib.sha256(data).hexdigest()}">{name}</a>\n'
                        for name, data in index.wheels.items()
                    )
                    return self._send(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n".encode(), "text/html")
                name = self.path.rsplit("/", 1)[-1]
                if self.path.startswith("/files/") and name in index.wheels:
                    index.downloads.append(name)
                    return self._send(index.wheels[name], "application/octet-stream", slow=True)
                self.send_error(404)

            def _send(self, body: bytes, kind: str, slow: bool = False) -> None:
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                step = -(-len(body) // index.chunks) if slow else len(body)
                for start in range(0, len(body), step):
                    self.wfile.write(body[start : start + step])
                    self.wfile.flush()
                    if slow:
                        time.sleep(index.seconds / index.chunks)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
