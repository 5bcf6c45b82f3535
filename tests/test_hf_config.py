"""The drafter config as vLLM sees it: config.json through the transformers
config class vLLM uses (Qwen3Config), that class's own code run from a real
transformers wheel (downloaded at test time): installed beside the vLLM tree, or
the one the vLLM wheel requires. Lint and verdict read the same object."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import check_json
from registry import python_files, tree_files, write_image

from dflash_doctor.behaviour.compute import compute
from dflash_doctor.behaviour.run import questions_of
from dflash_doctor.behaviour.transformers import requires
from dflash_doctor.draft.config import load_draft_config
from dflash_doctor.isolation.sandbox import UNKNOWN_KEYS, Call, config_object, run
from dflash_doctor.rulefile import load_rules
from dflash_doctor.rules import rules_dir
from dflash_doctor.targets.probing import (
    encode_request,
    parse_probe_output,
    probe_request,
    probe_source,
)
from dflash_doctor.targets.release import transformers_tree
from dflash_doctor.targets.snapshot import SnapshotTree

ASKED = questions_of([rule for rule in load_rules() if rule.behaviour is not None])[0]  # every shipped rule's question

HERE = Path(__file__).parent
CONFIGS = sorted((HERE / "data" / "drafter-configs").glob("*.json")) + sorted(
    (rules_dir() / "reference" / "drafters").glob("*.json")
)
NO_FLAG = (
    HERE / "data" / "drafter-configs" / "z-lab__Qwen3.6-27B-DFlash.partial.json"
)  # sliding layers, no use_sliding_window
FLAG = (
    HERE / "data" / "drafter-configs" / "specforge-template__qwen3.6-27b-dflash.json"
)  # the same layout, use_sliding_window true


def _codes(report: dict) -> set[str]:
    return {finding["code"] for finding in report["draft"]["findings"]}


def _swa(report: dict) -> str:
    return next(fix["status"] for fix in report["fixes"] if fix["id"] == "swa-config")


@pytest.mark.release
@pytest.mark.parametrize("config", CONFIGS, ids=lambda path: path.name)
def test_lint_and_verdict_agree_on_the_window_for_every_drafter_config(config):
    """One object decides both: where the lint says vLLM sees no window, no layer
    shows one and swa-config is not present for the drafter; where the layers show
    a window for the drafter's sliding layers, the lint does not warn."""
    _, report = check_json("--release", "0.33.0", "--draft-config", str(config), "--only", "swa-config")
    probes = report["probes"]
    assert probes["hf_config"]["transformers"].startswith("5.20."), probes["hf_config"]
    nulled = "window-nulled" in _codes(report)
    layers = probes["layers"] or []
    windows = [layer["sliding_window"] for layer in layers if layer["sliding_window"] is not None]
    if nulled:
        assert _swa(report) != "present"
        assert windows == []
    expected = probes["expected_layers"] or []
    if windows and any(layer["sliding"] for layer in expected):
        assert not nulled, report["draft"]["findings"]


def _beside(mini_tree, version: str, transformers: str) -> Path:
    """A site-packages holding a real vLLM tree and a real transformers wheel's sources beside it."""
    tree = mini_tree(version)
    source, _ = transformers_tree(f"transformers=={transformers}")
    shutil.copytree(source / "transformers", tree / "transformers")
    for dist_info in source.glob("transformers-*.dist-info"):
        shutil.copytree(dist_info, tree / dist_info.name)
    return tree


@pytest.mark.release
@pytest.mark.parametrize(
    ("config", "window", "nulled"), [(NO_FLAG, None, True), (FLAG, 2048, False)], ids=["no-flag", "flag"]
)
def test_transformers_4_installed_beside_vllm_0_22_decides_the_window(mini_tree, config, window, nulled):
    """transformers 4.57.6 (allowed by vLLM 0.22.0) installed beside the tree: its
    Qwen3Config.__init__ runs; without use_sliding_window it drops the window."""
    tree = _beside(mini_tree, "0.22.0", "4.57.6")
    _, report = check_json("--path", str(tree), "--draft-config", str(config))
    source = report["probes"]["hf_config"]
    assert source["transformers"] == "4.57.6" and source["transformers_from"].startswith("installed beside vllm")
    assert (
        source["config_class"] == "transformers/models/qwen3/configuration_qwen3.py:Qwen3Config"
        and source["reason"] is None
    )
    assert report["draft"]["hf_config"] == source
    assert ("window-nulled" in _codes(report)) is nulled
    assert _swa(report) == "absent"  # 0.22.0 has no per-layer windows at all


@pytest.mark.release
@pytest.mark.parametrize(
    ("config", "window", "swa"), [(NO_FLAG, None, "absent"), (FLAG, 2048, "present")], ids=["no-flag", "flag"]
)
def test_transformers_5_that_vllm_0_33_requires_decides_the_window(config, window, swa):
    """--release 0.33.0: the newest transformers satisfying the wheel's requirement
    (5.20.x), fetched into the user cache; its dataclass Qwen3Config (fields, then
    __post_init__) drops the window without use_sliding_window, and vLLM then refuses
    the drafter's sliding layers: absent, decided by behaviour over the forms' present."""
    _, report = check_json("--release", "0.33.0", "--draft-config", str(config), "--only", "swa-config")
    source = report["probes"]["hf_config"]
    assert source["transformers"].startswith("5.20.") and "transformers<5.21.0,>=5.16.1" in source["transformers_from"]
    assert _swa(report) == swa
    layers = report["probes"]["layers"]
    if window is None:
        assert layers is None and "window-nulled" in _codes(report)
    else:
        assert [layer["sliding_window"] for layer in layers] == [window] * 4 + [None]


@pytest.mark.release
@pytest.mark.parametrize(("config", "nulled"), [(NO_FLAG, True), (FLAG, False)], ids=["no-flag", "flag"])
def test_transformers_4_that_vllm_0_19_requires_is_fetched_for_release(config, nulled):
    """--release 0.19.0 requires transformers<5: 4.57.6, fetched like the wheel; its
    Qwen3Config.__init__ decides the window (0.19.0 has no DFlash: not-applicable)."""
    _, report = check_json("--release", "0.19.0", "--draft-config", str(config), "--only", "swa-config")
    source = report["probes"]["hf_config"]
    assert source["transformers"].startswith("4.57.") and "transformers<5,>=4.56.0" in source["transformers_from"]
    assert ("window-nulled" in _codes(report)) is nulled
    assert _swa(report) == "not-applicable"


@pytest.mark.release
def test_the_collector_sends_the_hosts_own_transformers(mini_tree):
    """--host: the stdlib collector sends the transformers files beside the host's
    vllm with the vLLM files, and the drafter's config is built with that
    transformers (here 4.57.6 beside 0.22.0), not one fetched by requirement."""
    site = _beside(mini_tree, "0.22.0", "4.57.6")
    proc = subprocess.run(
        [sys.executable, "-S", "-", "collect", encode_request(probe_request(load_rules()))],
        input=probe_source(),
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(site)},
        timeout=120,
        check=True,
    )
    tree = SnapshotTree(parse_probe_output(proc.stdout, "the collector"))
    found = compute(tree, (load_draft_config(NO_FLAG), load_draft_config(FLAG)), ASKED)
    sources = [computed.hf_source for computed in found]
    assert [source.transformers for source in sources] == ["4.57.6", "4.57.6"]
    assert all(source.transformers_from.startswith("installed beside vllm on the host") for source in sources)
    assert [computed.hf_config["sliding_window"] for computed in found] == [None, 2048]


@pytest.mark.release
def test_an_image_is_checked_with_the_transformers_it_holds(mini_tree, tmp_path):
    """--image: the transformers config sources beside the image's vllm are extracted
    with it, and the drafter's config is built with them (4.57.6 here, not the
    5.x that vLLM 0.22.0's requirement would fetch)."""
    site = _beside(mini_tree, "0.22.0", "4.57.6")
    layout = tmp_path / "oci"
    write_image(layout, "with-transformers", [python_files(), tree_files(site)])
    _, report = check_json("--image", f"oci:{layout}:with-transformers", "--draft-config", str(NO_FLAG))
    source = report["probes"]["hf_config"]
    assert source["transformers"] == "4.57.6" and source["transformers_from"].startswith("installed beside vllm"), (
        source
    )
    assert "window-nulled" in _codes(report)


@pytest.mark.release
def test_no_transformers_to_run_makes_the_window_unknown_not_the_raw_value(mini_tree):
    """No transformers beside the tree and no requirement to fetch one by: the keys the
    class derives are unknown, with the reason, never the file's raw sliding_window."""
    tree = mini_tree("0.33.0")
    metadata = next(tree.glob("vllm-*.dist-info")) / "METADATA"
    metadata.write_text(
        "".join(
            line
            for line in metadata.read_text().splitlines(keepends=True)
            if not line.startswith("Requires-Dist: transformers")
        )
    )
    _, report = check_json("--path", str(tree), "--draft-config", str(FLAG), "--only", "swa-config")
    source = report["probes"]["hf_config"]
    assert (
        source["transformers"] is None
        and "Requires-Dist" in source["reason"]
        and "requirements/common.txt" in source["reason"]
    )
    assert report["probes"]["layers"] is None
    assert "of the drafter's hf_config (no transformers is installed beside this vLLM" in json.dumps(
        report["probes"]["reason"]
    )
    assert _swa(report) != "present"
    assert "window-unchecked" in _codes(report)


def test_keys_the_tool_could_not_compute_are_gaps_in_the_sandbox():
    """A config key listed under UNKNOWN_KEYS stops the code that reads it (plainly or
    with a getattr default) with the reason; the other keys read as they are."""
    data = {"hf": {"sliding_window": 2048, "num_hidden_layers": 5, UNKNOWN_KEYS: {"sliding_window": "why not known"}}}
    calls = [
        Call(name, expr, (("config", config_object("hf_config", "hf")),))
        for name, expr in (
            ("plain", "config.sliding_window + 0"),
            ("default", "getattr(config, 'sliding_window', None) or 1"),
            ("other", "config.num_hidden_layers"),
            ("user", "config.__unknown__"),
        )
    ]
    outcomes = run([], calls, data, {})
    assert outcomes["plain"].gap == "why not known"
    # read with a default, the unknown key decides a branch (``or``): run both ways, the outcomes differ
    assert outcomes["default"].gap == "the branches decided by why not known"
    assert outcomes["other"].value == 5
    assert not outcomes["user"].ok  # the key itself is never an attribute


def test_the_requirement_is_read_as_pip_takes_it():
    metadata = (
        "Name: vllm\nRequires-Dist: transformers-stream-generator; extra == 'x'\n"
        "Requires-Dist: transformers (<5.21.0,>=5.16.1)\nRequires-Dist: transformers>=4; extra == 'audio'\n"
    )
    assert requires(metadata) == "transformers<5.21.0,>=5.16.1"
    assert (
        requires("Requires-Dist: transformers!=5.0.*,>=4.56.0 ; python_version >= '3.9'\n")
        == "transformers!=5.0.*,>=4.56.0"
    )
    assert requires("Requires-Dist: torch==2.9\n") is None
    # pip is handed versions only: a host's METADATA cannot point it at a URL or an option
    assert requires("Requires-Dist: transformers @ https://127.0.0.1:9/x.whl\n") is None
    assert requires("Requires-Dist: transformers --index-url=http://127.0.0.1:9\n") is None
