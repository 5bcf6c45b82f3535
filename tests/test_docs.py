"""The docs build (mkdocs --strict: broken links fail), the pages generated from
data are current, the CI recipe works as written, the JSON schemas hold for
real reports, and the small CLI affordances the guide promises."""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from conftest import check_json, run_cli
from dflash_doctor.docs import generated_pages
from dflash_doctor.rulefile import load_rules
from dflash_doctor.waivers import load_waivers

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"


# Options the docs use that land with another piece of work (ssh targets); drop a name once `check --help` has it.
def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_docs_build_strict(tmp_path):
    proc = build(REPO / "mkdocs.yml", tmp_path / "site")
    assert proc.returncode == 0, proc.stderr
    for page in (
        "index.html",
        "guide/index.html",
        "ci/index.html",
        "exit-codes/index.html",
        "fixes/layer-offset/index.html",
    ):
        assert (tmp_path / "site" / page).is_file(), page
    assert (tmp_path / "site" / "ci" / "github-actions.yml").is_file()


@pytest.mark.slow  # a build takes a second or two; the fast tier keeps the strict build above
@pytest.mark.parametrize("broken", ["[gone](no-such-page.md)", "[anchor](guide.md#no-such-section)"])
def test_a_broken_link_fails_the_build(tmp_path, broken):
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(REPO / "mkdocs.yml", tmp_path / "mkdocs.yml")
    with (tmp_path / "docs" / "guide.md").open("a") as guide:
        guide.write(f"\nSee {broken}.\n")
    proc = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert proc.returncode != 0 and "guide.md" in proc.stderr


def test_generated_pages_are_current():
    for path, text in generated_pages(REPO).items():
        assert path.read_text() == text, f"regenerate {path.relative_to(REPO)}: python -m dflash_doctor.docs"


def nav_pages() -> list[str]:
    def walk(items):
        for item in items:
            for value in item.values() if isinstance(item, dict) else [item]:
                yield from walk(value) if isinstance(value, list) else [value]

    return list(walk(yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]))


def test_every_fix_has_a_page_in_the_nav():
    pages = nav_pages()
    for rule in load_rules():
        assert f"fixes/{rule.page}" in pages, rule.page


def code_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```[a-z]*\n(.*?)^```", markdown, flags=re.S | re.M)


def test_ci_page_shows_the_shipped_files_verbatim():
    blocks = code_blocks((DOCS / "ci.md").read_text())
    for name in ("github-actions.yml", "gate.sh", "waivers.toml"):
        assert (DOCS / "ci" / name).read_text() in blocks, f"docs/ci.md must embed docs/ci/{name} as it is"


def test_example_waivers_load():
    waivers = load_waivers(DOCS / "ci" / "waivers.toml", {rule.id for rule in load_rules()})
    assert waivers and all(w.reason for w in waivers)


def test_github_actions_workflow():
    workflow = yaml.safe_load((DOCS / "ci" / "github-actions.yml").read_text())
    gate = workflow["jobs"]["gate"]
    assert gate["permissions"]["security-events"] == "write"
    assert workflow["jobs"]["deploy"]["needs"] == "gate"
    steps = {step.get("name", step.get("uses")): step for step in gate["steps"]}
    command = steps["Check the DFlash fixes"]["run"]
    assert command.startswith("dflash-doctor check ") and "--format sarif --output dflash-doctor.sarif" in command
    upload = steps["Upload to code scanning"]
    assert (
        upload["uses"].startswith("github/codeql-action/upload-sarif@")
        and upload["with"]["sarif_file"] == "dflash-doctor.sarif"
    )
    assert upload["if"].startswith("always()")
    help_text = run_cli("check", "--help", env={**os.environ, "COLUMNS": "200"}).stdout
    for option in set(re.findall(r"(--[a-z-]+)", command)):
        assert option in help_text, option


@pytest.mark.release
def test_shell_gate_step(tmp_path, mini_tree):
    gate = DOCS / "ci" / "gate.sh"
    for version, expected in (("0.20.1", 1), ("0.33.0", 0)):
        work = tmp_path / version
        work.mkdir()
        env = {**os.environ, "DFLASH_DOCTOR_TARGET": f"--path {mini_tree(version)}", "DFLASH_DOCTOR_REQUIREMENTS": ""}
        env.pop("GPU_HOST", None)
        proc = subprocess.run([str(gate)], cwd=work, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == expected, proc.stderr
        log = json.loads((work / "dflash-doctor.sarif").read_text())
        assert len(log["runs"][0]["results"]) == (3 if expected else 0)
        assert (work / "dflash-doctor.xml").read_text().startswith("<?xml")
        assert ("not deploying" in proc.stderr) == bool(expected)
    proc = subprocess.run(
        [str(gate)],
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k not in ("GPU_HOST", "DFLASH_DOCTOR_TARGET")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 3 and "set GPU_HOST or DFLASH_DOCTOR_TARGET" in proc.stderr


def schema(name: str):
    document = json.loads((REPO / "schemas" / f"{name}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(document)
    return jsonschema.Draft202012Validator(document, format_checker=jsonschema.FormatChecker())


def test_schema_files_are_valid_and_named_after_their_reports():
    for path in (REPO / "schemas").glob("*.schema.json"):
        document = json.loads(path.read_text())
        jsonschema.Draft202012Validator.check_schema(document)
        name, version = re.fullmatch(r"(.+)-(v\d+)\.schema\.json", path.name).groups()
        assert document["$id"] == f"urn:dflash-doctor:schema:{name}:{version}"


@pytest.mark.release
def test_check_reports_match_the_check_schema(tmp_path, release, mini_tree):
    validator = schema("check-v2")
    waivers = tmp_path / "w.toml"
    waivers.write_text(
        '[[waiver]]\nid = "cache-drop"\nreason = "r"\nuntil = 2099-01-01\n'
        '[[waiver]]\nid = "swa-config"\nreason = "old"\nuntil = 2020-01-01\n'
        '[[waiver]]\nid = "layer-offset"\nreason = "not needed"\n'
    )
    renamed = mini_tree("0.33.0")
    resolver = renamed / "vllm/v1/worker/gpu_model_runner.py"
    resolver.write_text(resolver.read_text().replace("def _get_eagle3_aux_layers_from_config(", "def _x("))
    reports = [
        check_json("--release", "0.19.0")[1],  # not-applicable
        check_json("--release", "0.30.0", "--waivers", str(waivers))[1],  # waived, expired, not needed
        check_json("--path", str(renamed), "--strict")[1],  # unknown
        check_json("--path", str(mini_tree("0.20.1")), "--only", "layer-offset")[1],
    ]
    statuses = {fix["status"] for report in reports for fix in report["fixes"]}
    assert statuses == {"present", "absent", "partial", "not-applicable", "unknown"}
    for report in reports:
        assert list(validator.iter_errors(report)) == []
    broken = json.loads(json.dumps(reports[1]))
    broken["fixes"][0]["status"] = "maybe"
    broken["waivers"]["expired"][0]["until"] = "someday"
    assert len(list(validator.iter_errors(broken))) == 2


def test_version_and_shell_completion():
    from dflash_doctor import __version__

    version = run_cli("--version")
    assert version.returncode == 0 and version.stdout == f"dflash-doctor {__version__}\n"
    # --show-completion detects the shell from the processes above it: started from bash, as a user does
    # (a second command keeps bash from exec-ing the last one in its own place)
    shown = subprocess.run(
        ["bash", "-c", f"{shlex.quote(sys.executable)} -m dflash_doctor --show-completion; exit $?"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert shown.returncode == 0 and "_DFLASH_DOCTOR_COMPLETE" in shown.stdout, shown.stderr
    completing = run_cli(
        env={
            **os.environ,
            "_DFLASH_DOCTOR_COMPLETE": "complete_bash",
            "COMP_WORDS": "dflash-doctor rel",
            "COMP_CWORD": "1",
        }
    )
    assert "releases" in completing.stdout.split()
