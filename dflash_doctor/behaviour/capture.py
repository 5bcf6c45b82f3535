"""The capture-position question: which hidden states each target architecture taps
for a drafter's layer ids, computed by the architecture's own hook.

The engine hands the drafter's ids to the hook of the target model's class. The hook
(the last ``def`` of that name in the class body: the one Python keeps) runs in the
sandbox on a holder standing for the model: what it sets (a list of capture ids, or
marks on layers) and which hooks of the models it holds it calls are recorded; those
calls run next, on the class ``__init__`` assigns to that attribute. The class that
ends up holding the capture taps each listed layer's input or output, as the loop
over its layers says (taps.py). A tap of layer ``k``'s input is HF
``hidden_states[k]``, of its output ``hidden_states[k + 1]``; a z-lab id ``L`` names
``hidden_states[L + 1]``.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Sequence
from typing import Any

from ..draft.config import TargetLayers
from ..isolation.sandbox import Call, SandboxError
from ..rules import Capture
from ..source import SourceError, SourceTree, Symbol
from .computed import RunProgram
from .definitions import ExtractError, Place
from .generative import generative
from .id_map import handed as handed_ids
from .interpret import failure
from .lineage import TreeClass, TreeClasses, class_at
from .program import ProgramBuilder
from .taps import names_capture
from .taps import position as tap_position

MAX_HOPS = 4  # hooks handing on to the hooks of the models they hold
MAX_NAMED = 8  # architectures a target config may name (a model's config names one)
MAX_DEPTH = 8  # modules in turn a class inherits the hook through (SGLang's deepest: 3)
POSITIONS = {0: "input", 1: "output"}  # what a tap takes of the listed layer, by HF index less the id


@dataclasses.dataclass(frozen=True)
class Tapped:
    """One architecture's capture for one drafter: the HF hidden-state indices it taps
    (None: not known, ``reason`` says why), and where its hook is."""

    architecture: str
    place: Place
    indices: tuple[int, ...] | None
    reason: str = ""
    # recorded under this part, not judged: "hook-fails" (it raises, or calls a method the model lacks),
    # "taps-nothing" (set on a model that never reads it), "not-generative" (the engine never decodes with it)
    unjudged: str = ""
    position: str = ""  # what the capturing class taps of each listed layer ("input", "output")
    holder: str = ""  # the class that holds the capture


@dataclasses.dataclass(frozen=True)
class CaptureAnswer:
    """Per drafter config: every architecture with the hook, or why none could be read."""

    architectures: tuple[Tapped, ...]
    reason: str = ""
    note: str = ""  # what the worker's id map did to the drafter's ids ("" when nothing)


@dataclasses.dataclass
class _Run:
    """One architecture's hook chain for one drafter, while it runs."""

    architecture: TreeClass
    place: Place
    count: int  # the target's layer count
    pending: list[tuple[str, TreeClass, ast.FunctionDef, list[Any]]]  # (holder path, class, method, arguments)
    sets: list[tuple[str, Any]] = dataclasses.field(default_factory=list)
    reason: str = ""
    unjudged: str = ""  # as ``Tapped.unjudged``


def architectures(
    tree: SourceTree, capture: Capture, named: tuple[str, ...] = ()
) -> tuple[list[tuple[str, TreeClass, TreeClass, ast.FunctionDef]], TreeClasses]:
    """(architecture, its class, the class whose hook it runs, that hook) for every class a module
    directly in the registry directory lists in its entry name and that has the hook, defined or
    inherited (the engine imports each such module and registers the classes by name); only the
    ``named`` ones where given. Raises SourceError when the directory cannot be searched."""
    classes = TreeClasses(tree)
    found: dict[str, tuple[str, TreeClass, TreeClass, ast.FunctionDef]] = {}
    if named:  # a registered class is listed by its name in its module: only the modules naming it are read
        mentions = tree.files_mentioning(named, capture.registry)
        files = sorted({file for each in mentions.values() for file in each})
    else:
        files = _hook_files(tree, classes, capture)
    for file in files:
        directory, _, module = file.rpartition("/")
        parsed = classes.parsed(file)
        if parsed is None or directory != capture.registry or module == "__init__.py":
            continue
        for name in _entry_names(parsed.tree, capture.entry):
            cls = classes.named(file, name)
            hook = classes.method(cls, capture.hook) if cls is not None else None
            if cls is not None and hook is not None and (not named or cls.name in named):
                found.setdefault(cls.name, (cls.name, cls, hook[0], hook[1]))  # a name registered twice fails at load
    return list(found.values()), classes


def _hook_files(tree: SourceTree, classes: TreeClasses, capture: Capture) -> list[str]:
    """The files of the registry directory that name the hook or a class that has it: a class
    inherits the hook only from a base it names, so each round looks for the files naming the
    classes the last round found to have it, until none is new."""
    seen: set[str] = set()
    hooked: set[str] = set()
    # a base class with the hook may live anywhere in the package (a mixin): its name is looked for too
    for files in tree.files_defining({capture.hook}).values():
        for file in files:
            if not file.startswith(capture.registry + "/"):
                hooked |= _hooked(classes, file, capture, hooked)
    names = {capture.hook, *hooked}
    for _ in range(MAX_DEPTH + 1):
        if not names:
            return sorted(seen)
        found = tree.files_mentioning(names, capture.registry)
        new = sorted({file for files in found.values() for file in files} - seen)
        seen.update(new)
        before = set(hooked)
        for file in new:
            hooked |= _hooked(classes, file, capture, hooked)
        names = hooked - before
    raise SourceError(f"its classes inherit {capture.hook} through more than {MAX_DEPTH} modules in turn")


def _hooked(classes: TreeClasses, file: str, capture: Capture, known: set[str]) -> set[str]:
    """The names of the file's classes that have the hook, defined or inherited (``known`` not asked again)."""
    parsed = classes.parsed(file)
    if parsed is None:
        return set()
    return {
        node.name
        for node in parsed.tree.body
        if isinstance(node, ast.ClassDef)
        and node.name not in known
        and classes.method(TreeClass(file, node, parsed), capture.hook) is not None
    }


def _entry_names(module: ast.Module, entry: str) -> list[str]:
    names: list[str] = []
    for node in module.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == entry for t in node.targets):
            values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            names = [value.id for value in values if isinstance(value, ast.Name)]
    return names


def evaluate(
    tree: SourceTree,
    capture: Capture,
    drafters: Sequence[tuple[tuple[int, ...] | None, int | None, dict[str, Any]]],
    run: RunProgram,
    target: TargetLayers | None = None,
) -> list[CaptureAnswer]:
    """Per drafter (its layer ids, the target's layer count, its config's data): what each
    architecture taps for the ids the worker hands the hook; with ``target`` (--target-config),
    only the architectures its config names, on that config."""
    named = target.architectures if target is not None else ()
    if len(named) > MAX_NAMED or not all(name.isidentifier() and len(name) <= 200 for name in named):
        why = f"the target config's architectures are not up to {MAX_NAMED} class names"
        return [CaptureAnswer((), why) for _ in drafters]
    try:
        found, classes = architectures(tree, capture, named)
    except SourceError as exc:
        return [CaptureAnswer((), f"the target architectures could not be listed: {exc}") for _ in drafters]
    if not found:
        why = f"no architecture registered in {capture.registry} has {capture.hook}"
        if named:
            names = ", ".join(named)
            why = f"no class this tree registers as the target config's {names} has {capture.hook}"
        return [CaptureAnswer((), why) for _ in drafters]
    given = [(ids, data) for ids, _, data in drafters]
    handed = handed_ids(tree, capture.id_map, given, target.config if target is not None else None, run)
    runs: dict[int, list[_Run]] = {}  # by drafter: one run per architecture, all run together
    for index, ((_, count, _), hands) in enumerate(zip(drafters, handed)):
        if hands.ids is not None and count is not None:
            runs[index] = [
                _Run(
                    owner,
                    Place(hook_owner.file, f"{hook_owner.name}.{hook.name}", hook.lineno),
                    count,
                    [("self", hook_owner, hook, [list(hands.ids)])],
                )
                for _, owner, hook_owner, hook in found
            ]
    everything = [one for each in runs.values() for one in each]
    if capture.generation and everything:
        served = generative(tree, capture.generation, [name for name, *_ in found], run)
        for one, (name, *_) in zip(everything, found * len(runs)):  # each drafter's runs are in the order of found
            if served.get(name) is False:
                one.reason = f"{capture.generation} says the engine does not generate with {name}: nothing drafts on it"
                one.unjudged = "not-generative"
    for _ in range(MAX_HOPS):
        if not any(one.pending and not one.reason for one in everything):
            break
        _round(everything, classes, capture, run)
    answers = []
    positions: dict[tuple[str, str, str | None], int | str | None] = {}  # the same models hold many captures
    for index, ((ids, count, _), hands) in enumerate(zip(drafters, handed)):
        if ids is None or count is None or hands.ids is None:
            why = "the drafter states no layer ids" if ids is None else "the target's layer count is not known"
            answers.append(CaptureAnswer((), hands.reason or why))
            continue
        tapped = (_tapped(one, classes, capture, name, positions) for one, (name, *_) in zip(runs[index], found))
        answers.append(CaptureAnswer(tuple(tapped), note=hands.note))
    return answers


def _round(runs: list[_Run], classes: TreeClasses, capture: Capture, run: RunProgram) -> None:
    """Run every pending hook (one request per file, so module names resolve as in the tree) and
    queue the hooks they hand on to."""
    by_file: dict[str, list[tuple[_Run, str, TreeClass, ast.FunctionDef, list[Any]]]] = {}
    for one in runs:
        if not one.reason:
            for path, cls, method, args in one.pending:
                by_file.setdefault(cls.file, []).append((one, path, cls, method, args))
        one.pending = []
    for file, work in by_file.items():
        builder = ProgramBuilder(classes.tree, ())
        calls = []
        names: dict[tuple[str, int], str] = {}
        for index, (one, path, cls, method, args) in enumerate(work):
            key = (cls.name, method.lineno)
            try:
                if key not in names:
                    names[key] = builder.method_function(
                        Symbol(file, f"{cls.name}.{method.name}", method, cls.parsed), f"hook_{len(names)}"
                    )
            except ExtractError as exc:
                one.reason = f"{cls.name}.{method.name} ({file}) could not be copied: {exc}"
                continue
            assume = {**dict(capture.assume), **{f"*.{name}": one.count for name in capture.counted}}
            holder = {"$holder": path, "assume": assume, "count": one.count}
            calls.append(
                Call(
                    str(index),
                    f"[_records(), {names[key]}(held, *arguments), _records()][2]",
                    (("held", holder), ("arguments", args)),
                )
            )
        if not calls:
            continue
        globals_: dict[str, Any] = {gap: {"$gap": label} for gap, label in builder.gaps.items()}
        globals_["_records"] = {"$records": True}
        try:
            outcomes = run(builder.chunks, calls, {}, globals_)
        except SandboxError as exc:
            for one, *_ in work:
                one.reason = one.reason or str(exc)
            continue
        for index, (one, _path, cls, method, _args) in enumerate(work):
            outcome = outcomes.get(str(index))
            if one.reason:
                continue
            if outcome is None or not outcome.ok or not isinstance(outcome.value, list):
                what = failure(outcome) if outcome else "gave no answer"
                one.reason = f"{cls.name}.{method.name} ({file}:{method.lineno}) {what}"
                one.unjudged = "hook-fails" if outcome is not None and outcome.error_type is not None else ""
                continue
            _take(one, outcome.value, classes)


def _take(one: _Run, records: list[Any], classes: TreeClasses) -> None:
    """Keep what a hook set; queue the hooks of held models it called."""
    for record in records:
        if not isinstance(record, dict):
            continue
        if "set" in record:
            one.sets.append((record["set"], record["value"]))
        elif "call" in record:
            path, _, method = str(record["call"]).rpartition(".")
            cls = class_at(one.architecture, path, classes)
            if isinstance(cls, str):
                one.reason = cls
                return
            found = classes.method(cls, method)
            if found is None:
                one.reason = (
                    f"{cls.name} ({cls.file}) has no method {method}, which the hook calls on {path}: "
                    "an AttributeError at load"
                )
                one.unjudged = "hook-fails" if classes.resolved(cls) else ""
                return
            if record.get("kwargs"):
                one.reason = f"the hook calls {path}.{method} with keywords"
                return
            one.pending.append((path, found[0], found[1], list(record.get("args", []))))


def _tapped(
    one: _Run,
    classes: TreeClasses,
    capture: Capture,
    name: str,
    positions: dict[tuple[str, str, str | None], int | str | None],
) -> Tapped:
    if one.reason:
        return Tapped(name, one.place, None, one.reason, one.unjudged)
    lists: dict[str, tuple[str, list[int]]] = {}  # holder path -> (list attribute, ids)
    marks: dict[str, dict[int, bool]] = {}  # holder path -> layer index -> marked
    for path, value in one.sets:
        holder, _, attribute = path.rpartition(".")
        if isinstance(value, dict) and isinstance(
            value.get("$set"), list
        ):  # a set of ids: Python's ``in`` reads it alike
            value = value["$set"]
        if attribute in capture.lists and isinstance(value, list) and all(isinstance(v, int) for v in value):
            lists[holder] = (attribute, value)
        elif attribute == capture.mark and holder.endswith("]") and ".layers[" in holder:
            owner, _, index = holder[:-1].rpartition(".layers[")
            marks.setdefault(owner, {})[int(index)] = value is True
    holders = set(lists) | set(marks)
    if not holders:
        return Tapped(name, one.place, None, f"the hook sets no capture ({', '.join(capture.lists)} or {capture.mark})")
    if len(holders) > 1:
        return Tapped(
            name, one.place, None, f"the hook sets captures on more than one model ({', '.join(sorted(holders))})"
        )
    (holder,) = holders
    cls = class_at(one.architecture, holder, classes)
    if isinstance(cls, str):
        return Tapped(name, one.place, None, cls)
    captures: list[tuple[str | None, list[int]]] = []  # (the list a capture test reads, None: marks; layer ids)
    if holder in lists:
        captures.append(lists[holder])
    if holder in marks:
        captures.append((None, sorted(index for index, marked in marks[holder].items() if marked)))
    results = set()
    for list_name, layer_ids in captures:
        key = (cls.file, cls.name, list_name)
        if key not in positions:
            positions[key] = tap_position(classes, cls, list_name, capture)
        position = positions[key]
        if position is None:
            continue
        if isinstance(position, str):
            return Tapped(name, one.place, None, position)
        # The loop taps in layer order, once each, whatever order the list holds the ids in.
        tapped = tuple(sorted({k + position for k in layer_ids}))
        results.add((tapped, POSITIONS.get(position, f"{position:+d}")))
    if not results:
        if not any(names_capture(classes, cls, list_name, capture) for list_name, _ in captures):
            why = f"no method of {cls.name} ({cls.file}) reads the capture: no layer is tapped"
            return Tapped(name, one.place, None, why, "taps-nothing")
        return Tapped(name, one.place, None, f"no loop of {cls.name} ({cls.file}) over its layers reads the capture")
    if len(results) > 1:
        return Tapped(name, one.place, None, f"{cls.name} taps its listed and its marked layers differently")
    ((indices, position),) = results
    return Tapped(name, one.place, indices, position=position, holder=cls.name)
