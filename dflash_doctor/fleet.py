"""Checking many hosts at once: parallel round trips, one report per host."""

from __future__ import annotations

import dataclasses
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .model import EXIT_ERROR, EXIT_MISSING, EXIT_OK, EXIT_UNKNOWN, CheckReport, ToolError
from .rules import Rule

FLEET_SCHEMA = "dflash-doctor/fleet/v1"


@dataclasses.dataclass(frozen=True)
class HostOutcome:
    host: str
    report: CheckReport | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        if self.report is not None:
            return self.report.to_json()
        return {"host": self.host, "error": self.error, "exit_code": EXIT_ERROR}


def check_targets(
    named_targets: list[tuple[str, Any]], rules: tuple[Rule, ...], jobs: int, progress: bool, **check_options
) -> list[HostOutcome]:
    """Run ``check`` on each (name, target) in parallel; failures stay per host."""
    from .check import run_check

    def one(name: str, target) -> HostOutcome:
        try:
            return HostOutcome(name, report=run_check(target, rules, **check_options))
        except ToolError as exc:
            return HostOutcome(name, error=str(exc))

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(one, name, target) for name, target in named_targets]
        if progress:
            from rich.progress import Progress

            with Progress(transient=True, console=_stderr_console()) as bar:
                task = bar.add_task("checking hosts", total=len(futures))
                for future in futures:
                    future.add_done_callback(lambda _: bar.advance(task))
                return [future.result() for future in futures]
        return [future.result() for future in futures]


def fleet_exit_code(outcomes: list[HostOutcome]) -> int:
    """The worst over all hosts: 3 if any host could not be checked, else 1 if
    any host's own code is 1 (its --strict and waivers counted), else 2, else 0."""
    codes = {EXIT_ERROR if o.report is None else o.report.exit_code for o in outcomes}
    for code in (EXIT_ERROR, EXIT_MISSING, EXIT_UNKNOWN):
        if code in codes:
            return code
    return EXIT_OK


def fleet_json(outcomes: list[HostOutcome]) -> dict[str, Any]:
    return {"schema": FLEET_SCHEMA, "hosts": [o.to_json() for o in outcomes], "exit_code": fleet_exit_code(outcomes)}


def _stderr_console():
    from rich.console import Console

    return Console(file=sys.stderr)
