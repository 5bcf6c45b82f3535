"""The ladder: merge-commit, then patch-id, then merge-tree; else missing or unknown."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..engines import ENGINES, Engine
from ..model import ToolError
from ..provenance import read_provenance
from ..rulefile import load_rules
from ..rules import Rule
from .cache import PatchIds, landing_index
from .git import GitFailure, Repository, three_way
from .refs import MainRef, fetch_refs, main_branch, resolve_commit, resolve_main_ref
from .report import CONTAINED, MISSING, UNKNOWN, AncestryReport, PrAncestry, short_sha

if TYPE_CHECKING:
    from ..targets import Target


@dataclasses.dataclass
class _Case:
    """One PR being judged: what was found and, once decided, the verdict."""

    pr: int
    landings: list[str]
    reverts: list[str]
    head: str | None
    evidence: dict[str, Any]
    verdict: tuple[str, str, str] | None = None  # status, method, reason
    conflicts: tuple[str, ...] = ()


class _Judge:
    def __init__(
        self, repository: Repository, judged: str, main: MainRef, remote: str, fetch: bool, not_on_remote: set[int]
    ) -> None:
        self.repository = repository
        self.judged = judged
        self.main = main
        self.remote = remote
        self.fetch = fetch
        self.not_on_remote = not_on_remote
        # One walk of the merge-base range, both sides: the judged commit's own
        # (non-merge) commits, and the main commits it lacks.
        self.own_history: list[str] = []
        self.main_only: dict[str, str | None] = {}  # commit -> first parent
        for line in repository.lines("rev-list", "--left-right", "--parents", f"{judged}...{main.sha}"):
            sha, *parents = line[1:].split()
            if line[0] == ">":
                self.main_only[sha] = parents[0] if parents else None
            elif len(parents) <= 1:
                self.own_history.append(sha)
        merge_base: str | None = main.sha  # on the main line: its newest first-parent commit the judged one has
        while merge_base in self.main_only:
            merge_base = self.main_only[merge_base]
        self.merge_base = merge_base
        self.index = landing_index(repository, main)

    def reaches(self, main_commit: str) -> bool:
        return main_commit not in self.main_only

    def fetch_hint(self, pr: int, main_too: bool = False) -> str:
        refspecs = [f"+refs/pull/{pr}/head:refs/pull/{pr}/head"]
        if main_too:
            branch = main_branch(self.main.name, self.remote) or "main"
            refspecs.insert(0, f"+refs/heads/{branch}:refs/remotes/{self.remote}/{branch}")
        return f"git -C {self.repository.location} fetch {self.remote} {' '.join(refspecs)} (or rerun with --fetch)"

    def run(self, prs: Sequence[int]) -> dict[int, _Case]:
        heads = self._pr_heads(prs)
        cases = {pr: self._merge_commit(pr, heads.get(pr)) for pr in prs}
        open_cases = [case for case in cases.values() if case.verdict is None]
        if open_cases:
            for case in open_cases:
                case.evidence["merge_base"] = self.merge_base
            self._decide_with_content(open_cases)
            for case in open_cases:
                if case.verdict is None:
                    case.verdict = self._undecided(case)
        return cases

    def _pr_heads(self, prs: Sequence[int]) -> dict[int, str]:
        refs = [f"refs/pull/{pr}/head" for pr in prs]
        listed = self.repository.lines("for-each-ref", "--format=%(refname) %(objectname)", *refs)
        by_ref = dict(line.split(" ", 1) for line in listed)
        return {pr: by_ref[ref] for pr, ref in zip(prs, refs) if ref in by_ref}

    def _merge_commit(self, pr: int, head: str | None) -> _Case:
        landings = self.index.landed.get(pr, [])
        reverts = [sha for sha in self.index.reverted.get(pr, []) if self.reaches(sha)]
        case = _Case(pr, landings, reverts, head, {"landing": landings[0] if landings else None, "pr_head": head})
        ancestors = [sha for sha in landings if self.reaches(sha)]
        if reverts:
            case.evidence["reverted_by"] = reverts[0]
        elif ancestors:
            case.evidence.update(landing=ancestors[0], main_ref=self.main.name)
            case.verdict = (
                CONTAINED,
                "merge-commit",
                f"landing commit {short_sha(ancestors[0])} on {self.main.name} is an ancestor",
            )
        return case

    def _decide_with_content(self, cases: list[_Case]) -> None:
        """patch-id, then merge-tree: both read file contents."""
        searchable = [case for case in cases if case.landings or case.head]
        if not searchable or (self.repository.is_partial_clone and not self.fetch):
            return
        try:
            self._patch_ids(searchable)
            self._merge_trees([case for case in searchable if case.verdict is None])
        except GitFailure as exc:
            if self.repository.shallow:
                return  # objects beyond the shallow boundary: said as such by _undecided
            for case in searchable:
                if case.verdict is None:
                    case.verdict = (
                        UNKNOWN,
                        "none",
                        (
                            f"git could not compare contents ({exc}); fetch what is absent: "
                            f"git -C {self.repository.location} fetch {self.remote}, or check the clone with git fsck"
                        ),
                    )

    def _patch_ids(self, cases: list[_Case]) -> None:
        repository = self.repository
        own = self.own_history
        pr_commits = {
            case.pr: repository.lines("rev-list", "--no-merges", case.head, f"^{self.main.sha}") if case.head else []
            for case in cases
        }
        patch_ids = PatchIds(repository)
        ids = patch_ids.of(
            own
            + [sha for case in cases for sha in case.landings]
            + [sha for shas in pr_commits.values() for sha in shas]
        )
        patch_ids.save()
        patched = {
            commit: patch_id for commit, patch_id in ids.items() if patch_id
        }  # the commits that change something
        by_patch: dict[str, str] = {}
        for commit in reversed(own):  # oldest first: the first pick wins
            if commit in patched:
                by_patch.setdefault(patched[commit], commit)
        for case in cases:
            matches = [
                {"commit": by_patch[patched[sha]], "same_as": sha, "patch_id": patched[sha]}
                for sha in case.landings
                if patched.get(sha) in by_patch
            ][:1]
            changed = [sha for sha in pr_commits[case.pr] if sha in patched]
            if not matches and changed and all(patched[sha] in by_patch for sha in changed):
                matches = [
                    {"commit": by_patch[patched[sha]], "same_as": sha, "patch_id": patched[sha]} for sha in changed
                ]
            if matches:
                case.evidence["matches"] = matches
                what = (
                    "the landing commit"
                    if matches[0]["same_as"] in case.landings
                    else f"all {len(matches)} commits of refs/pull/{case.pr}/head"
                )
                where = ", ".join(short_sha(match["commit"]) for match in matches)
                case.verdict = (
                    CONTAINED,
                    "patch-id",
                    f"{where} in the judged history since the merge base carries the patch of {what}",
                )

    def _merge_trees(self, cases: list[_Case]) -> None:
        repository = self.repository
        judged_tree = repository.git("rev-parse", f"{self.judged}^{{tree}}").strip()
        for case in cases:
            changes = [(f"{sha}^", sha) for sha in case.landings]
            if case.head:
                base = repository.git("merge-base", case.head, self.main.sha, ok=(0, 1)).strip()
                if base:
                    changes.append((base, case.head))
            conflicts: list[str] = []
            for base, tip in changes:
                base_tree, tip_tree = repository.lines("rev-parse", f"{base}^{{tree}}", f"{tip}^{{tree}}")
                merged = three_way(repository, base_tree, judged_tree, tip_tree)
                if merged.tree == judged_tree:
                    base_commit = repository.git("rev-parse", f"{base}^{{commit}}").strip()
                    case.evidence["applied"] = {"base": base_commit, "tip": tip}
                    case.verdict = (
                        CONTAINED,
                        "merge-tree",
                        f"the change {short_sha(base_commit)}..{short_sha(tip)} merges into the judged commit as a "
                        "no-op",
                    )
                    break
                conflicts.extend(merged.conflicts)
            case.conflicts = tuple(dict.fromkeys(conflicts))

    def _undecided(self, case: _Case) -> tuple[str, str, str]:
        """``missing`` only when git has everything it needs to say so."""
        location = self.repository.location
        if self.repository.shallow:
            return (
                UNKNOWN,
                "none",
                f"the clone is shallow, so the history is incomplete; fetch it: git -C {location} fetch --unshallow "
                f"{self.remote}",
            )
        if not case.landings and not case.head:
            why = (
                f"no first-parent commit of {self.main.name} ends in (#{case.pr}) and refs/pull/{case.pr}/head is "
                "not in the repository"
            )
            if case.pr in self.not_on_remote:
                return UNKNOWN, "none", f"{why}, and {self.remote} has no refs/pull/{case.pr}/head either"
            return UNKNOWN, "none", f"{why}; fetch: {self.fetch_hint(case.pr, main_too=True)}"
        if self.repository.is_partial_clone and not self.fetch:
            return (
                UNKNOWN,
                "none",
                (
                    "partial clone: patch-id and merge-tree need file contents git would fetch on demand; "
                    "rerun with --fetch to allow that"
                ),
            )
        if case.conflicts and self.own_history:
            case.evidence["conflicts"] = list(case.conflicts)
            return (
                UNKNOWN,
                "none",
                (
                    f"the change conflicts with the judged commit in {', '.join(case.conflicts)}: git cannot tell; "
                    "`dflash-doctor check` reads the code itself"
                ),
            )
        if case.reverts:
            return (
                MISSING,
                "none",
                f"landing commit {short_sha(case.landings[0])} was reverted by {short_sha(case.reverts[0])}, and no "
                "other test finds the change",
            )
        steps = [
            f"landing commit {short_sha(case.landings[0])} is not an ancestor"
            if case.landings
            else f"no commit of {self.main.name} lands #{case.pr}"
        ]
        if self.own_history:
            steps += ["no commit since the merge base carries its patch", "merging its change would alter the tree"]
        else:
            steps.append(
                f"the judged commit lies in {self.main.name}'s history, with no commits of its own that could carry it"
            )
        return MISSING, "none", "; ".join(steps)


def _wanted_prs(rules: Sequence[Rule], prs: Sequence[int] | None) -> list[tuple[str | None, int]]:
    pairs: list[tuple[str | None, int]] = [(rule.id, pr) for rule in rules for pr in (*rule.prs, *rule.unmerged_prs)]
    if not prs:
        return pairs
    chosen = [(fix, pr) for fix, pr in pairs if pr in prs]
    return chosen + [(None, pr) for pr in dict.fromkeys(prs) if pr not in {p for _, p in pairs}]


def _has_package(repository: Repository, commit: str, engine: Engine) -> bool:
    entry = repository.git("ls-tree", commit, "--", engine.repository_package).split("\t")[0].split()
    return entry[1:2] == ["tree"]


def engine_of_clone(repository: Repository, commit: str, engine: Engine | None = None) -> Engine:
    """The engine whose clone ``repository`` is, read from the package at ``commit`` (``engine``: only that one).
    Judged elsewhere, every PR would come out unknown (their landing commits are not there) with advice to
    fetch pull refs from a remote that has none, so a commit without the package is refused."""
    engines = [engine] if engine is not None else list(ENGINES.values())
    found = [each for each in engines if _has_package(repository, commit, each)]
    if len(found) == 1:
        return found[0]
    if not found:
        names = " or ".join(each.display for each in engines)
        packages = " or ".join(f"{each.repository_package}/" for each in engines)
        raise ToolError(
            f"{repository.location} does not look like a {names} clone: commit {short_sha(commit)} has no "
            f"{packages} package (give --repo a clone of {names})"
        )
    raise ToolError(
        f"commit {short_sha(commit)} in {repository.location} holds the packages of "
        f"{' and '.join(each.display for each in found)}: name the engine with --engine"
    )


def trace(
    repo: Path,
    commit: str,
    commit_source: str | None = None,
    *,
    rules: Sequence[Rule] | None = None,
    prs: Sequence[int] | None = None,
    main_ref: str | None = None,
    remote: str = "origin",
    fetch: bool = False,
    engine: Engine | None = None,
) -> AncestryReport:
    """Judge ``commit`` in ``repo`` for every PR of ``rules`` (default: all rules) that describe the code of
    ``engine`` (default: the engine whose package the clone holds at ``commit``, before any fetch)."""
    if rules is None:
        rules = load_rules()
    repository = Repository(repo)
    try:
        try:
            if engine is None:
                engine = engine_of_clone(repository, resolve_commit(repository, commit, commit_source))
            wanted = _wanted_prs([rule for rule in rules if rule.engine == engine.name], prs)
            numbers = list(dict.fromkeys(pr for _, pr in wanted))
            not_on_remote = (
                fetch_refs(repository, remote, main_branch(main_ref, remote), numbers, engine) if fetch else set()
            )
            main = resolve_main_ref(repository, main_ref, remote)
            judged = resolve_commit(repository, commit, commit_source)
            engine_of_clone(repository, judged, engine)
            cases = _Judge(repository, judged, main, remote, fetch, not_on_remote).run(numbers)
        except GitFailure as exc:
            raise ToolError(f"{exc} (in {repository.location})") from None
        entries = []
        for fix, pr in wanted:
            verdict = cases[pr].verdict
            assert verdict is not None  # run() decides every case
            status, method, reason = verdict
            entries.append(PrAncestry(pr, fix, status, method, tuple(cases[pr].evidence.items()), reason))
        return AncestryReport(str(repository.location), judged, commit_source, main.name, tuple(entries))
    finally:
        repository.close()


def commit_from_target(target: Target) -> tuple[str, str | None]:
    """The build commit a target records (``check`` provenance), and where it was read."""
    resolved = target.resolve()
    provenance = read_provenance(resolved.tree)
    if not provenance.commit and resolved.build_commit:
        return resolved.build_commit
    if not provenance.commit:
        distribution = provenance.distribution
        if distribution is not None and provenance.vendor:  # its own version is no tag of the engine's
            engine = provenance.engine.display
            raise ToolError(
                f"the target records no build commit ({distribution.name} {distribution.version}, a vendor "
                f"build or fork of {engine}): give --commit SHA, the {engine} commit it is built from"
            )
        if provenance.version:
            raise ToolError(
                f"the target records no build commit (version {provenance.version}): give --commit SHA "
                f"(for a release, its tag: --commit v{provenance.version})"
            )
        raise ToolError("the target records neither a version nor a build commit: give --commit SHA")
    return provenance.commit, provenance.commit_source
