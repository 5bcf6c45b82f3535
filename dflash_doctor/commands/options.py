"""Options shared by the commands that take a target, and writing a report."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from ..paths import write_atomically
from ..targets.hosts import SshOptions
from ..targets.image import ImageOptions
from ..targets.selection import TargetSpec

PathOption = typer.Option(None, "--path", help="site-packages, a source checkout, or the vllm directory.")
PythonOption = typer.Option(None, "--python", help="Interpreter whose environment holds vllm (never imported).")
ReleaseOption = typer.Option(
    None,
    "--release",
    help="A released wheel, e.g. 0.20.1 (its .py files fetched once into the cache: by range requests where the "
    "index allows).",
)
FullWheelOption = typer.Option(
    False,
    "--full-wheel",
    help="Download each wheel whole and check it against the sha256 the index states (instead of reading only the "
    "members needed, checked against the wheel's RECORD).",
)
OnlyOption = typer.Option(None, "--only", help="Only this fix id (repeatable).")
HostOption = typer.Option(
    None,
    "--host",
    help="host, user@host or host:port, or an ~/.ssh/config alias (repeatable); --python is then the remote "
    "interpreter.",
)
SingleHostOption = typer.Option(
    None,
    "--host",
    help="host, user@host or host:port, or an ~/.ssh/config alias; --python is then the remote interpreter.",
)
HostsFileOption = typer.Option(None, "--hosts-file", help="One host per line, # comments.")
IdentityOption = typer.Option(None, "--identity", help="Private key for ssh (else the agent and the default keys).")
KnownHostsOption = typer.Option(None, "--known-hosts", help="Known hosts file (default ~/.ssh/known_hosts).")
SshConfigOption = typer.Option(None, "--ssh-config", help="ssh config file for host aliases (default ~/.ssh/config).")
ConnectTimeoutOption = typer.Option(
    10.0, "--connect-timeout", min=0.1, help="Seconds to connect, see the banner and authenticate."
)
ProbeTimeoutOption = typer.Option(
    60.0,
    "--probe-timeout",
    min=0.1,
    help="Seconds for the remote probe, from start to answer; also each behaviour request's deadline (at most 20) "
    "and, from both, the remote behaviour child's lifetime.",
)
AcceptNewHostKeyOption = typer.Option(
    False, "--accept-new-host-key", help="Trust an unknown host key on first use and record it."
)
JobsOption = typer.Option(4, "--jobs", min=1, help="Hosts checked at once.")
FromProbeOption = typer.Option(
    None, "--from-probe", help="Evaluate answers of `dflash-doctor probe-script`: a file, or a directory of them."
)
ImageOption = typer.Option(
    None,
    "--image",
    help="A container image, read without a daemon (repeatable): vllm/vllm-openai:v0.20.1, "
    "host:5000/team/vllm@sha256:..., oci:DIR or oci:DIR:TAG, docker-archive:FILE.",
)
SingleImageOption = typer.Option(
    None,
    "--image",
    help="A container image, read without a daemon: vllm/vllm-openai:v0.20.1, host:5000/team/vllm@sha256:..., "
    "oci:DIR or oci:DIR:TAG, docker-archive:FILE.",
)
PlatformOption = typer.Option(
    "linux/amd64",
    "--platform",
    help="With --image: the platform to pick from a multi-platform index (os/arch or os/arch/variant).",
)
InsecureRegistryOption = typer.Option(
    None,
    "--insecure-registry",
    metavar="HOST[:PORT]",
    help="With --image: speak plain HTTP to this registry (repeatable).",
)
EngineOption = typer.Option(
    "auto",
    "--engine",
    help="The engine whose tree is checked: auto (every engine whose package --path or --python holds, each checked; "
    "for --image the first it holds, vLLM before SGLang; vLLM for --release and --host), vllm or sglang.",
)
RegistryTimeoutOption = typer.Option(
    30.0,
    "--registry-timeout",
    min=0.1,
    help="With --image: seconds a registry may take to answer a request or send more of a blob.",
)


def target_spec(
    path: Optional[Path] = None,
    python: Optional[str] = None,
    release: Optional[str] = None,
    hosts: Optional[list[str]] = None,
    hosts_file: Optional[Path] = None,
    from_probe: Optional[Path] = None,
    images: Optional[list[str]] = None,
    *,
    identity: Optional[Path] = None,
    known_hosts: Optional[Path] = None,
    ssh_config: Optional[Path] = None,
    connect_timeout: float = 10.0,
    probe_timeout: float = 60.0,
    accept_new_host_key: bool = False,
    platform: str = "linux/amd64",
    insecure_registry: Optional[list[str]] = None,
    registry_timeout: float = 30.0,
    progress: bool = False,
    engine: str = "auto",
) -> TargetSpec:
    """The target options as the API's ``TargetSpec`` (the ssh and image ones only matter with hosts or images)."""
    ssh = SshOptions(
        identity=identity,
        known_hosts=known_hosts,
        ssh_config=ssh_config,
        connect_timeout=connect_timeout,
        probe_timeout=probe_timeout,
        accept_new_host_key=accept_new_host_key,
    )
    image = ImageOptions(
        platform=platform, insecure=tuple(insecure_registry or ()), timeout=registry_timeout, progress=progress
    )
    return TargetSpec(
        path, python, release, tuple(hosts or ()), hosts_file, from_probe, tuple(images or ()), ssh, image, engine
    )


def emit(text: str, output: Optional[Path]) -> None:
    """The report to ``output`` (atomically) or to standard output."""
    if output is not None:
        write_atomically(output, text)
    else:
        sys.stdout.write(text)
