"""Options shared by the commands that take a target, and output helpers."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from ..model import ToolError
from ..paths import write_atomically

PathOption = typer.Option(None, "--path", help="site-packages, a source checkout, or the vllm directory.")
PythonOption = typer.Option(None, "--python", help="Interpreter whose environment holds vllm (never imported).")
ReleaseOption = typer.Option(None, "--release", help="A released wheel, e.g. 0.20.1 (downloaded once into the cache).")
OnlyOption = typer.Option(None, "--only", help="Only this fix id (repeatable).")


def choose_target(path: Optional[Path], python: Optional[str], release: Optional[str]):
    """The one target the options name; the current interpreter when none."""
    chosen = [name for name, value in (("--path", path), ("--python", python), ("--release", release)) if value]
    if len(chosen) > 1:
        raise ToolError(f"give one target, not {' and '.join(chosen)}")
    if path is not None:
        from ..targets.path import PathTarget

        return PathTarget(path)
    if release is not None:
        from ..targets.release import ReleaseTarget

        return ReleaseTarget(release)
    from ..targets.interpreter import InterpreterTarget

    return InterpreterTarget(python or sys.executable)


def emit(text: str, output: Optional[Path]) -> None:
    """The report to ``output`` (atomically) or to standard output."""
    if output is not None:
        write_atomically(output, text)
    else:
        sys.stdout.write(text)
