"""Options shared by the commands that take a target, and writing a report.

Each option is declared once here. The ssh and image options are taken as a set:
a command names the set as one parameter (``ssh: SshOptions = SSH``) and
``expand`` puts the set's options in its place on the command line, handing the
command what the set builds of them.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from ..engines import DEFAULT_ENGINE, ENGINE_NAMES
from ..paths import write_atomically

if TYPE_CHECKING:  # imported where used: a warm check builds the sets' values only
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
    help=(
        "The engine whose tree is checked: auto (every engine whose package --path, --python, --host or --image "
        f"holds, each checked; {DEFAULT_ENGINE.display} for --release), {ENGINE_NAMES}."
    ),
)
RegistryTimeoutOption = typer.Option(
    30.0,
    "--registry-timeout",
    min=0.1,
    help="With --image: seconds a registry may take to answer a request or send more of a blob.",
)


def _ssh_options(
    identity: Optional[Path],
    known_hosts: Optional[Path],
    ssh_config: Optional[Path],
    connect_timeout: float,
    probe_timeout: float,
    accept_new_host_key: bool,
) -> SshOptions:
    from ..targets.hosts import SshOptions

    return SshOptions(
        identity=identity,
        known_hosts=known_hosts,
        ssh_config=ssh_config,
        connect_timeout=connect_timeout,
        probe_timeout=probe_timeout,
        accept_new_host_key=accept_new_host_key,
    )


def _image_options(platform: str, insecure_registry: Optional[list[str]], registry_timeout: float) -> ImageOptions:
    from ..targets.image import ImageOptions

    return ImageOptions(platform=platform, insecure=tuple(insecure_registry or ()), timeout=registry_timeout)


@dataclasses.dataclass(frozen=True)
class OptionSet:
    """Options a command takes together: each parameter's name, type and option, and what they build."""

    options: tuple[tuple[str, Any, Any], ...]
    build: Callable[..., Any]


# Any, as typer.Option is: each stands as the default of a parameter typed as what it builds.
SSH: Any = OptionSet(
    (
        ("identity", Optional[Path], IdentityOption),
        ("known_hosts", Optional[Path], KnownHostsOption),
        ("ssh_config", Optional[Path], SshConfigOption),
        ("connect_timeout", float, ConnectTimeoutOption),
        ("probe_timeout", float, ProbeTimeoutOption),
        ("accept_new_host_key", bool, AcceptNewHostKeyOption),
    ),
    _ssh_options,
)
IMAGE: Any = OptionSet(
    (
        ("platform", str, PlatformOption),
        ("insecure_registry", Optional[list[str]], InsecureRegistryOption),
        ("registry_timeout", float, RegistryTimeoutOption),
    ),
    _image_options,
)


def expand(command: Callable[..., int]) -> Callable[..., int]:
    """``command`` with each parameter whose default is an ``OptionSet`` replaced, in its place, by the
    set's options; called, it gets the set's value built from them under the parameter's name."""
    signature = inspect.signature(command)
    parameters: list[inspect.Parameter] = []
    sets: dict[str, OptionSet] = {}
    for parameter in signature.parameters.values():
        if isinstance(parameter.default, OptionSet):
            sets[parameter.name] = parameter.default
            parameters += [
                inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=option, annotation=kind)
                for name, kind, option in parameter.default.options
            ]
        else:
            parameters.append(parameter)

    @functools.wraps(command)  # typer resolves the command's own annotations in its module
    def expanded(**given: Any) -> int:
        for name, option_set in sets.items():
            given[name] = option_set.build(*(given.pop(option) for option, _, _ in option_set.options))
        return command(**given)

    expanded.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    expanded.__annotations__ = {parameter.name: parameter.annotation for parameter in parameters}
    return expanded


def target_spec(
    path: Optional[Path] = None,
    python: Optional[str] = None,
    release: Optional[str] = None,
    hosts: Optional[list[str]] = None,
    hosts_file: Optional[Path] = None,
    from_probe: Optional[Path] = None,
    images: Optional[list[str]] = None,
    *,
    ssh: Optional[SshOptions] = None,
    image: Optional[ImageOptions] = None,
    engine: str = "auto",
) -> TargetSpec:
    """The target options as the API's ``TargetSpec`` (the ssh and image ones only matter with hosts or images)."""
    from ..targets.selection import TargetSpec

    spec = TargetSpec(
        path, python, release, tuple(hosts or ()), hosts_file, from_probe, tuple(images or ()), engine=engine
    )
    return dataclasses.replace(spec, ssh=ssh or spec.ssh, image=image or spec.image)


def emit(text: str, output: Optional[Path]) -> None:
    """The report to ``output`` (atomically) or to standard output."""
    if output is not None:
        write_atomically(output, text)
    else:
        sys.stdout.write(text)
