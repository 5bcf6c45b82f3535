"""Read the outcomes of one drafter config's calls: which runner runs it and
whether it accepts it, the aux layers and per-layer attention it gets, and
whether the scheduler drops the last prefix-cache block."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ..draft.config import ZLAB, DraftConfig, int_list
from ..isolation.sandbox import Outcome
from ..model import UNKNOWN
from ..engines.route import RunnerKind
from .computed import Computed, RunnerSupport
from .plan import Plan
from .program import ProgramBuilder


def failure(outcome: Outcome) -> str:
    """Why a call gave no answer, as the end of a sentence naming the call."""
    why = outcome.unknowable
    if why:
        return f"could not be evaluated: {why}"
    return f"raises {outcome.error_type}: {outcome.error_message}"


Lookup = Callable[[str], "Outcome | None"]  # a call's outcome by the plan's id (None: not made)


def interpret(
    plan: Plan,
    outcomes: dict[str, Outcome],
    builder: ProgramBuilder,
    draft: DraftConfig,
    expected_aux: tuple[int, ...] | None,
    expected_layers: list[dict[str, Any]] | None,
) -> Computed:
    reasons: dict[str, str] = {}
    mismatches: list[str] = []

    def outcome(call_id: str) -> Outcome | None:
        result = outcomes.get(call_id)
        if result is not None and result.gap and result.gap in builder.omitted:
            return dataclasses.replace(result, gap=f"{result.gap} ({builder.omitted[result.gap]})")
        return result

    # RunProgram support and choice: only the runners the tree has.
    runners = plan.runners
    layer_results = {runner: outcome(f"layers:{runner}") for runner in runners}
    support = {runner: _support(plan, plan.route.runner(runner), outcome, layer_results[runner]) for runner in runners}
    if len(runners) == 1:
        default: str | None = runners[0]
        default_why = f"the {runners[0].upper()} runner is the only model runner this tree has"
    else:
        default, default_why = _default_runner(plan, outcome)
    runner, runner_why = _choose_runner(default, default_why, support)
    if default is None:
        reasons["default_runner"] = default_why
    if runner is None:
        reasons["runner"] = runner_why
        if support and all(item.supported is False for item in support.values()):
            mismatches.append(f"no runner of this tree accepts this drafter: {next(iter(support.values())).reason}")
    elif support[runner].supported is False:
        mismatches.append(
            f"this tree runs the drafter on the {runner.upper()} runner ({runner_why}), which refuses it: "
            f"{support[runner].reason}"
        )

    # Aux layer ids.
    aux_by_runner: dict[str, Any] = {}
    for name in runners:
        result = outcome(f"aux:{name}")
        if result is None:
            aux_by_runner[name] = UNKNOWN
            reasons[f"aux_layer_ids_by_runner.{name}"] = plan.reasons.get(f"aux:{name}", "not computed")
        elif result.ok and (result.value is None or int_list(result.value)):
            aux_by_runner[name] = None if result.value is None else tuple(result.value)
        else:
            aux_by_runner[name] = UNKNOWN
            reasons[f"aux_layer_ids_by_runner.{name}"] = f"the {name.upper()} resolver {failure(result)}"
    aux, aux_why = _pick(aux_by_runner, runner, "aux layer ids")
    if aux_why:
        reasons["aux_layer_ids"] = aux_why
    if aux is None and runner and aux_by_runner.get(runner) is None:
        reasons["aux_layer_ids"] = (
            f"the {runner.upper()} resolver returns None for this config: the tree ignores the drafter's ids "
            "and captures the target model's default aux layers"
        )
        mismatches.append(reasons["aux_layer_ids"])
    if aux is not None and expected_aux is not None and tuple(aux) != tuple(expected_aux):
        raw = draft.layer_ids
        detail = " (the raw target_layer_ids, without +1)" if draft.format == ZLAB and list(aux) == list(raw) else ""
        mismatches.append(f"the tree captures aux layers {list(aux)}{detail}, the drafter expects {list(expected_aux)}")
    if expected_aux is None:
        reasons["expected_aux_layer_ids"] = "the drafter config states no usable layer ids"

    # Per-layer windows and causality.
    by_runner: dict[str, Any] = {}
    for name in runners:
        result = layer_results[name]
        if result is None:
            by_runner[name] = UNKNOWN
        elif result.ok and _layer_list(result.value):
            by_runner[name] = tuple((window, causal) for window, causal in result.value)
        else:
            by_runner[name] = UNKNOWN
    layers, layers_why = _pick(by_runner, runner, "per-layer attention")
    if layers is None:
        reasons["layers"] = plan.reasons.get("layers") or layers_why or _layers_failure(plan, layer_results, runner)
    elif expected_layers is not None:
        for (window, causal), wanted in zip(layers, expected_layers):
            index = wanted["index"]
            if window != wanted["sliding_window"] and not (wanted["sliding"] and wanted["sliding_window"] is None):
                mismatches.append(
                    f"draft layer {index}: the tree uses sliding window {window}, the drafter was trained with "
                    f"{wanted['sliding_window']}"
                )
            if wanted["causal"] is not None and causal != wanted["causal"]:
                mismatches.append(
                    f"draft layer {index}: the tree runs it {'causal' if causal else 'non-causal'}, the drafter was "
                    f"trained {'causal' if wanted['causal'] else 'non-causal'}"
                )

    # Prefix-cache block drop.
    drops, drops_disabled = _prefix_block(plan, outcome, reasons)
    if drops:
        hint = f"; {plan.opt_out}: true turns it off" if drops_disabled is False else ""
        mismatches.append(
            f"{plan.constructor} hands on a change of the last matched prefix-cache block "
            f"for method={plan.route.method!r} ({_shown(plan)}){hint}"
        )

    return Computed(
        aux_layer_ids=None if aux is None else tuple(aux),
        expected_aux_layer_ids=expected_aux,
        aux_by_runner=tuple((name, aux_by_runner[name]) for name in runners),
        layers=layers,
        expected_layers=None if expected_layers is None else tuple(expected_layers),
        runner=runner,
        default_runner=default,
        runner_support=tuple((name, support[name]) for name in runners),
        drops_prefix_block=drops,
        prefix_block_predicate=plan.drop.shown if plan.drop else None,
        drops_prefix_block_when_disabled=drops_disabled,
        mismatches=tuple(mismatches),
        reasons=tuple(reasons.items()),
        evidence=tuple(dict.fromkeys(plan.evidence)),
        opt_out=plan.opt_out,
        runners=runners,
    )


def _layer_list(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(item, list)
        and len(item) == 2
        and (item[0] is None or isinstance(item[0], int))
        and isinstance(item[1], bool)
        for item in value
    )


def _pick(by_runner: dict[str, Any], runner: str | None, what: str) -> tuple[Any, str | None]:
    """The answer of the runner that runs the drafter; else the answer both runners agree on."""
    if runner is not None:
        value = by_runner.get(runner, UNKNOWN)
        return (
            (None, f"the {runner.upper()} runner's {what} could not be computed") if value is UNKNOWN else (value, None)
        )
    known = [value for value in by_runner.values() if value is not UNKNOWN]
    if len(known) == len(by_runner) and all(value == known[0] for value in known):
        return known[0], None
    if len(known) == 1 and len(by_runner) > 1:
        return None, f"only one runner's {what} could be computed and the runner is not known"
    if known:
        return None, f"the runners give different {what} and which runner runs is not known"
    return None, None


def _layers_failure(plan: Plan, results: dict[str, Outcome | None], runner: str | None) -> str:
    chosen = [results[runner]] if runner else [r for r in results.values() if r is not None]
    for result in chosen:
        if result is not None and not result.ok:
            return f"{plan.route.layer_resolver.symbol} {failure(result)}"
    return "not computable"


def _support(plan: Plan, kind: RunnerKind, outcome: Lookup, layers: Outcome | None) -> RunnerSupport:
    """Whether a runner accepts the drafter: the speculator its factory builds, a refusal
    raised by the per-layer resolver, then its refusal list (each where it has one)."""
    route = plan.route
    resolver = route.layer_resolver.symbol
    built: str | None = None
    if kind.factory is not None:
        factory = kind.factory.symbol
        result = outcome(f"factory:{kind.name}")
        if result is None:
            return RunnerSupport(None, plan.reasons.get(f"factory:{kind.name}", "not computed"))
        if result.error_type in route.refusals:
            return RunnerSupport(False, f"{factory} raises {result.error_type}: {result.error_message}")
        value = result.value.get("$constructed") if result.ok and isinstance(result.value, dict) else None
        if not isinstance(value, str):  # the tree's code can hand back anything
            return RunnerSupport(
                None,
                f"{factory} {failure(result)}"
                if not result.ok
                else f"{factory} builds no speculator class behaviour can name",
            )
        built = value
        speculator = built.rsplit(".", 1)[-1]
        if kind.foreign and f".{kind.foreign}." in f".{built}.":
            return RunnerSupport(
                False,
                f"the {kind.name.upper()} runner builds {speculator} ({built}) for method={route.method!r}: "
                f"it runs the drafter as {kind.foreign.upper()}, with no {route.method} speculator",
            )
    unknown = []
    if layers is not None:
        if layers.error_type in route.refusals:
            return RunnerSupport(False, f"{resolver} raises {layers.error_type}: {layers.error_message}")
        if not layers.ok:
            unknown.append(f"{resolver} {failure(layers)}")
    for check, message in plan.refusal_checks.get(kind.name, []):
        result = outcome(f"refusal:{kind.name}:{check}")
        if result is None:
            unknown.append(f"{check} could not be stubbed: {plan.reasons.get(f'refusal:{kind.name}:{check}', '?')}")
        elif result.ok and result.value is True:
            return RunnerSupport(
                False,
                f"{route.deployment_config.symbol}.{kind.refusals} lists {message!r} ({check}() is true for this "
                "drafter)",
            )
        elif not result.ok:
            unknown.append(f"{check} {failure(result)}")
    if unknown:
        return RunnerSupport(None, "; ".join(unknown))
    if built is not None:
        return RunnerSupport(True, f"the {kind.name.upper()} runner builds {built.rsplit('.', 1)[-1]} ({built})")
    return RunnerSupport(True, f"no {kind.name.upper()} refusal of this drafter in this tree")


def _default_runner(plan: Plan, outcome: Lookup) -> tuple[str | None, str]:
    switch = plan.route.switch
    prop = f"{plan.route.deployment_config.symbol}.{switch.property}"
    env = outcome("runner:env")
    if env is None or not env.ok or env.value not in (None, True, False):
        why = plan.reasons.get("runner:env") or (f"its default {failure(env)}" if env is not None else "not computed")
        return None, f"the default of {switch.variable} is not known: {why}"
    if not plan.has_runner_property:
        runner = switch.on if env.value else switch.off
        return (
            runner,
            f"{switch.variable} defaults to {env.value} in {switch.env_file} and nothing else chooses the runner",
        )
    result = outcome(f"runner:default:{env.value}")
    if result is None:
        return None, plan.reasons.get("runner:default", f"{plan.route.deployment_config.symbol} could not be stubbed")
    if result.ok and isinstance(result.value, bool):
        runner = switch.on if result.value else switch.off
        return runner, f"{prop} is {result.value} for this drafter with {switch.variable} unset"
    if result.gap:
        return (
            None,
            f"with {switch.variable} unset, {prop} reads {result.gap} before deciding: it depends on the target "
            "model and deployment",
        )
    return None, f"{prop} {failure(result)}"


def _choose_runner(default: str | None, default_why: str, support: dict[str, RunnerSupport]) -> tuple[str | None, str]:
    if default is not None:
        return default, default_why
    accepted = [name for name, item in support.items() if item.supported is True]
    refused = [name for name, item in support.items() if item.supported is False]
    if len(accepted) == 1 and len(refused) == 1:
        return accepted[0], f"only the {accepted[0].upper()} runner accepts this drafter"
    if len(accepted) == 2:
        return None, f"both runners accept this drafter; {default_why}"
    if len(refused) == 2:
        return None, "no runner of this tree accepts this drafter"
    return None, f"{default_why}; and whether each runner accepts the drafter is not fully known"


def _prefix_block(plan: Plan, outcome: Lookup, reasons: dict[str, str]) -> tuple[bool | None, bool | None]:
    result = outcome("prefix")
    if plan.drop is None or result is None:
        reasons["drops_prefix_block"] = plan.reasons.get("prefix") or plan.reasons.get("spec") or "not computed"
        return None, None
    if not result.ok or not isinstance(result.value, bool):
        reasons["drops_prefix_block"] = f"what {plan.constructor} hands on ({_shown(plan)}) {failure(result)}"
        return None, None
    drops = result.value
    disabled = None
    if plan.opt_out:
        opted = outcome("prefix:opt-out")
        if opted is not None and opted.ok and isinstance(opted.value, bool):
            disabled = opted.value
    return drops, disabled


def _shown(plan: Plan) -> str:
    shown = plan.drop.shown if plan.drop is not None else ""
    return f"{shown}()" if shown.isidentifier() else shown
