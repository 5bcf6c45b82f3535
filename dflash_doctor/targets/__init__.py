"""Targets: where the engine's tree to check lives (vLLM's or SGLang's). One file per kind."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from ..engines import Engine
from ..model import TargetInfo
from ..patching.files import LocalFiles, TreeFiles
from ..paths import cache_dir
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


def releases_dir(engine: Engine) -> Path:
    """Where the engine's extracted releases are kept in the user cache: one directory per
    release, named by its version."""
    return cache_dir() / engine.cache / "releases"


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


def _child_session() -> contextlib.AbstractContextManager:
    from ..isolation import sandbox  # only when behaviour runs: a warm check never does

    return sandbox.session()


class Target(Protocol):
    def resolve(self) -> ResolvedTarget:
        """Find the tree; raise ToolError when there is none to check."""


def opened(target: Target) -> contextlib.AbstractContextManager:
    """Hold what the target keeps open while its tree is checked (an ssh
    connection, on which behaviour runs); closed on leaving."""
    connected = getattr(target, "connected", None)
    return connected() if connected is not None else contextlib.nullcontext()
