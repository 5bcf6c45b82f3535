"""`rules test`: every rule's snippets must produce exactly the forms they name."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from .engine import match_forms
from .model import ToolError
from .rules import IGNORE, Rule, load_rules


def check_rule(rule: Rule) -> Iterator[tuple[str, bool]]:
    for form in rule.forms:
        try:
            form.patterns, form.unless, form.where
        except ToolError as exc:
            yield f"{rule.id}: {exc}", False
            return
    if not rule.cases:
        yield f"{rule.id}: the rule has no cases", False
        return
    covered: set[str] = set()
    for case in rule.cases:
        try:
            module = cst.parse_module(case.code.strip() + "\n")
            got = [hit.form.id for hit in match_forms(rule.forms_for(case.anchor), module)]
        except (cst.ParserSyntaxError, KeyError) as exc:
            yield f"{rule.id}: {case.name}: case does not run: {exc}", False
            continue
        covered.update(got)
        ok = got == list(case.expect)
        detail = "" if ok else f" (expected {list(case.expect) or 'no form'}, got {got or 'no form'})"
        yield f"{rule.id}: {case.name}{detail}", ok
    for form in rule.forms:
        if form.id not in covered:
            yield f"{rule.id}: form {form.id} has no case that matches it", False
    decisive = {form.verdict for form in rule.forms if form.id in covered} - {IGNORE}
    if not decisive >= {"present", "absent"} and not decisive >= {"present", "partial"}:
        yield f"{rule.id}: needs at least one positive and one negative case", False


def run_rule_cases(rules: tuple[Rule, ...] | None = None) -> Iterator[tuple[str, bool]]:
    for rule in rules if rules is not None else load_rules():
        yield from check_rule(rule)
