"""Build the drafter's decoder layers from the tree's own classes and record
the sliding window and causality that reach each attention layer.

The layer class and everything it reaches in the tree (the draft attention
class, the per-layer resolver, pure helpers) are copied out; every other name
(torch, vLLM layers, platform and parallel state) is a stand-in. Calls of the
recorded class (``Attention``) are recorded with their arguments, which are
bound to its ``__init__`` parameters as Python would bind them, so a window
handed by keyword, by position or through ``**kwargs`` reads the same.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Any

from ..draft import sandbox
from ..draft.extract import ExtractError, Locator, ProgramBuilder
from ..draft.probes import REFUSALS, RUNNERS, Runner
from ..draft.sandbox import Call, Outcome, SandboxError
from ..rules import Construct
from ..source import SiteError, SourceTree

PROVIDED = ("get_current_vllm_config", "_module_class", "_records", "logger")


@dataclasses.dataclass(frozen=True)
class Built:
    """Per draft layer (window, causal) as they reached the attention layer; or why not."""

    layers: tuple[tuple[Any, Any], ...] | None
    reason: str = ""
    refused: bool = False  # building the layers raised one of vLLM's refusals


def construct_layers(
    tree: SourceTree, construct: Construct, hf_configs: list[dict | None], run: Runner, follow: tuple[str, ...]
) -> list[dict[str, Built]]:
    """For each drafter's hf_config (None: not available), per runner, what its layers
    were built with. Imports are followed only into ``follow`` (the rule's files)."""
    try:
        builder = ProgramBuilder(tree, PROVIDED, classes=True, follow=follow)
        layer = Locator(tree, [], [(construct.file, construct.layer)]).one(construct.file, construct.layer)
        if layer is None:
            raise ExtractError(f"{construct.layer} not found in {construct.file}")
        name = builder.constructor(layer)
        keywords = _layer_keywords(layer.node, construct)
        parameters = _signature(tree, construct)
    except (ExtractError, SiteError) as exc:
        return [{runner: Built(None, str(exc)) for runner in RUNNERS} for _ in hf_configs]
    record = (construct.recorded,)
    assume = dict(construct.assume)
    globals_: dict[str, Any] = {gap: {"$standin": gap, "assume": assume, "record": record} for gap in builder.gaps}
    globals_.update(_module_class={"$module_class": True}, _records={"$records": True}, logger=sandbox.noop("logger"))
    causal = "layer"
    for attribute in construct.causal.split("."):
        causal = f"getattr({causal}, {attribute!r}, None)"
    expr = f"[(lambda layer: [_records(), {causal}])({name}({keywords})) for index in range(layer_count)]"
    calls, data = [], {}
    for index, hf in enumerate(hf_configs):
        count = hf.get("num_hidden_layers") if hf else None
        if not isinstance(count, int) or isinstance(count, bool) or not 0 < count <= 64:
            continue
        data[f"hf{index}"] = hf
        for runner in RUNNERS:
            current = sandbox.strict_object("VllmConfig", use_v2_model_runner=runner == "v2")
            config = {**sandbox.config_object("hf_config", f"hf{index}"), "loose": True}
            bind = [("config", config), ("layer_count", count),
                    ("get_current_vllm_config", sandbox.returns(current))]
            bind += [(parameter, {"$standin": parameter, "assume": assume, "record": record}) for parameter in _stand_in_parameters(layer.node, construct)]
            calls.append(Call(f"{index}|{runner}", expr, tuple(bind)))
    try:
        outcomes = run(builder.chunks, calls, data, globals_) if calls else {}
    except SandboxError as exc:
        return [{runner: Built(None, str(exc)) for runner in RUNNERS} for _ in hf_configs]
    return [
        {runner: _read(outcomes.get(f"{index}|{runner}"), parameters, construct) for runner in RUNNERS}
        for index in range(len(hf_configs))
    ]


def _parameters(function: ast.FunctionDef) -> list[ast.arg]:
    arguments = function.args
    return [*arguments.posonlyargs, *arguments.args][1:] + list(arguments.kwonlyargs)


def _init(node: ast.ClassDef, where: str) -> ast.FunctionDef:
    for statement in node.body:
        if isinstance(statement, ast.FunctionDef) and statement.name == "__init__":
            return statement
    raise ExtractError(f"{node.name} in {where} has no __init__")


def _layer_keywords(node: ast.ClassDef, construct: Construct) -> str:
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


def _stand_in_parameters(node: ast.ClassDef, construct: Construct) -> list[str]:
    init = _init(node, construct.file)
    arguments = init.args
    positional = [*arguments.posonlyargs, *arguments.args][1:]
    required = positional[: len(positional) - len(arguments.defaults)]
    required += [arg for arg, default in zip(arguments.kwonlyargs, arguments.kw_defaults) if default is None]
    return [arg.arg for arg in required if arg.arg not in (*construct.index_parameters, "config", "prefix")]


@dataclasses.dataclass(frozen=True)
class _Signature:
    positional: tuple[str, ...]
    keywords: frozenset[str]
    var_keywords: bool
    window_default: Any
    window_default_known: bool


def _signature(tree: SourceTree, construct: Construct) -> _Signature:
    parsed = tree.parsed(construct.signature_file)
    symbols = parsed.symbols(construct.signature) if parsed else []
    if len(symbols) != 1:
        raise ExtractError(f"{construct.signature} is not defined once in {construct.signature_file}")
    function = symbols[0].node
    arguments = function.args
    positional = tuple(arg.arg for arg in [*arguments.posonlyargs, *arguments.args][1:])
    defaults = dict(zip(positional[len(positional) - len(arguments.defaults):], arguments.defaults))
    defaults.update({arg.arg: d for arg, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d is not None})
    known, value = False, None
    if construct.window in defaults:
        try:
            value, known = ast.literal_eval(defaults[construct.window]), True
        except ValueError:
            pass
    keywords = frozenset([*positional, *(arg.arg for arg in arguments.kwonlyargs)])
    return _Signature(positional, keywords, arguments.kwarg is not None, value, known)


def _read(outcome: Outcome | None, signature: _Signature, construct: Construct) -> Built:
    if outcome is None:
        return Built(None, "the drafter config has no usable num_hidden_layers")
    if not outcome.ok:
        why = outcome.unknowable or f"raises {outcome.error_type}: {outcome.error_message}"
        return Built(None, f"building the draft layers {why}", refused=outcome.error_type in REFUSALS)
    layers = []
    for index, (records, causal) in enumerate(outcome.value):
        mine = [item for item in records if item.get("callee") == construct.recorded]
        if len(mine) != 1:
            return Built(None, f"draft layer {index} built {len(mine)} {construct.recorded} layers; the question needs exactly one")
        window = _bound_window(mine[0], signature, construct)
        if isinstance(window, str):
            return Built(None, f"draft layer {index}: {window}")
        if isinstance(causal, dict):
            causal = None
        layers.append((window[0], causal))
    return Built(tuple(layers))


def _bound_window(record: dict, signature: _Signature, construct: Construct) -> tuple[Any] | str:
    """The value ``window`` gets when ``record``'s arguments are bound to the signature."""
    args, kwargs = record["args"], record["kwargs"]
    if len(args) > len(signature.positional):
        return f"{construct.recorded} got more positional arguments than its signature has"
    bound = dict(zip(signature.positional, args))
    for key, value in kwargs.items():
        if key in bound:
            return f"{construct.recorded} got {key} twice"
        if key not in signature.keywords and not signature.var_keywords:
            return f"{construct.recorded} got an unexpected keyword {key}"
        bound[key] = value
    if construct.window in bound:
        value = bound[construct.window]
    elif signature.window_default_known:
        value = signature.window_default
    else:
        return f"the default of {construct.window} is not a literal"
    if isinstance(value, dict):
        return f"{construct.window} is {value.get('$standin') or value.get('$repr')}, which the stand-ins cannot tell"
    return (value,)
