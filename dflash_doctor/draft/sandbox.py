"""Run functions taken from a vLLM tree in a separate, isolated interpreter.

The child runs ``child_program()`` (lockdown.py + harness.py) as
``python -I -S -c``: empty environment, no inherited descriptors, an empty
temporary working directory, its own session; once it has read its request
it puts up lockdown.py's boundary (no_new_privs, rlimits, namespaces, a
seccomp allow-list) before any tree code is compiled. The parent holds one
wall deadline for the whole run, caps what it reads, kills the whole process
group when the run ends, and measures the child's peak RSS. Nothing from the
inspected tree is imported here.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..model import ToolError

HERE = Path(__file__).parent
LOCKDOWN = HERE / "lockdown.py"
HARNESS = HERE / "harness.py"
RUN_TIMEOUT_S = 20.0
CALL_TIMEOUT_S = 2.0
MAX_OUTPUT_BYTES = 8 << 20
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
# Why the child was killed, by signal.
KILLED_BECAUSE = {
    signal.SIGSYS: "it made a system call the sandbox forbids (SIGSYS)",
    signal.SIGXCPU: "it reached its CPU time limit (SIGXCPU)",
    signal.SIGKILL: "SIGKILL (its hard CPU limit, or the kernel out of memory)",
}


class SandboxError(ToolError):
    """The child did not answer: every probe of the run is unknown."""


@dataclasses.dataclass(frozen=True)
class Chunk:
    """One top-level statement of the program, and the name it defines."""

    name: str
    source: str


@dataclasses.dataclass(frozen=True)
class Call:
    id: str
    expr: str
    bind: tuple[tuple[str, Any], ...] = ()


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one call gave: a value, an exception, or why the probe cannot know."""

    value: Any = None
    error_type: str | None = None
    error_message: str = ""
    gap: str | None = None
    missing_key: str | None = None
    timeout: bool = False

    @property
    def ok(self) -> bool:
        return self.error_type is None and self.gap is None and self.missing_key is None and not self.timeout

    @property
    def unknowable(self) -> str | None:
        """Why this outcome says nothing about vLLM (None when it does)."""
        if self.gap is not None:
            return f"the code reads {self.gap}, which the probe cannot know"
        if self.missing_key is not None:
            return f"the code reads the config key {self.missing_key!r}, which this drafter config does not set"
        if self.timeout:
            return f"the call did not finish within {CALL_TIMEOUT_S:g} s"
        return None


@dataclasses.dataclass(frozen=True)
class ChildRun:
    """A finished child: what it wrote, how it ended, and the most memory it held."""

    stdout: bytes
    stderr: bytes
    exit_code: int  # negative: killed by that signal
    peak_rss_bytes: int

    def failure(self) -> str | None:
        """Why this run gave no answer (None when it exited 0)."""
        if self.exit_code == 0:
            return None
        if self.exit_code < 0:
            number = -self.exit_code
            because = KILLED_BECAUSE.get(number, f"signal {number}")
            return f"the probe process was killed: {because}"
        last = (self.stderr.decode("utf-8", "replace").strip().splitlines() or ["no message"])[-1]
        return f"the probe process failed (exit {self.exit_code}): {''.join(c if c.isprintable() else '?' for c in last[:300])}"


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


def run_isolated(program: str, request: bytes, *, wall_s: float, max_output_bytes: int) -> ChildRun:
    """Run ``program`` in a fresh child fed ``request`` on stdin.

    One deadline for the whole run; stdout and stderr together are capped at
    ``max_output_bytes``. Raises SandboxError on a failed start, the deadline or
    the cap; the child's whole process group is killed in every case."""
    with tempfile.TemporaryDirectory(prefix="dflash-doctor-child-") as cwd:
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", program],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                cwd=cwd, env={}, close_fds=True, start_new_session=True,
            )
        except OSError as exc:
            raise SandboxError(f"the probe process could not start: {exc.strerror}") from None
        try:
            stdout, stderr = _exchange(proc, request, time.monotonic() + wall_s, wall_s, max_output_bytes)
        finally:
            _end(proc)
            exit_code, peak = _reap(proc)
    return ChildRun(stdout, stderr, exit_code, peak)


def _exchange(proc: subprocess.Popen, request: bytes, deadline: float, wall_s: float, cap: int) -> tuple[bytes, bytes]:
    """Write the request and read both outputs until the child exits."""
    out: dict[int, list[bytes]] = {proc.stdout.fileno(): [], proc.stderr.fileno(): []}
    total = 0
    pending = memoryview(request)
    with selectors.DefaultSelector() as selector:
        for fd in out:
            selector.register(fd, selectors.EVENT_READ)
        stdin = proc.stdin.fileno()
        os.set_blocking(stdin, False)
        if pending:
            selector.register(stdin, selectors.EVENT_WRITE)
        else:
            proc.stdin.close()
        while len(selector.get_map()) > 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SandboxError(f"the probe process did not finish within {wall_s:g} s")
            for key, _ in selector.select(remaining):
                if key.fd == stdin:
                    try:
                        pending = pending[os.write(stdin, pending[:1 << 16]):]
                    except BrokenPipeError:  # the child stopped reading: its exit tells why
                        pending = pending[:0]
                    if not pending:
                        selector.unregister(stdin)
                        proc.stdin.close()
                    continue
                data = os.read(key.fd, 1 << 16)
                if not data:
                    selector.unregister(key.fd)
                    continue
                total += len(data)
                if total > cap:
                    raise SandboxError(f"the probe process wrote more than {cap} bytes")
                out[key.fd].append(data)
    _wait_exit(proc.pid, deadline, wall_s)
    return b"".join(out[proc.stdout.fileno()]), b"".join(out[proc.stderr.fileno()])


def _wait_exit(pid: int, deadline: float, wall_s: float) -> None:
    """Wait, without reaping, until the child has exited (its outputs closed first)."""
    pause = 0.001
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        if time.monotonic() + pause > deadline:
            raise SandboxError(f"the probe process did not finish within {wall_s:g} s")
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def _end(proc: subprocess.Popen) -> None:
    """Kill the child's process group (before reaping: its pid still names the group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        stream.close()


def _reap(proc: subprocess.Popen) -> tuple[int, int]:
    """The child's exit code and peak RSS in bytes (ru_maxrss is KiB on Linux, bytes on macOS)."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    scale = 1 if sys.platform == "darwin" else 1024
    return proc.returncode, usage.ru_maxrss * scale


def run(program: Sequence[Chunk], calls: Sequence[Call], data: dict[str, Any], globals_: dict[str, Any]) -> dict[str, Outcome]:
    """Outcomes by call id. ``globals_`` are stubs bound before the program runs
    (gaps, loggers, envs); a program statement that fails leaves a gap under its name."""
    request = encode_request(program, calls, data, globals_)
    return read_answer(run_isolated(child_program(), request, wall_s=RUN_TIMEOUT_S, max_output_bytes=MAX_OUTPUT_BYTES))


def encode_request(program: Sequence[Chunk], calls: Sequence[Call], data: dict[str, Any], globals_: dict[str, Any]) -> bytes:
    """What ``child_program()`` reads on stdin, wherever it runs."""
    return json.dumps({
        "globals": globals_,
        "program": [{"name": chunk.name, "source": chunk.source} for chunk in program],
        "data": data,
        "calls": [{"id": call.id, "expr": call.expr, "bind": dict(call.bind)} for call in calls],
        "call_timeout_s": CALL_TIMEOUT_S,
    }).encode()


def read_answer(result: ChildRun) -> dict[str, Outcome]:
    """Outcomes by call id from a finished child; SandboxError when it gave none."""
    why = result.failure()
    if why is not None:
        raise SandboxError(why)
    try:  # the answer is as hostile as the code that wrote it: any shape may come back
        return {call_id: _outcome(raw) for call_id, raw in json.loads(result.stdout)["results"].items()}
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        raise SandboxError("the probe process gave no readable answer") from None


def _outcome(raw: dict[str, Any]) -> Outcome:
    error = raw.get("error") or {}
    texts = (error.get("type"), error.get("message", ""), raw.get("gap"), raw.get("missing_key"))
    if not all(text is None or isinstance(text, str) for text in texts):
        raise TypeError("an outcome field that is not a string")
    return Outcome(value=raw.get("value"), error_type=texts[0], error_message=texts[1], gap=texts[2],
                   missing_key=texts[3], timeout=raw.get("timeout") is True)


# Stub specs understood by the harness (see harness.py).


def data_ref(name: str) -> dict:
    return {"$data": name}


def config_object(label: str, data_name: str) -> dict:
    """A config whose attributes are request data; missing keys raise AttributeError."""
    return {"$obj": label, "data": data_name}


def strict_object(label: str, **attrs: Any) -> dict:
    """An object with exactly these attributes; any other is a gap."""
    return {"$obj": label, "attrs": attrs}


def class_instance(label: str, body: str, **attrs: Any) -> dict:
    return {"$class": label, "body": body, "attrs": attrs}


def gap(label: str) -> dict:
    return {"$gap": label}


def returns(spec: Any) -> dict:
    return {"$returns": spec}


def noop(label: str) -> dict:
    return {"$noop": label}


def unset_env(label: str) -> dict:
    return {"$unset_env": label}
