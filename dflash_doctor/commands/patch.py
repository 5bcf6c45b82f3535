"""`patch` and `restore`: apply a missing fix in place, or give the original back.

The verdict report goes to standard output (the diff, with ``--dry-run``);
what is patched or refused goes to standard error.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from ..model import EXIT_OK, ToolError
from .options import OnlyOption, PathOption, PythonOption, choose_target

ReleaseRefusedOption = typer.Option(None, "--release", help="Refused: release trees are a download cache, not an install.")
YesOption = typer.Option(False, "--yes", "-y", help="Apply without asking (needed when there is no terminal).")


def patch(
    path: Optional[Path] = PathOption,
    python: Optional[str] = PythonOption,
    release: Optional[str] = ReleaseRefusedOption,
    only: Optional[list[str]] = OnlyOption,
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the unified diff and change nothing."),
    yes: bool = YesOption,
) -> int:
    """Patch missing DFlash fixes into an installed vLLM, prove them, and keep a backup.
    Exit: 0 every selected fix present afterwards, 1 some still absent/partial/not-applicable
    (refused, with the reason), 2 some unknown, 3 could not run (nothing half-written)."""
    from .. import __version__
    from ..cache import checked_fixes
    from ..check import run_check
    from ..model import exit_code_for
    from ..patching import files_for
    from ..patching.apply import apply_changes
    from ..patching.plan import plan_patches
    from ..rules import select

    rules = select(only)
    target, resolved = _installed_target(path, python, release)
    plan = plan_patches(resolved.tree, rules, checked_fixes(resolved.tree, rules))
    for change in plan.changes:
        for site in change.sites:
            _say(f"{site.fix}: {site.file}:{site.line} {site.symbol} [{site.form} -> {site.produces}]")
    for refusal in plan.refusals:
        _say(f"{refusal.fix}: not patched: {refusal.reason}")
    if dry_run:
        sys.stdout.write("".join(change.diff() for change in plan.changes))
        _say("dry run: nothing was changed" if plan.changes else "nothing to patch")
        return exit_code_for(fix.status for fix in plan.after)
    if plan.changes:
        files = files_for(resolved)
        _confirm(f"Patch {', '.join(plan.fixes)} in {resolved.info.location}?", yes,
                 "".join(change.diff() for change in plan.changes))
        apply_changes(files, plan.changes, __version__)
        _say(f"patched {', '.join(change.file for change in plan.changes)}; `dflash-doctor restore` undoes it")
    elif not plan.refusals:
        _say("nothing to patch: every selected fix is present")
    return _report(run_check(target, rules))


def restore(
    path: Optional[Path] = PathOption,
    python: Optional[str] = PythonOption,
    release: Optional[str] = ReleaseRefusedOption,
    only: Optional[list[str]] = OnlyOption,
    yes: bool = YesOption,
) -> int:
    """Give back the files `patch` changed, byte for byte, and re-check. Refuses a file
    changed since it was patched. Exit: 0 restored (or nothing to restore), 3 could not run."""
    from ..check import run_check
    from ..patching import files_for
    from ..patching.apply import apply_restore, plan_restore
    from ..rules import select

    rules = select(only)
    target, resolved = _installed_target(path, python, release)
    files = files_for(resolved)
    plan = plan_restore(files, frozenset(rule.id for rule in rules) if only else None)
    if not plan.restore and not plan.forget:
        _say("nothing to restore: dflash-doctor has not patched " + ("these fixes" if only else "this tree"))
        return EXIT_OK
    for entry in plan.restore:
        _say(f"{', '.join(sorted(entry.fixes))}: {entry.file} back to its original (sha256 {entry.sha256_before[:12]})")
    for entry in plan.forget:
        _say(f"{', '.join(sorted(entry.fixes))}: {entry.file} already has its original bytes; forgetting the patch record")
    if plan.restore:
        _confirm(f"Restore {len(plan.restore)} file(s) in {resolved.info.location}?", yes)
    apply_restore(files, plan)
    _report(run_check(target, rules))
    return EXIT_OK


def _installed_target(path: Optional[Path], python: Optional[str], release: Optional[str]):
    """The target and its resolved tree; release trees are refused."""
    from ..paths import cache_dir

    refusal = "release trees are dflash-doctor's download cache, not an installation; give --path or --python"
    if release is not None:
        raise ToolError(f"--release: {refusal}")
    target = choose_target(path, python, None)
    resolved = target.resolve()
    releases = (cache_dir() / "releases").resolve()
    if Path(resolved.info.location).resolve().is_relative_to(releases):
        raise ToolError(f"{resolved.info.location}: {refusal}")
    return target, resolved


def _confirm(question: str, yes: bool, shown: str = "") -> None:
    """Ask on the terminal after showing ``shown``; without one, only --yes goes ahead."""
    if yes:
        return
    if not sys.stdin.isatty():
        hint = " (or --dry-run to see the diff)" if shown else ""
        raise ToolError(f"refusing to change files without confirmation: there is no terminal to ask on; pass --yes{hint}")
    sys.stdout.write(shown)
    if not typer.confirm(question, default=False):
        raise typer.Abort()


def _report(report) -> int:
    from ..reporters import reporter

    sys.stdout.write(reporter("table").render(report, terminal=sys.stdout.isatty()))
    return report.exit_code


def _say(line: str) -> None:
    print(f"dflash-doctor: {line}", file=sys.stderr)


def register(app: typer.Typer) -> None:
    app.command()(patch)
    app.command()(restore)
