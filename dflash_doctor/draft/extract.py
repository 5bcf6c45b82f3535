"""Take pure functions out of a vLLM tree's source, with what they need.

A probed function is copied from the tree's AST with its annotations
stripped (they would name torch and transformers). Each free name it reads
is looked up at the top of its own module: a function is copied too, a
constant built from literals is copied, a ``from vllm... import`` is
followed into the tree. Anything else becomes a gap: the sandbox binds it to
an object that stops the probe the moment the code touches it.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import textwrap
from collections.abc import Iterable
from functools import lru_cache

from ..model import ToolError
from ..source import SiteError, SourceTree, Symbol, parse_python, search_name
from .harness import SAFE_BUILTIN_NAMES
from .sandbox import Chunk

SAFE_BUILTINS = frozenset(SAFE_BUILTIN_NAMES)
PROPERTY_DECORATORS = {"property", "cached_property"}
KEPT_DECORATORS = {"staticmethod", "classmethod"}
CONTAINER_CALLS = {"frozenset", "set", "tuple", "list", "dict"}
FIELD_CALLS = {"field", "Field"}
OPTION_TYPES = {"bool", "int", "float", "str"}
STATIC_NODES = (
    ast.Constant, ast.Tuple, ast.List, ast.Set, ast.Dict, ast.UnaryOp, ast.BinOp, ast.Name,
    ast.Load, ast.operator, ast.unaryop, ast.Call,
)
MAX_DEPTH = 12


class ExtractError(ToolError):
    """The function cannot be taken out faithfully; the reason is user-facing."""


@dataclasses.dataclass(frozen=True)
class Site:
    """Where a probed definition lives in the tree (evidence for the report)."""

    file: str
    symbol: str
    line: int

    def to_json(self) -> dict:
        return {"file": self.file, "line": self.line, "symbol": self.symbol}


class Locator:
    """Finds the probed definitions. A required one missing from its file is
    looked for in the whole package, one scan for all of them; an optional one
    (absent from older releases) is not, as the engine does for optional anchors:
    a package scan costs more than all the probes together."""

    def __init__(self, tree: SourceTree, required: Iterable[tuple[str, str]], optional: Iterable[tuple[str, str]] = ()) -> None:
        required = list(required)
        self.found: dict[tuple[str, str], list[Symbol] | ExtractError] = {}
        for file, qualname in [*required, *optional]:
            try:
                parsed = tree.parsed(file)
                self.found[(file, qualname)] = parsed.symbols(qualname) if parsed else []
            except SiteError as exc:
                self.found[(file, qualname)] = ExtractError(str(exc))
        moved = {search_name(q): (f, q) for f, q in required if self.found[(f, q)] == []}
        for name, files in tree.files_defining(moved).items() if moved else ():
            symbols = []
            for other in files:
                try:
                    parsed = tree.parsed(other)
                except SiteError:
                    continue  # a broken unrelated file does not hide the definition
                symbols.extend(parsed.symbols(moved[name][1]) if parsed else [])
            self.found[moved[name]] = symbols

    def one(self, file: str, qualname: str) -> Symbol | None:
        """The one definition of ``qualname``; None when there is none."""
        found = self.found[(file, qualname)]
        if isinstance(found, ExtractError):
            raise found
        if len(found) > 1:
            places = ", ".join(f"{s.file}:{s.line}" for s in found)
            raise ExtractError(f"{qualname} is defined {len(found)} times ({places}); the probe would have to guess which runs")
        return found[0] if found else None


class ProgramBuilder:
    """A flat program of copied definitions, in dependency order."""

    def __init__(self, tree: SourceTree, provided: Iterable[str], classes: bool = False,
                 follow: Iterable[str] | None = None) -> None:
        """``classes``: module-level classes of the copied code's own files are
        copied as classes to construct (``__init__`` and the methods it reaches);
        ``follow``: the only files imports are followed into (None: any)."""
        self.tree = tree
        self.classes = classes
        self.follow = None if follow is None else frozenset(follow)
        self.provided = set(provided)
        self.chunks: list[Chunk] = []
        self.gaps: dict[str, str] = {}  # free name -> label of the gap bound to it
        self.omitted: dict[str, str] = {}  # "Class.method" -> why it was left out
        self._origins: dict[str, str] = {}  # program name -> "file:qualname"

    # -- module-level definitions -------------------------------------------

    def function(self, symbol: Symbol) -> str:
        """Copy a module-level function and its dependencies; its program name."""
        node = symbol.node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or "." in symbol.qualname:
            raise ExtractError(f"{symbol.qualname} in {symbol.file} is not a module-level function")
        self._add_function(symbol.parsed, node, symbol.file, 0)
        return node.name

    def expression_function(self, symbol_file: str, name: str, expression: ast.expr) -> str:
        """Wrap an expression of a module (e.g. a lambda's body) as ``def name(): return ...``."""
        parsed = self._parsed(symbol_file)
        definition = parse_python(f"def {name}():\n    return None").body[0]
        definition.body[0].value = copy.deepcopy(expression)
        self._add_function(parsed, ast.fix_missing_locations(definition), symbol_file, 0)
        return name

    def _parsed(self, relpath: str):
        try:
            parsed = self.tree.parsed(relpath)
        except SiteError as exc:
            raise ExtractError(str(exc)) from None
        if parsed is None:
            raise ExtractError(f"{relpath} is not in this tree")
        return parsed

    def _add_function(self, parsed, node, file: str, depth: int) -> None:
        origin = f"{file}:{node.name}"
        if self._claim(node.name, origin):
            return
        definition = _stripped(node, parsed.text)
        decorators = definition.decorator_list
        definition.decorator_list = []
        for decorator in decorators:
            if not _neutral_decorator(parsed.tree, decorator):
                raise ExtractError(f"{node.name} in {file} is decorated with @{ast.unparse(decorator)}, which the probe cannot reproduce")
        _refuse_dunders(definition, f"{node.name} in {file}")
        self._resolve_free_names(parsed, file, _free_names(definition), depth)
        self.chunks.append(Chunk(node.name, ast.unparse(definition)))

    def _claim(self, name: str, origin: str) -> bool:
        """True when ``name`` is already defined from the same place."""
        if name in self.provided or name in self.gaps:
            raise ExtractError(f"{origin} would shadow the name {name!r} that another probed definition reads")
        known = self._origins.get(name)
        if known is None:
            self._origins[name] = origin
            return False
        if known != origin:
            raise ExtractError(f"two probed definitions are both named {name!r} ({known} and {origin})")
        return True

    def _resolve_free_names(self, parsed, file: str, names: set[str], depth: int) -> None:
        for name in sorted(names):
            if name not in self.provided:
                self._resolve(parsed, file, name, depth + 1)

    def _resolve(self, parsed, file: str, name: str, depth: int, imported: bool = False) -> None:
        if depth > MAX_DEPTH:
            raise ExtractError(f"the definitions {name!r} depends on go deeper than {MAX_DEPTH} levels")
        bindings = list(_top_level_bindings(parsed.tree, name))
        if len(bindings) != 1:
            self._gap(name, f"{name} ({file})")
            return
        node, conditional = bindings[0]
        if conditional:
            self._gap(name, f"{name} ({file}, defined conditionally)")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._add_function(parsed, node, file, depth)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and _is_static(node.value):
            origin = f"{file}:{name}"
            if self._claim(name, origin):
                return
            self._resolve_free_names(parsed, file, _names_in(node.value), depth)
            self.chunks.append(Chunk(name, f"{name} = {ast.unparse(node.value)}"))
        elif isinstance(node, ast.ImportFrom):
            self._follow_import(node, name, file, depth)
        elif isinstance(node, ast.ClassDef) and self.classes and not imported:
            self.constructor(Symbol(file, node.name, node, parsed))
        else:
            self._gap(name, f"{name} ({file})")

    def _follow_import(self, node: ast.ImportFrom, name: str, file: str, depth: int) -> None:
        alias = next(a for a in node.names if (a.asname or a.name) == name)
        module = _absolute_module(node, file)
        if alias.asname and alias.asname != alias.name:
            self._gap(name, f"{name} ({file}, imported under another name)")
            return
        if module and module.split(".")[0] == self.tree.package:
            base = module.replace(".", "/")
            for candidate in (f"{base}.py", f"{base}/__init__.py"):
                if self.follow is not None and candidate not in self.follow:
                    continue
                try:
                    parsed = self.tree.parsed(candidate)
                except SiteError:
                    break
                if parsed is not None:
                    self._resolve_imported(parsed, candidate, name, depth, f"{name} (imported from {module})")
                    return
        self._gap(name, f"{name} (imported from {module or 'a relative module'})")

    def _resolve_imported(self, parsed, file: str, name: str, depth: int, label: str) -> None:
        """Follow an import into the tree. While constructing classes, a definition
        there that cannot be copied is a stand-in, like any name from outside."""
        if not self.classes:
            self._resolve(parsed, file, name, depth)
            return
        kept = (len(self.chunks), dict(self._origins), dict(self.gaps), dict(self.omitted))
        try:
            self._resolve(parsed, file, name, depth, imported=True)
        except ExtractError:
            del self.chunks[kept[0]:]
            self._origins, self.gaps, self.omitted = kept[1], kept[2], kept[3]
            self._gap(name, label)

    def _gap(self, name: str, label: str) -> None:
        if name in self.gaps:
            return
        if name in self._origins:
            raise ExtractError(f"{label} would be a gap, but another probed definition is named {name!r}")
        self.gaps.setdefault(name, label)

    # -- classes ---------------------------------------------------------------

    def constructor(self, symbol: Symbol) -> str:
        """Copy a module-level class to construct; its program name. Its bases
        (torch modules) are not copied: ``super().__init__()`` is dropped."""
        origin = f"{symbol.file}:{symbol.qualname}"
        if not self._claim(symbol.node.name, origin):
            body = self.class_body(symbol, ("__init__",), constructing=True)
            why = self.omitted.get(f"{symbol.node.name}.__init__")
            if why:
                raise ExtractError(why)
            self.chunks.append(Chunk(symbol.node.name, f"{symbol.node.name} = _module_class({symbol.node.name!r}, {body!r})"))
        return symbol.node.name

    def class_body(self, symbol: Symbol, entries: Iterable[str], option_defaults: bool = False, constructing: bool = False) -> str:
        """Source of a class body holding ``entries`` and every method they reach
        through ``self``. With ``option_defaults``, fields annotated as plain
        options (bool, int, float, str) keep their literal default: the launch
        default of a config option. Other fields (models, parallelism) are state
        the probe does not know; they stay out, so reading them is a gap."""
        node = symbol.node
        if not isinstance(node, ast.ClassDef):
            raise ExtractError(f"{symbol.qualname} in {symbol.file} is not a class")
        methods = {s.name: s for s in node.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
        lines: list[str] = []
        for statement in node.body if option_defaults else ():
            default = _option_default(statement)
            if default is not None:
                field_name, value = default
                lines.append(f"{field_name} = {ast.unparse(value)}")
        for statement in node.body if constructing else ():
            # class attributes the constructor may read: a static one (``decoder_layer_cls
            # = Layer``) is copied, any other (a weights mapper) is a stand-in
            if isinstance(statement, ast.Assign) and all(isinstance(target, ast.Name) for target in statement.targets):
                if _is_static(statement.value):
                    self._resolve_free_names(symbol.parsed, symbol.file, _names_in(statement.value), 0)
                    lines.append(ast.unparse(statement))
                    continue
                for target in statement.targets:
                    stand_in = f"_{node.name}_{target.id}"
                    self._gap(stand_in, f"{node.name}.{target.id} ({symbol.file})")
                    lines.append(f"{target.id} = {stand_in}")
        queue = [name for name in entries if name in methods]
        included: set[str] = set()
        while queue:
            name = queue.pop()
            if name in included:
                continue
            included.add(name)
            method = methods[name]
            try:
                source, reached = self._method(symbol, method, constructing)
            except ExtractError as exc:
                self.omitted[f"{node.name}.{name}"] = str(exc)
                continue
            lines.append(source)
            queue.extend(attr for attr in reached if attr in methods)
        return "\n".join(lines) + "\n"

    def _method(self, owner: Symbol, method: ast.FunctionDef, constructing: bool = False) -> tuple[str, set[str]]:
        where = f"{owner.qualname}.{method.name} in {owner.file}"
        definition = _stripped(method, owner.parsed.text)
        if constructing:
            definition.body = [statement for statement in definition.body if not _base_init(statement)] or [ast.Pass()]
        wrap = None
        kept = []
        for decorator in definition.decorator_list:
            name = decorator.attr if isinstance(decorator, ast.Attribute) else getattr(decorator, "id", None)
            if name in PROPERTY_DECORATORS:
                wrap = "property"
            elif name in KEPT_DECORATORS:
                kept.append(ast.Name(id=name, ctx=ast.Load()))
            else:
                raise ExtractError(f"{where} is decorated with @{ast.unparse(decorator)}, which the probe cannot reproduce")
        definition.decorator_list = kept
        _refuse_dunders(definition, where)
        self._resolve_free_names(owner.parsed, owner.file, _free_names(definition), 0)
        source = ast.unparse(ast.fix_missing_locations(definition))
        if wrap:
            source += f"\n{method.name} = {wrap}({method.name})"
        self_name = method.args.args[0].arg if method.args.args else None
        reached = {
            n.attr for n in ast.walk(method)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == self_name
        }
        return source, reached

    def attribute_names(self) -> set[str]:
        """Every ``x.name`` the program reads (to know which methods a stub needs)."""
        names: set[str] = set()
        for chunk in self.chunks:
            names |= attribute_names(chunk.source)
        return names


@lru_cache(maxsize=512)
def attribute_names(source: str) -> frozenset[str]:
    """Every ``x.name`` in a chunk of the program (cached: stubs are rebuilt until no name is new)."""
    return frozenset(n.attr for n in ast.walk(parse_python(source)) if isinstance(n, ast.Attribute))


def _copied(node: ast.FunctionDef, text: str) -> ast.FunctionDef:
    """A fresh tree of the definition: its source lines parsed again (the C parser
    is far faster than ``deepcopy`` on a long method); ``deepcopy`` when they do
    not give back the same definition (a synthetic node, odd indentation)."""
    start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    segment = "".join(_lines(text)[start - 1:node.end_lineno])
    try:
        again = parse_python(textwrap.dedent(segment)).body
    except SyntaxError:
        again = []
    if len(again) == 1 and type(again[0]) is type(node) and again[0].name == node.name and len(again[0].body) == len(node.body):
        return again[0]
    return copy.deepcopy(node)


@lru_cache(maxsize=32)
def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _stripped(node: ast.FunctionDef, text: str) -> ast.FunctionDef:
    """A copy without annotations: they name types the sandbox does not have."""
    definition = _copied(node, text)
    for inner in ast.walk(definition):
        if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inner.returns = None
            arguments = inner.args
            for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg]:
                if arg is not None:
                    arg.annotation = None
    # Local annotated assignments keep their value and lose the annotation.
    for parent in ast.walk(definition):
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


def _base_init(statement: ast.stmt) -> bool:
    """``super().__init__(...)``: the base is a torch module the program does not have."""
    call = statement.value if isinstance(statement, ast.Expr) else None
    return (
        isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "__init__"
        and isinstance(call.func.value, ast.Call) and isinstance(call.func.value.func, ast.Name)
        and call.func.value.func.id == "super"
    )


def _refuse_dunders(node: ast.AST, where: str) -> None:
    for inner in ast.walk(node):
        name = inner.attr if isinstance(inner, ast.Attribute) else inner.id if isinstance(inner, ast.Name) else None
        if name and name.startswith("__") and name != "__name__":
            raise ExtractError(f"{where} uses {name}, which the sandbox does not allow")


def _free_names(definition: ast.AST) -> set[str]:
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


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} - SAFE_BUILTINS


def _is_static(node: ast.AST) -> bool:
    """Literals, containers of literals, arithmetic on them, and names (resolved in turn)."""
    for inner in ast.walk(node):
        if not isinstance(inner, STATIC_NODES):
            return False
        if isinstance(inner, ast.Call):
            if not (isinstance(inner.func, ast.Name) and inner.func.id in CONTAINER_CALLS) or inner.keywords:
                return False
    return True


def _option_default(statement: ast.stmt) -> tuple[str, ast.expr] | None:
    """``name: bool = False`` (or ``= field(default=...)``) with a plain option type."""
    if not (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)):
        return None
    annotation, value = statement.annotation, statement.value
    if not (isinstance(annotation, ast.Name) and annotation.id in OPTION_TYPES) or value is None:
        return None
    if isinstance(value, ast.Call) and getattr(value.func, "id", getattr(value.func, "attr", None)) in FIELD_CALLS:
        value = next((k.value for k in value.keywords if k.arg == "default"), None)
    if not isinstance(value, ast.Constant) or type(value.value).__name__ != annotation.id:
        return None
    return statement.target.id, value


def _top_level_bindings(module: ast.Module, name: str):
    """Statements binding ``name`` at module level; (node, conditional)."""

    def visit(statements, conditional):
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
            isinstance(t, (ast.Tuple, ast.List)) and any(getattr(e, "id", None) == name for e in t.elts) for t in statement.targets
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


def _absolute_module(node: ast.ImportFrom, file: str) -> str | None:
    if not node.level:
        return node.module
    package = file.rsplit("/", 1)[0].split("/") if "/" in file else []
    if file.endswith("/__init__.py"):
        package = file[: -len("/__init__.py")].split("/")
    if node.level - 1 > len(package):
        return None
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else [])) or None


def _neutral_decorator(module: ast.Module, decorator: ast.expr) -> bool:
    """A registration decorator of the same module that hands the function back
    unchanged (``def register(name): def deco(fn): ...; return fn; return deco``)."""
    factory_call = isinstance(decorator, ast.Call)
    name = (decorator.func if factory_call else decorator)
    if not isinstance(name, ast.Name):
        return False
    bindings = list(_top_level_bindings(module, name.id))
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
    stack = list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Return):
            returns.append(node)
        stack.extend(ast.iter_child_nodes(node))
    last = function.body[-1] if function.body else None
    return (
        isinstance(last, ast.Return)
        and all(isinstance(r.value, ast.Name) and r.value.id == name for r in returns)
    )
