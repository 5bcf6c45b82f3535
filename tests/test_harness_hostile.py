"""A tree written to deceive the check: it looks for the harness, or stalls it.

Such a tree answers one way where it sees it is being checked and another in
vLLM, or makes every check slow while its verdicts stay the same. The built-ins
the child serves must look like the real ones to the tree's code, and each step's
deadline must hold from outside the child, whatever the tree does to the child's
own timer (block it, ignore it, or run C code that never lets it fire).
"""

from __future__ import annotations

import builtins
import os
import textwrap
import time
from pathlib import Path

import pytest
from conftest import check_json
from escapes import hostile_tree, my_children, program_for, session_for
from sshd import remote_children, target_for

from dflash_doctor.standalone.harness import SAFE_BUILTIN_NAMES
from dflash_doctor.isolation.sandbox import Call, Chunk, SandboxError, run
from dflash_doctor.isolation.session import CALL_GRACE_S, CALL_TIMEOUT_S

# What a tree can look at about a built-in: its text, its names and module, its type's.
SURFACE = ("__name__", "__qualname__", "__module__")


def surface_of(value) -> list[str]:
    return [
        repr(value),
        str(value),
        *(getattr(value, name) for name in SURFACE),
        *(getattr(type(value), name) for name in SURFACE),
    ]


def test_every_exposed_builtin_presents_itself_as_the_real_one(tmp_path):
    # The tree's own frame holds its built-ins; the real ``type`` and ``getattr`` come from the frame walk.
    chunks, globals_ = program_for(
        tmp_path,
        """
        def surface():
            box = []

            def mine():
                yield box[0].gi_frame.f_back.f_builtins

            box.append(mine())
            exposed = next(box[0])
            get, kind = _real("getattr"), _real("type")
            seen = {}
            for name in exposed:
                value = exposed[name]
                named = [get(value, "_" + "_" + attr + "__") for attr in ("name", "qualname", "module")]
                typed = [get(kind(value), "_" + "_" + attr + "__") for attr in ("name", "qualname", "module")]
                seen[name] = [repr(value), str(value)] + named + typed
            return seen
    """,
    )
    seen = run(chunks, [Call("x", "surface()")], {}, globals_)["x"].value
    assert sorted(seen) == sorted([*SAFE_BUILTIN_NAMES, "__import__", "__build_class__"])
    for name, found in seen.items():
        assert found == surface_of(getattr(builtins, name)), name


# A tree that behaves only where it is being checked: it looks at its built-ins
# (no frame walk, no dunder but __name__: code the sandbox copies as it is).
DECEIVES = """
def observations():
    seen = [repr(getattr), str(hasattr), "%s" % setattr, f"{getattr!r}",
            getattr.__name__, hasattr.__name__, setattr.__name__, hasattr(getattr, "fetch")]
    for attempt in (lambda: getattr(1), lambda: getattr(1, "a", 2, 3), lambda: hasattr(1),
                    lambda: setattr(getattr, "note", 1), lambda: getattr(hasattr, "note"),
                    lambda: getattr([], "nothing")):
        try:
            seen.append(repr(attempt()))
        except TypeError as exc:
            seen.append("TypeError: " + str(exc))
        except AttributeError as exc:
            seen.append("AttributeError: " + str(exc))
    return seen


def aux_layer_ids(target_layer_ids):
    if observations()[:5] != ["<built-in function getattr>", "<built-in function hasattr>",
                              "<built-in function setattr>", "<built-in function getattr>", "getattr"]:
        return [i + 1 for i in target_layer_ids]  # the fixed answer, for the check's eyes only
    return list(target_layer_ids)  # what vLLM runs
"""


def test_a_tree_that_looks_for_the_harness_answers_as_it_would_outside(tmp_path):
    outside: dict = {}
    exec(DECEIVES, outside)  # noqa: S102 - our own snippet, run as vLLM would run it
    chunks, globals_ = program_for(tmp_path, DECEIVES)
    inside = run(chunks, [Call("seen", "observations()"), Call("ids", "aux_layer_ids([1, 8, 15])")], {}, globals_)
    assert inside["ids"].value == outside["aux_layer_ids"]([1, 8, 15]) == [1, 8, 15]
    assert inside["seen"].value == outside["observations"]()


# -- the deadline holds from outside -----------------------------------------------------------

FOREVER = """
lock = _module("_thread").allocate_lock()
lock.acquire()
lock.acquire()  # forever, and without using CPU
"""
# How a call can keep the child's own timer from ending it.
STALLS = {
    "timer-blocked": 'signals = _module("signal")\nsignals.pthread_sigmask(signals.SIG_BLOCK, [signals.SIGALRM])'
    + FOREVER,
    "timer-ignored": 'signals = _module("signal")\nsignals.signal(signals.SIGALRM, signals.SIG_IGN)' + FOREVER,
    # With its outputs closed, the parent waits for its exit instead: by the same deadline.
    "outputs-closed": 'os, signals = _module("os"), _module("signal")\nos.close(1)\nos.close(2)\n'
    "signals.pthread_sigmask(signals.SIG_BLOCK, [signals.SIGALRM])" + FOREVER,
    # No escape at all: C code that never returns to the interpreter, where the timer's handler would run.
    "c-loop": "sum(range(10 ** 12))",
}


def stalling(body: str) -> str:
    return "def stalls():\n" + textwrap.indent(body, "    ") + "\n    return 1\n"


BOUND_S = CALL_TIMEOUT_S + CALL_GRACE_S + 2  # the step's deadline, its grace, and a margin for a loaded machine


@pytest.mark.slow  # each waits out the child's deadline
@pytest.mark.parametrize("stall", list(STALLS))
def test_a_call_that_defeats_the_childs_timer_is_stopped_at_its_deadline(tmp_path, stall):
    chunks, globals_ = program_for(tmp_path, stalling(STALLS[stall]))
    child = session_for()
    started = time.monotonic()
    try:
        with pytest.raises(SandboxError) as raised:
            child.run(chunks, [Call("first", "6 * 7"), Call("x", "stalls()")], {}, globals_)
        took = time.monotonic() - started
        assert str(raised.value) == "the call x ran past its 2 s deadline: the behaviour child was stopped"
        assert my_children() == []  # its whole process group, killed at the deadline
        with pytest.raises(
            SandboxError,
            match="^the behaviour child stopped at an earlier request of this check: "
            "the call x ran past its 2 s deadline",
        ):
            child.run([], [Call("y", "6 * 7")], {}, {})
    finally:
        child.close()
    assert took < BOUND_S, took


@pytest.mark.slow  # waits out the child's deadline
def test_a_definition_that_defeats_the_childs_timer_is_stopped_at_its_deadline():
    started = time.monotonic()
    with pytest.raises(SandboxError, match="^defining _X ran past its 2 s deadline"):
        run([Chunk("_X", "_X = sum(range(10 ** 12))")], [Call("x", "_X")], {}, {})
    assert time.monotonic() - started < BOUND_S


@pytest.mark.slow  # waits out the session's 6 s budget
def test_a_call_that_stalls_within_its_deadline_each_time_cannot_stretch_the_check(tmp_path):
    # Each call answers, just inside the parent's step deadline: the check's one budget ends the session.
    chunks, globals_ = program_for(
        tmp_path,
        f"""
        def slow():
            signals = _module("signal")
            signals.pthread_sigmask(signals.SIG_BLOCK, [signals.SIGALRM])
            lock = _module("_thread").allocate_lock()
            lock.acquire()
            lock.acquire(True, {CALL_TIMEOUT_S + CALL_GRACE_S - 0.5})
            return 1
    """,
    )
    child = session_for(wall_s=6)
    started = time.monotonic()
    try:
        answered = child.run(chunks, [Call("x", "slow()")], {}, globals_)
        assert answered["x"].value == 1  # the timer it blocked did not end it: only the parent's deadline can
        with pytest.raises(SandboxError, match="^the behaviour child did not finish within 6 s"):
            for _ in range(3):  # each request alone would fit in 6 s
                child.run(chunks, [Call("a", "slow()"), Call("b", "slow()")], {}, globals_)
    finally:
        child.close()
    assert time.monotonic() - started < 6 + 2


@pytest.mark.release
def test_cli_a_tree_that_blocks_the_childs_timer_cannot_stall_the_check(mini_tree, release):
    # Before the parent held each step's deadline, this tree ran every request of the check to its 20 s
    # deadline; a tree that stops just short of it kept its verdicts.
    action = (
        'signals = real["_" + "_import__"]("signal")\n'
        "signals.pthread_sigmask(signals.SIG_BLOCK, [signals.SIGALRM])\n"
        'lock = real["_" + "_import__"]("_thread").allocate_lock()\n'
        "lock.acquire()\n"
        "lock.acquire()\n"
    )
    tree = hostile_tree(mini_tree, action)
    started = time.monotonic()
    code, report = check_json("--path", str(tree), env={**os.environ, "DFLASH_DOCTOR_NO_CACHE": "1"})
    took = time.monotonic() - started
    assert code == 2, report
    for fix in report["fixes"]:
        assert fix["status"] == "unknown", fix
        assert "ran past its 2 s deadline: the behaviour child was stopped" in fix["reason"], fix
    assert took < CALL_TIMEOUT_S + CALL_GRACE_S + 12, took  # the structure check and a loaded machine's margin


# -- over ssh: the client holds the same deadlines for the child on the host ------------------------


@pytest.mark.slow
@pytest.mark.release
def test_over_ssh_a_call_that_blocks_the_childs_timer_is_stopped_at_its_deadline_and_killed_on_the_host(
    host, remote_python, tmp_path
):
    srv, options = host
    target = target_for(srv, options, remote_python)
    chunks, globals_ = program_for(tmp_path, stalling(STALLS["timer-blocked"]))
    with target.connected(), target.resolve().behaviour() as run_there:
        assert run_there([], [Call("up", "1")], {}, {})["up"].value == 1
        there = remote_children(srv)  # the child, and the process on the host that watches it
        started = time.monotonic()
        with pytest.raises(SandboxError) as raised:
            run_there(chunks, [Call("first", "6 * 7"), Call("x", "stalls()")], {}, globals_)
        took = time.monotonic() - started
        with pytest.raises(SandboxError, match="stopped at an earlier request of this check: the call x ran past"):
            run_there([], [Call("y", "6 * 7")], {}, {})
    assert (
        str(raised.value) == f"the call x ran past its 2 s deadline: the behaviour child on {target.given} was stopped"
    )
    assert took < BOUND_S, took
    # Killed on the host as soon as the client stopped waiting, not at the end of its lifetime there
    # (2 x 60 s + 20 s); polled by pid, as once the session closes sshd is no longer their ancestor.
    assert there
    until = time.monotonic() + 3
    while any(Path(f"/proc/{pid}").exists() for pid in there) and time.monotonic() < until:
        time.sleep(0.05)
    assert not [pid for pid in there if Path(f"/proc/{pid}").exists()]
