"""What the corpus saw, printed at the end of the session: every ``unknown``
by name, and the right / unknown / wrong counts per fix and kind."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import dflash_doctor

# The verdicts that are right for each kind of edit; `unknown` is allowed (and
# listed); anything else (absent for a kept fix, present or not-applicable for a
# broken one) is a confident wrong answer.
RIGHT = {"preserve": {"present"}, "break": {"absent", "partial"}, "add": {"present"}}


def outcome(kind: str, status: str) -> str:
    if status == "unknown":
        return "unknown"
    return "right" if status in RIGHT[kind] else "wrong"


class CorpusSummary:
    """A pytest plugin: tests record (edit, status); the terminal summary lists them."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[str, str, str]] = {}  # edit id -> (fix, kind, status)

    def record(self, edit, status: str) -> None:
        self.seen[edit.id] = (edit.subject, edit.kind, status)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.seen:
            return
        write = terminalreporter.write_line
        # Which engine answered: `python -m pytest` puts the working directory first on sys.path.
        write(f"corpus engine: {Path(dflash_doctor.__file__).parent}")
        unknowns = [name for name, (_, _, status) in self.seen.items() if status == "unknown"]
        write(f"corpus unknowns: {', '.join(unknowns) if unknowns else 'none'}")
        counts: dict[tuple[str, str], dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
        for name, (fix, kind, status) in self.seen.items():
            counts[fix, kind][outcome(kind, status)].append(name)
        for (fix, kind), by_outcome in sorted(counts.items()):
            wrong = by_outcome["wrong"]
            write(
                f"corpus {fix} {kind}: {len(by_outcome['right'])} right, {len(by_outcome['unknown'])} unknown, "
                f"{len(wrong)} wrong" + (f" ({', '.join(wrong)})" if wrong else "")
            )
