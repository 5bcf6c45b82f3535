"""The accept report: one frozen value, rendered as JSON or as a table."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from ..terminal import clean, literal, terminal_text
from .diagnose import COLLAPSE, NO_REFERENCE, TOO_LITTLE_DATA, WITHIN_BAND, Diagnosis
from .load import LoadResult
from ..engines import named
from .measurement import GAUGE, METRICS, Measurement
from .reference import Expected
from .server_info import ServerState

SCHEMA = "dflash-doctor/accept/v1"


@dataclasses.dataclass(frozen=True)
class AcceptReport:
    measurement: Measurement
    expected: Expected | None
    diagnosis: Diagnosis
    load: LoadResult | None
    notes: tuple[str, ...]
    tool_version: str
    server: ServerState | None = None  # what the server says about itself, where its engine has such an endpoint

    @property
    def exit_code(self) -> int:
        return self.diagnosis.exit_code

    def to_json(self) -> dict[str, Any]:
        m = self.measurement
        return {
            "schema": SCHEMA,
            "tool_version": self.tool_version,
            "source": {"kind": m.kind, "url": m.url, "model": m.model, "engine": m.engine},
            "acceptance_length": _round(m.acceptance_length),
            "draft_acceptance_rate": _round(m.draft_acceptance_rate),
            "per_position": [round(rate, 4) for rate in m.per_position],
            "drafts": m.drafts,
            "draft_tokens": m.draft_tokens,
            "accepted_tokens": m.accepted_tokens,
            "window_s": None if m.window_s is None else round(m.window_s, 3),
            "restarted": m.restarted,
            "mean_prompt_tokens": _round(m.mean_prompt_tokens, 1),
            "load": None if self.load is None else self.load.to_json(),
            "expected": None if self.expected is None else self.expected.to_json(),
            "diagnosis": self.diagnosis.to_json(),
            "server": None if self.server is None else self.server.to_json(),
            "notes": list(self.notes),
            "exit_code": self.exit_code,
        }


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


STYLES = {WITHIN_BAND: "bold green", NO_REFERENCE: "bold green", TOO_LITTLE_DATA: "bold magenta", COLLAPSE: "bold red"}


def _rows(report: AcceptReport) -> list[tuple[str, str]]:
    m = report.measurement
    display = named(m.engine).display
    what = {METRICS: "metrics", GAUGE: "acceptance gauge"}.get(m.source, "server info")
    scope = f"model {m.model}" if m.model else "all models"
    if m.window_s is not None:
        span = f"window of {m.window_s:.2f} s"
    elif m.source == METRICS:
        span = "totals since the server started"
    elif m.source == GAUGE:
        span = "its last interval"
    else:
        span = "running average since the server started"
    rows = [("source", f"{display} {what} at {m.url} ({scope}; {span})")]
    server = report.server
    if server is not None:
        said = [
            f"{name} {value}"
            for name, value in (
                ("version", server.version),
                ("algorithm", server.algorithm),
                ("block size", server.block_size),
                ("drafter", server.drafter),
            )
            if value is not None
        ]
        rows.append(("server", f"{', '.join(said) or 'says nothing of its drafting'} ({server.url})"))
    if m.acceptance_length is None:
        rows.append(("acceptance", "no drafts recorded"))
    elif m.drafts is None:
        rows.append(("acceptance", f"{m.acceptance_length:.2f} mean acceptance length ({display} {what}, no counts)"))
    else:
        rows.append(
            (
                "acceptance",
                f"{m.acceptance_length:.2f} mean acceptance length (1 + {m.accepted_tokens:,} accepted / "
                f"{m.drafts:,} drafts)",
            )
        )
    if m.draft_acceptance_rate is not None:
        rows.append(("draft rate", f"{m.draft_acceptance_rate:.1%} of {m.draft_tokens:,} draft tokens accepted"))
    if m.per_position and m.acceptance_length is not None:
        rows.append(("per position", " ".join(f"{rate:.2f}" for rate in m.per_position)))
    if m.mean_prompt_tokens is not None:
        rows.append(("prompts", f"{m.mean_prompt_tokens:,.0f} tokens on average"))
    if report.load is not None:
        load = report.load
        failed = f"; {len(load.errors)} failed: {', '.join(sorted(set(load.errors)))}" if load.errors else ""
        rows.append(
            (
                "load",
                f"{load.answered} of {load.prompts} prompts answered in {load.seconds:.1f} s by "
                f"{load.base_url}{failed}",
            )
        )
    if report.expected is not None:
        e = report.expected
        dataset = e.dataset or f"unknown mix: lowest figure, {e.figure_dataset}"
        rows.append(
            (
                "expected",
                f">= {e.floor:.2f} = {e.tolerance:g} x {e.figure:.2f} ({e.drafter}, {dataset}, temperature "
                f"{e.temperature:g}; {e.source.title}, {e.source.url})",
            )
        )
    rows.append(("diagnosis", f"{report.diagnosis.code}: {report.diagnosis.text}"))
    rows.extend(("note", note) for note in report.notes)
    return rows


def render(report: AcceptReport, format: str, terminal: bool) -> str:
    if format == "json":
        return json.dumps(report.to_json(), indent=2) + "\n"
    rows = _rows(report)
    if not terminal:
        return "".join(f"{key:<13}{clean(value)}\n" for key, value in rows)
    from rich.table import Table
    from rich.text import Text

    table = Table(show_header=False, show_lines=False, box=None, padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")  # only a word longer than the column (a URL) is cut
    style = STYLES.get(report.diagnosis.code, "bold yellow")
    for key, value in rows:
        if key == "diagnosis":
            code, text = value.split(": ", 1)
            table.add_row(key, Text.assemble((clean(code), style), ": " + clean(text)))
        else:
            table.add_row(key, literal(value))
    return terminal_text(table)
