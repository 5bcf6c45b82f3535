"""Report formats: one small interface, one file per format, one registry.

``REPORTERS`` is the only list of formats: ``check --format`` and
``--output FORMAT=FILE`` are derived from it. A new format is a module here
with a class that has ``render`` and ``render_fleet``, and a line below.
"""

from __future__ import annotations

from typing import Protocol

from ..model import CheckReport, HostOutcome, ToolError
from .json import JsonReporter
from .junit import JunitReporter
from .sarif import SarifReporter
from .table import TableReporter


class Reporter(Protocol):
    def render(self, report: CheckReport, terminal: bool) -> str:
        """The whole report as text; ``terminal`` allows colour and layout."""

    def render_fleet(self, outcomes: list[HostOutcome], terminal: bool) -> str:
        """One document for many hosts, hosts that could not be checked included."""


REPORTERS: dict[str, type[Reporter]] = {
    "table": TableReporter,
    "json": JsonReporter,
    "sarif": SarifReporter,
    "junit": JunitReporter,
}
FORMATS = tuple(REPORTERS)


def reporter(name: str) -> Reporter:
    """The reporter for a format name; an unknown name is a ToolError, never the table."""
    try:
        return REPORTERS[name]()
    except KeyError:
        raise ToolError(f"unknown report format {name!r} (formats: {', '.join(FORMATS)})") from None
