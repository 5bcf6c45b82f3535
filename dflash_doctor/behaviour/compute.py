"""Ask a tree what it computes for each drafter config: one program, planned
once, run once for all configs (see ``computed`` for the questions).

Stubs: the drafter's hf_config holds the file's keys (speculators configs go
through the tree's own ``update_<type>`` translation first); a missing key
raises AttributeError as on a real config. The speculative and deployment
configs (the engine's route names them) carry the tree's own methods and
literal field defaults; any other attribute (the target model, the
deployment) is a gap.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Any

from ..isolation import sandbox
from ..draft.config import SPECULATORS, DraftConfig, draft_layer_count
from ..isolation.sandbox import Call, Outcome, SandboxError
from ..source import SourceTree, Symbol
from ..engines.route import Route
from .computed import Computed, RunProgram, RunnerSupport
from .by_name import run_by_name
from .declared import plan_declared
from .definitions import ExtractError, Place, parsed_or_none
from ..draft.config import HfSource
from .hf_config import hf_views
from .interpret import failure, interpret
from .plan import Plan, Questions, plan_calls
from .program import ProgramBuilder
from .stubs import build_stubs, with_spec


class NotRegistered(ExtractError):
    """The tree has no loader for the drafter's format: it cannot run that drafter."""


@dataclasses.dataclass(frozen=True)
class _Hf:
    """A drafter's hf_config as the engine builds it, where its translation ran (speculators),
    and which class built it."""

    data: dict[str, Any]
    translation: Place | None
    source: HfSource


def compute(
    tree: SourceTree, drafts: tuple[DraftConfig, ...], questions: Questions, run: RunProgram = sandbox.run
) -> tuple[Computed, ...]:
    """What the tree computes for every drafter config, planned once and run in one sandbox process
    (``run``: where the program runs, ``sandbox.run`` or a remote host's equivalent)."""
    route = tree.engine.route
    if route is None:
        if tree.engine.direct is not None:
            return _handed_directly(tree, drafts, run)
        why = f"behaviour does not know how {tree.engine.display} hands a drafter to its model runners"
        return tuple(_nothing(draft, why) for draft in drafts)
    keys: list[tuple[dict[str, Any], Place | None] | str | NotRegistered] = []
    for draft in drafts:
        try:
            keys.append(_hf_config(tree, route, draft, run))
        except NotRegistered as exc:
            keys.append(exc)
        except (ExtractError, SandboxError) as exc:
            keys.append(f"the drafter's hf_config could not be built: {exc}")
    # the keys through the config class the engine builds the hf_config with (hf_config.py), one request for all
    views = iter(
        hf_views(tree, [(draft, item[0]) for draft, item in zip(drafts, keys) if isinstance(item, tuple)], run)
    )
    hfs: list[_Hf | str | NotRegistered] = []
    for item in keys:
        if isinstance(item, tuple):
            view = next(views)
            hfs.append(_Hf(view.data, item[1], view.source))
        else:
            hfs.append(item)
    builder = ProgramBuilder(tree, route.provided)
    plan, spec_symbol = plan_calls(tree, builder, route, questions)
    declared = plan_declared(
        tree, route, builder
    )  # the class body of the drafter's model config, where it declares a speculator
    failed = None
    spec = route.speculative_config
    if not plan.runners:
        failed = (
            f"this tree has none of {tree.engine.display}'s model runners "
            f"({', '.join(kind.marker for kind in route.runners)})"
        )
    elif spec_symbol is None:
        failed = plan.reasons.get("spec") or f"{spec.symbol} not found in {spec.file}"
    else:
        try:
            spec_body = build_stubs(builder, spec_symbol, plan)
        except ExtractError as exc:
            failed = f"{spec.symbol} could not be stubbed: {exc}"
    if failed:
        runners = plan.runners or route.runner_names  # none in the tree: every runner says why
        return tuple(
            _nothing(draft, failed if isinstance(hf, _Hf) else str(hf), runners) for draft, hf in zip(drafts, hfs)
        )
    assert spec_symbol is not None
    plan.evidence.append(Place(spec_symbol.file, spec_symbol.qualname, spec_symbol.line))
    plans: list[Plan] = []  # one per drafter config: its own reasons and evidence
    calls: list[Call] = []
    owners: dict[
        str, tuple[int, str]
    ] = {}  # a call's id in the child -> (the drafter config's index, the plan's call id)
    data: dict[str, Any] = {}
    for index, (draft, hf) in enumerate(zip(drafts, hfs)):
        mine = dataclasses.replace(plan, reasons=dict(plan.reasons), evidence=list(plan.evidence))
        plans.append(mine)
        if not isinstance(hf, _Hf):
            continue
        hf_data = hf.data
        if hf.translation is not None:
            mine.evidence.insert(0, hf.translation)
        data[f"hf{index}"] = hf_data
        count = draft_layer_count(hf_data)
        if count is None and "layers" not in mine.reasons:
            mine.reasons["layers"] = "the drafter config has no usable num_hidden_layers"
        fields = route.fields
        model_config = {
            fields.hf: sandbox.config_object("hf_config", f"hf{index}"),
            fields.architectures: _architectures(hf_data, fields.architectures),
        }
        spec_attrs: dict[str, Any] = {
            fields.method: route.method,
            fields.draft: sandbox.strict_object(fields.draft, **model_config)
            if declared is None
            else sandbox.class_instance(fields.draft, declared, **model_config),
        }
        block = draft.block_size
        if isinstance(block, int) and not isinstance(block, bool) and block > 1:
            spec_attrs[fields.tokens] = block - 1
        instance = sandbox.class_instance(spec.name, spec_body, **spec_attrs)
        for call in plan.calls:
            if call.id in plan.layer_calls and count is None:
                continue
            call = with_spec(plan, call, instance, spec_body, spec_attrs, f"hf{index}", count)
            owners[f"{index}|{call.id}"] = (index, call.id)
            calls.append(Call(f"{index}|{call.id}", call.expr, call.bind))
    fixed = {"logger": sandbox.noop("logger"), "os": sandbox.unset_env("os")}
    try:
        if run is sandbox.run:  # the rounds of definitions looked up by name share one child here
            with sandbox.session() as one:
                outcomes = run_by_name(builder, one, calls, data, fixed) if calls else {}
        else:
            outcomes = run_by_name(builder, run, calls, data, fixed) if calls else {}
    except SandboxError as exc:
        return tuple(_nothing(draft, str(exc), plan.runners) for draft in drafts)
    answers = []
    for index, (draft, hf) in enumerate(zip(drafts, hfs)):
        if isinstance(hf, NotRegistered):  # no runner of this tree can load the drafter at all
            refused = RunnerSupport(False, str(hf))
            answers.append(
                dataclasses.replace(
                    _nothing(draft, str(hf), plan.runners),
                    runner_support=tuple((name, refused) for name in plan.runners),
                )
            )
            continue
        if isinstance(hf, str):
            answers.append(_nothing(draft, hf, plan.runners))
            continue
        ours = {
            local: outcomes[call_id]
            for call_id, (owner, local) in owners.items()
            if owner == index and call_id in outcomes
        }
        found = interpret(plans[index], ours, builder, draft, draft.expected_aux_layer_ids(), draft.expected_layers())
        answers.append(dataclasses.replace(found, hf_config=hf.data, hf_source=hf.source))
    return tuple(answers)


def _handed_directly(tree: SourceTree, drafts: tuple[DraftConfig, ...], run: RunProgram) -> tuple[Computed, ...]:
    """An engine that hands the hf_config straight to the drafter's model: the hf_config
    as its config class builds it, and nothing of runners or of a speculative config."""
    why = f"{tree.engine.display} runs every drafter on one worker: no runner or speculative config to compute"
    views = hf_views(tree, [(draft, dict(draft.data)) for draft in drafts], run)
    return tuple(
        dataclasses.replace(_nothing(draft, why), hf_config=view.data, hf_source=view.source)
        for draft, view in zip(drafts, views)
    )


def _architectures(hf_data: dict[str, Any], field: str) -> Any:
    """The hf_config's architectures as the draft model config holds them; a value of
    another shape (the tree's translation can hand back anything) is a gap that names it."""
    value = hf_data.get("architectures") or []
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return list(value)
    return sandbox.gap(
        f"the drafter model config's {field} (the hf_config holds {str(value)[:60]!r}, not a list of names)"
    )


def _nothing(draft: DraftConfig, reason: str, runners: tuple[str, ...] = ()) -> Computed:
    fields = ("aux_layer_ids", "layers", "runner", "drops_prefix_block")
    expected_layers = draft.expected_layers()
    return Computed(
        aux_layer_ids=None,
        expected_aux_layer_ids=draft.expected_aux_layer_ids(),
        aux_by_runner=(),
        layers=None,
        expected_layers=None if expected_layers is None else tuple(expected_layers),
        runner=None,
        default_runner=None,
        runner_support=(),
        drops_prefix_block=None,
        prefix_block_predicate=None,
        drops_prefix_block_when_disabled=None,
        mismatches=(),
        reasons=tuple((field, reason) for field in fields),
        evidence=(),
        runners=runners,
    )


def _hf_config(
    tree: SourceTree, route: Route, draft: DraftConfig, run: RunProgram
) -> tuple[dict[str, Any], Place | None]:
    """The drafter's keys the engine hands its config class (speculators: the tree's translation)."""
    if draft.format != SPECULATORS:
        return dict(draft.data), None
    kind = draft.data.get("speculators_model_type")
    translations = route.translations
    parsed = parsed_or_none(tree, translations)
    updater = None
    for node in parsed.tree.body if parsed else ():
        if isinstance(node, ast.FunctionDef) and any(_registers(d, kind) for d in node.decorator_list):
            updater = node
    if updater is None or parsed is None:  # no file, no updater
        raise NotRegistered(f"this tree registers no speculators translation for {kind!r} in {translations}")
    builder = ProgramBuilder(tree, ())
    symbol = Symbol(translations, updater.name, updater, parsed)
    name = builder.function(symbol)
    call = Call(
        "translate",
        f"({name}(config_dict=config_dict, pre_trained_config=pre), pre)[1]",
        (("config_dict", sandbox.data_ref("draft")), ("pre", sandbox.data_ref("layers"))),
    )
    layers = draft.data.get("transformer_layer_config")
    globals_ = {gap_name: sandbox.gap(label) for gap_name, label in builder.gaps.items()}
    outcomes = run(
        builder.chunks, [call], {"draft": draft.data, "layers": layers if isinstance(layers, dict) else {}}, globals_
    )
    outcome = outcomes.get("translate", Outcome(gap="no answer"))
    if not outcome.ok or not isinstance(outcome.value, dict):
        raise ExtractError(f"{updater.name} in {translations} {failure(outcome)}")
    return outcome.value, Place(translations, updater.name, updater.lineno)


def _registers(decorator: ast.expr, kind: Any) -> bool:
    return (
        isinstance(decorator, ast.Call)
        and bool(decorator.args)
        and isinstance(decorator.args[0], ast.Constant)
        and decorator.args[0].value == kind
    )
