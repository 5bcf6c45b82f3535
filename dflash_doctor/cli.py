"""Command line entry point. Each command lives in dflash_doctor/commands/."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from . import __version__
from .commands import register_all
from .model import EXIT_ERROR, EXIT_OK, ToolError

app = typer.Typer(
    name="dflash-doctor",
    help="Tell whether a vLLM install runs DFlash speculative decoding correctly.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"dflash-doctor {__version__}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """Tell whether a vLLM install runs DFlash speculative decoding correctly."""


register_all(app)


def main(argv: Optional[list[str]] = None) -> None:
    command = typer.main.get_command(app)
    try:
        code = command.main(args=argv, prog_name="dflash-doctor", standalone_mode=False)
    except ToolError as exc:
        print(f"dflash-doctor: error: {exc}", file=sys.stderr)
        code = EXIT_ERROR
    except typer.Exit as exc:  # --help, --version
        code = exc.exit_code
    except typer.Abort:
        print("dflash-doctor: aborted", file=sys.stderr)
        code = EXIT_ERROR
    except KeyboardInterrupt:
        print("dflash-doctor: interrupted", file=sys.stderr)
        code = EXIT_ERROR
    except Exception as exc:
        # Usage errors come from the click that typer carries (vendored in
        # newer typer): recognised by their interface, not their module.
        if not hasattr(exc, "format_message"):
            raise
        print(f"dflash-doctor: error: {exc.format_message()}", file=sys.stderr)
        code = EXIT_ERROR
    sys.exit(code if isinstance(code, int) else EXIT_OK)
