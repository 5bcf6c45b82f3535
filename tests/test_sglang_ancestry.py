"""`ancestry` against a clone shaped like SGLang's: its package in python/sglang/, squash merges ``(#N)``.

The repository is built here with real git; the file contents are snippets written for this test (not
SGLang's code). SGLang's fixes land as #27477 (the RoPE base read), #27469 (per-layer windows) and
#34524 (per-layer causality); the engine is read from the clone (``python/sglang/`` at the judged
commit), and the PRs judged are those of SGLang's rules, never vLLM's.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from conftest import ancestry_json, assert_error, run_cli
from dflash_doctor.ancestry import trace
from dflash_doctor.engines import SGLANG, VLLM
from dflash_doctor.rulefile import load_rules
from gitrepos import Repo

pytestmark = pytest.mark.slow

DFLASH = "python/sglang/srt/models/dflash.py"
UTILS = "python/sglang/srt/speculative/dflash_utils.py"
OURS = (27477, 27469, 34524)  # the PRs of SGLang's rope-base and swa-config rules
PRS = [arg for pr in OURS for arg in ("--pr", str(pr))]

_DFLASH_TEXT = """\
class DraftAttention:
    def __init__(self, config, layer_id):
        self.base = float(getattr(config, "rope_theta", 1000000))
        self.heads = int(config.num_attention_heads)
        self.head_dim = int(config.head_dim)

    def attention(self, config, layer_id):
        self.window = None
        self.scale = self.head_dim**-0.5
        self.bias = bool(getattr(config, "attention_bias", False))

    def mask(self, config, layer_id):
        self.causal = False
"""

_UTILS_TEXT = """\
def draft_layer_ids(config):
    return list(config.get("target_layer_ids") or [])
"""


@dataclasses.dataclass
class SglangLike:
    repo: Repo
    c: dict[str, str]  # name -> full sha

    @property
    def path(self) -> Path:
        return self.repo.path


def build_sglang_like(path: Path) -> SglangLike:
    """main: squash commits ``(#N)`` with tags where releases were cut; release/v0.5.12 cut from v0.5.11 with a
    clean cherry-pick of #27477."""
    repo = Repo.init(path)
    c: dict[str, str] = {}
    c["initial"] = repo.commit(
        "Initial import (#1000)",
        {"python/sglang/__init__.py": "", "python/pyproject.toml": "[project]\nname = 'sglang'\n"},
    )
    c["dflash"] = repo.commit("[Spec] DFlash drafter (#22077)", {DFLASH: _DFLASH_TEXT, UTILS: _UTILS_TEXT})
    repo.git("tag", "v0.5.11")
    c["docs"] = repo.commit("[Docs] DFlash usage (#26001)", {"docs/dflash.md": "DFlash in an SGLang-shaped repo\n"})
    c["27477"] = repo.edit(
        "fix dflash rope config parsing for updated transformers (#27477)",
        DFLASH,
        'float(getattr(config, "rope_theta", 1000000))',
        "float(rope_base_of(config))",
    )
    repo.git("tag", "v0.5.13")
    c["27469"] = repo.edit(
        "[Spec] Per-layer sliding windows for DFlash drafters (#27469)",
        DFLASH,
        "        self.window = None\n",
        "        self.window = window_of(config, layer_id)\n",
    )
    repo.git("tag", "v0.5.14")
    c["34524"] = repo.edit(
        "[Spec] Honour is_causal for every DFlash layer (#34524)",
        DFLASH,
        "        self.causal = False\n",
        '        self.causal = bool(getattr(config, "is_causal", False))\n',
    )
    c["main"] = repo.commit("[Misc] Tail commit (#35000)", {"docs/dflash.md": "DFlash, tail\n"})
    repo.git("checkout", "--quiet", "-b", "release/v0.5.12", "v0.5.11")
    repo.git("cherry-pick", c["27477"])
    c["release"] = repo.sha("HEAD")
    repo.git("checkout", "--quiet", "main")
    return SglangLike(repo, c)


@pytest.fixture(scope="module")
def sglang_clone(tmp_path_factory) -> SglangLike:
    return build_sglang_like(tmp_path_factory.mktemp("sglang-like") / "sglang")


def judged(clone: SglangLike, commit: str) -> dict[int, tuple[str, str]]:
    report = trace(clone.path, commit, prs=OURS)
    return {entry.pr: (entry.status, entry.method) for entry in report.prs}


def test_the_prs_judged_in_an_sglang_clone_are_those_of_sglangs_rules(sglang_clone):
    report = trace(sglang_clone.path, "main")
    expected = [
        (rule.id, pr) for rule in load_rules() if rule.engine == "sglang" for pr in (*rule.prs, *rule.unmerged_prs)
    ]
    assert [(entry.fix, entry.pr) for entry in report.prs] == expected
    assert {("rope-base", 27477), ("swa-config", 27469), ("swa-config", 34524)} <= set(expected)
    vllms = {pr for rule in load_rules() if rule.engine == "vllm" for pr in rule.prs}
    assert not vllms & {entry.pr for entry in report.prs}


def test_which_fixes_each_commit_contains(sglang_clone):
    c = sglang_clone.c
    assert judged(sglang_clone, "v0.5.11") == {pr: ("missing", "none") for pr in OURS}
    assert judged(sglang_clone, "v0.5.13") == {
        27477: ("contained", "merge-commit"),
        27469: ("missing", "none"),
        34524: ("missing", "none"),
    }
    assert judged(sglang_clone, "v0.5.14") == {
        27477: ("contained", "merge-commit"),
        27469: ("contained", "merge-commit"),
        34524: ("missing", "none"),
    }
    assert judged(sglang_clone, "main") == {pr: ("contained", "merge-commit") for pr in OURS}
    # a release branch's cherry-pick of #27477 has its landing's patch, under another sha
    assert c["release"] != c["27477"] and sglang_clone.repo.patch_id(c["release"]) == sglang_clone.repo.patch_id(
        c["27477"]
    )
    assert judged(sglang_clone, "release/v0.5.12") == {
        27477: ("contained", "patch-id"),
        27469: ("missing", "none"),
        34524: ("missing", "none"),
    }
    entry = next(e for e in trace(sglang_clone.path, "v0.5.13", prs=OURS).prs if e.pr == 27477)
    assert dict(entry.evidence)["landing"] == c["27477"] and entry.fix == "rope-base"


def test_the_command_reads_the_engine_from_the_clone_or_from_engine(sglang_clone):
    code, report = ancestry_json("--repo", str(sglang_clone.path), "--commit", "v0.5.14", *PRS)
    assert code == 1  # #34524 is missing
    assert {(e["pr"], e["fix"], e["status"]) for e in report["prs"]} == {
        (27477, "rope-base", "contained"),
        (27469, "swa-config", "contained"),
        (34524, "swa-config", "missing"),
    }
    code, report = ancestry_json("--repo", str(sglang_clone.path), "--commit", "main", "--engine", "sglang", *PRS)
    assert code == 0 and {e["status"] for e in report["prs"]} == {"contained"}
    proc = run_cli("ancestry", "--repo", str(sglang_clone.path), "--commit", "main", "--engine", "vllm")
    assert_error(proc, f"{sglang_clone.path} does not look like a vLLM clone: commit ")
    assert f"has no {VLLM.repository_package}/ package" in proc.stderr


def test_a_clone_holding_both_packages_needs_engine(tmp_path):
    repo = Repo.init(tmp_path / "both")
    repo.commit(
        "Initial import (#1000)",
        {"vllm/__init__.py": "", f"{SGLANG.repository_package}/__init__.py": "", DFLASH: _DFLASH_TEXT},
    )
    proc = run_cli("ancestry", "--repo", str(repo.path), "--commit", "main")
    assert_error(proc, "holds the packages of vLLM and SGLang: name the engine with --engine")
    code, report = ancestry_json("--repo", str(repo.path), "--commit", "main", "--engine", "sglang", *PRS)
    # no commit lands SGLang's PRs and there are no pull refs: unknown, with the fetch to run
    assert code == 2 and {e["pr"]: e["status"] for e in report["prs"]} == {pr: "unknown" for pr in OURS}


def test_the_build_commit_of_an_sglang_tree_is_judged_in_the_clone(sglang_clone, tmp_path):
    tree = tmp_path / "site"
    (tree / "sglang").mkdir(parents=True)
    (tree / "sglang" / "__init__.py").write_text("")
    (tree / "sglang" / "_version.py").write_text(
        f"__version__ = version = '0.5.13'\n__commit_id__ = commit_id = '{sglang_clone.c['27469'][:12]}'\n"
    )
    code, report = ancestry_json("--repo", str(sglang_clone.path), "--path", str(tree), *PRS)
    assert report["commit"] == sglang_clone.c["27469"] and report["commit_source"] == "_version.py"
    assert {e["pr"]: e["status"] for e in report["prs"]} == {27477: "contained", 27469: "contained", 34524: "missing"}
    assert code == 1
