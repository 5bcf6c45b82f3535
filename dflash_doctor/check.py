"""The check job: target -> tree -> rules -> report."""

from __future__ import annotations

from . import __version__
from .cache import checked_fixes
from .model import CheckReport
from .patching.state import mark_local_patches
from .provenance import read_provenance
from .rules import Rule
from .targets import Target


def run_check(target: Target, rules: tuple[Rule, ...]) -> CheckReport:
    resolved = target.resolve()
    fixes = checked_fixes(resolved.tree, rules)
    provenance = read_provenance(resolved.tree)
    return mark_local_patches(CheckReport(resolved.info, provenance, fixes, __version__), resolved.tree)
