"""The algorithm-flag question: what a predicate of the speculative method's member
answers, computed by the tree's own method (``SpeculativeAlgorithm.DFLASH.is_eagle()``).

The enumeration's members are stood in by distinct values named after them (an enum's
members compare by identity, so equality of distinct values is the same test); the
predicate's own code runs on the member. A predicate that does anything else with its
member (calls another method of it) stops at a gap: the answer is unknown, with the reason.
"""

from __future__ import annotations

import ast
import dataclasses

from ..isolation import sandbox
from ..isolation.sandbox import Call, SandboxError
from ..rules import Flag
from ..source import SourceError, SourceTree, Symbol
from .computed import RunProgram
from .definitions import ExtractError, Place
from .interpret import failure
from .program import ProgramBuilder


@dataclasses.dataclass(frozen=True)
class FlagAnswer:
    """What the predicate answered for the member (None: not known, ``reason`` says why), and where it is."""

    flag: Flag
    value: bool | None
    reason: str
    place: Place | None = None


def evaluate(tree: SourceTree, flag: Flag, run: RunProgram) -> FlagAnswer:
    where = f"{flag.enum}.{flag.predicate}"
    try:
        parsed = tree.parsed(flag.file)
    except SourceError as exc:
        return FlagAnswer(flag, None, f"{flag.file} could not be read: {exc}")
    found = parsed.symbols(flag.enum) if parsed else []
    if len(found) != 1 or not isinstance(found[0].node, ast.ClassDef):
        return FlagAnswer(flag, None, f"{flag.enum} is not defined once in {flag.file}")
    members = _members(found[0].node)
    methods = [
        node
        for node in found[0].node.body
        if isinstance(node, ast.FunctionDef) and node.name == flag.predicate  # the last one is the one Python keeps
    ]
    if flag.member not in members:
        return FlagAnswer(flag, None, f"{flag.enum} has no member {flag.member} in {flag.file}")
    if not methods:
        return FlagAnswer(flag, None, f"{where} is not defined in {flag.file}")
    method = methods[-1]
    assert parsed is not None
    place = Place(flag.file, where, method.lineno)
    builder = ProgramBuilder(tree, (flag.enum,))
    try:
        name = builder.function(Symbol(flag.file, method.name, method, parsed))
    except ExtractError as exc:
        return FlagAnswer(flag, None, f"{where} could not be copied: {exc}", place)
    member = f"{flag.enum}.{flag.member}"
    globals_ = {gap: sandbox.gap(label) for gap, label in builder.gaps.items()}
    globals_[flag.enum] = sandbox.strict_object(flag.enum, **{each: f"{flag.enum}.{each}" for each in members})
    try:
        outcomes = run(builder.chunks, [Call("flag", f"{name}(member)", (("member", member),))], {}, globals_)
    except SandboxError as exc:
        return FlagAnswer(flag, None, str(exc), place)
    outcome = outcomes.get("flag")
    if outcome is None or not outcome.ok:
        return FlagAnswer(
            flag, None, f"{where}() for {member} {failure(outcome) if outcome else 'gave no answer'}", place
        )
    if not isinstance(outcome.value, bool):
        return FlagAnswer(flag, None, f"{where}() for {member} gave {outcome.value!r}, not true or false", place)
    return FlagAnswer(flag, outcome.value, "", place)


def _members(node: ast.ClassDef) -> list[str]:
    """The names the class body assigns (an enumeration's members)."""
    return [
        target.id
        for statement in node.body
        if isinstance(statement, ast.Assign)
        for target in statement.targets
        if isinstance(target, ast.Name)
    ]
