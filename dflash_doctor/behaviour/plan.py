"""Plan the calls that ask a tree what it computes: find each definition,
copy it into the program, and note why a call cannot be made.

Where the definitions are is data: the engine's route (``engines/route.py``) for
the objects every question runs on and the runners, the asked rules for what
their questions call (``Questions``)."""

from __future__ import annotations

import ast
import dataclasses
import functools
from collections.abc import Callable
from typing import Any, TypeVar

from ..isolation import sandbox
from ..isolation.sandbox import Call
from ..engines.route import Route, RunnerKind, Where
from ..rules import Anchor, Handing
from ..source import SourceError, SourceTree, Symbol
from .definitions import ExtractError, Locator, Place, parsed_or_none
from .handed import DEPLOYMENT, Handed, handed
from .program import ProgramBuilder

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Questions:
    """What the asked rules call beyond the route: the resolver each runner calls
    (capture ids) and what a constructor hands on (the block drop)."""

    resolvers: tuple[tuple[str, Anchor], ...] = ()
    handing: Handing | None = None
    constructor: Anchor | None = None


@dataclasses.dataclass(frozen=True)
class StubCall:
    """A call on an instance of a class stub (a runner, the deployment config): made
    once the speculative config stub it holds is known."""

    id: str
    expr: str
    holder: str
    owner: Symbol
    entries: tuple[str, ...]
    reason_key: str
    bind: tuple[tuple[str, Any], ...] = ()
    holds: str = "spec"  # which speculative config the stub holds: "spec" or "spec_opted_out"
    loose: bool = False  # an attribute the stub lacks is deployment state, explored both ways (else a gap)


@dataclasses.dataclass
class Plan:
    """Calls to make and what each needs; filled while the program is built."""

    route: Route
    runners: tuple[str, ...]
    calls: list[Call] = dataclasses.field(default_factory=list)
    layer_calls: set[str] = dataclasses.field(default_factory=set)  # the calls that need the drafter's layer count
    stub_calls: list[StubCall] = dataclasses.field(default_factory=list)
    reasons: dict[str, str] = dataclasses.field(default_factory=dict)
    evidence: list[Place] = dataclasses.field(default_factory=list)
    refusal_checks: dict[str, list[tuple[str, str]]] = dataclasses.field(
        default_factory=dict
    )  # runner -> (check, message)
    drop: Handed | None = None
    constructor: str | None = None  # the qualified name of the constructor whose handing is asked
    opt_out: str | None = None  # the opt-out field, where the tree's speculative config has it
    has_runner_property: bool = False


def plan_calls(
    tree: SourceTree, builder: ProgramBuilder, route: Route, questions: Questions
) -> tuple[Plan, Symbol | None]:
    """The calls for every question, their definitions copied into ``builder``; and
    the tree's speculative config (None: not found, the plan's reasons say why)."""
    plan = Plan(route, tree_runners(tree, route))
    resolvers = [(runner, anchor) for runner, anchor in questions.resolvers if runner in plan.runners]
    wanted = [route.speculative_config, route.deployment_config, *(Where(a.file, a.symbol) for _, a in resolvers)]
    if questions.constructor is not None:
        wanted.append(Where(questions.constructor.file, questions.constructor.symbol))
    optional = {(anchor.file, anchor.symbol) for _, anchor in resolvers if anchor.optional}
    optional |= {(where.file, where.symbol) for where in (route.layer_resolver, *_factories(route))}
    required = [(where.file, where.symbol) for where in wanted if (where.file, where.symbol) not in optional]
    locator = Locator(tree, required, sorted(optional - set(required)))
    spec_symbol = _optional(
        plan, "spec", lambda: locator.one(route.speculative_config.file, route.speculative_config.symbol)
    )
    _plan_aux(locator, builder, plan, dict(resolvers))
    _plan_layers(locator, builder, plan)
    _plan_runner(tree, locator, builder, plan)
    if questions.handing is not None and questions.constructor is not None:
        _plan_prefix_block(locator, plan, spec_symbol, questions.handing, questions.constructor)
    else:
        plan.reasons["prefix"] = "no asked rule asks what is handed on about the prefix-cache block"
    return plan, spec_symbol


def tree_runners(tree: SourceTree, route: Route) -> tuple[str, ...]:
    """The model runners the tree has (a file it did not send counts as there)."""
    present = []
    for kind in route.runners:
        try:
            missing = tree.data(kind.marker) is None
        except SourceError:
            missing = False
        if not missing:
            present.append(kind.name)
    return tuple(present)


def _factories(route: Route) -> list[Where]:
    return [kind.factory for kind in route.runners if kind.factory is not None]


def _optional(plan: Plan, key: str, find: Callable[[], T]) -> T | None:
    try:
        return find()
    except ExtractError as exc:
        plan.reasons[key] = str(exc)
        return None


def _plan_aux(locator: Locator, builder: ProgramBuilder, plan: Plan, resolvers: dict[str, Anchor]) -> None:
    """Each runner's resolver: a method runs on an instance of its class (the runner), a
    function is called with the speculative config."""
    for runner in plan.runners:
        key = f"aux:{runner}"
        anchor = resolvers.get(runner)
        if anchor is None:
            plan.reasons[key] = f"no asked rule names the {runner.upper()} runner's resolver"
            continue
        symbol = _optional(plan, key, functools.partial(locator.one, anchor.file, anchor.symbol))
        if symbol is None:
            plan.reasons.setdefault(key, f"{anchor.symbol} not found in this tree")
        elif "." in symbol.qualname:
            owner = _optional(plan, key, functools.partial(_owner, symbol))
            if owner is not None:
                method = symbol.qualname.rsplit(".", 1)[-1]
                plan.stub_calls.append(StubCall(key, f"runner.{method}()", "runner", owner, (method,), key))
                plan.evidence.append(Place(symbol.file, symbol.qualname, symbol.line))
        elif _add(builder, plan, key, symbol):
            plan.calls.append(Call(key, f"{_name(symbol)}(spec)"))


def _plan_layers(locator: Locator, builder: ProgramBuilder, plan: Plan) -> None:
    route = plan.route
    where = route.layer_resolver
    resolver = _optional(plan, "layers", lambda: locator.one(where.file, where.symbol))
    if resolver is None:
        plan.reasons.setdefault(
            "layers",
            f"this tree has no per-layer resolver ({where.symbol} in {where.file}); "
            "the verdict on its draft layers says what they do",
        )
        return
    if not _add(builder, plan, "layers", resolver):
        return
    for runner in plan.runners:
        current = sandbox.strict_object(
            route.deployment_config.name, **{route.switch.property: runner == route.switch.on}
        )
        plan.layer_calls.add(f"layers:{runner}")
        plan.calls.append(
            Call(
                f"layers:{runner}",
                f"[{_name(resolver)}(config, index) for index in range(layer_count)]",
                (
                    ("config", sandbox.config_object("hf_config", "hf")),
                    (route.current_config, sandbox.returns(current)),
                ),
            )
        )


def _plan_runner(tree: SourceTree, locator: Locator, builder: ProgramBuilder, plan: Plan) -> None:
    route = plan.route
    switch = route.switch
    parsed = _optional(plan, "runner:env", lambda: parsed_or_none(tree, switch.env_file))
    lam = _env_lambda(parsed.tree, switch.variable) if parsed is not None else None
    if lam is None:
        plan.reasons.setdefault(
            "runner:env",
            f"no {switch.variable} entry in {switch.env_file}"
            if parsed is not None
            else f"{switch.env_file} is not in this tree",
        )
    else:
        try:
            name = builder.expression_function(switch.env_file, "_default_" + switch.variable, lam.body)
            plan.calls.append(Call("runner:env", f"{name}()"))
            plan.evidence.append(Place(switch.env_file, f"environment_variables[{switch.variable!r}]", lam.lineno))
        except ExtractError as exc:
            plan.reasons["runner:env"] = str(exc)
    deployment = route.deployment_config
    config = _optional(plan, "runner:default", lambda: locator.one(deployment.file, deployment.symbol))
    if config is not None and isinstance(config.node, ast.ClassDef):
        methods = {s.name: s for s in config.node.body if isinstance(s, ast.FunctionDef)}
        if switch.property in methods:
            plan.has_runner_property = True
            plan.evidence.append(
                Place(config.file, f"{config.qualname}.{switch.property}", methods[switch.property].lineno)
            )
            for value in (None, False, True):
                module = sandbox.strict_object(switch.env_module, **{switch.variable: value})
                plan.stub_calls.append(
                    StubCall(
                        f"runner:default:{value}",
                        f"{route.deployment_name}.{switch.property}",
                        route.deployment_name,
                        config,
                        (switch.property,),
                        "runner:default",
                        ((switch.env_module, module),),
                    )
                )
        for kind in route.runners:
            if kind.name in plan.runners and kind.refusals in methods:
                _plan_refusals(plan, config, kind, methods)
    for kind in route.runners:
        if kind.name in plan.runners and kind.factory is not None:
            _plan_factory(locator, builder, plan, kind, kind.factory)


def _plan_refusals(plan: Plan, config: Symbol, kind: RunnerKind, methods: dict[str, ast.FunctionDef]) -> None:
    assert kind.refusals is not None
    plan.evidence.append(Place(config.file, f"{config.qualname}.{kind.refusals}", methods[kind.refusals].lineno))
    checks = plan.refusal_checks.setdefault(kind.name, [])
    for check, message in _refusal_checks(methods[kind.refusals], set(methods)):
        checks.append((check, message))
        key = f"refusal:{kind.name}:{check}"
        plan.stub_calls.append(
            StubCall(key, f"{plan.route.deployment_name}.{check}()", plan.route.deployment_name, config, (check,), key)
        )


def _plan_factory(locator: Locator, builder: ProgramBuilder, plan: Plan, kind: RunnerKind, where: Where) -> None:
    key = f"factory:{kind.name}"
    factory = _optional(plan, key, lambda: locator.one(where.file, where.symbol))
    if factory is None:
        plan.reasons.setdefault(
            key, f"{where.symbol} not found in {where.file}: no {kind.name.upper()} speculator to check"
        )
    elif _add(builder, plan, key, factory):
        extra = (
            ", None" * max(0, _required_positional(factory.node) - 1)
            if isinstance(factory.node, ast.FunctionDef)
            else ""
        )
        name = plan.route.deployment_name
        plan.calls.append(Call(key, f"{_name(factory)}({name}{extra})", ((name, {"$marker": "plain-deployment"}),)))


def _plan_prefix_block(
    locator: Locator, plan: Plan, spec_symbol: Symbol | None, handing: Handing, anchor: Anchor
) -> None:
    deployment = plan.route.deployment_config
    constructor = _optional(plan, "prefix", lambda: locator.one(anchor.file, anchor.symbol))
    config = _optional(plan, "prefix", lambda: locator.one(deployment.file, deployment.symbol))
    if constructor is None or config is None:
        file, symbol = (anchor.file, anchor.symbol) if constructor is None else (deployment.file, deployment.symbol)
        plan.reasons.setdefault("prefix", f"{symbol} not found in {file}")
        return
    plan.constructor = constructor.qualname
    try:
        plan.drop = handed(constructor, handing)
    except ExtractError as exc:
        plan.reasons["prefix"] = str(exc)
        return
    plan.evidence.append(Place(constructor.file, constructor.qualname, constructor.line))
    name = plan.route.deployment_name
    expression = plan.drop.expression.replace(DEPLOYMENT, name)
    plan.stub_calls.append(StubCall("prefix", expression, name, config, plan.drop.attributes, "prefix", loose=True))
    if (
        handing.opt_out is not None
        and spec_symbol is not None
        and isinstance(spec_symbol.node, ast.ClassDef)
        and any(
            isinstance(s, ast.AnnAssign) and getattr(s.target, "id", None) == handing.opt_out
            for s in spec_symbol.node.body
        )
    ):
        plan.opt_out = handing.opt_out
        plan.stub_calls.append(
            StubCall(
                "prefix:opt-out",
                expression,
                name,
                config,
                plan.drop.attributes,
                "prefix",
                holds="spec_opted_out",
                loose=True,
            )
        )


def _add(builder: ProgramBuilder, plan: Plan, key: str, symbol: Symbol) -> bool:
    try:
        builder.function(symbol)
    except ExtractError as exc:
        plan.reasons[key] = str(exc)
        return False
    plan.evidence.append(Place(symbol.file, symbol.qualname, symbol.line))
    return True


def _name(symbol: Symbol) -> str:
    """The name code calls a copied definition by."""
    return symbol.qualname.rsplit(".", 1)[-1]


def _owner(method: Symbol) -> Symbol:
    class_name = method.qualname.rsplit(".", 1)[0]
    owner = method.parsed.symbols(class_name)
    if len(owner) != 1:
        raise ExtractError(f"the class of {method.qualname} cannot be told apart in {method.file}")
    return owner[0]


def _env_lambda(module: ast.Module, variable: str) -> ast.Lambda | None:
    for statement in module.body:
        value = statement.value if isinstance(statement, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(value, ast.Dict):
            for key, item in zip(value.keys, value.values, strict=True):
                if (
                    isinstance(key, ast.Constant)
                    and key.value == variable
                    and isinstance(item, ast.Lambda)
                    and not item.args.args
                ):
                    return item
    return None


def _refusal_checks(function: ast.FunctionDef, methods: set[str]) -> list[tuple[str, str]]:
    """``if self.<check>(): unsupported.append("...")`` in a refusal list."""
    checks = []
    for node in ast.walk(function):
        if not isinstance(node, ast.If):
            continue
        test = node.test
        if (
            isinstance(test, ast.Call)
            and not test.args
            and isinstance(test.func, ast.Attribute)
            and isinstance(test.func.value, ast.Name)
            and test.func.value.id == "self"
            and test.func.attr in methods
        ):
            appended = [
                n.args[0]
                for n in ast.walk(ast.Module(body=node.body, type_ignores=[]))
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "append" and n.args
            ]
            message = appended[0].value if appended and isinstance(appended[0], ast.Constant) else test.func.attr
            checks.append((test.func.attr, str(message)))
    return checks


def _required_positional(function: ast.FunctionDef) -> int:
    arguments = function.args
    return len(arguments.posonlyargs) + len(arguments.args) - len(arguments.defaults)
