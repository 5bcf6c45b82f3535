"""The check job: target -> tree -> behaviour and structure -> report."""

from __future__ import annotations

from pathlib import Path

from . import __version__
from .cache import judged_fixes
from .model import CheckReport
from .patching.state import mark_local_patches
from .provenance import read_provenance
from .rules import Rule
from .targets import Target, opened


def run_check(
    target: Target, rules: tuple[Rule, ...], draft_config: Path | None = None, target_config: Path | None = None
) -> CheckReport:
    """Behaviour runs on the reference drafter configs wherever the target can run
    the tree's code; with ``draft_config`` the user's config is added (its answer
    gates) and the report also lints it and shows what the tree computes for it."""
    sections = ()
    with opened(target):
        resolved = target.resolve()
        if draft_config is None:
            fixes, _ = judged_fixes(resolved, rules)
        else:
            from .draft import draft_sections

            sections, fixes = draft_sections(resolved, rules, draft_config, target_config)
    provenance = read_provenance(resolved.tree)
    report = CheckReport(resolved.info, provenance, fixes, __version__, sections=sections)
    return mark_local_patches(report, resolved.tree)
