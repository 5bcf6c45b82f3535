"""Hostile git repositories: nothing the repository configures runs, nothing is written outside it.

Each repository here is configured as a hostile peer would configure it
(``gitrepos.plant_hostile_config``): hooks, core.fsmonitor, filters and merge and
diff drivers selected by ``.git/info/attributes`` and ``.gitattributes``, pagers,
core.sshCommand, credential helpers... each creating a marker file if git ever
runs it. Each test shapes its ``copy`` of the repository with git before planting,
so any marker is dflash-doctor's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import CACHING, ancestry_json, assert_error, run_cli
from gitrepos import SPECULATIVE, Repo, plant_hostile_config

pytestmark = pytest.mark.slow


def plant(repo: Repo, tmp_path: Path) -> Path:
    markers = tmp_path / "markers"
    plant_hostile_config(repo, markers)
    return markers


def ran(markers: Path) -> list[str]:
    return sorted(p.name for p in markers.iterdir())


def verdicts(report: dict) -> list[tuple]:
    return [(e["fix"], e["pr"], e["status"], e["method"]) for e in report["prs"]]


def test_ancestry_and_check_run_nothing_the_repository_configures(history, copy, tmp_path):
    _, clean = ancestry_json("--repo", str(history.path), "--commit", "releases/v0.20")
    markers = plant(copy, tmp_path)
    code, report = ancestry_json("--repo", str(copy.path), "--commit", "releases/v0.20", env=CACHING)
    assert ran(markers) == []
    # patch-id and merge-tree ran (merge-tree merged a file that the planted merge
    # driver claims) and answered as on the clean repository.
    assert {e["method"] for e in report["prs"]} >= {"patch-id", "merge-tree"}
    assert verdicts(report) == verdicts(clean) and code == 1

    tree = tmp_path / "site"
    (tree / "vllm").mkdir(parents=True)
    (tree / "vllm" / "__init__.py").write_text("")
    (tree / "vllm" / "_version.py").write_text(f"__version__ = '0.1.dev1+g{history.c['release'][:9]}'\n")
    proc = run_cli("check", "--path", str(tree), "--repo", str(copy.path), "--format", "json")
    assert "Traceback" not in proc.stderr and json.loads(proc.stdout)["ancestry"]["prs"], proc.stderr
    assert ran(markers) == []


def test_patch_repo_pr_runs_no_filter_hook_or_driver(copy, tmp_path):
    copy.git("checkout", "--quiet", "releases/v0.20")
    copy.replace("README.md", "repository", "repository (local note)")  # a local edit the snapshot hashes
    markers = plant(copy, tmp_path)
    args = ("patch", "--repo", str(copy.path), "--pr", "53388")
    dry = run_cli(*args, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert '+        return self.use_eagle() and self.method != "dflash"' in dry.stdout
    assert ran(markers) == []
    applied = run_cli(*args, "--yes")
    assert applied.returncode == 0, applied.stderr
    assert ran(markers) == []
    text = (copy.path / SPECULATIVE).read_text()
    assert 'self.method != "dflash"' in text and "touch" not in text  # written as is, no smudge filter


def test_fetch_runs_no_ssh_command_upload_pack_or_ext_transport(history, copy, tmp_path):
    copy.git("remote", "add", "origin", "ssh://127.0.0.1:1/vllm")  # nothing listens on port 1
    copy.git("remote", "add", "evil", f"ext::sh -c touch% {tmp_path / 'markers' / 'ext'}")
    copy.git("remote", "add", "local", str(history.path))
    # An alternate object store: fetch asks core.alternateRefsCommand for its refs.
    (copy.path / ".git" / "objects" / "info" / "alternates").write_text(f"{history.path / '.git' / 'objects'}\n")
    markers = plant(copy, tmp_path)
    base = ("ancestry", "--repo", str(copy.path), "--commit", "main", "--pr", "40898", "--fetch")

    proc = run_cli(*base)
    assert_error(proc, "cannot fetch from origin (ssh://127.0.0.1:1/vllm)")
    assert "port 1: Connection refused" in proc.stderr  # what went wrong, not git's closing advice
    assert ran(markers) == []
    proc = run_cli(*base, "--remote", "evil")
    assert_error(proc, "transport 'ext' not allowed")
    assert ran(markers) == []
    # remote.<name>.uploadpack runs locally for a file remote, and no override beats it.
    copy.git("config", "remote.local.uploadpack", f"touch {markers / 'uploadpack'}; git-upload-pack")
    proc = run_cli(*base, "--remote", "local", "--main-ref", "local/main")
    assert_error(proc, "sets remote.local.uploadpack, a command git would run on this machine when fetching")
    assert "config --unset-all remote.local.uploadpack" in proc.stderr
    assert ran(markers) == []
    copy.git("config", "--unset-all", "remote.local.uploadpack")
    code, report = ancestry_json(*base[1:], "--remote", "local", "--main-ref", "local/main")
    assert (report["prs"][0]["status"], code) == ("missing", 1)  # fetched refs/pull/40898/head
    assert ran(markers) == []


def test_a_partial_clone_fetching_on_demand_runs_no_upload_pack_command(history, tmp_path):
    origin = tmp_path / "origin"
    shutil.copytree(history.path, origin, symlinks=True)
    Repo(origin).git("config", "uploadpack.allowFilter", "true")
    partial = tmp_path / "partial"
    subprocess.run(
        ["git", "clone", "--quiet", "--no-checkout", "--filter=blob:none", f"file://{origin}", str(partial)], check=True
    )
    Repo(partial).git("checkout", "--quiet", "origin/releases/v0.20")  # fetches this tree's blobs, not the rest
    markers = plant(Repo(partial), tmp_path)
    Repo(partial).git("config", "remote.origin.uploadpack", f"touch {markers / 'uploadpack'}; git-upload-pack")
    args = ("--repo", str(partial), "--commit", "origin/releases/v0.20", "--pr", "40727", "--pr", "46104", "--fetch")
    assert_error(run_cli("ancestry", *args), "sets remote.origin.uploadpack")
    assert_error(
        run_cli("patch", "--repo", str(partial), "--pr", "53388", "--dry-run"), "sets remote.origin.uploadpack"
    )
    assert ran(markers) == []
    Repo(partial).git("config", "--unset-all", "remote.origin.uploadpack")
    code, report = ancestry_json(*args)  # the blobs fetched on demand, the rest of the planted setup still there
    assert [(e["status"], e["method"]) for e in report["prs"]] == [
        ("contained", "patch-id"),
        ("contained", "merge-tree"),
    ]
    assert ran(markers) == [] and code == 0


def test_fetch_without_the_remote_says_so_and_how_to_fix_it(copy):
    proc = run_cli("ancestry", "--repo", str(copy.path), "--commit", "main", "--fetch")
    assert_error(proc, "has no remote named origin")
    assert "--remote NAME" in proc.stderr and "git -C" in proc.stderr and "remote add origin" in proc.stderr
    assert "and the repository exists" not in proc.stderr
    copy.git("remote", "add", "upstream", str(copy.path))
    proc = run_cli("ancestry", "--repo", str(copy.path), "--commit", "main", "--fetch")
    assert "its remotes: upstream" in proc.stderr


def test_planted_cache_symlinks_are_not_followed(history, copy, tmp_path):
    c = history.c
    outside = tmp_path / "outside"
    outside.mkdir()
    (copy.path / ".git" / "dflash-doctor").symlink_to(outside)
    args = ("--repo", str(copy.path), "--commit", "releases/v0.20")
    _, fresh = ancestry_json(*args)
    _, cached = ancestry_json(*args, env=CACHING)
    assert verdicts(cached) == verdicts(fresh)
    assert list(outside.iterdir()) == []

    # A planted patch-ids file that links outside: were it read, its lie (the main
    # tip carries #53388's patch) would make #53388 contained on the release branch.
    (copy.path / ".git" / "dflash-doctor").unlink()
    (copy.path / ".git" / "dflash-doctor").mkdir()
    lie = outside / "patch-ids"
    lie.write_text(f"# dflash-doctor patch-ids v1\n{c['53388']} {'a' * 40}\n{c['release']} {'a' * 40}\n")
    (copy.path / ".git" / "dflash-doctor" / "patch-ids").symlink_to(lie)
    _, cached = ancestry_json(*args, "--pr", "53388", env=CACHING)
    assert cached["prs"][0]["status"] == "missing"
    assert list(outside.iterdir()) == [lie] and lie.read_text().count("\n") == 3


def test_every_git_call_is_bounded_in_time_and_output(copy, tmp_path):
    from dflash_doctor.ancestry import GitFailure, run_git

    with pytest.raises(GitFailure, match="git log: printed more than 100 bytes"):
        run_git(copy.path, "log", "--format=%H %s", limit=100)
    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)  # a config include that never answers
    copy.git("config", "include.path", str(fifo))
    with pytest.raises(GitFailure, match="timed out after 1 s"):
        run_git(copy.path, "rev-parse", "HEAD", timeout=1)
    left = []  # no git left blocked on the FIFO: killed with its process group
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and Path(os.readlink(proc / "cwd")) == copy.path:
                left.append((proc / "cmdline").read_bytes())
        except OSError:
            pass
    assert left == []


def test_patch_never_writes_where_core_worktree_points(copy, tmp_path):
    copy.git("checkout", "--quiet", "releases/v0.20")
    outside = tmp_path / "outside"
    outside.mkdir()
    copy.git("config", "core.worktree", str(outside))
    proc = run_cli("patch", "--repo", str(copy.path), "--pr", "53388", "--yes")
    assert_error(proc, f"puts its work tree at {outside}")
    assert list(outside.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="handing a repository to another user needs root")
def test_a_repository_another_user_owns_is_refused_with_the_reason(copy, tmp_path):
    markers = plant(copy, tmp_path)
    os.chown(copy.path, 65534, 65534)  # nobody
    proc = run_cli("ancestry", "--repo", str(copy.path), "--commit", "main")
    assert_error(proc, "belongs to another user and git refuses to open it")
    assert "safe.directory" in proc.stderr and ran(markers) == []
