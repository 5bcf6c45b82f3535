"""Report formats: one small interface, one file per format."""

from __future__ import annotations

from typing import Protocol

from ..model import CheckReport


class Reporter(Protocol):
    def render(self, report: CheckReport, terminal: bool) -> str:
        """The whole report as text; ``terminal`` allows colour and layout."""


def reporter(name: str) -> Reporter:
    if name == "json":
        from .json import JsonReporter

        return JsonReporter()
    from .table import TableReporter

    return TableReporter()


FORMATS = ("table", "json")
