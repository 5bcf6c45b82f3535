"""`rules test`: every rule's snippets must produce exactly the forms they name,
every declared patch, applied to a snippet, must produce its present form, and
every fix case (a small tree written in the rule) must get its verdict from the
side it names."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import libcst as cst

from .structure.forms import match_forms
from .structure.patterns import compile_form
from .model import ABSENT, PARTIAL, ToolError
from .patching.codemod import PatchRefused, apply_edits, site_edits
from .rules import IGNORE, FixCase, Rule
from .rulefile import load_rules
from .targets.path import PathTarget
from .verdicts import judge


def check_rule(rule: Rule) -> Iterator[tuple[str, bool]]:
    for form in rule.forms:
        try:
            compile_form(form)
        except ToolError as exc:
            yield f"{rule.id}: {exc}", False
            return
    if not rule.cases:
        yield f"{rule.id}: the rule has no cases", False
        return
    covered: set[str] = set()
    patched: set[str] = set()
    for case in rule.cases:
        try:
            module = cst.parse_module(case.code.strip() + "\n")
            hits = match_forms(rule.forms_for(case.anchor), module)
        except (cst.ParserSyntaxError, KeyError) as exc:
            yield f"{rule.id}: {case.name}: case does not run: {exc}", False
            continue
        got = [hit.form.id for hit in hits]
        covered.update(got)
        ok = got == list(case.expect)
        detail = "" if ok else f" (expected {list(case.expect) or 'no form'}, got {got or 'no form'})"
        yield f"{rule.id}: {case.name}{detail}", ok
        missing = [hit.form for hit in hits if hit.form.verdict in (ABSENT, PARTIAL)]
        if ok and missing and all(form.patch for form in missing):
            line, patch_ok, applied = _check_patch(rule, case.anchor, case.name, module)
            if applied:
                patched.update(form.id for form in missing)
            yield line, patch_ok
    for form in rule.forms:
        if form.id not in covered:
            yield f"{rule.id}: form {form.id} has no case that matches it", False
        elif form.patch and form.id not in patched:
            yield f"{rule.id}: the patch of form {form.id} has no case to be tried on", False
    decisive = {form.verdict for form in rule.forms if form.id in covered} - {IGNORE}
    if not decisive >= {"present", "absent"} and not decisive >= {"present", "partial"}:
        yield f"{rule.id}: needs at least one positive and one negative case", False
    for fix_case in rule.fix_cases:
        yield _check_fix_case(rule, fix_case)


def _check_fix_case(rule: Rule, case: FixCase) -> tuple[str, bool]:
    """Write the case's tree to a temporary directory and judge it like a user's tree
    (behaviour in the isolated child, no results cache)."""
    with tempfile.TemporaryDirectory(prefix="dflash-doctor-case-") as scratch:
        root = Path(scratch)
        for relpath, code in case.files:
            path = root / relpath
            if root.resolve() not in path.resolve().parents:
                return f"{rule.id}: fix case {case.name}: {relpath} is outside the tree", False
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(code.lstrip("\n"), encoding="utf-8")
        try:
            (fix,), _, _ = judge(PathTarget(root).resolve(), (rule,))
        except ToolError as exc:
            return f"{rule.id}: fix case {case.name}: does not run: {exc}", False
    ok = (fix.status, fix.decided_by) == (case.status, case.decided_by)
    detail = (
        ""
        if ok
        else f" (expected {case.status} by {case.decided_by}, got {fix.status} by {fix.decided_by}: {fix.reason})"
    )
    return f"{rule.id}: fix case {case.name}{detail}", ok


def _check_patch(rule: Rule, anchor: str, name: str, module: cst.Module) -> tuple[str, bool, bool]:
    """Patch the snippet: (line, ok, applied). A refusal is safe, so it passes;
    patched code must compile, hold the produced forms and nothing absent or partial."""
    forms = rule.forms_for(anchor)
    try:
        edits = site_edits(forms, module)
        code = apply_edits(module, edits).code
        compile(code, name, "exec", dont_inherit=True)
        got = match_forms(forms, cst.parse_module(code))
    except PatchRefused as exc:
        return f"{rule.id}: {name}: the patch refuses this code ({exc})", True, False
    except (SyntaxError, cst.ParserSyntaxError) as exc:
        return f"{rule.id}: {name}: the patched code does not compile: {exc}", False, True
    produced = sorted({edit.produces for edit in edits})
    still = sorted(hit.form.id for hit in got if hit.form.verdict in (ABSENT, PARTIAL))
    missing = sorted(set(produced) - {hit.form.id for hit in got})
    ok = not still and not missing
    detail = "" if ok else f" (still {still or 'nothing'}, missing {missing or 'nothing'})"
    return f"{rule.id}: {name}: patched to {', '.join(produced)}{detail}", ok, True


def run_rule_cases(rules: tuple[Rule, ...] | None = None) -> Iterator[tuple[str, bool]]:
    for rule in rules if rules is not None else load_rules():
        yield from check_rule(rule)
