"""What ``ancestry`` answers, per PR and per judged commit."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..model import EXIT_MISSING, EXIT_OK, EXIT_UNKNOWN

CONTAINED = "contained"
MISSING = "missing"
UNKNOWN = "unknown"
SCHEMA = "dflash-doctor/ancestry/v1"


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
    repo: str
    commit: str
    commit_source: str | None
    main_ref: str
    prs: tuple[PrAncestry, ...]

    @property
    def exit_code(self) -> int:
        """0 all contained, 1 any missing, else 2 any unknown (as ``check``)."""
        seen = {entry.status for entry in self.prs}
        if MISSING in seen:
            return EXIT_MISSING
        if UNKNOWN in seen:
            return EXIT_UNKNOWN
        return EXIT_OK

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "repo": self.repo,
            "commit": self.commit,
            "commit_source": self.commit_source,
            "prs": [entry.to_json() for entry in self.prs],
        }


def short_sha(sha: str | None) -> str:
    return sha[:12] if sha else "-"
