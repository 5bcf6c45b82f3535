from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from .options import OnlyOption, PathOption, PythonOption, ReleaseOption, choose_target, emit


class Format(str, Enum):
    table = "table"
    json = "json"


def check(
    path: Optional[Path] = PathOption,
    python: Optional[str] = PythonOption,
    release: Optional[str] = ReleaseOption,
    only: Optional[list[str]] = OnlyOption,
    format: Format = typer.Option(Format.table, "--format", help="table or json."),
    output: Optional[Path] = typer.Option(None, "--output", help="Write the report to this file instead of standard output."),
) -> int:
    """Check whether the three DFlash fixes are in a vLLM tree. Exit: 0 all present,
    1 any absent/partial/not-applicable, 2 otherwise any unknown, 3 could not run."""
    from ..check import run_check
    from ..reporters import reporter
    from ..rules import select

    rules = select(only)
    report = run_check(choose_target(path, python, release), rules)
    emit(reporter(format.value).render(report, terminal=output is None and sys.stdout.isatty()), output)
    return report.exit_code


def register(app: typer.Typer) -> None:
    app.command()(check)
