"""Apply the patches rules declare, on libcst trees only (no I/O).

A patch belongs to a form: for each match of that form, the one piece of
code that a rewrite's ``find`` matches and that holds the match or lies in it
is replaced by the rendered ``replace``. ``find`` may be wider than the form
(an assignment around a read), so a patch can insist on the context it was
written for. Anything that does not fit exactly (no patch declared, no place
or more than one place found, two edits overlapping) is refused with the
reason; nothing is guessed. A form whose patch says ``unshadow`` found in a def
that replaces an earlier def of the same name (``liveness.shadowed_defs``) whose
code already has the produced form is removed instead: the earlier def runs.
"""

from __future__ import annotations

import ast
import dataclasses
import re

import libcst as cst

from ..structure.forms import match_forms
from ..structure.liveness import shadowed_defs
from ..model import ABSENT, PARTIAL, ToolError
from ..structure.patterns import NodeIndex, PatternError, children, rewrite_find, rewrite_replace, subtree_ids
from ..rules import Form
from ..source import ParsedFile, SourceError


class PatchRefused(ToolError):
    """This code cannot be patched; the message says why (user-facing)."""


@dataclasses.dataclass(frozen=True)
class SiteEdit:
    """The edits that turn one form found at a site into its present form."""

    form: Form
    produces: str  # the form its patch produces
    # (node in the tree, its replacement; RemovalSentinel.REMOVE: a shadowing def removed)
    replacements: tuple[tuple[cst.CSTNode, cst.CSTNode | cst.RemovalSentinel], ...]


def site_edits(forms: list[Form], site: cst.CSTNode) -> list[SiteEdit]:
    """Edits for every absent or partial form at ``site`` (a def, or a rule case)."""
    edits = []
    index = NodeIndex(site)
    for hit in match_forms(forms, site):
        form = hit.form
        if form.verdict not in (ABSENT, PARTIAL):
            continue
        if form.patch is None:
            raise PatchRefused(f"no patch is declared for form {form.id} ({form.description})")
        replacements: list[tuple[cst.CSTNode, cst.CSTNode | cst.RemovalSentinel]] = []
        for match in hit.matches:
            shadowing = _shadowing_def(forms, form, site, match.node)
            if shadowing is not None:
                replacements.append((shadowing, cst.RemovalSentinel.REMOVE))
                continue
            found = [
                (rewrite, where)
                for rewrite in form.patch.rewrites
                for where in rewrite_find(rewrite).find(index)
                if _overlap(where.node, match.node)
            ]
            if len(found) != 1:
                shown = _code(match.node)
                if not found:
                    raise PatchRefused(f"the patch for form {form.id} does not fit this code: {shown}")
                raise PatchRefused(f"the patch for form {form.id} would change {len(found)} places in: {shown}")
            rewrite, where = found[0]
            try:
                replacements.append((where.node, rewrite_replace(rewrite).render(where.bindings)))
            except PatternError as exc:
                raise PatchRefused(str(exc)) from None
        edits.append(SiteEdit(form, form.patch.produces, tuple(replacements)))
    _refuse_overlaps([old for edit in edits for old, _ in edit.replacements])
    return edits


def _shadowing_def(forms: list[Form], form: Form, site: cst.CSTNode, node: cst.CSTNode) -> cst.FunctionDef | None:
    """The def holding ``node`` when the form's patch may remove it: it replaces an earlier
    def of the same name in the same block, and that one's code has the produced form."""
    if form.patch is None or not form.patch.unshadow:
        return None
    produced = [other for other in forms if form.patch and other.id == form.patch.produces]
    stack = [site]
    while stack:
        block = stack.pop()
        if isinstance(block, (cst.Module, cst.IndentedBlock)):
            for earlier, later in shadowed_defs(block.body):
                if id(node) in subtree_ids(later) and match_forms(produced, earlier):
                    return later
        stack.extend(children(block))
    return None


def apply_edits(site: cst.Module, edits: list[SiteEdit]) -> cst.Module:
    """``site`` with every replacement made (nodes are matched by identity)."""
    new_nodes = {id(old): new for edit in edits for old, new in edit.replacements}
    return site.visit(_Replace(new_nodes))


class _Replace(cst.CSTTransformer):
    def __init__(self, new_nodes: dict[int, cst.CSTNode | cst.RemovalSentinel]) -> None:
        super().__init__()
        self.new_nodes = new_nodes

    # libcst's stub has on_leave return the node's own type; a replacement may be any node, or the
    # removal of a statement (libcst checks it)
    def on_leave(  # type: ignore[override]
        self, original_node: cst.CSTNode, updated_node: cst.CSTNode
    ) -> cst.CSTNode | cst.RemovalSentinel:
        return self.new_nodes.get(id(original_node), updated_node)


def patch_definitions(text: str, relpath: str, qualname: str, forms: list[Form]) -> tuple[str, list[SiteEdit]]:
    """The file's text with every def of this qualified name patched, and the edits made.

    Each def is cut out by its lines, dedented, parsed and patched alone, and
    its new lines are put back: the rest of the file keeps its exact bytes,
    and a large file is never parsed whole by libcst. Several defs of the name
    at one indentation are cut out as one piece, from the first to the last,
    so that the patch sees which one replaces which.
    """

    def located() -> list[ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef]:
        try:
            symbols = ParsedFile(relpath, text.encode("utf-8")).symbols(qualname)
        except SourceError as exc:
            raise PatchRefused(str(exc)) from None
        return [  # every symbol is one of these defs (source.symbols); its node is typed ast.AST there
            s.node
            for s in symbols
            if s.qualname == qualname and isinstance(s.node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        ]

    def spans() -> list[tuple[int, int]]:
        """(first line index, end line) of each piece to patch."""
        found = located()
        pieces = [(min([n.lineno, *(d.lineno for d in n.decorator_list)]) - 1, n.end_lineno or n.lineno) for n in found]
        if len(found) > 1 and len({n.col_offset for n in found}) == 1:
            return [(min(first for first, _ in pieces), max(end for _, end in pieces))]
        return pieces

    done: list[SiteEdit] = []
    found = spans()
    if not found:
        raise PatchRefused(f"{qualname} is no longer in {relpath}")
    for index in range(len(found)):
        if index and done:
            found = spans()  # an edit above moves the lines below
        first, end = found[index]
        lines = _LINE.findall(text)
        segment = lines[first:end]
        prefix = segment[0][: len(segment[0]) - len(segment[0].lstrip(" \t"))]
        module = cst.parse_module("".join(_dedent(segment, prefix, qualname)))
        edits = site_edits(forms, module)
        if edits:
            patched = _LINE.findall(apply_edits(module, edits).code)
            text = "".join(
                lines[:first] + [line if not line.strip() else prefix + line for line in patched] + lines[end:]
            )
        done.extend(edits)
    return text, done


_LINE = re.compile(r"[^\n]*\n|[^\n]+$")


def _dedent(segment: list[str], prefix: str, qualname: str) -> list[str]:
    """Blank lines stay as they are, so that putting the prefix back gives the same bytes."""
    out = []
    for line in segment:
        if not line.strip():
            out.append(line)
        elif line.startswith(prefix):
            out.append(line[len(prefix) :])
        else:
            raise PatchRefused(f"cannot cut {qualname} out to patch it: a line in it is indented less than its def")
    return out


def _overlap(one: cst.CSTNode, other: cst.CSTNode) -> bool:
    """One node is the other or lies inside it."""
    return id(other) in subtree_ids(one) or id(one) in subtree_ids(other)


def _refuse_overlaps(nodes: list[cst.CSTNode]) -> None:
    inner = {inner_id for node in nodes for inner_id in subtree_ids(node) - {id(node)}}
    if any(id(node) in inner for node in nodes):
        raise PatchRefused("two edits of this patch overlap")


def _code(node: cst.CSTNode) -> str:
    text = " ".join(cst.Module(body=[]).code_for_node(node).split())
    return text if len(text) <= 120 else text[:117] + "..."
