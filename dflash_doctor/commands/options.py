"""Options shared by the commands that take a target, and output helpers."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from ..model import ToolError
from ..paths import read_file, write_atomically

MAX_HOSTS_FILE_BYTES = 1024 * 1024

PathOption = typer.Option(None, "--path", help="site-packages, a source checkout, or the vllm directory.")
PythonOption = typer.Option(None, "--python", help="Interpreter whose environment holds vllm (never imported).")
ReleaseOption = typer.Option(None, "--release", help="A released wheel, e.g. 0.20.1 (its .py files fetched once into the cache: by range requests where the index allows).")
FullWheelOption = typer.Option(False, "--full-wheel", help="Download each wheel whole and check it against the sha256 the index states (instead of reading only the members needed, checked against the wheel's RECORD).")
OnlyOption = typer.Option(None, "--only", help="Only this fix id (repeatable).")
HostOption = typer.Option(None, "--host", help="host, user@host or host:port, or an ~/.ssh/config alias (repeatable); --python is then the remote interpreter.")
SingleHostOption = typer.Option(None, "--host", help="host, user@host or host:port, or an ~/.ssh/config alias; --python is then the remote interpreter.")
HostsFileOption = typer.Option(None, "--hosts-file", help="One host per line, # comments.")
IdentityOption = typer.Option(None, "--identity", help="Private key for ssh (else the agent and the default keys).")
KnownHostsOption = typer.Option(None, "--known-hosts", help="Known hosts file (default ~/.ssh/known_hosts).")
SshConfigOption = typer.Option(None, "--ssh-config", help="ssh config file for host aliases (default ~/.ssh/config).")
ConnectTimeoutOption = typer.Option(10.0, "--connect-timeout", min=0.1, help="Seconds to connect, see the banner and authenticate.")
ProbeTimeoutOption = typer.Option(60.0, "--probe-timeout", min=0.1, help="Seconds for the remote probe, from start to answer; also each behaviour request's deadline (at most 20) and, from both, the remote behaviour child's lifetime.")
AcceptNewHostKeyOption = typer.Option(False, "--accept-new-host-key", help="Trust an unknown host key on first use and record it.")
JobsOption = typer.Option(4, "--jobs", min=1, help="Hosts checked at once.")
FromProbeOption = typer.Option(None, "--from-probe", help="Evaluate answers of `dflash-doctor probe-script`: a file, or a directory of them.")
ImageOption = typer.Option(None, "--image", help="A container image, read without a daemon (repeatable): vllm/vllm-openai:v0.20.1, host:5000/team/vllm@sha256:..., oci:DIR or oci:DIR:TAG, docker-archive:FILE.")
SingleImageOption = typer.Option(None, "--image", help="A container image, read without a daemon: vllm/vllm-openai:v0.20.1, host:5000/team/vllm@sha256:..., oci:DIR or oci:DIR:TAG, docker-archive:FILE.")
PlatformOption = typer.Option("linux/amd64", "--platform", help="With --image: the platform to pick from a multi-platform index (os/arch or os/arch/variant).")
InsecureRegistryOption = typer.Option(None, "--insecure-registry", metavar="HOST[:PORT]", help="With --image: speak plain HTTP to this registry (repeatable).")
EngineOption = typer.Option("auto", "--engine", help="The engine whose tree is checked: auto (every engine whose package --path or --python holds, each checked; for --image the first it holds, vLLM before SGLang; vLLM for --release and --host), vllm or sglang.")
RegistryTimeoutOption = typer.Option(30.0, "--registry-timeout", min=0.1, help="With --image: seconds a registry may take to answer a request or send more of a blob.")


def image_options(platform: str, insecure: Optional[list[str]], timeout: float, progress: bool = False):
    """The shared --image options as ImageOptions (the image reference is added per target)."""
    from ..targets.image import ImageOptions

    return ImageOptions(platform=platform, insecure=tuple(insecure or ()), timeout=timeout, progress=progress)


def ssh_options(identity, known_hosts, ssh_config, connect_timeout, probe_timeout, accept_new_host_key) -> dict:
    """The shared ssh options as SshOptions keywords (--python is added with the host)."""
    return {
        "identity": identity, "known_hosts": known_hosts, "ssh_config": ssh_config,
        "connect_timeout": connect_timeout, "probe_timeout": probe_timeout, "accept_new_host_key": accept_new_host_key,
    }


def read_hosts_file(path: Path) -> list[str]:
    try:
        lines = read_file(path, MAX_HOSTS_FILE_BYTES, "hosts file").decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise ToolError(f"hosts file {path} is not UTF-8 text") from None
    hosts = ((number, line.split("#", 1)[0].strip()) for number, line in enumerate(lines, 1))
    return [check_host(host, f"hosts file {path}, line {number}") for number, host in hosts if host]


def check_host(given: str, where: str) -> str:
    """``[user@]host[:port]`` whose host a resolver can take: each dot-separated label of a
    name 1 to 63 characters (the idna codec socket uses refuses others with a UnicodeError)."""
    host = given.rpartition("@")[2]
    host = host[1:].partition("]")[0] if host.startswith("[") else host.partition(":")[0]
    try:
        host.encode("idna")
    except UnicodeError:
        raise ToolError(f"{where}: {host[:80]!r} is not a host name (each dot-separated label is 1 to 63 characters)") from None
    return given


def choose_targets(
    path: Optional[Path],
    python: Optional[str],
    release: Optional[str],
    hosts: Optional[list[str]],
    hosts_file: Optional[Path],
    from_probe: Optional[Path],
    ssh: dict,
    rules,
    images: Optional[list[str]] = None,
    image_opts=None,
    engine: str = "auto",
) -> tuple[list[tuple[str, object]], bool]:
    """The targets the options name, and whether they make a fleet (one report per host or image, or per
    engine of a local install that holds several)."""
    from ..engines import VLLM, named

    try:
        chosen = None if engine == "auto" else named(engine)
    except LookupError as exc:
        raise ToolError(f"--engine: {exc}") from None
    hosts = [check_host(host, "--host") for host in hosts or []] + (read_hosts_file(hosts_file) if hosts_file is not None else [])
    remote = bool(hosts) or hosts_file is not None
    local = [name for name, value in (("--path", path), ("--release", release), ("--from-probe", from_probe)) if value]
    if images:
        given = local + [name for name, value in (("--python", python), ("--host", remote)) if value]
        if given:
            raise ToolError(f"give --image or {given[0]}, not both")
        from ..targets.image import ImageTarget

        return [(ref, ImageTarget(ref, image_opts, chosen)) for ref in images], len(images) > 1
    if remote and local:
        raise ToolError(f"give hosts or {local[0]}, not both")
    if len(local) > 1:
        raise ToolError(f"give one target, not {' and '.join(local)}")
    if remote:
        if not hosts:
            raise ToolError(f"no hosts in {hosts_file}")
        from ..targets.probing import probe_request
        from ..targets.ssh import SshOptions, SshTarget

        options = SshOptions(python=python or "python3", **ssh)
        request = probe_request(rules, chosen or VLLM)
        targets = [(host, SshTarget(host, options, request)) for host in hosts]
        return targets, len(hosts) > 1 or hosts_file is not None
    if from_probe is not None:
        from ..targets.snapshot import ProbeFileTarget

        if from_probe.is_dir():
            files = sorted(p for p in from_probe.iterdir() if p.is_file() and not p.name.startswith("."))
            if not files:
                raise ToolError(f"no probe files in {from_probe}")
            return [(p.stem, ProbeFileTarget(p)) for p in files], True
        if not from_probe.is_file():
            raise ToolError(f"no such probe file or directory: {from_probe}")
        return [(from_probe.stem, ProbeFileTarget(from_probe))], False
    given = [name for name, value in (("--path", path), ("--python", python), ("--release", release)) if value]
    if len(given) > 1:
        raise ToolError(f"give one target, not {' and '.join(given)}")
    from ..targets.detect import local_targets

    found = local_targets(path, python or sys.executable, release, chosen)
    if len(found) == 1:
        return [("local", found[0][1])], False
    return [(f"local {each.display}", target) for each, target in found], True


def choose_target(path: Optional[Path], python: Optional[str], release: Optional[str]):
    """The one vLLM target the options name; the current interpreter when none."""
    chosen = [name for name, value in (("--path", path), ("--python", python), ("--release", release)) if value]
    if len(chosen) > 1:
        raise ToolError(f"give one target, not {' and '.join(chosen)}")
    if path is not None:
        from ..targets.path import PathTarget

        return PathTarget(path)
    if release is not None:
        from ..targets.release import ReleaseTarget

        return ReleaseTarget(release)
    from ..targets.interpreter import InterpreterTarget

    return InterpreterTarget(python or sys.executable)


def emit(text: str, output: Optional[Path]) -> None:
    """The report to ``output`` (atomically) or to standard output."""
    if output is not None:
        write_atomically(output, text)
    else:
        sys.stdout.write(text)
