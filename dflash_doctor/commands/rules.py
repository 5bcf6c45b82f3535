from __future__ import annotations

import typer

from ..model import EXIT_MISSING, EXIT_OK, exit_code_for

rules_app = typer.Typer(help="List, show and test the rules.", no_args_is_help=True, rich_markup_mode=None)


@rules_app.command("list")
def rules_list() -> int:
    """One line per rule: id, PRs, title."""
    from ..rulefile import load_rules

    for rule in load_rules():
        prs = ", ".join(f"#{pr}" for pr in rule.prs + rule.unmerged_prs)
        typer.echo(f"{rule.id:<14} {prs:<32} {rule.title}")
    return EXIT_OK


@rules_app.command("show")
def rules_show(fix_id: str = typer.Argument(..., metavar="ID")) -> int:
    """Show one rule. What it checks, why it matters, the forms it knows, the remedy.
    """
    from ..docs import rule_markdown
    from ..rulefile import select

    typer.echo(rule_markdown(select([fix_id])[0]), nl=False)
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
