"""The ancestry report laid out for a terminal, or plain lines."""

from __future__ import annotations

from ..reporters import layout
from ..reporters.layout import OUTDENT, words, wrap
from ..terminal import clean, columns
from .report import CONTAINED, MISSING, UNKNOWN, AncestryReport, PrAncestry, short_sha

STYLES = {CONTAINED: "bold green", MISSING: "bold red", UNKNOWN: "bold magenta"}
_COMMIT_KEYS = ("landing", "pr_head", "reverted_by", "merge_base")


def _evidence_lines(entry: PrAncestry) -> list[str]:
    evidence = dict(entry.evidence)
    lines = [f"{key} {short_sha(evidence[key])}" for key in _COMMIT_KEYS if evidence.get(key)]
    lines += [
        f"{short_sha(m['commit'])} = {short_sha(m['same_as'])} (patch-id {m['patch_id'][:12]})"
        for m in evidence.get("matches", [])
    ]
    if evidence.get("applied"):
        lines.append(f"applied {short_sha(evidence['applied']['base'])}..{short_sha(evidence['applied']['tip'])}")
    return lines


def _header(report: AncestryReport) -> str:
    source = f" (from {report.commit_source})" if report.commit_source else ""
    return f"commit {report.commit}{source} in {report.repo}, main line {report.main_ref}"


def render(report: AncestryReport, terminal: bool) -> str:
    """Laid out for the terminal's width on a terminal, plain lines otherwise."""
    if not terminal:
        out = [_header(report)]
        for entry in report.prs:
            out.append(f"{entry.fix or '-'} #{entry.pr}: {entry.status} ({entry.method}) - {entry.reason}")
            out.extend(f"    {line}" for line in _evidence_lines(entry))
        return "\n".join(clean(line) for line in out) + "\n"

    return _on_terminal(report, columns())


def _on_terminal(report: AncestryReport, width: int) -> str:
    """Each PR leads with its fix, number, status and method; its reason and evidence follow, indented, wrapped
    at words to ``width`` (reporters/layout.py: no line wider, no word, sha or path cut)."""
    lines = wrap(words(clean(_header(report))), width, [], OUTDENT)
    for entry in report.prs:
        first = [
            (clean(entry.fix or "-"), "bold"),
            (f"#{entry.pr}", "bold"),
            (clean(entry.status), STYLES[entry.status]),
            (f"({clean(entry.method)})", ""),
        ]
        lines += [[]] + wrap(first, width, [], OUTDENT)
        for text in [entry.reason, *_evidence_lines(entry)]:
            lines += wrap(words(clean(text)), width, [(" " * OUTDENT, "")], OUTDENT)
    return layout.render(lines, True)
