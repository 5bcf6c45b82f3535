"""The results cache: same answer as a fresh evaluation, never stale."""

import os

import pytest

from conftest import check_json, statuses

pytestmark = pytest.mark.release

RESOLVER = "vllm/v1/worker/gpu_model_runner.py"


def test_cached_answer_equals_fresh_and_follows_edits(tmp_path, mini_tree):
    tree = mini_tree("0.22.0")
    cached_env = {k: v for k, v in os.environ.items() if k != "DFLASH_DOCTOR_NO_CACHE"}
    cached_env["DFLASH_DOCTOR_CACHE"] = str(tmp_path / "cache")
    fresh = check_json("--path", str(tree))
    first = check_json("--path", str(tree), env=cached_env)
    assert list((tmp_path / "cache" / "results").rglob("*.json")), "nothing was cached"
    second = check_json("--path", str(tree), env=cached_env)
    assert fresh == first == second

    resolver = tree / RESOLVER
    resolver.write_text(resolver.read_text().replace(
        'layer_ids = [\n                    i + 1 for i in (dflash_config.get("target_layer_ids") or [])\n                ]',
        'layer_ids = dflash_config.get("target_layer_ids")'))
    code, report = check_json("--path", str(tree), env=cached_env)
    assert statuses(report)["layer-offset"] == "absent"
    assert report["engine"]["modified_files"] == [RESOLVER]


def test_disabled_cache_writes_nothing(tmp_path, mini_tree):
    tree = mini_tree("0.33.0")
    env = {**os.environ, "DFLASH_DOCTOR_CACHE": str(tmp_path / "cache"), "DFLASH_DOCTOR_NO_CACHE": "1"}
    assert check_json("--path", str(tree), env=env)[0] == 0
    assert not (tmp_path / "cache" / "results").exists()
