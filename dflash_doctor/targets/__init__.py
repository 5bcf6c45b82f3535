"""Targets: where the vLLM tree to check lives. One file per kind."""

from __future__ import annotations

import dataclasses
from typing import Protocol

from ..model import TargetInfo
from ..source import SourceTree


@dataclasses.dataclass(frozen=True)
class ResolvedTarget:
    tree: SourceTree
    info: TargetInfo
    # A build commit known from outside the tree (an image label), and where it was read.
    build_commit: tuple[str, str] | None = None


class Target(Protocol):
    def resolve(self) -> ResolvedTarget:
        """Find the tree; raise ToolError when there is none to check."""
