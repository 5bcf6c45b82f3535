"""Code read at an anchor that is not the code that runs: the definition is
replaced after it is made (issue 12)."""

from __future__ import annotations

import ast

from .source import Symbol

_NESTED = ("body", "orelse", "finalbody", "handlers")


def rebound_at(symbol: Symbol) -> int | None:
    """The first line after ``symbol``'s definition that rebinds its name: a
    module-level ``Cls.meth = ...`` / ``name = ...``, ``setattr(Cls, "meth", ...)``,
    or a later definition of the same name in the same scope; None if there is none."""
    parts = symbol.qualname.split(".")
    end = getattr(symbol.node, "end_lineno", symbol.node.lineno)
    lines = [line for line in _module_rebinds(symbol.parsed.tree, parts) if line > end]
    if len(parts) > 1:
        owner = symbol.parsed.symbols(".".join(parts[:-1]))
        for cls in owner:
            lines += [s.lineno for s in _statements(cls.node.body) if s.lineno > end and _binds(s, parts[-1])]
    return min(lines) if lines else None


def _statements(body):
    """Statements of a scope, through if/try/with blocks but not into defs."""
    for statement in body:
        yield statement
        if not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for field in _NESTED:
                for child in getattr(statement, field, ()) or ():
                    yield from _statements(child.body if isinstance(child, ast.excepthandler) else [child])


def _module_rebinds(module: ast.Module, parts: list[str]):
    for statement in _statements(module.body):
        if len(parts) == 1 and _binds(statement, parts[0]):
            yield statement.lineno
        targets = _targets(statement)
        if any(_dotted(target) == parts for target in targets):
            yield statement.lineno
        call = statement.value if isinstance(statement, ast.Expr) else None
        if (
            isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "setattr" and len(call.args) >= 2
            and _dotted(call.args[0]) == parts[:-1] and isinstance(call.args[1], ast.Constant) and call.args[1].value == parts[-1]
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
