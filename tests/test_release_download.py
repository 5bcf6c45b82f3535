"""Downloading a release: real pip against a real package index on 127.0.0.1.

The index serves a small wheel built here (our own two-line package, plus
incompressible padding so the download takes a moment), slowly, so a
terminal (a pty from ``script``) sees the progress bar move. pip runs with
no configuration but the index URL, and every cache is under tmp_path.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import assert_error, run_cli
from test_releases_matrix import unreachable_index_env

VERSION = "0.99.0"
WHEEL = f"vllm-{VERSION}-py3-none-any.whl"
PADDING = 2_500_000  # bytes of the wheel that are not kept (not .py)


def build_wheel(version: str = VERSION) -> bytes:
    files = {
        "vllm/__init__.py": f'__version__ = "{version}"\n'.encode(),
        "vllm/_version.py": f'__version__ = version = "{version}"\n'.encode(),
        "vllm/padding.bin": os.urandom(PADDING),
        f"vllm-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n".encode(),
        f"vllm-{version}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
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
        self.wheels, self.seconds, self.chunks = wheels, seconds, chunks
        self.downloads: list[str] = []
        index = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
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

            def _send(self, body: bytes, kind: str, slow: bool = False):
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                step = -(-len(body) // index.chunks) if slow else len(body)
                for start in range(0, len(body), step):
                    self.wfile.write(body[start:start + step])
                    self.wfile.flush()
                    if slow:
                        time.sleep(index.seconds / index.chunks)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def index():
    servers = []

    def start(**kwargs) -> Index:
        servers.append(Index({WHEEL: build_wheel()}, **kwargs))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def pip_env(tmp_path: Path, index_url: str | None = None) -> dict[str, str]:
    """Only this index (else a closed port), no pip configuration, every cache under tmp_path."""
    env = unreachable_index_env(tmp_path / "cache")
    if index_url is not None:
        env["PIP_INDEX_URL"] = index_url
    return {**env, "PIP_CACHE_DIR": str(tmp_path / "pip-cache"), "PIP_DEFAULT_TIMEOUT": "10"}


# ------------------------------------------------------------ one canonical release, one cached tree


@pytest.mark.slow
def test_tag_and_short_forms_name_one_cached_tree(tmp_path, index):
    server = index()
    env = pip_env(tmp_path, server.url)
    proc = run_cli("check", "--release", f"v{VERSION}", "--format", "json", env=env)
    assert proc.stdout, proc.stderr
    report = json.loads(proc.stdout)
    assert report["target"]["location"].endswith(f"releases/{VERSION}")
    releases = tmp_path / "cache" / "releases"
    assert sorted(os.listdir(releases)) == [VERSION] and (releases / VERSION / ".complete").is_file()
    assert (releases / VERSION / "vllm/__init__.py").is_file() and not (releases / VERSION / "vllm/padding.bin").exists()
    assert server.downloads == [WHEEL]

    for spelling in ("0.99", "V0.99.0", "0.99.0.0"):
        again = run_cli("check", "--release", spelling, "--format", "json", env=env)
        assert json.loads(again.stdout)["target"] == report["target"], again.stderr
    assert sorted(os.listdir(releases)) == [VERSION]  # never a second copy under 0.99
    assert server.downloads == [WHEEL]  # and no second download


@pytest.mark.release
def test_short_form_uses_the_cached_release(tmp_path, release):
    """0.20 is 0.20.0, already cached (a private cache linking the real tree; the
    index is a closed port): checked there, nothing downloaded or added."""
    env = pip_env(tmp_path)
    releases = tmp_path / "cache" / "releases"
    releases.mkdir(parents=True)
    (releases / "0.20.0").symlink_to(release("0.20.0"))
    proc = run_cli("check", "--release", "0.20", "--only", "layer-offset", "--format", "json", env=env)
    assert proc.stdout, proc.stderr
    assert json.loads(proc.stdout)["target"]["location"] == str((releases / "0.20.0").resolve())
    assert os.listdir(releases) == ["0.20.0"]


@pytest.mark.parametrize("spelling", ["0.20.x", "v", "vv0.20.1", "0.20.1-rc1", "../0.20.1"])
def test_not_a_release_is_refused_before_any_download(tmp_path, spelling):
    assert_error(run_cli("check", "--release", spelling, env=pip_env(tmp_path)), "not a release version")
    assert not (tmp_path / "cache").exists()


# ------------------------------------------------------------ what pip could not do, said as it is


@pytest.mark.release
def test_unreachable_index_is_reported_as_unreachable(tmp_path):
    env = pip_env(tmp_path)
    proc = run_cli("check", "--release", "0.23.0", env=env)
    assert_error(proc, f"the package index {env['PIP_INDEX_URL']}/vllm/ cannot be reached")
    assert "Connection refused" in proc.stderr and "PIP_INDEX_URL" in proc.stderr
    assert "not on the package index" not in proc.stderr
    assert not (tmp_path / "cache" / "releases").exists()


@pytest.mark.slow
@pytest.mark.release
def test_release_missing_from_a_reachable_index_is_reported_as_missing(tmp_path, index):
    server = index()
    proc = run_cli("check", "--release", "0.98.0", env=pip_env(tmp_path, server.url))
    assert_error(proc, "vLLM release 0.98.0 is not on the package index")
    assert server.downloads == []


def test_releases_without_a_reachable_index_or_a_cache_say_why(tmp_path):
    env = pip_env(tmp_path)
    proc = run_cli("releases", "--format", "json", env=env)
    assert_error(proc, f"the package index {env['PIP_INDEX_URL']}/vllm/ cannot be reached")
    assert proc.stderr.rstrip().endswith("; or pass --offline for the releases already in the cache") and proc.stdout == ""


# ------------------------------------------------------------ progress on a terminal


def on_a_terminal(args: list[str], env: dict[str, str]) -> str:
    """What a terminal (a pty made by ``script``) shows while the command runs."""
    command = shlex.join([sys.executable, "-m", "dflash_doctor", *args])
    proc = subprocess.run(["script", "-qec", command, "/dev/null"], env={**env, "COLUMNS": "120"},
                          capture_output=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode in (0, 1, 2), proc.stdout.decode(errors="replace")[-2000:]  # a verdict, not an error
    return proc.stdout.decode("utf-8", "replace")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("script") is None, reason="needs script(1) for a pty")
def test_check_release_shows_the_download_size_and_speed_on_a_terminal(tmp_path, index):
    server = index(seconds=3)
    shown = on_a_terminal(["check", "--release", VERSION], pip_env(tmp_path, server.url))
    assert f"vllm {VERSION}: downloading the wheel" in shown
    assert "/2.5 MB" in shown and "/s" in shown  # size done of the total, and speed
    assert server.downloads == [WHEEL]

    # Piped, nothing but the report (the release is cached now: download it again elsewhere).
    env = pip_env(tmp_path / "piped", server.url)
    proc = run_cli("check", "--release", VERSION, env=env)
    assert "downloading" not in proc.stderr and "MB" not in proc.stderr, proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("script") is None, reason="needs script(1) for a pty")
def test_releases_nests_the_download_bar_under_its_own(tmp_path, index):
    server = index(seconds=3)
    shown = on_a_terminal(["releases", "--from", VERSION, "--to", VERSION], pip_env(tmp_path, server.url))
    assert "0/1" in shown and f"vllm {VERSION}: downloading the wheel" in shown and "/2.5 MB" in shown
    assert "LiveError" not in shown and "Traceback" not in shown
    assert server.downloads == [WHEEL]


# ------------------------------------------------------------ the release cache is not an installation


@pytest.mark.release
def test_patch_of_a_tree_in_the_release_cache_says_what_is_wrong(tmp_path, mini_tree):
    cache = tmp_path / "cache"
    shutil.copytree(mini_tree("0.20.1"), cache / "releases" / "0.20.1")
    env = {**os.environ, "DFLASH_DOCTOR_CACHE": str(cache)}
    for args in (["--dry-run"], ["--yes"]):
        proc = run_cli("patch", "--path", str(cache / "releases" / "0.20.1"), *args, env=env)
        assert_error(proc, f"is in dflash-doctor's read-only release cache ({cache / 'releases'})")
        assert "give --path" not in proc.stderr
