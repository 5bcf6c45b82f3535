"""The drafter's config as the engine sees it: its config.json turned into the object
the engine hands its code, by running the config class the engine would use (for
``model_type: qwen3``, transformers' ``Qwen3Config``) in the sandbox.

The class's own code runs: its ``__init__`` (transformers 4.x), or, for a
dataclass config (5.x), the ``__init__`` Python's dataclasses generate from
its own fields (each keyword, or its literal default), then its
``__post_init__``. The base class (``PreTrainedConfig``: torch, hub and
generation machinery; its fields and constructor) is stood in by the minimum
it does that matters here: every keyword the class does not take becomes an
attribute (``BASE_NOTE``). What comes back is every attribute of
the built object: the hf_config the behaviour run uses.

Where the class cannot be run (no transformers, no class for the model_type,
its code stopped), the keys such classes derive (``DERIVED``) are unknown for
that drafter, with the reason: the sandbox makes reading them a gap, never the
raw JSON value.
"""

from __future__ import annotations

import ast
import dataclasses
import weakref
from collections.abc import Sequence
from typing import Any

from ..isolation import sandbox
from ..draft.config import DERIVED, SPECULATORS, DraftConfig, HfSource, HfView
from ..isolation.sandbox import Call, Chunk, Outcome, SandboxError
from ..source import ParsedFile, SourceError, SourceTree, Symbol
from .computed import RunProgram
from .definitions import ExtractError, is_static, stripped
from .interpret import failure
from .program import ProgramBuilder
from .transformers import config_class, transformers_for

BASE = "_dd_base"
INIT = "_dd_init"
BUILD = "_dd_config"
PROVIDED = (BASE, "_module_class", "logger")
BASE_NOTE = (
    "the base class (PreTrainedConfig) is stood in by the minimum it does that matters here: "
    "every keyword the class does not take becomes an attribute"
)
SPECULATORS_NOTE = (
    "the engine's own class: the tree's translation of the speculators config, every key of which becomes an attribute"
)
BASE_SOURCE = f"""def {BASE}(self, *args, **kwargs):
    for key, value in kwargs.items():
        setattr(self, key, value)
"""
# transformers 5: the base's __post_init__ moves the file's rope_theta/rope_scaling into
# rope_parameters (RotaryEmbeddingConfigMixin), so the built config has no rope_theta attribute.
# Where the tree's base does this, its own mixin runs before the keywords become attributes.
ROPE_BASE = ("transformers/configuration_utils.py", "PreTrainedConfig")
ROPE_MIXIN = ("transformers/modeling_rope_utils.py", "RotaryEmbeddingConfigMixin")
ROPE_CONVERT = "convert_rope_params_to_dict"
ROPE_NOTE = "; the file's RoPE keys are moved into rope_parameters by transformers' own RotaryEmbeddingConfigMixin"
ROPE_BASE_SOURCE = f"""def {BASE}(self, *args, **kwargs):
    if hasattr(self, "rope_parameters"):
        kwargs = self.{ROPE_CONVERT}(**kwargs)
    for key, value in kwargs.items():
        setattr(self, key, value)
"""


# PreTrainedConfig.get_text_config(): the config's text part, which is the config itself unless it
# holds a sub-config under one of these names (then it is not modelled: calling it is a gap).
TEXT_CONFIG_NAMES = ("decoder", "generator", "text_config", "text_encoder")


def returning_itself(data: dict[str, Any]) -> tuple[str, ...]:
    """The base class's methods that return the built config itself, for this hf_config."""
    return () if any(data.get(name) is not None for name in TEXT_CONFIG_NAMES) else ("get_text_config",)


def hf_views(tree: SourceTree, items: Sequence[tuple[DraftConfig, dict[str, Any]]], run: RunProgram) -> list[HfView]:
    """Each drafter's ``data`` (the file's keys; for speculators, the tree's translation)
    as the engine's config class builds it: one sandbox request per class."""
    transformers = transformers_for(tree)
    version, origin = (None, None) if isinstance(transformers, str) else (transformers.version, transformers.origin)
    views: dict[int, HfView] = {}
    classes: dict[str, tuple[SourceTree, Symbol] | str] = {}
    groups: dict[str, tuple[SourceTree, Symbol, list[tuple[int, dict[str, Any], HfSource]]]] = {}
    for index, (draft, data) in enumerate(items):
        plain = {key: value for key, value in data.items() if not key.startswith("__")}
        model_type = plain.get("model_type")
        if draft.format == SPECULATORS:
            label = tree.engine.route.translations_label if tree.engine.route is not None else "speculators"
            views[index] = HfView(plain, HfSource("speculators", label, version, origin, SPECULATORS_NOTE))
            continue
        if not isinstance(model_type, str):
            why = (
                f"the config has no model_type, so {tree.engine.display}'s loader (Transformers' AutoConfig) "
                "cannot tell which class builds it"
            )
            views[index] = _unknown(plain, HfSource(None, None, version, origin, None, why))
            continue
        if model_type not in classes:
            classes[model_type] = config_class(tree, transformers, model_type)
        found = classes[model_type]
        if isinstance(found, str):
            views[index] = _unknown(plain, HfSource(model_type, None, version, origin, None, found))
            continue
        holder, symbol = found
        where = f"{symbol.file}:{symbol.qualname}"
        moved = rope_moved(holder)
        groups.setdefault(where, (holder, symbol, []))[2].append(
            (index, plain, HfSource(model_type, where, version, origin, BASE_NOTE + (ROPE_NOTE if moved else "")))
        )
    for holder, symbol, members in groups.values():
        for (index, plain, source), built in zip(
            members, _run_class(holder, symbol, [plain for _, plain, _ in members], run)
        ):
            if isinstance(built, str):
                views[index] = _unknown(
                    plain, dataclasses.replace(source, reason=f"{symbol.qualname} could not be run: {built}")
                )
            else:
                views[index] = HfView(built, source)
    return [views[index] for index in range(len(items))]


def _unknown(data: dict[str, Any], source: HfSource) -> HfView:
    return HfView(
        {**data, sandbox.UNKNOWN_KEYS: {key: f"{key} of the drafter's hf_config ({source.reason})" for key in DERIVED}},
        source,
    )


_PROGRAMS: weakref.WeakKeyDictionary[SourceTree, dict[str, tuple[list[Chunk], dict[str, Any]] | str]] = (
    weakref.WeakKeyDictionary()
)


def _run_class(
    tree: SourceTree, symbol: Symbol, datas: list[dict[str, Any]], run: RunProgram
) -> list[dict[str, Any] | str]:
    """Each of ``datas`` built by the class: its attributes, or why it could not be built."""
    programs = _PROGRAMS.setdefault(tree, {})
    key = f"{symbol.file}:{symbol.qualname}"
    if key not in programs:
        try:
            programs[key] = _program(tree, symbol)
        except (ExtractError, SourceError) as exc:
            programs[key] = str(exc)
    program = programs[key]
    if isinstance(program, str):
        return [program] * len(datas)
    chunks, globals_ = program
    calls = [
        Call(f"config{index}", f"{BUILD}(data)", (("data", sandbox.data_ref(f"hf{index}")),))
        for index in range(len(datas))
    ]
    try:
        outcomes = run(chunks, calls, {f"hf{index}": data for index, data in enumerate(datas)}, globals_)
    except SandboxError as exc:
        return [str(exc)] * len(datas)
    built: list[dict[str, Any] | str] = []
    for index in range(len(datas)):
        outcome = outcomes.get(f"config{index}", Outcome(gap="no answer"))
        if outcome.ok and isinstance(outcome.value, dict):  # attributes only: a "__" key is the tool's own
            built.append({key: value for key, value in outcome.value.items() if not key.startswith("__")})
        else:
            built.append(f"building it {failure(outcome)}" if not outcome.ok else "building it gave no attributes")
    return built


def _program(tree: SourceTree, symbol: Symbol) -> tuple[list[Chunk], dict[str, Any]]:
    """The class's constructor as module-level functions of its own module (so the
    builder resolves what they read there), and ``_dd_config(data)`` that builds one."""
    node = symbol.node
    if not isinstance(node, ast.ClassDef):
        raise ExtractError(f"{symbol.qualname} in {symbol.file} is not a class")
    methods = {s.name: s for s in node.body if isinstance(s, ast.FunctionDef)}
    builder = ProgramBuilder(tree, PROVIDED)
    rope = _rope_mixin(tree, builder)
    extra: list[Chunk] = [Chunk(BASE, ROPE_BASE_SOURCE if rope else BASE_SOURCE)]
    if "__init__" in methods:
        builder.function(_as_function(symbol, methods["__init__"], INIT))
    else:  # a dataclass (transformers 5): the generated __init__, then __post_init__
        post = "_dd_post_init"
        if "__post_init__" in methods:
            builder.function(_as_function(symbol, methods["__post_init__"], post))
        else:
            post = BASE
        fields = _fields(node)
        extra.append(Chunk("_dd_fields", f"_dd_fields = {fields!r}"))
        extra.append(
            Chunk(
                INIT,
                f"""def {INIT}(self, **kwargs):
    for name, value in _dd_fields:
        setattr(self, name, kwargs.pop(name) if name in kwargs else value)
    {post}(self, **kwargs)
""",
            )
        )
    extra.append(
        Chunk(
            BUILD,
            f"""def {BUILD}(data):
    config = _module_class({node.name!r}, {rope!r})()
    {INIT}(config, **data)
    return dict(config.__dict__)
""",
        )
    )
    globals_: dict[str, Any] = {name: sandbox.gap(label) for name, label in builder.gaps.items()}
    globals_.update(_module_class={"$module_class": True}, logger=sandbox.noop("logger"))
    return [extra[0], *builder.chunks, *extra[1:]], globals_


def rope_moved(tree: SourceTree) -> bool:
    """Whether the tree's config base moves the RoPE keywords into rope_parameters (transformers 5)."""
    try:
        parsed = tree.parsed(ROPE_BASE[0])
    except SourceError:
        return False
    found = parsed.symbols(f"{ROPE_BASE[1]}.__post_init__") if parsed else []
    return len(found) == 1 and any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == ROPE_CONVERT
        for n in ast.walk(found[0].node)
    )


def _rope_mixin(tree: SourceTree, builder: ProgramBuilder) -> str:
    """The class body of the tree's own RoPE mixin (its conversion and what that reaches
    through ``self``) where the base runs it; "" where it does not."""
    if not rope_moved(tree):
        return ""
    parsed = tree.parsed(ROPE_MIXIN[0])
    found = parsed.symbols(ROPE_MIXIN[1]) if parsed else []
    if len(found) != 1:
        raise ExtractError(f"{ROPE_MIXIN[1]} is not defined once in {ROPE_MIXIN[0]}")
    return builder.class_body(found[0], (ROPE_CONVERT,))


def _as_function(symbol: Symbol, method: ast.FunctionDef, name: str) -> Symbol:
    """``method`` as a module-level function ``name`` of its own module, with
    ``super().<m>(...)`` calling the stand-in base."""
    definition = stripped(method, symbol.parsed.text)
    definition.name = name
    definition.decorator_list = []
    for inner in ast.walk(definition):
        if isinstance(inner, ast.Call) and _is_super_call(inner.func):
            inner.func = ast.Name(id=BASE, ctx=ast.Load())
            inner.args = [ast.Name(id=definition.args.args[0].arg, ctx=ast.Load()), *inner.args]
    source = ast.unparse(ast.fix_missing_locations(definition))
    parsed = ParsedFile(symbol.file, f"{symbol.parsed.text}\n\n{source}\n".encode())
    copy = parsed.tree.body[-1]
    assert isinstance(copy, ast.FunctionDef)  # ``definition`` parsed back
    return Symbol(symbol.file, name, copy, parsed)


def _is_super_call(func: ast.expr) -> bool:
    return (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Call)
        and isinstance(func.value.func, ast.Name)
        and func.value.func.id == "super"
    )


def _fields(node: ast.ClassDef) -> list[tuple[str, Any]]:
    """The class's own dataclass fields, in order, with their literal defaults (a field
    without one is left out: set only when the file gives it). The bases' fields
    are the stood-in base's: only the keywords the file gives become attributes."""
    fields: dict[str, Any] = {}
    for statement in node.body:
        if not (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)) or _class_var(
            statement.annotation
        ):
            continue
        known, value = _default(statement.value)
        if known:
            fields[statement.target.id] = value
    return list(fields.items())


def _class_var(annotation: ast.expr) -> bool:
    target = annotation.value if isinstance(annotation, ast.Subscript) else annotation
    return (isinstance(target, ast.Name) and target.id == "ClassVar") or (
        isinstance(target, ast.Attribute) and target.attr == "ClassVar"
    )


def _default(value: ast.expr | None) -> tuple[bool, Any]:
    """(whether known, the literal default): ``= literal``, ``field(default=literal)``,
    ``field(default_factory=list|dict)``."""
    if value is None:
        return False, None
    if isinstance(value, ast.Call) and getattr(value.func, "id", getattr(value.func, "attr", None)) == "field":
        for keyword in value.keywords:
            if keyword.arg == "default":
                return _default(keyword.value)
            if (
                keyword.arg == "default_factory"
                and isinstance(keyword.value, ast.Name)
                and keyword.value.id in ("list", "dict")
            ):
                return True, [] if keyword.value.id == "list" else {}
        return False, None
    if not is_static(value):
        return False, None
    try:
        return True, ast.literal_eval(value)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return False, None
