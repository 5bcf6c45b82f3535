"""Behaviour over ssh: the tree's code runs on the host, behind the host's lockdown.

The "host" is a real sshd on 127.0.0.1, so a file the remote child manages to
create would appear on this disk too: a missing marker proves the remote
boundary held, and the child's ancestry (a descendant of that sshd, not of this
process) proves where the code ran.
"""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import pytest
from escapes import WALK  # the frame walk a hostile tree uses to reach the real builtins
from sshd import SshServer, remote_children, target_for

from dflash_doctor.behaviour.definitions import Locator
from dflash_doctor.behaviour.program import ProgramBuilder
from dflash_doctor.isolation.sandbox import Call, Outcome, SandboxError
from dflash_doctor.targets.channel import behaviour_lifetime
from dflash_doctor.targets.ssh import SshTarget
from dflash_doctor.targets.probing import probe_request
from dflash_doctor.rulefile import load_rules
from dflash_doctor.source import DirectoryTree

pytestmark = [pytest.mark.release, pytest.mark.slow]


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


def run_remote(target: SshTarget, tmp_path: Path, source: str, *exprs: str) -> dict[str, Outcome]:
    chunks, globals_ = program_for(tmp_path, source)
    with target.connected():
        resolved = target.resolve()
        assert resolved.info.details[2] == ("behaviour", f"runs on {target.given}")
        with resolved.behaviour() as run:
            return run(chunks, [Call(f"c{i}", expr) for i, expr in enumerate(exprs)], {}, globals_)


def test_a_checks_requests_share_one_channel_and_each_check_has_its_own_child(host, remote_python, tmp_path):
    srv, options = host
    target = target_for(srv, options, remote_python)
    before, seen = srv.log_count("request exec"), set()
    with target.connected():
        for check in range(2):  # as ``patch`` does: check, write, check again on the one connection
            resolved = target.resolve()
            with resolved.behaviour() as run:
                answers = [run([], [Call("x", "0")], {}, {})["x"].value]
                children = remote_children(srv) - seen
                answers += [run([], [Call("x", f"{n} * 7")], {}, {})["x"].value for n in range(1, 3)]
                assert answers == [0, 7, 14]
                assert children and remote_children(srv) - seen == children  # the same processes answered all three
                seen |= children
            assert srv.log_count("request exec") - before == 2 * (check + 1)  # the probe, one session
    assert srv.log_count("request exec") - before == 4


def test_behaviour_outside_a_connection_is_structure_only(host, remote_python):
    srv, options = host
    resolved = target_for(srv, options, remote_python).resolve()
    assert resolved.behaviour is None and "never run on this one" in resolved.no_behaviour


def test_the_code_runs_with_nothing_inherited_from_the_hosts_session(host, remote_python, tmp_path):
    srv, options = host
    # The ssh session on the host has SSH_CONNECTION, HOME, PATH...: the child gets none of them, as locally.
    source = """
def environment():
    return dict(_module("os").environ)
"""
    outcomes = run_remote(target_for(srv, options, remote_python), tmp_path, source, "environment()")
    # (LC_CTYPE: Python's own C-locale coercion, PEP 538, as in a local child.)
    assert outcomes["c0"].ok and set(outcomes["c0"].value) <= {"LC_CTYPE"}


def test_hostile_tree_cannot_create_a_marker_from_the_host(host, remote_python, tmp_path):
    srv, options = host
    marker = tmp_path / "escaped"
    source = f"""
def resolve_layers():
    os = _module("os")
    os.close(os.open({str(marker)!r}, os.O_CREAT | os.O_WRONLY, 0o644))
    return "escaped"
"""
    try:
        outcome = run_remote(target_for(srv, options, remote_python), tmp_path, source, "resolve_layers()")["c0"]
    except SandboxError as exc:  # the host's filter killed the child (SIGSYS)
        assert "SIGSYS" in str(exc)
    else:  # or refused the open with an error
        assert not outcome.ok and outcome.error_type == "PermissionError", outcome
    assert not marker.exists()


def test_the_remote_child_is_gone_after_the_client_gives_up(host, remote_python, tmp_path):
    srv, options = host
    target = target_for(srv, options, remote_python, probe_timeout=3.0)
    source = """
def spin():
    while True:
        pass
"""
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
        run_remote(target, tmp_path, source, *["spin()"] * 8)  # 8 calls x 2 s each: far past the 3 s deadline
    except SandboxError as exc:
        failure.append(str(exc))
    gave_up = time.monotonic() - started
    watcher.join()
    assert failure and "did not finish within 3 s" in failure[0] and gave_up < 9
    assert seen, "the behaviour child never ran under the host's sshd"  # where the code ran: on the host
    # The host's timeout -k ends them: TERM at the end of the child's lifetime (the 3 s collection, 3 s for
    # the answered requests and the failing one's 3 s, + 1 s), KILL 5 s later; or the CPU limit first.
    # (Polled by pid: once the session closes, sshd is no longer their ancestor.)
    deadline = started + behaviour_lifetime(3.0, 3.0) + 1 + 5
    while any(Path(f"/proc/{pid}").exists() for pid in seen) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in seen if Path(f"/proc/{pid}").exists()]


IGNORES_TERM = """
def ignores_term():
    signal = _module("signal")
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return 1
"""


@pytest.mark.parametrize("ignores_term", [False, True], ids=["ended-by-TERM", "killed-after-TERM"])
def test_a_child_the_hosts_timeout_ended_is_said_so_not_a_crash_or_a_memory_kill(
    host, remote_python, tmp_path, ignores_term
):
    # Held idle past its lifetime (a long structure pass between two requests): the host's ``timeout``
    # ends it with TERM (exit 124) or, when the tree code made it ignore TERM, KILL 5 s later (128 + 9).
    srv, options = host
    target = target_for(srv, options, remote_python, probe_timeout=1.0)
    chunks, globals_ = program_for(tmp_path, IGNORES_TERM)
    lifetime = math.ceil(behaviour_lifetime(1.0, 1.0)) + 1
    with target.connected():
        started = time.monotonic()
        with target.resolve().behaviour() as run:
            if ignores_term:
                assert run(chunks, [Call("x", "ignores_term()")], {}, globals_)["x"].value == 1
            time.sleep(lifetime + (6 if ignores_term else 1) - (time.monotonic() - started))
            with pytest.raises(SandboxError) as raised:
                run([], [Call("x", "6 * 7")], {}, {})
    assert str(raised.value) == (
        f"the host's timeout (--probe-timeout) ended the behaviour child on {target.given} "
        f"at the end of its {lifetime} s lifetime"
    )


def test_a_host_without_the_lockdown_gives_unknown_with_the_reason(host, remote_python, tmp_path):
    """An interpreter that answers the probe but cannot put up the boundary: a
    SandboxError, as a local child that fails would give."""
    srv, options = host
    wrapper = tmp_path / "python"
    wrapper.write_text(
        f'#!/bin/sh\nif [ "$1" = "-I" ]; then echo "lockdown: not Linux" >&2; exit 3; fi\nexec {remote_python} "$@"\n'
    )
    wrapper.chmod(0o755)
    with pytest.raises(SandboxError, match=r"exit 3\): lockdown: not Linux"):
        run_remote(target_for(srv, options, wrapper), tmp_path, "def f():\n    return 1\n", "f()")


def test_behaviour_after_the_connection_closed_is_refused(host, remote_python, tmp_path):
    srv, options = host
    target = target_for(srv, options, remote_python)
    with target.connected():
        behaviour = target.resolve().behaviour
    with behaviour() as run, pytest.raises(SandboxError, match="is closed"):
        run([], [], {}, {})


def test_no_connection_or_thread_outlives_the_check_through_a_jump_host(host, remote_python, tmp_path):
    srv, options = host
    jump = SshServer(tmp_path / "jump", options.identity)
    try:
        known = options.known_hosts
        known.write_text(srv.host_public_key_line + jump.host_public_key_line)
        config = tmp_path / "ssh_config"
        config.write_text(f"Host gpu\n  HostName 127.0.0.1\n  Port {srv.port}\n  ProxyJump 127.0.0.1:{jump.port}\n")
        from dataclasses import replace

        target = SshTarget(
            "gpu", replace(options, python=str(remote_python), ssh_config=config), probe_request(load_rules())
        )
        before = threading.active_count()
        with target.connected():
            resolved = target.resolve()
            assert threading.active_count() == before + 2  # the target's transport and the jump host's
            with resolved.behaviour() as run:
                assert run([], [Call("x", "6 * 7")], {}, {})["x"].value == 42
        deadline = time.monotonic() + 5
        while threading.active_count() > before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert threading.active_count() == before
        assert jump.log_count("request exec") == 0 and srv.log_count("request exec") == 2
    finally:
        jump.stop()
