"""Run functions taken from an engine's tree in a separate, isolated interpreter.

The child runs ``child_program()`` (lockdown.py + harness.py) as
``python -I -S -c``: empty environment, no inherited descriptors, an empty
temporary working directory, its own session; once it has read its first
request it puts up lockdown.py's boundary (no_new_privs, rlimits, namespaces,
a seccomp allow-list) before any tree code is compiled. ``session()`` keeps
one such child for a check's requests (session.py: a deadline per request,
one output cap); the parent kills the whole process group when it ends and
measures the child's peak RSS. Nothing from the inspected tree is imported here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from .session import (
    RUN_TIMEOUT_S,
    Call,
    Chunk,
    Outcome,
    SandboxError,
    Session,
    Unstarted,
    exit_failure,
)

STANDALONE = Path(__file__).resolve().parent.parent / "standalone"
LOCKDOWN = STANDALONE / "lockdown.py"
HARNESS = STANDALONE / "harness.py"
# Loads the two module texts under their names, then runs ``tail``.
BOOTSTRAP = """import sys, types
def _load(name, source):
    module = types.ModuleType(name)
    module.__file__ = name + ".py"
    sys.modules[name] = module
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module
_load("lockdown", {lockdown!r})
{tail}
"""
# What isolation_status() runs: the boundary, then an open that the filter must refuse.
STATUS_CHECK = """import os
layers = sys.modules["lockdown"].lockdown(None)
try:
    os.close(os.open("/", os.O_RDONLY))
except PermissionError:
    sys.stdout.write(", ".join(layers))
else:
    raise SystemExit("the filter let an open through")
"""
LABEL = "the behaviour child"


@dataclasses.dataclass(frozen=True)
class ChildRun:
    """A finished child: what it wrote, how it ended, and the most memory it held."""

    stdout: bytes
    stderr: bytes  # its tail
    exit_code: int  # negative: killed by that signal
    peak_rss_bytes: int

    def failure(self) -> str | None:
        """Why this run gave no answer (None when it exited 0)."""
        return exit_failure(LABEL, self.exit_code, self.stderr)


def _program(tail: str) -> str:
    return BOOTSTRAP.format(lockdown=LOCKDOWN.read_text(encoding="utf-8"), tail=tail)


@functools.cache
def child_program() -> str:
    """The whole child, one self-contained text: what runs locally under
    ``python -I -S -c`` and what a remote host is sent."""
    return _program(f"_load('harness', {HARNESS.read_text(encoding='utf-8')!r}).main()")


@functools.cache
def isolation_status() -> tuple[bool, str]:
    """Whether this machine gives the boundary: (True, the layers in force) or
    (False, why not). Probed once per process with a tiny locked child."""
    try:
        result = run_isolated(_program(STATUS_CHECK), b"", wall_s=RUN_TIMEOUT_S, max_output_bytes=1 << 16)
    except SandboxError as exc:
        return False, str(exc)
    why = result.failure()
    if why is not None:
        return False, why
    return True, result.stdout.decode("ascii", "replace")


class LocalPipe:
    """A child ``python -I -S -c program`` on this machine (session.Pipe).
    ``one_shot``: its stdin is closed once everything given has been written."""

    def __init__(self, program: str, one_shot: bool = False) -> None:
        self.one_shot = one_shot
        self.peak_rss_bytes = 0
        self._cwd = tempfile.TemporaryDirectory(prefix="dflash-doctor-child-")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", program],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self._cwd.name,
                env={},
                close_fds=True,
                start_new_session=True,
            )
        except OSError as exc:
            self._cwd.cleanup()
            raise SandboxError(f"{LABEL} could not start: {exc.strerror}") from None
        stdin, stdout, stderr = self.proc.stdin, self.proc.stdout, self.proc.stderr
        assert stdin is not None and stdout is not None and stderr is not None  # all three are pipes
        self._files = (stdin, stdout, stderr)
        self._stdin = stdin.fileno()
        os.set_blocking(self._stdin, False)
        self._outputs = {stdout.fileno(): 0, stderr.fileno(): 1}
        self._selector = selectors.DefaultSelector()
        for fd in self._outputs:
            self._selector.register(fd, selectors.EVENT_READ)
        self._writing = False
        self._closed = False

    def step(self, pending: memoryview, timeout: float) -> tuple[int, bytes, bytes, bool]:
        stdin = self._files[0]
        if self.one_shot and not pending and not stdin.closed:
            self._stop_writing()
            stdin.close()
        if bool(pending) != self._writing:
            if pending:
                self._selector.register(self._stdin, selectors.EVENT_WRITE)
            else:
                self._selector.unregister(self._stdin)
            self._writing = bool(pending)
        sent, read = 0, [b"", b""]
        for key, _ in self._selector.select(timeout):
            if key.fd == self._stdin:
                try:
                    sent = os.write(self._stdin, pending[: 1 << 16])
                except BrokenPipeError:  # the child stopped reading: its exit tells why
                    sent = len(pending)
                continue
            data = os.read(key.fd, 1 << 16)
            if data:
                read[self._outputs[key.fd]] = data
            else:
                self._selector.unregister(key.fd)
                del self._outputs[key.fd]
        return sent, read[0], read[1], not self._outputs

    def _stop_writing(self) -> None:
        if self._writing:
            self._selector.unregister(self._stdin)
            self._writing = False

    def exit_code(self, deadline: float) -> int:
        """Waits without reaping: until reaped, the child's pid still names its process group."""
        pause = 0.001
        while (info := os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)) is None:
            if time.monotonic() + pause > deadline:
                raise TimeoutError
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status

    def close(self) -> None:
        """Kill the child's process group (before reaping), reap it, measure its peak RSS
        (ru_maxrss is KiB on Linux, bytes on macOS) and remove its working directory."""
        if self._closed:
            return
        self._closed = True
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._selector.close()
        for stream in self._files:
            stream.close()
        _, status, usage = os.wait4(self.proc.pid, 0)
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self.peak_rss_bytes = usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)
        self._cwd.cleanup()


def run_isolated(program: str, request: bytes, *, wall_s: float, max_output_bytes: int) -> ChildRun:
    """Run ``program`` in a fresh child fed ``request`` on stdin, to its exit.

    One deadline for the whole run; stdout and stderr together are capped at
    ``max_output_bytes``. Raises SandboxError on a failed start, the deadline or
    the cap; the child's whole process group is killed in every case."""
    pipe = LocalPipe(program, one_shot=True)
    child = Session(pipe, LABEL, wall_s=wall_s, max_output_bytes=max_output_bytes)
    try:
        stdout = child.exchange(request, None)
    finally:
        pipe.close()
    assert child.exit is not None  # the exchange ended with the child's exit
    return ChildRun(stdout, bytes(child.stderr), child.exit, pipe.peak_rss_bytes)


@contextlib.contextmanager
def session() -> Iterator[Any]:
    """One local child for a check's requests (its ``run``), killed on leaving.
    Started now: its start-up overlaps the parent's work until the first request
    (it waits for that request before the boundary goes up and any tree code is read)."""
    child: Session | Unstarted
    try:
        child = Session(LocalPipe(child_program()), LABEL)
    except SandboxError as exc:  # it could not start: every request is unknown, with the reason
        child = Unstarted(str(exc))
    try:
        yield child.run
    finally:
        child.close()


def run(
    program: Sequence[Chunk], calls: Sequence[Call], data: dict[str, Any], globals_: dict[str, Any]
) -> dict[str, Outcome]:
    """One request in its own child (``session()`` for several)."""
    with session() as one:
        return one(program, calls, data, globals_)


# Stub specs understood by the harness (see harness.py).


def data_ref(name: str) -> dict:
    return {"$data": name}


# A key of a config object's data naming the attributes that are gaps ({key: why}):
# keys the tool could not compute (behaviour/hf_config.py). The harness reads it
# (spelled there too); a key of the drafter's own file never starts with "__".
UNKNOWN_KEYS = "__unknown__"


def config_object(label: str, data_name: str, itself: tuple[str, ...] = ()) -> dict:
    """A config whose attributes are request data; missing keys raise AttributeError,
    and the keys listed under ``UNKNOWN_KEYS`` are gaps; the methods ``itself`` names return the config."""
    return {"$obj": label, "data": data_name, **({"itself": list(itself)} if itself else {})}


def strict_object(label: str, **attrs: Any) -> dict:
    """An object with exactly these attributes; any other is a gap."""
    return {"$obj": label, "attrs": attrs}


def class_instance(label: str, body: str, loose: bool = False, **attrs: Any) -> dict:
    """An instance of a class with ``body``; a missing attribute is a gap, or with
    ``loose`` a stand-in whose branches are explored both ways."""
    return {"$class": label, "body": body, "attrs": attrs, **({"loose": True} if loose else {})}


def gap(label: str) -> dict:
    return {"$gap": label}


def returns(spec: Any) -> dict:
    return {"$returns": spec}


def noop(label: str) -> dict:
    return {"$noop": label}


def unset_env(label: str) -> dict:
    return {"$unset_env": label}
