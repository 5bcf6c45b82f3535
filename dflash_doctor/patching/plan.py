"""From a check's verdicts to the exact new bytes of each file, proven in memory.

Only code the check saw is patched: the bytes it read, at the sites whose
evidence names an absent or partial form. The whole plan is then checked
again on a tree that serves the new bytes; every patched fix must come out
present, through the form its patch declares, or nothing is written.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping

from ..model import ABSENT, NOT_APPLICABLE, PARTIAL, PRESENT, UNKNOWN, Evidence, FixResult, ToolError
from ..rules import Form, Rule, for_engine
from ..source import ParsedFile, Scan, SourceError, SourceTree
from .state import sha256


@dataclasses.dataclass(frozen=True)
class SitePatch:
    fix: str
    file: str
    line: int | None
    symbol: str
    form: str
    produces: str


@dataclasses.dataclass(frozen=True)
class FileChange:
    file: str
    before: bytes  # exactly what the check read
    after: bytes
    sites: tuple[SitePatch, ...]

    @property
    def sha256_before(self) -> str:
        return sha256(self.before)

    @property
    def sha256_after(self) -> str:
        return sha256(self.after)

    def diff(self) -> str:
        lines = difflib.unified_diff(
            self.before.decode("utf-8").splitlines(keepends=True),
            self.after.decode("utf-8").splitlines(keepends=True),
            fromfile=f"a/{self.file}",
            tofile=f"b/{self.file}",
        )
        return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


@dataclasses.dataclass(frozen=True)
class Refusal:
    fix: str
    reason: str


@dataclasses.dataclass(frozen=True)
class PatchPlan:
    changes: tuple[FileChange, ...]
    refusals: tuple[Refusal, ...]
    after: tuple[FixResult, ...]  # the verdicts the tree will have once the changes are written

    @property
    def fixes(self) -> list[str]:
        return list(dict.fromkeys(site.fix for change in self.changes for site in change.sites))


def plan_patches(tree: SourceTree, rules: tuple[Rule, ...], fixes: tuple[FixResult, ...]) -> PatchPlan:
    from .codemod import PatchRefused  # heavy: libcst, and restore imports this module (apply) without patching

    rules = for_engine(rules, tree.engine.name)  # one rule per fix id: the tree's engine's where it has one
    by_id = {rule.id: rule for rule in rules}
    refusals: list[Refusal] = []
    texts: dict[str, str] = {}  # relpath -> text, patched so far
    sites: list[SitePatch] = []
    for fix in fixes:
        rule = by_id[fix.id]
        if rule.engine != tree.engine.name:  # no rule describes this engine's code of the fix
            refusals.append(Refusal(fix.id, f"no rule describes {tree.engine.display}'s code of this fix yet"))
            continue
        wanted = _sites_to_patch(rule, fix, refusals)
        if not wanted:
            continue
        try:
            patched, fix_sites = _patch_fix(tree, rule, wanted, texts)
        except PatchRefused as exc:
            refusals.append(Refusal(fix.id, str(exc)))
            continue
        texts.update(patched)
        sites.extend(fix_sites)
    changes = []
    for relpath, text in texts.items():
        before = tree.data(relpath)
        assert before is not None  # its text was read to patch it
        data = text.encode("utf-8")
        if data != before:
            changes.append(FileChange(relpath, before, data, tuple(site for site in sites if site.file == relpath)))
    after = _verify(tree, rules, changes) if changes else fixes
    return PatchPlan(tuple(changes), tuple(refusals), after)


def _sites_to_patch(rule: Rule, fix: FixResult, refusals: list[Refusal]) -> list[Evidence]:
    """The evidence a patch must change, or [] with a refusal recorded."""
    if fix.status == PRESENT:
        return []
    if fix.status == NOT_APPLICABLE:
        refusals.append(Refusal(fix.id, f"{fix.reason}; there is nothing to patch"))
        return []
    if fix.status == UNKNOWN:
        refusals.append(
            Refusal(
                fix.id, f"the check cannot place this code ({fix.reason}); only code forms the rule knows are patched"
            )
        )
        return []
    forms = {form.id: form for form in rule.forms}
    wanted = [item for item in fix.evidence if item.form in forms and forms[item.form].verdict in (ABSENT, PARTIAL)]
    if not wanted:  # the defect is seen (by behaviour) where no form of the rule places it: nothing to rewrite
        cause = rule.patch_refusal or "no code form this rule patches was found"
        refusals.append(Refusal(fix.id, f"{cause} ({fix.reason})" if fix.reason else cause))
        return []
    bare = [item for item in wanted if forms[item.form].patch is None]
    if bare:
        item = bare[0]
        where = f"form {item.form} at {item.file}:{item.line} in {item.symbol}"
        reason = f"{rule.patch_refusal} (found {where})" if rule.patch_refusal else f"no patch is declared for {where}"
        refusals.append(Refusal(fix.id, reason))
        return []
    return wanted


def _patch_fix(
    tree: SourceTree, rule: Rule, wanted: list[Evidence], texts: Mapping[str, str]
) -> tuple[dict[str, str], list[SitePatch]]:
    """New texts of the files this fix touches, and its sites; raises PatchRefused."""
    from .codemod import PatchRefused, patch_definitions  # heavy: as in plan_patches

    patched: dict[str, str] = {}
    sites: list[SitePatch] = []
    for relpath in dict.fromkeys(item.file for item in wanted):
        text = texts.get(relpath)
        if text is None:
            try:
                parsed = tree.parsed(relpath)
            except SourceError as exc:
                raise PatchRefused(str(exc)) from None
            if parsed is None:
                raise PatchRefused(f"{relpath} is no longer in the tree")
            text = parsed.text
        produces: dict[str, str] = {}
        here = [item for item in wanted if item.file == relpath]
        for symbol in dict.fromkeys(item.symbol for item in here):
            forms = _forms_at(rule, symbol, {item.form for item in here if item.symbol == symbol})
            text, edits = patch_definitions(text, relpath, symbol, forms)
            produces.update((edit.form.id, edit.produces) for edit in edits)
        for item in here:
            if item.form not in produces:
                raise PatchRefused(f"form {item.form} was not found again at {relpath}:{item.line} in {item.symbol}")
            sites.append(SitePatch(rule.id, relpath, item.line, item.symbol, item.form, produces[item.form]))
        patched[relpath] = text
    return patched, sites


def _forms_at(rule: Rule, symbol: str, seen: set[str]) -> list[Form]:
    """The forms of the anchors this symbol stands for (matched by name, as the check located it)."""
    name = symbol.rsplit(".", 1)[-1]
    anchors = [
        anchor.id
        for anchor in rule.anchors
        if anchor.name == name and seen & {form.id for form in rule.forms_for(anchor.id)}
    ]
    return [form for form in rule.forms if set(form.anchors) & set(anchors)]


class PatchedTree(SourceTree):
    """The checked tree as it will be: new bytes for the patched files, the rest unchanged."""

    def __init__(self, base: SourceTree, replaced: Mapping[str, bytes]) -> None:
        super().__init__()
        self.base = base
        self.engine = base.engine  # the rules read are the base tree's engine's
        self.replaced = dict(replaced)

    def read(self, relpath: str) -> bytes | None:
        return self.replaced[relpath] if relpath in self.replaced else self.base.data(relpath)

    def parsed(self, relpath: str) -> ParsedFile | None:
        return super().parsed(relpath) if relpath in self.replaced else self.base.parsed(relpath)

    def _searched(self, scan: Scan) -> Mapping[str, list[str]]:
        return self.base._searched(scan)

    def dist_info_text(self, name: str) -> str | None:
        return self.base.dist_info_text(name)


def _verify(tree: SourceTree, rules: tuple[Rule, ...], changes: list[FileChange]) -> tuple[FixResult, ...]:
    """Check the tree as the changes would leave it; a patch that does not make
    its fix present through the declared form is a rule bug, and stops the run."""
    from ..structure.forms import FormReader  # heavy: as in plan_patches

    after = FormReader(PatchedTree(tree, {change.file: change.after for change in changes})).run(rules)
    by_id = {fix.id: fix for fix in after}
    for change in changes:
        for site in change.sites:
            fix = by_id[site.fix]
            made = any(
                e.file == site.file and e.symbol == site.symbol and e.form == site.produces for e in fix.evidence
            )
            if fix.status != PRESENT or not made:
                raise ToolError(
                    f"the {site.fix} patch did not give the form {site.produces} that the rule reads as present "
                    f"(the check would say {fix.status}); nothing was changed"
                )
    return after
