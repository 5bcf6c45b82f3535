from __future__ import annotations

import dataclasses
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from ..model import ToolError
from ..reporters import FORMATS
from ..terminal import clean
from .options import (
    IMAGE,
    SSH,
    EngineOption,
    FromProbeOption,
    FullWheelOption,
    HostOption,
    HostsFileOption,
    ImageOption,
    JobsOption,
    OnlyOption,
    PathOption,
    PythonOption,
    ReleaseOption,
    expand,
    target_spec,
)

if TYPE_CHECKING:
    from ..rules import Rule
    from ..targets.hosts import SshOptions
    from ..targets.image import ImageOptions


# --format's choices: the reporter registry's names.
Format = Enum("Format", [(name, name) for name in FORMATS], type=str)  # type: ignore[misc]  # members from the registry


def parse_outputs(default_format: str, specs: list[str]) -> list[tuple[str, Path]]:
    """``FORMAT=FILE`` pairs; a bare path is the ``--format`` report. Checked before the run."""
    outputs: list[tuple[str, Path]] = []
    for spec in specs:
        name, sep, rest = spec.partition("=")
        if sep and name.isalpha():  # FORMAT=FILE (a bare path holding "=" can be written ./a=b)
            if name not in FORMATS:
                raise ToolError(f"--output {spec}: unknown report format {name!r} (formats: {', '.join(FORMATS)})")
            if not rest:
                raise ToolError(f"--output {spec}: no file after {name}=")
            outputs.append((name, Path(rest)))
        else:
            outputs.append((default_format, Path(spec)))
    formats = [name for name, _ in outputs]
    twice = sorted({name for name in formats if formats.count(name) > 1})
    if twice:
        raise ToolError(f"--output names the {twice[0]} report twice (a bare path is the --format report)")
    paths = [str(path.resolve()) for _, path in outputs]
    if len(set(paths)) != len(paths):
        raise ToolError("--output names the same file for two reports")
    return outputs


def _warm_up(rules: tuple[Rule, ...]) -> None:
    """Import the engine and compile the patterns while ssh waits on the network."""
    from ..structure.forms import warm_up

    warm_up(rules)


def check(
    path: Optional[Path] = PathOption,
    python: Optional[str] = PythonOption,
    release: Optional[str] = ReleaseOption,
    full_wheel: bool = FullWheelOption,
    only: Optional[list[str]] = OnlyOption,
    format: Format = typer.Option(
        Format["table"], "--format", help="Report on standard output (or in the bare --output path)."
    ),
    output: Optional[list[str]] = typer.Option(
        None,
        "--output",
        metavar="[FORMAT=]FILE",
        help="Write a report to a file, atomically (repeatable): json=report.json, sarif=report.sarif, "
        "junit=junit.xml, table=report.txt; a bare path takes the --format report instead of standard output.",
    ),
    waivers: Optional[Path] = typer.Option(
        None, "--waivers", help="TOML file of accepted gaps: waived fixes do not fail the gate."
    ),
    strict: bool = typer.Option(False, "--strict", help="unknown fails the gate like absent (exit 1)."),
    host: Optional[list[str]] = HostOption,
    hosts_file: Optional[Path] = HostsFileOption,
    ssh: SshOptions = SSH,
    jobs: int = JobsOption,
    from_probe: Optional[Path] = FromProbeOption,
    image: Optional[list[str]] = ImageOption,
    image_options: ImageOptions = IMAGE,
    repo: Optional[Path] = typer.Option(
        None, "--repo", help="A vLLM clone: add which PRs the target's build commit contains (see `ancestry`)."
    ),
    main_ref: Optional[str] = typer.Option(
        None, "--main-ref", help="With --repo: the main line (default origin/main, else main)."
    ),
    engine: str = EngineOption,
    draft_config: Optional[Path] = typer.Option(
        None,
        "--draft-config",
        help="The drafter's config.json (or its directory): lint it, probe what this vLLM computes for it, and gate "
        "only on fixes whose defect can reach it.",
    ),
    target_config: Optional[Path] = typer.Option(
        None,
        "--target-config",
        help="With --draft-config: the target model's config.json, for the layer range and the target architecture.",
    ),
) -> int:
    """Check whether the DFlash fixes are in a vLLM or SGLang tree.

    Exit: 0 all present (or waived, or whose defect cannot reach the --draft-config drafter), 1 any
    absent/partial/not-applicable (or unknown with --strict), 2 otherwise any unknown, 3 could not run.
    """
    from .. import api
    from ..check import for_this_process
    from ..paths import write_atomically
    from ..reporters import reporter
    from ..waivers import waiver_summary

    for_this_process()  # the command ends the process: no collector pass over the trees between its checks
    outputs = parse_outputs(format.value, output or [])
    # One image on a terminal shows a bar per layer; a fleet shows its own progress.
    spec = target_spec(
        path,
        python,
        release,
        host,
        hosts_file,
        from_probe,
        image,
        ssh=ssh,
        image=dataclasses.replace(image_options, progress=sys.stderr.isatty() and len(image or []) == 1),
        engine=engine,
    )
    request = api.CheckRequest(
        spec,
        tuple(only or ()),
        strict,
        waivers,
        repo,
        main_ref,
        draft_config,
        target_config,
        jobs,
        full_wheel,
        progress=sys.stderr.isatty(),
    )
    # Hosts the results cache cannot answer need the engine: imported while the others' round trips go on
    # (one host's check that the cache answers never imports it: not warmed up for one host).
    result = api.check(request, warm_up=_warm_up)
    if result.fleet:
        render = lambda name, terminal: reporter(name).render_fleet(list(result.outcomes), terminal)  # noqa: E731
    else:
        render = lambda name, terminal: reporter(name).render(result.reports[0], terminal)  # noqa: E731
    rendered = [(file, render(name, False)) for name, file in outputs]
    for file, text in rendered:
        write_atomically(file, text)
    if not any(name == format.value for name, _ in outputs):
        sys.stdout.write(render(format.value, sys.stdout.isatty()))
    for report in result.reports:
        for line in waiver_summary(report):
            print(f"dflash-doctor: {clean(line)}", file=sys.stderr)
    return result.exit_code


def register(app: typer.Typer) -> None:
    app.command()(expand(check))
