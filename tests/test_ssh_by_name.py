"""Over ssh, a module the collector did not send (one the tree's code imports, or
looks up by its name) is asked of the host's collector on the same connection,
and the run goes on: the real 0.34.0 tree is judged by behaviour as ``--path``
judges it. The collector's answers are untrusted: only a module path of the
package is asked for, and only the path asked for is taken from its answer.

Real OpenSSH servers on 127.0.0.1. The host's interpreter is a wrapper that logs
each of its invocations (its first argument: ``-c`` the collector, ``-I`` the
behaviour child) and runs the collector through ``COLLECTOR``, which logs every
path it is asked for and, for the hostile peer, lies in its answers.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import check_json, run_cli
from sshd import SshServer, client_env, keygen

from dflash_doctor.behaviour.by_name import run_by_name
from dflash_doctor.behaviour.program import ProgramBuilder
from dflash_doctor.isolation.session import Call, Outcome
from dflash_doctor.paths import cache_dir
from dflash_doctor.source import SourceError, SourceTree
from dflash_doctor.targets.hosts import SshOptions
from dflash_doctor.targets.probing import MAX_OUTPUT_BYTES
from dflash_doctor.targets.ssh import SshTarget

# The staged collector, run from its own source as ``STAGE_BOOT`` would, with ``more_files``
# wrapped: every list of paths it is asked for is logged, and ``LIE`` may change its answer.
COLLECTOR = """
import json, sys
source = sys.stdin.buffer.read(int(sys.stdin.buffer.readline()))
collector = {"__name__": "collector"}
exec(compile(source, "probe.py", "exec"), collector)
honest = collector.get("more_files")  # a collector that asks nothing more of the host has none

def more_files(root, package, paths, with_bytes):
    with open(LOG, "a") as log:
        log.write(json.dumps(paths) + "\\n")
    answer = honest(root, package, paths, with_bytes)
    LIE
    return answer

if honest is not None:
    collector["more_files"] = more_files
collector["main"](sys.argv)
"""
REGISTRY = """
    import importlib

    _KINDS = {"dflash": "vllm.kinds.dflash.DFlashKind", "gone": "vllm.kinds.nowhere.Kind",
              "climb": "vllm.x/../../outside.SECRET"}


    def resolve(qualname):
        module, name = qualname.rsplit(".", 1)
        return getattr(importlib.import_module(module), name)


    def window(kind):
        return resolve(_KINDS[kind]).window
"""
DFLASH = """
    from vllm.kinds.base import Kind


    class DFlashKind(Kind):
        window = 2048
"""
BASE = """
    class Kind:
        window = 0
"""


class Host:
    """A real sshd whose interpreter sees ``tree``; ``lie``: Python run in the collector's
    ``more_files`` after its honest answer (``paths`` asked, ``answer`` to send)."""

    def __init__(self, work: Path, tree: Path, user: Path, server: SshServer, lie: str) -> None:
        self.work = work
        self.user = user
        self.server = server
        self.log = work / "invocations"
        self.asked = work / "asked"
        for log in (self.log, self.asked):
            log.touch()
        real = work / "venv" / "bin" / "python"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(work / "venv")], check=True)
        (next((work / "venv").glob("lib/python3*/site-packages")) / "tree.pth").write_text(f"{tree}\n")
        collector = work / "collector.py"
        collector.write_text(COLLECTOR.replace("LOG", repr(str(self.asked))).replace("LIE", lie))
        self.python = work / "python"
        self.python.write_text(
            f'#!/bin/sh\nprintf "%s\\n" "$1" >> {self.log}\n'
            f'if [ "$1" = -c ] && [ "$3" = stage ]; then exec {real} -c "$(cat {collector})" "$3" "$4"; fi\n'
            f'exec {real} "$@"\n'
        )
        self.python.chmod(0o755)
        self.known = work / "known_hosts"
        self.known.write_text(self.server.host_public_key_line)
        self.given = f"127.0.0.1:{self.server.port}"
        self.seen = 0

    def options(self) -> SshOptions:
        return SshOptions(
            identity=self.user,
            known_hosts=self.known,
            ssh_config=self.work / "none",
            connect_timeout=5,
            python=str(self.python),
        )

    def args(self) -> list[str]:
        return [
            "--host",
            self.given,
            "--python",
            str(self.python),
            "--identity",
            str(self.user),
            "--known-hosts",
            str(self.known),
            "--ssh-config",
            str(self.work / "none"),
            "--connect-timeout",
            "5",
        ]

    def started(self) -> list[str]:
        lines = self.log.read_text().splitlines()
        new, self.seen = lines[self.seen :], len(lines)
        return new

    def paths_asked(self) -> list[str]:
        return [path for line in self.asked.read_text().splitlines() for path in json.loads(line)]

    def requests(self) -> int:
        """How many times the collector was asked for more files (a round trip each)."""
        return len(self.asked.read_text().splitlines())


def start(work: Path, tree: Path, lie: str = "pass") -> Host:
    user = keygen(work / "user")
    return Host(work, tree, user, SshServer(work / "sshd", user), lie)


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[list[Host]]:
    made: list[Host] = []
    yield made
    for host in made:
        host.server.stop()


def toy_tree(root: Path) -> Path:
    files = {
        "vllm/__init__.py": "",
        "vllm/registry.py": REGISTRY,
        "vllm/kinds/__init__.py": "",
        "vllm/kinds/base.py": BASE,
        "vllm/kinds/dflash.py": DFLASH,
    }
    for relpath, source in files.items():
        (root / relpath).parent.mkdir(parents=True, exist_ok=True)
        (root / relpath).write_text(textwrap.dedent(source))
    (root.parent / "outside.py").write_text("SECRET = 'read outside the tree'\n")
    return root


def windows(tree: SourceTree, run, *kinds: str) -> list[Outcome]:
    """``window(kind)`` for each kind: the registry's code, run by ``run`` with what it looks up by name."""
    builder = ProgramBuilder(tree, ())
    for name in ("window", "resolve", "_KINDS"):
        builder.resolve_name(tree.parsed("vllm/registry.py"), "vllm/registry.py", name)
    calls = [Call(kind, f"window({kind!r})") for kind in kinds]
    outcomes = run_by_name(builder, run, calls, {}, {})
    return [outcomes[call.id] for call in calls]


ONLY_THE_REGISTRY = {"package": "vllm", "files": ["vllm/__init__.py", "vllm/registry.py"], "anchors": []}


@pytest.mark.slow
def test_a_module_looked_up_by_name_that_the_collector_did_not_send_is_asked_of_the_host(
    tmp_path: Path, hosts: list[Host]
) -> None:
    host = start(tmp_path, toy_tree(tmp_path / "site"))
    hosts.append(host)
    target = SshTarget(host.given, host.options(), ONLY_THE_REGISTRY)
    with target.connected():
        resolved = target.resolve()
        assert resolved.behaviour is not None
        with resolved.behaviour() as run:
            found, gone, climb = windows(resolved.tree, run, "dflash", "gone", "climb")
        before = target.bytes_sent
        with pytest.raises(SourceError, match="not collected"):
            resolved.tree.read("vllm/x/../../outside.py")  # no module path: the host is not asked
        assert target.bytes_sent == before
    assert found.ok and found.value == 2048, found  # vllm.kinds.dflash, and its base, came from the host
    assert gone.error_type == "ModuleNotFoundError", gone  # the host said it is not there
    assert climb.error_type == "ModuleNotFoundError" and "read outside" not in str(climb.value), climb
    asked = host.paths_asked()
    assert "vllm/kinds/dflash.py" in asked and "vllm/kinds/base.py" in asked
    assert all(path.startswith("vllm/") and ".." not in path for path in asked), asked


# The hostile host: every answer also carries files it was not asked for (one inside the
# package, one climbing out of it, one absolute), and the base module's bytes are not
# the ones it hashed.
HOSTILE = """
    planted = "window = 666\\n"
    import hashlib
    for where in {"vllm/kinds/base.py", "../../planted.py", MARKER} - set(paths):
        answer["files"][where] = planted
        answer["sha256"][where] = hashlib.sha256(planted.encode()).hexdigest()
    if paths == ["vllm/kinds/dflash.py"] and with_bytes:
        answer["files"]["vllm/kinds/dflash.py"] = answer["files"]["vllm/kinds/dflash.py"].replace("2048", "4096")
"""


@pytest.mark.slow
def test_a_hostile_hosts_answers_are_taken_only_for_the_path_asked_and_checked(
    tmp_path: Path, hosts: list[Host]
) -> None:
    marker = tmp_path / "marker.py"
    host = start(
        tmp_path,
        toy_tree(tmp_path / "site"),
        textwrap.indent(textwrap.dedent(HOSTILE).replace("MARKER", repr(str(marker))), "    "),
    )
    hosts.append(host)
    target = SshTarget(host.given, host.options(), ONLY_THE_REGISTRY)
    with target.connected():
        tree = target.resolve().tree
        assert tree.data("vllm/kinds/__init__.py") == b""  # its answer planted base.py: not taken
        own = (tmp_path / "site" / "vllm" / "kinds" / "base.py").read_bytes()
        assert tree.data("vllm/kinds/base.py") == own  # asked for itself: the host's own bytes
        with pytest.raises(SourceError, match="damaged"):
            tree.data("vllm/kinds/dflash.py")  # bytes that are not the ones hashed
        for planted in ("../../planted.py", str(marker)):  # never taken, never asked for
            assert "not collected" in tree.state(planted)
    assert host.paths_asked() == ["vllm/kinds/__init__.py", "vllm/kinds/base.py", "vllm/kinds/dflash.py"]
    assert not marker.exists() and not (tmp_path / "planted.py").exists()
    assert not list(tmp_path.parent.glob("planted.py"))


# The hostile host: 40 MiB of output that is no answer.
FLOOD = "sys.stdout.write('y' * (40 * 1024 * 1024)); sys.stdout.flush()"


@pytest.mark.slow
def test_a_host_flooding_its_answer_is_cut_off_at_the_cap(tmp_path: Path, hosts: list[Host]) -> None:
    host = start(tmp_path, toy_tree(tmp_path / "site"), FLOOD)
    hosts.append(host)
    target = SshTarget(host.given, host.options(), ONLY_THE_REGISTRY)
    with target.connected():
        resolved = target.resolve()
        started = time.monotonic()
        with pytest.raises(SourceError, match=r"could not be fetched from the host: .* printed more than 32 MiB"):
            resolved.tree.read("vllm/kinds/base.py")
        took = time.monotonic() - started
        before = dict(resolved.info.details)["bytes_received"]
        fetched = dict(target.counted(resolved.info).details)["bytes_received"] - before
    print(f"flood: cut off after {took:.2f} s and {fetched} bytes")
    assert MAX_OUTPUT_BYTES < fetched < MAX_OUTPUT_BYTES + (1 << 20)  # read up to the cap, and no further


@pytest.mark.release
@pytest.mark.slow
def test_0_34_0_over_ssh_is_judged_by_behaviour_as_on_this_machine(tmp_path: Path, release, hosts: list[Host]) -> None:
    """All three fixes present, decided by behaviour, as ``--path`` on the same tree;
    a second check is answered from the results cache, the same, with only the collector run."""
    tree = release("0.34.0")
    host = start(tmp_path, tree)
    hosts.append(host)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "transformers").symlink_to(cache_dir() / "transformers")  # the transformers 0.34.0 requires, fetched once
    env = {**client_env(), "HOME": str(tmp_path), "DFLASH_DOCTOR_CACHE": str(cache)}
    env.pop("DFLASH_DOCTOR_NO_CACHE", None)
    code, first = check_json(*host.args(), env=env)
    assert "-I" in host.started()  # behaviour ran on the host
    fixes = {fix["id"]: (fix["status"], fix["decided_by"]) for fix in first["fixes"]}
    assert fixes == {fix: ("present", "behaviour") for fix in ("layer-offset", "swa-config", "cache-drop")}, first[
        "fixes"
    ]
    assert code == 0
    asked = host.paths_asked()
    assert "vllm/v1/worker/gpu/spec_decode/speculator_config.py" in asked  # imported by the drafter's config, not sent
    local_code, local = check_json("--path", str(tree))
    assert (local_code, local["fixes"]) == (code, first["fixes"])
    before = host.requests()
    again, second = check_json(*host.args(), env=env)
    assert host.started() == ["-c"]  # the results cache answered: no behaviour child on the host
    assert host.requests() - before == 1  # the digests of every file the hit compares, in one round trip
    assert (again, second["fixes"], second["summary"]) == (code, first["fixes"], first["summary"])
    assert second["target"]["bytes_received"] < first["target"]["bytes_received"] / 4


@pytest.mark.release
@pytest.mark.slow
def test_0_34_0_from_a_probe_file_stays_unknown_and_says_what_judges_it(tmp_path: Path, release) -> None:
    """A probe file has no host to ask for the modules the code imports: structure alone
    leaves swa-config unknown, and the reason points at --host and --path."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (next(venv.glob("lib/python3*/site-packages")) / "tree.pth").write_text(f"{release('0.34.0')}\n")
    (tmp_path / "probe.py").write_text(run_cli("probe-script").stdout)
    answer = subprocess.run(
        [str(venv / "bin" / "python"), str(tmp_path / "probe.py")],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    (tmp_path / "node.probe").write_text(answer)
    code, report = check_json("--from-probe", str(tmp_path / "node.probe"))
    swa = next(fix for fix in report["fixes"] if fix["id"] == "swa-config")
    assert (code, swa["status"], swa["decided_by"]) == (2, "unknown", "structure"), swa
    assert "as --host asks the host and --path reads the tree" in swa["reason"], swa["reason"]
    assert "check --host" in swa["remedy"] and "check --path" in swa["remedy"], swa["remedy"]
