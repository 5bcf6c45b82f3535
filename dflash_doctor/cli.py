"""Command line entry point. Each command lives in dflash_doctor/commands/."""

from __future__ import annotations

import os
import sys
import traceback
from typing import Optional

import typer

from . import __version__
from .commands import register_all
from .model import EXIT_ERROR, EXIT_OK, ToolError
from .terminal import clean

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
    debug: bool = typer.Option(False, "--debug", help="On an internal error, print the traceback too."),
) -> None:
    """Tell whether a vLLM install runs DFlash speculative decoding correctly."""
    # --debug is declared here for --help and parsing; main() reads it from the words (see _debug_requested).


register_all(app)


def _fail(message: str) -> int:
    """One line on standard error, whatever the message holds; exit code 3."""
    print(f"dflash-doctor: {clean(message)}", file=sys.stderr)
    return EXIT_ERROR


def main(argv: Optional[list[str]] = None) -> None:
    """The one error boundary: a verdict exits 0/1/2, anything else exits 3 with one line."""
    args = sys.argv[1:] if argv is None else argv
    command = typer.main.get_command(app)
    try:
        code = command.main(args=args, prog_name="dflash-doctor", standalone_mode=False)
        sys.stdout.flush()  # a reader that left shows here, not as a traceback at exit
    except ToolError as exc:
        code = _fail(f"error: {exc}")
    except typer.Exit as exc:  # --help, --version
        code = exc.exit_code
    except typer.Abort:
        code = _fail("aborted")
    except KeyboardInterrupt:
        code = _fail("interrupted")
    except BrokenPipeError:  # `dflash-doctor check | head -1`: the reader left
        code = _output_closed()
    except SystemExit as exc:  # from click or typer themselves (completion, EPIPE); exit 1 is for verdicts only
        if isinstance(exc.__context__, BrokenPipeError):  # click answers EPIPE with sys.exit(1)
            code = _output_closed()
        else:
            code = EXIT_OK if exc.code in (0, None) else EXIT_ERROR
    except BaseException as exc:  # noqa: BLE001 - the boundary: never a bare traceback, never exit 1
        # Usage errors come from the click that typer carries (vendored in
        # newer typer): recognised by their interface, not their module.
        if hasattr(exc, "format_message"):
            code = _fail(f"error: {exc.format_message()}")
        else:
            debug = _debug_requested(args)
            if debug:
                traceback.print_exc()
            detail = f": {exc}" if str(exc) else ""
            hint = "" if debug else " (dflash-doctor --debug ... shows the traceback)"
            code = _fail(f"internal error: {type(exc).__name__}{detail}{hint}")
    sys.exit(code if isinstance(code, int) else EXIT_OK)


def _output_closed() -> int:
    """Nothing more goes to a reader that left (not even Python's flush at exit)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return _fail("error: standard output was closed before all of it was written")


def _debug_requested(args: list[str]) -> bool:
    """--debug given before the command (read from the words: the parse may be what failed)."""
    for word in args:
        if word == "--debug":
            return True
        if not word.startswith("-"):
            return False
    return False
