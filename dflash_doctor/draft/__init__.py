"""The drafter's own config: lint it (for the engine it is served by), and show what a vLLM tree computes for it.

``draft_sections`` is what ``check --draft-config`` adds to a CheckReport.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..cache import judged_fixes
from .lint import lint_report, with_hf
from .render import DraftSection, ProbesSection

if TYPE_CHECKING:
    from ..model import FixResult, Section
    from ..rules import Rule
    from ..targets import ResolvedTarget


def draft_sections(
    resolved: ResolvedTarget, rules: tuple[Rule, ...], draft_config: Path, target_config: Path | None
) -> tuple[tuple[Section, ...], tuple[FixResult, ...]]:
    """The ``draft`` and ``probes`` report sections, and the fixes judged with the
    user's config as the one that gates. Raises ToolError for unreadable input."""
    target = None if target_config is None else Path(target_config)
    report = lint_report(Path(draft_config), target, resolved.tree.engine.name)  # linted for the tree's engine
    fixes, probes = judged_fixes(resolved, rules, report.config)
    if probes is not None and probes.hf_source is not None:  # the window finding from the object the verdict used
        from ..behaviour.hf_config import HfView

        report = with_hf(report, HfView(probes.hf_config or {}, probes.hf_source))
    sections: list[Section] = [DraftSection(report)]
    if probes is not None:  # None where the target cannot run the tree's code: the fixes say why
        sections.append(ProbesSection(probes))
    return tuple(sections), fixes
