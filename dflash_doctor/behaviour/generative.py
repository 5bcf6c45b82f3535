"""Which target architectures the engine serves for generation, by its own predicate run on
each name: a pooling model (an embedding encoder that inherits a generative model's hook)
never decodes, so no drafter ever runs on what it taps."""

from __future__ import annotations

from ..isolation import sandbox
from ..isolation.sandbox import Call, SandboxError
from ..source import SourceError, SourceTree
from .computed import RunProgram
from .definitions import ExtractError, kept_function
from .program import ProgramBuilder


def generative(tree: SourceTree, predicate: str, names: list[str], run: RunProgram) -> dict[str, bool]:
    """Name -> whether ``predicate`` (``file:function``, called with a list holding the one name)
    says the engine generates with it; a name it gives no true-or-false answer for is missing."""
    try:
        symbol = kept_function(tree, predicate)
    except SourceError:
        return {}
    if symbol is None:
        return {}
    builder = ProgramBuilder(tree, ())
    try:
        called = builder.function(symbol)
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
