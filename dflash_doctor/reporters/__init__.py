"""Report formats: one small interface, one file per format, one registry.

``REPORTERS`` is the only list of formats: ``check --format`` and
``--output FORMAT=FILE`` are derived from it. A new format is a module here
with a class that has ``render`` and ``render_fleet``, and a line below; a
format's module is imported when a report is rendered in it.
"""

from __future__ import annotations

import importlib
from typing import Protocol

from ..model import CheckReport, HostOutcome, ToolError


class Reporter(Protocol):
    def render(self, report: CheckReport, terminal: bool) -> str:
        """The whole report as text; ``terminal`` allows colour and layout."""

    def render_fleet(self, outcomes: list[HostOutcome], terminal: bool) -> str:
        """One document for many hosts, hosts that could not be checked included."""


# format name -> "module of this package:class"
REPORTERS: dict[str, str] = {
    "table": "table:TableReporter",
    "json": "json:JsonReporter",
    "sarif": "sarif:SarifReporter",
    "junit": "junit:JunitReporter",
}
FORMATS = tuple(REPORTERS)


def reporter(name: str) -> Reporter:
    """The reporter for a format name; an unknown name is a ToolError, never the table."""
    if name not in REPORTERS:
        raise ToolError(f"unknown report format {name!r} (formats: {', '.join(FORMATS)})")
    module, _, cls = REPORTERS[name].partition(":")
    return getattr(importlib.import_module(f"{__name__}.{module}"), cls)()
