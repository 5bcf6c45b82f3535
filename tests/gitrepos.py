"""Git repositories built with git itself, shaped like vLLM's history.

The file contents are small snippets written for these tests (not vLLM code):
what matters is the history. Commit dates are fixed, so shas are the same on
every run.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

import tiers

_IDENTITY = {
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.invalid",
    "GIT_COMMITTER_NAME": "Test Committer",
    "GIT_COMMITTER_EMAIL": "committer@example.invalid",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


class Repo:
    def __init__(self, path: Path) -> None:
        tiers.require("slow", "works on a real git repository")
        self.path = path
        self.clock = 1_700_000_000

    @classmethod
    def init(cls, path: Path, branch: str = "main") -> "Repo":
        path.mkdir(parents=True, exist_ok=True)
        repo = cls(path)
        repo.git("init", "--quiet", "--initial-branch", branch)
        return repo

    def git(self, *args: str, check: bool = True, input: str | None = None) -> str:
        self.clock += 60
        date = f"{self.clock} +0000"
        env = {**os.environ, **_IDENTITY, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
        proc = subprocess.run(
            ["git", "-C", str(self.path), *args], capture_output=True, text=True, env=env, input=input
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"git {' '.join(args)} failed: {proc.stderr}")
        return proc.stdout.strip()

    def write(self, relpath: str, text: str) -> None:
        path = self.path / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def replace(self, relpath: str, old: str, new: str) -> None:
        text = (self.path / relpath).read_text()
        assert text.count(old) == 1, (relpath, old)
        self.write(relpath, text.replace(old, new))

    def commit(self, message: str, files: dict[str, str] | None = None) -> str:
        for relpath, text in (files or {}).items():
            self.write(relpath, text)
        self.git("add", "--all")
        self.git("commit", "--quiet", "--allow-empty", "-m", message)
        return self.sha("HEAD")

    def edit(self, message: str, relpath: str, old: str, new: str) -> str:
        self.replace(relpath, old, new)
        return self.commit(message)

    def sha(self, rev: str) -> str:
        return self.git("rev-parse", f"{rev}^{{commit}}")

    def patch_id(self, rev: str) -> str:
        return self.git("patch-id", "--stable", input=self.git("show", rev) + "\n").split()[0]


DFLASH = "vllm/spec_decode/dflash.py"
SPECULATIVE = "vllm/config/speculative.py"
SCHEDULER = "vllm/v1/core/sched.py"
SWA = "vllm/spec_decode/dflash_swa.py"

_DFLASH_TEXT = """\
def target_layer_ids(config):
    ids = config.get("target_layer_ids")
    return list(ids)


def draft_attention(config):
    window = None
    layers = config.get("layer_types")
    return build(window, layers)


def build(window, layers):
    return {"window": window, "layers": layers}
"""

_SPECULATIVE_TEXT = """\
class SpeculativeConfig:
    method = "eagle"

    def use_eagle(self):
        return self.method in ("eagle", "eagle3", "dflash")

    def drop_last_block(self):
        return self.use_eagle()
"""

_SCHEDULER_TEXT = """\
def schedule(requests):
    return sorted(requests)
"""


@dataclasses.dataclass
class VllmLike:
    """A clone-shaped repository and the commits the tests name."""

    repo: Repo
    c: dict[str, str]  # name -> full sha

    @property
    def path(self) -> Path:
        return self.repo.path


def build_vllm_like(path: Path) -> VllmLike:
    """main: squash commits ``(#N)``; releases/v0.20 cut before the fixes, with a
    release-only hotfix and backports (a clean cherry-pick of #40727, a cherry-pick
    of #46104 whose conflict with the hotfix was resolved; a later branch edits that
    line again); refs/pull/40898/head rebased after a fork was built from its old commits."""
    repo = Repo.init(path)
    c: dict[str, str] = {}
    c["initial"] = repo.commit(
        "Initial import (#1000)", {DFLASH: _DFLASH_TEXT, SPECULATIVE: _SPECULATIVE_TEXT, SCHEDULER: _SCHEDULER_TEXT}
    )
    c["docs"] = repo.commit("[Docs] Add a README (#1001)", {"README.md": "vLLM-shaped test repository\n"})
    repo.git("tag", "v0.20.0")
    c["tidy"] = repo.edit(
        "[Spec Decode] Let draft_attention take a cache (#1005)",
        DFLASH,
        "def draft_attention(config):",
        "def draft_attention(config, *, cache=None):",
    )
    c["40727"] = repo.edit(
        "[Spec Decode] Shift DFlash target layer ids by one (#40727)",
        DFLASH,
        "    return list(ids)",
        "    return [layer_id + 1 for layer_id in ids]",
    )
    c["sched"] = repo.edit(
        "[Core] Schedule by arrival (#1002)", SCHEDULER, "sorted(requests)", "sorted(requests, key=id)"
    )
    c["46104"] = repo.edit(
        "[Spec Decode] Keep the drafter's sliding window (#46104)",
        DFLASH,
        "    window = None",
        '    window = config.get("sliding_window")',
    )
    c["47914"] = repo.edit(
        "[Spec Decode] Resolve layer types for SWA drafters (#47914)",
        DFLASH,
        '    layers = config.get("layer_types")',
        '    layers = config.get("layer_types") or ["full_attention"]',
    )
    c["pr_base"] = repo.commit("[CI] Pin a tool (#1007)", {"ci.txt": "tool==1\n"})
    c["48113"] = repo.edit(
        "[Spec Decode] Per-layer windows (#48113)",
        DFLASH,
        '    return {"window": window, "layers": layers}',
        '    return {"window": window, "layers": layers, "per_layer": True}',
    )
    c["53388"] = repo.edit(
        "[Spec Decode] Keep the last prefix-cache block for DFlash (#53388)",
        SPECULATIVE,
        "        return self.use_eagle()\n",
        '        return self.use_eagle() and self.method != "dflash"\n',
    )
    c["main"] = repo.commit("[Misc] Tail commit (#1004)", {"README.md": "vLLM-shaped test repository, tail\n"})

    # The unmerged PR #40898: two commits on an older main, a fork built from
    # them, then the PR rebased (new shas, same patches) onto the main tip.
    repo.git("checkout", "--quiet", "-b", "fork/dflash-swa", c["pr_base"])
    c["pr_1"] = repo.commit("Add SWA support to the DFlash drafter", {SWA: "SLIDING = True\n"})
    c["pr_2"] = repo.commit("Shift layer ids in the SWA path", {SWA: "SLIDING = True\nSHIFT = 1\n"})
    repo.git("checkout", "--quiet", "-b", "pr-40898-rebased", c["main"])
    repo.git("cherry-pick", c["pr_1"], c["pr_2"])
    c["pr_head"] = repo.sha("HEAD")
    repo.git("update-ref", "refs/pull/40898/head", c["pr_head"])
    repo.git("checkout", "--quiet", "main")
    repo.git("branch", "--quiet", "-D", "pr-40898-rebased")

    # releases/v0.20: a release-only hotfix on the line #46104 changes, then backports.
    repo.git("checkout", "--quiet", "-b", "releases/v0.20", "v0.20.0")
    repo.git("cherry-pick", "-x", c["tidy"])
    c["hotfix"] = repo.edit(
        "[Bugfix] Release: full attention for drafters", DFLASH, "    window = None", "    window = None  # release"
    )
    repo.git("cherry-pick", "-x", c["40727"])
    c["pick_40727"] = repo.sha("HEAD")
    conflicted = repo.git("cherry-pick", "-x", c["46104"], check=False)
    assert "CONFLICT" in conflicted or (repo.path / ".git" / "CHERRY_PICK_HEAD").exists()
    text = (repo.path / DFLASH).read_text()
    start, end = text.index("<<<<<<<"), text.index(">>>>>>>")
    resolved = text[:start] + '    window = config.get("sliding_window")\n' + text[text.index("\n", end) + 1 :]
    repo.write(DFLASH, resolved)
    repo.git("add", DFLASH)
    repo.git("-c", "core.editor=true", "cherry-pick", "--continue")
    c["release"] = repo.sha("HEAD")
    repo.git("tag", "v0.20.1")
    repo.git("checkout", "--quiet", "-b", "releases/v0.20-later", c["release"])
    c["release_later"] = repo.edit(
        "[Bugfix] Release: default window",
        DFLASH,
        '    window = config.get("sliding_window")',
        '    window = config.get("sliding_window") or 4096',
    )
    repo.git("checkout", "--quiet", "main")
    return VllmLike(repo, c)


def generate_history(
    repo: Repo,
    branch: str,
    commits: int,
    *,
    start: str | None = None,
    edits: dict[int, tuple[str, str, str, str]] | None = None,
    first_number: int = 60_000,
) -> list[str]:
    """``commits`` squash commits on ``branch`` (from ``start``, else a new root with the
    vLLM-shaped files), written by ``git fast-import``: fast enough for 20k+ commits.

    Commit ``i`` edits a filler module and is subject ``... (#first_number + i)``,
    unless ``edits[i] = (subject, file, old, new)`` makes it a fix landing instead.
    Returns the new shas, oldest first.
    """
    edits = edits or {}
    files = {DFLASH: _DFLASH_TEXT, SPECULATIVE: _SPECULATIVE_TEXT, SCHEDULER: _SCHEDULER_TEXT}
    if start:
        files = {path: repo.git("show", f"{start}:{path}") + "\n" for path in files}
    chunks: list[bytes] = []

    def data(text: str) -> None:
        raw = text.encode()
        chunks.append(b"data %d\n%s\n" % (len(raw), raw))

    for i in range(commits):
        repo.clock += 60
        if i in edits:
            subject, path, old, new = edits[i]
            assert files[path].count(old) == 1, (path, old)
            files[path] = files[path].replace(old, new)
            changes = {path: files[path]}
        else:
            subject = f"[Misc] Change number {i} (#{first_number + i})"
            changes = {f"vllm/filler/group_{i % 20}/module_{i % 400}.py": f"VALUE = {i}\n"}
        if i == 0 and not start:
            changes = {**files, **changes}
        chunks.append(
            (
                f"commit refs/heads/{branch}\ncommitter Test Committer <committer@example.invalid> {repo.clock} +0000\n"
            ).encode()
        )
        data(f"{subject}\n\nSigned-off-by: Test Author <author@example.invalid>\n")
        if i == 0 and start:
            chunks.append(f"from {start}\n".encode())
        for path, text in changes.items():
            chunks.append(f"M 100644 inline {path}\n".encode())
            data(text)
    subprocess.run(
        ["git", "-C", str(repo.path), "fast-import", "--quiet"],
        input=b"".join(chunks),
        check=True,
        env={**os.environ, **_IDENTITY},
    )
    return repo.git("rev-list", "--first-parent", "--reverse", branch, *([f"^{start}"] if start else [])).split()


# Every git hook a command could run; each one would touch a marker.
HOOKS = (
    "post-index-change",
    "reference-transaction",
    "post-checkout",
    "post-merge",
    "post-rewrite",
    "pre-auto-gc",
    "post-commit",
    "pre-commit",
    "fsmonitor-watchman",
    "push-to-checkout",
    "pre-push",
    "post-update",
)


def plant_hostile_config(repo: Repo, markers: Path) -> None:
    """Configure ``repo`` as a hostile peer would: every setting, attribute and hook
    that makes git run a command runs one that creates a file in ``markers``.
    Attributes come from ``.git/info/attributes`` and an untracked ``.gitattributes``
    (no commit carries them, so the history and its shas stay as they were)."""
    markers.mkdir(parents=True, exist_ok=True)

    def touch(name: str, then: str = "false") -> str:
        return f"touch {markers / name}; {then}"

    settings = {
        "core.hooksPath": str(repo.path / ".git" / "hooks"),
        "core.fsmonitor": touch("fsmonitor"),
        "core.pager": touch("core.pager", "cat"),
        "pager.log": touch("pager.log", "cat"),
        "pager.diff": touch("pager.diff", "cat"),
        "core.sshCommand": touch("core.sshCommand"),
        "core.askPass": touch("core.askPass"),
        "core.gitProxy": touch("core.gitProxy"),
        "core.alternateRefsCommand": touch("core.alternateRefsCommand", "true"),
        "credential.helper": f"!{touch('credential.helper')}",
        "diff.external": touch("diff.external"),
        "diff.evil.command": touch("diff.evil.command"),
        "diff.evil.textconv": touch("diff.evil.textconv", "cat"),
        "merge.evil.driver": touch("merge.evil.driver"),
        "merge.evil.name": "a merge driver that runs a command",
        "filter.evil.clean": touch("filter.evil.clean", "cat"),
        "filter.evil.smudge": touch("filter.evil.smudge", "cat"),
        "filter.evil.required": "true",
        "filter.proc.process": touch("filter.proc.process"),
        "log.showSignature": "true",
        "gpg.program": touch("gpg.program"),
        "core.editor": touch("core.editor"),
        "sequence.editor": touch("sequence.editor"),
        "gc.auto": "1",
        "maintenance.auto": "true",
    }
    for key, value in settings.items():
        repo.git("config", key, value)
    (repo.path / ".gitattributes").write_text("*.py filter=evil merge=evil diff=evil\n")  # untracked, in the work tree
    info = repo.path / ".git" / "info"
    info.mkdir(exist_ok=True)
    (info / "attributes").write_text("* merge=evil filter=evil diff=evil\n*.md filter=proc\n")
    hooks = repo.path / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    for name in HOOKS:
        hook = hooks / name
        hook.write_text(f"#!/bin/sh\ntouch {markers / ('hook-' + name)}\n")
        hook.chmod(0o755)
