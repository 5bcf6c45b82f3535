"""`dflash-doctor ancestry` and `apply_pr` on repositories built here with real git."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from conftest import CACHING, ancestry_json, assert_error, run_cli
from dflash_doctor.ancestry import apply_pr, render, trace
from dflash_doctor.model import ToolError
from gitrepos import DFLASH, SCHEDULER, SPECULATIVE, SWA, Repo, generate_history

pytestmark = pytest.mark.slow


def by_pr(report, fix: str | None = None) -> dict[int, dict]:
    """pr -> JSON entry (the entries of one fix when ``fix`` is given)."""
    return {e["pr"]: e for e in report.to_json()["prs"] if fix is None or e["fix"] == fix}


def statuses(report) -> dict[int, tuple[str, str]]:
    return {e["pr"]: (e["status"], e["method"]) for e in report.to_json()["prs"]}


# ------------------------------------------------------------------ the ladder


def test_main_tip_contains_every_merged_pr_by_merge_commit(history):
    c = history.c
    report = trace(history.path, "main")
    entries = by_pr(report)
    for pr in (40727, 46104, 47914, 48113, 53388):
        assert (entries[pr]["status"], entries[pr]["method"]) == ("contained", "merge-commit"), entries[pr]
        assert entries[pr]["evidence"]["landing"] == c[str(pr)]
    assert report.commit == c["main"]
    # The unmerged PR's rebased head is not in main: git has everything, so missing.
    assert statuses(report)[40898] == ("missing", "none")
    assert entries[40898]["evidence"]["pr_head"] == c["pr_head"]
    # No landing and no refs/pull: unknown, never missing, with the fetch command.
    assert statuses(report)[54163] == ("unknown", "none")
    assert "fetch origin" in entries[54163]["reason"] and "refs/pull/54163/head" in entries[54163]["reason"]
    assert report.exit_code == 1


def test_section_for_the_check_report_is_the_ancestry_report(history):
    from dflash_doctor.api import with_ancestry
    from dflash_doctor.model import CheckReport, Provenance, TargetInfo
    from dflash_doctor.rulefile import load_rules

    built = Provenance("0.20.1", history.c["release"][:9], "version", None)
    report = with_ancestry(CheckReport(TargetInfo("path", "/site"), built, (), "0"), history.path, None, load_rules())
    section = report.to_json()["ancestry"]
    assert section == trace(history.path, history.c["release"], "version").to_json()
    assert (section["commit"], section["commit_source"]) == (history.c["release"], "version")
    assert report.sections[-1].lines()[0] == f"ancestry of {section['commit']} in {section['repo']}:"


def test_one_entry_per_fix_and_pr_from_the_rules(history):
    from dflash_doctor.rulefile import load_rules

    report = trace(history.path, "main")  # a vLLM clone: the PRs of vLLM's rules, never another engine's
    expected = [
        (rule.id, pr) for rule in load_rules() if rule.engine == "vllm" for pr in (*rule.prs, *rule.unmerged_prs)
    ]
    assert [(e.fix, e.pr) for e in report.prs] == expected
    assert {e.fix for e in report.prs if e.pr == 40898} == {"layer-offset", "swa-config", "cache-drop"}


def test_cherry_pick_onto_release_branch_is_found_by_patch_id(history):
    c, repo = history.c, history.repo
    assert c["pick_40727"] != c["40727"] and repo.patch_id(c["pick_40727"]) == repo.patch_id(c["40727"])
    entry = by_pr(trace(history.path, "releases/v0.20"))[40727]
    assert (entry["status"], entry["method"]) == ("contained", "patch-id")
    assert entry["evidence"]["matches"] == [
        {"commit": c["pick_40727"], "same_as": c["40727"], "patch_id": repo.patch_id(c["40727"])}
    ]


def test_backport_that_resolved_a_conflict_is_found_by_merge_tree(history):
    c, repo = history.c, history.repo
    # The backport had to resolve a conflict with the release hotfix: its patch differs.
    assert repo.patch_id(c["release"]) != repo.patch_id(c["46104"])
    entry = by_pr(trace(history.path, c["release"]))[46104]
    assert (entry["status"], entry["method"]) == ("contained", "merge-tree"), entry
    assert entry["evidence"]["applied"] == {"base": c["sched"], "tip": c["46104"]}


def test_release_branch_lacks_the_prs_it_did_not_pick(history):
    report = trace(history.path, "releases/v0.20")
    for pr in (47914, 48113, 53388):
        assert statuses(report)[pr] == ("missing", "none")
        assert "is not an ancestor" in by_pr(report)[pr]["reason"]
    assert report.exit_code == 1


def test_later_edit_of_the_same_line_is_unknown_not_missing(history):
    entry = by_pr(trace(history.path, "releases/v0.20-later"))[46104]
    assert (entry["status"], entry["method"]) == ("unknown", "none")
    assert entry["evidence"]["conflicts"] == [DFLASH]
    assert "dflash-doctor check" in entry["reason"]


def test_branch_built_from_the_pr_before_its_rebase_is_found_by_patch_id(history):
    c = history.c
    entry = by_pr(trace(history.path, "fork/dflash-swa"), "layer-offset")[40898]
    assert (entry["status"], entry["method"]) == ("contained", "patch-id")
    matches = {(m["commit"], m["same_as"]) for m in entry["evidence"]["matches"]}
    rebased = history.repo.git("rev-list", "--reverse", f"{c['main']}..{c['pr_head']}").split()
    assert matches == {(c["pr_1"], rebased[0]), (c["pr_2"], rebased[1])}
    assert c["pr_1"] not in rebased


def test_commit_older_than_the_fixes_misses_them(history):
    report = trace(history.path, "v0.20.0")
    for pr in (40727, 46104, 47914, 48113, 53388, 40898):
        assert statuses(report)[pr] == ("missing", "none"), by_pr(report)[pr]
    # #46104 conflicts with the older tree, but the commit lies on main before it.
    assert "lies in main's history" in by_pr(report)[46104]["reason"]


def test_reverted_landing_is_missing(copy):
    main = copy.sha("main")
    copy.git("revert", "--no-edit", history_sha(copy, "(#48113)"))
    subject = copy.git("log", "-1", "--format=%s")
    copy.git("commit", "--amend", "--quiet", "-m", f"{subject} (#1010)")
    revert = copy.sha("HEAD")
    entry = by_pr(trace(copy.path, "main", prs=[48113]))[48113]
    assert (entry["status"], entry["evidence"]["reverted_by"]) == ("missing", revert), entry
    assert "reverted" in entry["reason"]
    assert statuses(trace(copy.path, main, prs=[48113]))[48113] == ("contained", "merge-commit")


def history_sha(repo: Repo, subject_end: str) -> str:
    return repo.git("log", "--first-parent", "--format=%H", "-F", f"--grep={subject_end}", "main").split()[0]


# ------------------------------------------------------------------ incomplete repositories


def test_shallow_clone_says_unknown_never_missing(history, tmp_path):
    clone = tmp_path / "shallow"
    subprocess.run(["git", "clone", "--quiet", "--depth", "3", f"file://{history.path}", str(clone)], check=True)
    code, report = ancestry_json("--repo", str(clone), "--commit", "HEAD", env=CACHING)
    entries = {e["pr"]: e for e in report["prs"]}
    assert {pr: e["status"] for pr, e in entries.items() if e["status"] == "contained"} == {
        48113: "contained",
        53388: "contained",
    }
    for pr in (40727, 46104, 47914, 40898, 54163):
        assert entries[pr]["status"] == "unknown" and "shallow" in entries[pr]["reason"], entries[pr]
        assert "fetch --unshallow" in entries[pr]["reason"]
    assert code == 2
    assert not (clone / ".git" / "dflash-doctor").exists()  # nothing cached from a partial view


def test_partial_clone_does_not_fetch_contents_without_fetch(history, tmp_path):
    origin = tmp_path / "origin"
    shutil.copytree(history.path, origin, symlinks=True)
    Repo(origin).git("config", "uploadpack.allowFilter", "true")
    clone = tmp_path / "partial"
    subprocess.run(
        ["git", "clone", "--quiet", "--no-checkout", "--filter=blob:none", f"file://{origin}", str(clone)], check=True
    )
    objects_before = Repo(clone).git("count-objects", "-v")
    code, report = ancestry_json("--repo", str(clone), "--commit", "origin/releases/v0.20", "--pr", "40727")
    assert report["prs"][0]["status"] == "unknown" and "partial clone" in report["prs"][0]["reason"]
    assert code == 2
    assert Repo(clone).git("count-objects", "-v") == objects_before
    code, report = ancestry_json("--repo", str(clone), "--commit", "origin/releases/v0.20", "--pr", "40727", "--fetch")
    assert (report["prs"][0]["status"], report["prs"][0]["method"]) == ("contained", "patch-id")
    assert code == 0


def test_absent_objects_give_unknown_never_missing(copy):
    blob = copy.git("rev-parse", f"{history_sha(copy, '(#48113)')}:{DFLASH}")
    (copy.path / ".git" / "objects" / blob[:2] / blob[2:]).unlink()  # loose, as the build left it
    report = trace(copy.path, "releases/v0.20")
    for pr in (47914, 48113, 53388):
        entry = by_pr(report)[pr]
        assert (entry["status"], entry["method"]) == ("unknown", "none"), entry
        assert "git could not compare contents" in entry["reason"]
    assert statuses(report)[40727] == ("unknown", "none")  # patch-id could not run either
    assert report.exit_code == 2


def test_fetch_brings_pull_refs_and_nothing_is_fetched_without_it(history, tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", f"file://{history.path}", str(clone)], check=True)
    args = ("--repo", str(clone), "--commit", "origin/fork/dflash-swa", "--only", "layer-offset")
    code, report = ancestry_json(*args)
    entry = {e["pr"]: e for e in report["prs"]}[40898]
    assert entry["status"] == "unknown" and "+refs/pull/40898/head:refs/pull/40898/head" in entry["reason"]
    assert "--fetch" in entry["reason"]
    assert not Repo(clone).git("for-each-ref", "refs/pull/")
    code, report = ancestry_json(*args, "--fetch")
    entry = {e["pr"]: e for e in report["prs"]}[40898]
    assert (entry["status"], entry["method"]) == ("contained", "patch-id")
    assert Repo(clone).git("rev-parse", "refs/pull/40898/head") == history.c["pr_head"]
    assert code == 0
    _, report = ancestry_json("--repo", str(clone), "--commit", "origin/main", "--pr", "54163", "--fetch")
    assert "origin has no refs/pull/54163/head" in report["prs"][0]["reason"]


def test_fetch_from_a_remote_that_is_not_there(history):
    proc = run_cli("ancestry", "--repo", str(history.path), "--commit", "main", "--fetch", "--remote", "nowhere")
    assert_error(proc, "has no remote named nowhere (it has no remotes): name one with --remote NAME")


# ------------------------------------------------------------------ naming the commit


def test_commit_not_in_the_repository_is_a_clear_error(history):
    proc = run_cli("ancestry", "--repo", str(history.path), "--commit", "0123456789abcdef0123456789abcdef01234567")
    assert_error(proc, "commit 0123456789abcdef0123456789abcdef01234567 is not in the repository")
    assert "--fetch" in proc.stderr
    assert_error(
        run_cli("ancestry", "--repo", str(history.path), "--commit", "no-such-branch"), "is not in the repository"
    )


def test_a_clone_that_is_not_vllm_is_refused_in_one_line(tmp_path):
    """Issue 21.9: judged by the content at the commit (no vllm/ package), not by the remote's name."""
    repo = Repo.init(tmp_path / "vllm")
    repo.git("remote", "add", "origin", "https://github.com/vllm-project/vllm.git")
    repo.commit("Initial import (#1000)", {"src/app/__init__.py": "VALUE = 1\n", "README.md": "not vLLM\n"})
    proc = run_cli("ancestry", "--repo", str(repo.path), "--commit", "main")
    assert_error(proc, f"{repo.path} does not look like a vLLM or SGLang clone: commit ")
    assert "has no vllm/ or python/sglang/ package" in proc.stderr and proc.stdout == ""
    proc = run_cli("ancestry", "--repo", str(repo.path), "--commit", "main", "--engine", "vllm")
    assert_error(proc, f"{repo.path} does not look like a vLLM clone: commit ")
    assert "has no vllm/ package" in proc.stderr and proc.stdout == ""


def test_short_sha_resolves_and_ambiguous_one_lists_candidates(tmp_path):
    repo = Repo.init(tmp_path / "many")
    shas = generate_history(repo, "main", 1500)
    prefixes: dict[str, list[str]] = {}
    for sha in shas:
        prefixes.setdefault(sha[:4], []).append(sha)
    ambiguous = next(group for group in prefixes.values() if len(group) > 1)
    proc = run_cli("ancestry", "--repo", str(repo.path), "--commit", ambiguous[0][:4])
    assert_error(proc, f"short sha {ambiguous[0][:4]} is ambiguous")
    assert all(sha[:12] in proc.stderr for sha in ambiguous)
    # A prefix that other objects share but only one commit has: the commit is meant.
    objects = repo.git("cat-file", "--batch-all-objects", "--batch-check=%(objectname) %(objecttype)").splitlines()
    shared = {}
    for line in objects:
        sha, kind = line.split()
        shared.setdefault(sha[:4], []).append(kind)
    prefix = next(p for p, kinds in shared.items() if kinds.count("commit") == 1 and len(kinds) > 1)
    commit = next(sha for sha in shas if sha.startswith(prefix))
    assert trace(repo.path, prefix).commit == commit


def test_commit_from_the_target_provenance(history, tmp_path):
    tree = tmp_path / "site"
    (tree / "vllm").mkdir(parents=True)
    (tree / "vllm" / "__init__.py").write_text("")
    release = history.c["release"]
    (tree / "vllm" / "_version.py").write_text(f"__version__ = '0.1.dev16016+g{release[:9]}'\n")
    code, report = ancestry_json("--repo", str(history.path), "--path", str(tree))
    assert (report["commit"], report["commit_source"]) == (release, "version")
    entries = {e["pr"]: e for e in report["prs"]}
    assert (entries[40727]["method"], entries[46104]["method"]) == ("patch-id", "merge-tree")
    assert code == 1

    (tree / "vllm" / "_version.py").write_text("__version__ = '0.20.1'\n")
    proc = run_cli("ancestry", "--repo", str(history.path), "--path", str(tree))
    assert_error(proc, "records no build commit")
    assert "--commit v0.20.1" in proc.stderr
    assert_error(run_cli("ancestry", "--repo", str(history.path), "--path", str(tree), "--commit", "main"), "not both")


# ------------------------------------------------------------------ options, output, exit codes


def test_exit_codes_follow_check(history):
    base = ("--repo", str(history.path), "--commit", "releases/v0.20")
    code, report = ancestry_json(*base, "--pr", "40727", "--pr", "46104")
    assert code == 0 and [e["status"] for e in report["prs"]] == ["contained", "contained"]
    code, _ = ancestry_json(*base, "--pr", "54163")
    assert code == 2
    code, _ = ancestry_json(*base, "--pr", "54163", "--pr", "53388")
    assert code == 1


def test_any_pr_number_can_be_asked(history):
    code, report = ancestry_json("--repo", str(history.path), "--commit", "main", "--pr", "1002")
    assert report["prs"] == [
        {
            "pr": 1002,
            "fix": None,
            "status": "contained",
            "method": "merge-commit",
            "reason": report["prs"][0]["reason"],
            "evidence": {"landing": history.c["sched"], "pr_head": None, "main_ref": "main"},
        }
    ]
    assert code == 0


def test_plain_and_rich_output(history, tmp_path):
    proc = run_cli("ancestry", "--repo", str(history.path), "--commit", "releases/v0.20", "--only", "layer-offset")
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"commit {history.c['release']} (from --commit)")
    assert any(line.startswith("layer-offset #40727: contained (patch-id)") for line in lines)
    assert proc.returncode == 1
    rich = render(trace(history.path, "releases/v0.20"), terminal=True)
    assert "merge-tree" in rich and "\x1b[" in rich
    output = tmp_path / "report.json"
    proc = run_cli(
        "ancestry", "--repo", str(history.path), "--commit", "main", "--format", "json", "--output", str(output)
    )
    assert proc.stdout == "" and json.loads(output.read_text())["schema"] == "dflash-doctor/ancestry/v1"


def test_main_ref_defaults_to_origin_main_and_can_be_named(history, tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", f"file://{history.path}", str(clone)], check=True)
    Repo(clone).git("checkout", "--quiet", "--detach")
    Repo(clone).git("branch", "-f", "main", history.c["docs"])  # a stale local main
    entry = trace(clone, "origin/main", prs=[40727]).prs[0]
    assert (entry.status, dict(entry.evidence)["main_ref"]) == ("contained", "origin/main")
    entry = trace(clone, "origin/main", prs=[40727], main_ref="main").prs[0]
    assert entry.status == "unknown"  # the stale main has no landing commit for #40727
    assert_error(run_cli("ancestry", "--repo", str(clone), "--commit", "main", "--main-ref", "nope"), "main ref nope")


def test_bad_repositories(history, tmp_path):
    assert_error(run_cli("ancestry", "--repo", str(tmp_path / "absent"), "--commit", "main"), "no such repository")
    assert_error(run_cli("ancestry", "--repo", str(tmp_path), "--commit", "main"), "not a git repository")
    lone = Repo.init(tmp_path / "lone", branch="trunk")
    lone.commit("only (#1)", {"vllm/__init__.py": ""})  # a vLLM clone without a main line
    assert_error(run_cli("ancestry", "--repo", str(lone.path), "--commit", "HEAD"), "neither origin/main nor main")
    assert_error(run_cli("ancestry", "--commit", "main"), "--repo")


# ------------------------------------------------------------------ caches


def test_caches_give_the_fresh_answers_and_follow_main(copy, monkeypatch):
    judged = ("main", "releases/v0.20", "releases/v0.20-later", "fork/dflash-swa", "v0.20.0")
    fresh = {commit: trace(copy.path, commit).to_json() for commit in judged}
    monkeypatch.delenv("DFLASH_DOCTOR_NO_CACHE", raising=False)
    assert {commit: trace(copy.path, commit).to_json() for commit in judged} == fresh  # writes the caches
    cache = copy.path / ".git" / "dflash-doctor"
    patch_ids = (cache / "patch-ids").read_text().splitlines()
    assert patch_ids[0] == "# dflash-doctor patch-ids v1" and len(patch_ids) > 10
    assert {commit: trace(copy.path, commit).to_json() for commit in judged} == fresh  # reads them
    # Main moves on: the landing index is extended, not rebuilt, and sees the new PR.
    new = copy.commit("[Core] A new fix (#53999)", {SCHEDULER: "def schedule(requests):\n    return requests\n"})
    assert statuses(trace(copy.path, "main", prs=[53999]))[53999] == ("contained", "merge-commit")
    landings = cache / "landings" / "refs%2Fheads%2Fmain"
    assert f"L 53999 {new}" in landings.read_text() and f"tip {new}" in landings.read_text()
    # Main rewritten: the index is rebuilt and forgets the dropped commit.
    copy.git("reset", "--quiet", "--hard", "HEAD~1")
    copy.commit("[Core] Another fix (#53998)", {SCHEDULER: "def schedule(requests):\n    return list(requests)\n"})
    assert statuses(trace(copy.path, "main", prs=[53999, 53998])) == {
        53999: ("unknown", "none"),
        53998: ("contained", "merge-commit"),
    }
    # Damaged cache files are ignored, and the answers stay the same.
    (cache / "patch-ids").write_text("# dflash-doctor patch-ids v1\nnot a patch-id line\n")
    landings.write_text("# dflash-doctor landings v1\ntip 123\nL x y\n")
    assert trace(copy.path, "releases/v0.20").to_json() == fresh["releases/v0.20"]


# ------------------------------------------------------------------ apply_pr (patch --repo --pr)


def snapshot(repo: Repo) -> dict[str, bytes]:
    """Every working-tree file, what git status says, and the index file's bytes."""
    state = {"status": repo.git("status", "--porcelain").encode()}  # may refresh the index: first
    state[".git/index"] = (repo.path / ".git" / "index").read_bytes()
    state.update(
        (str(p.relative_to(repo.path)), p.read_bytes())
        for p in repo.path.rglob("*")
        if p.is_file() and ".git" not in p.parts
    )
    return state


def test_apply_pr_applies_a_missing_landing_then_knows_it_is_there(copy):
    copy.git("checkout", "--quiet", "releases/v0.20")
    copy.replace("README.md", "repository", "repository (local note)")  # an unrelated local edit
    before = snapshot(copy)
    dry = apply_pr(copy.path, 53388, dry_run=True)
    assert (dry.status, dry.files) == ("would-apply", (SPECULATIVE,))
    assert '+        return self.use_eagle() and self.method != "dflash"' in dry.diff
    assert snapshot(copy) == before
    outcome = apply_pr(copy.path, 53388)
    assert (outcome.status, outcome.files, dict(outcome.change)) == (
        "applied",
        (SPECULATIVE,),
        {"landing": copy.sha("main~1")},
    )
    assert outcome.diff == dry.diff
    assert 'self.method != "dflash"' in (copy.path / SPECULATIVE).read_text()
    assert "(local note)" in (copy.path / "README.md").read_text()
    assert copy.git("diff", "--cached", "--name-only") == ""  # the index is left alone
    assert apply_pr(copy.path, 53388).status == "already-present"


def test_apply_pr_conflict_leaves_the_tree_exactly_as_it_was(copy):
    copy.git("checkout", "--quiet", "releases/v0.20")
    copy.replace(SPECULATIVE, "        return self.use_eagle()\n", "        return self.use_eagle()  # local\n")
    copy.replace("README.md", "repository", "repository (local note)")
    before = snapshot(copy)
    outcome = apply_pr(copy.path, 53388)
    assert (outcome.status, outcome.conflicts, outcome.files) == ("conflict", (SPECULATIVE,), ())
    assert snapshot(copy) == before


def test_apply_pr_takes_an_unmerged_pr_from_its_pull_ref(copy):
    outcome = apply_pr(copy.path, 40898)
    assert outcome.status == "applied" and outcome.files == (SWA,)
    assert dict(outcome.change)["pr_head"] == copy.git("rev-parse", "refs/pull/40898/head")
    assert (copy.path / SWA).read_text() == "SLIDING = True\nSHIFT = 1\n"


def test_apply_pr_without_the_pr_commits_says_how_to_fetch(copy):
    with pytest.raises(ToolError, match=r"fetch origin \+refs/pull/54163/head"):
        apply_pr(copy.path, 54163)
    copy.git("checkout", "--quiet", "releases/v0.20-later")
    copy.git("cherry-pick", history_sha(copy, "(#47914)"), check=False)
    assert copy.git("ls-files", "--unmerged")
    with pytest.raises(ToolError, match="unresolved merge conflicts"):
        apply_pr(copy.path, 53388)
