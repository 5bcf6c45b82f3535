"""Ask a tree what it computes for each drafter config: one program, planned
once, run once for all configs (see ``computed`` for the questions).

Stubs: the drafter's hf_config holds the file's keys (speculators configs go
through the tree's own ``update_<type>`` translation first); a missing key
raises AttributeError as on a real config. ``SpeculativeConfig`` and
``VllmConfig`` carry the tree's own methods and literal field defaults; any
other attribute (the target model, the deployment) is a gap.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Any

from ..draft import sandbox
from ..draft.config import SPECULATORS, DraftConfig, draft_layer_count
from ..draft.sandbox import Call, Outcome, SandboxError
from ..source import SourceTree, Symbol
from .computed import RUNNER_FILES, RUNNERS, SPEC_CONFIG, SPECULATORS_ALGOS, Computed, Runner, RunnerSupport
from .by_name import run_by_name
from .declared import plan_declared
from .definitions import ExtractError, Place, parsed_or_none
from .hf_config import HfSource, hf_views
from .interpret import failure, interpret
from .plan import Plan, plan_calls
from .program import ProgramBuilder
from .stubs import build_stubs, with_spec


PROVIDED = ("get_current_vllm_config", "envs", "logger", "os")  # bound by the run, never copied


class NotRegistered(ExtractError):
    """The tree has no loader for the drafter's format: it cannot run that drafter."""


def compute(tree: SourceTree, drafts: tuple[DraftConfig, ...], run: Runner = sandbox.run) -> tuple[Computed, ...]:
    """What the tree computes for every drafter config, planned once and run in one sandbox process
    (``run``: where the program runs, ``sandbox.run`` or a remote host's equivalent)."""
    hfs: list[tuple[dict[str, Any], Place | None] | tuple[dict[str, Any], Place | None, HfSource] | str | NotRegistered] = []
    for draft in drafts:
        try:
            hfs.append(_hf_config(tree, draft, run))
        except NotRegistered as exc:
            hfs.append(exc)
        except (ExtractError, SandboxError) as exc:
            hfs.append(f"the drafter's hf_config could not be built: {exc}")
    # the keys through the config class vLLM builds the hf_config with (hf_config.py), one request for all
    views = iter(hf_views(tree, [(draft, hf[0]) for draft, hf in zip(drafts, hfs) if isinstance(hf, tuple)], run))
    for position, hf in enumerate(hfs):
        if isinstance(hf, tuple):
            view = next(views)
            hfs[position] = (view.data, hf[1], view.source)
    builder = ProgramBuilder(tree, PROVIDED)
    plan, spec_symbol = plan_calls(tree, builder)
    declared = plan_declared(tree, builder)  # the class body of the drafter's model config, where it declares a speculator
    failed = None
    if not plan.runners:
        failed = f"this tree has none of vLLM's model runners ({', '.join(RUNNER_FILES.values())})"
    elif spec_symbol is None:
        failed = plan.reasons.get("spec") or f"{SPEC_CONFIG[1]} not found in {SPEC_CONFIG[0]}"
    else:
        try:
            spec_body = build_stubs(builder, spec_symbol, plan)
        except ExtractError as exc:
            failed = f"{SPEC_CONFIG[1]} could not be stubbed: {exc}"
    if failed:
        return tuple(_nothing(draft, failed if isinstance(hf, tuple) else str(hf)) for draft, hf in zip(drafts, hfs))
    plan.evidence.append(Place(spec_symbol.file, spec_symbol.qualname, spec_symbol.line))
    plans: list[Plan] = []  # one per drafter config: its own reasons and evidence
    calls: list[Call] = []
    data: dict[str, Any] = {}
    for index, (draft, hf) in enumerate(zip(drafts, hfs)):
        mine = dataclasses.replace(plan, reasons=dict(plan.reasons), evidence=list(plan.evidence))
        plans.append(mine)
        if not isinstance(hf, tuple):
            continue
        hf_data, translation_site, _ = hf
        if translation_site:
            mine.evidence.insert(0, translation_site)
        data[f"hf{index}"] = hf_data
        count = draft_layer_count(hf_data)
        if count is None and "layers" not in mine.reasons:
            mine.reasons["layers"] = "the drafter config has no usable num_hidden_layers"
        model_config = {"hf_config": sandbox.config_object("hf_config", f"hf{index}"), "architectures": _architectures(hf_data)}
        spec_attrs: dict[str, Any] = {
            "method": "dflash",
            "draft_model_config": sandbox.strict_object("draft_model_config", **model_config) if declared is None
            else sandbox.class_instance("draft_model_config", declared, **model_config),
        }
        block = draft.block_size
        if isinstance(block, int) and not isinstance(block, bool) and block > 1:
            spec_attrs["num_speculative_tokens"] = block - 1
        spec = sandbox.class_instance(SPEC_CONFIG[1], spec_body, **spec_attrs)
        for call in plan.calls:
            if call.id.startswith("layers:") and count is None:
                continue
            call = with_spec(call, spec, spec_body, spec_attrs, f"hf{index}", count)
            calls.append(Call(f"{index}|{call.id}", call.expr, call.bind))
    fixed = {"logger": sandbox.noop("logger"), "os": sandbox.unset_env("os")}
    try:
        if run is sandbox.run:  # the rounds of definitions looked up by name share one child here
            with sandbox.session() as one:
                outcomes = run_by_name(builder, one, calls, data, fixed) if calls else {}
        else:
            outcomes = run_by_name(builder, run, calls, data, fixed) if calls else {}
    except SandboxError as exc:
        return tuple(_nothing(draft, str(exc)) for draft in drafts)
    answers = []
    for index, (draft, hf) in enumerate(zip(drafts, hfs)):
        if isinstance(hf, NotRegistered):  # no runner of this tree can load the drafter at all
            refused = RunnerSupport(False, str(hf))
            answers.append(dataclasses.replace(_nothing(draft, str(hf)), runner_support=tuple((name, refused) for name in RUNNERS)))
            continue
        if isinstance(hf, str):
            answers.append(_nothing(draft, hf))
            continue
        prefix = f"{index}|"
        mine = {call_id[len(prefix):]: outcome for call_id, outcome in outcomes.items() if call_id.startswith(prefix)}
        found = interpret(plans[index], mine, builder, draft, draft.expected_aux_layer_ids(), draft.expected_layers())
        answers.append(dataclasses.replace(found, hf_config=hf[0], hf_source=hf[2]))
    return tuple(answers)


def _architectures(hf_data: dict[str, Any]) -> Any:
    """The hf_config's architectures as the draft model config holds them; a value of
    another shape (the tree's translation can hand back anything) is a gap that names it."""
    value = hf_data.get("architectures") or []
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return list(value)
    return sandbox.gap(f"draft_model_config.architectures (the hf_config holds {str(value)[:60]!r}, not a list of names)")


def _nothing(draft: DraftConfig, reason: str) -> Computed:
    fields = ("aux_layer_ids", "layers", "runner", "drops_prefix_block")
    expected_layers = draft.expected_layers()
    return Computed(
        aux_layer_ids=None, expected_aux_layer_ids=draft.expected_aux_layer_ids(), aux_by_runner=(), layers=None,
        expected_layers=None if expected_layers is None else tuple(expected_layers), runner=None, default_runner=None,
        runner_support=(), drops_prefix_block=None, prefix_block_predicate=None, drops_prefix_block_when_disabled=None,
        mismatches=(), reasons=tuple((field, reason) for field in fields), evidence=(),
    )


def _hf_config(tree: SourceTree, draft: DraftConfig, run: Runner) -> tuple[dict[str, Any], Place | None]:
    """The drafter's keys vLLM hands its config class (speculators: the tree's translation)."""
    if draft.format != SPECULATORS:
        return dict(draft.data), None
    kind = draft.data.get("speculators_model_type")
    parsed = parsed_or_none(tree, SPECULATORS_ALGOS)
    updater = None
    for node in parsed.tree.body if parsed else ():
        if isinstance(node, ast.FunctionDef) and any(_registers(d, kind) for d in node.decorator_list):
            updater = node
    if updater is None:
        raise NotRegistered(f"this vLLM registers no speculators translation for {kind!r} in {SPECULATORS_ALGOS}")
    builder = ProgramBuilder(tree, ())
    symbol = Symbol(SPECULATORS_ALGOS, updater.name, updater, parsed)
    name = builder.function(symbol)
    call = Call("translate", f"({name}(config_dict=config_dict, pre_trained_config=pre), pre)[1]",
                (("config_dict", sandbox.data_ref("draft")), ("pre", sandbox.data_ref("layers"))))
    layers = draft.data.get("transformer_layer_config")
    globals_ = {gap_name: sandbox.gap(label) for gap_name, label in builder.gaps.items()}
    outcomes = run(builder.chunks, [call], {"draft": draft.data, "layers": layers if isinstance(layers, dict) else {}}, globals_)
    outcome = outcomes.get("translate", Outcome(gap="no answer"))
    if not outcome.ok or not isinstance(outcome.value, dict):
        raise ExtractError(f"{updater.name} in {SPECULATORS_ALGOS} {failure(outcome)}")
    return outcome.value, Place(SPECULATORS_ALGOS, updater.name, updater.lineno)


def _registers(decorator: ast.expr, kind: Any) -> bool:
    return (
        isinstance(decorator, ast.Call)
        and decorator.args
        and isinstance(decorator.args[0], ast.Constant)
        and decorator.args[0].value == kind
    )
