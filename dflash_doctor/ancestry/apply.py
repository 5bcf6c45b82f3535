"""``patch --repo --pr``: a PR's change 3-way merged into a checkout's working tree."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ..model import ToolError
from .cache import landing_index
from .git import NO_EXTERNAL_DIFF, GitFailure, Repository, three_way
from .refs import resolve_main_ref


@dataclasses.dataclass(frozen=True)
class PatchOutcome:
    """What ``apply_pr`` did: ``applied``, ``would-apply`` (dry run), ``already-present``
    or ``conflict`` (the tree untouched)."""

    pr: int
    status: str
    change: tuple[tuple[str, str], ...]  # landing, or pr_head and base
    files: tuple[str, ...]
    conflicts: tuple[str, ...]
    diff: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "pr": self.pr,
            "status": self.status,
            "change": dict(self.change),
            "files": list(self.files),
            "conflicts": list(self.conflicts),
            "diff": self.diff,
        }


def apply_pr(
    repo: Path, pr: int, *, main_ref: str | None = None, remote: str = "origin", dry_run: bool = False
) -> PatchOutcome:
    """3-way apply PR ``pr``'s change to the working tree of ``repo``.

    The merge is computed first, on a snapshot of the working tree (tracked files,
    local edits included) in a temporary index, in a throw-away repository; only a
    clean result is written, with one atomic ``git apply``. On conflict nothing is touched;
    with ``dry_run`` never (the outcome carries the diff either way).
    """
    repository = Repository(repo)
    try:
        if repository.worktree is None:
            raise ToolError(f"{repository.location} is a git directory without a work tree: patch needs a checkout")
        if repository.worktree.resolve() != Path(repo).resolve():
            raise ToolError(
                f"{repo}: its configuration (core.worktree) puts its work tree at {repository.worktree}; "
                "patch writes only into the checkout given with --repo"
            )
        try:
            return _apply(repository, pr, main_ref, remote, dry_run)
        except GitFailure as exc:
            raise ToolError(f"cannot patch {repository.location}: {exc}") from None
    finally:
        repository.close()


def _snapshot(repository: Repository) -> str:
    """The tree of the working tree's tracked files, local edits included, built in a
    fresh index of the throw-away repository. The checkout's index is never copied
    (its size is the repository's to choose): its entries are read through git's
    bounded output (``ls-files --stage``), then every tracked file is hashed again."""
    throw_away = repository.throw_away()
    env = {**throw_away.env, "GIT_INDEX_FILE": str(Path(throw_away.directory) / "index")}
    entries = repository.git("ls-files", "--stage", "-z")
    repository.git("update-index", "-z", "--index-info", env=env, stdin_text=entries)
    tagged = repository.git("ls-files", "-t", "-z").split("\0")
    sparse = "".join(f"{line[2:]}\0" for line in tagged if line.startswith("S "))  # not checked out: not deleted
    if sparse:
        repository.git("update-index", "-z", "--skip-worktree", "--stdin", env=env, stdin_text=sparse)
    repository.git("add", "--update", env=env)
    return repository.git("write-tree", env=env).strip()


def _apply(repository: Repository, pr: int, main_ref: str | None, remote: str, dry_run: bool) -> PatchOutcome:
    if repository.is_partial_clone:
        repository.refuse_upload_pack()  # reading objects may fetch them
    main = resolve_main_ref(repository, main_ref, remote)
    landings = landing_index(repository, main).landed.get(pr, [])
    head = repository.git("rev-parse", "--verify", "--quiet", f"refs/pull/{pr}/head^{{commit}}", ok=(0, 1)).strip()
    if landings:
        base, tip = f"{landings[0]}^", landings[0]
        change: tuple[tuple[str, str], ...] = (("landing", landings[0]),)
    elif head:
        base = repository.git("merge-base", head, main.sha, ok=(0, 1)).strip()
        if not base:
            raise ToolError(f"refs/pull/{pr}/head shares no history with {main.name}")
        tip = head
        change = (("pr_head", head), ("base", base))
    else:
        raise ToolError(
            f"no first-parent commit of {main.name} ends in (#{pr}) and refs/pull/{pr}/head is absent: "
            f"git -C {repository.location} fetch {remote} +refs/pull/{pr}/head:refs/pull/{pr}/head"
        )
    if repository.git("ls-files", "--unmerged"):
        raise ToolError(f"{repository.location} has unresolved merge conflicts: resolve them first")
    base_tree, tip_tree = repository.lines("rev-parse", f"{base}^{{tree}}", f"{tip}^{{tree}}")
    worktree = _snapshot(repository)
    merged = three_way(repository, base_tree, worktree, tip_tree)
    if merged.conflicts or merged.tree is None:  # no tree when it conflicts
        return PatchOutcome(pr, "conflict", change, (), merged.conflicts)
    if merged.tree == worktree:
        return PatchOutcome(pr, "already-present", change, (), ())
    inside = repository.throw_away().bare_env
    names = repository.git("diff", *NO_EXTERNAL_DIFF, "--name-only", "-z", worktree, merged.tree, env=inside)
    files = tuple(name for name in names.split("\0") if name)
    diff = repository.git("diff", *NO_EXTERNAL_DIFF, "--binary", "--full-index", worktree, merged.tree, env=inside)
    if dry_run:
        return PatchOutcome(pr, "would-apply", change, files, (), diff)
    try:
        # Written from the throw-away repository: no filter or driver the checkout configures runs.
        repository.git("apply", "--binary", env={**inside, "GIT_WORK_TREE": str(repository.worktree)}, stdin_text=diff)
    except GitFailure as exc:
        raise ToolError(f"the merged change does not apply to the working tree (nothing was changed): {exc}") from None
    return PatchOutcome(pr, "applied", change, files, (), diff)
