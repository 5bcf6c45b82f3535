"""The judged commit, the main ref, and fetching what the ladder needs."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

from ..engines import Engine
from ..model import ToolError
from .git import ALLOWED_PROTOCOLS, FETCH_TIMEOUT_S, GitFailure, Repository

_HEX = re.compile(r"[0-9a-fA-F]{4,64}")


def resolve_commit(repository: Repository, spec: str, source: str | None = None) -> str:
    """Full sha of the commit ``spec`` names (a full or short sha, or any revision)."""
    where = f" (from {source})" if source and source != "--commit" else ""
    if _HEX.fullmatch(spec):
        objects = repository.lines("rev-parse", f"--disambiguate={spec.lower()}")
        typed = (
            repository.git(
                "cat-file", "--batch-check=%(objecttype) %(objectname)", stdin_text="".join(f"{o}\n" for o in objects)
            )
            if objects
            else ""
        )
        commits = [line.split()[1] for line in typed.splitlines() if line.startswith("commit ")]
        if len(commits) == 1:
            return commits[0]
        if len(commits) > 1:
            described = repository.lines("log", "--no-walk=sorted", "--format=%H %cs %s", *commits)
            listing = "; ".join(f"{line[:12]} ({line[41:]})" for line in described)
            raise ToolError(f"short sha {spec}{where} is ambiguous in {repository.location}: candidates {listing}")
    else:
        found = repository.git(
            "rev-parse", "--verify", "--quiet", "--end-of-options", f"{spec}^{{commit}}", ok=(0, 1)
        ).strip()
        if found:
            return found
    hint = "the clone is shallow; deepen it (git fetch --unshallow) or " if repository.shallow else ""
    raise ToolError(
        f"commit {spec}{where} is not in the repository {repository.location}: {hint}fetch the branch it was "
        f"built from (or rerun with --fetch), or give the clone it was built from with --repo"
    )


@dataclasses.dataclass(frozen=True)
class MainRef:
    name: str  # as the user knows it, e.g. origin/main
    full: str  # cache key, e.g. refs/remotes/origin/main
    sha: str


def resolve_main_ref(repository: Repository, main_ref: str | None, remote: str) -> MainRef:
    """``main_ref``, else ``<remote>/main`` when it exists, else ``main``."""
    for name in [main_ref] if main_ref else [f"{remote}/main", "main"]:
        sha = repository.git(
            "rev-parse", "--verify", "--quiet", "--end-of-options", f"{name}^{{commit}}", ok=(0, 1)
        ).strip()
        if sha:
            full = repository.git(
                "rev-parse", "--verify", "--quiet", "--symbolic-full-name", "--end-of-options", name, ok=(0, 1)
            )
            return MainRef(name, full.strip() or sha, sha)
    if main_ref:
        raise ToolError(f"main ref {main_ref} does not name a commit in {repository.location}")
    raise ToolError(f"neither {remote}/main nor main exists in {repository.location}: give --main-ref REF (or --fetch)")


def main_branch(main_ref: str | None, remote: str) -> str | None:
    """The remote branch behind ``main_ref`` that --fetch updates (None: a local ref, left alone)."""
    if main_ref is None:
        return "main"
    return main_ref.split("/", 1)[1] if main_ref.startswith(f"{remote}/") else None


def fetch_refs(repository: Repository, remote: str, branch: str | None, prs: Iterable[int], engine: Engine) -> set[int]:
    """Fetch ``refs/pull/N/head`` (and the main branch) from ``remote``, a clone of ``engine``; the PRs it lacks."""
    repository.refuse_upload_pack()
    remotes = repository.lines("remote")
    if remote not in remotes:
        known = f"its remotes: {', '.join(remotes)}" if remotes else "it has no remotes"
        raise ToolError(
            f"--fetch: {repository.location} has no remote named {remote} ({known}): name one with --remote NAME, "
            f"or add it: git -C {repository.location} remote add {remote} URL (of {engine.display}'s repository)"
        )
    url = repository.git("remote", "get-url", "--end-of-options", remote, ok=(0, 2)).strip() or "no URL"
    wanted = {f"refs/pull/{pr}/head": f"refs/pull/{pr}/head" for pr in prs}
    if branch:
        wanted[f"refs/heads/{branch}"] = f"refs/remotes/{remote}/{branch}"
    try:
        listed = repository.git("ls-remote", "--end-of-options", remote, *wanted, timeout=FETCH_TIMEOUT_S)
        present = {line.split("\t", 1)[1] for line in listed.splitlines() if "\t" in line}
        refspecs = [f"+{source}:{target}" for source, target in wanted.items() if source in present]
        if refspecs:
            repository.git(
                "fetch",
                "--quiet",
                "--no-tags",
                "--no-recurse-submodules",
                "--no-write-fetch-head",
                "--end-of-options",
                remote,
                *refspecs,
                timeout=FETCH_TIMEOUT_S,
            )
    except GitFailure as exc:
        allowed = (
            f" (dflash-doctor fetches only over {', '.join(ALLOWED_PROTOCOLS)})" if "not allowed" in str(exc) else ""
        )
        raise ToolError(f"cannot fetch from {remote} ({url}) into {repository.location}: {exc}{allowed}") from None
    return {pr for pr in prs if f"refs/pull/{pr}/head" not in present}
