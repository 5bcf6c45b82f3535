"""Trees that grep gets wrong: moved, renamed, reformatted, decoys, local edits."""

import json
import os
from pathlib import Path

import pytest

from conftest import check_json, run_cli, statuses

pytestmark = pytest.mark.release

RESOLVER = "vllm/v1/worker/gpu_model_runner.py"
QD = "vllm/model_executor/models/qwen3_dflash.py"


def edit(tree: Path, relpath: str, old: str, new: str, count: int = 1) -> None:
    path = tree / relpath
    text = path.read_text()
    assert text.count(old) >= count, f"{old!r} not in {relpath}"
    path.write_text(text.replace(old, new, count))


def test_decoy_plus_one_in_comment_and_capture_loop_stays_absent(mini_tree):
    tree = mini_tree("0.20.1")
    edit(
        tree,
        RESOLVER,
        'layer_ids = dflash_config.get("target_layer_ids")',
        'layer_ids = dflash_config.get("target_layer_ids")  # i + 1 for i in target_layer_ids',
    )
    edit(
        tree,
        RESOLVER,
        "    def _get_eagle3_aux_layers_from_config(self)",
        "    def _capture(self, hidden):\n        return [hidden[layer_idx + 1] for layer_idx in range(4)]\n\n"
        "    def _get_eagle3_aux_layers_from_config(self)",
    )
    code, report = check_json("--path", str(tree), "--only", "layer-offset")
    assert statuses(report) == {"layer-offset": "absent"}
    assert code == 1


def test_function_moved_to_another_file_is_still_found(mini_tree):
    tree = mini_tree("0.22.0")
    resolver = tree / RESOLVER
    text = resolver.read_text()
    start = text.index("    def _get_eagle3_aux_layers_from_config(self)")
    end = text.index("    def reload_weights(", start)
    (tree / "vllm/v1/worker/aux_layers.py").write_text("class GPUModelRunner:\n" + text[start:end])
    resolver.write_text(text[:start] + text[end:])
    code, report = check_json("--path", str(tree), "--only", "layer-offset")
    assert statuses(report) == {"layer-offset": "present"}
    files = {e["file"] for e in report["fixes"][0]["evidence"]}
    assert "vllm/v1/worker/aux_layers.py" in files and RESOLVER not in files


def test_renamed_anchor_is_unknown_never_present(mini_tree):
    tree = mini_tree("0.33.0")
    edit(tree, RESOLVER, "def _get_eagle3_aux_layers_from_config(", "def _aux_layers_from_cfg(")
    code, report = check_json("--path", str(tree), "--only", "layer-offset")
    fix = report["fixes"][0]
    assert fix["status"] == "unknown"
    assert "_get_eagle3_aux_layers_from_config not found" in fix["reason"]
    assert code == 2


def test_reformatted_fix_is_still_present(mini_tree):
    tree = mini_tree("0.22.0")
    edit(
        tree,
        RESOLVER,
        'layer_ids = [\n                    i + 1 for i in (dflash_config.get("target_layer_ids") or [])\n'
        "                ]",
        "layer_ids = [ 1+idx for idx in (dflash_config.get( 'target_layer_ids' ) or ( ))]",
    )
    _, report = check_json("--path", str(tree), "--only", "layer-offset")
    assert statuses(report) == {"layer-offset": "present"}


def test_removing_the_shift_locally_is_absent_and_shows_as_modified(mini_tree):
    tree = mini_tree("0.22.0")
    edit(
        tree,
        RESOLVER,
        'layer_ids = [\n                    i + 1 for i in (dflash_config.get("target_layer_ids") or [])\n'
        "                ]",
        'layer_ids = dflash_config.get("target_layer_ids")',
    )
    _, report = check_json("--path", str(tree))
    assert statuses(report)["layer-offset"] == "absent"
    assert report["engine"]["modified_files"] == [RESOLVER]


def test_half_fixed_tree_is_partial(mini_tree):
    tree = mini_tree("0.33.0")
    edit(
        tree,
        "vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py",
        'layer_ids = [i + 1 for i in (dflash_config.get("target_layer_ids") or [])]',
        'layer_ids = dflash_config.get("target_layer_ids")',
    )
    code, report = check_json("--path", str(tree), "--only", "layer-offset")
    assert statuses(report) == {"layer-offset": "partial"}
    assert code == 1


def test_pr_40898_swa_form_is_recognised(mini_tree):
    tree = mini_tree("0.22.0")
    edit(
        tree,
        QD,
        "            attn_type=attn_type,\n        )",
        "            attn_type=attn_type,\n            per_layer_sliding_window=sliding_window,\n        )",
    )
    edit(
        tree,
        QD,
        "        self.self_attn = DFlashQwen3Attention(",
        "        sliding_window = (\n"
        '            config.sliding_window if layer_type == "sliding_attention" else None\n'
        "        )\n"
        "        self.self_attn = DFlashQwen3Attention(",
    )
    _, report = check_json("--path", str(tree), "--only", "swa-config")
    fix = report["fixes"][0]
    assert fix["structure"] == "present"
    assert "layer-type-window" in {e["form"] for e in fix["evidence"]}
    # The form reads right, but `layer_type` and the attention's `sliding_window` are bound
    # nowhere in this tree: running it cannot tell the window (it would raise NameError), so
    # the verdict is unknown, not present.
    assert fix["status"] == "unknown" and fix["decided_by"] == "behaviour"
    assert "sliding_window" in fix["reason"] and "cannot tell" in fix["reason"]


def test_file_that_does_not_parse_is_unknown_with_reason(mini_tree):
    tree = mini_tree("0.33.0")
    with open(tree / "vllm/v1/core/sched/scheduler.py", "a") as handle:
        handle.write("\ndef broken(:\n")
    code, report = check_json("--path", str(tree))
    fix = {f["id"]: f for f in report["fixes"]}["cache-drop"]
    assert fix["status"] == "unknown"
    assert "scheduler.py does not parse" in fix["reason"]
    assert statuses(report)["layer-offset"] == "present"
    assert code == 2


def test_binary_and_huge_files_are_unknown(mini_tree):
    tree = mini_tree("0.33.0")
    (tree / QD).write_bytes(b"\x7fELF\x00\x00binary")
    (tree / RESOLVER).write_bytes(b"x = 1\n" * (9 * 1024 * 1024 // 6 + 1))
    _, report = check_json("--path", str(tree))
    fixes = {f["id"]: f for f in report["fixes"]}
    assert fixes["swa-config"]["status"] == "unknown" and "binary" in fixes["swa-config"]["reason"]
    assert fixes["layer-offset"]["status"] == "unknown" and "too large" in fixes["layer-offset"]["reason"]


def test_check_writes_nothing_to_the_tree(mini_tree):
    tree = mini_tree("0.20.1")
    before = {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in tree.rglob("*")}
    assert run_cli("check", "--path", str(tree)).returncode == 1
    after = {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in tree.rglob("*")}
    assert before == after


def test_package_dir_and_source_checkout_forms_of_path(mini_tree):
    tree = mini_tree("0.33.0")
    assert statuses(check_json("--path", str(tree / "vllm"))[1]) == statuses(check_json("--path", str(tree))[1])
    for dist_info in tree.glob("vllm-*.dist-info"):
        for path in sorted(dist_info.rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        dist_info.rmdir()
    code, report = check_json("--path", str(tree))
    # no dist-info and no transformers beside: the drafter configs' class cannot run, so what
    # depends on the layout it derives (the windows) is unknown with the reason, never read
    # from the raw JSON; the capture ids do not depend on it (both runners agree on them)
    assert code == 2
    fixes = {fix["id"]: fix for fix in report["fixes"]}
    assert {name: fix["status"] for name, fix in fixes.items()} == {
        "cache-drop": "present",
        "layer-offset": "present",
        "swa-config": "unknown",
    }
    assert "no transformers is installed beside this vLLM" in fixes["swa-config"]["reason"]
    assert report["engine"]["version"] == "0.33.0"  # from vllm/_version.py
    assert report["engine"]["modified_files"] is None  # nothing to compare against
    # a source checkout states its transformers in requirements/common.txt: the config class runs
    (tree / "requirements").mkdir()
    (tree / "requirements" / "common.txt").write_text(
        "# a checkout's own dependencies\ntransformers >= 5.16.1, < 5.21.0\n"
    )
    code, report = check_json("--path", str(tree))
    assert code == 0 and statuses(report) == {
        "cache-drop": "present",
        "layer-offset": "present",
        "swa-config": "present",
    }


def test_direct_url_commit_wins(mini_tree):
    tree = mini_tree("0.33.0")
    dist_info = next(tree.glob("vllm-*.dist-info"))
    sha = "3cfc8f8b7" + "0" * 31
    (dist_info / "direct_url.json").write_text(
        json.dumps({"url": "https://example.invalid/vllm.git", "vcs_info": {"vcs": "git", "commit_id": sha}})
    )
    _, report = check_json("--path", str(tree))
    assert (report["engine"]["commit"], report["engine"]["commit_source"]) == (sha, "direct_url.json")


def test_local_version_commit(mini_tree):
    tree = mini_tree("0.33.0")
    for dist_info in tree.glob("vllm-*.dist-info"):
        os.rename(dist_info, tree / "elsewhere")
    (tree / "vllm/_version.py").write_text("__version__ = version = '0.1.dev16016+g3cfc8f8b7'\n")
    _, report = check_json("--path", str(tree))
    assert (report["engine"]["version"], report["engine"]["commit"], report["engine"]["commit_source"]) == (
        "0.1.dev16016+g3cfc8f8b7",
        "3cfc8f8b7",
        "version",
    )
