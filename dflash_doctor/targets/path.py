"""An engine's tree on this machine: site-packages, a source checkout, or the package itself (vllm/)."""

from __future__ import annotations

import os
from pathlib import Path

from ..engines import DEFAULT_ENGINE, Engine
from ..model import TargetInfo, ToolError
from ..provenance import find_dist_info
from ..source import DirectoryTree
from . import ResolvedTarget, local


def package_root(path: Path, engine: Engine) -> Path:
    """The directory that holds the engine's package (``vllm/``); raises ToolError with the reason."""
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
    package = engine.package
    if (resolved / package / "__init__.py").is_file():
        return resolved
    if resolved.name == package and (resolved / "__init__.py").is_file():
        return resolved.parent
    # a clone of the engine's repository, where it keeps the package below its root (SGLang: python/sglang/)
    if engine.source_dir and (resolved / engine.source_dir / package / "__init__.py").is_file():
        return (resolved / engine.source_dir).resolve()
    raise ToolError(
        f"no {package} package under {path} (give site-packages, a source checkout, or the {package} directory)"
    )


class PathTarget:
    def __init__(
        self, path: Path, kind: str = "path", details: tuple[tuple[str, str], ...] = (), engine: Engine = DEFAULT_ENGINE
    ) -> None:
        self.path = path
        self.kind = kind
        self.details = details
        self.engine = engine

    def resolve(self) -> ResolvedTarget:
        root = package_root(self.path, self.engine)
        info = TargetInfo(self.kind, str(root), self.details, directory=True)
        return local(DirectoryTree(root, find_dist_info(root, self.engine.package), self.engine), info)
