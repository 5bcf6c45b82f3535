"""JUnit XML for test-report dashboards: one testcase per fix and target.

``present`` passes; ``absent``, ``partial`` and ``not-applicable`` are
failures (verdict, reason, evidence, remedy); ``unknown`` is an error (the
tool could not decide: exit code 2), or a failure with ``--strict``; a waived
fix is skipped with the waiver's reason, and so is one whose defect cannot reach
the drafter given with ``--draft-config`` (it does not fail the gate).

Every attribute and text is made inert before it is written, as the table
does: control characters (C0, C1), bidi overrides, lone surrogates and the
other code points XML 1.0 forbids are shown as escapes (``\\x1b``), so text
from a tree, host or image cannot make the document ill-formed.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence

from ..model import PRESENT, UNKNOWN, BottomLine, CheckReport, FixResult, HostOutcome
from ..terminal import clean

# What ``clean`` leaves that XML 1.0 cannot hold: surrogates (lone ones, from undecodable bytes) and U+FFFE/U+FFFF.
_NOT_XML = re.compile("[\ud800-\udfff\ufffe\uffff]")


class JunitReporter:
    def render(self, report: CheckReport, terminal: bool) -> str:
        return junit_document([report])

    def render_fleet(self, outcomes: list[HostOutcome], terminal: bool) -> str:
        return junit_document(
            [o.report for o in outcomes if o.report], [(o.host, o.error) for o in outcomes if not o.report]
        )


def junit_document(reports: Sequence[CheckReport], unreachable: Sequence[tuple[str, str | None]] = ()) -> str:
    """One testsuite per target; several reports (a fleet) make several suites.
    A host that could not be checked is a suite with one erroring testcase."""
    root = ET.Element("testsuites", name="dflash-doctor")
    totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    suites = [_suite(report) for report in reports] + [_unreachable_suite(host, error) for host, error in unreachable]
    for suite in suites:
        root.append(suite)
        for key in totals:
            totals[key] += int(suite.attrib[key])
    for key, total in totals.items():
        root.set(key, str(total))
    for element in root.iter():
        for key, value in list(element.attrib.items()):
            element.set(key, _inert(value))
        if element.text:
            element.text = _inert(element.text, "\n")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _inert(value: str, keep: str = "") -> str:
    return _NOT_XML.sub(lambda match: f"\\u{ord(match.group()):04x}", clean(value, keep))


def _unreachable_suite(host: str, error: str | None) -> ET.Element:
    suite = ET.Element(
        "testsuite", name=f"dflash-doctor check {host}", tests="1", failures="0", errors="1", skipped="0"
    )
    case = ET.SubElement(suite, "testcase", classname=host, name="check")
    ET.SubElement(case, "error", message=f"could not be checked: {error}", type="unreachable").text = error
    return suite


def _suite(report: CheckReport) -> ET.Element:
    target = report.target
    suite = ET.Element("testsuite", name=f"dflash-doctor check {target.kind} {target.location}")
    properties = ET.SubElement(suite, "properties")
    for name, value in (
        ("target.kind", target.kind),
        ("target.location", target.location),
        *((f"target.{key}", str(value)) for key, value in target.details),
        (f"{report.provenance.engine.report_key}.version", report.provenance.version),
        (f"{report.provenance.engine.report_key}.commit", report.provenance.commit),
        ("tool_version", report.tool_version),
        ("strict", str(report.strict).lower()),
        ("exit_code", str(report.exit_code)),
        *(_summary(report.summary) if report.summary is not None else ()),
    ):
        if value is not None:
            ET.SubElement(properties, "property", name=name, value=value)
    counts = dict.fromkeys(("failures", "errors", "skipped"), 0)
    for fix in report.fixes:
        case = ET.SubElement(suite, "testcase", classname=f"{target.kind}:{target.location}", name=fix.id)
        outcome = _outcome(fix, report.strict)
        if outcome is not None:
            element = ET.SubElement(case, outcome, message=_headline(fix), type=fix.status)
            if outcome != "skipped":
                element.text = _details(fix)
            counts[{"failure": "failures", "error": "errors", "skipped": "skipped"}[outcome]] += 1
        else:
            ET.SubElement(case, "system-out").text = _details(fix)
    suite.set("tests", str(len(report.fixes)))
    for key, count in counts.items():
        suite.set(key, str(count))
    return suite


def _summary(summary: BottomLine) -> tuple[tuple[str, str | None], ...]:
    """The bottom line as suite properties: the sentence, and its action and release to filter on."""
    return (("summary", summary.sentence()), ("summary.action", summary.action), ("summary.release", summary.release))


def _outcome(fix: FixResult, strict: bool) -> str | None:
    if not fix.gates:  # waived, or its defect cannot reach the user's drafter
        return "skipped"
    if fix.status == PRESENT:
        return None
    if fix.status == UNKNOWN and not strict:
        return "error"
    return "failure"


def _headline(fix: FixResult) -> str:
    if fix.waiver is not None:
        until = f" until {fix.waiver.until.isoformat()}" if fix.waiver.until else ""
        return f"{fix.status}, waived{until}: {fix.waiver.reason}"
    if fix.affects_drafter is False:
        return f"{fix.status}, does not affect this drafter: {fix.headline or fix.title}"
    return f"{fix.status}: {fix.headline or fix.title}"


def _details(fix: FixResult) -> str:
    lines = [f"verdict: {fix.status}", f"decided by: {fix.decided_by}", f"fix: {fix.title}"]
    if fix.reason:
        lines.append(f"reason: {fix.reason}")
    if fix.affects_reason:
        lines.append(f"drafter: {fix.affects_reason}")
    lines += [f"evidence: {e.file}:{e.line} {e.symbol} [{e.form}]" for e in fix.evidence]
    if fix.status != PRESENT:
        lines.append(f"remedy: {fix.remedy}")
    return "\n".join(lines)
