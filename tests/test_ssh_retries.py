"""Fleets that finish: a server that turns connections away before the SSH
handshake (refused, reset, closed before its banner: OpenSSH past its
``MaxStartups``) is tried again, a bounded number of times, and the report
says how many tries each host took."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import fleet_validator, run_cli
from sshd import SshServer, client_env, keygen

pytestmark = pytest.mark.slow

HOSTS = 3


@pytest.fixture
def client(tmp_path: Path) -> dict:
    """A user key, a HOME that holds nothing else, and a "remote" interpreter
    whose vllm is a package of one empty file (written here)."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    key = keygen(tmp_path / "user")
    tree = tmp_path / "site"
    (tree / "vllm").mkdir(parents=True)
    (tree / "vllm" / "__init__.py").write_text("")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (next(venv.glob("lib/python3*/site-packages")) / "tree.pth").write_text(f"{tree}\n")
    return {
        "key": key,
        "home": home,
        "env": {**client_env(), "HOME": str(home)},
        "args": ["--identity", str(key), "--connect-timeout", "10", "--python", str(venv / "bin" / "python")],
    }


def test_a_fleet_on_a_server_past_its_max_startups_finishes_and_counts_the_tries(tmp_path: Path, client: dict) -> None:
    server = SshServer(tmp_path / "sshd", client["key"], settings="MaxStartups 1\n")
    try:
        (client["home"] / ".ssh" / "known_hosts").write_text(server.host_public_key_line)
        hosts = [a for _ in range(HOSTS) for a in ("--host", f"127.0.0.1:{server.port}")]
        proc = run_cli("check", *client["args"], *hosts, "--jobs", str(HOSTS), "--format", "json", env=client["env"])
        dropped = server.log_count("past MaxStartups")
    finally:
        server.stop()
    fleet = json.loads(proc.stdout)
    assert list(fleet_validator().iter_errors(fleet)) == []
    assert [entry.get("error") for entry in fleet["hosts"]] == [None] * HOSTS, fleet["hosts"]
    tries = [entry["target"]["connect_tries"] for entry in fleet["hosts"]]
    assert dropped >= 1, "sshd turned no connection away: the test proves nothing"
    assert sum(tries) == HOSTS + dropped, (tries, dropped)


def test_a_server_that_always_closes_before_its_banner_is_tried_a_bounded_number_of_times(client: dict) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted = []

    def turn_away() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            accepted.append(connection)
            connection.close()

    threading.Thread(target=turn_away, daemon=True).start()
    try:
        proc = run_cli("check", *client["args"], "--host", f"127.0.0.1:{listener.getsockname()[1]}", env=client["env"])
    finally:
        listener.close()
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    assert "before its SSH banner" in proc.stderr and "(5 tries)" in proc.stderr, proc.stderr
    assert len(accepted) == 5
