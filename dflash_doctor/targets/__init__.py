"""Targets: where the engine's tree to check lives (vLLM's or SGLang's). One file per kind."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable
from typing import Any, Protocol

from ..engines import Engine
from ..model import TargetInfo, ToolError
from ..patching.files import LocalFiles, TreeFiles
from ..paths import releases_dir
from ..source import DirectoryTree, SourceTree

NOT_RUN_HERE = (
    "the tree came from another machine and its code is never run on this one "
    "(no behaviour computed on its host came with it)"
)
COPIES = "its files are copies a probe sent, not the files themselves"


@dataclasses.dataclass(frozen=True)
class ResolvedTarget:
    """``behaviour``: where the tree's own code can run, or None when it cannot run
    anywhere (``no_behaviour`` says why): called, it opens one check's session, a
    context manager giving a ``sandbox.run``-shaped callable (see ``sandbox.session``).
    ``files``: how ``patch`` and ``restore`` write the tree (a ``TreeFiles``
    factory), or None when they cannot: ``no_files`` says why."""

    tree: SourceTree
    info: TargetInfo
    behaviour: Callable[[], contextlib.AbstractContextManager[Callable[..., Any]]] | None = None
    no_behaviour: str = NOT_RUN_HERE
    # A build commit known from outside the tree (an image label), and where it was read.
    build_commit: tuple[str, str] | None = None
    files: Callable[[], TreeFiles] | None = None
    no_files: str = COPIES


def local(tree: DirectoryTree, info: TargetInfo) -> ResolvedTarget:
    """A tree on this machine: its code runs in the isolated child process, and
    its files are written in place, unless it is in the release cache."""
    releases = releases_dir(tree.engine).resolve()
    if tree.root.resolve().is_relative_to(releases):
        return ResolvedTarget(
            tree,
            info,
            behaviour=_child_session,
            no_files=(
                f"it is in dflash-doctor's read-only release cache ({releases}), a download cache, not an "
                f"installation: patch a copy of it, or an installed {tree.engine.display}"
            ),
        )
    return ResolvedTarget(
        tree, info, behaviour=_child_session, files=functools.partial(LocalFiles, tree.root, tree.package)
    )


def files_for(resolved: ResolvedTarget) -> Callable[[], TreeFiles]:
    """How patch and restore write this target's tree (called when they do);
    a ToolError with the target's reason when it cannot be written."""
    if resolved.files is None:
        raise ToolError(f"{resolved.info.location} cannot be patched: {resolved.no_files}")
    return resolved.files


def _child_session() -> contextlib.AbstractContextManager:
    from ..isolation import sandbox  # only when behaviour runs: a warm check never does

    return sandbox.session()


class Target(Protocol):
    def resolve(self) -> ResolvedTarget:
        """Find the tree; raise ToolError when there is none to check."""


def per_engine(target: Target) -> list[tuple[Engine | None, Target]]:
    """The target once per engine it holds: a host or an image that detects its engines
    when it is opened offers ``per_engine()`` (call inside ``opened``); any other, itself."""
    split = getattr(target, "per_engine", None)
    return list(split()) if split is not None else [(None, target)]


def opened(target: Target) -> contextlib.AbstractContextManager:
    """Hold what the target keeps open while its tree is checked (an ssh
    connection, on which behaviour runs); closed on leaving."""
    connected = getattr(target, "connected", None)
    return connected() if connected is not None else contextlib.nullcontext()
