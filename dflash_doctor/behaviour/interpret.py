"""Read the outcomes of one drafter config's calls: which runner runs it and
whether it accepts it, the aux layers and per-layer attention it gets, and
whether the scheduler drops the last prefix-cache block."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..draft.config import ZLAB, DraftConfig, int_list
from ..draft.sandbox import Outcome
from ..model import UNKNOWN
from .computed import (
    ENVS,
    LAYER_RESOLVER,
    OPT_OUT_FIELD,
    REFUSALS,
    RUNNER_ENV,
    RUNNER_PROPERTY,
    SCHEDULER,
    SPECULATOR_FACTORY,
    V1_REFUSALS,
    Computed,
    RunnerSupport,
)
from .plan import Plan
from .program import ProgramBuilder


def failure(outcome: Outcome) -> str:
    """Why a call gave no answer, as the end of a sentence naming the call."""
    why = outcome.unknowable
    if why:
        return f"could not be evaluated: {why}"
    return f"raises {outcome.error_type}: {outcome.error_message}"


def interpret(plan: Plan, outcomes: dict[str, Outcome], builder: ProgramBuilder, draft: DraftConfig,
              expected_aux, expected_layers) -> Computed:
    reasons: dict[str, str] = {}
    mismatches: list[str] = []

    def outcome(call_id: str) -> Outcome | None:
        result = outcomes.get(call_id)
        if result is not None and result.gap and result.gap in builder.omitted:
            return dataclasses.replace(result, gap=f"{result.gap} ({builder.omitted[result.gap]})")
        return result

    # Runner support and choice: only the runners the tree has.
    runners = plan.runners
    support: dict[str, RunnerSupport] = {}
    layer_results = {runner: outcome(f"layers:{runner}") for runner in runners}
    if "v1" in runners:
        support["v1"] = _v1_support(plan, outcome, layer_results["v1"])
    if "v2" in runners:
        support["v2"] = _v2_support(plan, outcome, layer_results["v2"])
    if len(runners) == 1:
        default, default_why = runners[0], f"the {runners[0].upper()} runner is the only model runner this vLLM has"
    else:
        default, default_why = _default_runner(plan, outcome)
    runner, runner_why = _choose_runner(default, default_why, support)
    if default is None:
        reasons["default_runner"] = default_why
    if runner is None:
        reasons["runner"] = runner_why
        if support and all(item.supported is False for item in support.values()):
            mismatches.append(f"no runner of this vLLM accepts this drafter: {next(iter(support.values())).reason}")
    elif support[runner].supported is False:
        mismatches.append(f"this vLLM runs the drafter on the {runner.upper()} runner ({runner_why}), which refuses it: {support[runner].reason}")

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
        reasons["aux_layer_ids"] = (f"the {runner.upper()} resolver returns None for this config: vLLM ignores the drafter's ids "
                                    "and captures the target model's default aux layers")
        mismatches.append(reasons["aux_layer_ids"])
    if aux is not None and expected_aux is not None and tuple(aux) != tuple(expected_aux):
        raw = draft.layer_ids
        detail = " (the raw target_layer_ids, without +1)" if draft.format == ZLAB and list(aux) == list(raw) else ""
        mismatches.append(f"vLLM captures aux layers {list(aux)}{detail}, the drafter expects {list(expected_aux)}")
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
        reasons["layers"] = plan.reasons.get("layers") or layers_why or _layers_failure(layer_results, runner)
    elif expected_layers is not None:
        for (window, causal), wanted in zip(layers, expected_layers):
            index = wanted["index"]
            if window != wanted["sliding_window"] and not (wanted["sliding"] and wanted["sliding_window"] is None):
                mismatches.append(f"draft layer {index}: vLLM uses sliding window {window}, the drafter was trained with {wanted['sliding_window']}")
            if wanted["causal"] is not None and causal != wanted["causal"]:
                mismatches.append(f"draft layer {index}: vLLM runs it {'causal' if causal else 'non-causal'}, the drafter was trained {'causal' if wanted['causal'] else 'non-causal'}")

    # Prefix-cache block drop.
    drops, drops_disabled = _prefix_block(plan, outcome, reasons)
    if drops:
        hint = f"; {OPT_OUT_FIELD}: true turns it off" if drops_disabled is False else ""
        mismatches.append("the scheduler tells the KV cache manager to drop (or hash with lookahead tokens) the last matched "
                          f"prefix-cache block for method='dflash' ({_shown(plan)}){hint}")

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
        has_opt_out=plan.has_opt_out,
        runners=runners,
    )


def _layer_list(value) -> bool:
    return isinstance(value, list) and all(
        isinstance(item, list) and len(item) == 2 and (item[0] is None or isinstance(item[0], int)) and isinstance(item[1], bool)
        for item in value
    )


def _pick(by_runner: dict[str, Any], runner: str | None, what: str) -> tuple[Any, str | None]:
    """The answer of the runner that runs the drafter; else the answer both runners agree on."""
    if runner is not None:
        value = by_runner.get(runner, UNKNOWN)
        return (None, f"the {runner.upper()} runner's {what} could not be computed") if value is UNKNOWN else (value, None)
    known = [value for value in by_runner.values() if value is not UNKNOWN]
    if len(known) == len(by_runner) and all(value == known[0] for value in known):
        return known[0], None
    if len(known) == 1 and len(by_runner) > 1:
        return None, f"only one runner's {what} could be computed and the runner is not known"
    if known:
        return None, f"the V1 and V2 runners give different {what} and which runner runs is not known"
    return None, None


def _layers_failure(results: dict[str, Outcome | None], runner: str | None) -> str:
    chosen = [results[runner]] if runner else [r for r in results.values() if r is not None]
    for result in chosen:
        if result is not None and not result.ok:
            return f"{LAYER_RESOLVER[1]} {failure(result)}"
    return "not computable"


def _v1_support(plan: Plan, outcome, layers: Outcome | None) -> RunnerSupport:
    unknown = []
    if layers is not None:
        if layers.error_type in REFUSALS:
            return RunnerSupport(False, f"{LAYER_RESOLVER[1]} raises {layers.error_type}: {layers.error_message}")
        if not layers.ok:
            unknown.append(f"{LAYER_RESOLVER[1]} {failure(layers)}")
    for check, message in plan.v1_refusals:
        result = outcome(f"v1-refusal:{check}")
        if result is None:
            unknown.append(f"{check} could not be stubbed: {plan.reasons.get(f'v1-refusal:{check}', '?')}")
        elif result.ok and result.value is True:
            return RunnerSupport(False, f"VllmConfig.{V1_REFUSALS} lists {message!r} ({check}() is true for this drafter)")
        elif not result.ok:
            unknown.append(f"{check} {failure(result)}")
    if unknown:
        return RunnerSupport(None, "; ".join(unknown))
    return RunnerSupport(True, "no V1 refusal of this drafter in this tree")


def _v2_support(plan: Plan, outcome, layers: Outcome | None) -> RunnerSupport:
    result = outcome("runner:v2")
    if result is None:
        return RunnerSupport(None, plan.reasons.get("runner:v2", "not computed"))
    if result.error_type == "NotImplementedError":
        return RunnerSupport(False, f"{SPECULATOR_FACTORY[1]} raises NotImplementedError: {result.error_message}")
    built = result.value.get("$constructed") if result.ok and isinstance(result.value, dict) else None
    if not isinstance(built, str):  # the tree's code can hand back anything
        return RunnerSupport(None, f"{SPECULATOR_FACTORY[1]} {failure(result)}" if not result.ok else f"{SPECULATOR_FACTORY[1]} builds no speculator class behaviour can name")
    speculator = built.rsplit(".", 1)[-1]
    if ".eagle." in f".{built}.":
        return RunnerSupport(False, f"the V2 runner builds {speculator} ({built}) for method='dflash': it runs the drafter as EAGLE, with no DFlash speculator")
    if layers is not None and layers.error_type in REFUSALS:
        return RunnerSupport(False, f"{LAYER_RESOLVER[1]} raises {layers.error_type}: {layers.error_message}")
    if layers is not None and not layers.ok:
        return RunnerSupport(None, f"{LAYER_RESOLVER[1]} {failure(layers)}")
    return RunnerSupport(True, f"the V2 runner builds {speculator} ({built})")


def _default_runner(plan: Plan, outcome) -> tuple[str | None, str]:
    env = outcome("runner:env")
    if env is None or not env.ok or env.value not in (None, True, False):
        why = plan.reasons.get("runner:env") or (f"its default {failure(env)}" if env is not None else "not computed")
        return None, f"the default of {RUNNER_ENV} is not known: {why}"
    if not plan.has_runner_property:
        runner = "v2" if env.value else "v1"
        return runner, f"{RUNNER_ENV} defaults to {env.value} in {ENVS} and nothing else chooses the runner"
    result = outcome(f"runner:default:{env.value}")
    if result is None:
        return None, plan.reasons.get("runner:default", "VllmConfig could not be stubbed")
    if result.ok and isinstance(result.value, bool):
        runner = "v2" if result.value else "v1"
        return runner, f"VllmConfig.{RUNNER_PROPERTY} is {result.value} for this drafter with {RUNNER_ENV} unset"
    if result.gap:
        return None, f"with {RUNNER_ENV} unset, VllmConfig.{RUNNER_PROPERTY} reads {result.gap} before deciding: it depends on the target model and deployment"
    return None, f"VllmConfig.{RUNNER_PROPERTY} {failure(result)}"


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
        return None, "no runner of this vLLM accepts this drafter"
    return None, f"{default_why}; and whether each runner accepts the drafter is not fully known"


def _prefix_block(plan: Plan, outcome, reasons: dict[str, str]) -> tuple[bool | None, bool | None]:
    result = outcome("prefix")
    if plan.drop is None or result is None:
        reasons["drops_prefix_block"] = plan.reasons.get("prefix") or plan.reasons.get("spec") or "not computed"
        return None, None
    if not result.ok or not isinstance(result.value, bool):
        reasons["drops_prefix_block"] = f"what {SCHEDULER[1]} hands the KV cache manager ({_shown(plan)}) {failure(result)}"
        return None, None
    drops = result.value
    disabled = None
    if plan.has_opt_out:
        opted = outcome("prefix:opt-out")
        if opted is not None and opted.ok and isinstance(opted.value, bool):
            disabled = opted.value
    return drops, disabled


def _shown(plan: Plan) -> str:
    shown = plan.drop.shown
    return f"{shown}()" if shown.isidentifier() else shown
