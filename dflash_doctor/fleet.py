"""Checking many hosts at once: parallel round trips, one report per host."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from .check import run_check
from .model import HostOutcome, ToolError
from .rules import Rule

if TYPE_CHECKING:
    from rich.console import Console

    from .targets import Target


def check_targets(
    named_targets: list[tuple[str, Target]],
    rules: tuple[Rule, ...],
    jobs: int,
    progress: bool,
    **check_options: Path | None,
) -> list[HostOutcome]:
    """Run ``check`` on each (name, target) in parallel; failures stay per host."""

    def one(name: str, target: Target) -> HostOutcome:
        try:
            return HostOutcome(name, report=run_check(target, rules, **check_options))
        except ToolError as exc:
            return HostOutcome(name, error=str(exc))

    from .targets.jumps import JUMPS  # a bastion's connection serves every host behind it

    with JUMPS.held(), ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(one, name, target) for name, target in named_targets]
        if progress:
            from rich.progress import Progress

            with Progress(transient=True, console=_stderr_console()) as bar:
                task = bar.add_task("checking hosts", total=len(futures))
                for future in futures:
                    future.add_done_callback(lambda _: bar.advance(task))
                return [future.result() for future in futures]
        return [future.result() for future in futures]


def _stderr_console() -> Console:
    from rich.console import Console

    return Console(file=sys.stderr)
