from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from ..engines import DEFAULT_ENGINE, ENGINE_NAMES
from .options import emit


class LintFormat(str, Enum):
    table = "table"
    json = "json"


def config(
    path: Path = typer.Argument(
        ..., metavar="PATH", help="The drafter's config.json, or the model directory holding it."
    ),
    target_config: Optional[Path] = typer.Option(
        None, "--target-config", help="The target model's config.json (or directory), to range-check the layer ids."
    ),
    engine: str = typer.Option(
        "auto",
        "--engine",
        help="The engine that serves the drafter: auto (the engine whose --launch-flags they are, else "
        f"{DEFAULT_ENGINE.display}), {ENGINE_NAMES}.",
    ),
    launch_flags: Optional[str] = typer.Option(
        None,
        "--launch-flags",
        help="The server's launch flags, linted with the drafter (SGLang's): the flags themselves, quoted, e.g. "
        '"--speculative-algorithm DFLASH --speculative-num-draft-tokens 16", or @FILE, a file holding the launch '
        "command.",
    ),
    format: LintFormat = typer.Option(LintFormat.table, "--format", help="table or json."),
    output: Optional[Path] = typer.Option(
        None, "--output", help="Write the report to this file instead of standard output."
    ),
) -> int:
    """Lint a DFlash drafter config. Checks its format, layer ids, layer types, windows, mask token,
    block size and causality; for SGLang (--engine sglang, or its --launch-flags) also what SGLang reads of it
    and its launch flags.

    Exit: 0 no error finding, 1 any error finding, 3 could not run (file missing or not a JSON object,
    launch flags that cannot be read or split, or no engine's).
    """
    from .. import __version__
    from ..draft.launch import read_launch_flags
    from ..draft.lint import lint_engine, lint_report
    from ..draft.render import DraftSection

    flags = None if launch_flags is None else read_launch_flags(launch_flags)
    report = lint_report(path, target_config, lint_engine(engine, flags), flags)
    section = DraftSection(report)
    if format is LintFormat.json:
        document = {
            "schema": "dflash-doctor/config/v1",
            "tool_version": __version__,
            "draft": section.to_json(),
            "exit_code": report.exit_code,
        }
        text = json.dumps(document, indent=2) + "\n"
    elif output is None and sys.stdout.isatty():
        text = section.table()
    else:
        text = "\n".join(section.lines()) + "\n"
    emit(text, output)
    return report.exit_code


def register(app: typer.Typer) -> None:
    app.command()(config)
