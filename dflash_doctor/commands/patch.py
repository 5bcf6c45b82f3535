"""`patch` and `restore`: apply a missing fix in place, or give the original back.

The verdict report goes to standard output (the diff, with ``--dry-run``);
what is patched or refused goes to standard error. With ``--host`` the
check, the writes (SFTP) and the re-check share one ssh connection.
``patch --repo DIR --pr N`` applies a PR's change to a git checkout instead.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from ..model import EXIT_MISSING, EXIT_OK, CheckReport, ToolError
from ..terminal import clean
from ..engines import DEFAULT_ENGINE, ENGINE_NAMES
from .options import SSH, OnlyOption, PathOption, PythonOption, SingleHostOption, expand, target_spec

if TYPE_CHECKING:
    from ..targets.hosts import SshOptions
    from ..targets.selection import TargetSpec

if TYPE_CHECKING:
    from ..patching.apply import RestorePlan
    from ..targets.selection import TargetSpec

ReleaseRefusedOption = typer.Option(
    None, "--release", help="Refused: release trees are a download cache, not an install."
)
ImageRefusedOption = typer.Option(
    None, "--image", help="Refused: an image is patched when it is built (see docs/images.md)."
)
YesOption = typer.Option(False, "--yes", "-y", help="Apply without asking (needed when there is no terminal).")
EngineOption = typer.Option(
    "auto",
    "--engine",
    help=(
        "The engine whose tree is patched: auto (the one engine --path or --python holds; "
        f"{DEFAULT_ENGINE.display} for --host), {ENGINE_NAMES}."
    ),
)


def patch(
    path: Optional[Path] = PathOption,
    python: Optional[str] = PythonOption,
    release: Optional[str] = ReleaseRefusedOption,
    image: Optional[str] = ImageRefusedOption,
    host: Optional[str] = SingleHostOption,
    only: Optional[list[str]] = OnlyOption,
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the unified diff and change nothing."),
    yes: bool = YesOption,
    repo: Optional[Path] = typer.Option(
        None, "--repo", help="A vLLM or SGLang git checkout: apply --pr's change to its working tree instead."
    ),
    pr: Optional[int] = typer.Option(
        None, "--pr", help="With --repo: the PR whose change to apply (its landing on main, else refs/pull/N/head)."
    ),
    main_ref: Optional[str] = typer.Option(
        None, "--main-ref", help="With --repo: the main line (default origin/main, else main)."
    ),
    remote: str = typer.Option("origin", "--remote", help="With --repo: the remote named in fetch hints."),
    engine: str = EngineOption,
    ssh: SshOptions = SSH,
) -> int:
    """Patch missing fixes into an installed vLLM or SGLang. Each fix is proved by a re-check, and the original
    files are kept for `restore`.

    Exit: 0 every selected fix present afterwards, 1 some still absent/partial/not-applicable
    (refused, with the reason), 2 some unknown, 3 could not run (nothing half-written).
    With --repo/--pr: 0 applied or already there, 1 conflict (nothing changed), 3 could not run.
    """
    from .. import api

    if repo is not None or pr is not None:
        given = [
            name
            for name, value in (
                ("--path", path),
                ("--python", python),
                ("--release", release),
                ("--host", host),
                ("--image", image),
                ("--only", only),
            )
            if value
        ]
        if given:
            raise ToolError(f"--repo/--pr patch a git checkout: give them without {given[0]}")
        if repo is None or pr is None:
            raise ToolError("give --repo and --pr together")
        return _patch_repo(repo, pr, main_ref, remote, dry_run, yes)
    request = api.PatchRequest(
        _spec(path, python, release, image, host, ssh, engine),
        tuple(only or ()),
    )
    with api.patching(request, dry_run) as session:
        plan = session.plan
        for change in plan.changes:
            for site in change.sites:
                _say(f"{site.fix}: {site.file}:{site.line} {site.symbol} [{site.form} -> {site.produces}]")
        for refusal in plan.refusals:
            _say(f"{refusal.fix}: not patched: {refusal.reason}")
        if dry_run:
            _show("".join(change.diff() for change in plan.changes))
            _say("dry run: nothing was changed" if plan.changes else "nothing to patch")
            return session.dry_run_code
        if plan.changes:
            _confirm(
                f"Patch {', '.join(plan.fixes)} in {session.location}?",
                yes,
                "".join(change.diff() for change in plan.changes),
                f"nothing was changed in {session.location}",
            )
            session.apply()
            _say(f"patched {', '.join(change.file for change in plan.changes)}; `dflash-doctor restore` undoes it")
        report = session.recheck()
        unpatched = session.unpatched(report)
        for line in unpatched:  # the defect behaviour sees where the forms read present
            _say(line)
        if not plan.changes and not plan.refusals and not unpatched:
            _say("nothing to patch: every selected fix is present")
        return _report(report)


def restore(
    path: Optional[Path] = PathOption,
    python: Optional[str] = PythonOption,
    release: Optional[str] = ReleaseRefusedOption,
    image: Optional[str] = ImageRefusedOption,
    host: Optional[str] = SingleHostOption,
    only: Optional[list[str]] = OnlyOption,
    yes: bool = YesOption,
    engine: str = EngineOption,
    ssh: SshOptions = SSH,
) -> int:
    """Give back the files `patch` changed. Byte for byte, then re-checked; a file changed since
    it was patched is refused.

    Exit: 0 restored (or nothing to restore), 3 could not run.
    """
    from .. import api

    request = api.PatchRequest(
        _spec(path, python, release, image, host, ssh, engine),
        tuple(only or ()),
    )

    def confirm(plan: RestorePlan, location: str) -> None:
        _confirm(
            f"Restore {', '.join(entry.file for entry in plan.restore)} in {location}?",
            yes,
            unchanged=f"nothing was restored in {location}",
        )

    result = api.restore(request, confirm)
    if result.report is None:
        _say("nothing to restore: dflash-doctor has not patched " + ("these fixes" if only else "this tree"))
        return result.exit_code
    for entry in result.plan.restore:
        _say(
            f"{', '.join(sorted(entry.fixes))}: {entry.file} is back to its original (sha256 "
            f"{entry.sha256_before[:12]})"
        )
    for entry in result.plan.forget:
        _say(f"{', '.join(sorted(entry.fixes))}: {entry.file} already had its original bytes; forgot the patch record")
    _report(result.report)
    return result.exit_code


def _spec(
    path: Optional[Path],
    python: Optional[str],
    release: Optional[str],
    image: Optional[str],
    host: Optional[str],
    ssh: SshOptions,
    engine: str,
) -> TargetSpec:
    return target_spec(
        path, python, release, [host] if host else None, images=[image] if image else None, ssh=ssh, engine=engine
    )


def _patch_repo(repo: Path, pr: int, main_ref: Optional[str], remote: str, dry_run: bool, yes: bool) -> int:
    """A PR's change, 3-way merged into a git checkout's working tree (see ``ancestry.apply_pr``)."""
    from ..api import patch_pr

    outcome = patch_pr(repo, pr, main_ref=main_ref, remote=remote, dry_run=True)
    if outcome.status == "would-apply":
        if dry_run:
            _show(outcome.diff)
            _say(f"#{pr} would change {', '.join(outcome.files)}; dry run: nothing was changed")
            return EXIT_OK
        _confirm(
            f"Apply #{pr} to {', '.join(outcome.files)} in {repo}?", yes, outcome.diff, f"nothing was changed in {repo}"
        )
        outcome = patch_pr(repo, pr, main_ref=main_ref, remote=remote)
    if outcome.status == "conflict":
        _say(f"#{pr} conflicts with {repo} in {', '.join(outcome.conflicts)}; nothing was changed")
        return EXIT_MISSING
    if outcome.status == "already-present":
        _say(f"#{pr} is already in {repo}: nothing to apply")
        return EXIT_OK
    _say(f"#{pr} applied to {', '.join(outcome.files)} in {repo} (not committed; `git diff` shows it)")
    return EXIT_OK


def _confirm(question: str, yes: bool, shown: str = "", unchanged: str = "nothing was changed") -> None:
    """Ask on the terminal after showing ``shown``; without one, only --yes goes ahead. A no (or end of input,
    or Ctrl-C, at the prompt) is an error that says what was left unchanged."""
    if yes:
        return
    if not sys.stdin.isatty():
        hint = " (or --dry-run to see the diff)" if shown else ""
        raise ToolError(
            f"refusing to change files without confirmation: there is no terminal to ask on; pass --yes{hint}"
        )
    _show(shown)
    try:
        confirmed = typer.confirm(clean(question), default=False)
    except typer.Abort:  # end of input or Ctrl-C at the prompt
        confirmed = False
    if not confirmed:
        raise ToolError(f"not confirmed: {unchanged}")


def _report(report: CheckReport) -> int:
    """The check after the change, as a table."""
    from ..reporters import reporter

    sys.stdout.write(reporter("table").render(report, terminal=sys.stdout.isatty()))
    return report.exit_code


def _say(line: str) -> None:
    print(f"dflash-doctor: {clean(line)}", file=sys.stderr)


def _show(diff: str) -> None:
    """A diff as is into a pipe (it is data); on a terminal, the tree's control characters escaped."""
    sys.stdout.write(clean(diff, keep="\n\t") if sys.stdout.isatty() else diff)


def register(app: typer.Typer) -> None:
    app.command()(expand(patch))
    app.command()(expand(restore))
