"""The check job: target -> tree -> rules -> report."""

from __future__ import annotations

from pathlib import Path

from . import __version__
from .cache import checked_fixes
from .model import CheckReport
from .patching.state import mark_local_patches
from .provenance import read_provenance
from .rules import Rule
from .targets import Target


def run_check(
    target: Target, rules: tuple[Rule, ...], draft_config: Path | None = None, target_config: Path | None = None
) -> CheckReport:
    """With ``draft_config``, the report also lints the drafter and probes what this
    tree computes for it; a fix a probe contradicts becomes ``unknown``."""
    resolved = target.resolve()
    fixes = checked_fixes(resolved.tree, rules)
    sections = ()
    if draft_config is not None:
        from .draft import draft_sections

        sections, fixes = draft_sections(resolved.tree, draft_config, target_config, fixes)
    provenance = read_provenance(resolved.tree)
    report = CheckReport(resolved.info, provenance, fixes, __version__, sections=sections)
    return mark_local_patches(report, resolved.tree)
