"""The target model classes of a tree, as Python would build them: a class by name in a file
(imports of the package followed), its lineage, the method Python keeps for a name, and the
class ``__init__`` builds an attribute from (a class name, a parameter a subclass hands on, a
class attribute, a factory method). Used by the capture-position question."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator

from ..source import ParsedFile, SourceError, SourceTree
from .definitions import is_super_init


@dataclasses.dataclass(frozen=True)
class TreeClass:
    file: str
    node: ast.ClassDef
    parsed: ParsedFile

    @property
    def name(self) -> str:
        return self.node.name


class TreeClasses:
    """The tree's classes by file and name, read on demand, with imports followed."""

    def __init__(self, tree: SourceTree) -> None:
        self.tree = tree
        self._built: dict[tuple[str, str, str], list[TreeClass] | str] = {}  # many hooks ask of the same model

    def parsed(self, file: str) -> ParsedFile | None:
        try:
            return self.tree.parsed(file)
        except SourceError:
            return None

    def named(self, file: str, name: str, depth: int = 0) -> TreeClass | None:
        """The class ``name`` means in ``file``: defined there or imported from the package."""
        parsed = self.parsed(file)
        if parsed is None or depth > 3:
            return None
        for node in parsed.tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return TreeClass(file, node, parsed)
        for node in parsed.tree.body:
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        module = self._module_file(file, node)
                        return None if module is None else self.named(module, alias.name, depth + 1)
        return None

    def _module_file(self, file: str, node: ast.ImportFrom) -> str | None:
        """The file of the module a ``from`` import reads (absolute, or relative to ``file``'s package)."""
        parts = file.split("/")[:-1]
        if node.level > len(parts):
            return None
        base = parts[: len(parts) - node.level + 1] if node.level else []
        path = "/".join([*base, *str(node.module).split(".")])
        return path + ".py" if self.parsed(path + ".py") is not None else path + "/__init__.py"

    def lineage(self, cls: TreeClass) -> Iterator[TreeClass]:
        """The class, then its bases the tree defines, depth first (as Python looks up a name)."""
        seen: set[tuple[str, str]] = set()
        stack = [cls]
        while stack:
            current = stack.pop(0)
            if (current.file, current.name) in seen:
                continue
            seen.add((current.file, current.name))
            yield current
            bases = [self.named(current.file, base.id) for base in current.node.bases if isinstance(base, ast.Name)]
            stack[0:0] = [base for base in bases if base is not None]

    def resolved(self, cls: TreeClass) -> bool:
        """Whether every base of the class's lineage is a class of the tree or ``nn.Module``
        (so a method none of them defines is not there)."""
        for each in self.lineage(cls):
            for base in each.node.bases:
                module = isinstance(base, ast.Attribute) and _bare_module(base)
                if not module and (not isinstance(base, ast.Name) or self.named(each.file, base.id) is None):
                    return False
        return True

    def methods(self, cls: TreeClass) -> list[tuple[TreeClass, ast.FunctionDef]]:
        """Every method the class has, each the one Python keeps (an override hides the base's), with
        the class that defines it."""
        kept: dict[str, tuple[TreeClass, ast.FunctionDef]] = {}
        for owner in self.lineage(cls):
            mine = {node.name: node for node in owner.node.body if isinstance(node, ast.FunctionDef)}  # the last def
            kept.update((name, (owner, node)) for name, node in mine.items() if name not in kept)
        return list(kept.values())

    def run_methods(self, cls: TreeClass) -> list[tuple[TreeClass, ast.FunctionDef]]:
        """``methods``, and the overridden ones they reach through ``super().<name>(...)``."""
        found = self.methods(cls)
        lineage = list(self.lineage(cls))
        queue = list(found)
        while queue:
            owner, method = queue.pop()
            if "super(" not in owner.parsed.lines(method.lineno, method.end_lineno or method.lineno):
                continue  # most methods call nothing on super(): not walked
            for name in _super_calls(method):
                after = lineage[lineage.index(owner) + 1 :] if owner in lineage else []
                base = next((hit for each in after if (hit := self._own_def(each, name))), None)
                if base is not None and all(base[1] is not node for _, node in found):
                    found.append(base)
                    queue.append(base)
        return found

    @staticmethod
    def _own_def(owner: TreeClass, name: str) -> tuple[TreeClass, ast.FunctionDef] | None:
        kept = [node for node in owner.node.body if isinstance(node, ast.FunctionDef) and node.name == name]
        return (owner, kept[-1]) if kept else None  # the last def of a name in a class body is the one Python keeps

    def method(self, cls: TreeClass, name: str) -> tuple[TreeClass, ast.FunctionDef] | None:
        return next((hit for owner in self.lineage(cls) if (hit := self._own_def(owner, name))), None)

    def attribute_classes(self, cls: TreeClass, attribute: str) -> list[TreeClass] | str:
        """The classes the first ``__init__`` in the lineage that sets ``self.<attribute>`` builds it from."""
        key = (cls.file, cls.name, attribute)
        if key not in self._built:
            self._built[key] = self._attribute_classes(cls, attribute)
        return self._built[key]

    def _attribute_classes(self, cls: TreeClass, attribute: str) -> list[TreeClass] | str:
        found: list[TreeClass] = []
        for owner in self.lineage(cls):
            own = self._own_def(owner, "__init__")
            if own is None:
                continue
            init = own[1]
            assignments = [
                (statement, statement.value.func)
                for statement in ast.walk(init)
                if isinstance(statement, ast.Assign)
                and isinstance(statement.value, ast.Call)
                and any(is_self_attribute(target, attribute) for target in statement.targets)
            ]
            if not assignments:
                continue  # this __init__ does not set it: a base's may
            built = [func for _, func in assignments if not _bare_module(func)]
            classes = [each for func in built for each in self._callee(cls, owner, init, func, 0)]
            if None in classes:
                return f"{owner.name}.__init__ ({owner.file}) builds self.{attribute} from no class of the tree"
            found += [each for each in classes if each is not None]
            text = owner.parsed.lines(init.lineno, init.end_lineno or init.lineno)
            if "super(" not in text or not _other_branch_inits_base(init, [statement for statement, _ in assignments]):
                return found
        return found or f"no __init__ of {cls.name} or its bases sets self.{attribute}"

    def _passed(
        self, cls: TreeClass, owner: TreeClass, base_init: ast.FunctionDef, name: str
    ) -> tuple[TreeClass, ast.FunctionDef, ast.expr] | None:
        """What the nearest subclass of ``owner`` in ``cls``'s lineage hands ``super().__init__`` as ``name``."""
        for each in self.lineage(cls):
            if (each.file, each.name) == (owner.file, owner.name):
                return None
            init = [node for node in each.node.body if isinstance(node, ast.FunctionDef) and node.name == "__init__"]
            value = super_argument(init[-1], base_init, name) if init else None
            if value is not None:
                return each, init[-1], value
        return None

    def _callee(
        self, cls: TreeClass, owner: TreeClass, function: ast.FunctionDef, func: ast.expr, depth: int
    ) -> list[TreeClass | None]:
        """The classes a constructor call's callee may be: a class name (or a name ``function``
        binds to one, a parameter's default included), ``module.Class``, a class attribute
        (``self.body_cls``) or a method of the class returning a construction (``self._init_model``)."""
        if depth > 3:
            return [None]
        if isinstance(func, ast.Name):
            named = self.named(owner.file, func.id)
            if named is not None:
                return [named]
            passed = self._passed(cls, owner, function, func.id)
            if passed is not None:  # a subclass hands the parameter to the base's __init__
                return self._callee(cls, passed[0], passed[1], passed[2], depth + 1)
            values = bound_values(function, func.id)
            return [c for value in values for c in self._callee(cls, owner, function, value, depth + 1)] or [None]
        if isinstance(func, ast.Attribute) and is_self_attribute(func):
            method = self.method(cls, func.attr)
            if method is not None:
                returned = [
                    node.value.func
                    for node in ast.walk(method[1])
                    if isinstance(node, ast.Return) and isinstance(node.value, ast.Call)
                ]
                return [c for value in returned for c in self._callee(cls, method[0], method[1], value, depth + 1)] or [
                    None
                ]
            for holder in self.lineage(cls):
                for node in holder.node.body:
                    if isinstance(node, ast.Assign) and any(
                        isinstance(t, ast.Name) and t.id == func.attr for t in node.targets
                    ):
                        return self._callee(cls, holder, function, node.value, depth + 1)
            return [None]
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            module = imported_module(owner.parsed.tree, func.value.id)
            return [self.named(module.replace(".", "/") + ".py", func.attr) if module else None]
        return [None]


def _bare_module(func: ast.expr) -> bool:
    """``nn.Module``: the base of every model, and as a call an empty container (it holds no
    layers; a hook called on it fails loudly)."""
    return ast.unparse(func) == "nn.Module"


def _other_branch_inits_base(init: ast.FunctionDef, assignments: list[ast.Assign]) -> bool:
    """Whether ``super().__init__`` runs in the other branch of an ``if`` from every assignment
    (``if encoder_only: self.model = nn.Module() else: super().__init__(...)``): the base's
    ``__init__`` then builds the attribute in that deployment."""
    for branch in ast.walk(init):
        if not isinstance(branch, ast.If):
            continue
        for one, other in ((branch.body, branch.orelse), (branch.orelse, branch.body)):
            inside = {id(node) for statement in one for node in ast.walk(statement)}
            supers = any(is_super_init(node) for statement in other for node in ast.walk(statement))
            if supers and all(id(each) in inside for each in assignments):
                return True
    return False


def _super_calls(method: ast.FunctionDef) -> set[str]:
    """The names a method calls on ``super()``."""
    return {
        node.func.attr
        for node in ast.walk(method)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Call)
        and isinstance(node.func.value.func, ast.Name)
        and node.func.value.func.id == "super"
    }


def super_argument(function: ast.FunctionDef, base_init: ast.FunctionDef, name: str) -> ast.expr | None:
    """What ``function`` hands ``super().__init__`` for the base's parameter ``name``, by keyword or position."""
    names = [argument.arg for argument in [*base_init.args.posonlyargs, *base_init.args.args][1:]]
    for node in ast.walk(function):
        if is_super_init(node):
            for keyword in node.keywords:
                if keyword.arg == name:
                    return keyword.value
            if name in names and names.index(name) < len(node.args):
                value = node.args[names.index(name)]
                return None if isinstance(value, ast.Starred) else value
    return None


def bound_values(function: ast.FunctionDef, name: str) -> list[ast.expr]:
    """What ``function`` binds ``name`` to: its assignments (both arms of a conditional) and a parameter's default."""
    values: list[ast.expr] = []
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            values.extend([node.value.body, node.value.orelse] if isinstance(node.value, ast.IfExp) else [node.value])
    arguments = function.args
    positional = [*arguments.posonlyargs, *arguments.args]
    defaults = dict(zip([a.arg for a in positional[len(positional) - len(arguments.defaults) :]], arguments.defaults))
    defaults.update((a.arg, d) for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d is not None)
    if name in defaults:
        values.append(defaults[name])
    return values


def imported_module(module: ast.Module, name: str) -> str | None:
    """The module a file binds ``name`` to (``from pkg import mod``, ``import pkg.mod as name``)."""
    for node in module.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return f"{node.module}.{alias.name}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname == name:
                    return alias.name
    return None


def is_self_attribute(node: ast.AST, attribute: str | None = None) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and (attribute is None or node.attr == attribute)
    )


def class_at(cls: TreeClass, path: str, classes: TreeClasses) -> TreeClass | str:
    """The class of the model at a holder path ("self.model.language_model")."""
    current = cls
    for attribute in path.split(".")[1:]:
        options = classes.attribute_classes(current, attribute)
        if isinstance(options, str):
            return options
        if len({(option.file, option.name) for option in options}) > 1:
            return f"{current.name}.__init__ builds self.{attribute} from more than one class"
        current = options[0]
    return current
