from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

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
    format: LintFormat = typer.Option(LintFormat.table, "--format", help="table or json."),
    output: Optional[Path] = typer.Option(
        None, "--output", help="Write the report to this file instead of standard output."
    ),
) -> int:
    """Lint a DFlash drafter config. Checks its format, layer ids, layer types, windows, mask token,
    block size and causality.

    Exit: 0 no error finding, 1 any error finding, 3 could not run (file missing or not a JSON object).
    """
    from .. import __version__
    from ..draft.lint import lint_report
    from ..draft.render import DraftSection

    report = lint_report(path, target_config)
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
