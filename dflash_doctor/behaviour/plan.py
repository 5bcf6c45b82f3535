"""Plan the calls that ask a tree what it computes: find each definition,
copy it into the program, and note why a call cannot be made."""

from __future__ import annotations

import ast
import dataclasses
from typing import Any

from ..draft import sandbox
from ..draft.sandbox import Call
from ..source import SourceError, SourceTree, Symbol
from .computed import (
    ENVS,
    LAYER_RESOLVER,
    OPT_OUT_FIELD,
    OPTIONAL,
    REQUIRED,
    RUNNER_ENV,
    RUNNER_FILES,
    RUNNER_PROPERTY,
    RUNNERS,
    SCHEDULER,
    SPEC_CONFIG,
    SPECULATOR_FACTORY,
    V1_REFUSALS,
    V1_RESOLVER,
    V2_RESOLVER,
    VLLM_CONFIG,
)
from .definitions import ExtractError, Locator, Place, parsed_or_none
from .handed import Handed, handed
from .program import ProgramBuilder


@dataclasses.dataclass(frozen=True)
class StubCall:
    """A call on an instance of a class stub (a runner, VllmConfig): made once
    the SpeculativeConfig stub it holds is known."""

    id: str
    expr: str
    holder: str
    owner: Symbol
    entries: tuple[str, ...]
    reason_key: str
    bind: tuple[tuple[str, Any], ...] = ()
    holds: str = "spec"  # which SpeculativeConfig the stub holds: "spec" or "spec_opted_out"
    loose: bool = False  # an attribute the stub lacks is deployment state, explored both ways (else a gap)


@dataclasses.dataclass
class Plan:
    """Calls to make and what each needs; filled while the program is built."""

    calls: list[Call] = dataclasses.field(default_factory=list)
    stub_calls: list[StubCall] = dataclasses.field(default_factory=list)
    reasons: dict[str, str] = dataclasses.field(default_factory=dict)
    evidence: list[Place] = dataclasses.field(default_factory=list)
    v1_refusals: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    drop: Handed | None = None
    has_opt_out: bool = False
    has_runner_property: bool = False
    runners: tuple[str, ...] = RUNNERS


def plan_calls(tree: SourceTree, builder: ProgramBuilder) -> tuple[Plan, Symbol | None]:
    """The calls for every question, their definitions copied into ``builder``; and
    the tree's SpeculativeConfig (None: not found, the plan's reasons say why)."""
    plan = Plan(runners=tree_runners(tree))
    # the V1 resolver is looked for in the whole package wherever the tree has the V1 runner
    required = (*REQUIRED, V1_RESOLVER) if "v1" in plan.runners else REQUIRED
    locator = Locator(tree, required, [item for item in OPTIONAL if item not in required])
    spec_symbol = _optional(plan, "spec", lambda: locator.one(*SPEC_CONFIG))
    _plan_aux(locator, builder, plan)
    _plan_layers(locator, builder, plan)
    _plan_runner(tree, locator, builder, plan)
    _plan_prefix_block(locator, plan, spec_symbol)
    return plan, spec_symbol


def tree_runners(tree: SourceTree) -> tuple[str, ...]:
    """The model runners the tree has (a file it did not send counts as there)."""
    present = []
    for runner in RUNNERS:
        try:
            missing = tree.data(RUNNER_FILES[runner]) is None
        except SourceError:
            missing = False
        if not missing:
            present.append(runner)
    return tuple(present)


def _optional(plan: Plan, key: str, find):
    try:
        return find()
    except ExtractError as exc:
        plan.reasons[key] = str(exc)
        return None


def _plan_aux(locator: Locator, builder: ProgramBuilder, plan: Plan) -> None:
    if "v1" not in plan.runners:
        plan.reasons["aux:v1"] = f"this vLLM has no V1 runner ({RUNNER_FILES['v1']} is not in the tree)"
        v1 = None
    else:
        v1 = _optional(plan, "aux:v1", lambda: locator.one(*V1_RESOLVER))
    owner = _optional(plan, "aux:v1", lambda: _owner(v1)) if v1 is not None else None
    if owner is not None:
        method = v1.qualname.rsplit(".", 1)[-1]
        plan.stub_calls.append(StubCall("aux:v1", f"runner.{method}()", "runner", owner, (method,), "aux:v1"))
        plan.evidence.append(Place(v1.file, v1.qualname, v1.line))
    elif v1 is None:
        plan.reasons.setdefault("aux:v1", f"{V1_RESOLVER[1]} not found in this tree")
    v2 = _optional(plan, "aux:v2", lambda: locator.one(*V2_RESOLVER))
    if v2 is not None and _add(builder, plan, "aux:v2", v2):
        plan.calls.append(Call("aux:v2", f"{v2.node.name}(spec)"))
    elif v2 is None:
        plan.reasons.setdefault("aux:v2", f"{V2_RESOLVER[1]} not found in this tree")


def _plan_layers(locator: Locator, builder: ProgramBuilder, plan: Plan) -> None:
    resolver = _optional(plan, "layers", lambda: locator.one(*LAYER_RESOLVER))
    if resolver is None:
        plan.reasons.setdefault("layers", f"this vLLM has no per-layer resolver ({LAYER_RESOLVER[1]} in {LAYER_RESOLVER[0]}); "
                                          "the verdict on its draft layers says what they do")
        return
    if not _add(builder, plan, "layers", resolver):
        return
    for runner in plan.runners:
        current = sandbox.strict_object("VllmConfig", use_v2_model_runner=runner == "v2")
        plan.calls.append(Call(
            f"layers:{runner}", f"[{resolver.node.name}(config, index) for index in range(layer_count)]",
            (("config", sandbox.config_object("hf_config", "hf")), ("get_current_vllm_config", sandbox.returns(current))),
        ))


def _plan_runner(tree: SourceTree, locator: Locator, builder: ProgramBuilder, plan: Plan) -> None:
    parsed = _optional(plan, "runner:env", lambda: parsed_or_none(tree, ENVS))
    lam = _env_lambda(parsed.tree) if parsed is not None else None
    if lam is None:
        plan.reasons.setdefault("runner:env", f"no {RUNNER_ENV} entry in {ENVS}" if parsed is not None else f"{ENVS} is not in this tree")
    else:
        try:
            name = builder.expression_function(ENVS, "_default_" + RUNNER_ENV, lam.body)
            plan.calls.append(Call("runner:env", f"{name}()"))
            plan.evidence.append(Place(ENVS, f"environment_variables[{RUNNER_ENV!r}]", lam.lineno))
        except ExtractError as exc:
            plan.reasons["runner:env"] = str(exc)
    vllm_config = _optional(plan, "runner:default", lambda: locator.one(*VLLM_CONFIG))
    if vllm_config is not None and isinstance(vllm_config.node, ast.ClassDef):
        methods = {s.name: s for s in vllm_config.node.body if isinstance(s, ast.FunctionDef)}
        if RUNNER_PROPERTY in methods:
            plan.has_runner_property = True
            plan.evidence.append(Place(vllm_config.file, f"{vllm_config.qualname}.{RUNNER_PROPERTY}", methods[RUNNER_PROPERTY].lineno))
            for value in (None, False, True):
                envs = sandbox.strict_object("envs", **{RUNNER_ENV: value})
                plan.stub_calls.append(StubCall(f"runner:default:{value}", f"vllm_config.{RUNNER_PROPERTY}", "vllm_config",
                                                 vllm_config, (RUNNER_PROPERTY,), "runner:default", (("envs", envs),)))
        if V1_REFUSALS in methods:
            plan.evidence.append(Place(vllm_config.file, f"{vllm_config.qualname}.{V1_REFUSALS}", methods[V1_REFUSALS].lineno))
            for check, message in _refusal_checks(methods[V1_REFUSALS], set(methods)):
                plan.v1_refusals.append((check, message))
                plan.stub_calls.append(StubCall(f"v1-refusal:{check}", f"vllm_config.{check}()", "vllm_config",
                                                 vllm_config, (check,), f"v1-refusal:{check}"))
    factory = _optional(plan, "runner:v2", lambda: locator.one(*SPECULATOR_FACTORY))
    if factory is None:
        plan.reasons.setdefault("runner:v2", f"{SPECULATOR_FACTORY[1]} not found in {SPECULATOR_FACTORY[0]}: no V2 speculator to check")
    elif _add(builder, plan, "runner:v2", factory):
        extra = ", None" * max(0, _required_positional(factory.node) - 1)
        plan.calls.append(Call("runner:v2", f"{factory.node.name}(vllm_config{extra})",
                               (("vllm_config", {"$marker": "plain-vllm-config"}),)))


def _plan_prefix_block(locator: Locator, plan: Plan, spec_symbol: Symbol | None) -> None:
    scheduler = _optional(plan, "prefix", lambda: locator.one(*SCHEDULER))
    vllm_config = _optional(plan, "prefix", lambda: locator.one(*VLLM_CONFIG))
    if scheduler is None or vllm_config is None:
        missing = SCHEDULER if scheduler is None else VLLM_CONFIG
        plan.reasons.setdefault("prefix", f"{missing[1]} not found in {missing[0]}")
        return
    try:
        plan.drop = handed(scheduler)
    except ExtractError as exc:
        plan.reasons["prefix"] = str(exc)
        return
    plan.evidence.append(Place(scheduler.file, scheduler.qualname, scheduler.line))
    expression = plan.drop.expression.format(vllm="vllm_config")
    plan.stub_calls.append(StubCall("prefix", expression, "vllm_config", vllm_config, plan.drop.attributes, "prefix", loose=True))
    if spec_symbol is not None and any(
        isinstance(s, ast.AnnAssign) and getattr(s.target, "id", None) == OPT_OUT_FIELD for s in spec_symbol.node.body
    ):
        plan.has_opt_out = True
        plan.stub_calls.append(StubCall("prefix:opt-out", expression, "vllm_config", vllm_config, plan.drop.attributes, "prefix",
                                        holds="spec_opted_out", loose=True))


def _add(builder: ProgramBuilder, plan: Plan, key: str, symbol: Symbol) -> bool:
    try:
        builder.function(symbol)
    except ExtractError as exc:
        plan.reasons[key] = str(exc)
        return False
    plan.evidence.append(Place(symbol.file, symbol.qualname, symbol.line))
    return True


def _owner(method: Symbol) -> Symbol:
    class_name = method.qualname.rsplit(".", 1)[0]
    owner = method.parsed.symbols(class_name)
    if len(owner) != 1:
        raise ExtractError(f"the class of {method.qualname} cannot be told apart in {method.file}")
    return owner[0]

def _env_lambda(module: ast.Module) -> ast.Lambda | None:
    for statement in module.body:
        value = statement.value if isinstance(statement, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(value, ast.Dict):
            for key, item in zip(value.keys, value.values):
                if isinstance(key, ast.Constant) and key.value == RUNNER_ENV and isinstance(item, ast.Lambda) and not item.args.args:
                    return item
    return None


def _refusal_checks(function: ast.FunctionDef, methods: set[str]) -> list[tuple[str, str]]:
    """``if self.<check>(): unsupported.append("...")`` in the V1 refusal list."""
    checks = []
    for node in ast.walk(function):
        if not isinstance(node, ast.If):
            continue
        test = node.test
        if (
            isinstance(test, ast.Call) and not test.args and isinstance(test.func, ast.Attribute)
            and isinstance(test.func.value, ast.Name) and test.func.value.id == "self" and test.func.attr in methods
        ):
            appended = [
                n.args[0] for n in ast.walk(ast.Module(body=node.body, type_ignores=[]))
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "append" and n.args
            ]
            message = appended[0].value if appended and isinstance(appended[0], ast.Constant) else test.func.attr
            checks.append((test.func.attr, str(message)))
    return checks


def _required_positional(function: ast.FunctionDef) -> int:
    arguments = function.args
    return len(arguments.posonlyargs) + len(arguments.args) - len(arguments.defaults)
