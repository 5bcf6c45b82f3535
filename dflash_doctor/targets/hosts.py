"""Which host ``[user@]host[:port]`` names (through the ssh config), and its host key.

paramiko is imported here first, without ``invoke`` unless the ssh config needs it.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import re
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from ..model import ToolError

if TYPE_CHECKING:
    from paramiko import PKey, SSHClient

HOST_SPEC = re.compile(r"^(?:(?P<user>[^@\s]+)@)?(?P<host>\[[^\]]+\]|[^:@\s]+)(?::(?P<port>\d{1,5}))?$")


@dataclasses.dataclass(frozen=True)
class SshOptions:
    python: str = "python3"
    identity: Path | None = None
    known_hosts: Path | None = None  # default ~/.ssh/known_hosts
    ssh_config: Path | None = None  # default ~/.ssh/config
    connect_timeout: float = 10.0
    probe_timeout: float = 60.0  # the collector's deadline; also bounds each behaviour request and the child's lifetime
    accept_new_host_key: bool = False


@dataclasses.dataclass(frozen=True)
class HostSpec:
    """``[user@]host[:port]`` as given, resolved through ssh_config."""

    given: str
    hostname: str
    port: int
    user: str | None
    identity_files: tuple[str, ...]
    proxy_jump: str | None
    proxy_command: str | None


def fingerprint(key: PKey) -> str:
    """OpenSSH's SHA256 fingerprint of a host key."""
    digest = base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")
    return f"{key.get_name()} SHA256:{digest}"


def parse_host(given: str, options: SshOptions) -> HostSpec:
    found = HOST_SPEC.match(given.strip())
    if not found:
        raise ToolError(f"not a host: {given!r} (expected [user@]host[:port])")
    alias = found["host"].strip("[]")
    config_path = options.ssh_config or Path.home() / ".ssh" / "config"
    text = ""
    if config_path.is_file():
        try:
            text = config_path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise ToolError(f"cannot read ssh config {config_path}: {exc.strerror or exc}") from None
    paramiko = _paramiko(text)
    try:
        config = paramiko.SSHConfig.from_text(text)
    except paramiko.ssh_exception.ConfigParseError as exc:
        raise ToolError(f"cannot read ssh config {config_path}: {exc}") from None
    entry = config.lookup(alias)
    port = int(found["port"] or entry.get("port", 22))
    if not 0 < port < 65536:
        raise ToolError(f"not a port: {port} in {given!r}")
    return HostSpec(
        given=given,
        hostname=entry.get("hostname", alias),
        port=port,
        user=found["user"] or entry.get("user"),
        identity_files=tuple(entry.get("identityfile", [])),
        proxy_jump=entry.get("proxyjump"),
        proxy_command=entry.get("proxycommand"),
    )


# An ssh_config line that has paramiko run a command, which it needs ``invoke`` for.
MATCH_EXEC = re.compile(r"^\s*match\b.*\bexec\b", re.IGNORECASE | re.MULTILINE)
_IMPORTING = threading.Lock()


def _paramiko(config: str) -> ModuleType:
    """paramiko, imported without ``invoke`` when the ssh config has no ``Match exec``:
    paramiko imports it only to run those, and it costs more than the rest of
    paramiko (0.14 s of 0.29 s, a tenth of a check the results cache answers)."""
    runs = MATCH_EXEC.search(config) is not None
    with _IMPORTING:
        if "paramiko" not in sys.modules and "invoke" not in sys.modules and not runs:
            sys.modules["invoke"] = None  # type: ignore[assignment]  # its import fails at once; paramiko runs without it
            try:
                import paramiko
            finally:
                del sys.modules["invoke"]
        import paramiko

        if runs and paramiko.config.invoke is None:  # imported without it for an earlier config of this process
            try:
                import invoke
            except ImportError:
                pass  # not installed: paramiko says so, as it always did
            else:
                paramiko.config.invoke = invoke
    return paramiko


class HostKeyPolicy:
    """Refuse unknown keys naming the fingerprint, or record them on request."""

    def __init__(self, accept_new: bool, known_hosts: Path) -> None:
        self.accept_new = accept_new
        self.known_hosts = known_hosts

    def missing_host_key(self, client: SSHClient, hostname: str, key: PKey) -> None:
        if not self.accept_new:
            raise ToolError(
                f"{hostname}: unknown host key {fingerprint(key)}; verify it and add it to {self.known_hosts}, "
                "or pass --accept-new-host-key to trust it on first use"
            )
        client.get_host_keys().add(hostname, key.get_name(), key)
        self.known_hosts.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(self.known_hosts, "a", encoding="utf-8") as handle:
            handle.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
