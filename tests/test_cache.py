"""The results cache: same answer as a fresh evaluation, never stale."""

import os
from pathlib import Path

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
    resolver.write_text(
        resolver.read_text().replace(
            'layer_ids = [\n                    i + 1 for i in (dflash_config.get("target_layer_ids") or [])\n'
            "                ]",
            'layer_ids = dflash_config.get("target_layer_ids")',
        )
    )
    code, report = check_json("--path", str(tree), env=cached_env)
    assert statuses(report)["layer-offset"] == "absent"
    assert report["engine"]["modified_files"] == [RESOLVER]


def test_disabled_cache_writes_nothing(tmp_path, mini_tree):
    tree = mini_tree("0.33.0")
    env = {**os.environ, "DFLASH_DOCTOR_CACHE": str(tmp_path / "cache"), "DFLASH_DOCTOR_NO_CACHE": "1"}
    assert check_json("--path", str(tree), env=env)[0] == 0
    assert not (tmp_path / "cache" / "results").exists()


def test_a_rule_file_is_parsed_again_once_edited_and_a_bad_kept_parse_is_ignored(tmp_path, monkeypatch):
    from dflash_doctor.rulefile import load_rule
    from dflash_doctor.rules import rules_dir

    monkeypatch.delenv("DFLASH_DOCTOR_NO_CACHE", raising=False)
    monkeypatch.setenv("DFLASH_DOCTOR_CACHE", str(tmp_path / "cache"))
    rule_file = tmp_path / "layer-offset.toml"
    text = (rules_dir() / "layer-offset.toml").read_text(encoding="utf-8")
    rule_file.write_text(text, encoding="utf-8")
    first = load_rule(rule_file)
    kept = list((tmp_path / "cache" / "rules").glob("*.json"))
    assert len(kept) == 1, "the parse was not kept"
    assert load_rule(rule_file) == first

    rule_file.write_text(text.replace(f'title = "{first.title}"', 'title = "An edited title"'), encoding="utf-8")
    assert load_rule(rule_file).title == "An edited title"
    assert len(list((tmp_path / "cache" / "rules").glob("*.json"))) == 2

    rule_file.write_text(text, encoding="utf-8")
    kept[0].write_text('["not a rule table"]', encoding="utf-8")
    assert load_rule(rule_file) == first


def test_the_tools_digest_follows_an_edit_of_its_sources(tmp_path):
    import shutil
    import subprocess
    import sys

    import dflash_doctor

    copy = tmp_path / "tool"
    shutil.copytree(
        Path(dflash_doctor.__file__).parent, copy / "dflash_doctor", ignore=shutil.ignore_patterns("__pycache__")
    )
    env = {**os.environ, "PYTHONPATH": str(copy), "DFLASH_DOCTOR_CACHE": str(tmp_path / "cache")}
    env.pop("DFLASH_DOCTOR_NO_CACHE", None)

    def digest() -> str:
        run = subprocess.run(
            [sys.executable, "-c", "from dflash_doctor.cache import _tool_digest; print(_tool_digest())"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=True,
        )
        return run.stdout.strip()

    before = digest()
    assert (tmp_path / "cache" / "tool.json").is_file(), "the digest was not remembered"
    assert digest() == before
    stamp = copy / "dflash_doctor" / "stamp.py"
    times = stamp.stat()
    stamp.write_bytes(stamp.read_bytes().replace(b"RACY_NS = 2_000_000_000", b"RACY_NS = 3_000_000_000"))
    os.utime(stamp, ns=(times.st_atime_ns, times.st_mtime_ns))  # same size, the mtime put back: the ctime moved
    assert digest() != before
