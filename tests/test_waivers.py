"""Waivers: active, expired, target patterns, malformed files, and --strict."""

import datetime
import json
import re
from pathlib import Path

import pytest

from conftest import check_json, run_cli, statuses
from dflash_doctor.check import run_check
from dflash_doctor.model import ToolError, Waiver
from dflash_doctor.rulefile import load_rules
from dflash_doctor.targets.path import PathTarget
from dflash_doctor.waivers import apply_waivers, load_waivers

KNOWN_IDS = {"cache-drop", "layer-offset", "swa-config"}
RESOLVER = "vllm/v1/worker/gpu_model_runner.py"


def waivers_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "waivers.toml"
    path.write_text(text)
    return path


def entry(fix_id: str, reason: str = "accepted for now", **extra) -> str:
    lines = ["[[waiver]]", f'id = "{fix_id}"', f'reason = "{reason}"']
    lines += [f"{key} = {value}" for key, value in extra.items()]
    return "\n".join(lines) + "\n"


@pytest.mark.release
def test_active_waiver_passes_the_gate_and_says_why(tmp_path, mini_tree):
    tree = mini_tree("0.30.0")  # cache-drop partial, the rest present
    path = waivers_file(tmp_path, entry("cache-drop", "prefix caching is off on this pool", until="2099-12-31"))
    proc = run_cli("check", "--path", str(tree), "--waivers", str(path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        f"dflash-doctor: 1 fix waived by {path}",
        "dflash-doctor: waived cache-drop (partial) until 2099-12-31: prefix caching is off on this pool",
    ]
    assert re.search(r"^cache-drop +PARTIAL ", proc.stdout, re.M)  # the verdict is still told, then the waiver
    assert re.search(r"^  waived +until 2099-12-31: prefix caching is off on this pool$", proc.stdout, re.M)
    code, report = check_json("--path", str(tree), "--waivers", str(path))
    assert code == 0 and report["exit_code"] == 0
    fix = next(f for f in report["fixes"] if f["id"] == "cache-drop")
    assert fix["status"] == "partial"  # the verdict is still told
    assert fix["waiver"] == {
        "id": "cache-drop",
        "target": None,
        "reason": "prefix caching is off on this pool",
        "until": "2099-12-31",
    }
    assert report["waivers"]["waived"] == [{"status": "partial", **fix["waiver"]}]
    assert report["waivers"]["file"] == str(path)


@pytest.mark.release
def test_without_waivers_the_same_tree_fails(mini_tree):
    code, report = check_json("--path", str(mini_tree("0.30.0")))
    assert code == 1 and "waivers" not in report
    assert all(fix["waiver"] is None for fix in report["fixes"])


@pytest.mark.release
def test_expired_waiver_is_reported_and_not_applied(tmp_path, mini_tree):
    tree = mini_tree("0.30.0")
    path = waivers_file(tmp_path, entry("cache-drop", "until the rollout", until="2020-01-31"))
    proc = run_cli("check", "--path", str(tree), "--waivers", str(path), "--format", "json")
    assert proc.returncode == 1
    assert "dflash-doctor: expired waiver not applied: cache-drop (until 2020-01-31): until the rollout" in proc.stderr
    assert "dflash-doctor: 0 fixes waived" in proc.stderr
    report = json.loads(proc.stdout)
    assert report["waivers"]["expired"] == [
        {"id": "cache-drop", "target": None, "reason": "until the rollout", "until": "2020-01-31"}
    ]
    assert report["waivers"]["waived"] == []


@pytest.mark.release
def test_until_is_the_last_day_the_waiver_applies(mini_tree):
    report = run_check(PathTarget(mini_tree("0.30.0")), load_rules())
    on_the_day = Waiver("cache-drop", "r", until=datetime.date(2030, 5, 1))
    applied = apply_waivers(report, (on_the_day,), Path("w.toml"), today=datetime.date(2030, 5, 1))
    assert applied.exit_code == 0
    after = apply_waivers(report, (on_the_day,), Path("w.toml"), today=datetime.date(2030, 5, 2))
    assert after.exit_code == 1 and after.to_json()["waivers"]["expired"][0]["until"] == "2030-05-01"


@pytest.mark.release
def test_target_pattern_matches_location_or_details(tmp_path, mini_tree):
    tree = mini_tree("0.30.0")
    matching = waivers_file(tmp_path, entry("cache-drop", target=json.dumps(str(tree.parent) + "/tree-*")))
    code, report = check_json("--path", str(tree), "--waivers", str(matching))
    assert code == 0 and len(report["waivers"]["waived"]) == 1
    other = waivers_file(tmp_path, entry("cache-drop", target='"/srv/other-*"'))
    proc = run_cli("check", "--path", str(tree), "--waivers", str(other))
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"dflash-doctor: 0 fixes waived by {other}"
    ]  # not for this target: not even expired


@pytest.mark.release
def test_target_pattern_matches_a_release(tmp_path, release):
    path = waivers_file(tmp_path, entry("cache-drop", target='"0.30.*"'))
    assert check_json("--release", "0.30.0", "--waivers", str(path))[0] == 0
    code, report = check_json("--release", "0.20.1", "--waivers", str(path))
    assert code == 1 and report["waivers"]["waived"] == []


@pytest.mark.release
def test_waiver_for_a_present_fix_is_not_needed(tmp_path, mini_tree):
    path = waivers_file(tmp_path, entry("layer-offset", "old fleet"))
    proc = run_cli("check", "--path", str(mini_tree("0.33.0")), "--waivers", str(path))
    assert proc.returncode == 0
    assert "dflash-doctor: waiver not needed, the fix is present: layer-offset: old fleet" in proc.stderr


@pytest.mark.release
def test_strict_fails_unknown_like_absent_and_a_waiver_still_covers_it(tmp_path, mini_tree):
    tree = mini_tree("0.33.0")
    resolver = tree / RESOLVER
    resolver.write_text(
        resolver.read_text().replace("def _get_eagle3_aux_layers_from_config(", "def _aux_layers_from_cfg(")
    )
    code, report = check_json("--path", str(tree))
    assert statuses(report)["layer-offset"] == "unknown" and code == 2 and report["strict"] is False
    code, report = check_json("--path", str(tree), "--strict")
    assert code == 1 and report["exit_code"] == 1 and report["strict"] is True
    path = waivers_file(tmp_path, entry("layer-offset", "renamed in our fork"))
    assert check_json("--path", str(tree), "--strict", "--waivers", str(path))[0] == 0


@pytest.mark.parametrize(
    "text, message",
    [
        ("[[waiver]\nid = 1", "is not valid TOML"),
        ('[[waiver]]\nid = "cache-drop"\n', "waiver 1 ('cache-drop'): 'reason' is required"),
        ('[[waiver]]\nid = "cache-drop"\nreason = "  "\n', "'reason' is required"),
        ('[[waiver]]\nreason = "x"\n', "waiver 1: 'id' (a fix id) is required"),
        (entry("cache-drop") + entry("no-such-fix"), "waiver 2 ('no-such-fix'): unknown fix id"),
        (entry("cache-drop", owner='"me"'), "unexpected key 'owner'"),
        (entry("cache-drop", until='"next week"'), "'until' must be a date like 2026-09-30, not 'next week'"),
        (entry("cache-drop", until="2026-09-30T10:00:00"), "'until' must be a date"),
        (entry("cache-drop", target="3"), "'target' must be a non-empty glob string"),
        ('waiver = "cache-drop"\n', "must be an array of tables"),
        ('[[waivers]]\nid = "cache-drop"\n', "unexpected key 'waivers'"),
    ],
)
def test_malformed_waivers_file_is_an_error(tmp_path, text, message):
    path = waivers_file(tmp_path, text)
    proc = run_cli("check", "--path", "/nonexistent", "--waivers", str(path))
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("dflash-doctor: error: waivers file") and message in lines[0], lines


def test_missing_or_binary_waivers_file_is_an_error(tmp_path):
    proc = run_cli("check", "--path", "/nonexistent", "--waivers", str(tmp_path / "nope.toml"))
    assert proc.returncode == 3 and proc.stderr.strip().endswith("nope.toml does not exist")
    binary = tmp_path / "w.toml"
    binary.write_bytes(b"\xff\xfe[[waiver]]\n")
    proc = run_cli("check", "--path", "/nonexistent", "--waivers", str(binary))
    assert proc.returncode == 3 and proc.stderr.strip().endswith("w.toml is not UTF-8 text")


def test_dates_and_strings_both_work_and_reasons_are_one_line(tmp_path):
    path = waivers_file(
        tmp_path,
        entry("swa-config", until="2030-01-02")
        + '[[waiver]]\nid = "cache-drop"\nreason = """two\n  lines"""\nuntil = "2030-01-03"\ntarget = "gpu-*"\n',
    )
    first, second = load_waivers(path, KNOWN_IDS)
    assert first.until == datetime.date(2030, 1, 2) and second.until == datetime.date(2030, 1, 3)
    assert second.reason == "two lines" and second.target == "gpu-*"
    with pytest.raises(ToolError):
        load_waivers(path, {"swa-config"})
