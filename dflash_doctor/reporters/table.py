"""The report as lines for a person: each fix leads with its verdict and headline, then why, where and what to do.

On a terminal the lines are wrapped to its width and coloured; piped, they are
plain and unwrapped. Every value from the report passes through ``clean``
(dflash_doctor.terminal): a tree or host cannot drive the terminal, print
markup, or start a line of its own (reporters/layout.py indents every
continuation).
"""

from __future__ import annotations

from ..model import (
    ABSENT,
    BEHAVIOUR,
    NOT_APPLICABLE,
    PARTIAL,
    PRESENT,
    UNKNOWN,
    BottomLine,
    CheckReport,
    FixResult,
    HostOutcome,
    Provenance,
    Waiver,
    fleet_summary,
)
from ..terminal import clean, columns
from .layout import OUTDENT, Line, Token, render, width_of, words, wrap

STYLES = {
    PRESENT: "bold green",
    ABSENT: "bold red",
    PARTIAL: "bold yellow",
    NOT_APPLICABLE: "bold red",
    UNKNOWN: "bold magenta",
}
LABEL = "dim"
GAP = "   "  # between evidence locations sharing a line


def _verdict(fix: FixResult) -> str:
    return fix.status.upper()


def _header(report: CheckReport, width: int | None) -> list[Line]:
    provenance, target = report.provenance, report.target
    engine = provenance.engine
    tokens: list[Token] = [
        (engine.display, "bold"),
        (clean(provenance.version) if provenance.version else "(unknown version)", "bold"),
    ]
    if provenance.vendor:
        tokens = _distribution(provenance)
    if provenance.commit:
        tokens += [("commit", ""), (clean(provenance.commit), "")] + words(f"(from {clean(provenance.commit_source)})")
    tokens += [("at", ""), (clean(target.location), ""), (f"({clean(target.kind)});", "")]
    if provenance.platform.told_by != "default":  # the engine's default (CUDA), unless the distribution says otherwise
        told = {"distribution": "its distribution name", "version": "its version label"}[provenance.platform.told_by]
        built = engine.platform_display(provenance.platform.name)
        tokens += words(f"built for {built} (told by {told}") + [(clean(provenance.platform.evidence) + ");", "")]
    if provenance.modified_files is None:
        tokens += words("no RECORD to compare against")
    elif provenance.modified_files:
        names = [clean(name) for name in provenance.modified_files]
        tokens += words("locally modified:") + [(name + ",", "") for name in names[:-1]] + [(names[-1], "")]
    else:
        tokens += words("inspected files match RECORD")
    return wrap(tokens, width, [], 2)


def _distribution(provenance: Provenance) -> list[Token]:
    """A vendor build or fork named as itself, with its own version, and the engine's release it is based on."""
    engine, distribution = provenance.engine, provenance.distribution
    assert distribution is not None  # a vendor is named by its distribution
    name, version = clean(distribution.name), distribution.version
    tokens: list[Token] = [(name, "bold"), (clean(version) if version else "(unknown version)", "bold")]
    based = provenance.based_on
    if based and based.releases:
        nearest = " or ".join(clean(release) for release in based.releases)
        return tokens + words(
            f"(a distribution of {engine.display}, based on {engine.display} {nearest}: nearest by file digests, "
            f"{based.files_equal} of {based.files_compared} files equal)"
        )
    return tokens + words(f"(a distribution of {engine.display})")


def _field(label: str, tokens: list[Token], width: int | None, column: int) -> list[Line]:
    return wrap(tokens, width, [("  " + label.ljust(column - 2), LABEL)], column)


def _evidence(fix: FixResult, width: int | None, column: int) -> list[Line]:
    """One ``file:line symbol`` per place; on a terminal as many as fit share a line, and a place too wide keeps
    its ``file:line`` only (the JSON has the symbol), which, wider than the column, stands whole on a line of
    its own further left."""
    room = width - column if width else None
    rows: list[list[str]] = []
    for item in fix.evidence:
        where = clean(item.file) + (f":{item.line}" if item.line is not None else "")
        place = f"{where} {clean(item.symbol)}" if item.symbol else where
        place = place if room is None or width_of(place) <= room else where
        if room and rows and width_of(GAP.join(rows[-1] + [place])) <= room:
            rows[-1].append(place)
        else:
            rows.append([place])
    lines: list[Line] = [[("  " + "evidence".ljust(column - 2), LABEL)]] if rows else []
    for index, row in enumerate(rows):
        text = GAP.join(row)
        if room and width_of(text) > room:
            lines += wrap([(text, "")], width, [(" " * OUTDENT, "")], OUTDENT)
        elif index == 0:
            lines[0].append((text, ""))
        else:
            lines.append([(" " * column, ""), (text, "")])
    return lines


def _decided(fix: FixResult) -> str:
    by = "behaviour (running the tree's code)" if fix.decided_by == BEHAVIOUR else "structure (the code's forms)"
    if fix.structure_status not in (None, fix.status):
        return f"by {by}; the code's forms alone read {fix.structure_status.upper()}"
    return f"by {by}"


def _waiver(waiver: Waiver) -> str:
    until = f"until {waiver.until.isoformat()}: " if waiver.until else ""
    return until + clean(waiver.reason)


def _fix_lines(fix: FixResult, width: int | None, column: int) -> list[Line]:
    headline = fix.headline or fix.title
    first: Line = [(clean(fix.id).ljust(column), "bold"), (_verdict(fix), STYLES[fix.status]), ("  ", "")]
    lines = wrap(words(clean(headline)), width, first, column)
    if fix.waiver:
        lines += _field("waived", words(_waiver(fix.waiver)), width, column)
    if fix.affects_drafter is False:
        because = f": {clean(fix.affects_reason)}" if fix.affects_reason else ""
        lines += _field(
            "drafter", words(f"does not affect this drafter{because} (does not fail the gate)"), width, column
        )
    if fix.reason:
        lines += _field("why", words(clean(fix.reason)), width, column)
    lines += _evidence(fix, width, column)
    lines += _field("decided", words(_decided(fix)), width, column)
    if fix.status != PRESENT:
        lines += _field("remedy", words(clean(fix.remedy)), width, column)
    return lines


def _section_lines(report: CheckReport) -> list[str]:
    """The sections' own lines (the drafter lint, the probes, the ancestry), already clean."""
    return [line for section in report.sections for line in section.lines()]


def _wrapped(line: str, width: int | None) -> list[Line]:
    """A section line as it is when it fits, else wrapped at its words and continued four columns deeper."""
    if width is None or width_of(line) <= width:
        return [[(line, "")]]
    indent = len(line) - len(line.lstrip(" "))
    return wrap(words(line), width, [(" " * indent, "")], indent + 4)


def check_lines(report: CheckReport, width: int | None) -> list[Line]:
    column = max([12] + [len(clean(fix.id)) + 2 for fix in report.fixes])
    lines = _header(report, width)
    for fix in report.fixes:
        lines += [[]] + _fix_lines(fix, width, column)
    sections = _section_lines(report)
    if sections:
        lines.append([])
    for line in sections:
        lines += _wrapped(line, width)
    return lines + _bottom_line(report.summary, width)


def _bottom_line(summary: BottomLine | None, width: int | None) -> list[Line]:
    """The report's last line: what to do for all the fixes together."""
    if summary is None:
        return []
    return [[]] + wrap(words(clean(summary.sentence())), width, [("bottom line:", "bold"), (" ", "")], 4)


def _cell(report: CheckReport, fix_id: str) -> Token:
    for fix in report.fixes:
        if fix.id == fix_id:
            notes = ["waived"] * bool(fix.waiver) + ["not this drafter"] * (fix.affects_drafter is False)
            return _verdict(fix) + (f" ({', '.join(notes)})" if notes else ""), STYLES[fix.status]
    return "-", ""


def fleet_lines(outcomes: list[HostOutcome], width: int | None) -> list[Line]:
    """One line per host: its host, then a verdict under each fix, or its error across the fix columns."""
    fix_ids = sorted({f.id for o in outcomes if o.report for f in o.report.fixes})
    rows = [[_cell(o.report, fix_id) for fix_id in fix_ids] if o.report else [] for o in outcomes]
    sizes = [max([len(fix_id)] + [len(row[i][0]) for row in rows if row]) + 2 for i, fix_id in enumerate(fix_ids)]
    measure = width_of if width else len  # cells on a terminal; plain text needs no rich
    host_size = max([4] + [measure(clean(o.host)) for o in outcomes]) + 2
    stacked = width is not None and host_size + sum(sizes) > width  # each host alone on a line, its row below it
    start = 6 if stacked else host_size
    lines: list[Line] = [[("DFlash fixes per host", "bold")]]
    lines.append([("host".ljust(start), LABEL)] + [(fix_id.ljust(size), LABEL) for fix_id, size in zip(fix_ids, sizes)])
    for o, row in zip(outcomes, rows):
        host = clean(o.host)
        lead: Line = [(" " * start, "")] if stacked else [(host + " " * (host_size - measure(host)), "bold")]
        if stacked:
            lines += wrap([(host, "bold")], width, [], OUTDENT)
        if o.report is None:
            lines += wrap(words(clean(o.error or "")), width, lead + [("error:", "bold red"), (" ", "")], start + 2)
        else:
            lines.append(lead + [(text.ljust(size), style) for (text, style), size in zip(row, sizes)])
    return lines + _bottom_line(fleet_summary(outcomes), width)


class TableReporter:
    def render(self, report: CheckReport, terminal: bool) -> str:
        return render(check_lines(report, columns() if terminal else None), terminal)

    def render_fleet(self, outcomes: list[HostOutcome], terminal: bool) -> str:
        return render(fleet_lines(outcomes, columns() if terminal else None), terminal)
