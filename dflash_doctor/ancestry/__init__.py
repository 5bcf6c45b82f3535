"""Is a PR's change in a commit? Decided with git, and said how.

Per PR the first test that decides wins:

1. ``merge-commit``: the PR's landing commit (a first-parent commit of the main
   ref whose subject ends in ``(#N)``) is an ancestor of the judged commit and no
   revert of it is;
2. ``patch-id``: a commit of the judged commit's own history (the commits that are
   not on the main ref, i.e. since the merge base) has the stable patch-id of the
   landing commit, or of every commit of ``refs/pull/N/head``;
3. ``merge-tree``: a cherry-pick style 3-way merge of the PR's change into the
   judged commit leaves its tree unchanged.

Otherwise ``missing`` when git can tell, else ``unknown`` with the reason and the
command that fetches what is absent. git 2.39 has ``merge-tree --write-tree`` but
not ``--merge-base``: the merge base is forced by three throw-away commits written
to a throw-away repository (the repository's own store is only read).

Walks stay inside the merge-base range; the landing index (per main ref, extended
incrementally) and patch-ids (per commit) are cached in ``.git/dflash-doctor/``.
Every git call goes through ``git.run_git``: nothing the repository configures runs.

Modules: ``git`` (running git), ``refs`` (commits, refs, fetch), ``cache``,
``ladder`` (the three tests), ``apply`` (patch a checkout), ``report`` and ``render``.
"""

from __future__ import annotations

from .apply import PatchOutcome, apply_pr
from .git import GitFailure, run_git
from .ladder import commit_from_target, trace
from .render import render
from .report import CONTAINED, MISSING, SCHEMA, UNKNOWN, AncestryReport, PrAncestry

__all__ = [
    "CONTAINED",
    "MISSING",
    "SCHEMA",
    "UNKNOWN",
    "AncestryReport",
    "GitFailure",
    "PatchOutcome",
    "PrAncestry",
    "apply_pr",
    "commit_from_target",
    "render",
    "run_git",
    "trace",
]
