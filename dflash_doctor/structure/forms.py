"""Evaluate rules on a tree: anchors -> forms -> one verdict per fix."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from ..engines import named
from .liveness import dead_nodes, module_constants
from ..model import ABSENT, NOT_APPLICABLE, PARTIAL, PRESENT, UNKNOWN, Evidence, FixResult
from .patterns import Match, NodeIndex, compile_form, form_patterns, form_unless, form_where, subtree_ids
from .rebinding import rebound_at, rebound_in, shadowed_at
from ..rules import IGNORE, Anchor, Form, Rule
from ..source import Located, SourceError, SourceTree, Symbol, locate


REBOUND = "rebound"  # evidence form: the anchored definition is replaced later in its module
UNRECOGNISED = "unrecognised"  # evidence form: code at an anchor that no form of the rule matches
DEAD = "dead-code"  # evidence form: a form found only in code that never runs (not counted)
SHADOWED = "shadowed"  # evidence form: a def that a later def of the same name replaces (not read)

# What to do to get an answer, by why a fix is unknown (never an upgrade: nothing says one is needed).
UNREADABLE = (
    "A file this fix reads cannot be read as Python (the reason names it): restore it or reinstall {engine}, "
    "then check again."
)  # {engine}: the tree's engine, as people write it
UNKNOWN_CODE = (
    "The code at the evidence is in a form this rule does not know: read it by hand, and report it "
    "with the JSON report (check --format json) so the rule can learn it."
)
MISSING_CODE = (
    "Code this fix needs was not found anywhere in the package (the reason names it): it may have moved "
    "or been removed; report the tree with the JSON report (check --format json) so the rule can follow it."
)
NO_RULE = (
    "dflash-doctor cannot judge this fix in {engine} yet: its rule describes {other}'s code. Read "
    "{engine}'s DFlash code by hand for this defect, or run a dflash-doctor whose rules cover {engine}."
)
NOT_ENGINE = (
    "The code this rule starts from is missing: check that the target is a {engine} tree (--path names the "
    "directory holding {package}/), or report the tree with the JSON report (check --format json)."
)


def restate(rule: Rule, fix: FixResult, status: str, reason: str, cause: str = "", **changes: Any) -> FixResult:
    """``fix`` with a new verdict, and the headline and remedy that go with it."""
    return dataclasses.replace(
        fix,
        status=status,
        reason=reason,
        headline=rule.headline(status),
        remedy=rule.remedy_for(status, fix.evidence, cause),
        **changes,
    )


@dataclasses.dataclass(frozen=True)
class FormHit:
    form: Form
    matches: tuple[Match, ...]  # empty for a form decided by ``unless`` alone


def match_forms(forms: list[Form], module: cst.CSTNode, constants: Mapping[str, object] | None = None) -> list[FormHit]:
    """Forms matching the code of ``module`` that runs, in rule order (see ``read_forms``)."""
    return read_forms(forms, module, constants)[0]


def read_forms(
    forms: list[Form], module: cst.CSTNode, constants: Mapping[str, object] | None = None
) -> tuple[list[FormHit], list[FormHit]]:
    """Forms matching the code that runs, in rule order, and the forms found only in
    code that never runs (``liveness``: ``constants`` are names known without running).

    A match that lies inside code an earlier form already claimed is dropped:
    the comprehension that shifts the ids also contains the raw read.
    """
    hits: list[FormHit] = []
    unread: list[FormHit] = []
    claimed: set[int] = set()
    index = NodeIndex(module)
    dead: set[int] | None = None

    def live(found: Match) -> bool:
        nonlocal dead
        if dead is None:
            dead = dead_nodes(module, constants)
        return id(found.node) not in dead

    for form in forms:
        if any(live(found) for pattern in form_unless(form) for found in pattern.find(index)):
            continue
        if not form_patterns(form):
            hits.append(FormHit(form, ()))
            continue
        found_all = [
            found
            for pattern in form_patterns(form)
            for found in pattern.find(index)
            if id(found.node) not in claimed and _where_holds(form, found)
        ]
        matches = [found for found in found_all if live(found)]
        if matches:
            hits.append(FormHit(form, tuple(matches)))
            for found in matches:
                claimed.update(subtree_ids(found.node))
        elif found_all:
            unread.append(FormHit(form, tuple(found_all)))
    return hits, unread


def _where_holds(form: Form, found: Match) -> bool:
    for metavariable, test, pattern in form_where(form):
        bound = found.bindings.get(metavariable)
        if bound is None:
            continue  # this pattern of the form does not bind it
        contains = next(pattern.find(bound), None) is not None
        if contains != (test == "contains"):
            return False
    return True


@dataclasses.dataclass(frozen=True)
class SiteResult:
    verdicts: frozenset[str]  # IGNORE included; empty when no form is recognised
    evidence: tuple[Evidence, ...]


def evaluate_site(rule: Rule, anchor: Anchor, symbol: Symbol) -> SiteResult:
    module, offset = symbol.cst()
    constants = module_constants(symbol.parsed.tree) if _names(symbol.node, "TYPE_CHECKING") else {}
    hits, unread = read_forms(rule.forms_for(anchor.id), module, constants)
    lines = _line_finder(symbol, module, offset)
    evidence = []
    if not hits:
        note = "no known form of this fix matches this code" + (" where it runs" if unread else "")
        evidence.append(Evidence(symbol.file, symbol.line, symbol.qualname, UNRECOGNISED, note))
    for hit in hits:
        for line in sorted({lines(found.node) for found in hit.matches}) or [symbol.line]:
            evidence.append(Evidence(symbol.file, line, symbol.qualname, hit.form.id, hit.form.description))
    for hit in unread:
        note = f"not counted, this code never runs: {hit.form.description} ({hit.form.id})"
        evidence.extend(
            Evidence(symbol.file, line, symbol.qualname, DEAD, note)
            for line in sorted({lines(found.node) for found in hit.matches})
        )
    return SiteResult(frozenset(hit.form.verdict for hit in hits), tuple(evidence))


def _names(node: ast.AST, name: str) -> bool:
    return any(isinstance(item, ast.Name) and item.id == name for item in ast.walk(node))


def _line_finder(symbol: Symbol, module: cst.Module, offset: int) -> Callable[[cst.CSTNode], int]:
    """Map a node of the symbol's tree to its line in the file.

    Positions come from libcst's code generation, which is costly on a long
    function; so it runs only on the one top-level statement of the body
    that holds the node, whose first line the stdlib ast already knows.
    """
    definition = module.body[0] if len(module.body) == 1 else None
    body = getattr(getattr(definition, "body", None), "body", None)
    starts = sorted({_first_line(stmt) for stmt in getattr(symbol.node, "body", [])})
    if not isinstance(body, Sequence) or len(body) != len(starts):
        positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
        return lambda node: positions[node].start.line + offset
    owners = {}
    for index, statement in enumerate(body):
        for node_id in subtree_ids(statement):
            owners[node_id] = index

    def line(node: cst.CSTNode) -> int:
        index = owners.get(id(node))
        if index is None:
            return symbol.line
        statement = body[index]
        if node is statement:  # the copy below without leading lines is another node
            return starts[index]
        alone = cst.Module(body=[statement.with_changes(leading_lines=())])
        positions = MetadataWrapper(alone, unsafe_skip_copy=True).resolve(PositionProvider)
        return starts[index] + positions[node].start.line - 1

    return line


def _first_line(statement: ast.stmt) -> int:
    decorators = getattr(statement, "decorator_list", None)
    return min([statement.lineno, *(d.lineno for d in decorators)]) if decorators else statement.lineno


class FormReader:
    """Runs rules against one tree; files are located and parsed once."""

    def __init__(self, tree: SourceTree) -> None:
        self.tree = tree
        self._strings: dict[ast.AST, frozenset[str]] = {}  # a definition -> the str constants in it

    def _applies(self, rule: Rule, symbols: list[Symbol] | SourceError) -> bool:
        """Whether the rule's literal is in the definition it names (a string, or a name it assigns):
        every rule names the same
        class (SpeculativeConfig, 5,000 nodes on 0.34.0), walked once, not once per rule and question."""
        if not isinstance(symbols, list):
            return False
        for symbol in symbols:
            if symbol.node not in self._strings:
                nodes = list(ast.walk(symbol.node))
                self._strings[symbol.node] = frozenset(
                    [n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str)]
                    # and the names it assigns: an enum's member (DFLASH = auto())
                    + [n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
                )
            if rule.applies.literal in self._strings[symbol.node]:
                return True
        return False

    def _locate(self, wanted: set[tuple[str, str]], required: set[tuple[str, str]]) -> Located:
        found, _ = locate(self.tree, wanted, required)
        return found

    def run(self, rules: tuple[Rule, ...]) -> tuple[FixResult, ...]:
        """Applicability first: the anchors of a rule that does not apply are never looked for.
        A rule of another engine than the tree's is not looked for at all: its fix is unknown."""
        ours = [rule for rule in rules if rule.engine == self.tree.engine.name]
        applies = {(rule.applies.file, rule.applies.symbol) for rule in ours}
        located = self._locate(applies, applies)
        applicable = [rule for rule in ours if self._applies(rule, located[(rule.applies.file, rule.applies.symbol)])]
        anchors = {(a.file, a.symbol) for rule in applicable for a in rule.anchors}
        required = {(a.file, a.symbol) for rule in applicable for a in rule.anchors if self._required(a)}
        located.update(self._locate(anchors - applies, required))
        return tuple(
            self._check(rule, located) if rule.engine == self.tree.engine.name else self._no_rule(rule)
            for rule in rules
        )

    def _no_rule(self, rule: Rule) -> FixResult:
        """The fix of a rule that describes another engine's code: unknown, and why (its PRs are the other engine's)."""
        engine, other = self.tree.engine.display, named(rule.engine).display
        reason = f"no rule judges this fix in {engine} yet (the rule {rule.id} describes {other}'s code)"
        fix = FixResult(rule.id, UNKNOWN, rule.title, (), (), "", reason)
        return restate(rule, fix, UNKNOWN, reason, NO_RULE.format(engine=engine, other=other))

    def _rebound(self, symbol: Symbol) -> tuple[str, int] | None:
        """Where ``symbol`` may be replaced after it is defined: in its own module, or in
        a package ``__init__.py`` that Python runs before the module is used."""
        line = rebound_at(symbol)
        if line is not None:
            return symbol.file, line
        parts = symbol.qualname.split(".")
        directories = symbol.file.split("/")[:-1]
        for depth in range(1, len(directories) + 1):
            init = "/".join(directories[:depth]) + "/__init__.py"
            try:
                parsed = self.tree.parsed(init)
            except SourceError:
                continue
            found = rebound_in(parsed.tree, parts) if parsed is not None else None
            if found is not None:
                return init, found
        return None

    def _required(self, anchor: Anchor) -> bool:
        """A non-optional anchor, unless the file its code goes with is gone from the tree."""
        if anchor.optional:
            return False
        if anchor.gone_with is None:
            return True
        try:
            return self.tree.data(anchor.gone_with) is not None
        except SourceError:
            return True

    def _check(self, rule: Rule, located: Located) -> FixResult:
        def result(status: str, evidence: Sequence[Evidence] = (), reason: str = "", cause: str = "") -> FixResult:
            fix = FixResult(rule.id, status, rule.title, rule.prs + rule.unmerged_prs, tuple(evidence), "", reason)
            return restate(rule, fix, status, reason, cause)

        engine = self.tree.engine
        applies = located[(rule.applies.file, rule.applies.symbol)]
        if isinstance(applies, SourceError):
            return result(
                UNKNOWN,
                reason=f"cannot tell whether this {engine.display} has DFlash: {applies}",
                cause=UNREADABLE.format(engine=engine.display),
            )
        if not applies:
            return result(
                UNKNOWN,
                reason=f"cannot tell whether this {engine.display} has DFlash: {rule.applies.symbol} not found in "
                f"{rule.applies.file} or elsewhere",
                cause=NOT_ENGINE.format(engine=engine.display, package=engine.package),
            )
        if not self._applies(rule, applies):
            first = applies[0]
            missing = Evidence(
                first.file, first.line, first.qualname, "no-dflash", f"no {rule.applies.literal!r} in {first.qualname}"
            )
            return result(NOT_APPLICABLE, [missing], reason=f"this {engine.display} has no DFlash support at all")

        verdicts: set[str] = set()
        evidence: list[Evidence] = []
        problems: list[str] = []
        causes: list[str] = []
        for anchor in rule.anchors:
            symbols = located[(anchor.file, anchor.symbol)]
            if isinstance(symbols, SourceError):
                problems.append(str(symbols))
                causes.append(UNREADABLE.format(engine=engine.display))
                continue
            if not symbols:
                if self._required(anchor):
                    problems.append(f"{anchor.symbol} not found ({anchor.file} or anywhere in the package)")
                    causes.append(MISSING_CODE)
                continue
            for symbol in symbols:
                where = self._rebound(symbol)
                if where is not None and where == (symbol.file, shadowed_at(symbol)):
                    note = (
                        f"not counted, this code never runs: the def of the same name at line {where[1]} "
                        "replaces it (Python keeps the last def)"
                    )
                    evidence.append(Evidence(symbol.file, symbol.line, symbol.qualname, SHADOWED, note))
                    continue
                if where is not None:
                    file, line = where
                    note = (
                        f"{symbol.qualname} may be replaced at line {line} of {file}, after its definition: "
                        "the code read here is not the code that runs"
                    )
                    evidence.append(Evidence(file, line, symbol.qualname, REBOUND, note))
                    problems.append(f"{note} ({file}:{line})")
                    causes.append(UNKNOWN_CODE)
                    continue
                try:
                    site = evaluate_site(rule, anchor, symbol)
                except (SourceError, cst.ParserSyntaxError) as exc:
                    problems.append(f"{symbol.file}: {exc}")
                    causes.append(UNREADABLE.format(engine=engine.display))
                    continue
                evidence.extend(site.evidence)
                if not site.verdicts:
                    problems.append(
                        f"{symbol.qualname} in {symbol.file}:{symbol.line} has a form this rule does not know"
                    )
                    causes.append(UNKNOWN_CODE)
                verdicts |= site.verdicts - {IGNORE}
        if problems:
            return result(UNKNOWN, evidence, "; ".join(problems), " ".join(dict.fromkeys(causes)))
        if not verdicts:
            return result(
                UNKNOWN,
                evidence,
                "none of the code this rule reads decides the fix (all of it is off the DFlash path)",
                UNKNOWN_CODE,
            )
        status = PRESENT if verdicts == {PRESENT} else ABSENT if verdicts == {ABSENT} else PARTIAL
        return result(status, evidence, "" if status == PRESENT else forms_read(rule, evidence))


def forms_read(rule: Rule, evidence: Sequence[Evidence]) -> str:
    """The sentences of the deciding forms the evidence shows, in rule order: the reason a reader gets."""
    shown = {item.form for item in evidence}
    return "; ".join(form.description for form in rule.forms if form.id in shown and form.verdict != IGNORE)


def warm_up(rules: tuple[Rule, ...]) -> None:
    """Compile the rules' patterns now (libcst is imported with this module):
    run in a thread while a remote round trip waits on the network."""
    for rule in rules:
        for form in rule.forms:
            compile_form(form)
