"""A vLLM tree on this machine: site-packages, a source checkout, or vllm/ itself."""

from __future__ import annotations

import os
from pathlib import Path

from ..model import TargetInfo, ToolError
from ..provenance import find_dist_info
from ..source import DirectoryTree
from . import ResolvedTarget, local


def package_root(path: Path) -> Path:
    """The directory that holds ``vllm/``; raises ToolError with the reason."""
    try:
        resolved = path.resolve(strict=True)
    except FileNotFoundError:
        raise ToolError(f"no such path: {path}") from None
    except (RuntimeError, OSError) as exc:  # RuntimeError: symlink loop on 3.11
        raise ToolError(f"cannot resolve {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if not resolved.is_dir():
        raise ToolError(f"not a directory: {path}")
    if not os.access(resolved, os.R_OK | os.X_OK):
        raise ToolError(f"cannot read directory: {path}")
    if (resolved / "vllm" / "__init__.py").is_file():
        return resolved
    if resolved.name == "vllm" and (resolved / "__init__.py").is_file():
        return resolved.parent
    raise ToolError(f"no vllm package under {path} (give site-packages, a source checkout, or the vllm directory)")


class PathTarget:
    def __init__(self, path: Path, kind: str = "path", details: tuple[tuple[str, str], ...] = ()) -> None:
        self.path = path
        self.kind = kind
        self.details = details

    def resolve(self) -> ResolvedTarget:
        root = package_root(self.path)
        info = TargetInfo(self.kind, str(root), self.details, directory=True)
        return local(DirectoryTree(root, find_dist_info(root)), info)
