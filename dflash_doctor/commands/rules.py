from __future__ import annotations

import sys

import typer

from ..engines import DEFAULT_ENGINE, ENGINE_NAMES
from ..model import EXIT_MISSING, EXIT_OK, exit_code_for

rules_app = typer.Typer(help="List, show and test the rules.", no_args_is_help=True, rich_markup_mode=None)


@rules_app.command("list")
def rules_list() -> int:
    """One line per rule: id, engine, PRs, title."""
    from ..rulefile import load_rules

    rows = [
        (rule.id, rule.engine, ", ".join(f"#{pr}" for pr in rule.prs + rule.unmerged_prs), rule.title)
        for rule in load_rules()
    ]
    if not sys.stdout.isatty():  # one line per rule, for grep and scripts
        for fix_id, engine, prs, title in rows:
            typer.echo(f"{fix_id:<14} {engine:<8} {prs:<32} {title}")
        return EXIT_OK
    from rich.table import Table

    from ..terminal import literal, terminal_text

    table = Table(box=None, padding=(0, 2, 0, 0), header_style="bold")
    table.add_column("id", no_wrap=True)
    table.add_column("engine", no_wrap=True)
    table.add_column("PRs")
    table.add_column("title")
    for row in rows:
        table.add_row(*map(literal, row))
    typer.echo(terminal_text(table), nl=False)
    return EXIT_OK


@rules_app.command("show")
def rules_show(
    fix_id: str = typer.Argument(..., metavar="ID"),
    engine: str = typer.Option(DEFAULT_ENGINE.name, "--engine", help=f"Whose rule of this fix: {ENGINE_NAMES}."),
) -> int:
    """Show one rule. What it checks, why it matters, the forms it knows, the remedy."""
    from ..docs import rule_markdown
    from ..model import from_option
    from ..model import ToolError
    from ..rulefile import select

    chosen = from_option(engine).name
    mine = [rule for rule in select([fix_id]) if rule.engine == chosen]
    if not mine:
        raise ToolError(f"no rule of {fix_id} describes {chosen}'s code")
    text = rule_markdown(mine[0])
    if sys.stdout.isatty():  # rendered for the terminal; piped, the Markdown itself
        from ..terminal import markdown, terminal_text

        text = terminal_text(markdown(text))
    typer.echo(text, nl=False)
    return EXIT_OK


@rules_app.command("test")
def rules_test() -> int:
    """Run every rule's own snippets; a rule without cases fails (exit 1)."""
    from ..rulestest import run_rule_cases

    codes = []
    for line, ok in run_rule_cases():
        codes.append(EXIT_OK if ok else EXIT_MISSING)
        typer.echo(("ok    " if ok else "FAIL  ") + line)
    return exit_code_for(codes)


def register(app: typer.Typer) -> None:
    app.add_typer(rules_app, name="rules")
