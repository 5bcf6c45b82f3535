"""The drafter's own config: lint it, and probe what a vLLM tree computes for it.

``draft_sections`` is what ``check --draft-config`` adds to a CheckReport.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the command modules import this package: keep it light
    from ..model import FixResult
    from ..source import SourceTree


def draft_sections(
    tree: SourceTree, draft_config: Path, target_config: Path | None, fixes: tuple[FixResult, ...]
) -> tuple[tuple[tuple[str, Any], ...], tuple[FixResult, ...]]:
    """The ``draft`` and ``probes`` report sections, and ``fixes`` with every fix
    the probes contradict turned ``unknown``. Raises ToolError for unreadable input."""
    from .config import lint_report
    from .probes import apply_disagreements, disagreements, run_probes

    report = lint_report(Path(draft_config), None if target_config is None else Path(target_config))
    probes = run_probes(tree, report.config)
    found = disagreements(probes, fixes, report.config)
    probes = dataclasses.replace(probes, disagreements=found)
    return (("draft", report.to_json()), ("probes", probes.to_json())), apply_disagreements(fixes, found)
