"""Command line entry point. Each command lives in dflash_doctor/commands/."""

from __future__ import annotations

import os
import sys
import textwrap
import traceback
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Optional, Protocol, TypeGuard, TypeVar

import typer

from . import __version__
from .commands import register_all
from .engines import ENGINES
from .model import EXIT_ERROR, EXIT_OK, ToolError
from .terminal import clean

HELP_MAX_WIDTH = 120  # help uses the terminal's width up to this (click's default stops at 80)

if TYPE_CHECKING:  # the class _UnbrokenWords is mixed into (whichever click typer carries)
    import click
    from click import HelpFormatter as _Formatter
else:
    _Formatter = object


class _UnbrokenWords(_Formatter):
    """Mixed into click's help formatter: a hyphenated word (`not-applicable`, `probe-script`) or a
    long path is never split across lines; paragraphs are filled here and handed on as `\\b` blocks."""

    def write_text(self, text: str) -> None:
        super().write_text(_filled(text, self.width - self.current_indent))

    def write_dl(self, rows: Iterable[tuple[str, str]], col_max: int = 30, col_spacing: int = 2) -> None:
        rows = list(rows)
        first_col = min(max((len(first) for first, _ in rows), default=0), col_max) + col_spacing
        width = max(self.width - first_col - 2, 10)  # the description width click's write_dl uses
        super().write_dl([(first, _filled(second, width)) for first, second in rows], col_max, col_spacing)


def _filled(text: str, width: int) -> str:
    """Each paragraph filled to ``width`` and marked ``\\b`` so that click keeps its lines."""
    paragraphs = []
    for paragraph in text.split("\n\n"):
        lines = paragraph.splitlines()
        if lines and lines[0].strip() == "\b":  # already laid out by hand
            paragraphs.append(paragraph)
        elif paragraph.strip():
            filled = textwrap.fill(" ".join(paragraph.split()), width, break_on_hyphens=False, break_long_words=False)
            paragraphs.append("\b\n" + filled)
    return "\n\n".join(paragraphs)


class _Command(Protocol):
    context_class: type[Any]  # a click Context class, from whichever click typer carries


_C = TypeVar("_C", bound=_Command)


def _with_help_formatter(command: _C) -> _C:
    """Every command's help through _UnbrokenWords. The classes come from the command itself: typer
    0.28 carries its own click, older typers use the installed one."""
    base = command.context_class
    formatter = type("HelpFormatter", (_UnbrokenWords, base.formatter_class), {})
    context = type("HelpContext", (base,), {"formatter_class": formatter})

    def install(node: _Command) -> None:  # a command's own context formats its help
        node.context_class = context
        for sub in getattr(node, "commands", {}).values():
            install(sub)

    install(command)
    return command


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"dflash-doctor {__version__}")
        raise typer.Exit(EXIT_OK)


def _root(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
    debug: bool = typer.Option(False, "--debug", help="On an internal error, print the traceback too."),
) -> None:
    """Tell whether an engine's install runs DFlash speculative decoding correctly (``_app`` names the engines)."""
    # --debug is declared here for --help and parsing; main() reads it from the words (see _debug_requested).


def _app(name: str | None = None) -> typer.Typer:
    """The app with every command, or with ``name``'s alone (see ``register_all``)."""
    app = typer.Typer(
        name="dflash-doctor",
        help=f"Tell whether a {' or '.join(engine.display for engine in ENGINES.values())} install runs DFlash "
        "speculative decoding correctly.",
        no_args_is_help=True,
        add_completion=True,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,  # click's help: paragraphs rewrapped to the terminal, descriptions get the width
        context_settings={"max_content_width": HELP_MAX_WIDTH},
    )
    app.callback()(_root)
    register_all(app, name)
    return app


def __getattr__(name: str) -> typer.Typer:
    """``cli.app``: the app with every command (its help, the docs' checks); ``main`` builds
    only the command it runs."""
    if name == "app":
        return _app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _fail(message: str) -> int:
    """One line on standard error, whatever the message holds; exit code 3."""
    print(f"dflash-doctor: {clean(message)}", file=sys.stderr)
    return EXIT_ERROR


def main(argv: Optional[list[str]] = None) -> None:
    """The one error boundary: a verdict exits 0/1/2, anything else exits 3 with one line."""
    args = sys.argv[1:] if argv is None else argv
    command = _with_help_formatter(typer.main.get_command(_app(_command_word(args))))
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
        if _no_command_given(exc):  # `dflash-doctor`, `dflash-doctor rules`: the help, as --help shows it
            typer.echo(exc.ctx.get_help())
            code = EXIT_OK
        elif hasattr(exc, "format_message"):
            code = _fail(f"error: {exc.format_message()}")
        else:
            debug = _debug_requested(args)
            if debug:
                traceback.print_exc()
            detail = f": {exc}" if str(exc) else ""
            hint = "" if debug else " (dflash-doctor --debug ... shows the traceback)"
            code = _fail(f"internal error: {type(exc).__name__}{detail}{hint}")
    sys.exit(code if isinstance(code, int) else EXIT_OK)


class _NoCommandGiven(Protocol):
    ctx: click.Context


def _no_command_given(exc: BaseException) -> TypeGuard[_NoCommandGiven]:
    """click's NoArgsIsHelpError, from whichever click typer carries (a usage error to click, exit 0 here)."""
    return any(cls.__name__ == "NoArgsIsHelpError" for cls in type(exc).__mro__) and hasattr(exc, "ctx")


def _output_closed() -> int:
    """Nothing more goes to a reader that left (not even Python's flush at exit)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return _fail("error: standard output was closed before all of it was written")


def _command_word(args: list[str]) -> str | None:
    """The command the words name: the first that is not an option (the app's own options take no value)."""
    return next((word for word in args if not word.startswith("-")), None)


def _debug_requested(args: list[str]) -> bool:
    """--debug given before the command (read from the words: the parse may be what failed)."""
    for word in args:
        if word == "--debug":
            return True
        if not word.startswith("-"):
            return False
    return False
