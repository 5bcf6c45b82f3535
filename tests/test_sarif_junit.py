"""SARIF (validated against the official 2.1.0 schema) and JUnit reports, and
several reports from one run."""

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import unquote, urlparse

import jsonschema
import pytest
from referencing import Registry
from referencing.exceptions import NoSuchResource

from conftest import HOSTILE_TEXT, assert_inert_xml, run_cli
from dflash_doctor.docs import rule_markdown
from dflash_doctor.rulefile import load_rules
from dflash_doctor.rules import for_engine

SARIF_SCHEMA = json.loads((Path(__file__).parent / "data" / "sarif-schema-2.1.0.json").read_text())
RESOLVER = "vllm/v1/worker/gpu_model_runner.py"


def _no_network(uri: str):
    raise NoSuchResource(ref=uri)


def sarif_errors(log: dict) -> list[str]:
    """Schema violations; every $ref of the SARIF schema is local, and any other is refused, never fetched."""
    validator = jsonschema.Draft4Validator(SARIF_SCHEMA, registry=Registry(retrieve=_no_network))
    return [f"{list(error.absolute_path)}: {error.message}" for error in validator.iter_errors(log)]


def sarif(*args: str, **kwargs) -> tuple[int, dict]:
    proc = run_cli("check", *args, "--format", "sarif", **kwargs)
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def junit(*args: str) -> tuple[int, ET.Element]:
    proc = run_cli("check", *args, "--format", "junit")
    assert proc.stdout.startswith("<?xml"), proc.stderr
    return proc.returncode, ET.fromstring(proc.stdout)


def renamed_anchor_tree(mini_tree) -> Path:
    """0.33.0 with the layer-offset resolver renamed: layer-offset is unknown, the rest present."""
    tree = mini_tree("0.33.0")
    resolver = tree / RESOLVER
    resolver.write_text(
        resolver.read_text().replace("def _get_eagle3_aux_layers_from_config(", "def _aux_layers_from_cfg(")
    )
    return tree


def root_of(log: dict) -> Path:
    return Path(unquote(urlparse(log["runs"][0]["originalUriBaseIds"]["VLLM_ROOT"]["uri"]).path))


def test_validator_rejects_a_broken_log():
    assert sarif_errors(
        {
            "version": "2.1.0",
            "runs": [{"tool": {"driver": {"name": "x"}}, "results": [{"level": "fatal", "message": {"text": "m"}}]}],
        }
    )
    assert sarif_errors({"version": "2.0.0", "runs": []})


@pytest.mark.release
def test_sarif_of_a_release_without_the_fixes(release):
    code, log = sarif("--release", "0.20.1")
    assert code == 1
    assert sarif_errors(log) == []
    run = log["runs"][0]
    rules = {rule.id: rule for rule in for_engine(load_rules(), "vllm")}
    descriptors = run["tool"]["driver"]["rules"]
    assert [d["id"] for d in descriptors] == ["cache-drop", "layer-offset", "swa-config"]
    for descriptor in descriptors:
        rule = rules[descriptor["id"]]
        assert descriptor["help"]["markdown"] == rule_markdown(rule)
        assert rule.why in descriptor["help"]["text"] and rule.remedy in descriptor["help"]["text"]
        assert descriptor["shortDescription"]["text"] == rule.title
    assert [r["ruleId"] for r in run["results"]] == ["cache-drop", "layer-offset", "swa-config"]
    assert {r["level"] for r in run["results"]} == {"error"}
    assert run["invocations"][0]["exitCode"] == 1
    root = root_of(log)
    assert (root / "vllm" / "__init__.py").is_file()
    layer = next(r for r in run["results"] if r["ruleId"] == "layer-offset")
    assert "absent" in layer["message"]["text"] and rules["layer-offset"].remedy in layer["message"]["text"]
    # The location is the line that decided (the raw read); the other evidence is related.
    [location] = layer["locations"]
    physical = location["physicalLocation"]
    assert physical["artifactLocation"] == {"uri": RESOLVER, "uriBaseId": "VLLM_ROOT"}
    line = (root / RESOLVER).read_text().splitlines()[physical["region"]["startLine"] - 1]
    assert "target_layer_ids" in line
    related = {loc["physicalLocation"]["artifactLocation"]["uri"] for loc in layer["relatedLocations"]}
    assert "vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py" in related
    for result in run["results"]:
        assert "suppressions" not in result and "fixes" not in result
        for loc in result["locations"] + result.get("relatedLocations", []):
            assert (root / loc["physicalLocation"]["artifactLocation"]["uri"]).is_file()


@pytest.mark.release
def test_sarif_has_no_results_when_every_fix_is_present_and_fingerprints_are_stable(release):
    code, log = sarif("--release", "0.33.0")
    assert code == 0 and sarif_errors(log) == []
    assert log["runs"][0]["results"] == []
    assert len(log["runs"][0]["tool"]["driver"]["rules"]) == 3
    _, first = sarif("--release", "0.30.0")
    _, again = sarif("--release", "0.30.0")
    [partial] = first["runs"][0]["results"]
    assert partial["ruleId"] == "cache-drop" and partial["properties"]["status"] == "partial"
    assert partial["partialFingerprints"] == again["runs"][0]["results"][0]["partialFingerprints"]


@pytest.mark.release
def test_sarif_unknown_is_a_warning_and_an_error_when_strict(mini_tree):
    tree = renamed_anchor_tree(mini_tree)
    code, log = sarif("--path", str(tree))
    assert code == 2 and sarif_errors(log) == []
    [result] = log["runs"][0]["results"]
    assert result["ruleId"] == "layer-offset" and result["level"] == "warning"
    assert "_get_eagle3_aux_layers_from_config not found" in result["message"]["text"]
    code, log = sarif("--path", str(tree), "--strict")
    assert code == 1 and sarif_errors(log) == []
    assert log["runs"][0]["results"][0]["level"] == "error"
    assert log["runs"][0]["properties"]["strict"] is True


@pytest.mark.release
def test_sarif_waived_fix_is_a_suppressed_result(tmp_path, mini_tree):
    tree = mini_tree("0.30.0")
    waivers = tmp_path / "waivers.toml"
    waivers.write_text('[[waiver]]\nid = "cache-drop"\nreason = "prefix caching is off"\nuntil = 2099-12-31\n')
    code, log = sarif("--path", str(tree), "--waivers", str(waivers))
    assert code == 0 and sarif_errors(log) == []
    [result] = log["runs"][0]["results"]
    assert result["suppressions"] == [
        {
            "kind": "external",
            "status": "accepted",
            "justification": "prefix caching is off",
            "properties": {"until": "2099-12-31", "target": None},
        }
    ]


@pytest.mark.release
def test_one_run_and_one_category_per_target(mini_tree):
    from dflash_doctor.check import run_check
    from dflash_doctor.reporters.sarif import SarifReporter
    from dflash_doctor.targets.path import PathTarget

    reports = [run_check(PathTarget(mini_tree(version)), load_rules()) for version in ("0.20.1", "0.33.0")]
    log = SarifReporter().log(reports)
    assert sarif_errors(log) == []
    assert [len(run["results"]) for run in log["runs"]] == [3, 0]
    ids = [run["automationDetails"]["id"] for run in log["runs"]]
    assert ids == [f"dflash-doctor/path:{report.target.location}/" for report in reports] and len(set(ids)) == 2


@pytest.mark.release
def test_junit_one_testcase_per_fix_with_verdict_and_remedy(release):
    code, root = junit("--release", "0.30.0")
    assert code == 1
    [suite] = root.findall("testsuite")
    cases = {case.get("name"): case for case in suite.findall("testcase")}
    assert sorted(cases) == ["cache-drop", "layer-offset", "swa-config"]
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert {case.get("classname") for case in cases.values()} == {f"release:{props['target.location']}"}
    failure = cases["cache-drop"].find("failure")
    assert failure.get("type") == "partial"
    assert "disable_eagle_block_drop" in failure.text and "verdict: partial" in failure.text
    assert "vllm/config/speculative.py:" in failure.text
    for name in ("layer-offset", "swa-config"):
        assert cases[name].find("failure") is None and cases[name].find("error") is None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == (
        "3",
        "1",
        "0",
        "0",
    )
    assert root.get("tests") == "3" and root.get("failures") == "1"
    assert props["vllm.version"] == "0.30.0" and props["exit_code"] == "1"


@pytest.mark.release
def test_junit_unknown_is_an_error_or_with_strict_a_failure_and_waived_is_skipped(tmp_path, mini_tree):
    tree = renamed_anchor_tree(mini_tree)
    code, root = junit("--path", str(tree))
    case = root.find(".//testcase[@name='layer-offset']")
    assert code == 2 and case.find("error").get("type") == "unknown" and case.find("failure") is None
    assert root.get("errors") == "1" and root.get("failures") == "0"
    code, root = junit("--path", str(tree), "--strict")
    case = root.find(".//testcase[@name='layer-offset']")
    assert code == 1 and case.find("failure").get("type") == "unknown" and case.find("error") is None
    waivers = tmp_path / "w.toml"
    waivers.write_text('[[waiver]]\nid = "layer-offset"\nreason = "resolver renamed in our fork; checked by hand"\n')
    code, root = junit("--path", str(tree), "--strict", "--waivers", str(waivers))
    skipped = root.find(".//testcase[@name='layer-offset']/skipped")
    assert code == 0 and "checked by hand" in skipped.get("message")
    assert root.get("skipped") == "1" and root.get("failures") == "0"


@pytest.mark.release
def test_several_reports_from_one_run(tmp_path, mini_tree):
    tree = mini_tree("0.22.0")
    out = tmp_path / "out"
    out.mkdir()
    proc = run_cli(
        "check",
        "--path",
        str(tree),
        "--output",
        f"json={out / 'r.json'}",
        "--output",
        f"sarif={out / 'r.sarif'}",
        "--output",
        f"junit={out / 'r.xml'}",
    )
    assert proc.returncode == 1, proc.stderr
    assert re.search(r"^layer-offset +PRESENT ", proc.stdout, re.M)  # the --format report (table) still on stdout
    report = json.loads((out / "r.json").read_text())
    log = json.loads((out / "r.sarif").read_text())
    suite = ET.parse(out / "r.xml").getroot()
    assert sarif_errors(log) == []
    missing = {fix["id"] for fix in report["fixes"] if fix["status"] != "present"}
    assert missing == {"cache-drop", "swa-config"}
    assert {r["ruleId"] for r in log["runs"][0]["results"]} == missing
    assert {c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None} == missing
    assert sorted(p.name for p in out.iterdir()) == ["r.json", "r.sarif", "r.xml"]  # no temporary files left

    # A bare path takes the --format report instead of standard output.
    proc = run_cli(
        "check",
        "--path",
        str(tree),
        "--format",
        "sarif",
        "--output",
        str(out / "bare.sarif"),
        "--output",
        f"json={out / 'j.json'}",
    )
    assert proc.returncode == 1 and proc.stdout == ""
    assert sarif_errors(json.loads((out / "bare.sarif").read_text())) == []
    assert json.loads((out / "j.json").read_text())["schema"] == "dflash-doctor/check/v2"


@pytest.mark.parametrize(
    "outputs, message",
    [
        (["json=a.json", "json=b.json"], "names the json report twice"),
        (["a.json", "table=b.txt"], "names the table report twice"),
        (["json=same", "sarif=same"], "the same file for two reports"),
        (["xml=r.xml"], "unknown report format 'xml'"),
        (["sarif="], "no file after sarif="),
    ],
)
def test_bad_outputs_are_refused_before_the_check(tmp_path, outputs, message):
    args = [arg for spec in outputs for arg in ("--output", str(tmp_path / spec) if "=" not in spec else spec)]
    proc = run_cli("check", "--path", "/nonexistent", *args, cwd=tmp_path)
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.release
def test_a_failed_write_leaves_the_other_reports_whole(tmp_path, mini_tree):
    tree = mini_tree("0.20.1")
    good = tmp_path / "r.json"
    good.write_text("previous")
    proc = run_cli(
        "check", "--path", str(tree), "--output", f"json={good}", "--output", f"sarif={tmp_path / 'no-dir' / 'r.sarif'}"
    )
    assert proc.returncode == 3 and proc.stderr.startswith("dflash-doctor: error: cannot write")
    # Reports are written in the order given, each whole: the JSON report is this check's, then the SARIF write fails.
    report = json.loads(good.read_text())
    assert report["schema"] == "dflash-doctor/check/v2" and report["target"] == {"kind": "path", "location": str(tree)}
    assert report["exit_code"] == 1 and {fix["status"] for fix in report["fixes"]} == {"absent"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", tree.name]  # no temporary file, no no-dir


@pytest.mark.release
def test_junit_escapes_control_and_bidi_characters_of_a_metadata_version(mini_tree):
    """A METADATA ``Version:`` with ESC, BEL, NUL, C1 controls, bidi overrides and an undecodable byte."""
    tree = mini_tree("0.22.0")
    metadata = next(tree.glob("vllm-*.dist-info")) / "METADATA"
    lines = metadata.read_bytes().split(b"\n")
    at = next(i for i, line in enumerate(lines) if line.startswith(b"Version:"))
    lines[at] = b"Version: 0.22.0" + HOSTILE_TEXT.encode("utf-8") + b"\xff\xfe"
    metadata.write_bytes(b"\n".join(lines))
    proc = run_cli("check", "--path", str(tree), "--format", "junit")
    assert proc.stdout.startswith("<?xml"), proc.stderr
    root = assert_inert_xml(proc.stdout)
    version = root.find("testsuite/properties/property[@name='vllm.version']").get("value")
    assert version.startswith("0.22.0\\x1b]0;pwned\\x07\\x1b[2J\\x00\\x9b\\u202e\\u2066\\ufffe"), version


def undecodable(mini_tree) -> str:
    """A real tree under a directory name that is not UTF-8: Python sees lone surrogates."""
    import os

    tree = mini_tree("0.22.0")
    hostile = os.fsencode(tree.parent) + b"/tree-\xff\x1b[2J\xe2\x80\xae"
    os.rename(os.fsencode(tree), hostile)
    return os.fsdecode(hostile)


@pytest.mark.release
def test_junit_escapes_an_undecodable_tree_path(mini_tree):
    """XML cannot hold lone surrogates: they are escaped."""
    proc = run_cli("check", "--path", undecodable(mini_tree), "--format", "junit")
    assert proc.stdout.startswith("<?xml"), proc.stderr
    root = assert_inert_xml(proc.stdout)
    location = root.find("testsuite/properties/property[@name='target.location']").get("value")
    assert location.endswith("/tree-\\udcff\\x1b[2J\\u202e"), location


@pytest.mark.release
def test_sarif_takes_an_undecodable_tree_path(mini_tree):
    """The same path in SARIF: its id and fingerprint are made from it, never an internal error."""
    proc = run_cli("check", "--path", undecodable(mini_tree), "--format", "sarif")
    assert proc.returncode == 1 and "internal error" not in proc.stderr, proc.stderr
    run = json.loads(proc.stdout)["runs"][0]
    assert run["automationDetails"]["id"].endswith("/tree-\udcff\x1b[2J\u202e/")
    assert all(len(result["partialFingerprints"]["dflashDoctorFix/v1"]) == 32 for result in run["results"])
