"""Code read at an anchor that is not the code that runs: the definition is
replaced after it is made (issue 12)."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator

from ..source import Symbol

_NESTED = ("body", "orelse", "finalbody", "handlers")


def rebound_at(symbol: Symbol) -> int | None:
    """The first line after ``symbol``'s definition that rebinds its name: a
    module-level ``Cls.meth = ...`` / ``name = ...``, ``setattr(Cls, "meth", ...)``
    (or with a name computed at run time), a later definition of the same name in the
    same scope, or, for a method, a class decorator or a module-level call that hands
    the class to a function of the module that may set it; None if there is none."""
    parts = symbol.qualname.split(".")
    end = getattr(symbol.node, "end_lineno", symbol.line)
    module = symbol.parsed.tree
    lines = [line for line in _module_rebinds(module, parts) if line > end]
    if len(parts) > 1:
        owner = symbol.parsed.symbols(".".join(parts[:-1]))
        for cls in owner:
            node = cls.node
            assert isinstance(
                node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
            )  # the defs source.symbols finds
            lines += [s.lineno for s in _statements(node.body) if s.lineno > end and _binds(s, parts[-1])]
            lines += [d.lineno for d in node.decorator_list if _may_set(module, _callee(d), parts[-1])]
        lines += [
            line
            for line, callee in _module_calls_with(module, parts[:-1])
            if line > end and _may_set(module, callee, parts[-1])
        ]
    return min(lines) if lines else None


def shadowed_at(symbol: Symbol) -> int | None:
    """The line of the later def that replaces ``symbol`` for certain: the next statement of
    its own class body (or module) binding its name is an undecorated def, ``symbol`` is
    undecorated too, and no statement between them names it (Python keeps the last def,
    so ``symbol``'s body never runs; ``liveness.shadowed_defs`` on libcst trees). None otherwise."""
    node = symbol.node
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.decorator_list:
        return None
    parts = symbol.qualname.split(".")
    if len(parts) == 1:
        bodies = [symbol.parsed.tree.body]
    else:
        owners = [owner.node for owner in symbol.parsed.symbols(".".join(parts[:-1]))]
        bodies = [owner.body for owner in owners if isinstance(owner, ast.ClassDef)]
    for body in bodies:
        if node not in body:
            continue
        for later in body[body.index(node) + 1 :]:
            if isinstance(later, (ast.FunctionDef, ast.AsyncFunctionDef)) and later.name == node.name:
                return None if later.decorator_list else later.lineno
            if any(_named(item, node.name) for item in ast.walk(later)):
                return None
    return None


def _named(node: ast.AST, name: str) -> bool:
    if isinstance(node, ast.Name):
        return node.id == name
    if isinstance(node, ast.Attribute):
        return node.attr == name
    return _binds(node, name) if isinstance(node, ast.stmt) else False


def rebound_in(init: ast.Module, parts: list[str]) -> int | None:
    """The first line of a package's ``__init__.py`` (run before the module is used)
    that rebinds ``parts`` (``Cls.meth``) of a class it imports; None if there is none."""
    lines = [line for line in _module_rebinds(init, parts) if len(parts) > 1]
    lines += [line for line, callee in _module_calls_with(init, parts[:-1]) if _may_set(init, callee, parts[-1])]
    return min(lines) if lines else None


def _callee(node: ast.expr) -> str | None:
    node = node.func if isinstance(node, ast.Call) else node
    return node.id if isinstance(node, ast.Name) else None


def _module_calls_with(module: ast.Module, owner: list[str]) -> Iterator[tuple[int, str | None]]:
    """(line, callee) of module-level calls that hand the class ``owner`` to a function."""
    for statement in _statements(module.body):
        for node in (
            ast.walk(statement)
            if not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            else ()
        ):
            if isinstance(node, ast.Call) and any(_dotted(arg) == owner for arg in node.args):
                yield node.lineno, _callee(node)


def _may_set(module: ast.Module, callee: str | None, attribute: str) -> bool:
    """Whether the module's function ``callee`` (a decorator, an import-time helper) may set
    ``attribute`` on what it is handed: it assigns that attribute of anything, or calls
    ``setattr`` with that name or one computed at run time. A function from elsewhere is
    not read here: it counts as setting nothing."""
    functions = [s for s in module.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == callee]
    for function in functions:
        for node in ast.walk(function):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and any(
                isinstance(target, ast.Attribute) and target.attr == attribute for target in _targets(node)
            ):
                return True
            if isinstance(node, ast.Call) and _callee(node) == "setattr" and len(node.args) >= 2:
                name = node.args[1]
                if not isinstance(name, ast.Constant) or name.value == attribute:
                    return True
    return False


def _statements(body: Iterable[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements of a scope, through if/try/with blocks but not into defs."""
    for statement in body:
        yield statement
        if not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for field in _NESTED:
                for child in getattr(statement, field, ()) or ():
                    yield from _statements(child.body if isinstance(child, ast.ExceptHandler) else [child])


def _module_rebinds(module: ast.Module, parts: list[str]) -> Iterator[int]:
    for statement in _statements(module.body):
        if len(parts) == 1 and _binds(statement, parts[0]):
            yield statement.lineno
        targets = _targets(statement)
        if any(_dotted(target) == parts for target in targets):
            yield statement.lineno
        call = statement.value if isinstance(statement, ast.Expr) else None
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id == "setattr"
            and len(call.args) >= 2
            and _dotted(call.args[0]) == parts[:-1]
            and (
                not isinstance(call.args[1], ast.Constant) or call.args[1].value == parts[-1]
            )  # a computed name may be it
        ):
            yield statement.lineno


def _binds(statement: ast.stmt, name: str) -> bool:
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return statement.name == name
    return any(isinstance(target, ast.Name) and target.id == name for target in _targets(statement))


def _targets(statement: ast.stmt) -> list[ast.expr]:
    if isinstance(statement, ast.Assign):
        return [t for target in statement.targets for t in (target.elts if isinstance(target, ast.Tuple) else [target])]
    if isinstance(statement, (ast.AnnAssign, ast.AugAssign)):
        return [statement.target]
    return []


def _dotted(node: ast.expr) -> list[str] | None:
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(names)]
