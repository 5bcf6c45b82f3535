"""The ids the engine's worker hands a target's capture hook: the drafter's own, or what the
worker's map (the rule's ``id_map``) makes of them. SGLang's adds one to the ids of the
drafters that store layer-output ids when the target is a Muse Glimmer model.

The map reads the target's config. With ``--target-config`` it runs on that config.
Without one, the target's config stands in, and a map whose answer depends on it is not
known, with the reason. The map is looked for in its own file only, as an optional
anchor is: a tree without it (the releases before it) hands the ids on as they are."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ..isolation import sandbox
from ..isolation.sandbox import Call, SandboxError
from ..rules import IdMap
from ..source import SourceError, SourceTree
from .computed import RunProgram
from .definitions import ExtractError, kept_function
from .interpret import failure
from .program import ProgramBuilder

TARGET_STANDIN = "the target's config"


@dataclasses.dataclass(frozen=True)
class Handed:
    """The ids the hook is handed for one drafter (None: not known, ``reason`` says why);
    ``note``: what the map did to them, for the evidence ("" when it has nothing to say)."""

    ids: tuple[int, ...] | None
    reason: str = ""
    note: str = ""


def handed(
    tree: SourceTree,
    id_map: IdMap | None,
    drafters: Sequence[tuple[tuple[int, ...] | None, dict[str, Any]]],
    target: dict[str, Any] | None,
    run: RunProgram,
) -> list[Handed]:
    """Per drafter (its ids as written, its config's data): the ids the hook is handed,
    on the target whose config is ``target`` (None: any target)."""
    as_written = [Handed(ids) for ids, _ in drafters]
    if id_map is None:
        return as_written
    try:
        symbol = kept_function(tree, id_map.function)
    except SourceError as exc:
        return [Handed(None, f"the worker's id map {id_map.function} could not be read: {exc}") for _ in drafters]
    if symbol is None:
        return as_written
    where = f"{symbol.qualname} ({symbol.file}:{symbol.line})"
    builder = ProgramBuilder(tree, ())
    try:
        called = builder.function(symbol)
    except ExtractError as exc:
        return [Handed(None, f"the worker's id map {where} could not be copied: {exc}") for _ in drafters]
    data: dict[str, Any] = {"target": target or {}}
    on_target = (
        sandbox.config_object("target_hf_config", "target")
        if target is not None
        else {"$standin": TARGET_STANDIN, "assume": {}, "record": []}
    )
    calls = []
    for index, (ids, config) in enumerate(drafters):
        if ids is None:
            continue
        data[f"draft{index}"] = config
        keywords = f"{id_map.target}=target, {id_map.draft}=draft, {id_map.ids}=ids"
        binds = (("target", on_target), ("draft", sandbox.config_object("draft_hf_config", f"draft{index}")))
        calls.append(Call(str(index), f"{called}({keywords})", (*binds, ("ids", list(ids)))))
    if not calls:
        return as_written
    try:
        outcomes = run(builder.chunks, calls, data, {gap: sandbox.gap(label) for gap, label in builder.gaps.items()})
    except SandboxError as exc:
        return [Handed(None, f"the worker's id map {where} could not run: {exc}") for _ in drafters]
    answers = []
    for index, (ids, _) in enumerate(drafters):
        outcome = outcomes.get(str(index))
        value = outcome.value if outcome is not None and outcome.ok else None
        if ids is None:
            answers.append(Handed(None))
        elif isinstance(value, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in value):
            note = "" if tuple(value) == ids else f"the worker's id map {where} hands the hook {value}"
            answers.append(Handed(tuple(value), note=note))
        elif target is None and outcome is not None and TARGET_STANDIN in (outcome.gap or ""):
            why = f"the worker's id map {where} hands the hook ids that depend on the target's config"
            answers.append(Handed(None, f"{why}, which --target-config gives"))
        else:
            answers.append(
                Handed(None, f"the worker's id map {where} {failure(outcome) if outcome else 'gave no answer'}")
            )
    return answers
