"""One isolated child serving a check's behaviour requests in sequence.

The child (``sandbox.child_program()``: lockdown.py + harness.py) reads one
request per line on its stdin and writes one answer per line on its stdout;
it puts up the boundary once, after its first request has arrived and before
any tree code is compiled, and runs each request in fresh globals. The parent
side here holds the deadlines, by its own clock: each step the child announces
(a program statement, a call) has ``CALL_TIMEOUT_S`` (+ a grace for the child's
own timer to answer first), and the check's requests together have
``RUN_TIMEOUT_S``, so no tree code that blocks or ignores the child's timer can
stretch a check. It caps what the child writes over the whole session, and
checks that each line echoes its own request's nonce: a line the tree code
wrote ahead (a forged answer for a later request) is refused. A request that
fails ends the session: the child is killed and every later request is
unknown, with the reason. Where the child runs (a local process, an ssh
channel) is a ``Pipe``.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import signal
import time
from collections.abc import Sequence
from typing import Any, Protocol

from ..model import ToolError

RUN_TIMEOUT_S = 20.0  # the child's time for all the requests of a check together
MAX_RUNS = 8  # runs of one call the child may announce (harness.MAX_PATHS: the ways its unknown branches go)
CALL_TIMEOUT_S = 2.0  # per step: the child's own timer, and the parent's deadline ...
CALL_GRACE_S = 1.0  # ... this much later, so that the child's timer answers first when it can
MAX_OUTPUT_BYTES = 8 << 20  # per session: stdout and stderr together
STDERR_TAIL_BYTES = 64 * 1024
# Why the child was killed, by signal.
KILLED_BECAUSE: dict[int, str] = {
    signal.SIGSYS: "it made a system call the sandbox forbids (SIGSYS)",
    signal.SIGXCPU: "it reached its CPU time limit (SIGXCPU)",
    signal.SIGKILL: "SIGKILL (its hard CPU limit, or the kernel out of memory)",
}


class SandboxError(ToolError):
    """The child did not answer: every call of the request is unknown."""


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
    """What one call gave: a value, an exception, or why running the tree's code cannot know."""

    value: Any = None
    error_type: str | None = None
    error_message: str = ""
    gap: str | None = None
    missing_key: str | None = None
    timeout: bool = False
    needs: tuple[str, str | None] | None = None  # a definition looked up by its module's name, not sent yet

    @property
    def ok(self) -> bool:
        return self.error_type is None and self.gap is None and self.missing_key is None and not self.timeout

    @property
    def unknowable(self) -> str | None:
        """Why this outcome says nothing about the engine (None when it does)."""
        if self.gap is not None:
            return f"the code reads {self.gap}, which running the tree's code cannot know"
        if self.missing_key is not None:
            return f"the code reads the config key {self.missing_key!r}, which this drafter config does not set"
        if self.timeout:
            return f"the call did not finish within {CALL_TIMEOUT_S:g} s"
        return None


def exit_failure(label: str, exit_code: int, stderr: bytes) -> str | None:
    """Why a child that ended this way gave no answer (None: it exited 0).
    ``exit_code``: negative when killed by that signal."""
    if exit_code == 0:
        return None
    if exit_code < 0:
        number = -exit_code
        because = KILLED_BECAUSE.get(number, f"signal {number}")
        return f"{label} was killed: {because}"
    last = (stderr.decode("utf-8", "replace").strip().splitlines() or ["no message"])[-1]
    return f"{label} failed (exit {exit_code}): {''.join(c if c.isprintable() else '?' for c in last[:300])}"


class Pipe(Protocol):
    """The parent's end of a running child."""

    def step(self, pending: memoryview, timeout: float) -> tuple[int, bytes, bytes, bool]:
        """Wait at most ``timeout`` s for progress: how many bytes of ``pending`` went
        to the child's stdin (all of them once it stopped reading), what came from
        its stdout and stderr, and whether both have ended."""

    def exit_code(self, deadline: float) -> int:
        """Once its outputs ended: how the child exited (negative: that signal);
        TimeoutError at the monotonic ``deadline``, SandboxError when it cannot be known."""

    def close(self) -> None:
        """Kill the child (if still there) and release it."""


class Session:
    """The requests of one check, answered by one child behind ``pipe``.

    ``run`` has ``sandbox.run``'s signature. ``label`` names the child in messages."""

    def __init__(
        self,
        pipe: Pipe,
        label: str = "the behaviour child",
        *,
        wall_s: float = RUN_TIMEOUT_S,
        max_output_bytes: int = MAX_OUTPUT_BYTES,
    ) -> None:
        self.pipe = pipe
        self.label = label
        self.wall_s = wall_s
        self.cap = max_output_bytes
        self.stdout = bytearray()
        self.stderr = bytearray()  # its tail
        self._total = 0
        self._ended = False  # both outputs
        self.exit: int | None = None  # how the child exited, once known
        self._broken: str | None = None  # why later requests get no answer
        self._spent = 0.0  # seconds waited for the child so far
        self._step: tuple[float, str] | None = None  # the announced step's deadline, and what passing it means

    def run(
        self, program: Sequence[Chunk], calls: Sequence[Call], data: dict[str, Any], globals_: dict[str, Any]
    ) -> dict[str, Outcome]:
        """Outcomes by call id. ``globals_`` are stubs bound before the program runs
        (gaps, loggers, envs); a program statement that fails leaves a gap under its name."""
        if self._broken is not None:
            raise SandboxError(self._broken)
        nonce = secrets.token_hex(16)
        steps = (
            "building the stubs",
            *(f"defining {chunk.name}" for chunk in program),
            *(f"the call {call.id}" for call in calls),
        )
        request = encode_request(program, calls, data, globals_, nonce) + b"\n"
        try:
            announced, runs = -1, 0
            while True:
                message = read_line(self.exchange(request, b"\n"), nonce, self.label)
                request = b""
                if "results" in message:
                    return read_answer(message, self.label)
                again = message.get("step") == announced and runs < MAX_RUNS  # a call run again along other branches
                if not again and (message.get("step") != announced + 1 or announced + 1 >= len(steps)):
                    raise SandboxError(f"{self.label} gave no readable answer")
                announced, runs = (announced, runs + 1) if again else (announced + 1, 1)
                self._step = (
                    time.monotonic() + CALL_TIMEOUT_S + CALL_GRACE_S,
                    f"{steps[announced]} ran past its {CALL_TIMEOUT_S:g} s deadline: {self.label} was stopped",
                )
        except SandboxError as exc:
            self._broken = f"{self.label} stopped at an earlier request of this check: {exc}"
            self.close()
            raise
        finally:
            self._step = None

    def exchange(self, request: bytes, until: bytes | None) -> bytes:
        """Send ``request``, then read up to the first ``until`` (its line) or, with
        None, until the child exits (all it wrote). Raises SandboxError past the
        session's time or the announced step's deadline, past the session's output
        cap, or when the child ended without answering."""
        started = time.monotonic()
        try:
            return self._exchange(memoryview(request), until, started + self.wall_s - self._spent)
        finally:
            self._spent += time.monotonic() - started

    def _exchange(self, pending: memoryview, until: bytes | None, deadline: float) -> bytes:
        late = f"{self.label} did not finish within {self.wall_s:g} s"
        while until is None or until not in self.stdout:
            limit, why = (deadline, late) if self._step is None or deadline <= self._step[0] else self._step
            if self._ended and not pending:  # its outputs closed: only its exit can come, by the same deadline
                try:
                    self.exit = self.pipe.exit_code(limit)
                except TimeoutError:
                    raise SandboxError(why) from None
                if until is None:
                    return bytes(self.stdout)
                raise SandboxError(
                    exit_failure(self.label, self.exit, bytes(self.stderr)) or f"{self.label} gave no readable answer"
                )
            left = limit - time.monotonic()
            if left <= 0:
                raise SandboxError(why)
            sent, out, err, ended = self.pipe.step(pending, left)
            pending = pending[sent:]
            self._total += len(out) + len(err)
            if self._total > self.cap:
                raise SandboxError(f"{self.label} wrote more than {self.cap} bytes")
            self.stdout += out
            self.stderr = (self.stderr + err)[-STDERR_TAIL_BYTES:]
            self._ended = ended
        line, _, rest = bytes(self.stdout).partition(until)
        self.stdout = bytearray(rest)
        if pending:  # an answer before the whole request was read: not the harness's
            raise SandboxError(f"{self.label} gave no readable answer")
        return line

    def close(self) -> None:
        self.pipe.close()


class Unstarted:
    """A session whose child cannot start: every request is unknown, with ``reason``."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def run(self, *args: Any) -> dict[str, Outcome]:
        raise SandboxError(self.reason)

    def close(self) -> None:
        pass


def encode_request(
    program: Sequence[Chunk], calls: Sequence[Call], data: dict[str, Any], globals_: dict[str, Any], nonce: str
) -> bytes:
    """One request line for ``child_program()``, wherever it runs (JSON has no raw newline)."""
    return json.dumps(
        {
            "id": nonce,
            "globals": globals_,
            "program": [{"name": chunk.name, "source": chunk.source} for chunk in program],
            "data": data,
            "calls": [{"id": call.id, "expr": call.expr, "bind": dict(call.bind)} for call in calls],
            "call_timeout_s": CALL_TIMEOUT_S,
        }
    ).encode()


def read_line(line: bytes, nonce: str, label: str) -> dict[str, Any]:
    """One line of the child, if it is for the request with ``nonce``; SandboxError otherwise."""
    try:  # as hostile as the code that may have written it: any shape may come back
        message = json.loads(line)
        if isinstance(message, dict) and message.get("id") == nonce:
            return message
    except (ValueError, RecursionError):
        pass
    raise SandboxError(f"{label} gave no readable answer")


def read_answer(answer: dict[str, Any], label: str) -> dict[str, Outcome]:
    """Outcomes by call id from the answer line of a request; SandboxError when it has the wrong shape."""
    try:
        return {call_id: _outcome(raw) for call_id, raw in answer["results"].items()}
    except (KeyError, TypeError, AttributeError):
        raise SandboxError(f"{label} gave no readable answer") from None


def _outcome(raw: dict[str, Any]) -> Outcome:
    error = raw.get("error") or {}
    texts = (error.get("type"), error.get("message", ""), raw.get("gap"), raw.get("missing_key"))
    if not all(text is None or isinstance(text, str) for text in texts):
        raise TypeError("an outcome field that is not a string")
    needs = raw.get("needs")
    if needs is not None and not (
        isinstance(needs, list)
        and len(needs) == 2
        and isinstance(needs[0], str)
        and (needs[1] is None or isinstance(needs[1], str))
    ):
        raise TypeError("a needs field of another shape")
    return Outcome(
        value=raw.get("value"),
        error_type=texts[0],
        error_message=texts[1],
        gap=texts[2],
        missing_key=texts[3],
        timeout=raw.get("timeout") is True,
        needs=None if needs is None else (needs[0], needs[1]),
    )
