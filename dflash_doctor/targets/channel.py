"""The behaviour child at the end of an ssh exec channel (a ``session.Pipe``)."""

from __future__ import annotations

import select
import time
from typing import Any

from ..draft.session import SandboxError


class ChannelPipe:
    """Counts the bytes it moves into ``counter`` (an SshTarget: bytes_sent, bytes_received)."""

    def __init__(self, channel, label: str, counter: Any) -> None:
        self.channel = channel
        self.label = label
        self.counter = counter

    def step(self, pending: memoryview, timeout: float) -> tuple[int, bytes, bytes, bool]:
        channel = self.channel
        sent = 0
        if pending and (channel.closed or channel.eof_sent):
            sent = len(pending)  # nothing reads it any more: the exit status tells why
        elif pending and channel.send_ready():
            try:
                sent = channel.send(bytes(pending[:1 << 16]))
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
        return 128 - status if status > 128 else status  # the shell's 128 + N: killed by signal N

    def close(self) -> None:
        self.channel.close()
