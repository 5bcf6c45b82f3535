"""The drafter's own config: lint it, and show what a vLLM tree computes for it.

``draft_sections`` is what ``check --draft-config`` adds to a CheckReport.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the command modules import this package: keep it light
    from ..model import FixResult
    from ..rules import Rule
    from ..targets import ResolvedTarget


def draft_sections(
    resolved: ResolvedTarget, rules: tuple[Rule, ...], draft_config: Path, target_config: Path | None
) -> tuple[tuple[tuple[str, Any], ...], tuple[FixResult, ...]]:
    """The ``draft`` and ``probes`` report sections, and the fixes judged with the
    user's config as the one that gates. Raises ToolError for unreadable input."""
    from ..cache import judged_fixes
    from .lint import lint_report

    report = lint_report(Path(draft_config), None if target_config is None else Path(target_config))
    fixes, probes = judged_fixes(resolved, rules, report.config)
    sections = [("draft", report.to_json())]
    if probes is not None:  # None where the target cannot run the tree's code: the fixes say why
        sections.append(("probes", probes.to_json()))
    return tuple(sections), fixes
