"""The results cache answers ssh checks: an unchanged host is answered from
the host's digests alone, with no behaviour child started there.

Real OpenSSH servers on 127.0.0.1; the host's interpreter is a wrapper that
writes each of its invocations (its first argument) to a log before running
the real one, so what ran on the host is seen on the host: ``-c`` is the
collector, ``-I`` the behaviour child (``env -i python -I -S -c CHILD_BOOT``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import RESOLVERS, SHIFT, make_venv, run_cli, statuses
from sshd import SshServer, client_env, keygen

pytestmark = [pytest.mark.release, pytest.mark.slow]

CHILD = "-I"  # the behaviour child's first argument
COLLECTOR = "-c"  # the staged collector's


class Host:
    """One sshd and the tree its interpreter sees; ``check`` runs `check --host` with
    the results cache in ``cache`` (or off), ``started()`` is what ran there since the last call."""

    def __init__(self, tmp_path: Path, tree: Path, user: Path, servers: int = 1) -> None:
        self.tree = tree
        self.servers = [SshServer(tmp_path / f"sshd{i}", user) for i in range(servers)]
        self.log = tmp_path / "invocations"
        self.log.touch()
        self.seen = 0
        real = make_venv(tmp_path / "venv", tree)
        self.python = tmp_path / "python"
        self.python.write_text(f'#!/bin/sh\nprintf "%s\\n" "$1" >> {self.log}\nexec {real} "$@"\n')
        self.python.chmod(0o755)
        known = tmp_path / "known_hosts"
        known.write_text("".join(s.host_public_key_line for s in self.servers))
        self.args = [
            "--python",
            str(self.python),
            "--identity",
            str(user),
            "--known-hosts",
            str(known),
            "--ssh-config",
            str(tmp_path / "no-config"),
            "--connect-timeout",
            "5",
            "--format",
            "json",
        ]
        self.env = {**client_env(), "HOME": str(tmp_path), "DFLASH_DOCTOR_CACHE": str(tmp_path / "cache")}
        self.env.pop("DFLASH_DOCTOR_NO_CACHE", None)

    def check(self, *, cache: bool = True, fleet: bool = False) -> tuple[int, dict]:
        env = self.env if cache else {**self.env, "DFLASH_DOCTOR_NO_CACHE": "1"}
        hosts = [a for s in (self.servers if fleet else self.servers[:1]) for a in ("--host", f"127.0.0.1:{s.port}")]
        proc = run_cli("check", *hosts, *self.args, env=env)
        assert proc.stdout, proc.stderr
        return proc.returncode, json.loads(proc.stdout)

    def started(self) -> list[str]:
        lines = self.log.read_text().splitlines()
        new, self.seen = lines[self.seen :], len(lines)
        return new

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


@pytest.fixture
def host(tmp_path: Path, mini_tree: Callable[..., Path]) -> Iterator[Host]:
    made = Host(tmp_path, mini_tree("0.33.0"), keygen(tmp_path / "user"))
    yield made
    made.stop()


def verdicts(report: dict) -> tuple:
    """What a check says about the tree (the target's byte counts differ from run to run)."""
    return report["fixes"], report["engine"], report["summary"]


def test_the_second_check_of_an_unchanged_host_starts_nothing_but_the_collector(host: Host) -> None:
    code, first = host.check()
    assert CHILD in host.started()  # the first check ran behaviour on the host
    again, second = host.check()
    assert host.started() == [COLLECTOR]  # the second: only the collector, no behaviour child
    assert (again, verdicts(second)) == (code, verdicts(first))
    assert second["target"]["behaviour"] == first["target"]["behaviour"]  # as a local hit: the report is the same
    # The bytes of the files stayed on the host: the digests alone came back.
    assert second["target"]["bytes_received"] < first["target"]["bytes_received"] / 4


def test_a_one_byte_edit_on_the_host_with_the_mtime_put_back_is_seen(host: Host) -> None:
    assert host.check()[0] == 0
    resolver = host.tree / RESOLVERS[0]
    before = resolver.stat()
    text = resolver.read_text()
    assert SHIFT in text
    resolver.write_text(text.replace(SHIFT, SHIFT.replace("i + 1", "i - 1"), 1))
    os.utime(resolver, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert resolver.stat().st_size == before.st_size and resolver.stat().st_mtime_ns == before.st_mtime_ns
    host.started()
    code, cached = host.check()
    assert CHILD in host.started()  # a miss: behaviour ran again on the host
    assert statuses(cached)["layer-offset"] != "present"
    fresh_code, fresh = host.check(cache=False)
    assert (code, verdicts(cached)) == (fresh_code, verdicts(fresh))
    host.started()
    again, kept = host.check()
    assert (again, verdicts(kept)) == (code, verdicts(cached)) and host.started() == [
        COLLECTOR
    ]  # the edited tree's answer is kept


def test_a_file_deleted_on_the_host_is_seen(host: Host) -> None:
    assert host.check()[0] == 0
    (host.tree / RESOLVERS[1]).unlink()
    host.started()
    code, cached = host.check()
    assert CHILD in host.started()
    fresh_code, fresh = host.check(cache=False)
    assert (code, verdicts(cached)) == (fresh_code, verdicts(fresh))
    assert statuses(cached) != {fix: "present" for fix in statuses(cached)}
    host.started()
    again, kept = host.check()
    assert (again, verdicts(kept)) == (code, verdicts(cached)) and host.started() == [COLLECTOR]


def test_a_fleet_of_hosts_with_the_same_files_starts_one_behaviour_child(
    tmp_path: Path, mini_tree: Callable[..., Path]
) -> None:
    fleet = Host(tmp_path, mini_tree("0.33.0"), keygen(tmp_path / "user"), servers=4)
    try:
        code, document = fleet.check(fleet=True)
        started = fleet.started()
        assert started.count(COLLECTOR) == 4 and started.count(CHILD) == 1, started
        assert code == 0 and len(document["hosts"]) == 4
        answers = [verdicts(entry) for entry in document["hosts"]]
        assert all(answer == answers[0] for answer in answers)
        assert {entry["target"]["host"] for entry in document["hosts"]} == {
            f"127.0.0.1:{s.port}" for s in fleet.servers
        }
    finally:
        fleet.stop()


@pytest.mark.parametrize("command, answered", [("true", True), ("false", False)])
def test_an_ssh_config_match_exec_still_runs_its_command(
    host: Host, tmp_path: Path, command: str, answered: bool
) -> None:
    """paramiko is imported without ``invoke`` (a tenth of a cached check) only when the
    ssh config has no ``Match exec``: with one, its command still decides."""
    config = tmp_path / "exec-config"
    config.write_text(f'Match exec "{command}"\n  HostName 127.0.0.1\n  Port {host.servers[0].port}\n')
    args = [*host.args[: host.args.index("--ssh-config")], "--ssh-config", str(config), "--connect-timeout", "5"]
    proc = run_cli("check", "--host", "gpu", *args, "--format", "json", env=host.env)
    if answered:
        assert proc.stdout, proc.stderr
        assert json.loads(proc.stdout)["target"]["host"] == "gpu"
    else:
        assert proc.returncode == 3 and "gpu" in proc.stderr and "Traceback" not in proc.stderr
