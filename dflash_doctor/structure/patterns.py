"""Code patterns with metavariables, matched structurally against libcst trees.

A pattern is Python source in which ``$NAME`` stands for any expression
(bound consistently: two ``$I`` must be the same code) and ``...`` stands for
any expression, any block, or any run of arguments, elements or statements.
Formatting, comments, parentheses and quote style never matter.

Matching compares libcst nodes field by field, skipping layout fields; it
does not use ``libcst.matchers``, whose import alone costs more than a check.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Sequence
from functools import cache
from typing import TYPE_CHECKING

import libcst as cst

from ..model import ToolError
from ..source import literal_value

if TYPE_CHECKING:
    from ..rules import Form, Rewrite

_METAVAR = re.compile(r"\$([A-Z_][A-Z0-9_]*)")
_MV_PREFIX = "__mv_"
# ``...`` among arguments, elements or dict entries becomes ``*__dots__`` or
# ``**__dots__`` so that it may follow keyword arguments and stay valid Python.
_DOTS = "__dots__"
_ARG_ELLIPSIS = re.compile(r"(?<=[(,\[])\s*\.\.\.\s*(?=[,)\]])")
_DICT_ELLIPSIS = re.compile(r"(?<=\{)\s*\.\.\.\s*(?=,)|(?<=,)\s*\.\.\.\s*(?=\})")
# Fields that carry layout only: skipped so that formatting never matters.
_LAYOUT_FIELDS = frozenset(
    {
        "lpar",
        "rpar",
        "comma",
        "semicolon",
        "leading_lines",
        "lines_after_decorators",
        "header",
        "footer",
        "newline",
        "indent",
        "colon",
        "equal",
        "dot",
        "star",
        "whitespace",
        "asynchronous",
        "metadata",
        "encoding",
        "default_indent",
        "default_newline",
        "has_trailing_newline",
    }
)


class PatternError(ValueError):
    """A pattern in a rule file is not valid Python once metavariables are replaced."""


@dataclasses.dataclass(frozen=True)
class Match:
    node: cst.CSTNode
    bindings: dict[str, cst.CSTNode]


def _parse_code(text: str, what: str) -> cst.CSTNode:
    """An expression, else a statement (a lone simple statement unwrapped)."""
    try:
        return cst.parse_expression(text)
    except cst.ParserSyntaxError:
        pass
    try:
        statement = cst.parse_statement(text)
    except cst.ParserSyntaxError as exc:
        raise PatternError(f"{what} is not Python: {exc.message}") from None
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        return statement.body[0]
    return statement


class Pattern:
    """One parsed pattern; ``find`` yields its matches in a tree."""

    def __init__(self, source: str) -> None:
        self.source = source
        text = _METAVAR.sub(lambda mo: _MV_PREFIX + mo.group(1), source.strip())
        text = _DICT_ELLIPSIS.sub(" **" + _DOTS, text)
        text = _ARG_ELLIPSIS.sub(" *" + _DOTS, text)
        self.node = _parse_code(text, f"pattern {source!r}")
        self.words = frozenset(_words(self.node))

    def find(self, where: "cst.CSTNode | NodeIndex") -> Iterator[Match]:
        index = where if isinstance(where, NodeIndex) else NodeIndex(where)
        if not self.words <= index.words:
            return
        for candidate in index.by_type.get(type(self.node), ()):
            bindings: dict[str, cst.CSTNode] = {}
            if _match(self.node, candidate, bindings):
                yield Match(candidate, bindings)


@cache
def _fields(node_type: type) -> tuple[str, ...]:
    return tuple(
        f.name
        for f in dataclasses.fields(node_type)
        if f.name not in _LAYOUT_FIELDS and not f.name.startswith("whitespace")
    )


def children(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Child nodes that carry meaning (layout nodes are skipped)."""
    for name in _fields(type(node)):
        value = getattr(node, name)
        if isinstance(value, cst.CSTNode):
            yield value
        elif isinstance(value, Sequence) and not isinstance(value, str):
            for item in value:
                if isinstance(item, cst.CSTNode):
                    yield item


def _match(pattern: object, target: object, bindings: dict[str, cst.CSTNode]) -> bool:
    if isinstance(pattern, cst.Name) and pattern.value.startswith(_MV_PREFIX):
        name = pattern.value[len(_MV_PREFIX) :]
        bound = bindings.get(name)
        if bound is None:
            if not isinstance(target, cst.CSTNode):  # an absent part (a bare ``return``) is no expression
                return False
            bindings[name] = target
            return True
        return _match(bound, target, {})
    if isinstance(pattern, cst.Ellipsis) or _is_elided_block(pattern):
        return True
    if isinstance(pattern, cst.SimpleString):
        return isinstance(target, cst.SimpleString) and _literal(pattern) == _literal(target)
    if type(pattern) is not type(target):
        return False
    if not isinstance(pattern, cst.CSTNode):
        return pattern == target
    for name in _fields(type(pattern)):
        want, have = getattr(pattern, name), getattr(target, name)
        if name == "orelse" and want is None:
            continue  # ``if x: ...`` matches with or without an else
        if isinstance(want, Sequence) and not isinstance(want, str):
            if not isinstance(have, Sequence) or not _match_sequence(list(want), list(have), bindings):
                return False
        elif not _match(want, have, bindings):
            return False
    return True


def _match_sequence(want: list, have: list, bindings: dict[str, cst.CSTNode]) -> bool:
    if not want:
        return not have
    head, rest = want[0], want[1:]
    if _is_bare_ellipsis(head):
        for skip in range(len(have) + 1):
            trial = dict(bindings)
            if _match_sequence(rest, have[skip:], trial):
                bindings.update(trial)
                return True
        return False
    if not have:
        return False
    trial = dict(bindings)
    if _match(head, have[0], trial) and _match_sequence(rest, have[1:], trial):
        bindings.update(trial)
        return True
    return False


def _is_elided_block(node: object) -> bool:
    """``if x: ...`` in a pattern matches any body, on one line or many."""
    if isinstance(node, cst.SimpleStatementSuite):
        return (
            len(node.body) == 1 and isinstance(node.body[0], cst.Expr) and isinstance(node.body[0].value, cst.Ellipsis)
        )
    if isinstance(node, cst.IndentedBlock):
        return len(node.body) == 1 and _is_bare_ellipsis(node.body[0])
    return False


def _is_bare_ellipsis(item: object) -> bool:
    if isinstance(item, (cst.Arg, cst.StarredElement, cst.StarredDictElement)):
        return isinstance(item.value, cst.Name) and item.value.value == _DOTS
    if isinstance(item, cst.SimpleStatementLine) and len(item.body) == 1:
        statement = item.body[0]
        return isinstance(statement, cst.Expr) and isinstance(statement.value, cst.Ellipsis)
    return False


def subtree_ids(node: cst.CSTNode) -> set[int]:
    """``id()`` of the node and of every node below it."""
    ids = {id(node)}
    stack = [node]
    while stack:
        for child in children(stack.pop()):
            ids.add(id(child))
            stack.append(child)
    return ids


class NodeIndex:
    """Every node of a tree grouped by type, and the words it holds, built in
    one walk so that each pattern only tries nodes of its own root type."""

    def __init__(self, tree: cst.CSTNode) -> None:
        self.by_type: dict[type, list[cst.CSTNode]] = {}
        self.words: set[str] = set()
        stack = [tree]
        while stack:
            node = stack.pop()
            self.by_type.setdefault(type(node), []).append(node)
            if isinstance(node, cst.Name):
                self.words.add(node.value)
            elif isinstance(node, cst.SimpleString):
                value = _literal(node)
                if isinstance(value, str):
                    self.words.add(value)
            stack.extend(reversed(list(children(node))))


def _words(node: cst.CSTNode) -> Iterator[str]:
    """Names and string values a match must contain (metavariables excluded)."""
    if isinstance(node, cst.Name) and not node.value.startswith(_MV_PREFIX) and node.value != _DOTS:
        yield node.value
    elif isinstance(node, cst.SimpleString):
        value = _literal(node)
        if isinstance(value, str):
            yield value
    for child in children(node):
        yield from _words(child)


def _literal(node: cst.SimpleString) -> object:
    return literal_value(node.value)


# Bound code that can stand anywhere an operand can without parentheses.
_ATOMS = (
    cst.Name,
    cst.Attribute,
    cst.Call,
    cst.Subscript,
    cst.SimpleString,
    cst.ConcatenatedString,
    cst.FormattedString,
    cst.Integer,
    cst.Float,
    cst.Imaginary,
    cst.List,
    cst.Set,
    cst.Dict,
    cst.ListComp,
    cst.SetComp,
    cst.DictComp,
    cst.GeneratorExp,
)


class Template:
    """Replacement code of a patch: Python source in which ``$NAME`` stands for
    the code a pattern bound to that name. It is concrete code (no ``...``):
    one expression, or one simple statement."""

    def __init__(self, source: str) -> None:
        self.source = source
        text = _METAVAR.sub(lambda mo: _MV_PREFIX + mo.group(1), source.strip())
        node = _parse_code(text, f"template {source!r}")
        if not isinstance(node, (cst.BaseExpression, cst.BaseSmallStatement)):
            raise PatternError(f"template {source!r} must be one expression or one simple statement")
        if _contains(node, cst.Ellipsis):
            raise PatternError(f"template {source!r} must be concrete code, without ...")
        self.node = node
        self.metavariables = metavariables(node)

    def render(self, bindings: dict[str, cst.CSTNode]) -> cst.CSTNode:
        """The template with each ``$NAME`` replaced by the code bound to it."""
        missing = self.metavariables - bindings.keys()
        if missing:
            raise PatternError(
                f"template {self.source!r} needs ${', $'.join(sorted(missing))}, which the match did not bind"
            )
        rendered = self.node.visit(_Substitute(bindings))
        assert isinstance(rendered, cst.CSTNode)  # names are replaced, nothing removed or flattened
        return rendered


class _Substitute(cst.CSTTransformer):
    def __init__(self, bindings: dict[str, cst.CSTNode]) -> None:
        super().__init__()
        self.bindings = bindings

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        if not original_node.value.startswith(_MV_PREFIX):
            return updated_node
        bound = self.bindings[original_node.value[len(_MV_PREFIX) :]]
        assert isinstance(bound, cst.BaseExpression)  # bound where a pattern's name was: an expression
        if not isinstance(bound, _ATOMS) and not bound.lpar:
            bound = bound.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        return bound


def metavariables(node: cst.CSTNode) -> frozenset[str]:
    """The ``$NAME``s a parsed pattern or template uses."""
    found = set()
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, cst.Name) and item.value.startswith(_MV_PREFIX):
            found.add(item.value[len(_MV_PREFIX) :])
        stack.extend(children(item))
    return frozenset(found)


def _contains(node: cst.CSTNode, node_type: type) -> bool:
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, node_type):
            return True
        stack.extend(children(item))
    return False


# A rule's patterns, compiled on first use: reading rule metadata never imports libcst.


@cache
def form_patterns(form: Form) -> tuple[Pattern, ...]:
    return _compile(form.pattern_sources, form.where_file)


@cache
def form_unless(form: Form) -> tuple[Pattern, ...]:
    return _compile(form.unless_sources, form.where_file)


@cache
def form_where(form: Form) -> tuple[tuple[str, str, Pattern], ...]:
    compiled = _compile(tuple(source for _, _, source in form.where_sources), form.where_file)
    return tuple((name, test, pattern) for (name, test, _), pattern in zip(form.where_sources, compiled))


def compile_form(form: Form) -> tuple:
    """Every pattern and template, compiled now (and cached); raises ToolError on a bad one."""
    rewrites = form.patch.rewrites if form.patch else ()
    return (
        *form_patterns(form),
        *form_unless(form),
        *form_where(form),
        *(rewrite_find(r) for r in rewrites),
        *(rewrite_replace(r) for r in rewrites),
    )


@cache
def rewrite_find(rewrite: Rewrite) -> Pattern:
    return _compile((rewrite.find_source,), rewrite.where_file)[0]


@cache
def rewrite_replace(rewrite: Rewrite) -> Template:
    try:
        template = Template(rewrite.replace_source)
    except PatternError as exc:
        raise ToolError(f"{rewrite.where_file}: {exc}") from None
    unbound = template.metavariables - metavariables(rewrite_find(rewrite).node)
    if unbound:
        raise ToolError(f"{rewrite.where_file}: replace uses ${', $'.join(sorted(unbound))}, which find does not bind")
    if isinstance(template.node, cst.BaseExpression) != isinstance(rewrite_find(rewrite).node, cst.BaseExpression):
        raise ToolError(f"{rewrite.where_file}: find and replace must both be expressions or both statements")
    return template


def _compile(sources: tuple[str, ...], where: str) -> tuple[Pattern, ...]:
    try:
        return tuple(Pattern(source) for source in sources)
    except PatternError as exc:
        raise ToolError(f"{where}: {exc}") from None
