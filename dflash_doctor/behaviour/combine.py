"""Behaviour decides, structure explains: one FixResult from both sides."""

from __future__ import annotations

import dataclasses
from collections import defaultdict

from ..engine import REBOUND, UNRECOGNISED
from ..model import ABSENT, BEHAVIOUR, PARTIAL, PRESENT, UNKNOWN, BehaviourAnswer, FixResult
from ..rules import IGNORE, Rule

DECISIVE = (PRESENT, ABSENT, PARTIAL)


def combine(rule: Rule, structure: FixResult, answer: BehaviourAnswer | None, why_not: str) -> FixResult:
    """``answer`` None: behaviour did not run for this target (``why_not`` says why);
    only then may the forms decide, and only through forms that describe the exact code."""
    fix = dataclasses.replace(structure, behaviour=answer, structure_status=structure.status)
    if structure.status not in (*DECISIVE, UNKNOWN) or any(item.form == REBOUND for item in structure.evidence):
        return fix  # not applicable, or code read that is not the code that runs: nothing to run
    loose, exact = _sites(rule, structure)
    if answer is not None and answer.status is not None:
        answer = _with_uncovered(rule, structure, answer)
        fix = dataclasses.replace(fix, behaviour=answer)
        if answer.status is None:
            return dataclasses.replace(fix, status=UNKNOWN, decided_by=BEHAVIOUR, reason=answer.reason)
        decided = dataclasses.replace(fix, decided_by=BEHAVIOUR)
        if structure.status in DECISIVE and exact == structure.status != answer.status:
            reason = (f"BEHAVIOUR AND STRUCTURE DISAGREE: running the tree's code gives {answer.status}"
                      f"{f' ({answer.reason})' if answer.reason else ''}, but the code's forms read {structure.status}"
                      f"{f' ({structure.reason})' if structure.reason else ''}; trust neither until checked by hand")
            return dataclasses.replace(decided, status=UNKNOWN, reason=reason)
        remedy = "none needed" if answer.status == PRESENT else structure.remedy if structure.status != PRESENT else rule.remedy
        return dataclasses.replace(decided, status=answer.status, reason=answer.reason, remedy=remedy)
    if answer is not None:  # behaviour ran on this tree and could not follow its code: no guess from the forms
        reading = f"; the code's forms read {structure.status}" if structure.status in DECISIVE else ""
        return dataclasses.replace(fix, status=UNKNOWN, decided_by=BEHAVIOUR,
                                   reason=f"behaviour could not answer: {answer.reason}{reading}")
    if structure.status in DECISIVE and exact != structure.status:
        where = ", ".join(loose)
        reason = (f"only a catch-all form matched ({where}): it cannot tell the fix's code from other code, "
                  f"and behaviour did not run: {why_not}")
        return dataclasses.replace(fix, status=UNKNOWN, reason=reason)
    note = f"behaviour did not run: {why_not}"
    return dataclasses.replace(fix, reason=f"{structure.reason}; {note}" if structure.reason else note)


def _with_uncovered(rule: Rule, structure: FixResult, answer: BehaviourAnswer) -> BehaviourAnswer:
    """Links the question does not run (``uncovered`` anchors) are read from their forms:
    unrecognised code there leaves the answer open; their verdicts join the chain."""
    uncovered = [anchor for anchor in rule.anchors if anchor.id in rule.behaviour.uncovered]
    forms = {form.id: form for form in rule.forms}
    verdicts = {answer.status}
    notes = []
    for item in structure.evidence:
        anchor = next((a for a in uncovered if item.symbol == a.symbol or item.symbol.endswith(f".{a.name}")), None)
        if anchor is None:
            continue
        if item.form == UNRECOGNISED:
            why = f"{item.symbol} ({item.file}:{item.line}), which behaviour does not run, has a form this rule does not know"
            return dataclasses.replace(answer, status=None, reason=why)
        form = forms.get(item.form)
        if form is not None and form.verdict in DECISIVE and not form.catch_all:
            verdicts.add(form.verdict)
            if form.verdict != PRESENT:
                notes.append(f"{item.symbol}: {form.description}")
    status = PRESENT if verdicts == {PRESENT} else ABSENT if verdicts == {ABSENT} else PARTIAL
    reason = "; ".join([answer.reason, *notes]) if status != PRESENT else answer.reason
    return dataclasses.replace(answer, status=status, reason=reason.strip("; "))


def _sites(rule: Rule, structure: FixResult) -> tuple[list[str], str | None]:
    """Sites whose deciding forms are all catch-alls, and the verdict the other forms give alone."""
    forms = {form.id: form for form in rule.forms}
    by_site: dict[tuple[str, str], set[str]] = defaultdict(set)
    lines: dict[tuple[str, str], int | None] = {}
    for item in structure.evidence:
        form = forms.get(item.form)
        if form is not None and form.verdict != IGNORE:
            by_site[(item.file, item.symbol)].add(item.form)
            lines.setdefault((item.file, item.symbol), item.line)
    loose = [
        f"{symbol} in {file}:{lines[(file, symbol)]}"
        for (file, symbol), ids in by_site.items()
        if all(forms[form_id].catch_all for form_id in ids)
    ]
    exact = {forms[form_id].verdict for ids in by_site.values() for form_id in ids if not forms[form_id].catch_all}
    status = None if not exact else PRESENT if exact == {PRESENT} else ABSENT if exact == {ABSENT} else PARTIAL
    return loose, status
