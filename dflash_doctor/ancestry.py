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
to a temporary object directory (the repository's own store is only read).

Walks stay inside the merge-base range; the landing index (per main ref, extended
incrementally) and patch-ids (per commit) are cached in ``.git/dflash-doctor/``.
gitpython is imported inside the functions that need it.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from .model import EXIT_MISSING, EXIT_OK, EXIT_UNKNOWN, ToolError

CONTAINED = "contained"
MISSING = "missing"
UNKNOWN = "unknown"
SCHEMA = "dflash-doctor/ancestry/v1"

_HEX = re.compile(r"[0-9a-fA-F]{4,64}")
_LANDED = re.compile(r"\(#(\d+)\)\s*$")
_REVERTED = re.compile(r'^Revert "(.*)"')
_PR_NUMBER = re.compile(r"\(#(\d+)\)")
_CACHE_HEADER = "# dflash-doctor {} v1"
_CACHED_TIP = re.compile(r"tip [0-9a-f]{40,64}")
_CACHED_LANDING = re.compile(r"[LR] \d+ [0-9a-f]{40,64}")
_CACHED_PATCH_ID = re.compile(r"[0-9a-f]{40,64} ([0-9a-f]{40,64}|-)")


@dataclasses.dataclass(frozen=True)
class PrAncestry:
    pr: int
    fix: str | None
    status: str
    method: str
    evidence: tuple[tuple[str, Any], ...]
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {
            "pr": self.pr,
            "fix": self.fix,
            "status": self.status,
            "method": self.method,
            "evidence": dict(self.evidence),
            "reason": self.reason,
        }


@dataclasses.dataclass(frozen=True)
class AncestryReport:
    repo: str
    commit: str
    commit_source: str | None
    main_ref: str
    prs: tuple[PrAncestry, ...]

    @property
    def exit_code(self) -> int:
        """0 all contained, 1 any missing, else 2 any unknown (as ``check``)."""
        seen = {entry.status for entry in self.prs}
        if MISSING in seen:
            return EXIT_MISSING
        if UNKNOWN in seen:
            return EXIT_UNKNOWN
        return EXIT_OK

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "repo": self.repo,
            "commit": self.commit,
            "commit_source": self.commit_source,
            "prs": [entry.to_json() for entry in self.prs],
        }


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


class GitFailure(Exception):
    """A git command failed; the message is git's last line of stderr."""


def _short(sha: str | None) -> str:
    return sha[:12] if sha else "-"


def _last_line(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _stdin(text: str):
    handle = tempfile.TemporaryFile()
    handle.write(text.encode(errors="surrogateescape"))  # gitpython decodes output this way: bytes round-trip
    handle.seek(0)
    return handle


class Repository:
    """A git repository opened with gitpython, and how the ladder calls git in it."""

    def __init__(self, path: Path) -> None:
        import git

        try:
            self.repo = git.Repo(path)
        except git.NoSuchPathError:
            raise ToolError(f"no such repository: {path}") from None
        except git.InvalidGitRepositoryError:
            raise ToolError(f"not a git repository: {path}") from None
        self.location = self.repo.working_tree_dir or self.repo.git_dir
        common = Path(self.repo.common_dir)
        self.objects_dir = common / "objects"
        self.cache_dir = common / "dflash-doctor"
        self.shallow = (common / "shallow").is_file()
        self._temp: _TempObjects | None = None

    def git(self, *args: str, env: dict[str, str] | None = None, stdin_text: str | None = None, istream=None, ok: Sequence[int] = (0,)) -> str:
        """stdout of ``git args``; GitFailure unless the exit status is in ``ok``."""
        if stdin_text is not None:
            with _stdin(stdin_text) as handle:
                return self.git(*args, env=env, istream=handle, ok=ok)
        status, out, err = self.repo.git.execute(
            ["git", *args], with_extended_output=True, with_exceptions=False, env=env, istream=istream,
            strip_newline_in_stdout=False,
        )
        if status not in ok:
            raise GitFailure(f"git {args[0]}: {_last_line(err) or f'exit {status}'}")
        return out

    def pipe(self, first: Sequence[str], second: Sequence[str], stdin_text: str) -> str:
        """``git first | git second``; ``stdin_text`` feeds the first."""
        with _stdin(stdin_text) as stdin:
            handle = self.repo.git.execute(["git", *first], as_process=True, istream=stdin)
            producer = handle.proc  # alive while ``handle`` is: dropping it kills the process
            try:
                out = self.git(*second, istream=producer.stdout)
            except GitFailure:
                producer.kill()
                producer.wait()
                raise
            status = producer.wait()
            error = producer.stderr.read().decode(errors="replace")
            del handle
            if status:
                raise GitFailure(f"git {first[0]}: {_last_line(error) or f'exit {status}'}")
        return out

    def lines(self, *args: str) -> list[str]:
        return [line for line in self.git(*args).splitlines() if line]

    @functools.cached_property
    def is_partial_clone(self) -> bool:
        """A promisor clone fetches absent blobs on demand, i.e. over the network."""
        found = self.git("config", "--get-regexp", r"^(extensions\.partialclone|remote\..*\.promisor)$", ok=(0, 1))
        return bool(found.strip())

    def temp_objects(self) -> _TempObjects:
        if self._temp is None:
            self._temp = _TempObjects(self)
        return self._temp

    def close(self) -> None:
        if self._temp is not None:
            self._temp.close()
            self._temp = None
        self.repo.close()


class _TempObjects:
    """A throw-away object directory in front of the repository's own store."""

    def __init__(self, repository: Repository) -> None:
        from gitdb.db import LooseObjectDB

        self.directory = tempfile.mkdtemp(prefix="dflash-doctor-objects-")
        self.db = LooseObjectDB(self.directory)
        self.env = {"GIT_OBJECT_DIRECTORY": self.directory, "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(repository.objects_dir)}

    def commit(self, tree: str, parent: str | None = None) -> str:
        import io

        from gitdb.base import IStream

        who = "dflash-doctor <dflash-doctor@localhost> 0 +0000"
        text = f"tree {tree}\n" + (f"parent {parent}\n" if parent else "") + f"author {who}\ncommitter {who}\n\nmerge-tree probe\n"
        data = text.encode()
        return self.db.store(IStream(b"commit", len(data), io.BytesIO(data))).hexsha.decode()

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


@dataclasses.dataclass(frozen=True)
class ThreeWay:
    tree: str | None  # the result tree when clean
    conflicts: tuple[str, ...]


def three_way(repository: Repository, base_tree: str, ours_tree: str, theirs_tree: str) -> ThreeWay:
    """Cherry-pick style merge of base->theirs into ours, objects kept out of the repository."""
    temp = repository.temp_objects()
    base = temp.commit(base_tree)
    ours, theirs = temp.commit(ours_tree, base), temp.commit(theirs_tree, base)
    out = repository.git(
        "merge-tree", "--write-tree", "-z", "--name-only", "--no-messages", ours, theirs,
        env=temp.env, ok=(0, 1),
    )
    fields = [field for field in out.split("\0") if field]
    conflicts = tuple(dict.fromkeys(fields[1:]))
    return ThreeWay(None if conflicts else fields[0], conflicts)


# ---------------------------------------------------------------- commits and refs


def resolve_commit(repository: Repository, spec: str, source: str | None = None) -> str:
    """Full sha of the commit ``spec`` names (a full or short sha, or any revision)."""
    where = f" (from {source})" if source and source != "--commit" else ""
    if _HEX.fullmatch(spec):
        objects = repository.lines("rev-parse", f"--disambiguate={spec.lower()}")
        typed = repository.git("cat-file", "--batch-check=%(objecttype) %(objectname)", stdin_text="".join(f"{o}\n" for o in objects)) if objects else ""
        commits = [line.split()[1] for line in typed.splitlines() if line.startswith("commit ")]
        if len(commits) == 1:
            return commits[0]
        if len(commits) > 1:
            described = repository.lines("log", "--no-walk=sorted", "--format=%H %cs %s", *commits)
            listing = "; ".join(f"{line[:12]} ({line[41:]})" for line in described)
            raise ToolError(f"short sha {spec}{where} is ambiguous in {repository.location}: candidates {listing}")
    else:
        found = repository.git("rev-parse", "--verify", "--quiet", "--end-of-options", f"{spec}^{{commit}}", ok=(0, 1)).strip()
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
        sha = repository.git("rev-parse", "--verify", "--quiet", "--end-of-options", f"{name}^{{commit}}", ok=(0, 1)).strip()
        if sha:
            full = repository.git("rev-parse", "--verify", "--quiet", "--symbolic-full-name", "--end-of-options", name, ok=(0, 1))
            return MainRef(name, full.strip() or sha, sha)
    if main_ref:
        raise ToolError(f"main ref {main_ref} does not name a commit in {repository.location}")
    raise ToolError(f"neither {remote}/main nor main exists in {repository.location}: give --main-ref REF (or --fetch)")


def main_branch(main_ref: str | None, remote: str) -> str | None:
    """The remote branch behind ``main_ref`` that --fetch updates (None: a local ref, left alone)."""
    if main_ref is None:
        return "main"
    return main_ref.split("/", 1)[1] if main_ref.startswith(f"{remote}/") else None


def fetch_refs(repository: Repository, remote: str, branch: str | None, prs: Iterable[int]) -> set[int]:
    """Fetch ``refs/pull/N/head`` (and the main branch) from ``remote``; the PRs it lacks."""
    wanted = {f"refs/pull/{pr}/head": f"refs/pull/{pr}/head" for pr in prs}
    if branch:
        wanted[f"refs/heads/{branch}"] = f"refs/remotes/{remote}/{branch}"
    try:
        listed = repository.lines("ls-remote", "--end-of-options", remote, *wanted)
        present = {line.split("\t", 1)[1] for line in listed if "\t" in line}
        refspecs = [f"+{source}:{target}" for source, target in wanted.items() if source in present]
        if refspecs:
            repository.git("fetch", "--quiet", "--no-tags", "--end-of-options", remote, *refspecs)
    except GitFailure as exc:
        raise ToolError(f"cannot fetch from {remote} into {repository.location}: {exc}") from None
    return {pr for pr in prs if f"refs/pull/{pr}/head" not in present}


# ---------------------------------------------------------------- caches


def _read_cache(path: Path, kind: str) -> list[str] | None:
    from .paths import caches_disabled

    if caches_disabled():
        return None
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    return lines[1:] if lines and lines[0] == _CACHE_HEADER.format(kind) else None


def _write_cache(repository: Repository, path: Path, kind: str, lines: Iterable[str]) -> None:
    """Best effort: a read-only or shallow repository is judged all the same, just not cached."""
    from .paths import caches_disabled
    from .paths import write_atomically

    if repository.shallow or caches_disabled():
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, "\n".join([_CACHE_HEADER.format(kind), *lines]) + "\n")
    except (OSError, ToolError):
        pass


@dataclasses.dataclass
class LandingIndex:
    """First-parent commits of the main ref whose subject names a PR, newest first."""

    tip: str
    landed: dict[int, list[str]]
    reverted: dict[int, list[str]]

    def add_log(self, lines: Iterable[str]) -> None:
        for line in lines:
            sha, _, subject = line.split("\0", 2)
            landed = _LANDED.search(subject)
            if landed:
                self.landed.setdefault(int(landed.group(1)), []).append(sha)
            reverted = _REVERTED.match(subject)
            if reverted:
                for number in _PR_NUMBER.findall(reverted.group(1)):
                    self.reverted.setdefault(int(number), []).append(sha)

    def lines(self) -> list[str]:
        return (
            [f"tip {self.tip}"]
            + [f"L {pr} {sha}" for pr, shas in self.landed.items() for sha in shas]
            + [f"R {pr} {sha}" for pr, shas in self.reverted.items() for sha in shas]
        )

    @classmethod
    def parse(cls, lines: list[str]) -> LandingIndex | None:
        """The cached index; None when the file is not one this code wrote."""
        if not lines or not _CACHED_TIP.fullmatch(lines[0]):
            return None
        index = cls(lines[0][4:], {}, {})
        for line in lines[1:]:
            if not _CACHED_LANDING.fullmatch(line):
                return None
            kind, pr, sha = line.split()
            (index.landed if kind == "L" else index.reverted).setdefault(int(pr), []).append(sha)
        return index


def landing_index(repository: Repository, main: MainRef) -> LandingIndex:
    """Read from the cache, extended by the main-ref commits added since it was written."""
    path = repository.cache_dir / "landings" / quote(main.full, safe="")
    cached = LandingIndex.parse(_read_cache(path, "landings") or [])
    if cached and cached.tip == main.sha:
        return cached
    log = ["log", "--first-parent", "--format=%H%x00%P%x00%s", main.sha]
    if cached:
        new = repository.lines(*log, f"^{cached.tip}")
        oldest_parent = new[-1].split("\0")[1].split(" ")[0] if new else None
        if oldest_parent == cached.tip:  # the cached tip is on the new first-parent line
            index = LandingIndex(main.sha, {}, {})
            index.add_log(new)
            for table, old in ((index.landed, cached.landed), (index.reverted, cached.reverted)):
                for pr, shas in old.items():
                    table.setdefault(pr, []).extend(shas)
            _write_cache(repository, path, "landings", index.lines())
            return index
    index = LandingIndex(main.sha, {}, {})
    index.add_log(repository.lines(*log))
    _write_cache(repository, path, "landings", index.lines())
    return index


class PatchIds:
    """``git patch-id --stable`` per commit, cached in the git dir (a commit's patch never changes)."""

    def __init__(self, repository: Repository) -> None:
        self.repository = repository
        self.path = repository.cache_dir / "patch-ids"
        self.known: dict[str, str | None] = {}
        for line in _read_cache(self.path, "patch-ids") or []:
            if _CACHED_PATCH_ID.fullmatch(line):
                commit, patch_id = line.split()
                self.known[commit] = None if patch_id == "-" else patch_id
        self.added = False

    def of(self, commits: Iterable[str]) -> dict[str, str | None]:
        commits = list(dict.fromkeys(commits))
        todo = [commit for commit in commits if commit not in self.known]
        if todo:
            out = self.repository.pipe(["diff-tree", "--stdin", "-p", "--no-color", "--no-ext-diff"], ["patch-id", "--stable"], "\n".join(todo) + "\n")
            found = dict(reversed(line.split()) for line in out.splitlines() if line)
            for commit in todo:
                self.known[commit] = found.get(commit)  # None: empty change
            self.added = True
        return {commit: self.known[commit] for commit in commits}

    def save(self) -> None:
        if self.added:
            _write_cache(self.repository, self.path, "patch-ids", (f"{c} {p or '-'}" for c, p in self.known.items()))


# ---------------------------------------------------------------- judging


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
    def __init__(self, repository: Repository, judged: str, main: MainRef, remote: str, fetch: bool, not_on_remote: set[int]) -> None:
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
            case.verdict = (CONTAINED, "merge-commit", f"landing commit {_short(ancestors[0])} on {self.main.name} is an ancestor")
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
                    case.verdict = (UNKNOWN, "none", (
                        f"git could not compare contents ({exc}); fetch what is absent: "
                        f"git -C {self.repository.location} fetch {self.remote}, or check the clone with git fsck"
                    ))

    def _patch_ids(self, cases: list[_Case]) -> None:
        repository = self.repository
        own = self.own_history
        pr_commits = {
            case.pr: repository.lines("rev-list", "--no-merges", case.head, f"^{self.main.sha}") if case.head else []
            for case in cases
        }
        patch_ids = PatchIds(repository)
        ids = patch_ids.of(own + [sha for case in cases for sha in case.landings] + [sha for shas in pr_commits.values() for sha in shas])
        patch_ids.save()
        by_patch: dict[str, str] = {}
        for commit in reversed(own):  # oldest first: the first pick wins
            if ids[commit]:
                by_patch.setdefault(ids[commit], commit)
        for case in cases:
            matches = [
                {"commit": by_patch[ids[sha]], "same_as": sha, "patch_id": ids[sha]}
                for sha in case.landings
                if ids[sha] in by_patch
            ][:1]
            changed = [sha for sha in pr_commits[case.pr] if ids[sha]]
            if not matches and changed and all(ids[sha] in by_patch for sha in changed):
                matches = [{"commit": by_patch[ids[sha]], "same_as": sha, "patch_id": ids[sha]} for sha in changed]
            if matches:
                case.evidence["matches"] = matches
                what = "the landing commit" if matches[0]["same_as"] in case.landings else f"all {len(matches)} commits of refs/pull/{case.pr}/head"
                where = ", ".join(_short(match["commit"]) for match in matches)
                case.verdict = (CONTAINED, "patch-id", f"{where} in the judged history since the merge base carries the patch of {what}")

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
                    case.verdict = (CONTAINED, "merge-tree", f"the change {_short(base_commit)}..{_short(tip)} merges into the judged commit as a no-op")
                    break
                conflicts.extend(merged.conflicts)
            case.conflicts = tuple(dict.fromkeys(conflicts))

    def _undecided(self, case: _Case) -> tuple[str, str, str]:
        """``missing`` only when git has everything it needs to say so."""
        location = self.repository.location
        if self.repository.shallow:
            return UNKNOWN, "none", f"the clone is shallow, so the history is incomplete; fetch it: git -C {location} fetch --unshallow {self.remote}"
        if not case.landings and not case.head:
            why = f"no first-parent commit of {self.main.name} ends in (#{case.pr}) and refs/pull/{case.pr}/head is not in the repository"
            if case.pr in self.not_on_remote:
                return UNKNOWN, "none", f"{why}, and {self.remote} has no refs/pull/{case.pr}/head either"
            return UNKNOWN, "none", f"{why}; fetch: {self.fetch_hint(case.pr, main_too=True)}"
        if self.repository.is_partial_clone and not self.fetch:
            return UNKNOWN, "none", (
                "partial clone: patch-id and merge-tree need file contents git would fetch on demand; "
                "rerun with --fetch to allow that"
            )
        if case.conflicts and self.own_history:
            case.evidence["conflicts"] = list(case.conflicts)
            return UNKNOWN, "none", (
                f"the change conflicts with the judged commit in {', '.join(case.conflicts)}: git cannot tell; "
                "`dflash-doctor check` reads the code itself"
            )
        if case.reverts:
            return MISSING, "none", f"landing commit {_short(case.landings[0])} was reverted by {_short(case.reverts[0])}, and no other test finds the change"
        steps = [f"landing commit {_short(case.landings[0])} is not an ancestor" if case.landings else f"no commit of {self.main.name} lands #{case.pr}"]
        if self.own_history:
            steps += ["no commit since the merge base carries its patch", "merging its change would alter the tree"]
        else:
            steps.append(f"the judged commit lies in {self.main.name}'s history, with no commits of its own that could carry it")
        return MISSING, "none", "; ".join(steps)


def _wanted_prs(rules, prs: Sequence[int] | None) -> list[tuple[str | None, int]]:
    pairs = [(rule.id, pr) for rule in rules for pr in (*rule.prs, *rule.unmerged_prs)]
    if not prs:
        return pairs
    chosen = [(fix, pr) for fix, pr in pairs if pr in prs]
    return chosen + [(None, pr) for pr in dict.fromkeys(prs) if pr not in {p for _, p in pairs}]


def judge(
    repo: Path,
    commit: str,
    commit_source: str | None = None,
    *,
    rules=None,
    prs: Sequence[int] | None = None,
    main_ref: str | None = None,
    remote: str = "origin",
    fetch: bool = False,
) -> AncestryReport:
    """Judge ``commit`` in ``repo`` for every PR of ``rules`` (default: all rules)."""
    if rules is None:
        from .rules import load_rules

        rules = load_rules()
    wanted = _wanted_prs(rules, prs)
    numbers = list(dict.fromkeys(pr for _, pr in wanted))
    repository = Repository(repo)
    try:
        not_on_remote: set[int] = set()
        if fetch:
            not_on_remote = fetch_refs(repository, remote, main_branch(main_ref, remote), numbers)
        try:
            main = resolve_main_ref(repository, main_ref, remote)
            judged = resolve_commit(repository, commit, commit_source)
            cases = _Judge(repository, judged, main, remote, fetch, not_on_remote).run(numbers)
        except GitFailure as exc:
            raise ToolError(f"{exc} (in {repository.location})") from None
        entries = []
        for fix, pr in wanted:
            status, method, reason = cases[pr].verdict
            entries.append(PrAncestry(pr, fix, status, method, tuple(cases[pr].evidence.items()), reason))
        return AncestryReport(str(repository.location), judged, commit_source, main.name, tuple(entries))
    finally:
        repository.close()


def ancestry_report(repo: Path, commit: str, commit_source: str | None = None, **options) -> dict[str, Any]:
    """The JSON section ``check --repo`` adds to its report (raises ToolError when it cannot run)."""
    return judge(repo, commit, commit_source, **options).to_json()


def commit_from_target(target) -> tuple[str, str]:
    """The build commit a target records (``check`` provenance), and where it was read."""
    from .provenance import read_provenance

    resolved = target.resolve()
    provenance = read_provenance(resolved.tree)
    if not provenance.commit and resolved.build_commit:
        return resolved.build_commit
    if not provenance.commit:
        if provenance.version:
            raise ToolError(f"the target records no build commit (version {provenance.version}): give --commit SHA "
                            f"(for a release, its tag: --commit v{provenance.version})")
        raise ToolError("the target records neither a version nor a build commit: give --commit SHA")
    return provenance.commit, provenance.commit_source


# ---------------------------------------------------------------- patching a checkout


def apply_pr(repo: Path, pr: int, *, main_ref: str | None = None, remote: str = "origin", dry_run: bool = False) -> PatchOutcome:
    """3-way apply PR ``pr``'s change to the working tree of ``repo``.

    The merge is computed first, on a snapshot of the working tree (tracked files,
    local edits included) in a temporary index and object directory; only a clean
    result is written, with one atomic ``git apply``. On conflict nothing is touched;
    with ``dry_run`` never (the outcome carries the diff either way).
    """
    repository = Repository(repo)
    try:
        if repository.repo.working_tree_dir is None:
            raise ToolError(f"{repository.location} is a bare repository: patch needs a checkout")
        try:
            return _apply(repository, pr, main_ref, remote, dry_run)
        except GitFailure as exc:
            raise ToolError(f"cannot patch {repository.location}: {exc}") from None
    finally:
        repository.close()


def _apply(repository: Repository, pr: int, main_ref: str | None, remote: str, dry_run: bool) -> PatchOutcome:
    main = resolve_main_ref(repository, main_ref, remote)
    landings = landing_index(repository, main).landed.get(pr, [])
    head = repository.git("rev-parse", "--verify", "--quiet", f"refs/pull/{pr}/head^{{commit}}", ok=(0, 1)).strip()
    if landings:
        base, tip = f"{landings[0]}^", landings[0]
        change = (("landing", landings[0]),)
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
    temp = repository.temp_objects()
    index = Path(temp.directory) / "index"
    real_index = Path(repository.repo.git_dir) / "index"
    env = {**temp.env, "GIT_INDEX_FILE": str(index)}
    if real_index.is_file():
        shutil.copyfile(real_index, index)
    else:
        repository.git("read-tree", "HEAD", env=env)
    repository.git("add", "--update", env=env)
    worktree = repository.git("write-tree", env=env).strip()
    merged = three_way(repository, base_tree, worktree, tip_tree)
    if merged.conflicts:
        return PatchOutcome(pr, "conflict", change, (), merged.conflicts)
    if merged.tree == worktree:
        return PatchOutcome(pr, "already-present", change, (), ())
    files = tuple(f for f in repository.git("diff", "--name-only", "-z", worktree, merged.tree, env=temp.env).split("\0") if f)
    diff = repository.git("diff", "--binary", "--full-index", worktree, merged.tree, env=temp.env)
    if dry_run:
        return PatchOutcome(pr, "would-apply", change, files, (), diff)
    try:
        repository.git("apply", "--binary", env=temp.env, stdin_text=diff)
    except GitFailure as exc:
        raise ToolError(f"the merged change does not apply to the working tree (nothing was changed): {exc}") from None
    return PatchOutcome(pr, "applied", change, files, (), diff)


# ---------------------------------------------------------------- rendering

STYLES = {CONTAINED: "bold green", MISSING: "bold red", UNKNOWN: "bold magenta"}
_COMMIT_KEYS = ("landing", "pr_head", "reverted_by", "merge_base")


def _evidence_lines(entry: PrAncestry) -> list[str]:
    evidence = dict(entry.evidence)
    lines = [f"{key} {_short(evidence[key])}" for key in _COMMIT_KEYS if evidence.get(key)]
    lines += [f"{_short(m['commit'])} = {_short(m['same_as'])} (patch-id {m['patch_id'][:12]})" for m in evidence.get("matches", [])]
    if evidence.get("applied"):
        lines.append(f"applied {_short(evidence['applied']['base'])}..{_short(evidence['applied']['tip'])}")
    return lines


def _header(report: AncestryReport) -> str:
    source = f" (from {report.commit_source})" if report.commit_source else ""
    return f"commit {report.commit}{source} in {report.repo}, main line {report.main_ref}"


def render(report: AncestryReport, terminal: bool) -> str:
    """A rich table on a terminal, plain lines otherwise."""
    if not terminal:
        out = [_header(report)]
        for entry in report.prs:
            out.append(f"{entry.fix or '-'} #{entry.pr}: {entry.status} ({entry.method}) - {entry.reason}")
            out.extend(f"    {line}" for line in _evidence_lines(entry))
        return "\n".join(out) + "\n"

    from .terminal import terminal_text
    from rich.table import Table

    table = Table(title=_header(report), title_justify="left", show_lines=True)
    for column in ("fix", "PR", "status", "method", "evidence"):
        table.add_column(column, overflow="fold")
    for entry in report.prs:
        table.add_row(
            entry.fix or "-",
            f"#{entry.pr}",
            f"[{STYLES[entry.status]}]{entry.status}[/]",
            entry.method,
            "\n".join([*_evidence_lines(entry), entry.reason]),
        )
    return terminal_text(table)
