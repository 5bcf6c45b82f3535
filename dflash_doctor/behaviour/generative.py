"""Which target architectures the engine serves for generation, by its own predicate run on
each name: a pooling model (an embedding encoder that inherits a generative model's hook)
never decodes, so no drafter ever runs on what it taps."""

from __future__ import annotations

import ast

from ..isolation import sandbox
from ..isolation.sandbox import Call, SandboxError
from ..source import SourceError, SourceTree, Symbol
from .computed import RunProgram
from .definitions import ExtractError
from .program import ProgramBuilder


def generative(tree: SourceTree, predicate: str, names: list[str], run: RunProgram) -> dict[str, bool]:
    """Name -> whether ``predicate`` (``file:function``, called with a list holding the one name)
    says the engine generates with it; a name it gives no true-or-false answer for is missing."""
    file, _, function = predicate.partition(":")
    try:
        parsed = tree.parsed(file)
    except SourceError:
        return {}
    defs = (
        [node for node in parsed.tree.body if isinstance(node, ast.FunctionDef) and node.name == function]
        if parsed
        else []
    )
    if parsed is None or not defs:
        return {}
    builder = ProgramBuilder(tree, ())
    try:
        called = builder.function(Symbol(file, function, defs[-1], parsed))  # the last def is the one Python keeps
    except ExtractError:
        return {}
    calls = [Call(str(index), f"{called}([name])", (("name", name),)) for index, name in enumerate(names)]
    try:
        outcomes = run(builder.chunks, calls, {}, {gap: sandbox.gap(label) for gap, label in builder.gaps.items()})
    except SandboxError:
        return {}
    answers = {name: outcomes.get(str(index)) for index, name in enumerate(names)}
    return {
        name: outcome.value
        for name, outcome in answers.items()
        if outcome is not None and outcome.ok and isinstance(outcome.value, bool)
    }
