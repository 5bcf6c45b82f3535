"""An engine's tree on another machine, read over one ssh connection.

One connection per host. The probe goes to the remote interpreter on stdin
and the files the rules need come back compressed on stdout. Inside
``connected()`` it answers in two parts on one run (``probe.py``'s ``stage``):
first the sha256 of every file, computed on the host, which is all the results
cache needs to answer the check; the bytes follow only when a check reads
them (a miss). A module file of the package the collector did not send (one
the tree's code imports, or looks up by its name) is asked of the same
collector, one round trip each: its digest, or its bytes. Only then does the tree's code run there too: a second exec
channel, opened when the check first asks for behaviour (its start-up
overlaps the fetch and the structure pass), runs ``sandbox.child_program()``
under the same lockdown as a local child and answers the check's behaviour
requests in sequence (session.py), one round trip each; nothing from the
remote machine runs on this one. Outside ``connected()`` the probe answers
whole at once (``python - collect REQUEST``). Nothing is installed or written there.
Under ``--engine auto`` the first collector is also asked which of the other
engines' packages the host's Python finds (``per_engine``): each found is checked
too, over the same connection (``EngineOnHost``).
Host keys are verified against known_hosts; an unknown key is refused unless
``accept_new_host_key`` (then recorded), a changed key is always refused.
Keys and the agent are the only authentication.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import functools
import json
import logging
import math
import os
import random
import select
import shlex
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..engines import Engine
from ..isolation import sandbox
from ..isolation.session import RUN_TIMEOUT_S, Outcome, Session, Unstarted
from ..model import TargetInfo, ToolError
from ..patching.sftp_files import SftpFiles
from ..standalone.probe import MARKER, STAGE_BOOT
from . import ResolvedTarget, Target
from .jumps import JUMPS
from .channel import ChannelPipe, behaviour_lifetime
from .hosts import HostKeyPolicy, HostSpec, SshOptions, fingerprint, parse_host
from .probing import MAX_OUTPUT_BYTES, MIB, answered, encode_request, parse_probe_output, probe_source
from .snapshot import Contents, More, Search, snapshot_target

if TYPE_CHECKING:
    from paramiko import Channel, ProxyCommand, SSHClient

# Most hops of a ProxyJump chain (OpenSSH has no limit; a loop would never end).
MAX_JUMPS = 8
# Tries of a connection a busy server turns away, and the pause before the second (doubled each time).
CONNECT_TRIES = 5
FIRST_PAUSE_S = 0.25
# The tail of the remote standard error kept for the error message.
STDERR_TAIL_BYTES = 64 * 1024
# What the host's interpreter runs: ``sandbox.child_program()``, sent on stdin
# after its length, the requests following it on the same stream, runs in a
# fork; this process only watches. The client cannot kill a process on the host,
# so when it stops waiting for a step it closes the channel, sshd closes the
# child's output, and the watcher kills the child at once (a stalled child
# would otherwise live to the host's ``timeout``). It exits as the child did
# (128 + N: killed by signal N, as ``sh`` reports it).
CHILD_BOOT = """import os, select, sys
_size = int(sys.stdin.buffer.readline())
_program = sys.stdin.buffer.read(_size)
_pid = os.fork()
if _pid == 0:
    exec(compile(_program, '<dflash-doctor-child>', 'exec'))
    sys.exit(0)
_gone = select.poll()
_gone.register(1, 0)  # no events asked: it wakes only when the channel's reader is gone
while True:
    _done, _status = os.waitpid(_pid, os.WNOHANG)
    if _done:
        break
    if _gone.poll(50):
        os.kill(_pid, 9)
        _status = os.waitpid(_pid, 0)[1]
        break
os._exit(os.WEXITSTATUS(_status) if os.WIFEXITED(_status) else 128 + os.WTERMSIG(_status))
"""


class _Busy(ToolError):
    """The server turned the connection away before the handshake: worth another try."""


def _busy(exc: BaseException) -> str | None:
    """How the server turned the connection away, when it did so the way a busy
    or restarting server does (None for anything else: a timeout, a key, authentication)."""
    import paramiko

    if isinstance(exc, (paramiko.ssh_exception.NoValidConnectionsError, ConnectionRefusedError)):
        return "connection refused"
    if isinstance(exc, ConnectionResetError):
        return "connection reset"
    before_banner = isinstance(exc, paramiko.SSHException) and "banner" in str(exc)
    if before_banner and isinstance(exc.__context__, (EOFError, ConnectionResetError)):
        return "the server closed the connection before its SSH banner (a busy server, past its MaxStartups)"
    return None


class SshTarget:
    """One host; ``resolve`` makes the single round trip."""

    def __init__(self, given: str, options: SshOptions, request: dict, detect: tuple[dict, ...] = ()) -> None:
        self.given = given
        self.options = options
        self.request = request
        self.detect = detect  # the other engines' requests: each engine whose package the host finds is checked too
        self._first: tuple[dict, dict, tuple[Contents, More, Search] | None] | None = None  # per_engine's answer, kept
        self.bytes_sent = 0
        self.bytes_received = 0
        self.connect_tries = 0  # of the last connection made
        self._open: tuple[HostSpec, SSHClient] | None = None
        self._staged: list[Channel] = []  # the staged collectors of this connection's checks, closed with it
        self._fetched = (0, 0)  # bytes sent and received for what the last check asked its collector for since
        self._jumps: list[SSHClient] = []  # the ProxyJump clients the connection goes through, closed with it

    @contextlib.contextmanager
    def connected(self) -> Iterator[SSHClient]:
        """Keep one connection open: yields the paramiko client, and every
        ``resolve`` inside runs its probe, and its behaviour, on it (patch:
        check, write, re-check). Inside an open one, the same connection."""
        if self._open is not None:
            yield self._open[1]
            return
        spec = parse_host(self.given, self.options)
        client = self._connect(spec)
        self._open = (spec, client)
        try:
            yield client
        finally:
            self._open = None
            self._first = None
            while self._staged:
                self._staged.pop().close()  # its collector reads the end of its input and exits
            self._close(client)

    def per_engine(self) -> list[tuple[Engine, Target]]:
        """The host's tree of each engine its Python finds, inside ``connected()``: the
        collector of ``request`` also says which of the ``detect`` requests' packages it
        finds, and answers the first of them in its place when its own is not there (one round trip);
        its answer serves that engine's check. ToolError when none."""
        from ..engines import of_package

        if not self.detect or self._open is None:
            return [(of_package(self.request["package"]), self)]
        spec, client = self._open
        who = f"{self.given}: {self.options.python}"
        detect = [request["package"] for request in self.detect]
        # one collector run: the others' packages looked for, and the first found answered when this one is not there
        asked = {**self.request, "detect": detect, "instead": list(self.detect)}
        answer, remote = self._run_probe(client, spec, who, staged=True, request=asked)
        found = set(answer.get("found", ()))
        everyone = (self.request, *self.detect)
        answered = (
            None if answer.get("error") else next((r for r in everyone if r["package"] == answer.get("package")), None)
        )
        requests = [
            request
            for request in everyone
            if request is answered or request in self.detect and request["package"] in found
        ]
        if not requests:
            packages = [request["package"] for request in (self.request, *self.detect)]
            raise ToolError(
                f"{who}: neither {' nor '.join(packages)} is installed in its environment "
                f"(point at the remote interpreter that has one of them with --python)"
            )
        self._first = (answered, answer, remote) if answered is not None else None
        return [(of_package(request["package"]), EngineOnHost(self, request)) for request in requests]

    def resolve(self, request: dict | None = None) -> ResolvedTarget:
        """The tree ``request`` asks for (``self.request`` when None); inside ``connected()``
        known first by the host's digests (the bytes come when a check reads them) and its
        behaviour runs on the host over the open connection (outside, there is none to run
        it on: structure only)."""
        request = self.request if request is None else request
        who = f"{self.given}: {self.options.python}"
        if self._open is not None and self._first is not None and self._first[0] is request:
            _, answer, remote = self._first  # what per_engine asked, on this connection
            self._first = None
        elif self._open is not None:
            spec, client = self._open
            answer, remote = self._run_probe(client, spec, who, staged=True, request=request)
        else:
            spec = parse_host(self.given, self.options)
            client = self._connect(spec)
            try:
                answer, remote = self._run_probe(client, spec, who, staged=False, request=request)
            finally:
                self._close(client)
        if answer.get("error"):
            raise ToolError(
                f"{who}: {answer['error']} "
                f"(point at the remote interpreter that has {request['package']} with --python)"
            )
        details = (
            ("bytes_sent", self.bytes_sent),
            ("bytes_received", self.bytes_received),
            ("connect_tries", self.connect_tries),
        )
        resolved = snapshot_target(answer, "ssh", who, details, *(remote or (None, None, None)))
        ran = (("behaviour", f"runs on {self.given}"),) if self._open is not None else ()
        info = dataclasses.replace(
            resolved.info,
            location=f"{self.given}:{answer.get('root', '')}",
            name=self.given,
            details=(("host", self.given), ("python", self.options.python), *ran, *details),
        )
        resolved = dataclasses.replace(resolved, info=info)
        if self._open is None:
            return dataclasses.replace(resolved, no_files="the ssh connection it was read over is closed")
        files = functools.partial(
            SftpFiles, self._open[1], answer.get("root", ""), self.options.python, info.location, resolved.tree.package
        )
        return dataclasses.replace(resolved, behaviour=functools.partial(self._behaviour, self._open), files=files)

    def _close(self, client: SSHClient) -> None:
        """Close the connection, then let go of the jump hosts it went through (the last
        check using one closes it: its transport thread ends)."""
        client.close()
        while self._jumps:
            JUMPS.release(self._jumps.pop())

    def _connect(self, spec: HostSpec, chain: tuple[str, ...] = ()) -> SSHClient:
        """``chain``: the hosts that jump to this one, to refuse ProxyJump loops.
        A connection refused, reset or closed before the SSH banner (a busy
        server past its ``MaxStartups``, or one restarting) is tried again after
        a growing, jittered pause, at most ``CONNECT_TRIES`` times in all, as
        Ansible's ssh connection retries do; ``connect_tries`` says how many it took."""
        self.connect_tries = 1
        while True:
            try:
                return self._connect_once(spec, chain)
            except _Busy as exc:
                if self.connect_tries == CONNECT_TRIES:
                    raise ToolError(f"{exc} ({self.connect_tries} tries)") from None
            time.sleep(FIRST_PAUSE_S * 2 ** (self.connect_tries - 1) * random.uniform(0.5, 1.5))
            self.connect_tries += 1

    def _connect_once(self, spec: HostSpec, chain: tuple[str, ...]) -> SSHClient:
        import paramiko

        # paramiko's transport thread logs failures itself; ours are reported as one line.
        logging.getLogger("paramiko").addHandler(logging.NullHandler())

        known_hosts = self.options.known_hosts or Path.home() / ".ssh" / "known_hosts"
        client = paramiko.SSHClient()
        if known_hosts.is_file():
            try:
                client.load_host_keys(str(known_hosts))
            except (OSError, paramiko.SSHException) as exc:
                raise ToolError(f"cannot read known hosts {known_hosts}: {exc}") from None
        client.set_missing_host_key_policy(HostKeyPolicy(self.options.accept_new_host_key, known_hosts))
        identities = (
            [str(self.options.identity)]
            if self.options.identity
            else [os.path.expanduser(p) for p in spec.identity_files]
        )
        who = f"{spec.given}"
        try:
            client.connect(
                spec.hostname,
                port=spec.port,
                username=spec.user,
                key_filename=identities or None,
                allow_agent=True,
                look_for_keys=not identities,
                timeout=self.options.connect_timeout,
                banner_timeout=self.options.connect_timeout,
                auth_timeout=self.options.connect_timeout,
                sock=self._proxy_socket(spec, (*chain, spec.given)),
            )
        except ToolError:
            self._close(client)
            raise
        except paramiko.BadHostKeyException as exc:
            self._close(client)
            raise ToolError(
                f"{who}: host key changed: expected {fingerprint(exc.expected_key)}, got {fingerprint(exc.key)}; "
                "refusing"
            ) from None
        except paramiko.AuthenticationException:
            self._close(client)
            raise ToolError(f"{who}: authentication failed (keys and agent tried; passwords are never used)") from None
        except (socket.timeout, TimeoutError):
            self._close(client)
            raise ToolError(f"{who}: timed out after {self.options.connect_timeout:g} s") from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            self._close(client)
            reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            busy = _busy(exc)
            if busy is not None:
                raise _Busy(f"{who}: cannot connect: {busy}") from None
            if "banner" in reason or reason == "No existing session":  # the handshake never started
                raise ToolError(
                    f"{who}: timed out after {self.options.connect_timeout:g} s waiting for the SSH banner"
                ) from None
            raise ToolError(f"{who}: cannot connect: {reason}") from None
        return client

    def _proxy_socket(self, spec: HostSpec, chain: tuple[str, ...]) -> ProxyCommand | Channel | None:
        import paramiko

        if spec.proxy_command:
            return paramiko.ProxyCommand(spec.proxy_command)
        if spec.proxy_jump and spec.proxy_jump.lower() != "none":
            if "," in spec.proxy_jump:
                raise ToolError(f"{spec.given}: ProxyJump with several hops is not supported; use ProxyCommand")
            if spec.proxy_jump in chain or len(chain) > MAX_JUMPS:
                hops = " -> ".join((*chain, spec.proxy_jump))
                raise ToolError(f"{chain[0]}: ProxyJump loop in the ssh config ({hops}); refusing")
            jump = SshTarget(spec.proxy_jump, self.options, self.request)
            hop = spec.proxy_jump

            def connect() -> tuple[Any, Callable[[], None]]:
                client = jump._connect(parse_host(hop, self.options), chain)
                return client, lambda: jump._close(client)

            # one connection to the jump host for every check of this process that goes through it
            jump_client = JUMPS.acquire((spec.proxy_jump, self.options), connect)
            self._jumps.append(jump_client)
            try:
                return jump_client.get_transport().open_channel(
                    "direct-tcpip", (spec.hostname, spec.port), ("127.0.0.1", 0), timeout=self.options.connect_timeout
                )
            except (paramiko.SSHException, OSError) as exc:
                raise ToolError(
                    f"{spec.given}: jump host {spec.proxy_jump} cannot reach {spec.hostname}:{spec.port}: {exc}"
                ) from None
        return None

    def _remote_command(self, run: str, seconds: int, prefix: str = "") -> str:
        """``run`` under the remote ``timeout`` when it has one that takes ``-k``
        (GNU, recent busybox), so that it ends soon after the client gives up:
        closing the channel does not end a process that has no terminal.
        ``sh -c``: the login shell may not be POSIX. No ``exec``: a death by
        signal comes back as the status 128 + N. ``prefix``: shell run first."""
        script = f"{prefix}if timeout -k 1 1 true >/dev/null 2>&1; then timeout -k 5 {seconds} {run}; else {run}; fi"
        return f"sh -c {shlex.quote(script)}"

    def _run_probe(
        self, client: SSHClient, spec: HostSpec, who: str, staged: bool, request: dict[str, Any]
    ) -> tuple[dict, tuple[Contents, More, Search] | None]:
        """The collector's answer, and how to ask it for the bytes it held back and for
        more files (None when it is not asked: whole at once, or an answer with an error).
        ``staged``: in two parts on one run (the first without the bytes), the collector
        then answering until the connection closes; else whole at once. The collector
        also sets its own alarm, for each answer; a staged one lives as long as a
        behaviour child may (it answers for files the child's code reads)."""
        limit = self.options.probe_timeout
        seconds = math.ceil(limit) + 1
        lifetime = math.ceil(behaviour_lifetime(limit, min(limit, RUN_TIMEOUT_S))) + 1
        encoded = encode_request({**request, "deadline": seconds})
        python = shlex.quote(self.options.python)
        source = probe_source().encode()
        if staged:  # each part within ``seconds`` on the host
            run, payload = f"{python} -c {shlex.quote(STAGE_BOOT)} stage {encoded}", b"%d\n%s" % (len(source), source)
        else:
            run, payload = f"{python} - collect {encoded}", source
        command = self._remote_command(run, lifetime if staged else seconds)
        self.bytes_sent = self.bytes_received = 0
        self._fetched = (0, 0)
        deadline = time.monotonic() + limit
        channel = None
        try:
            with self._probe_errors(spec):
                channel = client.get_transport().open_session(timeout=limit)
                channel.settimeout(limit)
                channel.exec_command(command)
                channel.sendall(payload)
                if not staged:
                    channel.shutdown_write()  # ``python -`` runs its source once it has all of it
                self.bytes_sent += len(command) + len(payload)
                output, errors = self._drain(channel, deadline, MAX_OUTPUT_BYTES, answer=staged)
                answer = parse_probe_output(output.decode("utf-8", "replace"), who) if answered(output) else None
                if answer is not None and staged and not answer.get("error"):
                    self._staged.append(channel)
                    channel = None  # kept open until the connection closes: the bytes and more files are asked on it
                    ask = functools.partial(self._ask, spec, who, self._staged[-1], threading.Lock())
                    asking = functools.partial(self._contents, ask), functools.partial(self._more, ask)
                    return answer, (*asking, functools.partial(self._search, ask))
                channel.shutdown_write()  # the collector reads the end of its input and exits
                more, tail = self._drain(channel, deadline, MAX_OUTPUT_BYTES - len(output))
                output, errors = output + more, (errors + tail)[-STDERR_TAIL_BYTES:]
                if not channel.status_event.wait(max(0.0, deadline - time.monotonic())):
                    raise TimeoutError
                status = channel.recv_exit_status()
        finally:
            if channel is not None:
                channel.close()
        text = output.decode("utf-8", "replace")
        if status != 0 and "DFLASH-DOCTOR-PROBE:" not in text:
            last = (errors.decode("utf-8", "replace").strip().splitlines() or [f"exit {status}"])[-1]
            if status == 127:
                raise ToolError(f"{spec.given}: remote interpreter {self.options.python} not found ({last})")
            raise ToolError(f"{spec.given}: remote interpreter {self.options.python} failed (exit {status}): {last}")
        return parse_probe_output(text, who), None

    def counted(self, info: TargetInfo) -> TargetInfo:
        """``info`` at the end of a check: its byte counts include the held-back bytes it asked for."""
        more = dict(zip(("bytes_sent", "bytes_received"), self._fetched))
        return dataclasses.replace(
            info, details=tuple((k, v + more[k] if k in more and isinstance(v, int) else v) for k, v in info.details)
        )

    @staticmethod
    def _contents(ask: Callable[[bytes], dict]) -> dict:
        """The bytes a staged collector held back: its second part, from the same run
        that hashed them (so they are the bytes the digests were computed from)."""
        return ask(b"contents\n").get("files", {})

    @staticmethod
    def _more(ask: Callable[[bytes], dict], paths: list[str], with_bytes: bool) -> dict:
        """What the collector finds at module files of the package it did not send (``more_files``)."""
        return ask(b"%s %s\n" % (b"more" if with_bytes else b"digests", base64.b64encode(json.dumps(paths).encode())))

    @staticmethod
    def _search(ask: Callable[[bytes], dict], names: list[str], under: str, mentions: bool) -> dict:
        """Which files of a package directory define or name ``names`` (``searched``)."""
        asked = {"names": names, "under": under, "mentions": mentions}
        return ask(b"search %s\n" % base64.b64encode(json.dumps(asked).encode()))

    def _ask(self, spec: HostSpec, who: str, channel: Channel, lock: threading.Lock, line: bytes) -> dict:
        """One word to a staged collector and its answer (one round trip on its channel);
        the bytes it moves count in ``counted``. Its answer is untrusted: type-checked here,
        and the caller takes from it only what it asked for."""
        with lock:
            received = self.bytes_received
            try:
                with self._probe_errors(spec):
                    channel.sendall(line)
                    output, _ = self._drain(
                        channel, time.monotonic() + self.options.probe_timeout, MAX_OUTPUT_BYTES, answer=True
                    )
            finally:
                sent, got = self._fetched
                self._fetched = (sent + len(line), got + self.bytes_received - received)
        part = parse_probe_output(output.decode("utf-8", "replace"), who)
        if part.get("error"):
            raise ToolError(f"{who}: {part['error']}")
        return part

    @contextlib.contextmanager
    def _probe_errors(self, spec: HostSpec) -> Iterator[None]:
        """What goes wrong talking to the collector, as one line."""
        import paramiko

        try:
            yield
        except OverflowError:
            raise ToolError(
                f"{spec.given}: remote interpreter {self.options.python} printed more than "
                f"{MAX_OUTPUT_BYTES // MIB} MiB: not a probe answer"
            ) from None
        except (TimeoutError, socket.timeout):
            raise ToolError(
                f"{spec.given}: the probe did not finish within {self.options.probe_timeout:g} s (--probe-timeout)"
            ) from None
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise ToolError(f"{spec.given}: the probe could not run: {exc}") from None

    def _start_session(self, spec: HostSpec, client: SSHClient) -> Session | Unstarted:
        """The behaviour child on the host, booted and waiting for its first request
        (it reads that request before the lockdown goes up and any tree code is
        read); an ``Unstarted`` one when it cannot start."""
        import paramiko

        label = f"the behaviour child on {spec.given}"
        wall_s = min(self.options.probe_timeout, RUN_TIMEOUT_S)
        seconds = math.ceil(behaviour_lifetime(self.options.probe_timeout, wall_s)) + 1
        # As a local child: the filesystem root as working directory and an empty environment.
        found = f"cd / && py=$(command -v {shlex.quote(self.options.python)}) && "
        command = self._remote_command(f'env -i "$py" -I -S -c {shlex.quote(CHILD_BOOT)}', seconds, found)
        program = sandbox.child_program().encode()
        boot = b"%d\n%s" % (len(program), program)
        channel = None
        try:
            channel = client.get_transport().open_session(timeout=self.options.connect_timeout)
            channel.exec_command(command)
            channel.sendall(boot)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            if channel is not None:
                channel.close()
            return Unstarted(f"{label} could not start: {exc}")
        self.bytes_sent += len(command) + len(boot)
        return Session(ChannelPipe(channel, label, self, lifetime_s=seconds), label, wall_s=wall_s)

    @contextlib.contextmanager
    def _behaviour(self, connection: tuple[HostSpec, SSHClient]) -> Iterator[Callable[..., dict[str, Outcome]]]:
        """One check's session on the host (``ResolvedTarget.behaviour``), started
        when the check first asks for it: a check the results cache answers starts
        none, and a check's tree code never runs in the child of another check."""
        spec, client = connection
        if self._open is not connection:
            yield Unstarted(f"the connection to {spec.given} is closed").run
            return
        session = self._start_session(spec, client)
        try:
            yield session.run
        finally:
            session.close()

    def _drain(self, channel: Channel, deadline: float, cap: int, answer: bool = False) -> tuple[bytes, bytes]:
        """Standard output (at most ``cap`` bytes) and the tail of standard
        error, until the remote side closes them, the deadline passes, or (``answer``)
        output holds a whole marked line (``probing.answered``, looked for in each
        chunk as it comes: a flood up to the cap is read once, not once per chunk)."""
        output, errors = bytearray(), bytearray()
        marker, marked = MARKER.encode(), -1  # where the last marked line output holds starts
        while True:
            if channel.recv_ready():
                chunk = channel.recv(1 << 16)
                self.bytes_received += len(chunk)
                start = len(output)
                output += chunk
                if len(output) > cap:
                    raise OverflowError
                if answer:
                    at = output.rfind(marker, max(0, start - len(marker) + 1))
                    marked = at if at >= 0 else marked
                    if marked >= 0 and output.find(b"\n", max(marked, start)) >= 0:
                        break
            elif channel.recv_stderr_ready():
                chunk = channel.recv_stderr(1 << 16)
                self.bytes_received += len(chunk)
                errors = (errors + chunk)[-STDERR_TAIL_BYTES:]
            elif channel.eof_received or channel.closed:
                break
            elif (left := deadline - time.monotonic()) <= 0:
                raise TimeoutError
            else:
                select.select([channel], [], [], left)
        return bytes(output), bytes(errors)


class EngineOnHost:
    """One engine's tree on a host whose ``SshTarget`` holds the connection: checked over it."""

    def __init__(self, host: SshTarget, request: dict) -> None:
        self.host = host
        self.request = request

    def connected(self) -> contextlib.AbstractContextManager:
        return self.host.connected()

    def resolve(self) -> ResolvedTarget:
        return self.host.resolve(self.request)

    def counted(self, info: TargetInfo) -> TargetInfo:
        return self.host.counted(info)
