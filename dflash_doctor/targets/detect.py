"""Which engines a local target holds (``check --engine auto``): every registered
engine whose package is in the directory, or importable by the interpreter.
A release is named by its version alone, which several engines share: it is
vLLM's unless ``--engine`` says otherwise."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..engines import ENGINES, DEFAULT_ENGINE, Engine
from ..model import ToolError
from . import Target
from .interpreter import InterpreterTarget, locate_in
from .path import PathTarget, package_root
from .release import ReleaseTarget


def _packages() -> str:
    return " or ".join(engine.package for engine in ENGINES.values())


def path_targets(path: Path, engines: tuple[Engine, ...]) -> list[tuple[Engine, Target]]:
    """A ``--path`` target for each of ``engines`` whose package ``path`` holds; ToolError when none does."""
    found: list[tuple[Engine, Target]] = []
    errors: list[str] = []
    for engine in engines:
        try:
            package_root(path, engine)
        except ToolError as exc:
            errors.append(str(exc))
            continue
        found.append((engine, PathTarget(path, engine=engine)))
    if found:
        return found
    if len(set(errors)) == 1 or len(engines) == 1:  # the path itself is the problem, or one engine was asked for
        raise ToolError(errors[0])
    raise ToolError(
        f"no {_packages()} package under {path} (give site-packages, a source checkout, or the package directory)"
    )


def interpreter_targets(python: str, engines: tuple[Engine, ...]) -> list[tuple[Engine, Target]]:
    """A ``--python`` target for each of ``engines`` the interpreter can import (one collector run each, at once)."""
    with ThreadPoolExecutor(len(engines)) as pool:
        answers = list(zip(engines, pool.map(lambda engine: locate_in(python, engine), engines)))
    found: list[tuple[Engine, Target]] = [
        (engine, InterpreterTarget(python, engine, answer))
        for engine, answer in answers
        if not answer.get("error") and answer.get("package_dir")
    ]
    if found:
        return found
    odd = [(engine, answer) for engine, answer in answers if not answer.get("error")]  # an answer that is no answer
    if odd or len(engines) == 1:
        engine, answer = (odd or answers)[0]
        return [(engine, InterpreterTarget(python, engine, answer))]  # resolving says why
    raise ToolError(
        f"interpreter {python}: neither {_packages().replace(' or ', ' nor ')} is installed in its environment "
        "(point at it with --python, --path, --release or --host)"
    )


def local_targets(
    path: Path | None, python: str, release: str | None, engine: Engine | None
) -> list[tuple[Engine, Target]]:
    """The targets of a local check, one per engine it holds (``engine`` None: detected; else only that one)."""
    engines = tuple(ENGINES.values()) if engine is None else (engine,)
    if path is not None:
        return path_targets(path, engines)
    if release is not None:
        chosen = engine or DEFAULT_ENGINE
        return [(chosen, ReleaseTarget(release, chosen))]
    return interpreter_targets(python, engines)
