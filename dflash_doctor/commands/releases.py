from __future__ import annotations

import sys
from enum import Enum
from typing import Optional

import typer

from ..terminal import clean
from ..engines import DEFAULT_ENGINE, ENGINE_NAMES
from .options import FullWheelOption


class MatrixFormat(str, Enum):
    table = "table"
    json = "json"
    markdown = "markdown"


def releases(
    first: Optional[str] = typer.Option(
        None,
        "--from",
        help=(
            "Oldest release in the matrix (default: the last without DFlash, before the engine's first with it: "
            "vLLM 0.20.0, SGLang 0.5.11)."
        ),
    ),
    last: Optional[str] = typer.Option(
        None, "--to", help="Newest release in the matrix (default: the newest on the index)."
    ),
    format: MatrixFormat = typer.Option(MatrixFormat.table, "--format", help="table, json or markdown."),
    offline: bool = typer.Option(
        False,
        "--offline",
        help="Do not ask the package index: only releases already in the cache (without it, an index that cannot be "
        "reached is an error).",
    ),
    full_wheel: bool = FullWheelOption,
    engine: str = typer.Option(DEFAULT_ENGINE.name, "--engine", help=f"Whose releases: {ENGINE_NAMES}."),
) -> int:
    """Check every release: the release x fix matrix. Each real wheel is checked (four at a time); the first
    release with each fix is named.

    Exit: 0 the matrix was computed, 3 it could not be (the package index cannot be reached: --offline uses the
    cache; a release that could not be checked).
    """
    from .. import api
    from ..releases import render_markdown, render_plain, render_terminal
    from ..terminal import columns

    def said(line: str) -> None:
        print(f"dflash-doctor: {line}", file=sys.stderr)

    matrix = api.releases(api.ReleasesRequest(first, last, offline, full_wheel, engine), said)
    rows = matrix.rows
    if format is MatrixFormat.json:
        import json

        text = json.dumps(matrix.to_json(), indent=2) + "\n"
    elif format is MatrixFormat.markdown:
        text = render_markdown(matrix)
    else:
        text = render_terminal(matrix, columns()) if sys.stdout.isatty() else render_plain(matrix)
    sys.stdout.write(text)
    failed = [row for row in rows if row.error]
    if failed:
        first_error = failed[0]
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        print(
            f"dflash-doctor: error: release {clean(first_error.release)} could not be checked: "
            f"{clean(first_error.error)}{more}",
            file=sys.stderr,
        )
    return matrix.exit_code


def register(app: typer.Typer) -> None:
    app.command()(releases)
