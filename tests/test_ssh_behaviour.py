"""Behaviour over ssh: the tree's code runs on the host, behind the host's lockdown.

The "host" is a real sshd on 127.0.0.1, so a file the remote child manages to
create would appear on this disk too: a missing marker proves the remote
boundary held, and the child's ancestry (a descendant of that sshd, not of this
process) proves where the code ran.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from sshd import SshServer, keygen

from dflash_doctor.behaviour.definitions import Locator
from dflash_doctor.behaviour.program import ProgramBuilder
from dflash_doctor.draft.sandbox import Call, Outcome, SandboxError
from dflash_doctor.targets.ssh import CHILD_BOOT, SshOptions, SshTarget
from dflash_doctor.targets.probing import probe_request
from dflash_doctor.rules import load_rules
from dflash_doctor.source import DirectoryTree
from test_isolation import WALK  # the frame walk a hostile tree uses to reach the real builtins


@pytest.fixture(scope="module")
def remote_python(tmp_path_factory, release) -> Path:
    from test_ssh import make_venv

    return make_venv(tmp_path_factory.mktemp("remote") / "venv", release("0.33.0"))


@pytest.fixture
def host(tmp_path):
    user = keygen(tmp_path / "user")
    srv = SshServer(tmp_path / "sshd", user)
    known = tmp_path / "known_hosts"
    known.write_text(srv.host_public_key_line)
    yield srv, SshOptions(identity=user, known_hosts=known, ssh_config=tmp_path / "none", connect_timeout=5)
    srv.stop()


def program_for(tmp_path: Path, source: str):
    """The behaviour program for the function ``source`` defines, from a tree file holding WALK and it."""
    name = source.split("def ", 1)[1].split("(", 1)[0]
    root = tmp_path / "tree"
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "probed.py").write_text(WALK + source)
    tree = DirectoryTree(root, None)
    builder = ProgramBuilder(tree, ())
    builder.function(Locator(tree, [("vllm/probed.py", name)]).one("vllm/probed.py", name))
    return builder.chunks, {gap: {"$gap": label} for gap, label in builder.gaps.items()}


def target_for(srv: SshServer, options: SshOptions, python: Path, **changes) -> SshTarget:
    from dataclasses import replace

    return SshTarget(f"127.0.0.1:{srv.port}", replace(options, python=str(python), **changes), probe_request(load_rules()))


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


def run_remote(target: SshTarget, tmp_path: Path, source: str, *exprs: str) -> dict[str, Outcome]:
    chunks, globals_ = program_for(tmp_path, source)
    with target.connected():
        resolved = target.resolve()
        assert resolved.info.details[2] == ("behaviour", f"runs on {target.given}")
        return resolved.behaviour(chunks, [Call(f"c{i}", expr) for i, expr in enumerate(exprs)], {}, globals_)


def test_behaviour_outside_a_connection_is_structure_only(host, remote_python):
    srv, options = host
    resolved = target_for(srv, options, remote_python).resolve()
    assert resolved.behaviour is None and "never run on this one" in resolved.no_behaviour


def test_the_code_runs_with_nothing_inherited_from_the_hosts_session(host, remote_python, tmp_path):
    srv, options = host
    # The ssh session on the host has SSH_CONNECTION, HOME, PATH...: the child gets none of them, as locally.
    source = '''
def environment():
    return dict(_module("os").environ)
'''
    outcomes = run_remote(target_for(srv, options, remote_python), tmp_path, source, "environment()")
    # (LC_CTYPE: Python's own C-locale coercion, PEP 538, as in a local child.)
    assert outcomes["c0"].ok and set(outcomes["c0"].value) <= {"LC_CTYPE"}


def test_hostile_tree_cannot_create_a_marker_from_the_host(host, remote_python, tmp_path):
    srv, options = host
    marker = tmp_path / "escaped"
    source = f'''
def resolve_layers():
    os = _module("os")
    os.close(os.open({str(marker)!r}, os.O_CREAT | os.O_WRONLY, 0o644))
    return "escaped"
'''
    try:
        outcome = run_remote(target_for(srv, options, remote_python), tmp_path, source, "resolve_layers()")["c0"]
    except SandboxError as exc:  # the host's filter killed the child (SIGSYS)
        assert "SIGSYS" in str(exc)
    else:  # or refused the open with an error
        assert not outcome.ok and outcome.error_type == "PermissionError", outcome
    assert not marker.exists()


def test_the_remote_child_is_gone_after_the_client_gives_up(host, remote_python, tmp_path):
    srv, options = host
    target = target_for(srv, options, remote_python, probe_timeout=2.0)
    source = '''
def spin():
    while True:
        pass
'''
    seen, failure = [], []

    def watch():
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not seen:
            seen.extend(remote_children(srv))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    started = time.monotonic()
    try:
        run_remote(target, tmp_path, source, *["spin()"] * 8)  # 8 calls x 2 s each: far past the 2 s deadline
    except SandboxError as exc:
        failure.append(str(exc))
    gave_up = time.monotonic() - started
    watcher.join()
    assert failure and "did not finish within 2 s" in failure[0] and gave_up < 8
    assert seen, "the behaviour child never ran under the host's sshd"  # where the code ran: on the host
    # The host's timeout -k ends them: TERM 3 s after the start, KILL 5 s later. (Polled by pid: once the
    # session closes, sshd is no longer their ancestor.)
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in seen) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in seen if Path(f"/proc/{pid}").exists()]


def test_a_host_without_the_lockdown_gives_unknown_with_the_reason(host, remote_python, tmp_path):
    """An interpreter that answers the probe but cannot put up the boundary: a
    SandboxError, as a local child that fails would give."""
    srv, options = host
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nif [ "$1" = "-I" ]; then echo "lockdown: not Linux" >&2; exit 3; fi\n'
                       f'exec {remote_python} "$@"\n')
    wrapper.chmod(0o755)
    with pytest.raises(SandboxError, match=r"exit 3\): lockdown: not Linux"):
        run_remote(target_for(srv, options, wrapper), tmp_path, "def f():\n    return 1\n", "f()")


def test_behaviour_after_the_connection_closed_is_refused(host, remote_python, tmp_path):
    srv, options = host
    target = target_for(srv, options, remote_python)
    with target.connected():
        behaviour = target.resolve().behaviour
    with pytest.raises(SandboxError, match="is closed"):
        behaviour([], [], {}, {})


def test_no_connection_or_thread_outlives_the_check_through_a_jump_host(host, remote_python, tmp_path):
    srv, options = host
    jump = SshServer(tmp_path / "jump", options.identity)
    try:
        known = options.known_hosts
        known.write_text(srv.host_public_key_line + jump.host_public_key_line)
        config = tmp_path / "ssh_config"
        config.write_text(f"Host gpu\n  HostName 127.0.0.1\n  Port {srv.port}\n  ProxyJump 127.0.0.1:{jump.port}\n")
        from dataclasses import replace

        target = SshTarget("gpu", replace(options, python=str(remote_python), ssh_config=config), probe_request(load_rules()))
        before = threading.active_count()
        with target.connected():
            resolved = target.resolve()
            assert threading.active_count() == before + 2  # the target's transport and the jump host's
            assert resolved.behaviour([], [Call("x", "6 * 7")], {}, {})["x"].value == 42
        deadline = time.monotonic() + 5
        while threading.active_count() > before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert threading.active_count() == before
        assert jump.log_count("request exec") == 0 and srv.log_count("request exec") == 2
    finally:
        jump.stop()
