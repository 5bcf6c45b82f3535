"""Checking many hosts at once: parallel round trips, one report per host (per engine of a host holding several)."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from .check import run_check
from .model import HostOutcome, ToolError
from .rules import Rule
from .targets import Target, opened, per_engine

if TYPE_CHECKING:
    from rich.console import Console

    from .engines import Engine


def check_targets(
    named_targets: list[tuple[str, Target]],
    rules: tuple[Rule, ...],
    jobs: int,
    progress: bool,
    **check_options: Path | None,
) -> list[HostOutcome]:
    """Run ``check`` on each (name, target) in parallel, and on each engine a target holds; failures stay per host."""

    def one(name: str, target: Target) -> list[HostOutcome]:
        try:
            with opened(target):  # one connection for every engine the host holds
                return engine_outcomes(name, per_engine(target), rules, **check_options)
        except ToolError as exc:
            return [HostOutcome(name, error=str(exc))]

    from .targets.jumps import JUMPS  # a bastion's connection serves every host behind it

    with JUMPS.held(), ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(one, name, target) for name, target in named_targets]
        if progress:
            from rich.progress import Progress

            with Progress(transient=True, console=_stderr_console()) as bar:
                task = bar.add_task("checking hosts", total=len(futures))
                for future in futures:
                    future.add_done_callback(lambda _: bar.advance(task))
                return [outcome for future in futures for outcome in future.result()]
        return [outcome for future in futures for outcome in future.result()]


def engine_outcomes(
    name: str, split: list[tuple[Engine | None, Target]], rules: tuple[Rule, ...], **check_options: Path | None
) -> list[HostOutcome]:
    """A check of each engine of one target (``targets.per_engine``), named by the engine when it holds several;
    an engine that cannot be checked is an error of its own."""
    outcomes = []
    for engine, target in split:
        label = f"{name} {engine.display}" if len(split) > 1 and engine is not None else name
        try:
            outcomes.append(HostOutcome(label, report=run_check(target, rules, **check_options)))
        except ToolError as exc:
            outcomes.append(HostOutcome(label, error=str(exc)))
    return outcomes


def _stderr_console() -> Console:
    from rich.console import Console

    return Console(file=sys.stderr)
