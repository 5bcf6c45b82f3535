"""Waivers: known gaps a team accepts for a while, each with a reason.

A waivers file is TOML with one ``[[waiver]]`` table per entry::

    [[waiver]]
    id = "cache-drop"              # fix id (required)
    target = "gpu-*"               # glob against the target's location, host, python or release (optional)
    reason = "prefix caching off"  # why the gap is accepted (required)
    until = 2026-09-30             # last day it applies (optional)

An active waiver that matches a fix which is not ``present`` keeps that fix
from failing the gate. An expired one is reported and not applied.
"""

from __future__ import annotations

import dataclasses
import datetime
import fnmatch
import tomllib
from pathlib import Path
from typing import Any, ClassVar

from .model import PRESENT, CheckReport, TargetInfo, ToolError, Waiver
from .paths import read_file

KEYS = ("id", "target", "reason", "until")
MAX_WAIVERS_BYTES = 1024 * 1024


@dataclasses.dataclass(frozen=True)
class WaiversSection:
    """What the waivers file did to a report: not in the table, said on standard error (``summary``)."""

    file: str
    waived: tuple[tuple[str, Waiver], ...]  # (the fix's status, the waiver that covers it)
    expired: tuple[Waiver, ...]
    not_needed: tuple[Waiver, ...]
    name: ClassVar[str] = "waivers"

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "waived": [{"status": status, **waiver.to_json()} for status, waiver in self.waived],
            "expired": [waiver.to_json() for waiver in self.expired],
            "not_needed": [waiver.to_json() for waiver in self.not_needed],
        }

    def lines(self) -> list[str]:
        return []

    def summary(self) -> list[str]:
        """One line each: printed on every run that has a waivers file."""
        count = len(self.waived)
        lines = [f"{count} fix{'' if count == 1 else 'es'} waived by {self.file}"]
        for status, waiver in self.waived:
            lines.append(f"waived {waiver.id} ({status}){_until(waiver)}: {waiver.reason}")
        for waiver in self.expired:
            assert waiver.until is not None  # it expired on that day
            lines.append(f"expired waiver not applied: {waiver.id} (until {waiver.until.isoformat()}): {waiver.reason}")
        for waiver in self.not_needed:
            lines.append(f"waiver not needed, the fix is present: {waiver.id}: {waiver.reason}")
        return lines


def load_waivers(path: Path, known_ids: set[str]) -> tuple[Waiver, ...]:
    """Every waiver in the file; any defect is a ToolError naming the entry."""
    where = f"waivers file {path}"
    raw = read_file(path, MAX_WAIVERS_BYTES, "waivers file")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ToolError(f"{where} is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ToolError(f"{where} is not valid TOML: {exc}") from None
    except ValueError as exc:  # Python's limit on the digits of an integer it reads
        raise ToolError(f"{where} holds an integer too long to be a waiver value ({str(exc).split(':')[0]})") from None
    except RecursionError:  # inline arrays or tables nested thousands deep
        raise ToolError(f"{where} is nested too deeply to be a waivers file") from None
    extra = sorted(set(data) - {"waiver"})
    if extra:
        raise ToolError(f"{where}: unexpected key {extra[0][:80]!r} (entries are [[waiver]] tables)")
    entries = data.get("waiver", [])
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        raise ToolError(f"{where}: 'waiver' must be an array of tables ([[waiver]])")
    return tuple(_waiver(entry, f"{where}: waiver {number}", known_ids) for number, entry in enumerate(entries, 1))


def _waiver(entry: dict[str, Any], where: str, known_ids: set[str]) -> Waiver:
    extra = sorted(set(entry) - set(KEYS))
    if extra:
        raise ToolError(f"{where}: unexpected key {extra[0][:80]!r} (allowed: {', '.join(KEYS)})")
    fix_id = entry.get("id")
    if not isinstance(fix_id, str) or not fix_id:
        raise ToolError(f"{where}: 'id' (a fix id) is required")
    where = f"{where} ({fix_id[:80]!r})"  # quoted: an id of several lines stays on the error's one line
    if fix_id not in known_ids:
        raise ToolError(f"{where}: unknown fix id (known: {', '.join(sorted(known_ids))})")
    reason = entry.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise ToolError(f"{where}: 'reason' is required and must be a non-empty string")
    target = entry.get("target")
    if target is not None and (not isinstance(target, str) or not target):
        raise ToolError(f"{where}: 'target' must be a non-empty glob string")
    return Waiver(fix_id, " ".join(reason.split()), target, _date(entry.get("until"), where))


def _date(value: Any, where: str) -> datetime.date | None:
    if value is None:
        return None
    if isinstance(value, datetime.datetime) or not isinstance(value, (datetime.date, str)):
        raise ToolError(f"{where}: 'until' must be a date like 2026-09-30")
    if isinstance(value, datetime.date):
        return value
    try:
        return datetime.date.fromisoformat(value)
    except ValueError:
        raise ToolError(f"{where}: 'until' must be a date like 2026-09-30, not {value[:80]!r}") from None


def matches_target(waiver: Waiver, target: TargetInfo) -> bool:
    """No pattern matches every target; else the glob must match the location or a detail (host, python, release)."""
    if waiver.target is None:
        return True
    values = [target.location, *(str(value) for _, value in target.details)]
    return any(fnmatch.fnmatchcase(value, waiver.target) for value in values)


def apply_waivers(
    report: CheckReport, waivers: tuple[Waiver, ...], source: Path, today: datetime.date | None = None
) -> CheckReport:
    """The report with active waivers set on the fixes they cover, and a ``waivers`` section saying what happened."""
    today = today or datetime.date.today()
    relevant = [w for w in waivers if matches_target(w, report.target) and any(f.id == w.id for f in report.fixes)]
    expired = [w for w in relevant if w.until is not None and w.until < today]
    active = [w for w in relevant if w not in expired]
    fixes, waived, unneeded = [], [], []
    for fix in report.fixes:
        waiver = next((w for w in active if w.id == fix.id), None)
        if waiver is not None and fix.status == PRESENT:
            unneeded.append(waiver)
            waiver = None
        if waiver is not None:
            fix = dataclasses.replace(fix, waiver=waiver)
            waived.append((fix.status, waiver))
        fixes.append(fix)
    section = WaiversSection(str(source), tuple(waived), tuple(expired), tuple(unneeded))
    return dataclasses.replace(report, fixes=tuple(fixes), sections=(*report.sections, section))


def waiver_summary(report: CheckReport) -> list[str]:
    """What the waivers did in this run (nothing without a waivers file)."""
    return [line for section in report.sections if isinstance(section, WaiversSection) for line in section.summary()]


def _until(waiver: Waiver) -> str:
    return f" until {waiver.until.isoformat()}" if waiver.until else ""
