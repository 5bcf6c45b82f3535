"""`check` options that join other parts to the report: --draft-config, --repo."""

import json
from pathlib import Path

import pytest

from conftest import assert_error, check_json, run_cli, statuses
from gitrepos import build_vllm_like

DRAFTERS = Path(__file__).resolve().parent / "data" / "drafters"


@pytest.mark.release
def test_draft_config_adds_lint_and_probes_to_the_check(release):
    code, report = check_json("--release", "0.20.1", "--draft-config", str(DRAFTERS / "qwen3.6-27b-dflash.json"))
    assert statuses(report)["layer-offset"] == "absent" and code == 1
    assert report["draft"]["format"] and isinstance(report["draft"]["findings"], list)
    probes = report["probes"]
    assert probes["aux_layer_ids"] == [1, 16, 31, 46, 61]
    assert probes["expected_aux_layer_ids"] == [2, 17, 32, 47, 62]
    table = run_cli("check", "--release", "0.20.1", "--draft-config", str(DRAFTERS / "qwen3.6-27b-dflash.json"))
    assert "aux layer ids: [1, 16, 31, 46, 61]" in table.stdout


@pytest.mark.release
def test_target_config_needs_a_draft_config(release):
    assert_error(
        run_cli("check", "--release", "0.33.0", "--target-config", str(DRAFTERS / "qwen3-8b-dflash-b16.json")),
        "--target-config needs --draft-config",
    )


@pytest.mark.slow
def test_repo_adds_the_ancestry_of_the_recorded_commit(tmp_path):
    history = build_vllm_like(tmp_path / "vllm-clone")
    tree = tmp_path / "site"
    (tree / "vllm").mkdir(parents=True)
    (tree / "vllm" / "__init__.py").write_text("")
    release = history.c["release"]
    (tree / "vllm" / "_version.py").write_text(f"__version__ = '0.1.dev16016+g{release[:9]}'\n")
    proc = run_cli("check", "--path", str(tree), "--repo", str(history.path), "--format", "json")
    report = json.loads(proc.stdout)
    assert set(statuses(report).values()) == {"unknown"}  # this toy tree has none of vLLM's code
    ancestry = report["ancestry"]
    assert ancestry["commit"] == release
    methods = {entry["pr"]: entry["method"] for entry in ancestry["prs"]}
    assert (methods[40727], methods[46104]) == ("patch-id", "merge-tree")
    (tree / "vllm" / "_version.py").write_text("__version__ = '0.20.1'\n")
    assert_error(run_cli("check", "--path", str(tree), "--repo", str(history.path)), "records no build commit")
