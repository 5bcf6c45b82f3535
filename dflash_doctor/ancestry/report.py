"""What ``ancestry`` answers, per PR and per judged commit."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from ..model import EXIT_MISSING, EXIT_OK, EXIT_UNKNOWN, exit_code_for
from ..terminal import clean

CONTAINED = "contained"
MISSING = "missing"
UNKNOWN = "unknown"
SCHEMA = "dflash-doctor/ancestry/v1"
STATUS_CODES = {CONTAINED: EXIT_OK, MISSING: EXIT_MISSING, UNKNOWN: EXIT_UNKNOWN}  # each PR's part in the exit code


@dataclasses.dataclass(frozen=True)
class PrAncestry:
    pr: int
    fix: str | None
    status: str
    method: str
    evidence: tuple[tuple[str, Any], ...]
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {
            "pr": self.pr,
            "fix": self.fix,
            "status": self.status,
            "method": self.method,
            "evidence": dict(self.evidence),
            "reason": self.reason,
        }


@dataclasses.dataclass(frozen=True)
class AncestryReport:
    """What ``ancestry`` prints, and the ``ancestry`` section ``check --repo`` adds to its report."""

    repo: str
    commit: str
    commit_source: str | None
    main_ref: str
    prs: tuple[PrAncestry, ...]
    name: ClassVar[str] = "ancestry"

    @property
    def exit_code(self) -> int:
        """0 all contained, 1 any missing, else 2 any unknown (as ``check``)."""
        return exit_code_for(STATUS_CODES[entry.status] for entry in self.prs)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "repo": self.repo,
            "commit": self.commit,
            "commit_source": self.commit_source,
            "prs": [entry.to_json() for entry in self.prs],
        }

    def lines(self) -> list[str]:
        """The check table's footer: one line per PR."""
        lines = [f"ancestry of {self.commit} in {self.repo}:"]
        lines += [f"    #{entry.pr} ({entry.fix}): {entry.status} by {entry.method}" for entry in self.prs]
        return [clean(line) for line in lines]


def short_sha(sha: str | None) -> str:
    return sha[:12] if sha else "-"
