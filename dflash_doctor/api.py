"""The tool as a library: one typed request per command, the gated result back.

The CLI's commands parse words into these requests, call these functions and
render what they return; a deployment script can do the same (docs/api.md)::

    from dflash_doctor import api

    result = api.check(api.CheckRequest(api.TargetSpec(path=Path("/opt/venv/lib/python3.11/site-packages"))))
    for fix in result.reports[0].fixes:
        print(fix.id, fix.status)
    raise SystemExit(result.exit_code)

Bad input and what cannot run raise ``ToolError`` (exit code 3 in the CLI).
Nothing is written unless a request asks for it (``patch``, ``restore``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .engines import DEFAULT_ENGINE
from .model import EXIT_OK, BottomLine, CheckReport, HostOutcome, ToolError
from .targets.selection import TargetSpec, ssh_target

if TYPE_CHECKING:
    from .accept import AcceptOptions, AcceptReport
    from .ancestry import AncestryReport
    from .ancestry import PatchOutcome
    from .patching.apply import RestorePlan
    from .patching.plan import PatchPlan
    from .releases import Matrix
    from .rules import Rule
    from .targets import ResolvedTarget, Target

__all__ = [
    "AncestryRequest",
    "CheckRequest",
    "CheckResult",
    "Patching",
    "PatchRequest",
    "ReleasesRequest",
    "RestoreRequest",
    "RestoreResult",
    "TargetSpec",
    "accept",
    "ancestry",
    "check",
    "patch_pr",
    "patching",
    "releases",
    "restore",
    "with_ancestry",
]


# -- check -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CheckRequest:
    """``check``: which fixes (``only``, default all), how the gate reads them (``strict``: unknown
    fails; ``waivers``: a waivers file), what to add (``repo``: which PRs the build commit holds;
    ``draft_config``/``target_config``: the user's drafter), and how to fetch and fan out."""

    target: TargetSpec = TargetSpec()
    only: tuple[str, ...] = ()
    strict: bool = False
    waivers: Path | None = None
    repo: Path | None = None
    main_ref: str | None = None
    draft_config: Path | None = None
    target_config: Path | None = None
    jobs: int = 4
    full_wheel: bool = False
    progress: bool = False  # a bar on standard error per host (fleet) or image layer


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """One report per install checked (``outcomes`` for a fleet: a host may have failed
    instead), gated: ``exit_code`` is what the CLI exits with."""

    fleet: bool
    outcomes: tuple[HostOutcome, ...]
    exit_code: int

    @property
    def reports(self) -> tuple[CheckReport, ...]:
        return tuple(outcome.report for outcome in self.outcomes if outcome.report is not None)


def check(request: CheckRequest, warm_up: Callable[[tuple[Rule, ...]], None] | None = None) -> CheckResult:
    """Check the targets the request names. ``warm_up`` (the CLI's): called on a thread while
    the hosts of a fleet are reached, to import what a check that the cache cannot answer needs."""
    from .check import run_check
    from .paths import FULL_WHEEL
    from .rulefile import load_rules, select
    from .targets import opened, per_engine
    from .targets.selection import select_targets
    from .waivers import apply_waivers, load_waivers

    rules = select(list(request.only) or None)
    waivers = load_waivers(request.waivers, {rule.id for rule in load_rules()}) if request.waivers is not None else None
    if request.target_config is not None and request.draft_config is None:
        raise ToolError("--target-config needs --draft-config")
    targets, fleet = select_targets(request.target, rules)
    if fleet and warm_up is not None and (request.target.hosts or request.target.hosts_file):
        import threading

        # Not a daemon: a daemon thread still importing at interpreter exit can abort the process.
        threading.Thread(target=warm_up, args=(rules,)).start()
    drafter = {"draft_config": request.draft_config, "target_config": request.target_config}

    def finish(report: CheckReport) -> CheckReport:
        report = dataclasses.replace(report, strict=request.strict)
        if request.repo is not None:
            report = with_ancestry(report, request.repo, request.main_ref, rules)
        if waivers is not None and request.waivers is not None:
            report = apply_waivers(report, waivers, request.waivers)
        return _with_bottom_line(report, rules)

    def finish_host(outcome: HostOutcome) -> HostOutcome:
        try:
            return HostOutcome(outcome.host, report=finish(outcome.report)) if outcome.report else outcome
        except ToolError as exc:
            return HostOutcome(outcome.host, error=str(exc))

    if fleet:
        from .fleet import check_targets
        from .model import fleet_exit_code

        outcomes = tuple(
            finish_host(o) for o in check_targets(targets, rules, request.jobs, progress=request.progress, **drafter)
        )
        return CheckResult(True, outcomes, fleet_exit_code(list(outcomes)))
    name, target = targets[0]
    # the release's wheel, and the transformers wheel its behaviour fetches; a host's one connection
    with FULL_WHEEL.on(request.full_wheel), opened(target):
        split = per_engine(target)
        if len(split) > 1:  # a host or image holding several engines: a report for each
            from .fleet import engine_outcomes
            from .model import fleet_exit_code

            outcomes = tuple(finish_host(o) for o in engine_outcomes(name, split, rules, **drafter))
            return CheckResult(True, outcomes, fleet_exit_code(list(outcomes)))
        report = finish(run_check(split[0][1], rules, **drafter))
    return CheckResult(False, (HostOutcome(name, report=report),), report.exit_code)


def with_ancestry(report: CheckReport, repo: Path, main_ref: str | None, rules: tuple[Rule, ...]) -> CheckReport:
    """The report with an ``ancestry`` section for its recorded build commit."""
    from .ancestry import trace

    provenance = report.provenance
    if not provenance.commit:
        raise ToolError(
            f"--repo: {report.target.location} records no build commit to look up (version {provenance.version})"
        )
    section = trace(
        repo, provenance.commit, provenance.commit_source, rules=rules, main_ref=main_ref, engine=provenance.engine
    )
    return dataclasses.replace(report, sections=(*report.sections, section))


def _with_bottom_line(report: CheckReport, rules: tuple[Rule, ...]) -> CheckReport:
    """The report with its bottom line: the releases of the tree's engine that have its fixes."""
    from .rules import for_engine

    engine = report.provenance.engine
    first_releases = {rule.id: rule.first_release for rule in for_engine(rules, engine.name)}
    return dataclasses.replace(
        report, summary=BottomLine.of(report.fixes, first_releases, report.provenance.vendor, engine)
    )


# -- patch and restore -------------------------------------------------------------------------


RELEASE_REFUSAL = (
    "release trees are dflash-doctor's download cache, not an installation; give --path, --python or --host"
)


@dataclasses.dataclass(frozen=True)
class PatchRequest:
    """``patch``/``restore`` of one installed tree: ``target`` names a path, an interpreter or
    one host (a release is a download cache and an image is patched when it is built:
    both are refused); ``only`` the fixes (default all)."""

    target: TargetSpec = TargetSpec()
    only: tuple[str, ...] = ()


class Patching:
    """A patch in progress on one open target: ``plan`` says what would change (and what
    is refused, why); ``apply`` writes it (the originals kept for ``restore``); ``recheck``
    checks the tree again, the report the result of the patch."""

    def __init__(self, target: Target, resolved: ResolvedTarget, rules: tuple[Rule, ...], dry_run: bool) -> None:
        from .cache import structure_fixes
        from .targets import files_for
        from .patching.plan import plan_patches
        from .rules import for_engine

        self._target, self._rules = target, rules
        self.location = resolved.info.location
        open_files = files_for(resolved)  # refused before anything is planned or shown
        self._files = None if dry_run else open_files()  # the root is held from before the check reads the tree
        ours = for_engine(rules, resolved.tree.engine.name)  # the tree's engine's rule of each fix
        self._ours = ours
        self.plan: PatchPlan = plan_patches(resolved.tree, ours, structure_fixes(resolved.tree, ours))

    @property
    def dry_run_code(self) -> int:
        """The exit code a dry run gives: what the tree would be once patched."""
        from .model import exit_code_for, verdict_code

        return exit_code_for(verdict_code(fix.status) for fix in self.plan.after)

    def apply(self) -> None:
        from . import __version__
        from .patching.apply import apply_changes

        if self._files is None:
            raise ToolError("a dry run writes nothing")
        apply_changes(self._files, self.plan.changes, __version__)

    def recheck(self) -> CheckReport:
        return _rechecked(self._target, self._rules)

    def unpatched(self, report: CheckReport) -> list[str]:
        """What to say of each fix the re-check still finds absent or partial that the plan did not
        refuse: behaviour sees the defect in code the forms read as present (the plan reads the
        forms only), also beside a site it patched. The reason is the rule's ``patch_refusal``."""
        from .model import ABSENT, PARTIAL

        rules = {rule.id: rule for rule in self._ours}
        refused = {refusal.fix for refusal in self.plan.refusals}
        said = []
        for fix in report.fixes:
            if fix.status not in (ABSENT, PARTIAL) or fix.id in refused or fix.id not in rules:
                continue
            why = rules[fix.id].patch_refusal or "no code form this fix's rule patches was found"
            done = "is still " + fix.status + " after the patch" if fix.id in self.plan.fixes else "not patched"
            said.append(f"{fix.id}: {done}: {why}")
        return said


@contextlib.contextmanager
def patching(request: PatchRequest, dry_run: bool = False) -> Iterator[Patching]:
    """The target held open (one ssh connection for the check, the writes and the re-check)
    while the patch is planned, applied and re-checked."""
    from .rulefile import select
    from .targets import opened

    rules = select(list(request.only) or None)
    target = _installed(request, rules)
    with opened(target):
        yield Patching(target, target.resolve(), rules, dry_run)


@dataclasses.dataclass(frozen=True)
class RestoreResult:
    """What ``restore`` gave back (``plan``) and the re-check after it (None: nothing to restore)."""

    plan: RestorePlan
    report: CheckReport | None

    @property
    def exit_code(self) -> int:
        return EXIT_OK


RestoreRequest = PatchRequest  # the same target and fixes; ``only`` restores just those fixes' files


def restore(
    request: RestoreRequest, confirm: Callable[[RestorePlan, str], None] = lambda plan, location: None
) -> RestoreResult:
    """Give back the files ``patch`` changed, byte for byte, then re-check. ``confirm`` is
    shown the plan and the tree's location first, and raises ``ToolError`` to stop (nothing is written then)."""
    from .targets import files_for
    from .patching.apply import apply_restore, plan_restore
    from .rulefile import select
    from .targets import opened

    rules = select(list(request.only) or None)
    target = _installed(request, rules)
    with opened(target):
        resolved = target.resolve()
        files = files_for(resolved)()
        plan = plan_restore(files, frozenset(rule.id for rule in rules) if request.only else None)
        if not plan.restore and not plan.forget:
            return RestoreResult(plan, None)
        if plan.restore:
            confirm(plan, resolved.info.location)
        apply_restore(files, plan)
        return RestoreResult(plan, _rechecked(target, rules))


def _installed(request: PatchRequest, rules: tuple[Rule, ...]) -> Target:
    """The installed target the request names; release trees and images are refused."""
    spec = request.target
    if spec.release is not None:
        raise ToolError(f"--release: {RELEASE_REFUSAL}")
    if spec.images:
        from .targets.image import READ_ONLY

        raise ToolError(f"--image: {READ_ONLY}")
    if spec.hosts_file is not None or spec.from_probe is not None or len(spec.hosts) > 1:
        raise ToolError("patch one install: give --path, --python or one --host")
    from .targets.selection import from_option

    chosen = None if spec.engine == "auto" else from_option(spec.engine)
    if not spec.hosts:
        from .targets.detect import local_targets

        if spec.path is not None and spec.python is not None:
            raise ToolError("give one target, not --path and --python")
        found = local_targets(spec.path, spec.python or sys.executable, None, chosen)
        if len(found) > 1:
            names = " and ".join(engine.display for engine, _ in found)
            raise ToolError(
                f"this install holds {names}: patch one engine at a time "
                f"(--engine {' or --engine '.join(e.name for e, _ in found)})"
            )
        return found[0][1]
    if spec.path is not None:
        raise ToolError("give one target, not --host and --path")
    return ssh_target(spec.hosts[0], spec, rules, chosen)


def _rechecked(target: Target, rules: tuple[Rule, ...]) -> CheckReport:
    """The check after a change, with its bottom line."""
    from .check import run_check

    return _with_bottom_line(run_check(target, rules), rules)


def patch_pr(
    repo: Path, pr: int, main_ref: str | None = None, remote: str = "origin", dry_run: bool = False
) -> PatchOutcome:
    """A PR's change, 3-way merged into a git checkout's working tree (``dry_run``: only
    whether it would apply, and the diff)."""
    from .ancestry import apply_pr

    return apply_pr(repo, pr, main_ref=main_ref, remote=remote, dry_run=dry_run)


# -- ancestry, accept, releases ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class AncestryRequest:
    """``ancestry``: whether ``commit`` (or, without it, the build commit ``target`` records)
    holds each fix's PR in the clone ``repo``: the PRs of the rules of the engine ``target.engine``
    names, or (auto) of the engine whose package the clone holds at the commit."""

    repo: Path
    commit: str | None = None
    target: TargetSpec = TargetSpec()
    only: tuple[str, ...] = ()
    prs: tuple[int, ...] = ()
    main_ref: str | None = None
    remote: str = "origin"
    fetch: bool = False


def ancestry(request: AncestryRequest) -> AncestryReport:
    from .ancestry import commit_from_target, trace
    from .rulefile import select
    from .targets.selection import from_option, select_targets

    rules = select(list(request.only) or None)
    spec = request.target
    engine = None if spec.engine == "auto" else from_option(spec.engine)
    source: str | None
    if request.commit is not None:
        if spec.path or spec.python or spec.release or spec.hosts or spec.images:
            raise ToolError("give --commit or a target (--path/--python/--release/--host/--image), not both")
        commit, source = request.commit, "--commit"
    else:
        targets, _ = select_targets(spec, rules)
        commit, source = commit_from_target(targets[0][1])
    return trace(
        request.repo,
        commit,
        source,
        rules=rules,
        prs=list(request.prs) or None,
        main_ref=request.main_ref,
        remote=request.remote,
        fetch=request.fetch,
        engine=engine,
    )


def accept(options: AcceptOptions) -> AcceptReport:
    """Acceptance measured on a running server, with the defect the numbers point to."""
    from .accept import run_accept

    return run_accept(options)


@dataclasses.dataclass(frozen=True)
class ReleasesRequest:
    """``releases``: the release x fix matrix from ``first`` to ``last`` (default: every release
    with DFlash); ``offline``: only releases already in the cache."""

    first: str | None = None
    last: str | None = None
    offline: bool = False
    full_wheel: bool = False
    engine: str = DEFAULT_ENGINE.name


def releases(request: ReleasesRequest, said: Callable[[str], None] = lambda line: None) -> Matrix:
    """The matrix; ``said`` hears where the release list came from when not the package index."""
    from .model import from_option
    from .paths import FULL_WHEEL, OFFLINE
    from .releases import Matrix, plan, release_rows, rules_digest
    from .rulefile import load_rules
    from .rules import for_engine
    from .terminal import progress

    chosen = from_option(request.engine)
    rules = for_engine(load_rules(), chosen.name)
    digest = rules_digest(rules)
    versions, note = plan(request.first, request.last, request.offline, digest, chosen)
    if note != "package index":
        said(f"releases from the {note}")
    with (
        progress("releases", total=len(versions)) as update,
        OFFLINE.on(request.offline),
        FULL_WHEEL.on(request.full_wheel),
    ):
        rows = release_rows(versions, rules, digest, update, chosen)
    return Matrix(rules, tuple(rows), note, digest, chosen)
