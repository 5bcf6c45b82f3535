"""Command line: ``dflash-doctor check | rules``. Exit codes are in model.py."""

from __future__ import annotations

import os
import sys
import tempfile
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from .model import EXIT_ERROR, EXIT_MISSING, EXIT_OK, ToolError

app = typer.Typer(
    name="dflash-doctor",
    help="Tell whether a vLLM install runs DFlash speculative decoding correctly.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
rules_app = typer.Typer(help="List, show and test the rules.", no_args_is_help=True)
app.add_typer(rules_app, name="rules")


class Format(str, Enum):
    table = "table"
    json = "json"


def _target(path: Optional[Path], python: Optional[str], release: Optional[str]):
    chosen = [name for name, value in (("--path", path), ("--python", python), ("--release", release)) if value]
    if len(chosen) > 1:
        raise ToolError(f"give one target, not {' and '.join(chosen)}")
    if path is not None:
        from .targets.path import PathTarget

        return PathTarget(path)
    if release is not None:
        from .targets.release import ReleaseTarget

        return ReleaseTarget(release)
    from .targets.interpreter import InterpreterTarget

    return InterpreterTarget(python or sys.executable)


def write_atomically(path: Path, text: str) -> None:
    """Write a whole file or nothing: temp file in the same directory, then rename."""
    directory = path.parent if str(path.parent) else Path(".")
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    except OSError as exc:
        raise ToolError(f"cannot write {path}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except OSError as exc:
        Path(temp).unlink(missing_ok=True)
        raise ToolError(f"cannot write {path}: {exc.strerror}") from None


@app.command()
def check(
    path: Optional[Path] = typer.Option(None, "--path", help="site-packages, a source checkout, or the vllm directory."),
    python: Optional[str] = typer.Option(None, "--python", help="Interpreter whose environment holds vllm (never imported)."),
    release: Optional[str] = typer.Option(None, "--release", help="Check a released wheel, e.g. 0.20.1 (downloaded once)."),
    only: Optional[list[str]] = typer.Option(None, "--only", help="Check only this fix id (repeatable)."),
    format: Format = typer.Option(Format.table, "--format", help="table or json."),
    output: Optional[Path] = typer.Option(None, "--output", help="Write the report to this file instead of standard output."),
) -> int:
    """Check whether the three DFlash fixes are in a vLLM tree. Exit: 0 all present,
    1 any absent/partial/not-applicable, 2 otherwise any unknown, 3 could not run."""
    from .check import run_check
    from .reporters import reporter
    from .rules import select

    rules = select(only)
    report = run_check(_target(path, python, release), rules)
    text = reporter(format.value).render(report, terminal=output is None and sys.stdout.isatty())
    if output is not None:
        write_atomically(output, text)
    else:
        sys.stdout.write(text)
    return report.exit_code


@rules_app.command("list")
def rules_list() -> int:
    """One line per rule: id, PRs, title."""
    from .rules import load_rules

    for rule in load_rules():
        prs = ", ".join(f"#{pr}" for pr in rule.prs)
        typer.echo(f"{rule.id:<14} {prs:<28} {rule.title}")
    return EXIT_OK


@rules_app.command("show")
def rules_show(fix_id: str = typer.Argument(..., metavar="ID")) -> int:
    """What the rule checks, why it matters, the forms it knows, the remedy."""
    from .docs import rule_markdown
    from .rules import select

    typer.echo(rule_markdown(select([fix_id])[0]))
    return EXIT_OK


@rules_app.command("test")
def rules_test() -> int:
    """Run every rule's own snippets; a rule without cases fails."""
    from .rulestest import run_rule_cases

    failures = 0
    for line, ok in run_rule_cases():
        failures += not ok
        typer.echo(("ok    " if ok else "FAIL  ") + line)
    return EXIT_OK if failures == 0 else EXIT_MISSING


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
