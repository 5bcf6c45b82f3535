"""Code that never runs, told from its form alone: structure reads live code only.

Dead code: the branch a constant test never takes (``if False:``, ``if 0:``,
``while False:``, ``if TYPE_CHECKING:``, ``if not __debug__:``, the untaken arm
of ``a if True else b``), the right operand an ``and``/``or`` never evaluates
(``False and x``), the body of a loop over an empty literal, and every
statement after one that never falls through (``return``, ``raise``,
``continue``, ``break``, an ``if`` whose every branch ends, a ``try`` whose
body and handlers all end, ``while True:`` without its own ``break``), a
function defined inside another, undecorated, whose name is never used again,
and an undecorated ``def`` that a later undecorated ``def`` of the same name in
the same block replaces, nothing between them naming it (``shadowed_defs``).
``__debug__`` is true as Python runs without ``-O``. A name is a constant only
when ``constants`` says so (``module_constants``: ``TYPE_CHECKING`` imported from
``typing`` and never bound otherwise); whether another module calls a function is not
asked.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, cast

import libcst as cst

from .patterns import children, subtree_ids
from ..source import literal_value

_UNKNOWN = object()  # a value that is not known without running the code
_KEYWORDS: dict[str, object] = {"True": True, "False": False, "None": None, "__debug__": True}
_TYPING = ("typing", "typing_extensions")
_COMPARE: dict[type, Callable[[Any, Any], object]] = {
    cst.Equal: operator.eq,
    cst.NotEqual: operator.ne,
    cst.LessThan: operator.lt,
    cst.LessThanEqual: operator.le,
    cst.GreaterThan: operator.gt,
    cst.GreaterThanEqual: operator.ge,
    cst.Is: operator.is_,
    cst.IsNot: operator.is_not,
}
_ENDS = (cst.Return, cst.Raise, cst.Continue, cst.Break)
_BLOCKS = (cst.Module, cst.IndentedBlock, cst.SimpleStatementLine, cst.SimpleStatementSuite)  # sequences of statements
_DECIDING = frozenset({*_BLOCKS, cst.If, cst.IfExp, cst.While, cst.For, cst.BooleanOperation})  # may hold dead parts
_BY_NAME = ("locals", "vars", "eval", "exec")  # ways to reach a function without its name


def dead_nodes(tree: cst.CSTNode, constants: Mapping[str, object] | None = None) -> set[int]:
    """``id()`` of every node of ``tree`` that lies in code that never runs."""
    known = {**_KEYWORDS, **(constants or {})}
    dead: set[int] = set()
    mentions: dict[str, int] = {}  # names used in live code (a function's own name once)
    nested: list[cst.FunctionDef] = []  # undecorated functions defined in a function's own body
    stack = [tree]
    while stack:
        node = stack.pop()
        kind = type(node)  # exact types: isinstance on libcst's abstract bases is slow
        if kind is cst.Name:
            name = cast(cst.Name, node).value
            mentions[name] = mentions.get(name, 0) + 1
        elif kind is cst.FunctionDef:
            body = cast(cst.FunctionDef, node).body.body
            nested += [
                cast(cst.FunctionDef, item)
                for item in body
                if type(item) is cst.FunctionDef and not cast(cst.FunctionDef, item).decorators
            ]
        elif kind in _DECIDING:
            for part in _dead_parts(node, known):
                dead |= subtree_ids(part)
            if kind is cst.Module or kind is cst.IndentedBlock:
                for shadowed, _ in shadowed_defs(cast("cst.Module | cst.IndentedBlock", node).body):
                    dead |= subtree_ids(shadowed)
        stack.extend(child for child in children(node) if id(child) not in dead)
    if not any(name in mentions for name in _BY_NAME):
        for function in nested:
            if mentions.get(function.name.value, 0) <= 1:  # its own name only: nothing can call it
                dead |= subtree_ids(function)
    return dead


def shadowed_defs(body: Sequence[cst.CSTNode]) -> Iterator[tuple[cst.FunctionDef, cst.FunctionDef]]:
    """(def, the later def that replaces it) in one block: an undecorated def followed in the
    same block by an undecorated def of the same name, no statement between them naming it.
    Python binds the name to the last one, so the first one's body never runs (a decorator
    could keep either, a statement between could use the first: then nothing is said)."""
    for index, statement in enumerate(body):
        if type(statement) is not cst.FunctionDef or cast(cst.FunctionDef, statement).decorators:
            continue
        name = cast(cst.FunctionDef, statement).name.value
        for later in body[index + 1 :]:
            if type(later) is cst.FunctionDef and cast(cst.FunctionDef, later).name.value == name:
                if not cast(cst.FunctionDef, later).decorators:
                    yield cast(cst.FunctionDef, statement), cast(cst.FunctionDef, later)
                break
            if _names(later, name):
                break


def _names(node: cst.CSTNode, name: str) -> bool:
    """Whether ``name`` appears in ``node`` as a name (a binding, a use, an attribute)."""
    stack = [node]
    while stack:
        item = stack.pop()
        if type(item) is cst.Name and cast(cst.Name, item).value == name:
            return True
        stack.extend(children(item))
    return False


def module_constants(module: ast.Module) -> dict[str, object]:
    """Names the module binds to a known constant: ``TYPE_CHECKING`` (or ``typing.TYPE_CHECKING``)
    when it comes from ``typing`` and nothing else in the module binds the name."""
    imported: set[str] = set()
    rebound: set[str] = set()
    for node in ast.walk(module):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if node.module in _TYPING and alias.name == "TYPE_CHECKING" and alias.asname is None:
                    imported.add("TYPE_CHECKING")
                else:
                    rebound.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in _TYPING and alias.asname is None:
                    imported.add(alias.name)
                else:
                    rebound.add((alias.asname or alias.name).split(".")[0])
        else:
            rebound.update(_bound_names(node))
    constants: dict[str, object] = {}
    if "TYPE_CHECKING" in imported - rebound:
        constants["TYPE_CHECKING"] = False
    for name in (imported - rebound) & set(_TYPING):
        constants[f"{name}.TYPE_CHECKING"] = False
    return constants


def _bound_names(node: ast.AST) -> Iterator[str]:
    """Names a node binds other than by an import (assignment, def, parameter, global...)."""
    if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
        yield node.id
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        yield node.name
    elif isinstance(node, ast.arg):
        yield node.arg
    elif isinstance(node, (ast.Global, ast.Nonlocal)):
        yield from node.names
    elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
        yield node.name
    elif isinstance(node, ast.MatchMapping) and node.rest:
        yield node.rest


def _dead_parts(node: cst.CSTNode, known: Mapping[str, object]) -> Iterator[cst.CSTNode]:
    """The parts of ``node`` itself that never run (its children, not deeper)."""
    if isinstance(node, _BLOCKS):
        yield from _after_end(node.body, known)
    elif isinstance(node, (cst.If, cst.IfExp, cst.While)):  # a true loop test never lets its else run
        truth = _truth(node.test, known)
        if truth is False:
            yield node.body
        elif truth is True and node.orelse is not None:
            yield node.orelse
    elif isinstance(node, cst.For) and _truth(node.iter, known) is False:
        yield node.body
    elif isinstance(node, cst.BooleanOperation):
        truth = _truth(node.left, known)
        if (truth is False and isinstance(node.operator, cst.And)) or (
            truth is True and isinstance(node.operator, cst.Or)
        ):
            yield node.right


def _after_end(body: Sequence[cst.CSTNode], known: Mapping[str, object]) -> Iterator[cst.CSTNode]:
    for index, statement in enumerate(body[:-1]):  # the last one has nothing after it
        if _ends(statement, known):
            yield from body[index + 1 :]
            return


def _ends(node: cst.CSTNode | None, known: Mapping[str, object]) -> bool:
    """The statement (or block) never falls through to the next one."""
    if node is None:
        return False
    if isinstance(node, _ENDS):
        return True
    if isinstance(node, (cst.SimpleStatementLine, cst.SimpleStatementSuite, cst.IndentedBlock)):
        return any(_ends(item, known) for item in node.body)
    if isinstance(node, (cst.Else, cst.Finally)):
        return _ends(node.body, known)
    if isinstance(node, cst.If):
        truth = _truth(node.test, known)
        if truth is True:
            return _ends(node.body, known)
        if truth is False:
            return _ends(node.orelse, known)
        return _ends(node.body, known) and _ends(node.orelse, known)
    if isinstance(node, cst.While):
        return _truth(node.test, known) is True and not _breaks(node.body)
    if isinstance(node, (cst.Try, cst.TryStar)):
        if _ends(node.finalbody, known):
            return True
        handled = all(_ends(handler.body, known) for handler in node.handlers)
        return handled and (_ends(node.body, known) or _ends(node.orelse, known))
    return False


def _breaks(block: cst.CSTNode) -> bool:
    """A ``break`` in ``block`` that leaves the loop holding it (not one of an inner loop)."""
    stack = [block]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Break):
            return True
        if not isinstance(node, (cst.For, cst.While, cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            stack.extend(children(node))
        elif isinstance(node, (cst.For, cst.While)) and node.orelse is not None:
            stack.append(node.orelse)  # a loop's else belongs to the enclosing loop
    return False


def _truth(node: cst.BaseExpression, known: Mapping[str, object]) -> bool | None:
    """The truth of an expression known without running it, else None."""
    value = _value(node, known)
    if value is not _UNKNOWN:
        return bool(value)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
        inner = _truth(node.expression, known)
        return None if inner is None else not inner
    if isinstance(node, cst.BooleanOperation):
        left, right = _truth(node.left, known), _truth(node.right, known)
        decides = isinstance(node.operator, cst.Or)  # or: a true side decides; and: a false side does
        if decides in (left, right):
            return decides
        return None if None in (left, right) else not decides
    if isinstance(node, (cst.Tuple, cst.List, cst.Set, cst.Dict)):
        elements = node.elements
        if any(isinstance(item, (cst.StarredElement, cst.StarredDictElement)) for item in elements):
            return None
        return bool(elements)
    return None


def _value(node: cst.BaseExpression, known: Mapping[str, object]) -> object:
    """The value of a constant expression (literals and known names), else ``_UNKNOWN``."""
    if isinstance(node, (cst.Name, cst.Attribute)):
        return known.get(_dotted(node) or "", _UNKNOWN)
    if isinstance(node, (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString)):
        value = literal_value(node.value)
        return _UNKNOWN if value is None else value
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, (cst.Not, cst.Minus)):
        inner = _value(node.expression, known)
        if inner is _UNKNOWN or not isinstance(inner, (bool, int, float, complex, str, bytes, type(None))):
            return _UNKNOWN
        if isinstance(node.operator, cst.Not):
            return not inner
        return -inner if isinstance(inner, (int, float, complex)) else _UNKNOWN
    if isinstance(node, cst.Comparison):
        left = _value(node.left, known)
        for target in node.comparisons:
            right = _value(target.comparator, known)
            compare = _COMPARE.get(type(target.operator))
            if compare is None or _UNKNOWN in (left, right):
                return _UNKNOWN
            if isinstance(target.operator, (cst.Is, cst.IsNot)) and not all(
                isinstance(side, (bool, type(None))) for side in (left, right)
            ):
                return _UNKNOWN  # identity of numbers and strings is up to the interpreter
            try:
                holds = compare(left, right)
            except TypeError:
                return _UNKNOWN
            if not holds:
                return False
            left = right
        return True
    return _UNKNOWN


def _dotted(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = _dotted(node.value)
        return None if head is None else f"{head}.{node.attr.value}"
    return None
