"""Commands register themselves on the app; modules stay light at import
(heavy imports happen inside the command functions)."""

from __future__ import annotations

import importlib

import typer

# Each command's name and the module in this package that registers it.
MODULES = {
    "check": "check",
    "rules": "rules",
    "accept": "accept",
    "probe-script": "probe",
    "releases": "releases",
    "ancestry": "ancestry",
    "config": "config",
    "patch": "patch",
    "restore": "patch",
}


def register_all(app: typer.Typer, name: str | None = None) -> None:
    """Every command; with ``name``, a command's name, only the module that registers it
    (a run of one command: the others' modules and click parameters are never built)."""
    modules = [MODULES[name]] if name in MODULES else list(dict.fromkeys(MODULES.values()))
    for module in modules:
        importlib.import_module(f"{__name__}.{module}").register(app)
