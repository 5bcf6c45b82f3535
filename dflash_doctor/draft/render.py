"""The ``draft`` and ``probes`` sections of a check report: their JSON and their text.

Plain lines work in a log and in the check table's footer; ``DraftSection.table``
is the rich form of the findings for a terminal (``config``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from ..engines import named
from ..terminal import clean, literal, terminal_text
from .lint import LintReport

SEVERITY_STYLES = {"error": "bold red", "warning": "bold yellow", "info": "cyan"}


@dataclasses.dataclass(frozen=True)
class DraftSection:
    """The drafter config's lint."""

    lint: LintReport
    name: ClassVar[str] = "draft"

    def to_json(self) -> dict[str, Any]:
        return self.lint.to_json()

    def lines(self) -> list[str]:
        """The findings as lines, each clean for a terminal."""
        lines = [self._title()]
        for finding in self.lint.findings:
            lines.append(f"  {finding.severity:<7} {finding.code}: {finding.message}")
            if finding.fix:  # info findings carry a note, or nothing to do
                lines.append(f"          {'note' if finding.severity == 'info' else 'fix'}: {finding.fix}")
        lines.append(f"  {self._totals()}")
        return [clean(line) for line in lines]

    def table(self) -> str:
        """One block per finding (severity, then its code, message and fix below one another), as wide as the
        terminal: a column of its own for each would cut the long identifiers the messages name."""
        from rich.table import Table
        from rich.text import Text

        table = Table(box=None, show_header=False, padding=(0, 1, 1, 0))
        table.add_column(no_wrap=True)
        table.add_column()
        for finding in self.lint.findings:
            body = Text.assemble((clean(finding.code), "bold"), "\n", clean(finding.message))
            if finding.fix:
                body.append(f"\n{'note' if finding.severity == 'info' else 'fix'}: ", style="italic")
                body.append(clean(finding.fix))
            table.add_row(literal(finding.severity, SEVERITY_STYLES.get(finding.severity, "")), body)
        return terminal_text(literal(self._title()), Text(), table, self._totals())

    def _title(self) -> str:
        target = self.lint.target
        layers = (
            "target layer count unknown" if target is None else f"target has {target.count} layers ({target.source})"
        )
        engine = named(self.lint.engine).display
        flags = f", with launch flags from {self.lint.launch.source}" if self.lint.launch is not None else ""
        return (
            f"drafter config {self.lint.config.path} ({self.lint.config.format} format, for {engine}{flags}); {layers}"
        )

    def _totals(self) -> str:
        return f"{self.lint.errors} error(s), {self.lint.warnings} warning(s)"
