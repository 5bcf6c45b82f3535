"""Which targets a request names: one install, or a fleet of hosts, images or probe files.

``TargetSpec`` is what a user gives (the CLI's target options, or a script's
request to ``dflash_doctor.api``); ``select_targets`` turns it into targets,
refusing combinations that name two kinds at once.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING


from ..model import ToolError, from_option
from ..paths import read_file
from .hosts import SshOptions
from .image import ImageOptions

if TYPE_CHECKING:
    from ..engines import Engine
    from ..rules import Rule
    from . import Target

MAX_HOSTS_FILE_BYTES = 1024 * 1024


@dataclasses.dataclass(frozen=True)
class TargetSpec:
    """What to check: at most one kind of target. ``python`` is the local interpreter, or
    with hosts the remote one; ``ssh.python`` is not read (``python`` says it)."""

    path: Path | None = None
    python: str | None = None
    release: str | None = None
    hosts: tuple[str, ...] = ()
    hosts_file: Path | None = None
    from_probe: Path | None = None
    images: tuple[str, ...] = ()
    ssh: SshOptions = SshOptions()
    image: ImageOptions = ImageOptions()
    engine: str = "auto"  # auto: every engine a local install, a host or an image holds; vLLM for releases


def select_targets(spec: TargetSpec, rules: tuple[Rule, ...]) -> tuple[list[tuple[str, Target]], bool]:
    """The targets the spec names, each with its name, and whether they make a fleet (one report per host or
    image, or per engine of a local install that holds several). A host or an image holding several engines
    is told apart when it is opened (``targets.per_engine``)."""
    chosen = None if spec.engine == "auto" else from_option(spec.engine)
    hosts = [check_host(host, "--host") for host in spec.hosts]
    hosts += read_hosts_file(spec.hosts_file) if spec.hosts_file is not None else []
    remote = bool(hosts) or spec.hosts_file is not None
    local = [
        name
        for name, value in (("--path", spec.path), ("--release", spec.release), ("--from-probe", spec.from_probe))
        if value
    ]
    if spec.images:
        given = local + [name for name, value in (("--python", spec.python), ("--host", remote)) if value]
        if given:
            raise ToolError(f"give --image or {given[0]}, not both")
        from .image import ImageTarget

        return [(ref, ImageTarget(ref, spec.image, chosen)) for ref in spec.images], len(spec.images) > 1
    if remote and local:
        raise ToolError(f"give hosts or {local[0]}, not both")
    if len(local) > 1:
        raise ToolError(f"give one target, not {' and '.join(local)}")
    if remote:
        if not hosts:
            raise ToolError(f"no hosts in {spec.hosts_file}")
        return [(host, ssh_target(host, spec, rules, chosen)) for host in hosts], len(
            hosts
        ) > 1 or spec.hosts_file is not None
    if spec.from_probe is not None:
        return _probe_files(spec.from_probe)
    given = [
        name for name, value in (("--path", spec.path), ("--python", spec.python), ("--release", spec.release)) if value
    ]
    if len(given) > 1:
        raise ToolError(f"give one target, not {' and '.join(given)}")
    from .detect import local_targets

    found = local_targets(spec.path, spec.python or sys.executable, spec.release, chosen)
    if len(found) == 1:
        return [("local", found[0][1])], False
    return [(f"local {each.display}", target) for each, target in found], True


def ssh_target(host: str, spec: TargetSpec, rules: tuple[Rule, ...], engine: Engine | None = None) -> Target:
    """One host's target: its collector asks for ``engine``'s package; when none is named, for the
    first registered engine's, and which of the others' packages the host holds (each is checked too)."""
    from ..engines import ENGINES
    from .probing import probe_request
    from .ssh import SshTarget

    options = dataclasses.replace(spec.ssh, python=spec.python or "python3")
    first, *others = (engine,) if engine is not None else tuple(ENGINES.values())
    return SshTarget(host, options, probe_request(rules, first), tuple(probe_request(rules, each) for each in others))


def _probe_files(from_probe: Path) -> tuple[list[tuple[str, Target]], bool]:
    from .snapshot import ProbeFileTarget

    if from_probe.is_dir():
        files = sorted(p for p in from_probe.iterdir() if p.is_file() and not p.name.startswith("."))
        if not files:
            raise ToolError(f"no probe files in {from_probe}")
        return [(p.stem, ProbeFileTarget(p)) for p in files], True
    if not from_probe.is_file():
        raise ToolError(f"no such probe file or directory: {from_probe}")
    return [(from_probe.stem, ProbeFileTarget(from_probe))], False


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
        raise ToolError(
            f"{where}: {host[:80]!r} is not a host name (each dot-separated label is 1 to 63 characters)"
        ) from None
    return given
