"""What a constructor hands the construction of another class (the rule's
``[behaviour.handing]``: the scheduler and the KV cache manager, about the last
prefix-cache block), folded into one expression the child evaluates.

The constructor is read as Python runs it up to the callee's construction:
every assignment to a local or to ``self.<name>`` that the handed values depend
on, each under the ``if`` conditions it sits in, later ones over earlier ones.
The expression reads the deployment only through ``{deployment}`` (the
deployment config the constructor is given, with its tree's own properties);
what that leaves unknown is explored both ways in the child.
Anything else (a loop, a ``try``, a call with arguments) is a form behaviour
does not follow: the question is then unknown, with the reason.
"""

from __future__ import annotations

import ast
import dataclasses

from ..source import Symbol
from ..rules import Handing
from .definitions import ExtractError

DEPLOYMENT = "{deployment}"  # placeholder for the deployment config in the expression
COMPARISONS: dict[type, str] = {ast.Is: "is", ast.IsNot: "is not", ast.Eq: "==", ast.NotEq: "!="}


@dataclasses.dataclass(frozen=True)
class Handed:
    """``expression`` is true when the callee is told to change what it is about
    (any handed keyword true); ``attributes`` are the names it
    reads (the stubs must carry them); ``shown`` is what decides, for the report."""

    expression: str
    attributes: tuple[str, ...]
    shown: str


def handed(symbol: Symbol, handing: Handing) -> Handed:
    constructor = symbol.node
    if not isinstance(constructor, ast.FunctionDef):
        raise ExtractError(f"{symbol.qualname} in {symbol.file} is not a function")
    call = _callee_call(symbol, constructor, handing.callee)
    if call is None:
        raise ExtractError(f"{symbol.qualname} builds no {handing.callee}")
    values = _handed_values(call, handing.keywords)
    if handing.keywords[0] not in values:
        raise ExtractError(f"{symbol.qualname} hands no {handing.keywords[0]}= to {handing.callee}")
    first = constructor.args.args[1].arg if len(constructor.args.args) > 1 else None
    folder = _Folder(symbol.qualname, handing.callee, constructor, call.lineno, first)
    parts = [folder.expression(values[name]) for name in handing.keywords if name in values]
    expression = " or ".join(f"bool({part})" for part in parts)
    shown = " or ".join(f"{name}={ast.unparse(values[name])}" for name in handing.keywords if name in values)
    return Handed(expression, tuple(sorted(folder.attributes)), shown)


def _callee_call(symbol: Symbol, function: ast.FunctionDef, callee: str) -> ast.Call | None:
    """The last construction of the callee in code that runs (liveness.py: a
    construction under ``if False:`` or after a ``return`` is never what it is handed)."""
    calls = sorted(
        (node for node in ast.walk(function) if isinstance(node, ast.Call) and _callee(node.func) == callee),
        key=lambda node: (node.lineno, node.col_offset),
    )
    live = [call for call, alive in zip(calls, _alive(symbol, callee, len(calls)), strict=True) if alive]
    return live[-1] if live else None


def _alive(scheduler: Symbol, callee: str, count: int) -> list[bool]:
    """For each of the ``count`` constructions of ``callee`` in source order, whether it lies in live code."""
    import libcst as cst  # only when behaviour plans the scheduler (a cold check, which parses with it anyway)

    from ..structure.liveness import dead_nodes, module_constants
    from ..structure.patterns import children

    module, _ = scheduler.cst()
    dead = dead_nodes(module, module_constants(scheduler.parsed.tree))
    found: list[bool] = []
    stack: list[cst.CSTNode] = [module]
    while stack:  # depth first, in source order
        node = stack.pop()
        func = node.func if isinstance(node, cst.Call) else None
        name = (
            func.value if isinstance(func, cst.Name) else func.attr.value if isinstance(func, cst.Attribute) else None
        )
        if name == callee:
            found.append(id(node) not in dead)
        stack.extend(reversed(list(children(node))))
    if len(found) != count:
        raise ExtractError(
            f"{scheduler.qualname} in {scheduler.file}: the constructions of {callee} could not be told apart"
        )
    return found


def _handed_values(call: ast.Call, keywords: tuple[str, ...]) -> dict[str, ast.expr]:
    """The callee's keywords among ``keywords``, also through a ``**{...}`` dict literal."""
    values: dict[str, ast.expr] = {}
    for keyword in call.keywords:
        if keyword.arg in keywords:
            values[keyword.arg] = keyword.value
        elif keyword.arg is None and isinstance(keyword.value, ast.Dict):
            for key, value in zip(keyword.value.keys, keyword.value.values, strict=True):
                if isinstance(key, ast.Constant) and key.value in keywords:
                    values[key.value] = value
    return values


@dataclasses.dataclass
class _Assignment:
    target: str  # a local's name, or "self.<name>"
    value: ast.expr
    conditions: list[ast.expr]
    line: int


class _Folder:
    """Assignments of the constructor before ``line``, folded into expressions."""

    def __init__(
        self, where: str, callee: str, constructor: ast.FunctionDef, line: int, deployment: str | None
    ) -> None:
        self.where = where
        self.callee = callee
        self.deployment = deployment
        self.assignments: list[_Assignment] = []
        self.unfollowed: dict[str, int] = {}  # targets assigned where the order of execution is not followed
        self.attributes: set[str] = set()
        self._visit(constructor.body, [], line)

    def _visit(self, statements: list[ast.stmt], conditions: list[ast.expr], line: int) -> None:
        for statement in statements:
            if statement.lineno >= line:
                return
            target = _assigned(statement)
            if (
                target is not None
                and isinstance(statement, (ast.Assign, ast.AnnAssign))
                and statement.value is not None
            ):
                self.assignments.append(_Assignment(target, statement.value, conditions, statement.lineno))
            elif isinstance(statement, ast.If):
                self._visit(statement.body, [*conditions, statement.test], line)
                self._visit(statement.orelse, [*conditions, ast.UnaryOp(op=ast.Not(), operand=statement.test)], line)
            elif isinstance(statement, (ast.For, ast.While, ast.With, ast.Try, ast.AsyncFor, ast.AsyncWith)):
                for node in ast.walk(statement):
                    if isinstance(node, ast.stmt) and (inner := _assigned(node)) is not None:
                        self.unfollowed.setdefault(inner, node.lineno)

    def expression(self, node: ast.expr, before: int | None = None) -> str:
        if isinstance(node, ast.Constant) and isinstance(node.value, (bool, int, str, type(None))):
            return repr(node.value)
        if isinstance(node, ast.Name):
            if node.id == self.deployment and not self._assigned(node.id, before):
                return DEPLOYMENT
            return self._fold(node.id, before)
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                return self._fold(f"self.{node.attr}", before)
            self.attributes.add(node.attr)
            return f"{self.expression(node.value, before)}.{node.attr}"
        if isinstance(node, ast.Call) and not node.args and not node.keywords and isinstance(node.func, ast.Attribute):
            return f"{self.expression(node.func, before)}()"
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "bool"
            and len(node.args) == 1
        ):
            return f"bool({self.expression(node.args[0], before)})"
        if isinstance(node, ast.BoolOp):
            joiner = " and " if isinstance(node.op, ast.And) else " or "
            return "(" + joiner.join(self.expression(value, before) for value in node.values) + ")"
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return f"(not {self.expression(node.operand, before)})"
        if isinstance(node, ast.IfExp):
            return (
                f"({self.expression(node.body, before)} if {self.expression(node.test, before)} "
                f"else {self.expression(node.orelse, before)})"
            )
        if isinstance(node, ast.Compare) and all(type(op) in COMPARISONS for op in node.ops):
            parts = [self.expression(node.left, before)]
            for op, right in zip(node.ops, node.comparators, strict=True):
                parts += [COMPARISONS[type(op)], self.expression(right, before)]
            return "(" + " ".join(parts) + ")"
        raise ExtractError(
            f"{self.where} computes what it hands {self.callee} with {ast.unparse(node)}, "
            "a form behaviour does not follow"
        )

    def _assigned(self, target: str, before: int | None) -> bool:
        return any(item.target == target and (before is None or item.line < before) for item in self.assignments)

    def _fold(self, target: str, before: int | None) -> str:
        """The value ``target`` holds just before line ``before`` (None: at the manager's construction)."""
        if target in self.unfollowed and (before is None or self.unfollowed[target] < before):
            raise ExtractError(
                f"{self.where} sets {target} at line {self.unfollowed[target]} in a loop, with or try, "
                "a form behaviour does not follow"
            )
        value: str | None = None
        for item in self.assignments:
            if item.target != target or (before is not None and item.line >= before):
                continue
            new = self.expression(item.value, item.line)
            if not item.conditions:
                value = new
                continue
            test = " and ".join(self.expression(condition, item.line) for condition in item.conditions)
            if value is None:
                raise ExtractError(
                    f"{self.where} may leave {target} unset (it is set only under a condition at line {item.line})"
                )
            value = f"({new} if ({test}) else {value})"
        if value is None:
            raise ExtractError(f"{self.where} reads {target}, which it does not set before handing it on")
        return value


def _assigned(statement: ast.stmt) -> str | None:
    """The one local or ``self.<name>`` a plain assignment sets."""
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        return _target(statement.targets[0])
    if isinstance(statement, ast.AnnAssign):
        return _target(statement.target)
    return None


def _target(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return f"self.{node.attr}"
    return None


def _callee(func: ast.expr) -> str | None:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
