"""Which transformers an engine's tree loads drafter configs with, and which config
class it uses for a ``model_type`` (``hf_config.py`` runs that class's code).

Where transformers comes from, first that applies:

* installed beside the engine's package (the same site-packages): the one that
  runs. On this machine, in an image (its config sources are extracted with the
  engine's), or on an ssh host (the collector sends the files ``targets.probing.collected_files``
  names with the engine's files);
* else the newest wheel satisfying the tree's own ``Requires-Dist: transformers``
  (its dist-info METADATA), or what a source checkout's requirements state
  (``Engine.checkout_requirements``), fetched from the package index into the user
  cache as the engine's wheels are (``targets/release.py``): what ``pip install`` of
  the engine gets. This is the case of ``--release``.

The class: the engine's own registry (the route's ``config_registry``, where the
engine has one) first, as its loader does; else
transformers' ``CONFIG_MAPPING_NAMES`` (model_type -> class name), in
``models/<module>/configuration_<module>.py``. Nothing is imported: the files are read.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import re
import tomllib
import weakref
from collections.abc import Mapping

from ..model import ToolError
from ..standalone.probe import read_regular
from ..provenance import find_dist_info
from ..source import DirectoryTree, SourceError, SourceTree, Symbol
from ..targets.probing import AUTO_FILES, INIT

MAPPING = "CONFIG_MAPPING_NAMES"
SPECIAL = "SPECIAL_MODEL_TYPE_TO_MODULE_NAME"
_REQUIRES = re.compile(r"^Requires-Dist:\s*transformers(?![\w.-])([^;\n]*)(;[^\n]*)?$", re.MULTILINE | re.IGNORECASE)
_SPECIFIER = r"(?:~=|===?|!=|<=|>=|<|>)[0-9][0-9A-Za-z.*+!]{0,40}"
_SPECIFIERS = re.compile(rf"(?:{_SPECIFIER}(?:,{_SPECIFIER}){{0,20}})?")
_VERSION = re.compile(r"^Version:\s*([0-9A-Za-z.+!-]{1,40})\s*$", re.MULTILINE)
_INIT_VERSION = re.compile(rb"^__version__\s*=\s*[\"']([0-9A-Za-z.+!-]{1,40})[\"']", re.MULTILINE)


class TransformersTree(DirectoryTree):
    """The ``transformers`` package on this machine (installed, or from the cache)."""

    package = "transformers"


@dataclasses.dataclass(frozen=True)
class Transformers:
    """The transformers a tree's config loading runs: its files, version, and where it came from."""

    tree: SourceTree
    version: str | None
    origin: str


_FOUND: weakref.WeakKeyDictionary[SourceTree, Transformers | str] = weakref.WeakKeyDictionary()


def transformers_for(tree: SourceTree) -> Transformers | str:
    """The transformers ``tree`` loads configs with, or why none is known (once per tree)."""
    if tree not in _FOUND:
        _FOUND[tree] = _find(tree)
    return _FOUND[tree]


def _find(tree: SourceTree) -> Transformers | str:
    engine, package = tree.engine.display, tree.engine.package
    if isinstance(tree, DirectoryTree) and (tree.root / "transformers" / "__init__.py").is_file():
        found: SourceTree = TransformersTree(tree.root, find_dist_info(tree.root, "transformers"))
        return Transformers(found, _version(found), f"installed beside {package} in {tree.root}")
    if not isinstance(tree, DirectoryTree) and _collected(tree, INIT):
        found = Collected(tree)
        return Transformers(
            found,
            _version(found),
            f"installed beside {package} on the host, in {getattr(tree, 'root', '?')} (sent by the collector)",
        )
    requirement = requires(tree.dist_info_text("METADATA") or "") or checkout_requirement(tree)
    if requirement is None:
        checkout = tree.engine.checkout_requirements
        stated = f"nor a source checkout's {checkout} states" if checkout else "states"
        return (
            f"no transformers is installed beside this {engine}, and neither its dist-info (Requires-Dist) "
            f"{stated} a transformers of version specifiers to fetch one by"
        )
    # pip and the cache: only when needed
    from ..targets.release import transformers_tree

    try:
        root, version = transformers_tree(requirement)
    except ToolError as exc:
        return f"no transformers is installed beside this {engine}, and {requirement} could not be fetched: {exc}"
    if not isinstance(tree, DirectoryTree):
        beside = f" (the collector does not send the host's own transformers: the one its {engine} requires stands in)"
    elif _in_cache(tree, "images"):
        beside = f" (the image's own transformers is not extracted: the one its {engine} requires stands in)"
    else:
        beside = "" if _in_cache(tree, "releases") else f" (no transformers is installed beside this {engine})"
    return Transformers(
        TransformersTree(root, find_dist_info(root, "transformers")),
        version,
        f"fetched from the package index: the newest wheel satisfying this {engine}'s "
        f"requirement {requirement!r}{beside}",
    )


MAX_REQUIREMENTS_BYTES = 64 * 1024


def checkout_requirement(tree: SourceTree) -> str | None:
    """A source checkout's transformers requirement (``Engine.checkout_requirements``), read as
    Requires-Dist lines: a requirements file's lines, or a pyproject.toml's [project] dependencies."""
    relpath = tree.engine.checkout_requirements
    if not isinstance(tree, DirectoryTree) or not relpath:
        return None
    data, _ = read_regular(str(tree.root / relpath), MAX_REQUIREMENTS_BYTES)  # type: ignore[no-untyped-call]
    text = (data or b"").decode("utf-8", "replace")
    lines = _pyproject_dependencies(text) if relpath.endswith(".toml") else text.splitlines()
    return requires("\n".join(f"Requires-Dist: {line.split('#', 1)[0].strip()}" for line in lines))


def _pyproject_dependencies(text: str) -> list[str]:
    """The ``[project] dependencies`` of a pyproject.toml ([] when it has none, or is not TOML)."""
    try:
        dependencies = tomllib.loads(text).get("project", {}).get("dependencies", [])
    except (tomllib.TOMLDecodeError, AttributeError, RecursionError):  # tomllib recurses into nested arrays
        return []
    return [line for line in dependencies if isinstance(line, str)] if isinstance(dependencies, list) else []


def identity(tree: SourceTree) -> list[str]:
    """What decides which transformers builds the drafter configs, cheaply (the results
    cache's key): the transformers dist-info beside a local tree, a checkout's
    requirements, and the requirement its own dist-info states."""
    found = [requires(tree.dist_info_text("METADATA") or "") or ""]
    if isinstance(tree, DirectoryTree):
        checkout = [tree.root / tree.engine.checkout_requirements] if tree.engine.checkout_requirements else []
        for path in [*sorted(tree.root.glob("transformers-*.dist-info/METADATA")), *checkout]:
            data, _ = read_regular(str(path), MAX_REQUIREMENTS_BYTES * 16)  # type: ignore[no-untyped-call]
            found.append(f"{path.relative_to(tree.root)}: {_digest(data)}")
    return found


def _digest(data: bytes | None) -> str:
    return "absent" if data is None else hashlib.sha256(data).hexdigest()


def _in_cache(tree: DirectoryTree, part: str) -> bool:
    from ..paths import cache_dir

    return tree.root.resolve().is_relative_to((cache_dir() / part).resolve())


def requires(metadata: str) -> str | None:
    """The ``transformers`` requirement of a METADATA text (not an extra's), as pip takes
    it; None when there is none, or when it is more than version specifiers (a URL, an
    option: the text may come from another host, and pip is handed only versions)."""
    for found in _REQUIRES.finditer(metadata):
        marker = found.group(2) or ""
        if "extra" in marker:
            continue
        spec = re.sub(r"^\[[\w,\s-]*\]", "", found.group(1).strip()).strip().strip("()").replace(" ", "")
        return f"transformers{spec}" if _SPECIFIERS.fullmatch(spec) else None
    return None


def _version(tree: SourceTree) -> str | None:
    """From the dist-info METADATA, else ``__version__ = "..."`` in ``transformers/__init__.py``."""
    found = _VERSION.search(tree.dist_info_text("METADATA") or "")
    if found:
        return found.group(1)
    try:
        data = tree.data(INIT) or b""
    except SourceError:
        return None
    assigned = _INIT_VERSION.search(data)
    return assigned.group(1).decode("ascii") if assigned else None


def _collected(tree: SourceTree, relpath: str) -> bool:
    try:
        return tree.data(relpath) is not None
    except SourceError:
        return False


class Collected(SourceTree):
    """The transformers files a collector sent with a vLLM tree (the same site dir):
    read through that tree, as the ``transformers`` package."""

    package = "transformers"

    def __init__(self, tree: SourceTree) -> None:
        super().__init__()
        self._tree = tree

    def read(self, relpath: str) -> bytes | None:
        return self._tree.read(relpath)

    def search(self, names: frozenset[str], under: str, mentions: bool) -> Mapping[str, list[str]]:
        return {name: [] for name in names}

    def dist_info_text(self, name: str) -> str | None:
        return None


def config_class(
    tree: SourceTree, transformers: Transformers | str, model_type: str
) -> tuple[SourceTree, Symbol] | str:
    """The class the engine builds this model_type's config with, and the tree holding it; or why not known."""
    handing = tree.engine.route or tree.engine.direct
    registry = handing.config_registry if handing is not None else None
    package = handing.configs_package if handing is not None else None
    registered = (
        _string_pairs(tree, registry.file, registry.symbol).get(model_type)
        if registry is not None and _names(tree, registry.file, model_type)
        else None
    )
    if registered is not None and package is not None:
        symbol = _engine_class(tree, package, registered)
        if isinstance(symbol, str):
            return (
                f"{tree.engine.display} registers its own config class {registered} for model_type "
                f"{model_type!r}, but {symbol}"
            )
        return tree, symbol
    if isinstance(transformers, str):
        return transformers
    names: dict[str, str] = {}
    special: dict[str, str] = {}
    for file in AUTO_FILES:
        names.update(_string_pairs(transformers.tree, file, MAPPING))
        special.update(_string_pairs(transformers.tree, file, SPECIAL))
    if model_type not in names:
        return f"transformers {transformers.version} has no config class for model_type {model_type!r} (its {MAPPING})"
    module = special.get(model_type, model_type.replace("-", "_"))
    file = f"transformers/models/{module}/configuration_{module}.py"
    found = _top_class(transformers.tree, file, names[model_type])
    if isinstance(found, str):
        return found
    return transformers.tree, found


def _top_class(tree: SourceTree, file: str, name: str) -> Symbol | str:
    from .definitions import parsed_or_none  # here: the results cache's key needs only identity(), not definitions

    try:
        parsed = parsed_or_none(tree, file)
    except ToolError as exc:
        return str(exc)
    if parsed is None:
        return f"{file} is not in this tree"
    for node in parsed.tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return Symbol(file, name, node, parsed)
    return f"{name} is not defined at the top of {file}"


def _engine_class(tree: SourceTree, package: str, name: str) -> Symbol | str:
    """A class of the engine's configs package by the name its registry gives it."""
    from .definitions import absolute_module, parsed_or_none, top_level_bindings

    try:
        parsed = parsed_or_none(tree, package)
    except ToolError as exc:
        return str(exc)
    for node, _ in top_level_bindings(parsed.tree, name) if parsed else ():
        if isinstance(node, ast.ImportFrom):
            module = absolute_module(node, package)
            if module:
                return _top_class(tree, module.replace(".", "/") + ".py", name)
    return f"{name} is not imported in {package}"


_PAIRS: weakref.WeakKeyDictionary[SourceTree, dict[tuple[str, str], dict[str, str]]] = weakref.WeakKeyDictionary()


def _string_pairs(tree: SourceTree, file: str, name: str) -> dict[str, str]:
    """The str -> str pairs a module-level mapping ``name`` is built from (read once per tree)."""
    known = _PAIRS.setdefault(tree, {})
    if (file, name) not in known:
        known[(file, name)] = _read_pairs(tree, file, name)
    return known[(file, name)]


def _read_pairs(tree: SourceTree, file: str, name: str) -> dict[str, str]:
    """``(key, value)`` tuples, dict literals and keywords in the assignments of ``name``
    and in ``name.update(...)``."""
    from .definitions import parsed_or_none

    try:
        parsed = parsed_or_none(tree, file)
    except ToolError:
        return {}
    pairs: dict[str, str] = {}
    for statement in parsed.tree.body if parsed else ():
        value = None
        if isinstance(statement, (ast.Assign, ast.AnnAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            if any(isinstance(target, ast.Name) and target.id == name for target in targets):
                value = statement.value
        elif isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
            func = statement.value.func
            if (
                isinstance(func, ast.Attribute)
                and func.attr == "update"
                and isinstance(func.value, ast.Name)
                and func.value.id == name
            ):
                value = statement.value
        _collect(value, pairs)
    return pairs


def _collect(node: ast.expr | None, pairs: dict[str, str]) -> None:
    """The pairs in ``OrderedDict([(k, v), ...])``, ``dict(k=v, **{k: v})``, ``{k: v}`` and the like."""
    if isinstance(node, ast.Call):
        for argument in node.args:
            _collect(argument, pairs)
        for keyword in node.keywords:
            if keyword.arg is None:
                _collect(keyword.value, pairs)
            else:
                _add(pairs, ast.Constant(keyword.arg), keyword.value)
    elif isinstance(node, (ast.List, ast.Tuple)):
        for item in node.elts:
            if isinstance(item, ast.Tuple) and len(item.elts) == 2:
                _add(pairs, item.elts[0], item.elts[1])
    elif isinstance(node, ast.Dict):
        for key, item in zip(node.keys, node.values):
            if key is None:
                _collect(item, pairs)
            else:
                _add(pairs, key, item)


def _add(pairs: dict[str, str], key: ast.expr, value: ast.expr) -> None:
    """``pairs[key] = value`` when both are string literals."""
    key_text, value_text = _text(key), _text(value)
    if key_text is not None and value_text is not None:
        pairs[key_text] = value_text


def _names(tree: SourceTree, file: str, key: str) -> bool:
    """Whether ``file`` spells ``key`` as a keyword or a string literal at all (a
    registry that does not is not parsed: most model types are nobody's key)."""
    try:
        data = tree.data(file) or b""
    except SourceError:
        return True  # parsing says why
    spelled = key.encode()
    for found in re.finditer(re.escape(spelled), data):
        before, after = data[found.start() - 1 : found.start()], data[found.end() : found.end() + 1]
        if before in (b'"', b"'") and after == before:
            return True
        if not (before.isalnum() or before in (b"_", b".")) and re.match(
            rb"\s*=(?!=)", data[found.end() : found.end() + 8]
        ):
            return True
    return False


def _text(node: ast.expr | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None
