"""Report formats: one small interface, one file per format."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ..model import CheckReport

if TYPE_CHECKING:
    from ..fleet import HostOutcome

FORMATS = ("table", "json", "sarif", "junit")


class Reporter(Protocol):
    def render(self, report: CheckReport, terminal: bool) -> str:
        """The whole report as text; ``terminal`` allows colour and layout."""

    def render_fleet(self, outcomes: list[HostOutcome], terminal: bool) -> str:
        """One document for many hosts, hosts that could not be checked included."""


def reporter(name: str) -> Reporter:
    if name == "json":
        from .json import JsonReporter

        return JsonReporter()
    if name == "sarif":
        from .sarif import SarifReporter

        return SarifReporter()
    if name == "junit":
        from .junit import JunitReporter

        return JunitReporter()
    from .table import TableReporter

    return TableReporter()
