"""SARIF 2.1.0 for code-scanning dashboards.

One rule per fix (help text from ``rules/``), one result per fix that is not
``present``, located at the evidence (paths relative to the ``VLLM_ROOT`` base
id), waived fixes carried as ``suppressions``, one run (and one code-scanning
category) per target.

No SARIF ``fixes``: they are exact byte edits, which only `dflash-doctor patch`
computes (from the tree, which a report does not carry); the remedy is in the
message instead of a guessed edit.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import __version__
from ..engines import Engine
from ..model import PRESENT, UNKNOWN, CheckReport, Evidence, FixResult, HostOutcome, Waiver

if TYPE_CHECKING:
    from ..rules import Rule

SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
ROOT_ID = "VLLM_ROOT"  # the published base id of every engine's tree root (dashboards key on it)
FINGERPRINT = "dflashDoctorFix/v1"


class SarifReporter:
    def render(self, report: CheckReport, terminal: bool) -> str:
        return json.dumps(self.log([report]), indent=2) + "\n"

    def render_fleet(self, outcomes: list[HostOutcome], terminal: bool) -> str:
        """A run per host; a host that could not be checked is a failed invocation."""
        log = self.log([o.report for o in outcomes if o.report])
        for o in outcomes:
            if o.report is None:
                log["runs"].append(
                    {
                        "tool": {
                            "driver": {"name": "dflash-doctor", "version": __version__, "semanticVersion": __version__}
                        },
                        "automationDetails": {"id": f"dflash-doctor/ssh:{o.host}/"},
                        "invocations": [
                            {
                                "executionSuccessful": False,
                                "exitCode": o.exit_code,
                                "toolExecutionNotifications": [
                                    {"level": "error", "message": {"text": f"{o.host}: {o.error}"}}
                                ],
                            }
                        ],
                        "results": [],
                    }
                )
        return json.dumps(log, indent=2) + "\n"

    def log(self, reports: Sequence[CheckReport]) -> dict[str, Any]:
        """One SARIF log, one run per target (several for a fleet)."""
        from ..rulefile import (
            load_rules,
        )  # --help: rule files pull in tomllib and string, only a SARIF render needs them

        from ..rules import for_engine

        loaded = load_rules()
        runs = [
            self._run(report, {rule.id: rule for rule in for_engine(loaded, report.provenance.engine.name)})
            for report in reports
        ]
        return {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": runs}

    def _run(self, report: CheckReport, rules: dict[str, Rule]) -> dict[str, Any]:
        descriptors = [_descriptor(fix, rules.get(fix.id), report.provenance.engine) for fix in report.fixes]
        results = [
            self._result(report, fix, index, rules.get(fix.id))
            for index, fix in enumerate(report.fixes)
            if fix.status != PRESENT
        ]
        return {
            "tool": {
                "driver": {
                    "name": "dflash-doctor",
                    "version": __version__,
                    "semanticVersion": __version__,
                    "rules": descriptors,
                }
            },
            # One category per target: uploads for host B never close host A's alerts,
            # and a fleet's runs stay distinct in one file (code scanning refuses duplicates).
            "automationDetails": {"id": f"dflash-doctor/{report.target.identity}/"},
            "originalUriBaseIds": {ROOT_ID: _root(report)},
            "invocations": [{"executionSuccessful": True, "exitCode": report.exit_code}],
            "results": results,
            "properties": {
                "target": report.target.to_json(),
                report.provenance.engine.report_key: report.provenance.to_json(),
                "strict": report.strict,
                **({"summary": report.summary.to_json()} if report.summary is not None else {}),
            },
        }

    def _result(self, report: CheckReport, fix: FixResult, index: int, rule: Rule | None) -> dict[str, Any]:
        deciding, related = _split_evidence(fix, rule)
        result: dict[str, Any] = {
            "ruleId": fix.id,
            "ruleIndex": index,
            "kind": "fail",
            "level": _level(report, fix),
            "message": {"text": _message(fix)},
            "locations": [_location(item) for item in deciding] or [_anchor_location(rule, report.provenance.engine)],
            "partialFingerprints": {FINGERPRINT: _fingerprint(report, fix)},
            "properties": {"status": fix.status, "prs": list(fix.prs)},
        }
        if related:
            result["relatedLocations"] = [_location(item) for item in related]
        if fix.waiver is not None:
            result["suppressions"] = [_suppression(fix.waiver)]
        return result


def _level(report: CheckReport, fix: FixResult) -> str:
    if fix.affects_drafter is False:  # cannot reach the user's drafter: does not fail the gate
        return "note"
    return "warning" if fix.status == UNKNOWN and not report.strict else "error"


def _descriptor(fix: FixResult, rule: Rule | None, engine: Engine) -> dict[str, Any]:
    descriptor: dict[str, Any] = {
        "id": fix.id,
        "name": "".join(part.capitalize() for part in fix.id.split("-")),
        "shortDescription": {"text": fix.title},
        "defaultConfiguration": {"level": "error"},
        "properties": {"tags": [engine.name, "dflash"]},
    }
    if rule is None:  # a report from an older rule set: the result still carries its remedy
        return descriptor
    from ..docs import rule_markdown  # --help: as load_rules above

    descriptor["fullDescription"] = {"text": rule.what}
    descriptor["help"] = {
        "text": f"What: {rule.what}\n\nWhy: {rule.why}\n\nRemedy: {rule.remedy}",
        "markdown": rule_markdown(rule),
    }
    descriptor["properties"].update(
        {"prs": list(rule.prs), "unmerged_prs": list(rule.unmerged_prs), "first_release": rule.first_release}
    )
    return descriptor


def _message(fix: FixResult) -> str:
    text = f"{fix.id} is {fix.status} (decided by {fix.decided_by}): {fix.headline or fix.title + '.'}"
    if fix.reason:
        text += f" {fix.reason[0].upper()}{fix.reason[1:]}."
    if fix.affects_reason:
        text += f" For the drafter given: {fix.affects_reason}."
    return f"{text} Remedy: {fix.remedy}"


def _split_evidence(fix: FixResult, rule: Rule | None) -> tuple[list[Evidence], list[Evidence]]:
    """Evidence whose form carries the fix's verdict is where the result is; the rest is related."""
    verdicts = {form.id: form.verdict for form in rule.forms} if rule is not None else {}
    deciding = [item for item in fix.evidence if verdicts.get(item.form) == fix.status]
    if not deciding:
        return list(fix.evidence), []
    return deciding, [item for item in fix.evidence if item not in deciding]


def _location(item: Evidence) -> dict[str, Any]:
    physical: dict[str, Any] = {"artifactLocation": {"uri": item.file, "uriBaseId": ROOT_ID}}
    if item.line:
        physical["region"] = {"startLine": item.line}
    note = f" {item.note}" if item.note else ""
    return {
        "physicalLocation": physical,
        "logicalLocations": [{"fullyQualifiedName": item.symbol}],
        "message": {"text": f"{item.symbol} [{item.form}]{note}"},
    }


def _anchor_location(rule: Rule | None, engine: Engine) -> dict[str, Any]:
    """No evidence (e.g. the file is missing): the file the rule reads first, else (no rule of this engine)
    the package's ``__init__.py``."""
    uri = rule.anchors[0].file if rule is not None and rule.engine == engine.name else f"{engine.package}/__init__.py"
    return {"physicalLocation": {"artifactLocation": {"uri": uri, "uriBaseId": ROOT_ID}}}


def _root(report: CheckReport) -> dict[str, Any]:
    location = report.target.location
    if report.target.directory:
        return {"uri": Path(location).as_uri().rstrip("/") + "/"}
    return {"description": {"text": f"{report.target.kind} {location}"}}


def _fingerprint(report: CheckReport, fix: FixResult) -> str:
    """Stable across runs on the same target, so dashboards track one alert per fix and target."""
    # surrogateescape: a path that is not UTF-8 (lone surrogates here) hashes as its bytes
    return hashlib.sha256(f"{fix.id}\0{report.target.identity}".encode("utf-8", "surrogateescape")).hexdigest()[:32]


def _suppression(waiver: Waiver) -> dict[str, Any]:
    return {
        "kind": "external",
        "status": "accepted",
        "justification": waiver.reason,
        "properties": {"until": waiver.until.isoformat() if waiver.until else None, "target": waiver.target},
    }
