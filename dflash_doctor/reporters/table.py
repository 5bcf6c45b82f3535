"""Fix / verdict / evidence / remedy: a rich table on a terminal, plain text otherwise.

Every value from the report passes through ``clean``/``literal`` (dflash_doctor.terminal):
a tree or host cannot drive the terminal, print markup, or start a line of its own.
"""

from __future__ import annotations

from ..terminal import clean, literal, terminal_text
from ..model import ABSENT, NOT_APPLICABLE, PARTIAL, PRESENT, UNKNOWN, CheckReport, FixResult

STYLES = {PRESENT: "bold green", ABSENT: "bold red", PARTIAL: "bold yellow", NOT_APPLICABLE: "bold red", UNKNOWN: "bold magenta"}


def _waiver_note(fix: FixResult) -> str:
    waiver = fix.waiver
    until = f" until {waiver.until.isoformat()}" if waiver.until else ""
    return f"waived{until}: {clean(waiver.reason)}"


def _evidence_lines(fix: FixResult) -> list[str]:
    lines = [f"{clean(e.file)}:{e.line} {clean(e.symbol)} [{clean(e.form)}]" for e in fix.evidence]
    lines.append(f"decided by {fix.decided_by}" + (f" (the code's forms read {fix.structure_status})"
                                                   if fix.structure_status not in (None, fix.status) else ""))
    if fix.reason:
        lines.append(clean(fix.reason))
    return lines


def _header(report: CheckReport) -> str:
    vllm = report.vllm
    commit = f" commit {clean(vllm.commit)} (from {clean(vllm.commit_source)})" if vllm.commit else ""
    if vllm.modified_files is None:
        modified = "no RECORD to compare against"
    elif vllm.modified_files:
        modified = "locally modified: " + ", ".join(clean(name) for name in vllm.modified_files)
    else:
        modified = "inspected files match RECORD"
    target = report.target
    version = clean(vllm.version) if vllm.version else "unknown version"
    return f"vLLM {version}{commit} at {clean(target.location)} ({clean(target.kind)}); {modified}"


def _section_lines(report: CheckReport) -> list[str]:
    """The sections' own lines (the drafter lint, the probes, the ancestry), already clean."""
    return [line for section in report.sections for line in section.lines()]


def _status_of(report: CheckReport, fix_id: str) -> str:
    for fix in report.fixes:
        if fix.id == fix_id:
            return f"{fix.status} (waived)" if fix.waiver else fix.status
    return "-"


def _lines(lines: list[str]):
    """Already clean lines as one rich cell, never read as markup."""
    from rich.text import Text

    return Text("\n".join(lines))


class TableReporter:
    def render(self, report: CheckReport, terminal: bool) -> str:
        if not terminal:
            return self._plain(report)
        from rich.table import Table
        from rich.text import Text

        table = Table(title=_lines([_header(report)]), title_justify="left", show_lines=True)
        for column in ("fix", "verdict", "evidence", "remedy"):
            table.add_column(column, overflow="fold")
        for fix in report.fixes:
            verdict = Text.assemble((fix.status, STYLES[fix.status]), "\n" + _waiver_note(fix) if fix.waiver else "")
            table.add_row(
                _lines([clean(fix.id), clean(fix.title)]), verdict, _lines(_evidence_lines(fix)), literal(fix.remedy)
            )
        extra = _section_lines(report)
        return terminal_text(table) + ("\n".join(extra) + "\n" if extra else "")

    def render_fleet(self, outcomes, terminal: bool) -> str:
        """One row per host, one column per fix; a host that failed shows its error."""
        fix_ids = sorted({f.id for o in outcomes if o.report for f in o.report.fixes})
        if not terminal:
            lines = ["\t".join(["host", *fix_ids])]
            for o in outcomes:
                cells = [f"error: {o.error}"] if o.report is None else [_status_of(o.report, i) for i in fix_ids]
                lines.append("\t".join(clean(cell) for cell in [o.host, *cells]))
            return "\n".join(lines) + "\n"
        from rich.table import Table
        from rich.text import Text

        table = Table(title="DFlash fixes per host", title_justify="left")
        for column in ("host", *fix_ids):
            table.add_column(literal(column), overflow="fold")
        for o in outcomes:
            if o.report is None:
                error = Text.assemble(("error", "bold red"), ": " + clean(o.error or ""))
                table.add_row(literal(o.host), error, *[""] * (len(fix_ids) - 1))
            else:
                cells = [_status_of(o.report, fix_id) for fix_id in fix_ids]
                table.add_row(literal(o.host), *[literal(c, STYLES.get(c, "")) for c in cells])
        return terminal_text(table)

    def _plain(self, report: CheckReport) -> str:
        out = [_header(report)]
        for fix in report.fixes:
            out.append(f"{clean(fix.id)}: {fix.status} - {clean(fix.title)}")
            if fix.waiver:
                out.append(f"    {_waiver_note(fix)}")
            out.extend(f"    {line}" for line in _evidence_lines(fix))
            if fix.status != PRESENT:
                out.append(f"    remedy: {clean(fix.remedy)}")
        out.extend(_section_lines(report))
        return "\n".join(out) + "\n"
