"""Build a program from definitions taken out of an engine's tree, with what they need.

Each free name a copied definition reads is looked up at the top of its own
module: a function is copied too, a constant built from literals is copied, a
``from <the engine's package>... import`` is followed into the tree. Anything else becomes a
gap: the sandbox binds it to an object that stops the run the moment the code
touches it.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable, Iterable

from ..isolation.sandbox import Chunk
from ..source import ParsedFile, SourceError, SourceTree, Symbol, parse_python
from .definitions import (
    ExtractError,
    absolute_module,
    attribute_names,
    base_init,
    free_names,
    is_static,
    marker_decorator,
    names_in,
    neutral_decorator,
    option_default,
    parsed_or_none,
    refuse_dunders,
    stripped,
    top_level_bindings,
)

PROPERTY_DECORATORS = {"property", "cached_property"}
STDLIB_FACTORY = "_stdlib"  # the harness's curated standard-library modules
STDLIB_MODULES = frozenset(
    {"operator", "functools", "math", "numbers", "typing", "collections.abc", "importlib", "inspect", "abc"}
)


def stdlib_binding(node: ast.stmt, name: str) -> str | None:
    """``import operator`` / ``from functools import reduce``: the expression that
    binds ``name`` from the harness's curated module; None for any other binding."""
    if isinstance(node, ast.Import):
        # ``import importlib.util`` binds ``importlib``
        alias = next((a for a in node.names if (a.asname or a.name.split(".")[0]) == name), None)
        module = None if alias is None else alias.name if alias.asname else alias.name.split(".")[0]
        if module in STDLIB_MODULES:
            return f"{STDLIB_FACTORY}({module!r})"
    if isinstance(node, ast.ImportFrom) and not node.level and node.module in STDLIB_MODULES:
        alias = next((a for a in node.names if (a.asname or a.name) == name), None)
        if alias is not None:
            return f"{STDLIB_FACTORY}({node.module!r}).{alias.name}"
    return None


KEPT_DECORATORS = {"staticmethod", "classmethod"}
Function = ast.FunctionDef | ast.AsyncFunctionDef
MAX_DEPTH = 12


class ProgramBuilder:
    """A flat program of copied definitions, in dependency order."""

    def __init__(
        self, tree: SourceTree, provided: Iterable[str], classes: bool = False, follow: Iterable[str] | None = None
    ) -> None:
        """``classes``: module-level classes of the copied code's own files are
        copied as classes to construct (``__init__`` and the methods it reaches);
        ``follow``: the only files imports are followed into (None: any)."""
        self.tree = tree
        self.classes = classes
        self.follow = None if follow is None else frozenset(follow)
        self.provided = {*provided, STDLIB_FACTORY}
        self.chunks: list[Chunk] = []
        self.gaps: dict[str, str] = {}  # free name -> label of the gap bound to it
        self.omitted: dict[str, str] = {}  # "Class.method" -> why it was left out
        self._origins: dict[str, str] = {}  # program name -> "file:qualname"
        self.copying_classes = 0  # while > 0, a class reached by name is copied as a class (by_name.py)
        self._gap_origins: dict[str, str] = {}  # gap name -> "file:name" of the class it stands for
        self.full_classes: set[str] = set()  # "file:name" of copied classes whose methods were asked for

    # -- module-level definitions -------------------------------------------

    def function(self, symbol: Symbol) -> str:
        """Copy a module-level function and its dependencies; its program name."""
        node = symbol.node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or "." in symbol.qualname:
            raise ExtractError(f"{symbol.qualname} in {symbol.file} is not a module-level function")
        self._add_function(symbol.parsed, node, symbol.file, 0)
        return node.name

    def method_function(self, symbol: Symbol, name: str) -> str:
        """Copy a method as a module-level function named ``name`` (its ``self`` the first
        argument): methods of one name from several classes side by side."""
        node = symbol.node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            raise ExtractError(f"{symbol.qualname} in {symbol.file} is not a method")
        self._add_function(symbol.parsed, node, symbol.file, 0, name)
        return name

    def expression_function(self, symbol_file: str, name: str, expression: ast.expr) -> str:
        """Wrap an expression of a module (e.g. a lambda's body) as ``def name(): return ...``."""
        parsed = self._parsed(symbol_file)
        definition = parse_python(f"def {name}():\n    return None").body[0]
        assert isinstance(definition, ast.FunctionDef) and isinstance(definition.body[0], ast.Return)
        definition.body[0].value = copy.deepcopy(expression)
        self._add_function(parsed, ast.fix_missing_locations(definition), symbol_file, 0)
        return name

    def _parsed(self, relpath: str) -> ParsedFile:
        parsed = parsed_or_none(self.tree, relpath)
        if parsed is None:
            raise ExtractError(f"{relpath} is not in this tree")
        return parsed

    def _add_function(self, parsed: ParsedFile, node: Function, file: str, depth: int, name: str | None = None) -> None:
        name = name or node.name
        origin = f"{file}:{node.name}" if name == node.name else f"{file}:{node.lineno}:{node.name}"
        if self._claim(name, origin):
            return
        definition = stripped(node, parsed.text)
        definition.name = name
        decorators = definition.decorator_list
        definition.decorator_list = []
        for decorator in decorators:
            if not neutral_decorator(parsed.tree, decorator):
                raise ExtractError(
                    f"{node.name} in {file} is decorated with @{ast.unparse(decorator)}, which behaviour cannot "
                    "reproduce"
                )
        refuse_dunders(definition, f"{node.name} in {file}")
        self._resolve_free_names(parsed, file, free_names(definition), depth)
        self.chunks.append(Chunk(name, ast.unparse(definition)))

    def add_chunk(self, name: str, source: str, replace: bool = False) -> None:
        """Add a definition; ``replace``: in place of the one of that name (a class copied again, whole)."""
        if replace:
            for index, chunk in enumerate(self.chunks):
                if chunk.name == name:
                    self.chunks[index] = Chunk(name, source)
                    return
        self.chunks.append(Chunk(name, source))

    def resolve_name(self, parsed: ParsedFile, file: str, name: str) -> None:
        """Copy what ``name`` is bound to at the top of ``file`` (or leave a gap under it)."""
        self._resolve(parsed, file, name, 0)

    def resolve_free(self, parsed: ParsedFile, file: str, names: set[str]) -> None:
        self._resolve_free_names(parsed, file, names, 0)

    def method_source(self, owner: Symbol, method: ast.FunctionDef) -> tuple[str, set[str]]:
        return self._method(owner, method)

    def claim(self, name: str, origin: str) -> bool:
        return self._claim(name, origin)

    def _claim(self, name: str, origin: str) -> bool:
        """True when ``name`` is already defined from the same place."""
        if name in self.gaps and self.copying_classes and self._gap_origins.get(name) == origin:
            del self.gaps[name]  # the class that was a gap is copied now: what Python has under that name
        if name in self.provided or name in self.gaps:
            raise ExtractError(f"{origin} would shadow the name {name!r} that another copied definition reads")
        known = self._origins.get(name)
        if known is None:
            self._origins[name] = origin
            return False
        if known != origin:
            raise ExtractError(f"two copied definitions are both named {name!r} ({known} and {origin})")
        return True

    def _resolve_free_names(self, parsed: ParsedFile, file: str, names: set[str], depth: int) -> None:
        for name in sorted(names):
            if name not in self.provided:
                self._resolve(parsed, file, name, depth + 1)

    def _resolve(self, parsed: ParsedFile, file: str, name: str, depth: int, imported: bool = False) -> None:
        if depth > MAX_DEPTH:
            raise ExtractError(f"the definitions {name!r} depends on go deeper than {MAX_DEPTH} levels")
        bindings = list(top_level_bindings(parsed.tree, name))
        if (
            len(bindings) > 1
            and not any(conditional for _, conditional in bindings)
            and len({stdlib_binding(node, name) for node, _ in bindings} - {None}) == 1
            and all(stdlib_binding(node, name) for node, _ in bindings)
        ):
            bindings = bindings[:1]  # ``import importlib.util`` and ``import importlib.metadata``: the same module
        if not bindings:
            star = self._star_import(parsed, file, name)
            if star is not None:  # a shim module re-exporting another with ``from m import *``
                self._resolve_imported(star[0], star[1], name, depth, f"{name} (imported from {star[1]} by *)")
                return
        if len(bindings) != 1:
            self._gap(name, f"{name} ({file})")
            return
        node, conditional = bindings[0]
        if conditional:
            self._gap(name, f"{name} ({file}, defined conditionally)")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._add_function(parsed, node, file, depth)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and _single_target(node):
            # a module constant, however it is computed: its statement runs in the child
            # (one that fails or reads a gap leaves a gap under its name)
            origin = f"{file}:{name}"
            if self._claim(name, origin):
                return
            refuse_dunders(node.value, f"{name} in {file}")
            self._resolve_free_names(
                parsed, file, free_names(node.value) if not is_static(node.value) else names_in(node.value), depth
            )
            self.chunks.append(Chunk(name, f"{name} = {ast.unparse(node.value)}"))
        elif stdlib_binding(node, name) is not None:
            origin = f"{file}:{name}"
            if not self._claim(name, origin):
                self.chunks.append(Chunk(name, f"{name} = {stdlib_binding(node, name)}"))
        elif isinstance(node, ast.ImportFrom):
            self._follow_import(node, name, file, depth)
        elif isinstance(node, ast.ClassDef) and self.copying_classes:
            from .by_name import class_copy  # by_name builds on this module

            # a class that cannot be copied is a gap (as a base: a foreign one)
            self._or_gap(
                lambda: class_copy(self, Symbol(file, node.name, node, parsed)),
                name,
                lambda exc: f"{name} ({file}): {exc}",
            )
        elif isinstance(node, ast.ClassDef) and self.classes and not imported:
            self.constructor(Symbol(file, node.name, node, parsed))
        else:
            # a class left a gap may be copied later by name (by_name.py): the same definition
            self._gap(name, f"{name} ({file})", f"{file}:{name}" if isinstance(node, ast.ClassDef) else None)

    def _star_import(self, parsed: ParsedFile, file: str, name: str) -> tuple[ParsedFile, str] | None:
        """The in-tree module (parsed, file) a module-level ``from m import *`` of ``file`` binds
        ``name`` from (the last such import that does, as Python binds it); None when none does."""
        for statement in reversed(parsed.tree.body):
            if not (isinstance(statement, ast.ImportFrom) and [a.name for a in statement.names] == ["*"]):
                continue
            module = absolute_module(statement, file)
            if not module or module.split(".")[0] != self.tree.package:
                continue
            base = module.replace(".", "/")
            for candidate in (f"{base}.py", f"{base}/__init__.py"):
                if self.follow is not None and candidate not in self.follow:
                    continue
                try:
                    found = self.tree.parsed(candidate)
                except SourceError:
                    return None
                if found is not None and _exports(found, name):
                    return found, candidate
        return None

    def _follow_import(self, node: ast.ImportFrom, name: str, file: str, depth: int) -> None:
        alias = next(a for a in node.names if (a.asname or a.name) == name)
        module = absolute_module(node, file)
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
                except SourceError:
                    break
                if parsed is not None:
                    self._resolve_imported(parsed, candidate, name, depth, f"{name} (imported from {module})")
                    return
        self._gap(name, f"{name} (imported from {module or 'a relative module'})")

    def _resolve_imported(self, parsed: ParsedFile, file: str, name: str, depth: int, label: str) -> None:
        """Follow an import into the tree. While constructing classes, a definition
        there that cannot be copied is a stand-in, like any name from outside."""
        if not self.classes:
            self._resolve(parsed, file, name, depth)
            return
        self._or_gap(lambda: self._resolve(parsed, file, name, depth, imported=True), name, lambda _: label)

    def _or_gap(self, copy: Callable[[], object], name: str, label: Callable[[ExtractError], str]) -> None:
        """Run ``copy``; where it cannot be done, nothing it added stays and ``name`` is a gap."""
        kept = (len(self.chunks), dict(self._origins), dict(self.gaps), dict(self.omitted))
        try:
            copy()
        except ExtractError as exc:
            del self.chunks[kept[0] :]
            self._origins, self.gaps, self.omitted = kept[1], kept[2], kept[3]
            self._gap(name, label(exc))

    def _gap(self, name: str, label: str, origin: str | None = None) -> None:
        if name in self.gaps:
            return
        if origin is not None:
            self._gap_origins[name] = origin
        if name in self._origins:
            raise ExtractError(f"{label} would be a gap, but another copied definition is named {name!r}")
        self.gaps.setdefault(name, label)

    # -- classes ---------------------------------------------------------------

    def constructor(self, symbol: Symbol) -> str:
        """Copy a module-level class to construct; its program name. Its bases
        (torch modules) are not copied: ``super().__init__()`` is dropped."""
        origin = f"{symbol.file}:{symbol.qualname}"
        node = symbol.node
        if not self._claim(node.name, origin):
            if not isinstance(node, ast.ClassDef):
                raise ExtractError(f"{symbol.qualname} in {symbol.file} is not a class")  # as class_body says
            # what the class name reaches: its constructor, and the class- and static methods called on it;
            # a dataclass is a record handed on, whose methods its holders call: all of them
            entries: tuple[str, ...] = ("__init__", *class_level_methods(node))
            if is_dataclass(node):
                entries += tuple(s.name for s in node.body if isinstance(s, ast.FunctionDef))
            body = self.class_body(symbol, entries, constructing=True)
            why = self.omitted.get(f"{node.name}.__init__")
            if why:
                raise ExtractError(why)
            if is_dataclass(node) and "__init__" not in {s.name for s in node.body if isinstance(s, ast.FunctionDef)}:
                body += dataclass_init(symbol)
            self.chunks.append(Chunk(node.name, f"{node.name} = _module_class({node.name!r}, {body!r})"))
        return node.name

    def class_body(
        self, symbol: Symbol, entries: Iterable[str], option_defaults: bool = False, constructing: bool = False
    ) -> str:
        """Source of a class body holding ``entries`` and every method they reach
        through ``self``. With ``option_defaults``, fields annotated as plain
        options (bool, int, float, str) keep their literal default: the launch
        default of a config option. Other fields (models, parallelism) are state
        behaviour does not know; they stay out, so reading them is a gap."""
        node = symbol.node
        if not isinstance(node, ast.ClassDef):
            raise ExtractError(f"{symbol.qualname} in {symbol.file} is not a class")
        methods = {s.name: s for s in node.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
        lines: list[str] = []
        for statement in node.body if option_defaults else ():
            default = option_default(statement)
            if default is not None:
                field_name, value = default
                lines.append(f"{field_name} = {ast.unparse(value)}")
        for statement in node.body if not constructing else ():
            # a stub's class constants built from literals alone (``OFFSET = 1``)
            if (
                isinstance(statement, ast.Assign)
                and all(isinstance(target, ast.Name) for target in statement.targets)
                and is_static(statement.value)
                and not names_in(statement.value)
            ):
                lines.append(ast.unparse(statement))
        for statement in node.body if constructing else ():
            # class attributes the constructor may read: a static one (``decoder_layer_cls
            # = Layer``) is copied, any other (a weights mapper) is a stand-in
            if (
                isinstance(statement, ast.AnnAssign)
                and isinstance(statement.target, ast.Name)
                and statement.value is not None
            ):
                statement = ast.Assign(targets=[statement.target], value=statement.value, lineno=statement.lineno)
            if isinstance(statement, ast.Assign) and all(isinstance(target, ast.Name) for target in statement.targets):
                if is_static(statement.value):
                    self._resolve_free_names(symbol.parsed, symbol.file, names_in(statement.value), 0)
                    lines.append(ast.unparse(statement))
                    continue
                for target in statement.targets:
                    if isinstance(target, ast.Name):  # each one is (above)
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

    def _method(self, owner: Symbol, method: Function, constructing: bool = False) -> tuple[str, set[str]]:
        where = f"{owner.qualname}.{method.name} in {owner.file}"
        definition = stripped(method, owner.parsed.text)
        if constructing:
            definition.body = [statement for statement in definition.body if not base_init(statement)] or [ast.Pass()]
        wrap = None
        kept: list[ast.expr] = []
        for decorator in definition.decorator_list:
            name = decorator.attr if isinstance(decorator, ast.Attribute) else getattr(decorator, "id", None)
            if name in PROPERTY_DECORATORS:
                wrap = "property"
            elif name in KEPT_DECORATORS:
                kept.append(ast.Name(id=name, ctx=ast.Load()))
            elif marker_decorator(owner.parsed.tree, decorator):
                continue  # @final, @abstractmethod: nothing a call computes changes
            else:
                raise ExtractError(
                    f"{where} is decorated with @{ast.unparse(decorator)}, which behaviour cannot reproduce"
                )
        definition.decorator_list = kept
        refuse_dunders(definition, where)
        self._resolve_free_names(owner.parsed, owner.file, free_names(definition), 0)
        source = ast.unparse(ast.fix_missing_locations(definition))
        if wrap:
            source += f"\n{method.name} = {wrap}({method.name})"
        self_name = method.args.args[0].arg if method.args.args else None
        reached = {
            n.attr
            for n in ast.walk(method)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == self_name
        }
        return source, reached

    def attribute_names(self) -> set[str]:
        """Every ``x.name`` the program reads (to know which methods a stub needs)."""
        names: set[str] = set()
        for chunk in self.chunks:
            names |= attribute_names(chunk.source)
        return names


def class_level_methods(node: ast.ClassDef) -> tuple[str, ...]:
    """The class's ``@classmethod`` and ``@staticmethod`` methods: reached through its name."""
    return tuple(
        statement.name
        for statement in node.body
        if isinstance(statement, ast.FunctionDef)
        and any(getattr(decorator, "id", None) in KEPT_DECORATORS for decorator in statement.decorator_list)
    )


def _exports(parsed: ParsedFile, name: str) -> bool:
    """Whether ``from <parsed> import *`` binds ``name``: bound at its top level, public, and
    in its ``__all__`` where that is a literal list."""
    exported = [
        statement.value
        for statement in parsed.tree.body
        if isinstance(statement, ast.Assign)
        and any(isinstance(target, ast.Name) and target.id == "__all__" for target in statement.targets)
    ]
    if exported and is_static(exported[-1]):
        listed = ast.literal_eval(exported[-1])
        if isinstance(listed, (list, tuple)) and name not in listed:
            return False
    elif name.startswith("_"):
        return False
    return bool(list(top_level_bindings(parsed.tree, name)))


def is_dataclass(node: ast.ClassDef) -> bool:
    for decorator in node.decorator_list:
        name = decorator.func if isinstance(decorator, ast.Call) else decorator
        if (isinstance(name, ast.Name) and name.id == "dataclass") or (
            isinstance(name, ast.Attribute)
            and name.attr == "dataclass"
            and getattr(name.value, "id", None) == "dataclasses"
        ):
            return True
    return False


def dataclass_init(symbol: Symbol) -> str:
    """The ``__init__`` the dataclass decorator writes: one parameter per field, in order."""
    parameters: list[str] = []
    assignments: list[str] = []
    for statement in symbol.node.body:
        if not (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)):
            continue
        annotation = ast.unparse(statement.annotation)
        if annotation.startswith(("ClassVar", "typing.ClassVar")):
            continue
        name, value = statement.target.id, statement.value
        if isinstance(value, ast.Call) and getattr(value.func, "id", getattr(value.func, "attr", None)) == "field":
            if any(keyword.arg == "default_factory" for keyword in value.keywords):
                raise ExtractError(
                    f"{symbol.qualname} in {symbol.file} has a field with a default_factory, which behaviour does "
                    "not build"
                )
            value = next((keyword.value for keyword in value.keywords if keyword.arg == "default"), None)
        if value is not None and not is_static(value):
            raise ExtractError(f"{symbol.qualname}.{name} in {symbol.file} has a default behaviour cannot copy")
        parameters.append(name if value is None else f"{name}={ast.unparse(value)}")
        assignments.append(f"    self.{name} = {name}")
    return "def __init__(self, " + ", ".join(parameters) + "):\n" + ("\n".join(assignments) or "    pass") + "\n"


def _single_target(node: ast.Assign | ast.AnnAssign) -> bool:
    return isinstance(node, ast.AnnAssign) or (len(node.targets) == 1 and isinstance(node.targets[0], ast.Name))
