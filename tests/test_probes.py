"""Behavioural probes against real vLLM wheels, altered copies of them, and
small trees of our own (for the sandbox's limits)."""

import shutil
import textwrap
from pathlib import Path

import pytest

from dflash_doctor.check import draft_sections
from dflash_doctor.draft.config import load_draft_config
from dflash_doctor.behaviour.compute import compute
from dflash_doctor.behaviour.run import questions_of
from dflash_doctor.behaviour.definitions import ExtractError, Locator
from dflash_doctor.behaviour.program import ProgramBuilder
from dflash_doctor.isolation.sandbox import Call, run
from dflash_doctor.provenance import find_dist_info
from dflash_doctor.rulefile import load_rules
from dflash_doctor.source import DirectoryTree
from dflash_doctor.targets.path import PathTarget

ASKED = questions_of([rule for rule in load_rules() if rule.behaviour is not None])[0]  # every shipped rule's question

DRAFTERS = Path(__file__).parent / "data" / "drafters"
QWEN36 = DRAFTERS / "qwen3.6-27b-dflash.json"  # 4 sliding + 1 full, window 2048, ids [1,16,31,46,61]
QWEN3_8B = DRAFTERS / "qwen3-8b-dflash-b16.json"  # all full, ids [1,9,17,25,33]
DFLASH2 = DRAFTERS / "qwen3.8-27b-dflash2.json"  # all sliding, is_causal false, ids [5,19,33,47,61]
MIMO = DRAFTERS / "mimo-v2.5-pro-dflash.json"  # no layer_types; use_swa, swa_window_size 1024
SPECULATORS = DRAFTERS / "speculators-qwen3-8b-dflash.json"  # aux ids [2,10,18,26,34], already shifted

pytestmark = pytest.mark.release


def probe(release, version: str, config: Path) -> dict:
    """What the release computes for ``config``; its dist-info names the transformers that builds the hf_config."""
    root = release(version)
    tree = DirectoryTree(root, find_dist_info(root))
    return compute(tree, (load_draft_config(config),), ASKED)[0].to_json()


def windows(report: dict) -> list:
    return [layer["sliding_window"] for layer in report["layers"]]


def causal(report: dict) -> list:
    return [layer["causal"] for layer in report["layers"]]


# -- aux layer ids ---------------------------------------------------------------


def test_0_20_1_captures_the_raw_zlab_ids(release):
    report = probe(release, "0.20.1", QWEN36)
    assert report["aux_layer_ids"] == [1, 16, 31, 46, 61]
    assert report["expected_aux_layer_ids"] == [2, 17, 32, 47, 62]
    assert any("without +1" in m for m in report["mismatches"])
    # The V2 resolver of that release reads only eagle ids: nothing for a z-lab drafter.
    assert report["aux_layer_ids_by_runner"]["v2"] is None


def test_0_22_0_captures_zlab_ids_plus_one(release):
    report = probe(release, "0.22.0", QWEN3_8B)
    assert report["aux_layer_ids"] == [2, 10, 18, 26, 34] == report["expected_aux_layer_ids"]
    assert not any("aux layers" in m for m in report["mismatches"])


def test_speculators_ids_are_right_even_where_the_zlab_shift_is_missing(release):
    # 0.20.1 lacks the +1 for z-lab ids, yet runs a speculators drafter right:
    # its translation hands the already-shifted ids over as eagle ids.
    for version in ("0.20.1", "0.33.0"):
        report = probe(release, version, SPECULATORS)
        assert report["aux_layer_ids"] == [2, 10, 18, 26, 34] == report["expected_aux_layer_ids"], version
    evidence = {item["symbol"] for item in report["evidence"]}
    assert "update_dflash" in evidence


# -- per-layer windows and causality --------------------------------------------------


def test_0_33_0_mixed_drafter_windows_causality_and_runner(release):
    report = probe(release, "0.33.0", QWEN36)
    assert windows(report) == [2048, 2048, 2048, 2048, None]
    assert causal(report) == [True, True, True, True, False]
    assert report["runner"] == "v2"
    assert report["runner_support"]["v1"]["supported"] is False
    assert "V2 model runner" in report["runner_support"]["v1"]["reason"]
    assert report["runner_support"]["v2"]["supported"] is True
    assert report["mismatches"] == []


def test_0_26_0_forces_v2_for_a_mixed_drafter(release):
    report = probe(release, "0.26.0", QWEN36)
    assert report["default_runner"] == "v2"
    assert report["runner"] == "v2"
    assert windows(report) == [2048, 2048, 2048, 2048, None]


def test_dflash2_non_causal_sliding_layers(release):
    new = probe(release, "0.33.0", DFLASH2)
    assert windows(new) == [2048] * 5
    assert causal(new) == [False] * 5
    assert new["runner"] == "v2"  # V1 refuses candidate-head drafts
    assert "candidate-head" in new["runner_support"]["v1"]["reason"]
    # 0.26.0 does not read is_causal: it runs the non-causal drafter causally.
    old = probe(release, "0.26.0", DFLASH2)
    assert causal(old) == [True] * 5
    assert sum("trained non-causal" in m for m in old["mismatches"]) == 5


def test_mimo_use_swa_window_on_every_layer(release):
    report = probe(release, "0.33.0", MIMO)
    assert windows(report) == [1024] * 5
    assert causal(report) == [False] * 5
    assert report["aux_layer_ids"] == [1, 16, 32, 48, 70]


def test_all_full_drafter_runs_on_either_runner(release):
    report = probe(release, "0.33.0", QWEN3_8B)
    assert windows(report) == [None] * 5 and causal(report) == [False] * 5
    assert report["runner_support"]["v1"]["supported"] is True
    assert report["runner_support"]["v2"]["supported"] is True
    # Which runner runs depends on the deployment here: no guess, a reason.
    assert report["runner"] is None
    assert "deployment" in report["reason"]["runner"]


def test_trees_without_a_layer_resolver_give_no_layers_and_say_why(release):
    for version in ("0.20.1", "0.22.0"):
        report = probe(release, version, QWEN36)
        assert report["layers"] is None
        assert "_resolve_layer_attention" in report["reason"]["layers"]
        assert report["runner"] == "v1", version
        assert "EagleSpeculator" in report["runner_support"]["v2"]["reason"]


# -- prefix-cache block drop -------------------------------------------------------------


def test_prefix_block_drop_per_release(release):
    assert probe(release, "0.20.1", QWEN3_8B)["drops_prefix_block"] is True
    opt_out = probe(release, "0.30.0", QWEN3_8B)
    assert opt_out["drops_prefix_block"] is True
    assert opt_out["opt_out"] == "disable_eagle_block_drop" and opt_out["drops_prefix_block_with_opt_out"] is False
    fixed = probe(release, "0.33.0", QWEN3_8B)
    assert fixed["drops_prefix_block"] is False
    # what the scheduler hands the KV cache manager: the drop bit and the lookahead hashing
    assert fixed["prefix_block_predicate"] == (
        "use_eagle=self.use_eagle_block_drop or num_hash_lookahead_tokens=self.num_hash_lookahead_tokens"
    )


# -- probes against the code-pattern verdicts -----------------------------------------------


def probe_tree(mini_tree, release, version: str) -> Path:
    """The rules' files plus every file the probes read, copied from the real wheel."""
    tree = mini_tree(version)
    source = release(version)
    for relpath in sorted({f for rule in load_rules() for f in rule.files}):
        if (source / relpath).is_file():
            (tree / relpath).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / relpath, tree / relpath)
    return tree


def edit(tree: Path, relpath: str, old: str, new: str) -> None:
    path = tree / relpath
    text = path.read_text()
    assert old in text, f"{old!r} not in {relpath}"
    path.write_text(text.replace(old, new, 1))


def check_with_draft(tree: Path, config: Path):
    """(what the forms say, the verdicts with the user's config gating, the report sections)."""
    sections, fixes = draft_sections(PathTarget(tree).resolve(), load_rules(), config, None)
    before = {fix.id: fix.structure_status for fix in fixes}
    return before, {fix.id: fix for fix in fixes}, {section.name: section for section in sections}


def test_unaltered_tree_keeps_every_verdict(mini_tree, release):
    tree = probe_tree(mini_tree, release, "0.20.1")
    before, after, sections = check_with_draft(tree, QWEN36)
    assert before == {k: f.status for k, f in after.items()}
    assert before["layer-offset"] == "absent"
    assert {f.decided_by for f in after.values()} == {"behaviour"}
    assert after["layer-offset"].decided_by == "behaviour"
    assert sections["draft"].to_json()["format"] == "z-lab"
    for key in ("aux_layer_ids", "expected_aux_layer_ids", "layers", "runner", "drops_prefix_block", "reason"):
        assert key in sections["probes"].to_json()


def test_shift_undone_after_the_comprehension_is_absent_by_behaviour(mini_tree, release):
    # The +1 comprehension is still there (the AST says present), but the next
    # line takes it back: the resolver computes the raw ids, and those decide.
    tree = probe_tree(mini_tree, release, "0.22.0")
    edit(
        tree,
        "vllm/v1/worker/gpu_model_runner.py",
        "        if layer_ids and isinstance(layer_ids, (list, tuple)):\n            return tuple(layer_ids)",
        "        layer_ids = [i - 1 for i in layer_ids]\n"
        "        if layer_ids and isinstance(layer_ids, (list, tuple)):\n            return tuple(layer_ids)",
    )
    before, after, sections = check_with_draft(tree, QWEN3_8B)
    assert before["layer-offset"] == "present"
    assert (after["layer-offset"].status, after["layer-offset"].decided_by) == ("absent", "behaviour")
    assert "the code's forms read present" in after["layer-offset"].reason
    assert "[1, 9, 17, 25, 33]" in after["layer-offset"].reason
    assert after["layer-offset"].behaviour.status == "absent"
    assert after["cache-drop"].status == before["cache-drop"]
    assert sections["probes"].lines()[1].startswith("  !! the tree captures aux layers [1, 9, 17, 25, 33]")


def test_drop_predicate_changed_under_the_opt_out_flag_makes_cache_drop_unknown(mini_tree, release):
    # 0.30.0 reads as partial (drops by default, opt-out flag). Here use_eagle()
    # no longer lists dflash, so nothing is dropped: the probe contradicts "partial".
    tree = probe_tree(mini_tree, release, "0.30.0")
    edit(
        tree,
        "vllm/config/speculative.py",
        'return self.method in ("eagle", "eagle3", "mtp", "dflash", "dspark")',
        'return self.method in ("eagle", "eagle3", "mtp", "dspark")',
    )
    before, after, sections = check_with_draft(tree, QWEN3_8B)
    assert before["cache-drop"] == "partial"
    assert after["cache-drop"].status == "unknown"
    assert "BEHAVIOUR AND STRUCTURE DISAGREE" in after["cache-drop"].reason
    assert sections["probes"].computed.drops_prefix_block is False


def test_a_drop_a_later_line_turns_into_lookahead_hashing_still_changes_the_block(mini_tree, release):
    # On 0.33.0 the scheduler clears the drop again when lookahead hashes are on (deployment
    # state, run both ways): a predicate broken to true for dflash then drops the block, or
    # hashes it with lookahead tokens; either way the manager is told to change it.
    tree = probe_tree(mini_tree, release, "0.33.0")
    edit(
        tree,
        "vllm/config/speculative.py",
        '    def use_dflash(self) -> bool:\n        return self.method == "dflash"',
        '    def use_dflash(self) -> bool:\n        return self.method == "dflash-v1"',
    )
    before, after, sections = check_with_draft(tree, QWEN3_8B)
    assert sections["probes"].computed.drops_prefix_block is True
    # The forms still read present; running the code shows the change: never present.
    assert before["cache-drop"] == "present"
    assert (after["cache-drop"].status, after["cache-drop"].decided_by) == ("partial", "behaviour")
    assert "disable_eagle_block_drop set" in after["cache-drop"].reason  # the opt-out still works


def test_resolver_reading_unknown_state_gives_unknown_layers_not_a_guess(mini_tree, release):
    tree = probe_tree(mini_tree, release, "0.33.0")
    edit(
        tree,
        "vllm/model_executor/models/qwen3_dflash.py",
        '    dflash_config = getattr(config, "dflash_config", None) or {}\n'
        '    layer_types = getattr(config, "layer_types", None)\n    use_swa',
        "    if get_tensor_model_parallel_world_size() > 1:\n        return None, False\n"
        '    dflash_config = getattr(config, "dflash_config", None) or {}\n'
        '    layer_types = getattr(config, "layer_types", None)\n    use_swa',
    )
    report = compute(PathTarget(tree).resolve().tree, (load_draft_config(QWEN3_8B),), ASKED)[0].to_json()
    assert report["layers"] is None
    assert "get_tensor_model_parallel_world_size" in report["reason"]["layers"]
    assert report["aux_layer_ids"] == [2, 10, 18, 26, 34]  # the other probes still answer


def test_resolver_moved_to_another_file_is_still_run(mini_tree, release):
    tree = probe_tree(mini_tree, release, "0.20.1")
    runner = tree / "vllm/v1/worker/gpu_model_runner.py"
    text = runner.read_text()
    start = text.index("    def _get_eagle3_aux_layers_from_config(self)")
    end = text.index("    def reload_weights(", start)
    (tree / "vllm/v1/worker/aux_layers.py").write_text("class GPUModelRunner:\n" + text[start:end])
    runner.write_text(text[:start] + text[end:])
    report = compute(PathTarget(tree).resolve().tree, (load_draft_config(QWEN36),), ASKED)[0].to_json()
    assert report["aux_layer_ids_by_runner"]["v1"] == [1, 16, 31, 46, 61]
    assert {
        "file": "vllm/v1/worker/aux_layers.py",
        "line": 2,
        "symbol": "GPUModelRunner._get_eagle3_aux_layers_from_config",
    } in report["evidence"]


def test_missing_files_give_reasons_not_guesses(mini_tree, release):
    tree = mini_tree("0.33.0")
    for relpath in ("vllm/envs.py", "vllm/v1/worker/gpu/spec_decode/__init__.py"):
        (tree / relpath).unlink()
    report = compute(PathTarget(tree).resolve().tree, (load_draft_config(QWEN36),), ASKED)[0].to_json()
    assert report["runner_support"]["v2"]["supported"] is None
    assert report["default_runner"] is None and "default_runner" in report["reason"]


# -- the sandbox itself (our own snippets) ----------------------------------------------------


def own_tree(tmp_path: Path, source: str) -> DirectoryTree:
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("")
    (tmp_path / "vllm" / "probed.py").write_text(textwrap.dedent(source))
    return DirectoryTree(tmp_path, None)


def run_function(tree: DirectoryTree, name: str, expr: str):
    builder = ProgramBuilder(tree, ())
    builder.function(Locator(tree, [("vllm/probed.py", name)]).one("vllm/probed.py", name))
    globals_ = {gap: {"$gap": label} for gap, label in builder.gaps.items()}
    outcomes = run(builder.chunks, [Call("x", expr)], {}, globals_)
    return outcomes["x"]


def test_sandbox_has_no_open_and_no_real_import(tmp_path):
    tree = own_tree(
        tmp_path,
        """
        def reads_a_file():
            return open("/etc/hostname").read()

        def imports_os():
            import os
            return os.getcwd() + "/x"
    """,
    )
    # open is not a builtin there: the name is a gap, not a file read.
    assert run_function(tree, "reads_a_file", "reads_a_file()").gap is not None
    # an import gives a recording stand-in: nothing runs, and it cannot be used as a value
    assert run_function(tree, "imports_os", "imports_os()").gap is not None


def test_sandbox_stops_a_runaway_call(tmp_path):
    tree = own_tree(
        tmp_path,
        """
        def spins():
            n = 0
            while True:
                n += 1
    """,
    )
    assert run_function(tree, "spins", "spins()").timeout


def test_gap_cannot_be_swallowed_by_except_exception(tmp_path):
    tree = own_tree(
        tmp_path,
        """
        from vllm.triton_utils import HAS_TRITON

        def picks():
            try:
                return "v2" if HAS_TRITON else "v1"
            except Exception:
                return "v1"
    """,
    )
    outcome = run_function(tree, "picks", "picks()")
    assert outcome.value is None and outcome.gap and "HAS_TRITON" in outcome.gap


def test_module_helpers_and_constants_come_along(tmp_path):
    tree = own_tree(
        tmp_path,
        """
        _KINDS = frozenset({"sliding_attention"})
        OFFSET = 1

        def _shift(ids):
            return [i + OFFSET for i in ids]

        def resolve(ids, kind):
            return _shift(ids) if kind in _KINDS else None
    """,
    )
    assert run_function(tree, "resolve", "resolve([0, 4], 'sliding_attention')").value == [1, 5]


def test_dunder_names_through_getattr_are_gaps(tmp_path):
    tree = own_tree(
        tmp_path,
        """
        def escapes():
            return getattr((), "__cl" + "ass__")
    """,
    )
    assert "dunder" in run_function(tree, "escapes", "escapes()").gap


def test_dunder_access_is_refused_before_running(tmp_path):
    tree = own_tree(
        tmp_path,
        """
        def escapes():
            return ().__class__.__bases__[0].__subclasses__()
    """,
    )
    with pytest.raises(ExtractError, match="uses __"):
        ProgramBuilder(tree, ()).function(
            Locator(tree, [("vllm/probed.py", "escapes")]).one("vllm/probed.py", "escapes")
        )
