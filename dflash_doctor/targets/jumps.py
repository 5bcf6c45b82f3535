"""Connections to jump hosts, shared by the checks that go through them.

A fleet behind one bastion (``ProxyJump``) would otherwise open one SSH
connection to the bastion per host, and a bastion with OpenSSH's default
``MaxStartups`` turns some of them away. Here every check in the process that
jumps through the same host, with the same options, shares one connection (each
gets its own channel on it), as OpenSSH's ``ControlMaster`` would; the
connection closes when the last check using it ends, or, while a fleet ``holds``
the pool, when the fleet ends (hosts that finish early do not close it under the
ones still to start).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

Key = tuple[Any, ...]


class JumpPool:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[Key, list[Any]] = {}  # key -> [client, close, users]
        self._connecting: dict[Key, threading.Lock] = {}
        self._holders = 0  # fleets running: idle connections stay open until the last one ends

    def acquire(self, key: Key, connect: Callable[[], tuple[Any, Callable[[], None]]]) -> Any:
        """The shared client for ``key``; ``connect`` opens one (and says how to close it) when none is open."""
        with self._lock:
            gate = self._connecting.setdefault(key, threading.Lock())
        with gate:  # one handshake per jump host, however many checks wait for it
            with self._lock:
                entry = self._open.get(key)
                if entry is not None and _alive(entry[0]):
                    entry[2] += 1
                    return entry[0]
            client, close = connect()
            with self._lock:
                self._open[key] = [client, close, 1]
            return client

    def release(self, client: Any) -> None:
        """One check is done with ``client``: the last one closes it."""
        with self._lock:
            for key, entry in self._open.items():
                if entry[0] is client:
                    entry[2] -= 1
                    if entry[2] > 0 or self._holders:
                        return
                    del self._open[key]
                    close = entry[1]
                    break
            else:
                return
        close()

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Keep idle connections open within (a fleet); at the end, close those no check uses."""
        with self._lock:
            self._holders += 1
        try:
            yield
        finally:
            with self._lock:
                self._holders -= 1
                idle = [] if self._holders else [key for key, entry in self._open.items() if entry[2] <= 0]
                closes = [self._open.pop(key)[1] for key in idle]
            for close in closes:
                close()

    def users(self) -> dict[Key, int]:
        with self._lock:
            return {key: entry[2] for key, entry in self._open.items()}


def _alive(client: Any) -> bool:
    transport = client.get_transport()
    return transport is not None and transport.is_active()


JUMPS = JumpPool()
