"""Commands register themselves on the app; modules stay light at import
(heavy imports happen inside the command functions)."""

from __future__ import annotations

import typer


def register_all(app: typer.Typer) -> None:
    from . import accept, ancestry, check, config, patch, probe, releases, rules

    for module in (check, rules, accept, probe, releases, ancestry, config, patch):
        module.register(app)
