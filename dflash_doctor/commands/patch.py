"""`patch` and `restore`: apply a missing fix in place, or give the original back.

The verdict report goes to standard output (the diff, with ``--dry-run``);
what is patched or refused goes to standard error. With ``--host`` the
check, the writes (SFTP) and the re-check share one ssh connection.
``patch --repo DIR --pr N`` applies a PR's change to a git checkout instead.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from ..model import EXIT_MISSING, EXIT_OK, ToolError
from ..terminal import clean
from .options import (
    AcceptNewHostKeyOption,
    ConnectTimeoutOption,
    IdentityOption,
    KnownHostsOption,
    OnlyOption,
    PathOption,
    ProbeTimeoutOption,
    PythonOption,
    SingleHostOption,
    SshConfigOption,
    choose_target,
    ssh_options,
)

ReleaseRefusedOption = typer.Option(None, "--release", help="Refused: release trees are a download cache, not an install.")
ImageRefusedOption = typer.Option(None, "--image", help="Refused: an image is patched when it is built (see docs/images.md).")
YesOption = typer.Option(False, "--yes", "-y", help="Apply without asking (needed when there is no terminal).")


def patch(
    path: Optional[Path] = PathOption,
    python: Optional[str] = PythonOption,
    release: Optional[str] = ReleaseRefusedOption,
    image: Optional[str] = ImageRefusedOption,
    host: Optional[str] = SingleHostOption,
    only: Optional[list[str]] = OnlyOption,
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the unified diff and change nothing."),
    yes: bool = YesOption,
    repo: Optional[Path] = typer.Option(None, "--repo", help="A vLLM git checkout: apply --pr's change to its working tree instead."),
    pr: Optional[int] = typer.Option(None, "--pr", help="With --repo: the PR whose change to apply (its landing on main, else refs/pull/N/head)."),
    main_ref: Optional[str] = typer.Option(None, "--main-ref", help="With --repo: the main line (default origin/main, else main)."),
    remote: str = typer.Option("origin", "--remote", help="With --repo: the remote named in fetch hints."),
    identity: Optional[Path] = IdentityOption,
    known_hosts: Optional[Path] = KnownHostsOption,
    ssh_config: Optional[Path] = SshConfigOption,
    connect_timeout: float = ConnectTimeoutOption,
    probe_timeout: float = ProbeTimeoutOption,
    accept_new_host_key: bool = AcceptNewHostKeyOption,
) -> int:
    """Patch missing fixes into an installed vLLM. Each fix is proved by a re-check, and the original
    files are kept for `restore`.

    Exit: 0 every selected fix present afterwards, 1 some still absent/partial/not-applicable
    (refused, with the reason), 2 some unknown, 3 could not run (nothing half-written).
    With --repo/--pr: 0 applied or already there, 1 conflict (nothing changed), 3 could not run.
    """
    _refuse_image(image)
    if repo is not None or pr is not None:
        given = [name for name, value in (("--path", path), ("--python", python), ("--release", release),
                                          ("--host", host), ("--only", only)) if value]
        if given:
            raise ToolError(f"--repo/--pr patch a git checkout: give them without {given[0]}")
        if repo is None or pr is None:
            raise ToolError("give --repo and --pr together")
        return _patch_repo(repo, pr, main_ref, remote, dry_run, yes)
    ssh = ssh_options(identity, known_hosts, ssh_config, connect_timeout, probe_timeout, accept_new_host_key)
    from ..rulefile import select
    from ..targets import opened

    rules = select(only)
    target = _installed_target(path, python, release, host, ssh, rules)
    with opened(target):
        return _patch(target, rules, dry_run, yes)


def _patch(target, rules, dry_run: bool, yes: bool) -> int:
    from .. import __version__
    from ..cache import checked_fixes
    from ..check import run_check
    from ..model import exit_code_for, verdict_code
    from ..patching import files_for
    from ..patching.apply import apply_changes
    from ..patching.plan import plan_patches

    resolved = target.resolve()
    open_files = files_for(resolved)  # refused before anything is planned or shown
    files = None if dry_run else open_files()  # the root is held from before the check reads the tree
    plan = plan_patches(resolved.tree, rules, checked_fixes(resolved.tree, rules))
    for change in plan.changes:
        for site in change.sites:
            _say(f"{site.fix}: {site.file}:{site.line} {site.symbol} [{site.form} -> {site.produces}]")
    for refusal in plan.refusals:
        _say(f"{refusal.fix}: not patched: {refusal.reason}")
    if dry_run:
        _show("".join(change.diff() for change in plan.changes))
        _say("dry run: nothing was changed" if plan.changes else "nothing to patch")
        return exit_code_for(verdict_code(fix.status) for fix in plan.after)
    if plan.changes:
        _confirm(f"Patch {', '.join(plan.fixes)} in {resolved.info.location}?", yes,
                 "".join(change.diff() for change in plan.changes), f"nothing was changed in {resolved.info.location}")
        apply_changes(files, plan.changes, __version__)
        _say(f"patched {', '.join(change.file for change in plan.changes)}; `dflash-doctor restore` undoes it")
    elif not plan.refusals:
        _say("nothing to patch: every selected fix is present")
    return _report(run_check(target, rules), rules)


def restore(
    path: Optional[Path] = PathOption,
    python: Optional[str] = PythonOption,
    release: Optional[str] = ReleaseRefusedOption,
    image: Optional[str] = ImageRefusedOption,
    host: Optional[str] = SingleHostOption,
    only: Optional[list[str]] = OnlyOption,
    yes: bool = YesOption,
    identity: Optional[Path] = IdentityOption,
    known_hosts: Optional[Path] = KnownHostsOption,
    ssh_config: Optional[Path] = SshConfigOption,
    connect_timeout: float = ConnectTimeoutOption,
    probe_timeout: float = ProbeTimeoutOption,
    accept_new_host_key: bool = AcceptNewHostKeyOption,
) -> int:
    """Give back the files `patch` changed. Byte for byte, then re-checked; a file changed since
    it was patched is refused.

    Exit: 0 restored (or nothing to restore), 3 could not run.
    """
    _refuse_image(image)
    from ..rulefile import select
    from ..targets import opened

    ssh = ssh_options(identity, known_hosts, ssh_config, connect_timeout, probe_timeout, accept_new_host_key)
    rules = select(only)
    target = _installed_target(path, python, release, host, ssh, rules)
    with opened(target):
        return _restore(target, rules, bool(only), yes)


def _restore(target, rules, only: bool, yes: bool) -> int:
    from ..check import run_check
    from ..patching import files_for
    from ..patching.apply import apply_restore, plan_restore

    resolved = target.resolve()
    files = files_for(resolved)()
    plan = plan_restore(files, frozenset(rule.id for rule in rules) if only else None)
    if not plan.restore and not plan.forget:
        _say("nothing to restore: dflash-doctor has not patched " + ("these fixes" if only else "this tree"))
        return EXIT_OK
    if plan.restore:
        _confirm(f"Restore {', '.join(entry.file for entry in plan.restore)} in {resolved.info.location}?", yes,
                 unchanged=f"nothing was restored in {resolved.info.location}")
    apply_restore(files, plan)  # said only once done: it may still refuse
    for entry in plan.restore:
        _say(f"{', '.join(sorted(entry.fixes))}: {entry.file} is back to its original (sha256 {entry.sha256_before[:12]})")
    for entry in plan.forget:
        _say(f"{', '.join(sorted(entry.fixes))}: {entry.file} already had its original bytes; forgot the patch record")
    _report(run_check(target, rules), rules)
    return EXIT_OK


RELEASE_REFUSAL = "release trees are dflash-doctor's download cache, not an installation; give --path, --python or --host"


def _installed_target(path: Optional[Path], python: Optional[str], release: Optional[str], host: Optional[str], ssh: dict, rules):
    """The target the options name; release trees are refused."""
    if release is not None:
        raise ToolError(f"--release: {RELEASE_REFUSAL}")
    if host is None:
        return choose_target(path, python, None)
    if path is not None:
        raise ToolError("give one target, not --host and --path")
    from ..engines import VLLM
    from ..targets.probing import probe_request
    from ..targets.ssh import SshOptions, SshTarget

    return SshTarget(host, SshOptions(python=python or "python3", **ssh), probe_request(rules, VLLM))


def _refuse_image(image: Optional[str]) -> None:
    """An image is refused before it is pulled: the reason is the image target's own."""
    if image is not None:
        from ..targets.image import READ_ONLY

        raise ToolError(f"--image: {READ_ONLY}")


def _patch_repo(repo: Path, pr: int, main_ref: Optional[str], remote: str, dry_run: bool, yes: bool) -> int:
    """A PR's change, 3-way merged into a git checkout's working tree (see ``ancestry.apply_pr``)."""
    from ..ancestry import apply_pr

    outcome = apply_pr(repo, pr, main_ref=main_ref, remote=remote, dry_run=True)
    if outcome.status == "would-apply":
        if dry_run:
            _show(outcome.diff)
            _say(f"#{pr} would change {', '.join(outcome.files)}; dry run: nothing was changed")
            return EXIT_OK
        _confirm(f"Apply #{pr} to {', '.join(outcome.files)} in {repo}?", yes, outcome.diff, f"nothing was changed in {repo}")
        outcome = apply_pr(repo, pr, main_ref=main_ref, remote=remote)
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
        raise ToolError(f"refusing to change files without confirmation: there is no terminal to ask on; pass --yes{hint}")
    _show(shown)
    try:
        confirmed = typer.confirm(clean(question), default=False)
    except typer.Abort:  # end of input or Ctrl-C at the prompt
        confirmed = False
    if not confirmed:
        raise ToolError(f"not confirmed: {unchanged}")


def _report(report, rules) -> int:
    """The check after the change, with its bottom line, as a table."""
    import dataclasses

    from ..model import BottomLine
    from ..reporters import reporter

    report = dataclasses.replace(report, summary=BottomLine.of(report.fixes, {rule.id: rule.first_release for rule in rules}, report.provenance.vendor))
    sys.stdout.write(reporter("table").render(report, terminal=sys.stdout.isatty()))
    return report.exit_code


def _say(line: str) -> None:
    print(f"dflash-doctor: {clean(line)}", file=sys.stderr)


def _show(diff: str) -> None:
    """A diff as is into a pipe (it is data); on a terminal, the tree's control characters escaped."""
    sys.stdout.write(clean(diff, keep="\n\t") if sys.stdout.isatty() else diff)


def register(app: typer.Typer) -> None:
    app.command()(patch)
    app.command()(restore)
