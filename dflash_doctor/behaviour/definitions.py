"""Definitions of an engine's tree read and copied with the stdlib ``ast``: where one
lives, what it reads, and a copy of it fit to run in the sandbox.

A copied function loses its annotations (they would name torch and
transformers); ``free_names`` says what it reads from its module, which
``program.ProgramBuilder`` then resolves.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import textwrap
from collections.abc import Iterable, Iterator
from functools import lru_cache
from typing import TypeGuard, TypeVar

from ..standalone.harness import SAFE_BUILTIN_NAMES
from ..model import ToolError
from ..source import ParsedFile, SourceError, SourceTree, Symbol, locate, parse_python

SAFE_BUILTINS = frozenset(SAFE_BUILTIN_NAMES)
CONTAINER_CALLS = {"frozenset", "set", "tuple", "list", "dict"}
FIELD_CALLS = {"field", "Field"}
OPTION_TYPES = {"bool", "int", "float", "str"}
_Function = TypeVar("_Function", bound=ast.FunctionDef | ast.AsyncFunctionDef)
STATIC_NODES = (
    ast.Constant,
    ast.Tuple,
    ast.List,
    ast.Set,
    ast.Dict,
    ast.UnaryOp,
    ast.BinOp,
    ast.Name,
    ast.Load,
    ast.operator,
    ast.unaryop,
    ast.Call,
)


class ExtractError(ToolError):
    """The function cannot be taken out faithfully; the reason is user-facing."""


@dataclasses.dataclass(frozen=True)
class Place:
    """Where a definition that ran lives in the tree (evidence for the report)."""

    file: str
    symbol: str
    line: int

    def to_json(self) -> dict:
        return {"file": self.file, "line": self.line, "symbol": self.symbol}


class Locator:
    """Finds the definitions a program needs (``source.locate``): a required one
    missing from its file is looked for in the whole package; an optional one
    (absent from older releases) is not."""

    def __init__(
        self, tree: SourceTree, required: Iterable[tuple[str, str]], optional: Iterable[tuple[str, str]] = ()
    ) -> None:
        required = list(required)
        self.found, _ = locate(tree, [*required, *optional], required)

    def one(self, file: str, qualname: str) -> Symbol | None:
        """The one definition of ``qualname``; None when there is none."""
        found = self.found[(file, qualname)]
        if isinstance(found, SourceError):
            raise ExtractError(str(found))
        if len(found) > 1:
            places = ", ".join(f"{s.file}:{s.line}" for s in found)
            raise ExtractError(
                f"{qualname} is defined {len(found)} times ({places}); behaviour would have to guess which one runs"
            )
        return found[0] if found else None


def kept_function(tree: SourceTree, spec: str) -> Symbol | None:
    """The ``def`` of ``file:function`` Python keeps (the last one in the module), or None.
    Raises SourceError when the file cannot be read."""
    file, _, function = spec.partition(":")
    found, _ = locate(tree, [(file, function)], ())
    symbols = found[(file, function)]
    if isinstance(symbols, SourceError):
        raise symbols
    return symbols[-1] if symbols else None


def parsed_or_none(tree: SourceTree, relpath: str) -> ParsedFile | None:
    """The parsed file, None when the tree lacks it; an unreadable one raises ExtractError."""
    try:
        return tree.parsed(relpath)
    except SourceError as exc:
        raise ExtractError(str(exc)) from None


@lru_cache(maxsize=512)
def attribute_names(source: str) -> frozenset[str]:
    """Every ``x.name`` in a chunk of the program (cached: stubs are rebuilt until no name is new)."""
    return frozenset(n.attr for n in ast.walk(parse_python(source)) if isinstance(n, ast.Attribute))


def _copied(node: _Function, text: str) -> _Function:
    """A fresh tree of the definition: its source lines parsed again (the C parser
    is far faster than ``deepcopy`` on a long method); ``deepcopy`` when they do
    not give back the same definition (a synthetic node, odd indentation)."""
    start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    segment = "".join(_lines(text)[start - 1 : node.end_lineno])
    try:
        again = parse_python(textwrap.dedent(segment)).body
    except SyntaxError:
        again = []
    first = again[0] if len(again) == 1 else None
    if isinstance(first, type(node)) and first.name == node.name and len(first.body) == len(node.body):
        return first
    return copy.deepcopy(node)


@lru_cache(maxsize=32)
def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def stripped(node: _Function, text: str) -> _Function:
    """A copy without annotations: they name types the sandbox does not have."""
    definition = _copied(node, text)
    for parent in ast.walk(definition):  # one walk: a node's children are queued before it is seen
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
            parent.returns = None
            arguments = parent.args
            for arg in [
                *arguments.posonlyargs,
                *arguments.args,
                *arguments.kwonlyargs,
                arguments.vararg,
                arguments.kwarg,
            ]:
                if arg is not None:
                    arg.annotation = None
        # Local annotated assignments keep their value and lose the annotation.
        for field in ("body", "orelse", "finalbody"):
            statements = getattr(parent, field, None)
            if isinstance(statements, list):
                for index, statement in enumerate(statements):
                    if isinstance(statement, ast.AnnAssign):
                        statements[index] = (
                            ast.Assign(targets=[statement.target], value=statement.value)
                            if statement.value is not None
                            else ast.Pass()
                        )
    return ast.fix_missing_locations(definition)


def base_init(statement: ast.stmt) -> bool:
    """``super().__init__(...)``: the base is a torch module the program does not have."""
    return isinstance(statement, ast.Expr) and is_super_init(statement.value)


def is_super_init(node: ast.AST) -> TypeGuard[ast.Call]:
    """A call ``super().__init__(...)``."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "__init__"
        and isinstance(node.func.value, ast.Call)
        and isinstance(node.func.value.func, ast.Name)
        and node.func.value.func.id == "super"
    )


# Dunders that only name a definition (strings): reading them reaches nothing else.
NAMING_DUNDERS = frozenset({"__name__", "__module__", "__qualname__", "__doc__"})


def refuse_dunders(node: ast.AST, where: str) -> None:
    for inner in ast.walk(node):
        name = inner.attr if isinstance(inner, ast.Attribute) else inner.id if isinstance(inner, ast.Name) else None
        if name and name.startswith("__") and name not in NAMING_DUNDERS:
            raise ExtractError(f"{where} uses {name}, which the sandbox does not allow")


def free_names(definition: ast.AST) -> set[str]:
    """Names read but never bound inside (scopes flattened: good enough for pure helpers)."""
    bound: set[str] = set()
    loaded: set[str] = set()
    for inner in ast.walk(definition):
        if isinstance(inner, ast.Name):
            (loaded if isinstance(inner.ctx, ast.Load) else bound).add(inner.id)
        elif isinstance(inner, ast.arg):
            bound.add(inner.arg)
        elif isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and inner is not definition:
            bound.add(inner.name)
        elif isinstance(inner, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in inner.names}
        elif isinstance(inner, ast.ExceptHandler) and inner.name:
            bound.add(inner.name)
    return loaded - bound - SAFE_BUILTINS


def names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} - SAFE_BUILTINS


def is_static(node: ast.AST) -> bool:
    """Literals, containers of literals, arithmetic on them, and names (resolved in turn)."""
    for inner in ast.walk(node):
        if not isinstance(inner, STATIC_NODES):
            return False
        if isinstance(inner, ast.Call):
            if not (isinstance(inner.func, ast.Name) and inner.func.id in CONTAINER_CALLS) or inner.keywords:
                return False
    return True


def option_default(statement: ast.stmt) -> tuple[str, ast.expr] | None:
    """``name: bool = False`` (or ``= field(default=...)``) with a plain option type."""
    if not (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)):
        return None
    annotation, value = statement.annotation, statement.value
    if value is None:
        return None
    if isinstance(value, ast.Call) and getattr(value.func, "id", getattr(value.func, "attr", None)) in FIELD_CALLS:
        value = next((k.value for k in value.keywords if k.arg == "default"), None)
    if not isinstance(value, ast.Constant):
        return None
    if value.value is None and _optional_annotation(annotation):  # ``x: T | None = None``: unset at launch
        return statement.target.id, value
    if (
        not (isinstance(annotation, ast.Name) and annotation.id in OPTION_TYPES)
        or type(value.value).__name__ != annotation.id
    ):
        return None
    return statement.target.id, value


def _optional_annotation(annotation: ast.expr) -> bool:
    """``T | None`` or ``Optional[T]``."""
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return any(
            isinstance(side, ast.Constant) and side.value is None for side in (annotation.left, annotation.right)
        )
    return (
        isinstance(annotation, ast.Subscript)
        and getattr(annotation.value, "id", getattr(annotation.value, "attr", None)) == "Optional"
    )


def top_level_bindings(module: ast.Module, name: str) -> Iterator[tuple[ast.stmt, bool]]:
    """Statements binding ``name`` at module level; (node, conditional)."""

    def visit(statements: list[ast.stmt], conditional: bool) -> Iterator[tuple[ast.stmt, bool]]:
        for statement in statements:
            if isinstance(statement, ast.If) and _is_type_checking(statement.test):
                visit(statement.orelse, conditional)
                continue
            if isinstance(statement, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
                for field in ("body", "orelse", "finalbody"):
                    visit(getattr(statement, field, []) or [], True)
                for handler in getattr(statement, "handlers", []) or []:
                    visit(handler.body, True)
                continue
            if _binds(statement, name):
                yield statement, conditional

    yield from visit(module.body, False)


def _binds(statement: ast.stmt, name: str) -> bool:
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return statement.name == name
    if isinstance(statement, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == name for t in statement.targets) or any(
            isinstance(t, (ast.Tuple, ast.List)) and any(getattr(e, "id", None) == name for e in t.elts)
            for t in statement.targets
        )
    if isinstance(statement, ast.AnnAssign):
        return isinstance(statement.target, ast.Name) and statement.target.id == name
    if isinstance(statement, (ast.Import, ast.ImportFrom)):
        return any((a.asname or a.name).split(".")[0] == name for a in statement.names)
    return False


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def absolute_module(node: ast.ImportFrom, file: str) -> str | None:
    if not node.level:
        return node.module
    package = file.rsplit("/", 1)[0].split("/") if "/" in file else []
    if file.endswith("/__init__.py"):
        package = file[: -len("/__init__.py")].split("/")
    if node.level - 1 > len(package):
        return None
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else [])) or None


MEMOISING = frozenset({"cache", "lru_cache"})  # functools decorators: same values, remembered


# Decorators that mark a definition for type checkers or abstract base classes and
# change nothing a call computes, by the module they are imported from.
MARKERS = {
    "final": ("typing", "typing_extensions"),
    "override": ("typing", "typing_extensions"),
    "runtime_checkable": ("typing", "typing_extensions"),
    "type_check_only": ("typing", "typing_extensions"),
    "abstractmethod": ("abc",),
}


def marker_decorator(module: ast.Module, decorator: ast.expr) -> bool:
    """``@final``, ``@typing.final``, ``@abstractmethod``: imported from where MARKERS says."""
    if isinstance(decorator, ast.Attribute):
        return getattr(decorator.value, "id", None) in MARKERS.get(decorator.attr, ())
    if not isinstance(decorator, ast.Name) or decorator.id not in MARKERS:
        return False
    bindings = list(top_level_bindings(module, decorator.id))
    return (
        len(bindings) == 1
        and isinstance(bindings[0][0], ast.ImportFrom)
        and bindings[0][0].module in MARKERS[decorator.id]
        and not bindings[0][1]
    )


def neutral_decorator(module: ast.Module, decorator: ast.expr) -> bool:
    """A registration decorator of the same module that hands the function back
    unchanged (``def register(name): def deco(fn): ...; return fn; return deco``),
    or functools' memoisation (the same values)."""
    if _memoising(module, decorator.func if isinstance(decorator, ast.Call) else decorator):
        return True
    factory_call = isinstance(decorator, ast.Call)
    name = decorator.func if isinstance(decorator, ast.Call) else decorator
    if not isinstance(name, ast.Name):
        return False
    bindings = list(top_level_bindings(module, name.id))
    if len(bindings) != 1 or not isinstance(bindings[0][0], ast.FunctionDef):
        return False
    outer = bindings[0][0]
    inner = outer
    if factory_call:
        nested = [s for s in outer.body if isinstance(s, ast.FunctionDef)]
        if len(nested) != 1 or not _returns_name(outer, nested[0].name):
            return False
        inner = nested[0]
    if not inner.args.args:
        return False
    return _returns_name(inner, inner.args.args[0].arg)


def _returns_name(function: ast.FunctionDef, name: str) -> bool:
    """Every ``return`` of the function itself (not of nested defs) hands back ``name``."""
    returns = []
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Return):
            returns.append(node)
        stack.extend(ast.iter_child_nodes(node))
    last = function.body[-1] if function.body else None
    return isinstance(last, ast.Return) and all(isinstance(r.value, ast.Name) and r.value.id == name for r in returns)


def _memoising(module: ast.Module, decorator: ast.expr) -> bool:
    """``functools.cache`` / ``functools.lru_cache``, or either imported from functools."""
    if isinstance(decorator, ast.Attribute) and isinstance(decorator.value, ast.Name):
        return decorator.value.id == "functools" and decorator.attr in MEMOISING
    if isinstance(decorator, ast.Name) and decorator.id in MEMOISING:
        bindings = list(top_level_bindings(module, decorator.id))
        return (
            len(bindings) == 1 and isinstance(bindings[0][0], ast.ImportFrom) and bindings[0][0].module == "functools"
        )
    return False
