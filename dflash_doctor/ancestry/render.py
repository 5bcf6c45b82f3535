"""The ancestry report as a table on a terminal, or plain lines."""

from __future__ import annotations

from ..terminal import clean, literal, terminal_text
from .report import CONTAINED, MISSING, UNKNOWN, AncestryReport, PrAncestry, short_sha

STYLES = {CONTAINED: "bold green", MISSING: "bold red", UNKNOWN: "bold magenta"}
_COMMIT_KEYS = ("landing", "pr_head", "reverted_by", "merge_base")


def _evidence_lines(entry: PrAncestry) -> list[str]:
    evidence = dict(entry.evidence)
    lines = [f"{key} {short_sha(evidence[key])}" for key in _COMMIT_KEYS if evidence.get(key)]
    lines += [f"{short_sha(m['commit'])} = {short_sha(m['same_as'])} (patch-id {m['patch_id'][:12]})" for m in evidence.get("matches", [])]
    if evidence.get("applied"):
        lines.append(f"applied {short_sha(evidence['applied']['base'])}..{short_sha(evidence['applied']['tip'])}")
    return lines


def _header(report: AncestryReport) -> str:
    source = f" (from {report.commit_source})" if report.commit_source else ""
    return f"commit {report.commit}{source} in {report.repo}, main line {report.main_ref}"


def render(report: AncestryReport, terminal: bool) -> str:
    """A rich table on a terminal, plain lines otherwise."""
    if not terminal:
        out = [_header(report)]
        for entry in report.prs:
            out.append(f"{entry.fix or '-'} #{entry.pr}: {entry.status} ({entry.method}) - {entry.reason}")
            out.extend(f"    {line}" for line in _evidence_lines(entry))
        return "\n".join(clean(line) for line in out) + "\n"

    from rich.table import Table
    from rich.text import Text

    table = Table(title=literal(_header(report)), title_justify="left", show_lines=True)
    for column in ("fix", "PR", "status", "method", "evidence"):
        table.add_column(column, overflow="fold")
    for entry in report.prs:
        table.add_row(
            literal(entry.fix or "-"),
            f"#{entry.pr}",
            literal(entry.status, STYLES[entry.status]),
            literal(entry.method),
            Text("\n".join(clean(line) for line in [*_evidence_lines(entry), entry.reason])),
        )
    return terminal_text(table)
