"""Definitions the tree's code looks up by their module's name (a registry of
qualified names resolved with ``importlib.import_module``): sent to the child when
it asks, classes copied as classes with their in-tree bases. Trees written here."""

from __future__ import annotations

import hashlib
import textwrap
from pathlib import Path

import pytest

from dflash_doctor.behaviour.by_name import run_by_name
from dflash_doctor.behaviour.program import ProgramBuilder
from dflash_doctor.isolation import sandbox
from dflash_doctor.isolation.session import Call, Outcome
from dflash_doctor.source import DirectoryTree, SourceTree

REGISTRY = """
    import importlib.metadata
    import importlib.util

    _PKG = "vllm.kinds"


    def _builtin(module, name):
        return f"{_PKG}.{module}.{name}"


    _BY_METHOD = {"dflash": _builtin("dflash", "DFlashKind"), "eagle": _builtin("eagle", "EagleKind"),
                  "gone": "vllm.kinds.nowhere.Kind", "typo": _builtin("dflash", "DflashKind")}


    def resolve(qualname):
        module_name, name = qualname.rsplit(".", 1)
        return getattr(importlib.import_module(module_name), name)


    def build(method):
        kind = resolve(_BY_METHOD[method])
        if not (isinstance(kind, type) and issubclass(kind, resolve("vllm.kinds.base.Kind"))):
            raise TypeError("not a kind")
        return resolve(kind.builds)("config")
"""
BASE = """
    from typing import ClassVar

    from torch import zeros


    class Kind:
        builds: ClassVar[str | None] = None
        window: int = 0

        @classmethod
        def describe(cls):
            return cls.builds

        def unknown_here(self):
            return zeros(1)
"""
DFLASH = """
    from typing import final

    from vllm.kinds.base import Kind


    @final
    class DFlashKind(Kind):
        builds = "vllm.kinds.dflash.DFlashProposer"
        window = 2048


    class DFlashProposer:
        def __init__(self, config, device=None):
            self.config = config
"""
EAGLE = """
    from vllm.kinds.base import Kind


    class EagleKind(Kind):
        builds = "vllm.kinds.eagle.EagleProposer"


    class EagleProposer:
        def __init__(self, config):
            self.config = config
"""


def tree_of(root: Path, files: dict[str, str]) -> DirectoryTree:
    for relpath, source in files.items():
        path = root / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
    return DirectoryTree(root, None)


@pytest.fixture
def registry_tree(tmp_path: Path) -> DirectoryTree:
    return tree_of(
        tmp_path,
        {
            "vllm/__init__.py": "",
            "vllm/registry.py": REGISTRY,
            "vllm/kinds/__init__.py": "",
            "vllm/kinds/base.py": BASE,
            "vllm/kinds/dflash.py": DFLASH,
            "vllm/kinds/eagle.py": EAGLE,
        },
    )


def ask(tree: SourceTree, *expressions: str) -> list[Outcome]:
    builder = ProgramBuilder(tree, ())
    parsed = tree.parsed("vllm/registry.py")
    assert parsed is not None
    for name in ("build", "resolve", "_BY_METHOD"):
        builder.resolve_name(parsed, "vllm/registry.py", name)
    calls = [Call(f"c{index}", expression) for index, expression in enumerate(expressions)]
    outcomes = run_by_name(builder, sandbox.run, calls, {}, {})
    return [outcomes[call.id] for call in calls]


def test_a_registry_of_qualified_names_is_followed_into_the_classes_it_names(registry_tree: DirectoryTree) -> None:
    dflash, eagle, described, window = ask(
        registry_tree,
        "build('dflash')",
        "build('eagle')",
        "resolve(_BY_METHOD['dflash']).describe()",
        "resolve(_BY_METHOD['dflash']).window",
    )
    assert dflash.ok and dflash.value == {"$constructed": "vllm.kinds.dflash.DFlashProposer"}, dflash
    assert eagle.ok and eagle.value == {"$constructed": "vllm.kinds.eagle.EagleProposer"}, eagle
    assert described.ok and described.value == "vllm.kinds.dflash.DFlashProposer"  # a classmethod of the in-tree base
    assert window.ok and window.value == 2048  # the subclass's own attribute over the base's


def test_what_python_would_raise_for_a_missing_module_or_name_is_raised(registry_tree: DirectoryTree) -> None:
    gone, typo = ask(registry_tree, "build('gone')", "build('typo')")
    assert gone.error_type == "ModuleNotFoundError", gone
    assert typo.error_type == "AttributeError" and "DflashKind" in typo.error_message, typo


def test_a_method_that_reaches_outside_the_tree_is_a_gap_only_when_called(registry_tree: DirectoryTree) -> None:
    called, not_called = ask(
        registry_tree, "resolve(_BY_METHOD['dflash'])().unknown_here()", "resolve(_BY_METHOD['dflash']).builds"
    )
    assert called.gap and not called.ok, called
    assert not_called.ok


def test_a_module_outside_the_tree_imported_by_name_is_a_gap(registry_tree: DirectoryTree) -> None:
    (outside,) = ask(registry_tree, "resolve('torch.nn.Linear')")
    assert outside.gap and "torch.nn" in outside.gap


def test_a_class_decorator_behaviour_cannot_reproduce_leaves_that_class_a_gap(tmp_path: Path) -> None:
    tree = tree_of(
        tmp_path,
        {
            "vllm/__init__.py": "",
            "vllm/registry.py": REGISTRY,
            "vllm/kinds/__init__.py": "",
            "vllm/kinds/base.py": BASE,
            "vllm/kinds/dflash.py": "from vllm.kinds.base import Kind\nfrom somewhere import register\n\n\n"
            "@register\nclass DFlashKind(Kind):\n    builds = 'x.y'\n",
        },
    )
    (outcome,) = ask(tree, "build('dflash')")
    assert outcome.gap and "register" in outcome.gap, outcome


def test_a_base_from_outside_the_tree_knows_nothing_and_markers_change_nothing(tmp_path: Path) -> None:
    """A class whose base comes from outside the copied code (torch) is still a class:
    what its own body defines is known; anything else may be the foreign base's."""
    model = (
        "from abc import ABC, abstractmethod\nfrom typing import final\n\nfrom torch import nn\n\n"
        "from vllm.kinds.base import Kind\n\n\n"
        "class Model(nn.Module, ABC):\n    declares = Kind\n\n    @final\n    def size(self):\n        return 3\n\n"
        "    @abstractmethod\n    def forward(self):\n        ...\n"
    )
    tree = tree_of(
        tmp_path,
        {
            "vllm/__init__.py": "",
            "vllm/registry.py": REGISTRY,
            "vllm/kinds/__init__.py": "",
            "vllm/kinds/base.py": BASE,
            "vllm/model.py": model,
        },
    )
    declared, sized, unknown, missing = ask(
        tree,
        "resolve('vllm.model.Model').declares.describe()",
        "resolve('vllm.model.Model').size(None)",
        "resolve('vllm.model.Model').parameters",
        "getattr(resolve('vllm.model.Model'), 'speculator', None)",
    )
    assert declared.ok and declared.value is None, declared  # Kind.builds, through the in-tree class it names
    assert sized.ok and sized.value == 3, sized
    assert unknown.gap and "outside the copied code" in unknown.gap, unknown
    assert missing.gap, missing  # not None: nn.Module might define it


def test_a_module_the_collector_did_not_send_is_not_an_absent_one() -> None:
    """A collected tree (ssh, a probe file) holds only what was sent: a module it lacks is
    a gap, never ModuleNotFoundError."""
    from dflash_doctor.targets.snapshot import SnapshotTree

    files = {"vllm/__init__.py": "", "vllm/registry.py": textwrap.dedent(REGISTRY)}
    answer = {
        "root": "/srv/site-packages",
        "files": files,
        "sha256": {relpath: hashlib.sha256(text.encode("latin-1")).hexdigest() for relpath, text in files.items()},
    }
    (outcome,) = ask(SnapshotTree(answer), "build('dflash')")
    assert outcome.gap and "not collected" in outcome.gap, outcome


def test_a_class_only_named_on_the_route_sends_no_methods_until_one_is_reached(registry_tree: DirectoryTree) -> None:
    """A class the route only names (a base, a class attribute) keeps its methods back;
    reaching one sends the class's methods, and the call runs again."""
    builder = ProgramBuilder(registry_tree, ())
    parsed = registry_tree.parsed("vllm/registry.py")
    assert parsed is not None
    for name in ("resolve", "_BY_METHOD"):
        builder.resolve_name(parsed, "vllm/registry.py", name)
    (window,) = run_by_name(
        builder, sandbox.run, [Call("window", "resolve(_BY_METHOD['dflash']).window")], {}, {}
    ).values()
    assert window.value == 2048
    kind = next(chunk.source for chunk in builder.chunks if chunk.name == "Kind")
    assert "_lazy_method('vllm.kinds.base', 'Kind.describe')" in kind and "def describe" not in kind
    (described,) = run_by_name(
        builder, sandbox.run, [Call("described", "resolve(_BY_METHOD['dflash']).describe()")], {}, {}
    ).values()
    assert described.value == "vllm.kinds.dflash.DFlashProposer"
    kind = next(chunk.source for chunk in builder.chunks if chunk.name == "Kind")
    assert "def describe" in kind and "def unknown_here" in kind  # reached: the class's methods are sent


def test_a_constructor_that_reaches_a_method_not_sent_yet_runs_again_once_it_is(tmp_path: Path) -> None:
    """Building a class copied by name runs its constructor; a method it calls is sent when
    reached (the call runs again), so the instance is built, not left a record of its class."""
    kinds = BASE.replace(
        "        window: int = 0\n",
        "        window: int = 0\n\n        def __init__(self, spec):\n"
        "            self.spec = self.normalised(spec)\n\n"
        "        def normalised(self, spec):\n            return spec.upper()\n",
    )
    tree = tree_of(
        tmp_path,
        {
            "vllm/__init__.py": "",
            "vllm/registry.py": REGISTRY,
            "vllm/kinds/__init__.py": "",
            "vllm/kinds/base.py": kinds,
            "vllm/kinds/dflash.py": DFLASH,
        },
    )
    (built,) = ask(tree, "resolve(_BY_METHOD['dflash'])('dflash').spec")
    assert built.ok and built.value == "DFLASH", built


def test_a_module_name_that_climbs_out_of_the_tree_reads_nothing_there(tmp_path: Path) -> None:
    """The tree's code names the module: ``vllm.x/../../outside`` is no module (as in Python),
    and the parent, asked for it all the same, reads no file outside the tree."""
    tree = tree_of(tmp_path / "site", {"vllm/__init__.py": "", "vllm/registry.py": REGISTRY})
    (tmp_path / "outside.py").write_text("SECRET = 'read outside the tree'\n")
    (outcome,) = ask(tree, "resolve('vllm.x/../../outside.SECRET')")
    assert outcome.error_type == "ModuleNotFoundError" and "read outside" not in str(outcome.value), outcome
    from dflash_doctor.behaviour.by_name import ByName

    names = ByName(ProgramBuilder(tree, ()))
    assert not names.answer("vllm.x/../../outside", None) and not names.answer("vllm.x/../../outside", "SECRET")
    assert names.table == {} and not any("SECRET" in chunk.source for chunk in names.builder.chunks)
