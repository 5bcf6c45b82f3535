"""The metamorphic corpus (issues 11 and 23): edits of real vLLM and SGLang release
trees that keep, break or add one fix. No confident wrong answer: a preserving edit or an added
fix is present (never absent/partial), a breaking edit absent or partial (never
present); ``unknown`` is allowed and listed at the end of the run ("corpus
unknowns: ..."). Two swa-config lists are asserted apart: ``OBSERVED`` (causality
edits: observed, not judged; the verdict stays the unedited tree's) and
``WITH_DRAFT_CONFIG`` (edits only a user's --draft-config tells apart). An SGLang edit
is checked on its SGLang tree by SGLang's rule, rewrites code (not layout), and, when it
breaks or adds the fix, changes which drafter layers fail and in what."""

from __future__ import annotations

import ast
import os
import shutil
from pathlib import Path

import pytest
from conftest import rule_files
from corpus import (
    Dead,
    Replace,
    cache_drop,
    layer_offset,
    rename_within,
    sglang_layer_offset,
    sglang_rope_base,
    sglang_swa_config,
    swa_config,
)
from corpus.summary import CorpusSummary, outcome

from dflash_doctor.check import run_check
from dflash_doctor.engines import SGLANG, VLLM
from dflash_doctor.structure.forms import DEAD
from dflash_doctor.rulefile import load_rules
from dflash_doctor.targets.path import PathTarget
from dflash_doctor.targets.release import release_tree

pytestmark = pytest.mark.release

EDITS = (
    layer_offset.EDITS
    + swa_config.EDITS
    + swa_config.WITH_DRAFT_CONFIG
    + cache_drop.EDITS
    + sglang_swa_config.EDITS
    + sglang_rope_base.EDITS
    + sglang_layer_offset.EDITS
)
ENGINES = {engine.name: engine for engine in (VLLM, SGLANG)}
DRAFTERS = Path(__file__).parent / "corpus" / "drafters"
# SGLang's edits that break or add a fix (issue 23): each must change what the drafter layers get.
SGLANG_EDITS = tuple(edit for edit in EDITS if edit.engine == "sglang")


def _asked(edit) -> bool:
    """Whether the edit's rule asks behaviour (else its edits are judged by structure only, and
    what runs cannot be compared)."""
    return any(rule.behaviour is not None for rule in load_rules() if (rule.engine, rule.id) == (edit.engine, edit.fix))


SGLANG_MOVES = tuple(edit for edit in SGLANG_EDITS if edit.kind != "preserve" and _asked(edit))
# Edits that put code that never runs beside live code (issue 19 item 2).
DEAD_CODE = tuple(edit for edit in EDITS if any(isinstance(change, Dead) for change in edit.changes))

# Beyond the files the rules read: what makes a tree a tree, and what running
# the tree's own DFlash code (config, runners, scheduler, drafter) reaches.
TREE_FILES = (
    "vllm/__init__.py",
    "vllm/_version.py",
    "vllm/envs.py",
    "vllm/config/vllm.py",
    "vllm/config/speculative.py",
    "vllm/transformers_utils/configs/speculators/algos.py",
    "vllm/transformers_utils/configs/speculators/base.py",
    "vllm/model_executor/models/qwen3_dflash.py",
    "vllm/model_executor/layers/attention/attention.py",
    "vllm/v1/worker/gpu_model_runner.py",
    "vllm/v1/worker/gpu/model_runner.py",
    "vllm/v1/worker/gpu/spec_decode/__init__.py",
    "vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py",
    "vllm/v1/worker/gpu/spec_decode/dflash/speculator.py",
    "vllm/v1/worker/gpu/spec_decode/dflash/utils.py",
    "vllm/v1/core/sched/scheduler.py",
    "vllm/v1/core/kv_cache_manager.py",
)
# What makes an SGLang tree a tree (its package, version file and the modules they sit in).
SGLANG_TREE_FILES = ("sglang/__init__.py", "sglang/_version.py", "sglang/version.py", "sglang/srt/__init__.py")
MARKERS = {"vllm": TREE_FILES, "sglang": SGLANG_TREE_FILES}
WHOLE = {"vllm": (), "sglang": ("sglang/srt/models",)}  # SGLang's layer-offset runs each architecture's hook


@pytest.fixture(scope="session")
def summary(request) -> CorpusSummary:
    plugin = CorpusSummary()
    request.config.pluginmanager.register(plugin, "dflash-doctor-corpus")
    return plugin


@pytest.fixture(scope="session")
def base_tree(tmp_path_factory):
    """``base_tree("0.33.0")`` (or ``base_tree("0.5.23", "sglang")``) -> a small copy of that
    real release tree, made once per session."""
    built: dict[tuple[str, str], Path] = {}

    def build(version: str, engine: str = "vllm") -> Path:
        if (version, engine) not in built:
            source = release_tree(version, ENGINES[engine])
            dest = tmp_path_factory.mktemp(f"base-{engine}-{version}")
            for relpath in sorted(set(MARKERS[engine]) | set(rule_files())):
                if (source / relpath).is_file():
                    (dest / relpath).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(source / relpath, dest / relpath)
            for dist_info in source.glob(f"{ENGINES[engine].package}-*.dist-info"):
                shutil.copytree(dist_info, dest / dist_info.name)
            for directory in WHOLE[engine]:  # read by search, not named by a rule: every target architecture
                shutil.copytree(source / directory, dest / directory, dirs_exist_ok=True)
            built[version, engine] = dest
        return built[version, engine]

    return build


@pytest.fixture(scope="session")
def rules_by_fix() -> dict:
    """(engine, fix id) -> the rule."""
    return {(rule.engine, rule.id): rule for rule in load_rules()}


def target(tree: Path, edit) -> PathTarget:
    return PathTarget(tree, engine=ENGINES[edit.engine])


@pytest.fixture(scope="session")
def results_cache(tmp_path_factory) -> Path:
    """One results cache for the whole corpus: each unedited base is answered once, then from it."""
    return tmp_path_factory.mktemp("corpus-cache")


@pytest.mark.parametrize("edit", EDITS, ids=[edit.id for edit in EDITS])
def test_no_confident_wrong_verdict(edit, base_tree, rules_by_fix, summary, tmp_path, results_cache, monkeypatch):
    """Also cache coherence: the unedited tree's answer is cached first, the edit is
    made in place with every mtime put back, and the answer through the cache must
    equal a fresh one (the cache is not used with a user's --draft-config)."""
    tree = tmp_path / "tree"
    shutil.copytree(base_tree(edit.base, edit.engine), tree)
    rules = (rules_by_fix[edit.engine, edit.fix],)
    draft_config = DRAFTERS / edit.draft_config if edit.draft_config else None
    with monkeypatch.context() as cached:
        cached.setenv("DFLASH_DOCTOR_CACHE", str(results_cache))
        cached.delenv("DFLASH_DOCTOR_NO_CACHE", raising=False)
        if draft_config is None:
            run_check(target(tree, edit), rules)
        mtimes = {path: path.stat().st_mtime_ns for path in tree.rglob("*.py")}
        edit.apply(tree)
        for path, mtime in mtimes.items():
            if path.exists():
                os.utime(path, ns=(mtime, mtime))
        through_cache = None if draft_config else run_check(target(tree, edit), rules)
    report = run_check(target(tree, edit), rules, draft_config)
    if through_cache is not None:
        assert [fix.to_json() for fix in through_cache.fixes] == [fix.to_json() for fix in report.fixes], (
            "a stale cached answer"
        )
    (fix,) = report.fixes
    status = fix.status if edit.setting is None else setting_status(fix, rules[0], edit.setting)
    summary.record(edit, status)
    assert outcome(edit.kind, status) != "wrong", (
        f"{edit.kind} edit judged {status}: {edit.why} ({fix.reason or 'no reason'})"
    )


def setting_status(fix, rule, setting: str) -> str:
    """The verdict for one alternative (a target architecture): what the rule's subjects observed there."""
    behaviour = rule.behaviour
    oks = {
        item.ok
        for item in fix.behaviour.observations
        if item.setting == setting and item.part in behaviour.chain and item.config in behaviour.subjects
    }
    if not oks or None in oks:
        return "unknown"
    return "present" if oks == {True} else "absent" if oks == {False} else "partial"


@pytest.mark.parametrize("edit", swa_config.WITH_DRAFT_CONFIG, ids=[edit.id for edit in swa_config.WITH_DRAFT_CONFIG])
def test_the_gating_draft_config_tells_the_edit_apart(edit, base_tree, rules_by_fix, tmp_path):
    """The unedited tree is present with the same --draft-config; the edited one is
    absent by behaviour, the user's config gating."""
    rules = (rules_by_fix[edit.engine, edit.fix],)
    (kept,) = run_check(target(base_tree(edit.base, edit.engine), edit), rules, DRAFTERS / edit.draft_config).fixes
    assert kept.status == "present", kept.reason
    tree = tmp_path / "tree"
    shutil.copytree(base_tree(edit.base, edit.engine), tree)
    edit.apply(tree)
    (broken,) = run_check(target(tree, edit), rules, DRAFTERS / edit.draft_config).fixes
    # behaviour gives absent; the structure's exact mixed-needs-v2 form reads present,
    # so the check is the loud behaviour/structure disagreement (unknown), never present
    assert broken.behaviour.status == "absent", broken.behaviour.reason
    assert (
        broken.status in ("absent", "unknown") and "the sliding window of layer 0 is 4096, needs 1024" in broken.reason
    )
    assert any(item.config.startswith("user:") and item.ok is False for item in broken.behaviour.observations)


@pytest.mark.parametrize("edit", swa_config.OBSERVED, ids=[edit.id for edit in swa_config.OBSERVED])
def test_causality_is_observed_not_judged(edit, base_tree, rules_by_fix, tmp_path):
    """See swa_config.OBSERVED: the verdict is the unedited tree's, and the report's
    behaviour observations show the causality the edit changed, per layer."""
    rules = (rules_by_fix[edit.engine, edit.fix],)
    (kept,) = run_check(target(base_tree(edit.base, edit.engine), edit), rules).fixes
    tree = tmp_path / "tree"
    shutil.copytree(base_tree(edit.base, edit.engine), tree)
    edit.apply(tree)
    (fix,) = run_check(target(tree, edit), rules).fixes
    assert (fix.status, fix.decided_by) == (kept.status, kept.decided_by) == ("present", "behaviour"), fix.reason

    def causality(result):
        return {
            (item.config, item.runner, item.layer): (item.expected, item.observed)
            for item in result.behaviour.observations
            if item.part == "causality"
        }

    before, after = causality(kept), causality(fix)
    assert before.keys() == after.keys() and before
    assert all(expected == observed for expected, observed in before.values() if expected is not None)
    changed = [key for key in after if after[key] != before[key]]
    assert changed and all(after[key][0] != after[key][1] for key in changed), changed


@pytest.mark.parametrize("edit", SGLANG_EDITS, ids=[edit.id for edit in SGLANG_EDITS])
def test_an_sglang_edit_rewrites_code_not_layout(edit, base_tree, tmp_path):
    """Every edited file parses to another tree than the release's: no edit is only comments or layout."""
    tree = tmp_path / "tree"
    shutil.copytree(base_tree(edit.base, edit.engine), tree)
    before = {relpath: ast.dump(ast.parse((tree / relpath).read_text())) for relpath in edit.files}
    edit.apply(tree)
    assert all(ast.dump(ast.parse((tree / relpath).read_text())) != before[relpath] for relpath in edit.files)


@pytest.mark.parametrize("edit", SGLANG_MOVES, ids=[edit.id for edit in SGLANG_MOVES])
def test_an_sglang_edit_that_breaks_or_adds_changes_what_runs(edit, base_tree, rules_by_fix, tmp_path):
    """The drafter layers (or target architectures) that fail, and in what (window, causality, index,
    base, capture position), are not the unedited release's: a break of a tree that already failed is
    seen to break something more."""
    rules = (rules_by_fix[edit.engine, edit.fix],)

    def failing(tree: Path) -> set:
        (fix,) = run_check(target(tree, edit), rules).fixes
        assert fix.decided_by == "behaviour", fix.reason
        observations = fix.behaviour.observations
        return {(item.config, item.setting, item.part, item.layer) for item in observations if item.ok is False}

    tree = tmp_path / "tree"
    shutil.copytree(base_tree(edit.base, edit.engine), tree)
    before = failing(tree)
    edit.apply(tree)
    assert failing(tree) != before


@pytest.mark.parametrize("edit", DEAD_CODE, ids=[edit.id for edit in DEAD_CODE])
def test_code_that_never_runs_changes_nothing(edit, base_tree, rules_by_fix, tmp_path):
    """The edit reads exactly as it does without its dead code (``Dead``: Python compiles it
    to nothing): the verdict, who decided it, the structure's own verdict and the forms it
    cites; the dead copy is cited only as dead code."""
    rules = (rules_by_fix[edit.engine, edit.fix],)

    def check(applied, name: str):
        tree = tmp_path / name
        shutil.copytree(base_tree(edit.base, edit.engine), tree)
        if applied is not None:
            applied.apply(tree)
        (fix,) = run_check(target(tree, edit), rules).fixes
        return fix

    def reading(fix) -> tuple:
        cited = sorted({(item.file, item.symbol, item.form) for item in fix.evidence if item.form != DEAD})
        return fix.status, fix.decided_by, fix.structure_status, cited

    dead, live = check(edit, "with-dead-code"), check(edit.live, "live-only")
    assert reading(dead) == reading(live), (dead.reason, live.reason)
    assert any(item.form == DEAD for item in dead.evidence), dead.evidence


def test_corpus_has_the_size_issue_11_asks_for():
    """Per fix: at least 15 preserving rewrites, 15 breaking edits and 5 added fixes."""
    for fix in ("layer-offset", "swa-config", "cache-drop"):
        kinds = [edit.kind for edit in EDITS if edit.subject == fix]
        assert kinds.count("preserve") >= 15 and kinds.count("break") >= 15 and kinds.count("add") >= 5, fix


def test_sglangs_fixes_are_kept_broken_and_added_on_three_releases():
    """Issue 23: per SGLang fix at least 8 edits that keep, break and add it, on 0.5.11, 0.5.16 and 0.5.23."""
    for fix in ("sglang-swa-config", "sglang-rope-base"):
        mine = [edit for edit in EDITS if edit.subject == fix]
        assert len(mine) >= 8 and {edit.kind for edit in mine} == {"preserve", "break", "add"}, fix
        assert {"0.5.11", "0.5.16", "0.5.23"} <= {edit.base for edit in mine}, fix


def test_an_edit_that_does_not_match_exactly_is_refused():
    twice = "x = 1\nx = 1\n"
    with pytest.raises(AssertionError, match="found 2 times, expected 1"):
        Replace("f.py", "x = 1", "x = 2").apply(twice)
    with pytest.raises(AssertionError, match="found 0 times"):
        Replace("f.py", "y = 1", "y = 2").apply(twice)
    assert Replace("f.py", "x = 1", "x = 2", count=2).apply(twice) == "x = 2\nx = 2\n"


def test_dead_code_that_python_would_run_is_refused():
    source = "def f(y):\n    x = 1\n    return x\n"
    assert "if False:\n        x = 2\n" in Dead(
        "f.py", "    x = 1\n", "    if False:\n        x = 2\n", "        x = 2\n"
    ).apply(source)
    with pytest.raises(AssertionError, match="of the dead copy are compiled to run"):
        Dead("f.py", "    x = 1\n", "    if y:\n        x = 2\n", "        x = 2\n").apply(source)


def test_a_rename_keeps_string_literals_and_stays_in_its_span():
    source = 'def f(ids):\n    return ids, "ids", target_ids\n\ndef g(ids):\n    return ids\n'
    renamed = rename_within("def f(", "def g(", "ids", "taps")(source)
    assert renamed == 'def f(taps):\n    return taps, "ids", target_ids\n\ndef g(ids):\n    return ids\n'
