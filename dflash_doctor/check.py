"""The check job: target -> tree -> behaviour and structure -> report."""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from . import __version__
from .cache import judged_fixes
from .model import CheckReport, Section
from .patching.state import mark_local_patches
from .provenance import for_distribution, read_provenance
from .rules import Rule, for_engine
from .targets import Target, opened

if TYPE_CHECKING:
    from .model import FixResult, Section
    from .targets import ResolvedTarget


def run_check(
    target: Target, rules: tuple[Rule, ...], draft_config: Path | None = None, target_config: Path | None = None
) -> CheckReport:
    """Behaviour runs on the reference drafter configs wherever the target can run
    the tree's code; with ``draft_config`` the user's config is added (its answer
    gates) and the report also lints it and shows what the tree computes for it."""
    sections: tuple[Section, ...] = ()
    with fewer_collections(), opened(target):
        resolved = target.resolve()
        rules = for_engine(rules, resolved.tree.engine.name)  # the tree's engine's rule of each fix
        if draft_config is None:
            fixes, _ = judged_fixes(resolved, rules)
        else:
            sections, fixes = draft_sections(resolved, rules, draft_config, target_config)
        counted = getattr(
            target, "counted", None
        )  # what the target moved while the check ran (ssh: the bytes a miss fetched)
        info = counted(resolved.info) if counted is not None else resolved.info
    provenance = read_provenance(resolved.tree)
    report = CheckReport(info, provenance, for_distribution(fixes, provenance), __version__, sections=sections)
    return mark_local_patches(report, resolved.tree)


def draft_sections(
    resolved: ResolvedTarget, rules: tuple[Rule, ...], draft_config: Path, target_config: Path | None
) -> tuple[tuple[Section, ...], tuple[FixResult, ...]]:
    """The ``draft`` and ``probes`` report sections, and the fixes judged with the
    user's config as the one that gates. Raises ToolError for unreadable input."""
    # warm check: the draft package (lint, render) only with --draft-config
    from .behaviour.computed import ProbesSection
    from .draft.lint import lint_report, with_hf
    from .draft.render import DraftSection

    target = None if target_config is None else Path(target_config)
    report = lint_report(Path(draft_config), target, resolved.tree.engine.name)  # linted for the tree's engine
    fixes, probes = judged_fixes(resolved, rules, report.config, report.target)
    if probes is not None and probes.hf_source is not None:  # the window finding from the object the verdict used
        from .draft.config import HfView

        report = with_hf(report, HfView(probes.hf_config or {}, probes.hf_source))
    sections: list[Section] = [DraftSection(report)]
    if probes is not None:  # None where the target cannot run the tree's code: the fixes say why
        sections.append(ProbesSection(probes))
    return tuple(sections), fixes


# The collector's thresholds during a check (the defaults are 700, 10, 10).
CHECK_GC_THRESHOLDS = (20_000, 50, 1_000)
_running = 0  # checks running in this process
_before: tuple[int, ...] = ()  # the thresholds from before the first of them
_running_lock = threading.Lock()


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """A check builds parse trees that live to its end: with the default thresholds
    the cycle collector walks them again and again while they grow, ~0.3 s of a
    1.5 s cold check on 0.33.0 (benchmarks/bench_check.py). What a check drops is
    freed by reference counting, so the collector runs rarely until the check ends.
    The thresholds are the process's: counted, so that checks in threads (a fleet)
    raise them once and the last one to end puts back what was there before.
    Putting them back walks what is still alive at once (~0.4 s: the parse trees
    the tree's cache keeps), so the ``check`` command, which ends its process,
    raises them for the whole process first (``for_this_process``)."""
    global _running, _before
    with _running_lock:
        if _running == 0:
            _before = gc.get_threshold()
            gc.set_threshold(*CHECK_GC_THRESHOLDS)
        _running += 1
    try:
        yield
    finally:
        with _running_lock:
            _running -= 1
            if _running == 0:
                gc.set_threshold(*_before)


def for_this_process() -> None:
    """Keep the check's thresholds until the process ends (a command that exits after its checks)."""
    gc.set_threshold(*CHECK_GC_THRESHOLDS)
