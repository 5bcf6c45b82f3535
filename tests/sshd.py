"""A real OpenSSH server on 127.0.0.1 for the tests, with its own keys; an ssh
target on it, and the processes it runs."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import tiers
from dflash_doctor.rulefile import load_rules
from dflash_doctor.targets.probing import probe_request
from dflash_doctor.targets.ssh import CHILD_BOOT, SshOptions, SshTarget

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


class SshServer:
    """``sshd -D`` with a generated host key accepting one generated user key;
    ``settings``: more sshd_config lines (``MaxStartups 1``)."""

    def __init__(self, workdir: Path, user_key: Path, host_key: Path | None = None, settings: str = "") -> None:
        tiers.require("slow", "starts an OpenSSH server")
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.host_key = host_key or keygen(workdir / "host_key")
        self.log = workdir / "sshd.log"
        authorized = workdir / "authorized_keys"
        authorized.write_text(Path(f"{user_key}.pub").read_text())
        config = workdir / "sshd_config"
        config.write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {self.host_key}\n"
            f"AuthorizedKeysFile {authorized}\nPidFile none\nUsePAM no\nStrictModes no\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n"
            "AllowTcpForwarding yes\nLogLevel DEBUG1\nSubsystem sftp internal-sftp\n" + settings
        )
        Path("/run/sshd").mkdir(exist_ok=True)
        self.process = subprocess.Popen([SSHD, "-D", "-f", str(config), "-E", str(self.log)])
        # Ready when it says so: a probe connection would count in the tests' tallies.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.log.exists() and "Server listening on" in self.log.read_text(errors="replace"):
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"sshd did not start: {self.log.read_text() if self.log.exists() else ''}")

    @property
    def host_public_key_line(self) -> str:
        kind, blob = Path(f"{self.host_key}.pub").read_text().split()[:2]
        return f"[127.0.0.1]:{self.port} {kind} {blob}\n"

    def log_count(self, needle: str) -> int:
        return self.log.read_text(errors="replace").count(needle)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()


def client_env() -> dict:
    """No agent: only the keys a test names."""
    return {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}


def trust(client: dict, *servers: SshServer) -> None:
    """The client of the ``client`` fixture knows these servers' host keys."""
    client["known"].write_text("".join(s.host_public_key_line for s in servers))


def host(srv: SshServer) -> str:
    return f"127.0.0.1:{srv.port}"


def target_for(srv: SshServer, options: SshOptions, python: Path, **changes) -> SshTarget:
    """The target ``python`` on this server, as ``check --host`` makes it."""
    return SshTarget(
        f"127.0.0.1:{srv.port}", replace(options, python=str(python), **changes), probe_request(load_rules())
    )


def descendants(pid: int) -> set[int]:
    """Live processes below ``pid``, read from /proc."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def remote_children(srv: SshServer) -> set[int]:
    """The behaviour children under this sshd: their command line is CHILD_BOOT."""
    found = set()
    for pid in descendants(srv.process.pid):
        try:
            if CHILD_BOOT.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.add(pid)
        except OSError:
            continue
    return found


@contextlib.contextmanager
def loopback_host(work: Path, root: Path) -> Iterator[tuple[SshServer, Path]]:
    """An OpenSSH server on 127.0.0.1 whose ``work/venv`` Python sees the vLLM tree
    ``root`` (a .pth file), and the user key it accepts; the server stops at the end."""
    key = keygen(work / "user")
    server = SshServer(work / "sshd", key)
    try:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(work / "venv")], check=True)
        site = next((work / "venv").glob("lib/python3*/site-packages"))
        (site / "vllm.pth").write_text(f"{root}\n")
        yield server, key
    finally:
        server.stop()
