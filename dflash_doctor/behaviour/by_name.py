"""Definitions the tree's code looks up by their module's name at run time
(``importlib.import_module(module)`` then ``getattr``, as a registry of qualified
names does): sent to the child when it asks for them.

The child asks with the module's name (does the module exist?) and then with
each name it reads from it; the parent answers from the tree, copying the
definition like any other (a class is copied as a class, its in-tree bases and
attributes with it), and the call runs again. ``ByName.table`` is what the
child has been told: module -> {name: program name, or None when the module does
not define it}; a module mapped to None does not exist, one mapped to a string
could not be read (a file the collector did not send): importing it is a gap.
"""

from __future__ import annotations

import ast
import textwrap
from typing import TYPE_CHECKING, Any

from ..isolation import sandbox
from ..isolation.session import Call, Outcome
from ..source import SourceError, Symbol
from .definitions import ExtractError, marker_decorator, names_in, neutral_decorator, refuse_dunders, top_level_bindings

if TYPE_CHECKING:
    from .computed import RunProgram
    from .program import ProgramBuilder

# How many times a call runs again for definitions it looked up by name.
MAX_ROUNDS = 16
OMITTED = "_omitted"  # the child's descriptor for a class attribute that could not be copied
FOREIGN = "_foreign_base"  # the child's base class for a base from outside the tree
META = "_copied_meta"  # the child's metaclass of copied classes
LAZY = "_lazy_method"  # the child's placeholder for a method not sent yet


class ByName:
    """What the child may look up by module name, grown round by round."""

    def __init__(self, builder: ProgramBuilder) -> None:
        self.builder = builder
        self.table: dict[str, dict[str, str | None] | str | None] = {}
        self._gaps = 0

    def answer(self, module: str, name: str | None) -> bool:
        """Add what the child asked for (``name`` None: the module itself); False when
        it was answered before (asking again would not change the run). What the child
        asks is the tree's code speaking: a name that is not dotted identifiers is refused."""
        if not _dotted_identifiers(module) or (name is not None and not _dotted_identifiers(name)):
            return False
        if name is None:
            if module in self.table:
                return False
            try:
                self.table[module] = {} if _module_file(self.builder, module) is not None else None
            except SourceError as exc:  # a file the collector did not send is not an absent one
                self.table[module] = f"the module {module}: {exc}"
            return True
        if "." in name:  # a method of a copied class was reached: the class gets its methods
            return self._methods(module, name.split(".", 1)[0])
        entries = self.table.get(module)
        if not isinstance(entries, dict) or name in entries:
            return False
        entries[name] = self._definition(module, name)
        return True

    def _methods(self, module: str, class_name: str) -> bool:
        builder = self.builder
        found = _module_file(builder, module)
        if found is None:
            return False
        file, parsed = found
        origin = f"{file}:{class_name}"
        if origin in builder.full_classes:
            return False
        bindings = list(top_level_bindings(parsed.tree, class_name))
        if len(bindings) != 1 or not isinstance(bindings[0][0], ast.ClassDef):
            return False
        builder.full_classes.add(origin)
        builder.copying_classes += 1
        try:
            class_copy(builder, Symbol(file, class_name, bindings[0][0], parsed), rebuild=True)
        except ExtractError:
            return False  # it was copied before: the same copy stands, its methods stay gaps
        finally:
            builder.copying_classes -= 1
        return True

    def _definition(self, module: str, name: str) -> str | None:
        builder = self.builder
        found = _module_file(builder, module)
        if found is None:
            return None
        file, parsed = found
        bindings = list(top_level_bindings(parsed.tree, name))
        if not bindings and not _may_define_more(parsed.tree):
            return None
        builder.copying_classes += 1
        try:
            if len(bindings) == 1 and isinstance(bindings[0][0], ast.ClassDef) and not bindings[0][1]:
                return class_copy(builder, Symbol(file, name, bindings[0][0], parsed))
            builder.resolve_name(parsed, file, name)
            return name
        except ExtractError as exc:
            self._gaps += 1
            gap = f"_by_name_gap_{self._gaps}"
            builder.gaps[gap] = f"{module}.{name}: {exc}"
            return gap
        finally:
            builder.copying_classes -= 1


def run_by_name(
    builder: ProgramBuilder, run: RunProgram, calls: list[Call], data: dict[str, Any], fixed: dict[str, Any]
) -> dict[str, Outcome]:
    """Run ``calls`` on the builder's program; a call that looked up a definition by its
    module's name runs again once it is sent (at most MAX_ROUNDS times). ``fixed``:
    globals bound besides the program's gaps."""
    names = ByName(builder)
    outcomes: dict[str, Outcome] = {}
    pending = list(calls)
    for _ in range(MAX_ROUNDS):
        globals_: dict[str, Any] = {name: sandbox.gap(label) for name, label in builder.gaps.items()}
        globals_.update(fixed)
        globals_["_tree_modules"] = {"$tree_modules": names.table, "package": builder.tree.package}
        globals_[OMITTED] = {"$omitted": True}
        globals_[FOREIGN] = {"$foreign_base": True}
        globals_[META] = {"$copied_meta": True}
        globals_[LAZY] = {"$lazy_method": True}
        outcomes.update(run(builder.chunks, pending, data, globals_))
        answered = [names.answer(*outcomes[call.id].needs) for call in pending if outcomes[call.id].needs]  # type: ignore[misc]
        if not any(answered):
            break
        pending = [call for call in pending if outcomes[call.id].needs]
    return outcomes


def _dotted_identifiers(text: str) -> bool:
    """``vllm.a.b``, ``Class.method``: never a path (``vllm.x/../../y``) into another directory."""
    return bool(text) and len(text) <= 512 and all(part.isidentifier() for part in text.split("."))


def _module_file(builder: ProgramBuilder, module: str) -> tuple[str, Any] | None:
    if module.split(".")[0] != builder.tree.package:
        return None
    base = module.replace(".", "/")
    for candidate in (f"{base}.py", f"{base}/__init__.py"):  # SourceError: it could not be read
        parsed = builder.tree.parsed(candidate)
        if parsed is not None:
            return candidate, parsed
    return None


def _may_define_more(module: ast.Module) -> bool:
    """A module-level ``__getattr__`` or a star import may supply any name."""
    return any(
        (isinstance(node, ast.FunctionDef) and node.name == "__getattr__")
        or (isinstance(node, ast.ImportFrom) and any(alias.name == "*" for alias in node.names))
        for node in module.body
    )


def class_copy(builder: ProgramBuilder, symbol: Symbol, rebuild: bool = False) -> str:
    """Copy a module-level class as a class: its bases (in-tree ones copied too),
    class attributes, dunder methods, and its other methods once one of them is
    reached (until then each is a placeholder that asks for them: most classes a
    route passes through are only named). A method or attribute that cannot be
    copied is a gap when it is read; the class itself is refused for a decorator or
    metaclass behaviour cannot reproduce, or a body statement of another kind.
    ``rebuild``: the class was copied before; its copy is replaced, with its methods."""
    node = symbol.node
    if not isinstance(node, ast.ClassDef):
        raise ExtractError(f"{symbol.qualname} in {symbol.file} is not a class")
    where = f"{node.name} in {symbol.file}"
    origin = f"{symbol.file}:{symbol.qualname}"
    if builder.claim(node.name, origin) and not rebuild:
        return node.name
    for decorator in node.decorator_list:
        if not neutral_decorator(symbol.parsed.tree, decorator) and not marker_decorator(symbol.parsed.tree, decorator):
            raise ExtractError(f"{where} is decorated with @{ast.unparse(decorator)}, which behaviour cannot reproduce")
    if node.keywords:
        raise ExtractError(f"{where} is built with {ast.unparse(node.keywords[0])}, which behaviour cannot reproduce")
    bases = []
    for base in node.bases:
        refuse_dunders(base, where)
        builder.resolve_free(symbol.parsed, symbol.file, names_in(base))
        text = ast.unparse(base)
        # a base from outside the tree (torch's nn.Module) knows nothing: what the copied classes
        # do not define may be its own, so reading it is a gap
        bases.append(f"{FOREIGN}({text!r})" if names_in(base) & set(builder.gaps) else text)
    full = origin in builder.full_classes
    lines = [_statement(builder, symbol, statement, full) for statement in node.body]
    body = "\n".join(line for line in lines if line) or "pass"
    header = ", ".join([*bases, f"metaclass={META}"])
    dotted = f"{module_name(symbol.file)}.{symbol.qualname}"
    builder.add_chunk(
        node.name,
        f"class {node.name}({header}):\n{textwrap.indent(body, '    ')}\n{node.name}._qualified_name = {dotted!r}\n",
        replace=rebuild,
    )
    return node.name


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def module_name(file: str) -> str:
    """``vllm/a/b.py`` -> ``vllm.a.b``; a package's ``__init__.py`` is the package."""
    return file.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def _statement(builder: ProgramBuilder, owner: Symbol, statement: ast.stmt, full: bool) -> str:
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
        return ""  # a docstring
    if isinstance(statement, ast.AsyncFunctionDef):
        why = f"{statement.name} is a coroutine function, which behaviour does not run"
        return f"{statement.name} = {OMITTED}({why!r})"
    if isinstance(statement, ast.FunctionDef) and not full and not _is_dunder(statement.name):
        return f"{statement.name} = {LAZY}({module_name(owner.file)!r}, {f'{owner.qualname}.{statement.name}'!r})"
    if isinstance(statement, ast.FunctionDef):
        try:
            source, _ = builder.method_source(owner, statement)
            return source
        except ExtractError as exc:
            return f"{statement.name} = {OMITTED}({str(exc)!r})"
    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
        if statement.value is None:
            return ""  # an annotation alone binds nothing
        statement = ast.Assign(targets=[statement.target], value=statement.value, lineno=statement.lineno)
    if isinstance(statement, ast.Assign) and all(isinstance(target, ast.Name) for target in statement.targets):
        try:
            refuse_dunders(statement.value, f"{owner.qualname} in {owner.file}")
        except ExtractError as exc:
            return "\n".join(f"{target.id} = {OMITTED}({str(exc)!r})" for target in statement.targets)  # type: ignore[attr-defined]
        builder.resolve_free(owner.parsed, owner.file, names_in(statement.value))
        unknown = sorted(names_in(statement.value) & set(builder.gaps))
        if unknown:  # reading it is a gap, not the class's definition
            why = f"{owner.qualname}.{ast.unparse(statement.targets[0])} reads {builder.gaps[unknown[0]]}"
            return "\n".join(f"{target.id} = {OMITTED}({why!r})" for target in statement.targets)  # type: ignore[attr-defined]
        return ast.unparse(statement)
    if isinstance(statement, ast.Pass):
        return ""
    if isinstance(statement, ast.ClassDef):
        return f"{statement.name} = {OMITTED}({f'the nested class {statement.name} is not copied'!r})"
    raise ExtractError(
        f"{owner.qualname} in {owner.file} has a class-body statement behaviour does not copy (line {statement.lineno})"
    )
