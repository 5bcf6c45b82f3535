"""Commands register themselves on the app; modules stay light at import
(heavy imports happen inside the command functions)."""

from __future__ import annotations

import typer


def register_all(app: typer.Typer) -> None:
    from . import check, rules

    for module in (check, rules):
        module.register(app)
