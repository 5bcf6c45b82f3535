"""Behaviour decides, structure explains: one FixResult from both sides."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence

from ..structure.forms import REBOUND, UNKNOWN_CODE, UNRECOGNISED, restate
from ..model import ABSENT, BEHAVIOUR, PARTIAL, PRESENT, UNKNOWN, BehaviourAnswer, ConfigResult, FixResult
from ..rules import IGNORE, Rule, reference_words
from .decide import shortened

DECISIVE = (PRESENT, ABSENT, PARTIAL)

# What to do to get an answer, by why behaviour and structure leave a fix unknown.
DISAGREE = (
    "Report it with the JSON report (check --format json): running the tree's code and reading its forms "
    "disagree, so one of them misreads this tree; read the evidence by hand meanwhile."
)
NO_ANSWER = (
    "Behaviour could not follow this tree's code (the reason says where): report it with the JSON report "
    "(check --format json), and read the evidence by hand meanwhile."
)


def _run_it(why_not: str) -> str:
    return (
        f"Check the tree where its code can run, so behaviour may decide (check --path on the machine or in the "
        f"container that holds it, or check --host over ssh); here behaviour did not run: {why_not}."
    )


def combine(rule: Rule, structure: FixResult, answer: BehaviourAnswer | None, why_not: str) -> FixResult:
    """``answer`` None: behaviour did not run for this target (``why_not`` says why);
    only then may the forms decide, and only through forms that describe the exact code."""
    fix = dataclasses.replace(structure, behaviour=answer, structure_status=structure.status)
    if structure.status not in (*DECISIVE, UNKNOWN) or any(item.form == REBOUND for item in structure.evidence):
        return fix  # not applicable, or code read that is not the code that runs: nothing to run
    loose, exact = _sites(rule, structure)
    if answer is not None and answer.status is not None:
        answer, notes = _with_uncovered(rule, structure, answer)
        fix = dataclasses.replace(fix, behaviour=answer)
        if answer.status is None:
            return restate(rule, fix, UNKNOWN, answer.reason, UNKNOWN_CODE, decided_by=BEHAVIOUR)
        decided = dataclasses.replace(fix, decided_by=BEHAVIOUR)
        words = in_words(answer, notes)
        if answer.scope:
            said = f"for the target config's {', '.join(answer.scope)}"
            return restate(rule, decided, answer.status, f"{said}: {words}" if words else said)
        if structure.status in DECISIVE and exact == structure.status != answer.status and answer.status == PRESENT:
            # a present that an exact form contradicts never opens the gate
            reason = (
                f"BEHAVIOUR AND STRUCTURE DISAGREE: running the tree's code gives {answer.status}"
                f"{f' ({words})' if words else ''}, but the code's forms read {structure.status}"
                f"{f' ({structure.reason})' if structure.reason else ''}; trust neither until checked by hand"
            )
            return restate(rule, decided, UNKNOWN, reason, DISAGREE)
        if structure.status in DECISIVE and exact == structure.status != answer.status:
            # behaviour observed the defect in the values the tree's code computed: they decide,
            # and the forms that read otherwise are said
            words = (
                f"{words}; the code's forms read {structure.status}"
                f"{f' ({structure.reason})' if structure.reason else ''}, but running the code shows the failure"
            )
        return restate(rule, decided, answer.status, words)
    if answer is not None:  # behaviour ran on this tree and could not follow its code: no guess from the forms
        reading = f"; the code's forms read {structure.status}" if structure.status in DECISIVE else ""
        cause = (
            structure.remedy if structure.status == UNKNOWN else NO_ANSWER
        )  # the forms may know why (a file that does not parse)
        return restate(
            rule, fix, UNKNOWN, f"behaviour could not answer: {answer.reason}{reading}", cause, decided_by=BEHAVIOUR
        )
    if structure.status in DECISIVE and exact != structure.status:
        where = ", ".join(loose)
        reason = (
            f"only a catch-all form matched ({where}): it cannot tell the fix's code from other code, "
            f"and behaviour did not run: {why_not}"
        )
        return restate(rule, fix, UNKNOWN, reason, _run_it(why_not))
    note = f"behaviour did not run: {why_not}"
    fix = dataclasses.replace(fix, reason=f"{structure.reason}; {note}" if structure.reason else note)
    return dataclasses.replace(fix, remedy=f"{fix.remedy} {_run_it(why_not)}") if fix.status == UNKNOWN else fix


def _with_uncovered(rule: Rule, structure: FixResult, answer: BehaviourAnswer) -> tuple[BehaviourAnswer, list[str]]:
    """Links the question does not run (``uncovered`` anchors) are read from their forms:
    unrecognised code there leaves the answer open; their verdicts join the chain
    (the sentences of the forms that break it are returned too)."""
    covered_by = rule.behaviour.uncovered if rule.behaviour is not None else ()
    uncovered = [anchor for anchor in rule.anchors if anchor.id in covered_by]
    forms = {form.id: form for form in rule.forms}
    verdicts = {answer.status}
    notes = []
    for item in structure.evidence:
        anchor = next((a for a in uncovered if item.symbol == a.symbol or item.symbol.endswith(f".{a.name}")), None)
        if anchor is None:
            continue
        if item.form == UNRECOGNISED:
            why = (
                f"{item.symbol} ({item.file}:{item.line}), which behaviour does not run, has a form this rule does "
                "not know"
            )
            return dataclasses.replace(answer, status=None, reason=why), []
        form = forms.get(item.form)
        if form is not None and form.verdict in DECISIVE and not form.catch_all:
            verdicts.add(form.verdict)
            if form.verdict != PRESENT:
                notes.append(f"{item.symbol}: {form.description}")
    status = PRESENT if verdicts == {PRESENT} else ABSENT if verdicts == {ABSENT} else PARTIAL
    reason = "; ".join([answer.reason, *notes]) if status != PRESENT else answer.reason
    return dataclasses.replace(answer, status=status, reason=reason.strip("; ")), notes


# The links of a chain (rules.QUESTIONS) as a reader says them, at the head of a broken link's "why".
LINK_WORDS = {
    "kv-cache-manager": "the block-drop flag handed to the KV cache manager",
    "resolver": "the resolver's answer",
    "sliding-window": "the sliding window of",
    "layer-index": "the index given to",
    "causality": "the causality of",
    "rotary-base": "the RoPE base of",
}


def in_words(answer: BehaviourAnswer, notes: Sequence[str] = ()) -> str:
    """Which configurations fail (and the first broken link) and which work, with the
    reference configs named in words (rules/reference/drafters/names.toml); empty when present."""
    if answer.status == PRESENT:
        return ""
    fails = [f"{who}: {why}" if why else who for who, why in _grouped(answer.fails)]
    works = shortened([who for who, _ in _grouped(answer.works)])
    parts = [f"fails for {'; '.join(fails)}"] if fails else []
    parts += [f"works for {', '.join(works)}"] if works else []
    return "; ".join([*parts, *notes])


def _why(result: ConfigResult) -> str:
    """What broke, in a reader's words."""
    if result.refusals:
        return f"no runner accepts it ({'; '.join(f'{runner.upper()}: {why}' for runner, why in result.refusals)})"
    broken = result.broken
    if broken is None:
        return ""
    layer = f" layer {broken.layer}" if broken.layer is not None else ""
    note = f" ({broken.note})" if broken.note else ""
    return f"{LINK_WORDS.get(broken.part, broken.part)}{layer} is {broken.observed!r}, needs {broken.expected!r}{note}"


def _grouped(results: Sequence[ConfigResult]) -> list[tuple[str, str]]:
    """(who in words, why) per configuration and setting, its runners merged where they fail alike."""
    runners: dict[tuple[str, str | None, str], list[str]] = defaultdict(list)
    for result in results:
        runners[(result.config, result.setting, _why(result))] += [result.runner.upper()] if result.runner else []
    words = reference_words()
    out = []
    for (config, setting, why), on in runners.items():
        who = words.get(config) or (
            f"your drafter ({config.removeprefix('user:')})" if config.startswith("user:") else config
        )
        if on:
            who += f" on the {' and '.join(on)} runner{'s' if len(on) > 1 else ''}"
        if setting:
            who += " by default" if setting == "default" else f" with {setting} set"
        out.append((who, why))
    return out


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
