"""Build the drafter's decoder layers from the tree's own classes and record
the sliding window and causality that reach each attention layer.

The layer class and everything it reaches in the tree (the draft attention
class, the per-layer resolver, pure helpers) are copied out; every other name
(torch, the engine's layers, platform and parallel state) is a stand-in. Calls of the
recorded class (``Attention``) are recorded with their arguments, which are
bound to its ``__init__`` parameters as Python would bind them, so a window
handed by keyword, by position or through ``**kwargs`` reads the same.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Any

from ..isolation import sandbox
from ..isolation.sandbox import Call, Outcome, SandboxError
from ..engines import Engine
from ..rules import Construct
from ..source import Definition, SourceError, SourceTree, Symbol
from .computed import RunProgram
from .definitions import ExtractError, Locator
from .hf_config import returning_itself
from .program import ProgramBuilder

BOUND = ("_module_class", "_records", "logger")  # bound by the run, never copied (with the route's current config)


@dataclasses.dataclass(frozen=True)
class Built:
    """Per draft layer (window, causal) as they reached the attention layer; or why not."""

    layers: tuple[tuple[Any, Any], ...] | None
    reason: str = ""
    refused: bool = False  # building the layers raised one of the engine's refusals
    indices: Indices | None = None  # the rule names no model class


@dataclasses.dataclass(frozen=True)
class Indices:
    """The layer index each decoder layer received when the tree's model class built
    them, in build order (None: the layer class takes no index); or why not known."""

    received: tuple[Any, ...] | None
    reason: str = ""


def construct_layers(
    tree: SourceTree,
    construct: Construct,
    hf_configs: list[dict | None],
    run: RunProgram,
    follow: tuple[str, ...],
    platform: str,
) -> list[dict[str | None, Built]]:
    """For each drafter's hf_config (None: not available), per runner, what its layers
    were built with, on ``platform`` (one of the tree's engine's). Imports are followed
    only into ``follow`` (the rule's files)."""
    route = tree.engine.route
    if route is None and tree.engine.direct is None:
        return [{} for _ in hf_configs]
    # an engine without a route of runners runs every drafter on one worker: one answer, runner None
    runners: tuple[str | None, ...] = route.runner_names if route is not None else (None,)
    # the recorded name is never copied, even where an import of it would be followed: it stays a stand-in
    bound = (*BOUND, construct.recorded, *((route.current_config,) if route is not None else ()))
    try:
        builder = ProgramBuilder(tree, bound, classes=True, follow=follow)
        layer = Locator(tree, [], [(construct.file, construct.layer)]).one(construct.file, construct.layer)
        if layer is None:
            raise ExtractError(f"{construct.layer} not found in {construct.file}")
        name = builder.constructor(layer)
        keywords = _layer_keywords(layer.node, construct)
        parameters = _signature(tree, construct)
    except (ExtractError, SourceError) as exc:
        return [{runner: Built(None, str(exc)) for runner in runners} for _ in hf_configs]
    record = (construct.recorded,)
    assume = _assumed(construct, platform, tree.engine)
    globals_: dict[str, Any] = {gap: {"$standin": gap, "assume": assume, "record": record} for gap in builder.gaps}
    globals_.update(_module_class={"$module_class": True}, _records={"$records": True}, logger=sandbox.noop("logger"))
    globals_[construct.recorded] = {"$standin": construct.recorded, "assume": assume, "record": record}
    causal = "layer" if construct.causal else "None"  # else read from the recorded call (causal_parameter)
    for attribute in construct.causal.split(".") if construct.causal else ():
        causal = f"getattr({causal}, {attribute!r}, None)"
    expr = f"[(lambda layer: [_records(), {causal}])({name}({keywords})) for index in range(layer_count)]"
    calls, data, built = [], {}, {}
    for index, hf in enumerate(hf_configs):
        count = hf.get("num_hidden_layers") if hf else None
        if hf is None or not isinstance(count, int) or isinstance(count, bool) or not 0 < count <= 64:
            continue
        data[f"hf{index}"] = hf
        built[index] = hf
        for runner in runners:
            config = {**sandbox.config_object("hf_config", f"hf{index}", returning_itself(hf)), "loose": True}
            bind: list[tuple[str, Any]] = [("config", config), ("layer_count", count)]
            if route is not None:
                current = sandbox.strict_object(
                    route.deployment_config.name, **{route.switch.property: runner == route.switch.on}
                )
                bind.append((route.current_config, sandbox.returns(current)))
            bind += [
                (parameter, {"$standin": parameter, "assume": assume, "record": record})
                for parameter in _stand_in_parameters(layer.node, construct)
            ]
            calls.append(Call(_call_id(index, runner), expr, tuple(bind)))
    try:
        outcomes = run(builder.chunks, calls, data, globals_) if calls else {}
    except SandboxError as exc:
        return [{runner: Built(None, str(exc)) for runner in runners} for _ in hf_configs]
    refusals = route.refusals if route is not None else ()
    indices = (
        _model_indices(tree, runners, construct, layer, built, data, run, follow, platform) if construct.model else {}
    )
    return [
        {
            runner: dataclasses.replace(
                _read(outcomes.get(_call_id(index, runner)), parameters, construct, refusals),
                indices=indices.get((index, runner)),
            )
            for runner in runners
        }
        for index in range(len(hf_configs))
    ]


def _call_id(index: int, runner: str | None) -> str:
    """A call's id in the child: opaque there, made here from what it is for (never parsed back)."""
    return f"{index}|{runner}"


def _model_indices(
    tree: SourceTree,
    runners: tuple[str | None, ...],
    construct: Construct,
    layer: Symbol,
    hf_configs: dict[int, dict],
    data: dict,
    run: RunProgram,
    follow: tuple[str, ...],
    platform: str,
) -> dict[tuple[int, str | None], Indices]:
    """Construct the tree's model class (``construct.model``) for each drafter config
    (by its index), with the layer class a recorded stand-in, and bind each recorded
    layer call to the layer's ``__init__``: the index it received. Keyed by (config, runner).
    The config reaches the model as the engine hands it: through the deployment config
    (a route of runners) or straight (``Direct``)."""
    route, direct = tree.engine.route, tree.engine.direct
    keys = [(index, runner) for index in hf_configs for runner in runners]
    assert construct.model is not None  # asked only of a rule that names its model class
    bound = (*BOUND, route.current_config, construct.layer) if route is not None else (*BOUND, construct.layer)
    assert route is not None or direct is not None  # construct_layers asks only such engines
    holder = route.deployment_name if route is not None else direct.parameter if direct is not None else ""
    try:
        builder = ProgramBuilder(tree, bound, classes=True, follow=follow)
        model = Locator(tree, [], [(construct.file, construct.model)]).one(construct.file, construct.model)
        if model is None:
            raise ExtractError(f"{construct.model} not found in {construct.file}")
        name = builder.constructor(model)
        arguments = _model_keywords(model.node, construct, holder)
    except (ExtractError, SourceError) as exc:
        return {key: Indices(None, f"building {construct.model}: {exc}") for key in keys}
    record = (construct.layer,)
    assume = _assumed(construct, platform, tree.engine)
    globals_: dict[str, Any] = {gap: {"$standin": gap, "assume": assume, "record": record} for gap in builder.gaps}
    globals_.update(_module_class={"$module_class": True}, _records={"$records": True}, logger=sandbox.noop("logger"))
    globals_[construct.layer] = {"$standin": construct.layer, "assume": assume, "record": record}
    calls = []
    for index, runner in keys:
        config = {
            **sandbox.config_object("hf_config", f"hf{index}", returning_itself(hf_configs[index])),
            "loose": True,
        }
        bind: tuple[tuple[str, Any], ...] = ((holder, config),)
        if route is not None:  # the config reaches the model through the deployment config's speculative config
            fields = route.fields
            speculative = sandbox.strict_object(
                fields.speculative,
                **{
                    fields.method: route.method,
                    fields.draft: sandbox.strict_object(fields.draft, **{fields.hf: config}),
                },
            )
            deployment = {
                "$standin": holder,
                "assume": {**assume, f"{holder}.{fields.speculative}": speculative},
                "record": record,
            }
            current = {
                "$standin": f"{route.current_config}()",
                "record": record,
                "assume": {**assume, f"{route.current_config}().{route.switch.property}": runner == route.switch.on},
            }
            bind = ((holder, deployment), (route.current_config, sandbox.returns(current)))
        calls.append(Call(_call_id(index, runner), f"(lambda model: _records())({name}({arguments}))", bind))
    try:
        outcomes = run(builder.chunks, calls, data, globals_)
    except SandboxError as exc:
        return {key: Indices(None, f"building {construct.model}: {exc}") for key in keys}
    signature = _bind_signature(_init(layer.node, construct.file))
    wanted = [name for name in signature.keywords if name in construct.index_parameters]
    return {
        (index, runner): _received(
            outcomes.get(_call_id(index, runner)), signature, wanted, construct, hf_configs[index]
        )
        for index, runner in keys
    }


def _assumed(construct: Construct, platform: str, engine: Engine) -> dict[str, Any]:
    """The rule's assumptions, the containers it declares, and the platform stand-in
    answering for ``platform`` among the engine's."""
    told = (
        {_platform_test(construct.platform, kind.name): kind.name == platform for kind in engine.platforms}
        if construct.platform
        else {}
    )
    containers = {path: {"$container": path} for path in construct.containers}
    unset = dict.fromkeys(construct.unset)
    return {**told, **containers, **unset, **dict(construct.assume)}


def _model_keywords(node: Definition, construct: Construct, deployment: str) -> str:
    """The model constructor's arguments: the deployment config, a prefix, stand-ins for other required parameters."""
    init = _init(node, construct.file)
    names = [arg.arg for arg in _parameters(init)]
    if deployment not in names:
        raise ExtractError(f"{node.name}.__init__ takes no {deployment}")
    parts = [f"{deployment}={deployment}"] + (["prefix='model'"] if "prefix" in names else [])
    parts += [f"{name}={deployment}.{name}" for name in _required(init) if name not in (deployment, "prefix")]
    return ", ".join(parts)


def _received(
    outcome: Outcome | None, signature: _Signature, wanted: list[str], construct: Construct, hf: dict
) -> Indices:
    if outcome is None:
        return Indices(None, "not built")
    if not outcome.ok:
        return Indices(
            None,
            f"building {construct.model} "
            f"{outcome.unknowable or f'raises {outcome.error_type}: {outcome.error_message}'}",
        )
    records = _records(outcome.value)
    if records is None:
        return Indices(None, f"building {construct.model} {WRONG_SHAPE}")
    mine = [item for item in records if item["callee"] == construct.layer]
    if len(mine) != hf.get("num_hidden_layers"):
        return Indices(
            None,
            f"{construct.model} built {len(mine)} {construct.layer} layers for {hf.get('num_hidden_layers')} in the "
            "config",
        )
    if not wanted:
        return Indices(tuple(None for _ in mine))
    received = []
    for item in mine:
        value = _bound(item, signature, wanted[0], construct.layer)
        if isinstance(value, str):
            return Indices(None, value)
        received.append(value[0])
    return Indices(tuple(received))


def _parameters(function: ast.FunctionDef) -> list[ast.arg]:
    arguments = function.args
    return [*arguments.posonlyargs, *arguments.args][1:] + list(arguments.kwonlyargs)


def _init(node: Definition, where: str) -> ast.FunctionDef:
    for statement in node.body:
        if isinstance(statement, ast.FunctionDef) and statement.name == "__init__":
            return statement
    raise ExtractError(f"{node.name} in {where} has no __init__")


def _layer_keywords(node: Definition, construct: Construct) -> str:
    """The layer constructor's arguments: the drafter config, the layer index, a
    prefix, stand-ins for other required parameters; defaults left alone."""
    init = _init(node, construct.file)
    names = [arg.arg for arg in _parameters(init)]
    index = [name for name in names if name in construct.index_parameters]
    if len(index) > 1:
        raise ExtractError(f"cannot tell which parameter of {node.name}.__init__ is the layer index")
    parts = [f"{name}=index" for name in index]  # none: the layer knows its index from its prefix, if at all
    if "config" in names:
        parts.append("config=config")
    if "prefix" in names:
        parts.append("prefix=f'layers.{index}'")
    parts += [f"{name}={name}" for name in _stand_in_parameters(node, construct)]
    return ", ".join(parts)


def _stand_in_parameters(node: Definition, construct: Construct) -> list[str]:
    required = _required(_init(node, construct.file))
    return [name for name in required if name not in (*construct.index_parameters, "config", "prefix")]


def _required(init: ast.FunctionDef) -> list[str]:
    """Parameters without a default."""
    arguments = init.args
    positional = [*arguments.posonlyargs, *arguments.args][1:]
    required = positional[: len(positional) - len(arguments.defaults)]
    required += [arg for arg, default in zip(arguments.kwonlyargs, arguments.kw_defaults) if default is None]
    return [arg.arg for arg in required]


def _platform_test(platform: str, kind: str) -> str:
    """The stand-in call that tells whether the target is built for ``kind``: ``<platform>.is_<kind>()``,
    or the rule's template (``is_{}()``: a module-level function per platform)."""
    return platform.format(kind) if "{}" in platform else f"{platform}.is_{kind}()"


@dataclasses.dataclass(frozen=True)
class _Signature:
    positional: tuple[str, ...]
    keywords: frozenset[str]
    var_keywords: bool
    defaults: tuple[tuple[str, Any], ...]  # literal defaults
    default_texts: tuple[tuple[str, str], ...]  # other defaults, as written (a stand-in's path: ``Kind.DECODER``)


def _signature(tree: SourceTree, construct: Construct) -> _Signature:
    parsed = tree.parsed(construct.signature_file)
    symbols = parsed.symbols(construct.signature) if parsed else []
    if len(symbols) != 1:
        raise ExtractError(f"{construct.signature} is not defined once in {construct.signature_file}")
    function = symbols[0].node
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):  # a class: its own one is not there
        raise ExtractError(f"{construct.signature} is not defined in {construct.signature_file}")
    return _bind_signature(function, method="." in construct.signature)


def _bind_signature(function: ast.FunctionDef | ast.AsyncFunctionDef, method: bool = True) -> _Signature:
    """How calls bind to ``function``'s parameters (a method's first is its instance), and their defaults."""
    arguments = function.args
    positional = tuple(arg.arg for arg in [*arguments.posonlyargs, *arguments.args][1 if method else 0 :])
    given = dict(zip(positional[len(positional) - len(arguments.defaults) :], arguments.defaults))
    given.update({arg.arg: d for arg, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d is not None})
    literal: dict[str, Any] = {}
    texts: dict[str, str] = {}
    for name, node in given.items():
        try:
            literal[name] = ast.literal_eval(node)
        except ValueError:
            texts[name] = ast.unparse(node)
    keywords = frozenset([*positional, *(arg.arg for arg in arguments.kwonlyargs)])
    return _Signature(positional, keywords, arguments.kwarg is not None, tuple(literal.items()), tuple(texts.items()))


def _read(outcome: Outcome | None, signature: _Signature, construct: Construct, refusals: tuple[str, ...]) -> Built:
    if outcome is None:
        return Built(None, "the drafter config has no usable num_hidden_layers")
    if not outcome.ok:
        why = outcome.unknowable or f"raises {outcome.error_type}: {outcome.error_message}"
        return Built(None, f"building the draft layers {why}", refused=outcome.error_type in refusals)
    value = outcome.value
    if not isinstance(value, list) or not all(
        isinstance(pair, list) and len(pair) == 2 and _records(pair[0]) is not None for pair in value
    ):
        return Built(None, f"building the draft layers {WRONG_SHAPE}")
    layers = []
    for index, (records, causal) in enumerate(value):
        mine = [item for item in records if item["callee"] == construct.recorded]
        if len(mine) != 1:
            return Built(
                None,
                f"draft layer {index} built {len(mine)} {construct.recorded} layers; the question needs exactly one",
            )
        parameter, *keys = construct.parameter.split(".")  # rope_parameters.rope_theta: a key of a dict handed over
        read = _bound(mine[0], signature, parameter, construct.recorded, stand_ins=bool(keys))
        for key in keys:
            if isinstance(read, str):
                break
            held = read[0].get("$dict") if isinstance(read[0], dict) else None
            read = (
                (held[key],) if isinstance(held, dict) and key in held else f"{construct.parameter} was not handed over"
            )
        if isinstance(read, str) or (keys and isinstance(read[0], dict)):
            return Built(None, f"draft layer {index}: {read if isinstance(read, str) else 'the value is not known'}")
        if construct.causal_parameter is not None:
            causal = _causality(mine[0], signature, construct)
        elif isinstance(causal, dict):
            causal = None
        layers.append((_as_config_value(read[0], construct), causal))
    return Built(tuple(layers))


def _as_config_value(value: Any, construct: Construct) -> Any:
    """What the engine's parameter holds, in the config's terms: its "none" value is None,
    and a number less the engine's offset (SGLang holds a window less the current token)."""
    if value == construct.none_value and type(value) is type(construct.none_value):
        return None
    if construct.offset and isinstance(value, int) and not isinstance(value, bool):
        return value - construct.offset
    return value


def _causality(record: dict, signature: _Signature, construct: Construct) -> bool | None:
    """The causality the recorded call was handed (``causal_parameter``), by the stand-in it names;
    None when another."""
    parameter = construct.causal_parameter
    assert parameter is not None
    bound = _bound(record, signature, parameter, construct.recorded, stand_ins=True)
    if isinstance(bound, str):
        return None
    value = bound[0]
    if isinstance(value, dict):
        value = value.get("$standin")
    return dict(construct.causal_values).get(value) if isinstance(value, str) else None


WRONG_SHAPE = "gave an answer of the wrong shape (the tree's code can change what the child hands back)"


def _records(value: Any) -> list[dict] | None:
    """The recorded layer constructions, or None when the answer is not a list of them."""
    if not isinstance(value, list):
        return None
    for item in value:
        if not (
            isinstance(item, dict)
            and isinstance(item.get("callee"), str)
            and isinstance(item.get("args"), list)
            and isinstance(item.get("kwargs"), dict)
        ):
            return None
    return value


def _bound(
    record: dict, signature: _Signature, parameter: str, callee: str, stand_ins: bool = False
) -> tuple[Any] | str:
    """The value ``parameter`` gets when ``record``'s arguments are bound to the
    signature (its literal default when not passed), or why it cannot be told.
    ``stand_ins``: a stand-in, or a default that is not a literal, is taken as its path."""
    args, kwargs = record["args"], record["kwargs"]
    if len(args) > len(signature.positional):
        return f"{callee} got more positional arguments than its signature has"
    bound = dict(zip(signature.positional, args))
    for key, value in kwargs.items():
        if key in bound:
            return f"{callee} got {key} twice"
        if key not in signature.keywords and not signature.var_keywords:
            return f"{callee} got an unexpected keyword {key}"
        bound[key] = value
    defaults, texts = dict(signature.defaults), dict(signature.default_texts)
    if parameter in bound:
        value = bound[parameter]
    elif parameter in defaults:
        value = defaults[parameter]
    elif stand_ins and parameter in texts:
        value = {"$standin": texts[parameter]}
    else:
        return f"{callee} was not given {parameter}, whose default is not a literal"
    if isinstance(value, dict) and not stand_ins:
        return f"{parameter} is {value.get('$standin') or value.get('$repr')}, which the stand-ins cannot tell"
    return (value,)
