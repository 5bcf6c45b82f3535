"""Where a model taps its capture, read from its own loops over its layers: the capture test
(``k in self.<list>``, or a layer's mark) before the layer's call or handed into it takes
the layer's input, after the call its output. Used by the capture-position question.

The test's left side is the position of the layer the loop is at: the loop's index (plus a
number), a layer attribute the rule names as the layer's own index (``layer.layer_id``), or
a name the loop binds to either, or to the unrolled depth of a model that runs its layers
more than once (``loop * count + i``: the first pass is the index itself). The list may be
read through a name the method binds to it (``captures = self.<list> or ()``)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ..rules import Capture
from .lineage import TreeClass, TreeClasses, is_self_attribute

CONTAINERS = {"set", "list", "tuple", "frozenset", "sorted"}  # calls that keep what ``in`` finds


def position(classes: TreeClasses, cls: TreeClass, attribute: str | None, capture: Capture) -> int | str | None:
    """The HF index a listed id is tapped at, less the id, by the class's loops over its layers
    (0: the layer's input, 1: its output); a reason when they disagree or cannot be read, None
    when no loop reads the capture. ``attribute``: the list the capture test reads; None: the mark."""
    positions: set[int | str] = set()
    for _owner, method in _naming(classes, cls, attribute, capture):
        aliases = _aliases(method, attribute) if attribute is not None else set()
        for loop, outer in _loops(method, frozenset()):
            found = _loop_position(loop, outer, _Test(attribute, aliases, capture))
            if found is not None:
                positions.add(found)
    if not positions:
        return None
    if len(positions) > 1:
        return f"{cls.name}'s loops over its layers tap the capture at different places"
    return positions.pop()


def names_capture(classes: TreeClasses, cls: TreeClass, attribute: str | None, capture: Capture) -> bool:
    """Whether any method of the class names the capture (the list ``attribute``, or the mark):
    one that names none taps nothing."""
    return next(_naming(classes, cls, attribute, capture), None) is not None


def _naming(
    classes: TreeClasses, cls: TreeClass, attribute: str | None, capture: Capture
) -> Iterator[tuple[TreeClass, ast.FunctionDef]]:
    """The class's methods whose text names the capture (a method that never names it has no capture test)."""
    needle = attribute if attribute is not None else capture.mark
    for owner, method in classes.run_methods(cls):
        if needle in owner.parsed.lines(method.lineno, method.end_lineno or method.lineno):
            yield owner, method


class _Test:
    """What a capture test looks like for one list (or the mark)."""

    def __init__(self, attribute: str | None, aliases: set[str], capture: Capture) -> None:
        self.attribute, self.aliases, self.capture = attribute, aliases, capture

    def __call__(self, node: ast.AST) -> bool:
        if self.attribute is not None:
            return (
                isinstance(node, ast.Compare)
                and len(node.ops) == 1
                and isinstance(node.ops[0], ast.In)
                and (
                    is_self_attribute(node.comparators[0], self.attribute)
                    or (isinstance(node.comparators[0], ast.Name) and node.comparators[0].id in self.aliases)
                )
            )
        if isinstance(node, ast.Attribute) and node.attr == self.capture.mark:
            return True
        return (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value == self.capture.mark
        )


def _aliases(method: ast.FunctionDef, attribute: str) -> set[str]:
    """Names the method binds to the list: ``self.<list>``, ``self.<list> or ()``, ``set(self.<list>)``."""
    names = set()
    for node in ast.walk(method):
        if isinstance(node, ast.Assign) and _is_the_list(node.value, attribute):
            names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
    return names


def _is_the_list(value: ast.expr, attribute: str) -> bool:
    if is_self_attribute(value, attribute):
        return True
    if isinstance(value, ast.BoolOp) and isinstance(value.op, ast.Or):  # ``self.<list> or ()``: empty when unset
        return is_self_attribute(value.values[0], attribute) and all(
            isinstance(other, (ast.Tuple, ast.List, ast.Set)) and not other.elts for other in value.values[1:]
        )
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id in CONTAINERS
        and len(value.args) == 1
        and not value.keywords
        and _is_the_list(value.args[0], attribute)
    )


def _loops(node: ast.AST, outer: frozenset[str]) -> Iterator[tuple[ast.For, frozenset[str]]]:
    """Every ``for`` in the method, with the names the loops around it bind."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.For):
            yield child, outer
            inner = outer | {name.id for name in ast.walk(child.target) if isinstance(name, ast.Name)}
            yield from _loops(child, inner)
        else:
            yield from _loops(child, outer)


def _own(loop: ast.For) -> Iterator[ast.AST]:
    """The loop's nodes outside the loops it holds (an inner loop over the layers is read on its own)."""
    stack: list[ast.AST] = [*loop.body, *loop.orelse]
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, ast.For):
            stack.extend(ast.iter_child_nodes(node))


def _loop_position(loop: ast.For, outer: frozenset[str], is_test: _Test) -> int | str | None:
    """The HF index a listed id ``k`` is tapped at, less ``k``: a test of layer ``k - c``'s
    position before its call or handed into it taps its input (``hidden_states[k - c]``),
    after the call its output (one more). Every test in the loop must agree."""
    own = list(_own(loop))
    tests = [node for node in own if isinstance(node, ast.expr) and is_test(node)]
    if not tests:
        return None
    index, layer = _roles(loop)
    bound = {  # names the loop binds, read once
        target.id: node.value
        for node in own
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    layers = layer | {name for name, value in bound.items() if isinstance(value, ast.Subscript)}
    calls = [node for node in own if isinstance(node, ast.Call) and _is_layer_call(node, layers)]
    if not tests or not calls:
        return None
    call = min(calls, key=lambda node: (node.lineno, node.col_offset))  # the first the loop makes
    handed = {id(inner) for each in calls for inner in ast.walk(each)}  # a call per branch may each take the tap
    found: set[int | str] = set()
    for test in tests:
        offset = _test_offset(test, index, layer, bound, outer, is_test.capture)
        if offset is None:
            return f"the capture test {ast.unparse(test)} is not the layer's position plus a number"
        end = call.end_lineno or call.lineno
        if id(test) in handed:
            found.add((0 if is_test.capture.handed == "input" else 1) - offset)
        elif test.lineno < call.lineno:
            found.add(-offset)
        elif test.lineno > end:
            found.add(1 - offset)
        else:
            return "the capture test and the layer's call share a line"
    if len(found) > 1:
        return "the capture tests of one loop tap different places"
    return found.pop()


def _roles(loop: ast.For) -> tuple[set[str], set[str]]:
    """(names holding the loop's index, names holding the layer itself)."""
    targets = loop.target.elts if isinstance(loop.target, ast.Tuple) else [loop.target]
    names = [target.id for target in targets if isinstance(target, ast.Name)]
    called = loop.iter.func.id if isinstance(loop.iter, ast.Call) and isinstance(loop.iter.func, ast.Name) else ""
    if called == "range":
        return set(names), set()
    if called == "enumerate" and len(names) == 2:
        return {names[0]}, {names[1]}
    return set(), set(names)


def _test_offset(
    test: ast.expr,
    index: set[str],
    layer: set[str],
    bound: dict[str, ast.expr],
    outer: frozenset[str],
    capture: Capture,
) -> int | None:
    """``c`` in ``<position> + c in self.<list>`` (0 for a mark, which is the layer's own)."""
    if not isinstance(test, ast.Compare):
        return 0
    left = test.left
    if isinstance(left, ast.Name) and left.id in bound and left.id not in index:
        left = bound[left.id]  # a name the loop binds, read once
    return _offset(left, index, layer, outer, capture)


def _offset(node: ast.expr, index: set[str], layer: set[str], outer: frozenset[str], capture: Capture) -> int | None:
    if isinstance(node, ast.Name) and node.id in index:
        return 0
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in layer
        and node.attr in capture.indexed
    ):
        return 0
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):  # ``loop * count + i``, either way round
        if _is_pass_depth(node.left, outer):
            return _offset(node.right, index, layer, outer, capture)
        if _is_pass_depth(node.right, outer):
            return _offset(node.left, index, layer, outer, capture)
    if (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, (ast.Add, ast.Sub))
        and isinstance(node.right, ast.Constant)
        and type(node.right.value) is int
    ):
        inner = _offset(node.left, index, layer, outer, capture)
        if inner is None:
            return None
        return inner + node.right.value if isinstance(node.op, ast.Add) else inner - node.right.value
    return None


def _is_pass_depth(node: ast.expr, outer: frozenset[str]) -> bool:
    """``loop * count``: how deep the pass an enclosing loop is at starts (0 on the first)."""
    return (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Mult)
        and any(isinstance(side, ast.Name) and side.id in outer for side in (node.left, node.right))
    )


def _is_layer_call(node: ast.Call, layers: set[str]) -> bool:
    """A call of a layer: ``self.layers[i](...)``, of a name bound to one (``layers``), or its ``forward``."""
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr == "forward":
        func = func.value
    return isinstance(func, ast.Subscript) or (isinstance(func, ast.Name) and func.id in layers)
