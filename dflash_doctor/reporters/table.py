"""Fix / verdict / evidence / remedy: a rich table on a terminal, plain text otherwise."""

from __future__ import annotations

import io

from ..model import ABSENT, NOT_APPLICABLE, PARTIAL, PRESENT, UNKNOWN, CheckReport, FixResult

STYLES = {PRESENT: "bold green", ABSENT: "bold red", PARTIAL: "bold yellow", NOT_APPLICABLE: "bold red", UNKNOWN: "bold magenta"}


def _evidence_lines(fix: FixResult) -> list[str]:
    lines = [f"{e.file}:{e.line} {e.symbol} [{e.form}]" for e in fix.evidence]
    if fix.reason:
        lines.append(fix.reason)
    return lines


def _header(report: CheckReport) -> str:
    vllm = report.vllm
    commit = f" commit {vllm.commit} (from {vllm.commit_source})" if vllm.commit else ""
    if vllm.modified_files is None:
        modified = "no RECORD to compare against"
    elif vllm.modified_files:
        modified = "locally modified: " + ", ".join(vllm.modified_files)
    else:
        modified = "inspected files match RECORD"
    return f"vLLM {vllm.version or 'unknown version'}{commit} at {report.target.location} ({report.target.kind}); {modified}"


class TableReporter:
    def render(self, report: CheckReport, terminal: bool) -> str:
        if not terminal:
            return self._plain(report)
        from rich.console import Console
        from rich.table import Table

        table = Table(title=_header(report), title_justify="left", show_lines=True)
        for column in ("fix", "verdict", "evidence", "remedy"):
            table.add_column(column, overflow="fold")
        for fix in report.fixes:
            table.add_row(
                f"{fix.id}\n{fix.title}",
                f"[{STYLES[fix.status]}]{fix.status}[/]",
                "\n".join(_evidence_lines(fix)),
                fix.remedy,
            )
        buffer = io.StringIO()
        Console(file=buffer, force_terminal=True, width=160).print(table)
        return buffer.getvalue()

    def _plain(self, report: CheckReport) -> str:
        out = [_header(report)]
        for fix in report.fixes:
            out.append(f"{fix.id}: {fix.status} - {fix.title}")
            out.extend(f"    {line}" for line in _evidence_lines(fix))
            if fix.status != PRESENT:
                out.append(f"    remedy: {fix.remedy}")
        return "\n".join(out) + "\n"
