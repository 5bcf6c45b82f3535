from __future__ import annotations

import dataclasses
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from ..engines import ENGINE_NAMES
from .options import (
    IMAGE,
    SSH,
    OnlyOption,
    PathOption,
    PythonOption,
    ReleaseOption,
    SingleHostOption,
    SingleImageOption,
    emit,
    expand,
    target_spec,
)

if TYPE_CHECKING:
    from ..targets.hosts import SshOptions
    from ..targets.image import ImageOptions


class Format(str, Enum):
    table = "table"
    json = "json"


def ancestry(
    repo: Path = typer.Option(..., "--repo", help="A vLLM or SGLang clone to judge the commit in."),
    commit: Optional[str] = typer.Option(
        None,
        "--commit",
        help="Commit to judge: full or short sha, or a ref. Default: the target's recorded build commit.",
    ),
    path: Optional[Path] = PathOption,
    python: Optional[str] = PythonOption,
    release: Optional[str] = ReleaseOption,
    only: Optional[list[str]] = OnlyOption,
    pr: Optional[list[int]] = typer.Option(None, "--pr", help="Only this PR (repeatable; any PR number)."),
    main_ref: Optional[str] = typer.Option(
        None,
        "--main-ref",
        help="The main line whose first-parent commits end in (#N). Default: origin/main, else main.",
    ),
    remote: str = typer.Option(
        "origin",
        "--remote",
        help="The clone's remote (by name) for --fetch and fetch hints; https, ssh or file URLs only.",
    ),
    fetch: bool = typer.Option(
        False, "--fetch", help="Fetch refs/pull/N/head and the main branch from --remote first (otherwise no network)."
    ),
    format: Format = typer.Option(Format.table, "--format", help="table or json."),
    output: Optional[Path] = typer.Option(
        None, "--output", help="Write the report to this file instead of standard output."
    ),
    host: Optional[str] = SingleHostOption,
    ssh: SshOptions = SSH,
    image: Optional[str] = SingleImageOption,
    image_options: ImageOptions = IMAGE,
    engine: str = typer.Option(
        "auto",
        "--engine",
        help="Whose PRs are judged: auto (the engine whose package the clone holds at the commit: vllm/, or "
        f"python/sglang/), {ENGINE_NAMES}. Also chooses the target's engine.",
    ),
) -> int:
    """Say whether a commit contains each fix's PR. Decided with git: merge commit, patch-id, merge-tree.

    Exit: 0 all contained, 1 any missing, 2 otherwise any unknown, 3 could not run.
    """
    import json

    from .. import api
    from ..ancestry import render

    spec = target_spec(
        path,
        python,
        release,
        [host] if host else None,
        images=[image] if image else None,
        ssh=ssh,
        image=dataclasses.replace(image_options, progress=sys.stderr.isatty()),
        engine=engine,
    )
    report = api.ancestry(
        api.AncestryRequest(repo, commit, spec, tuple(only or ()), tuple(pr or ()), main_ref, remote, fetch)
    )
    if format is Format.json:
        text = json.dumps(report.to_json(), indent=2) + "\n"
    else:
        text = render(report, terminal=output is None and sys.stdout.isatty())
    emit(text, output)
    return report.exit_code


def register(app: typer.Typer) -> None:
    app.command()(expand(ancestry))
