"""SGLang through the engine seam, on its real wheels from the package index.

Its descriptor is checked against the wheels' own code (version file, plugin
groups, the first release with DFlash); ``check --release X --engine sglang``
fetches SGLang's wheel and, with no rule describing SGLang's code yet, answers
every fix unknown with the reason instead of judging it by vLLM's rules; a
tree holding both engines is checked for each; the report's ``engine`` block
validates against check/v2, and the v1 reports the tool wrote are still read."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import jsonschema
import pytest

from dflash_doctor.engines import SGLANG, VLLM
from dflash_doctor.model import ABSENT, NOT_APPLICABLE, PRESENT, UNKNOWN, ToolError, engine_json, exit_code_for
from dflash_doctor.provenance import find_dist_info, read_provenance
from dflash_doctor.releases import _row_path, release_row, rules_digest
from dflash_doctor.rulefile import load_rule, load_rules
from dflash_doctor.rules import for_engine
from dflash_doctor.source import DirectoryTree
from dflash_doctor.targets import releases_dir
from dflash_doctor.targets.detect import path_targets
from dflash_doctor.targets.probing import parse_probe_output
from dflash_doctor.targets.release import release_tree

from conftest import assert_error, fleet_validator, run_cli
from registry import SITE, python_files, tree_files, write_image

pytestmark = pytest.mark.release  # real SGLang wheels, fetched once into the user cache

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"
CHECK_V2, CHECK_V1 = (json.loads((SCHEMAS / f"{name}.schema.json").read_text()) for name in ("check-v2", "check-v1"))
LAST_WITHOUT, FIRST_WITH = "0.5.10.post1", "0.5.11"
NEWEST_CHECKED = "0.5.23"  # the newest release in the user cache the tests fetch


def string_constants(path: Path) -> set[str]:
    return {
        node.value
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }


def test_sglangs_wheel_is_fetched_into_its_own_cache_and_keeps_only_its_python() -> None:
    tree = release_tree(FIRST_WITH, SGLANG)
    assert tree == releases_dir(SGLANG) / FIRST_WITH and releases_dir(SGLANG) != releases_dir(VLLM)
    kept = [path.relative_to(tree).as_posix() for path in tree.rglob("*") if path.is_file()]
    assert kept and all(
        name.endswith(".py")
        and name.startswith("sglang/")
        or name.startswith("sglang-0.5.11.dist-info/")
        or name == ".complete"
        for name in kept
    )
    assert (tree / SGLANG.version_file).is_file()


def test_sglangs_descriptor_is_what_its_wheels_say() -> None:
    without, first = release_tree(LAST_WITHOUT, SGLANG), release_tree(FIRST_WITH, SGLANG)
    # DFlash arrived in 0.5.11: the drafter model and the speculative algorithm.
    assert not (without / "sglang/srt/models/dflash.py").exists() and (first / "sglang/srt/models/dflash.py").is_file()
    assert "DFLASH" not in (without / "sglang/srt/speculative/spec_info.py").read_text()
    assert "DFLASH" in (first / "sglang/srt/speculative/spec_info.py").read_text()
    assert SGLANG.first_dflash == FIRST_WITH
    # The entry-point groups its plugin loader reads at start.
    assert set(SGLANG.plugin_groups) <= string_constants(first / "sglang/srt/plugins/__init__.py")
    # The version file names the commit (None in the wheels), read by provenance without running it.
    provenance = read_provenance(DirectoryTree(first, find_dist_info(first, SGLANG.package), SGLANG))
    assert (provenance.version, provenance.commit, provenance.engine) == (FIRST_WITH, None, SGLANG)
    assert (
        provenance.distribution is not None and provenance.distribution.name == "sglang" and provenance.vendor is None
    )
    assert (provenance.platform.name, provenance.platform.told_by) == ("cuda", "default")
    assert set(SGLANG.commit_names) <= {
        target.id
        for node in ast.parse((first / SGLANG.version_file).read_text()).body
        if isinstance(node, ast.Assign)
        for target in ast.walk(node)
        if isinstance(target, ast.Name)
    }


@pytest.mark.parametrize(
    ("version", "judged"),
    [
        (LAST_WITHOUT, dict.fromkeys(("cache-drop", "layer-offset", "rope-base", "swa-config"), NOT_APPLICABLE)),
        (FIRST_WITH, {"cache-drop": PRESENT, "layer-offset": PRESENT, "rope-base": ABSENT, "swa-config": ABSENT}),
    ],
)
def test_check_release_of_sglang_judges_by_sglangs_rules_never_vllms(version: str, judged: dict[str, str]) -> None:
    """SGLang's own rules judge their fixes; a fix with only vLLM's rule is unknown with the reason."""
    proc = run_cli("check", "--release", version, "--engine", "sglang", "--format", "json")
    assert proc.returncode == 1, proc.stderr  # not-applicable and absent both fail
    report = json.loads(proc.stdout)
    jsonschema.validate(report, CHECK_V2)
    assert report["schema"] == "dflash-doctor/check/v2"
    assert report["engine"]["name"] == "sglang" and report["engine"]["version"] == version
    assert report["engine"]["distribution"] == {"name": "sglang", "version": version}
    assert report["target"]["location"] == str(releases_dir(SGLANG) / version)
    rules = for_engine(load_rules(), "sglang")
    assert [fix["id"] for fix in report["fixes"]] == [rule.id for rule in rules]
    for fix, rule in zip(report["fixes"], rules):
        if rule.engine == "sglang":
            assert fix["status"] == judged[rule.id] and fix["prs"] == list(rule.prs)
            continue
        assert fix["status"] == UNKNOWN and fix["prs"] == [] and fix["evidence"] == []
        assert fix["reason"] == f"no rule judges this fix in SGLang yet (the rule {fix['id']} describes vLLM's code)"
        assert "SGLang" in fix["remedy"]
    sarif = json.loads(run_cli("check", "--release", version, "--engine", "sglang", "--format", "sarif").stdout)
    uris = {
        location["physicalLocation"]["artifactLocation"]["uri"]
        for result in sarif["runs"][0]["results"]
        for location in result["locations"]
    }
    assert uris and all(uri.startswith("sglang/") for uri in uris)  # never a vLLM file the tree does not hold
    assert sarif["runs"][0]["properties"]["sglang"]["version"] == version


def test_a_release_is_vllms_unless_engine_says() -> None:
    """A version alone does not say whose release it is: 0.5.11 is SGLang's, and no vLLM release on the index."""
    assert_error(run_cli("check", "--release", FIRST_WITH), "vLLM release 0.5.11 is not on the package index")


@pytest.fixture
def both(tmp_path: Path, mini_tree: Callable[..., Path]) -> Path:
    """A site-packages holding vLLM 0.33.0 (the files its rules read) and SGLang 0.5.11, both from real wheels."""
    site = mini_tree("0.33.0", "site")
    sglang = release_tree(FIRST_WITH, SGLANG)
    (site / "sglang").symlink_to(sglang / "sglang", target_is_directory=True)
    shutil.copytree(sglang / f"sglang-{FIRST_WITH}.dist-info", site / f"sglang-{FIRST_WITH}.dist-info")
    return site


def test_a_tree_holding_both_engines_is_checked_for_each(both: Path) -> None:
    assert [engine for engine, _ in path_targets(both, (VLLM, SGLANG))] == [VLLM, SGLANG]
    assert [engine for engine, _ in path_targets(both / "sglang", (VLLM, SGLANG))] == [SGLANG]
    proc = run_cli("check", "--path", str(both), "--format", "json")
    fleet = json.loads(proc.stdout)
    fleet_validator().validate(fleet)
    assert fleet["schema"] == "dflash-doctor/fleet/v2"
    vllm, sglang = fleet["hosts"]
    assert (vllm["engine"]["name"], vllm["engine"]["version"]) == ("vllm", "0.33.0")
    assert (sglang["engine"]["name"], sglang["engine"]["version"]) == ("sglang", FIRST_WITH)
    statuses = {fix["id"]: fix["status"] for fix in sglang["fixes"]}
    assert statuses == {"cache-drop": PRESENT, "layer-offset": PRESENT, "rope-base": ABSENT, "swa-config": ABSENT}
    alone = json.loads(run_cli("check", "--path", str(both), "--engine", "vllm", "--format", "json").stdout)
    assert alone["fixes"] == vllm["fixes"] and UNKNOWN not in {fix["status"] for fix in alone["fixes"]}
    assert proc.returncode == fleet["exit_code"] == exit_code_for([vllm["exit_code"], sglang["exit_code"]])
    table = run_cli("check", "--path", str(both)).stdout
    assert "local vLLM" in table and "local SGLang" in table


def test_the_results_cache_keeps_the_engines_of_one_tree_apart(both: Path, tmp_path: Path) -> None:
    env = {**os.environ, "DFLASH_DOCTOR_CACHE": str(tmp_path / "cache")}
    env.pop("DFLASH_DOCTOR_NO_CACHE", None)
    runs = [
        json.loads(run_cli("check", "--path", str(both), "--engine", engine, "--format", "json", env=env).stdout)
        for engine in ("vllm", "sglang", "vllm", "sglang")
    ]
    assert len(list((tmp_path / "cache" / "results").rglob("*.json"))) == 2  # one entry per engine
    assert runs[0]["fixes"] == runs[2]["fixes"] and runs[1]["fixes"] == runs[3]["fixes"]
    prs = [{fix["id"]: fix["prs"] for fix in run["fixes"]}["layer-offset"] for run in runs]
    assert prs[2] != prs[3] and 38096 in prs[3]  # each engine's answer, by its own rule, from its own entry
    assert (runs[2]["engine"]["name"], runs[3]["engine"]["name"]) == ("vllm", "sglang")


def v1_of(report: dict[str, Any]) -> dict[str, Any]:
    """A check report as the tool wrote it before v2: the engine block, nameless, under ``vllm``."""
    old = {key: value for key, value in report.items() if key != "engine"}
    old["vllm"] = {key: value for key, value in report["engine"].items() if key != "name"}
    old["schema"] = "dflash-doctor/check/v1"
    return old


def test_the_tool_reads_its_v1_and_v2_reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mini_tree) -> None:
    tree = mini_tree("0.33.0")
    report = json.loads(run_cli("check", "--path", str(tree), "--format", "json").stdout)
    jsonschema.validate(report, CHECK_V2)
    old = v1_of(report)
    jsonschema.validate(old, CHECK_V1)  # the shape v1 readers and the v1 schema know
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(old, CHECK_V2)
    assert engine_json(old) == engine_json(report) == report["engine"]
    # The release matrix answers a release from the report it cached, whichever version wrote it.
    monkeypatch.setenv("DFLASH_DOCTOR_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("DFLASH_DOCTOR_NO_CACHE")
    rules = load_rules()
    digest = rules_digest(rules)
    for written, release in (
        (old, "0.33.0"),
        (dict(report, engine=dict(report["engine"], commit="abc1234")), "0.34.0"),
    ):
        path = _row_path(release, digest, VLLM)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(written))
        row = release_row(release, rules, digest)
        assert row.cached and not row.error and row.commit == engine_json(written)["commit"]
        assert row.statuses == tuple((fix["id"], fix["status"]) for fix in report["fixes"])


def test_rules_are_vllms_unless_they_say_and_name_a_known_engine(tmp_path: Path) -> None:
    shipped = load_rules()[0]
    assert {rule.engine for rule in load_rules()} == {"vllm", "sglang"}
    assert all(
        rule.engine == "vllm" for rule in load_rules() if "engine =" not in rule.source.read_text(encoding="utf-8")
    )
    text = shipped.source.read_text(encoding="utf-8")
    for engine in ("sglang", "vllm"):
        (tmp_path / f"{engine}.toml").write_text(f'engine = "{engine}"\n' + text)
        assert load_rule(tmp_path / f"{engine}.toml").engine == engine
    (tmp_path / "tgi.toml").write_text('engine = "tgi"\n' + text)
    with pytest.raises(ToolError, match=r"tgi.toml: engine must be one of sglang, vllm \(not 'tgi'\)"):
        load_rule(tmp_path / "tgi.toml")


def test_a_fix_only_another_engine_has_a_rule_of_is_not_in_a_vllm_report(tmp_path: Path, mini_tree) -> None:
    """A vLLM tree's report names vLLM's fixes; an SGLang tree's names those and its own (test below)."""
    tree = mini_tree("0.33.0")
    rules = tmp_path / "rules"
    rules.mkdir()
    shipped = load_rules()[0]
    (rules / "sglang-twin.toml").write_text(
        'engine = "sglang"\n'
        + shipped.source.read_text(encoding="utf-8").replace(f'id = "{shipped.id}"', 'id = "sglang-twin"', 1)
    )
    proc = run_cli(
        "check", "--path", str(tree), "--format", "json", env={**os.environ, "DFLASH_DOCTOR_RULES": str(rules)}
    )
    fixes = {fix["id"]: fix for fix in json.loads(proc.stdout)["fixes"]}
    assert "sglang-twin" not in fixes and list(fixes) == [rule.id for rule in for_engine(load_rules(), "vllm")]
    assert fixes[shipped.id]["status"] != UNKNOWN  # the same code, judged by the vLLM rule


def sglang_files(version: str = FIRST_WITH) -> dict[str, bytes]:
    """SGLang's package markers, version file, DFlash drafter and dist-info from its real
    wheel, as image layer entries."""
    tree = release_tree(version, SGLANG)
    kept = ["sglang/__init__.py", "sglang/version.py", SGLANG.version_file, "sglang/srt/models/dflash.py"]
    files = {relpath: (tree / relpath).read_bytes() for relpath in kept}
    files |= {
        path.relative_to(tree).as_posix(): path.read_bytes()
        for path in (tree / f"sglang-{version}.dist-info").iterdir()
        if path.is_file()
    }
    return {f"{SITE}/{relpath}": data for relpath, data in files.items()}


def test_an_image_is_checked_for_the_engine_it_holds(tmp_path: Path, mini_tree) -> None:
    layout = tmp_path / "oci"
    write_image(layout, "sglang", [python_files(), sglang_files()])
    write_image(layout, "both", [python_files(), tree_files(mini_tree("0.33.0")), sglang_files()])
    write_image(layout, "none", [python_files()])
    env = dict(os.environ)  # the user cache: the transformers the vLLM tree's behaviour needs are there
    report = json.loads(run_cli("check", "--image", f"oci:{layout}:sglang", "--format", "json", env=env).stdout)
    jsonschema.validate(report, CHECK_V2)
    assert (report["engine"]["name"], report["engine"]["version"], report["exit_code"]) == ("sglang", FIRST_WITH, 2)
    assert report["target"]["site"] == "/" + SITE
    again = json.loads(run_cli("check", "--image", f"oci:{layout}:sglang", "--format", "json", env=env).stdout)
    assert again["engine"] == report["engine"] and again["fixes"] == report["fixes"]
    auto, *both = [
        json.loads(run_cli("check", "--image", f"oci:{layout}:both", *engine, "--format", "json", env=env).stdout)
        for engine in ((), ("--engine", "sglang"), ("--engine", "vllm"))
    ]
    fleet_validator().validate(auto)  # an image holding both engines: a report for each
    assert [report["engine"] for report in auto["hosts"]] == [both[1]["engine"], both[0]["engine"]]
    assert [report["engine"]["name"] for report in both] == ["sglang", "vllm"]
    assert auto["hosts"][0]["fixes"] == both[1]["fixes"] and UNKNOWN not in {fix["status"] for fix in both[1]["fixes"]}
    assert_error(run_cli("check", "--image", f"oci:{layout}:none", env=env), "no vllm or sglang package in the image")
    assert_error(
        run_cli("check", "--image", f"oci:{layout}:none", "--engine", "sglang", env=env),
        "no sglang package in the image",
    )


def test_an_editable_sglang_beside_an_installed_vllm_is_found_through_the_interpreter(
    tmp_path: Path, mini_tree
) -> None:
    """As SGLang's images install it: from a source checkout, editable (a PEP 660 .pth and
    direct_url.json's dir_info)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True, timeout=120)
    python = tmp_path / "venv" / "bin" / "python"
    purelib = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    checkout = tmp_path / "sgl-workspace" / "sglang" / "python"
    for entry, data in sglang_files().items():
        relpath = entry.removeprefix(f"{SITE}/")
        if relpath.startswith("sglang/"):
            (checkout / relpath).parent.mkdir(parents=True, exist_ok=True)
            (checkout / relpath).write_bytes(data)
    (purelib / f"__editable__.sglang-{FIRST_WITH}.pth").write_text(f"{checkout}\n")
    owner = purelib / f"sglang-{FIRST_WITH}.dist-info"
    owner.mkdir()
    (owner / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {FIRST_WITH}\n\n")
    (owner / "direct_url.json").write_text(json.dumps({"url": checkout.as_uri(), "dir_info": {"editable": True}}))
    (owner / "RECORD").write_text(
        f"{owner.name}/METADATA,,\n__editable__.sglang-{FIRST_WITH}.pth,,\n{owner.name}/RECORD,,\n"
    )
    for path in mini_tree("0.33.0").iterdir():  # vLLM installed as a wheel would be
        (shutil.copytree if path.is_dir() else shutil.copy2)(path, purelib / path.name)
    fleet = json.loads(run_cli("check", "--python", str(python), "--format", "json").stdout)
    fleet_validator().validate(fleet)
    vllm, sglang = fleet["hosts"]
    assert (vllm["engine"]["name"], vllm["target"]["location"]) == ("vllm", str(purelib))
    assert (sglang["engine"]["name"], sglang["target"]["location"]) == ("sglang", str(checkout))
    assert sglang["engine"]["version"] == FIRST_WITH and sglang["engine"]["distribution"] == {
        "name": "sglang",
        "version": FIRST_WITH,
    }
    alone = json.loads(run_cli("check", "--python", str(python), "--engine", "sglang", "--format", "json").stdout)
    assert alone["engine"] == sglang["engine"] and alone["target"] == sglang["target"]
    # The same install, collected by the standalone script for SGLang and judged here.
    script = tmp_path / "probe.py"
    script.write_text(run_cli("probe-script", "--engine", "sglang").stdout)
    answer = tmp_path / "answers" / "gpu1.probe"
    answer.parent.mkdir()
    answer.write_text(
        subprocess.run([str(python), str(script)], check=True, capture_output=True, text=True, timeout=120).stdout
    )
    collected = parse_probe_output(answer.read_text(), "the script")
    assert not [relpath for relpath in [*collected["files"], *collected["search"]] if relpath.startswith("vllm/")]
    assert SGLANG.version_file in collected["files"]  # and (above) nothing of vLLM's is asked of SGLang
    probed = json.loads(run_cli("check", "--from-probe", str(answer), "--format", "json").stdout)
    assert [fix["id"] for fix in probed["fixes"]] == [fix["id"] for fix in sglang["fixes"]]
    # no behaviour runs on a probe file (the code's forms alone answer), where the interpreter's tree ran it
    assert {fix["decided_by"] for fix in probed["fixes"]} == {"structure"}
    assert [fix["decided_by"] for fix in sglang["fixes"] if fix["id"] == "rope-base"] == ["behaviour"]
    same = ("name", "version", "commit", "distribution", "platform")
    assert {key: probed["engine"][key] for key in same} == {key: sglang["engine"][key] for key in same}


def test_a_fix_has_a_rule_per_engine_and_each_tree_is_judged_by_its_own(both: Path, tmp_path: Path) -> None:
    fleet = json.loads(run_cli("check", "--path", str(both), "--format", "json").stdout)
    fleet_validator().validate(fleet)
    vllm, sglang = fleet["hosts"]
    for report, engine in ((vllm, "vllm"), (sglang, "sglang")):  # each fix named once, by its engine's rule
        rules = for_engine(load_rules(), engine)
        assert [fix["id"] for fix in report["fixes"]] == [rule.id for rule in rules]
        assert [fix["prs"] for fix in report["fixes"]] == [list(rule.prs + rule.unmerged_prs) for rule in rules]
    by_id = {fix["id"]: fix for fix in sglang["fixes"]}
    assert by_id["layer-offset"]["decided_by"] == "behaviour"  # SGLang's own rule ran its own question
    rules = tmp_path / "rules"
    rules.mkdir()
    shipped = next(rule for rule in load_rules() if rule.id == "layer-offset" and rule.engine == "sglang")
    (rules / "again.toml").write_text(shipped.source.read_text(encoding="utf-8"))
    proc = run_cli("check", "--path", str(both), env={**os.environ, "DFLASH_DOCTOR_RULES": str(rules)})
    assert_error(proc, "a rule with the id 'layer-offset' is already loaded for sglang")


def test_the_release_matrix_of_sglang_judges_what_its_rules_cover_and_says_whose() -> None:
    for version in (LAST_WITHOUT, FIRST_WITH):
        release_tree(version, SGLANG)  # --offline answers from the cache
    proc = run_cli(
        "releases", "--engine", "sglang", "--offline", "--from", LAST_WITHOUT, "--to", FIRST_WITH, "--format", "json"
    )
    matrix = json.loads(proc.stdout)
    jsonschema.validate(matrix, json.loads((SCHEMAS / "releases-v1.schema.json").read_text()))
    assert proc.returncode == 0 and matrix["engine"] == "sglang"
    assert [row["release"] for row in matrix["releases"]] == [LAST_WITHOUT, FIRST_WITH]
    assert matrix["unjudged"] == []  # every fix has an SGLang rule, and both releases are judged
    assert [row["fixes"] for row in matrix["releases"]] == [
        dict.fromkeys(("cache-drop", "layer-offset", "rope-base", "swa-config"), NOT_APPLICABLE),
        {"cache-drop": PRESENT, "layer-offset": PRESENT, "rope-base": ABSENT, "swa-config": ABSENT},
    ]
    assert "SGLang" in matrix["summary"]["text"] and "vLLM" not in matrix["summary"]["text"]
    table = run_cli("releases", "--engine", "sglang", "--offline", "--from", LAST_WITHOUT, "--to", FIRST_WITH).stdout
    assert "0.5.10.post1" in table and "no SGLang release checked has them all" in table


def test_a_source_that_starts_with_a_byte_order_mark_parses_as_python_reads_it() -> None:
    tree = release_tree(FIRST_WITH, SGLANG)
    relpath = "sglang/srt/models/qwen2_classification.py"
    assert (tree / relpath).read_bytes().startswith(b"\xef\xbb\xbf")
    compile((tree / relpath).read_bytes(), relpath, "exec")  # Python itself accepts it
    parsed = DirectoryTree(tree, None, SGLANG).parsed(relpath)
    assert parsed is not None and parsed.symbols("Qwen2ForSequenceClassification")


def sglang_applies_rule(directory: Path) -> Path:
    """A shipped rule's fix, said of SGLang's code (its own id), applying where ``ServerArgs`` names "DFLASH" (0.5.11
    does, 0.5.10.post1 does not; later releases moved it): its verdict before 0.5.11 comes from the applies logic."""
    shipped = next(rule for rule in load_rules() if rule.id == "cache-drop")
    text = shipped.source.read_text(encoding="utf-8").replace('id = "cache-drop"', 'id = "sglang-applies"', 1)
    start, end = text.index("[applies]"), text.index("[behaviour]")
    applies = (
        '[applies]\nfile = "sglang/srt/server_args.py"\nsymbol = "ServerArgs"\nliteral = "DFLASH"\n'
        'remedy = "Install an SGLang release with DFlash (0.5.11 or later)."\n\n'
    )
    directory.mkdir()
    (directory / "sglang-applies.toml").write_text('engine = "sglang"\n' + text[:start] + applies + text[end:])
    return directory


def test_the_release_matrix_of_sglang_lists_every_release_on_the_index_from_the_last_without_dflash(
    tmp_path: Path,
) -> None:
    from packaging.version import Version

    listed = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "sglang", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    versions = next(line for line in listed.splitlines() if line.startswith("Available versions:")).split(":", 1)[1]
    expected = sorted(
        (v.strip() for v in versions.split(",") if not Version(v.strip()).is_prerelease),
        key=Version,
    )
    expected = [v for v in expected if Version(v) >= Version(LAST_WITHOUT)]
    env = {**os.environ, "DFLASH_DOCTOR_RULES": str(sglang_applies_rule(tmp_path / "rules"))}
    proc = run_cli("releases", "--engine", "sglang", "--format", "json", env=env)
    assert proc.returncode == 0, proc.stderr
    matrix = json.loads(proc.stdout)
    jsonschema.validate(matrix, json.loads((SCHEMAS / "releases-v1.schema.json").read_text()))
    assert matrix["engine"] == "sglang" and matrix["releases_from"] == "package index"
    assert [row["release"] for row in matrix["releases"]] == expected and expected[0] == LAST_WITHOUT
    ids = [rule.id for rule in for_engine(load_rules(), "sglang")] + ["sglang-applies"]
    assert [fix["id"] for fix in matrix["fixes"]] == ids
    assert all(list(row["fixes"]) == ids for row in matrix["releases"])  # a column per fix, in every row
    applies = {row["release"]: row["fixes"]["sglang-applies"] for row in matrix["releases"]}
    assert applies[LAST_WITHOUT] == "not-applicable" and applies[FIRST_WITH] != "not-applicable"


def test_a_clone_of_sglang_is_judged_with_the_transformers_its_pyproject_pins(tmp_path: Path) -> None:
    """A clone of SGLang's repository with nothing installed, as a CI building from source has it:
    ``--path`` at the clone finds the package in python/sglang/, and the drafter's config is built
    by the transformers python/pyproject.toml pins, as the wheel's Requires-Dist has it."""
    release = release_tree(NEWEST_CHECKED, SGLANG)
    clone = tmp_path / "sglang"
    shutil.copytree(release / "sglang", clone / "python" / "sglang")
    dist_info = find_dist_info(release, "sglang")
    assert dist_info is not None
    (pin,) = [
        line.split(":", 1)[1].strip()
        for line in (dist_info / "METADATA").read_text().splitlines()
        if line.startswith("Requires-Dist: transformers")
    ]
    only = ("--only", "rope-base", "--only", "swa-config", "--engine", "sglang")

    def fixes(path: Path) -> dict[str, dict[str, Any]]:
        report = json.loads(run_cli("check", "--path", str(path), *only, "--format", "json").stdout)
        assert report["target"]["location"] == str((clone / "python").resolve())
        return {fix["id"]: fix for fix in report["fixes"]}

    bare = fixes(clone)
    assert {fix["status"] for fix in bare.values()} == {UNKNOWN}
    assert "nor a source checkout's pyproject.toml states a transformers" in bare["rope-base"]["reason"]
    (clone / "python" / "pyproject.toml").write_text(
        f'[project]\nname = "sglang"\nversion = "{NEWEST_CHECKED}"\ndependencies = ["requests", "{pin}", "uvicorn"]\n'
    )
    pinned = fixes(clone)
    released = json.loads(run_cli("check", "--release", NEWEST_CHECKED, *only, "--format", "json").stdout)
    assert {fix["id"]: fix["status"] for fix in released["fixes"]} == {
        name: fix["status"] for name, fix in pinned.items()
    }
    assert {fix["decided_by"] for fix in pinned.values()} == {"behaviour"}
    assert UNKNOWN not in {fix["status"] for fix in pinned.values()}
