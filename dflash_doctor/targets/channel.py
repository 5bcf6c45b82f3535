"""The behaviour child at the end of an ssh exec channel (a ``session.Pipe``)."""

from __future__ import annotations

import select
import time
from typing import TYPE_CHECKING, Protocol

from ..isolation.session import SandboxError

if TYPE_CHECKING:
    from paramiko import Channel


# What the host's ``timeout`` exits with when it ends the child: 124 after TERM, 128 + 9 after its -k KILL.
TIMEOUT_STATUSES = (124, 128 + 9)


def behaviour_lifetime(probe_timeout: float, wall_s: float) -> float:
    """How long the remote behaviour child may live, in seconds: the collection
    it overlaps (``probe_timeout``), the check's own work between its requests
    (``probe_timeout``) and the requests themselves (``wall_s``: the session's
    time for all of them together)."""
    return 2 * probe_timeout + wall_s


class Counter(Protocol):
    """Where the bytes a channel moves are counted (an SshTarget)."""

    bytes_sent: int
    bytes_received: int


class ChannelPipe:
    """Counts the bytes it moves into ``counter`` (an SshTarget: bytes_sent, bytes_received).
    ``lifetime_s``: the host's ``timeout`` for the child, counted from here (the
    remote clock starts later, so a child it ended has lived at least that long here)."""

    def __init__(self, channel: Channel, label: str, counter: Counter, lifetime_s: float) -> None:
        self.channel = channel
        self.label = label
        self.counter = counter
        self.lifetime_s = lifetime_s
        self.started = time.monotonic()

    def step(self, pending: memoryview, timeout: float) -> tuple[int, bytes, bytes, bool]:
        channel = self.channel
        sent = 0
        if pending and (channel.closed or channel.eof_sent):
            sent = len(pending)  # nothing reads it any more: the exit status tells why
        elif pending and channel.send_ready():
            try:
                sent = channel.send(bytes(pending[: 1 << 16]))
            except OSError:
                sent = len(pending)
            self.counter.bytes_sent += sent
        out = channel.recv(1 << 16) if channel.recv_ready() else b""
        err = channel.recv_stderr(1 << 16) if channel.recv_stderr_ready() else b""
        self.counter.bytes_received += len(out) + len(err)
        ended = not out and not err and (channel.eof_received or channel.closed)
        if not (sent or out or err or ended):
            # The channel's descriptor wakes on data and on its end; sending has none: poll for window.
            select.select([channel], [], [], min(timeout, 0.005) if pending else timeout)
        return sent, out, err, ended

    def exit_code(self, deadline: float) -> int:
        if not self.channel.status_event.wait(max(0.0, deadline - time.monotonic())):
            raise TimeoutError
        status = self.channel.recv_exit_status()
        if status < 0:  # the session ended with no exit status (the host's shell itself was killed)
            raise SandboxError(f"{self.label} ended with no exit status")
        if status in TIMEOUT_STATUSES and time.monotonic() - self.started >= self.lifetime_s:
            raise SandboxError(
                f"the host's timeout (--probe-timeout) ended {self.label} "
                f"at the end of its {self.lifetime_s:g} s lifetime"
            )
        return 128 - status if status > 128 else status  # the shell's 128 + N: killed by signal N

    def close(self) -> None:
        self.channel.close()
