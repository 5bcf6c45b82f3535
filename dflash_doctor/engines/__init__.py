"""Engines: what the tool knows about a serving engine as a whole, as data.

An ``Engine`` says how to find the engine's package and the distribution that
owns it, where its version and build commit are written, which entry points
load its plugins, which platforms it is built for, and how reports name it.
One file per engine holds only its descriptor (``vllm.py``, ``sglang.py``); the code reads the
descriptor the target's tree carries (``SourceTree.engine``) and names no
engine. The stdlib collector (``probe.py``) cannot import this package: it is
sent the package name in its request.

The route from a drafter's config to its model runner (``route.py``) is part of
the descriptor; what each fix looks like in an engine's code is not: that is the rules'.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from .route import Direct, Route
from .metrics import Metrics


@dataclasses.dataclass(frozen=True)
class PlatformKind:
    """A platform an engine is built for: ``name`` is what its platform object
    answers ``is_<name>()`` for, ``words`` the words (a regular expression) of a
    distribution name or local version label that say a build is for it."""

    name: str  # "cuda"
    display: str  # "CUDA"
    words: str  # r"cu\d*|cuda"


@dataclasses.dataclass(frozen=True)
class Engine:
    """One serving engine, described (``engines/<name>.py``)."""

    name: str  # how the tool and its options name the engine ("vllm")
    display: str  # how people write it ("vLLM")
    package: str  # the top-level import package: the tree is the directory that holds it
    distribution: str  # the engine's own distribution on the package index; any other owner is a vendor build or fork
    version_file: str  # relpath of the module holding ``__version__`` (and a build commit, where written)
    commit_names: tuple[str, ...]  # names in ``version_file`` that hold the build commit, first found wins
    plugin_groups: tuple[str, ...]  # entry-point groups whose plugins the engine loads at start
    platforms: tuple[PlatformKind, ...]
    default_platform: str  # what a build is for when nothing says otherwise
    report_key: str  # the key of what the tree says about itself in check/v1 reports (v2 says ``engine``)
    cache: str  # the user cache's subdirectory of the engine's releases and matrix rows ("": the cache itself)
    first_dflash: str  # the first release on the package index with a DFlash code path
    route: Route | None = None  # the objects behaviour runs the tree's code on (None: behaviour cannot run it)
    direct: Direct | None = None  # or: the drafter's hf_config handed straight to its model (no route of runners)
    metrics: Metrics | None = None  # where a running server reports acceptance (``accept``); None: not read
    # Directories of an image (from its root) where the engine is installed from source, editable: its package's
    # files under them are kept, and a site directory's .pth, editable finder or direct_url.json leads to them.
    checkouts: tuple[str, ...] = ()
    source_dir: str = ""  # the directory of the engine's own git repository that holds its package ("": the root)
    # Where a source checkout states its dependencies, from the tree root: a requirements file, or a
    # pyproject.toml (its [project] dependencies). "": nowhere the tool reads.
    checkout_requirements: str = ""

    def kept(self) -> tuple[str, ...]:
        """What a release tree keeps of the engine's wheel, besides its dist-info."""
        return (f"{self.package}/**.py",)

    @property
    def repository_package(self) -> str:
        """Where the engine's own git repository keeps its package (``vllm``, ``python/sglang``)."""
        return f"{self.source_dir}/{self.package}" if self.source_dir else self.package

    def owns(self, relpath: str) -> bool:
        """Whether ``relpath`` (relative to the tree root) lies inside the engine's package."""
        return relpath == self.package or relpath.startswith(self.package + "/")

    def is_own_distribution(self, name: str) -> bool:
        """Whether ``name`` is the engine's own distribution (compared as the package index does)."""
        return re.sub(r"[-_.]+", "-", name).lower() == self.distribution

    def platform(self, word: str) -> str | None:
        """The platform a word of a distribution name or version label names, or None."""
        return next((kind.name for kind in self.platforms if re.fullmatch(kind.words, word)), None)

    def platform_display(self, name: str) -> str:
        return next((kind.display for kind in self.platforms if kind.name == name), name)


from .sglang import SGLANG  # noqa: E402 - each engine's file reads the interface above
from .vllm import VLLM  # noqa: E402

ENGINES: Mapping[str, Engine] = {engine.name: engine for engine in (VLLM, SGLANG)}
ENGINE_NAMES = " or ".join(ENGINES)  # the names --engine takes, as help lists them
# The engine assumed where nothing names one: the tool's first. Rule files without an ``engine`` key,
# check/v1 reports, collector answers from before answers named their package, and ``--release`` or
# ``releases`` without ``--engine`` are its.
DEFAULT_ENGINE: Engine = VLLM


def named(name: str) -> Engine:
    """The engine called ``name``; LookupError naming the known ones."""
    if name not in ENGINES:
        raise LookupError(f"no engine called {name!r} (known: {', '.join(sorted(ENGINES))})")
    return ENGINES[name]


def of_package(package: str) -> Engine:
    """The engine whose import package is ``package`` (a collector's answer names it); LookupError when none."""
    found = [engine for engine in ENGINES.values() if engine.package == package]
    if not found:
        raise LookupError(
            f"no engine has the package {package!r} (known: {', '.join(sorted(e.package for e in ENGINES.values()))})"
        )
    return found[0]
