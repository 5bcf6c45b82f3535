"""The engine seam: a second engine is a descriptor, not code.

A toy engine (package ``toyengine``), described in this file alone and installed
in a temporary site-packages as a vendor build would be (its own distribution
name, a RECORD that owns the package, a version file that records the build
commit, a plugin in the engine's own entry-point group beside one in vLLM's),
goes through the collector, provenance, plugins, image layer filtering, patch
state and the reports with no change to any of them: each reads what it needs
from the descriptor the tree carries."""

from __future__ import annotations

import ast
import base64
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

from dflash_doctor import engines
from dflash_doctor.standalone import probe
from dflash_doctor.behaviour.transformers import MAX_REQUIREMENTS_BYTES, checkout_requirement
from dflash_doctor.engines import SGLANG, VLLM, Engine, PlatformKind
from dflash_doctor.images.layers import wanted
from dflash_doctor.model import CheckReport, Provenance, TargetInfo, ToolError
from dflash_doctor.patching.files import LocalFiles
from dflash_doctor.patching.state import parse_state, read_state
from dflash_doctor.provenance import find_dist_info, for_distribution, read_platform, read_provenance
from dflash_doctor.reporters.junit import JunitReporter
from dflash_doctor.reporters.sarif import SarifReporter
from dflash_doctor.reporters.table import TableReporter
from dflash_doctor.source import DirectoryTree
from dflash_doctor.targets.path import PathTarget
from dflash_doctor.images.editable import inside
from dflash_doctor.targets.probing import encode_request, parse_probe_output, probe_request, probe_source
from dflash_doctor.targets.snapshot import snapshot_target

TOY = Engine(
    name="toyengine",
    display="ToyEngine",
    package="toyengine",
    distribution="toyengine",
    version_file="toyengine/build_info.py",
    commit_names=("GIT_SHA",),
    plugin_groups=("toyengine.plugins",),
    platforms=(PlatformKind("gpu", "GPU", "gpu"), PlatformKind("npu", "NPU", r"npu\d*")),
    default_platform="gpu",
    report_key="toyengine",
    cache="toyengine",
    first_dflash="2.0.0",
    checkouts=("opt/toy-src",),
)
COMMIT = "0123456789abcdef0123456789abcdef01234567"
CHECK_SCHEMA = json.loads((Path(__file__).resolve().parent.parent / "schemas" / "check-v2.schema.json").read_text())


def record_row(root: Path, relpath: str) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256((root / relpath).read_bytes()).digest()).rstrip(b"=").decode()
    return f"{relpath},sha256={digest},{(root / relpath).stat().st_size}\n"


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A site-packages holding the toy engine as the vendor build ``toyengine-npu``, a plugin
    distribution with one entry point in the toy's group and one in vLLM's, and a decoy
    ``toyengine-*.dist-info`` that does not own the package."""
    root = tmp_path / "site-packages"
    package = root / "toyengine"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from .scheduler import Scheduler\n")
    (package / "scheduler.py").write_text("class Scheduler:\n    def schedule(self):\n        return 1\n")
    (package / "build_info.py").write_text(f'__version__ = "2.0.0"\nGIT_SHA = "{COMMIT}"\n')
    owner = root / "toyengine_npu-2.0.0+npu3.dist-info"
    owner.mkdir()
    (owner / "METADATA").write_text("Metadata-Version: 2.1\nName: toyengine-npu\nVersion: 2.0.0+npu3\n\n")
    rows = "".join(record_row(root, f"toyengine/{name}") for name in ("__init__.py", "scheduler.py", "build_info.py"))
    (owner / "RECORD").write_text(rows + f"{owner.name}/RECORD,,\n")
    decoy = root / "toyengine-1.0.0.dist-info"  # named after the package, but its RECORD lists none of it
    decoy.mkdir()
    (decoy / "METADATA").write_text("Metadata-Version: 2.1\nName: toyengine\nVersion: 1.0.0\n\n")
    (decoy / "RECORD").write_text("toyengine_extras/__init__.py,,\n")
    plugin = root / "toyplug-0.1.dist-info"
    plugin.mkdir()
    (plugin / "METADATA").write_text("Metadata-Version: 2.1\nName: toyplug\nVersion: 0.1\n\n")
    (plugin / "entry_points.txt").write_text(
        "[toyengine.plugins]\nfast = toyplug:register\n\n[vllm.general_plugins]\nother = vllmplug:register\n"
    )
    (root / "toyplug.py").write_text(
        "def register():\n    from toyengine.scheduler import Scheduler\n    Scheduler.schedule = None\n"
    )
    (root / "vllmplug.py").write_text("def register():\n    pass\n")
    return root


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> Engine:
    """The toy registered beside vLLM: the one line a new engine adds to ``engines/__init__.py``."""
    monkeypatch.setattr(engines, "ENGINES", {**engines.ENGINES, TOY.name: TOY})
    return TOY


def test_the_owner_of_the_toy_package_is_found_by_its_record(site: Path) -> None:
    assert probe.find_dist_info(str(site), TOY.package) == str(site / "toyengine_npu-2.0.0+npu3.dist-info")
    assert find_dist_info(site, TOY.package) == site / "toyengine_npu-2.0.0+npu3.dist-info"


def test_provenance_reads_the_toy_engines_version_file_distribution_and_platform(site: Path) -> None:
    tree = DirectoryTree(site, find_dist_info(site, TOY.package), TOY)
    provenance = read_provenance(tree)
    assert (provenance.version, provenance.commit, provenance.commit_source) == ("2.0.0+npu3", COMMIT, "build_info.py")
    assert provenance.distribution is not None and provenance.distribution.name == "toyengine-npu"
    assert provenance.vendor == "toyengine-npu"  # not the toy's own distribution
    assert provenance.modified_files == ()  # the RECORD of the owner, compared with what was read
    assert (provenance.platform.name, provenance.platform.told_by) == ("npu", "distribution")
    assert read_platform(tree) == provenance.platform
    assert provenance.engine is TOY


def test_the_toy_engines_own_distribution_is_no_vendor_build_and_its_default_platform_holds(site: Path) -> None:
    owner = site / "toyengine_npu-2.0.0+npu3.dist-info"
    (owner / "METADATA").write_text("Metadata-Version: 2.1\nName: ToyEngine\nVersion: 2.0.0\n\n")
    provenance = read_provenance(DirectoryTree(site, owner, TOY))
    assert provenance.vendor is None
    assert (provenance.platform.name, provenance.platform.told_by) == ("gpu", "default")


def test_only_the_toy_engines_plugin_groups_are_read(site: Path) -> None:
    plugins = DirectoryTree(site, None, TOY).plugins()
    assert [(p.distribution, p.group, p.name, p.target) for p in plugins] == [
        ("toyplug", "toyengine.plugins", "fast", "toyplug:register")
    ]
    assert plugins[0].touches({"Scheduler", "schedule"}) == ["Scheduler", "schedule"]
    vllm_plugins = DirectoryTree(site, None, VLLM).plugins()
    assert [(p.group, p.name) for p in vllm_plugins] == [("vllm.general_plugins", "other")]


def test_the_collector_finds_and_reads_the_package_its_request_names(site: Path, registered: Engine) -> None:
    request = probe_request((), registered)
    assert request["package"] == "toyengine" and "toyengine/build_info.py" in request["files"]
    request["anchors"] = [
        ["toyengine/__init__.py", "Scheduler"]
    ]  # not defined there: the collector searches the package
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-S", "-", "collect", encode_request(request)],
        check=False,
        input=probe_source(),
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    answer = parse_probe_output(proc.stdout, "the collector")
    assert answer.get("error") is None, answer.get("error")
    assert (answer["package"], answer["root"]) == ("toyengine", str(site))
    assert answer["dist_info"] == str(site / "toyengine_npu-2.0.0+npu3.dist-info")
    assert answer["search"] == {"Scheduler": ["toyengine/scheduler.py"]}
    resolved = snapshot_target(answer, "probe", "the collector")
    assert resolved.tree.engine is registered
    provenance = read_provenance(resolved.tree)
    assert (provenance.version, provenance.commit, provenance.vendor) == ("2.0.0+npu3", COMMIT, "toyengine-npu")


def test_the_staged_collector_sends_the_engines_version_file_first_and_holds_back_the_rest(site: Path) -> None:
    """A report reads the version file even when the results cache answers: it comes in the first part."""
    request = probe_request((), TOY)
    request["files"] = ["toyengine/__init__.py", "toyengine/scheduler.py", TOY.version_file]
    proc = subprocess.run(
        [sys.executable, "-S", "-", "stage", encode_request(request)],
        check=False,
        input=probe_source(),
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
    )
    first = parse_probe_output(proc.stdout, "the collector")
    assert set(first["files"]) == {TOY.version_file} and "GIT_SHA" in first["files"][TOY.version_file]
    assert set(first["sha256"]) == set(request["files"])


def test_a_collector_answer_for_an_unknown_package_is_a_clear_error() -> None:
    with pytest.raises(ToolError, match="no engine has the package 'toyengine'"):
        snapshot_target({"package": "toyengine", "files": {}, "root": "/x"}, "probe", "probe file x")


def test_a_path_target_of_the_toy_engine_resolves_its_tree(site: Path) -> None:
    tree = PathTarget(site / "toyengine", engine=TOY).resolve().tree
    assert isinstance(tree, DirectoryTree)
    assert (tree.root, tree.engine, tree.package, tree.dist_info) == (
        site,
        TOY,
        "toyengine",
        site / "toyengine_npu-2.0.0+npu3.dist-info",
    )
    with pytest.raises(ToolError, match="no toyengine package under"):
        PathTarget(site / "toyengine_npu-2.0.0+npu3.dist-info", engine=TOY).resolve()


def test_image_layers_keep_a_registered_engines_files(registered: Engine) -> None:
    site = "usr/lib/python3.12/site-packages"
    assert wanted(f"{site}/toyengine/scheduler.py") == "source"
    assert wanted(f"{site}/toyengine_npu-2.0.0.dist-info/RECORD") == "source"
    assert wanted(f"{site}/toyengine_extras/other.py") is None
    # installed editable: its package under the engine's checkouts, and what leads a site directory there
    assert wanted("opt/toy-src/repo/python/toyengine/scheduler.py") == "source"
    assert wanted("opt/toy-src/repo/README.md") is None and wanted("opt/elsewhere/toyengine/scheduler.py") is None
    assert wanted(f"{site}/__editable__.toyengine-2.0.0.pth") == wanted(f"{site}/__editable___toyengine_finder.py")
    assert wanted(f"{site}/__editable__.toyengine-2.0.0.pth") == "source"
    assert [
        inside("usr/lib/site", entry) for entry in ("/opt/x", "../../../opt/x", "../../../../opt/x", "./a/../b")
    ] == [
        "opt/x",
        "opt/x",
        None,  # above the image's root: refused, never clamped
        "usr/lib/site/b",
    ]


def test_patch_state_and_writes_stay_inside_the_toy_package(site: Path) -> None:
    entry = {"sha256_before": "0" * 64, "sha256_after": "1" * 64, "patches": []}
    text = json.dumps({"schema": "dflash-doctor/patch-state/v1", "files": {"toyengine/scheduler.py": entry}})
    assert list(parse_state(text, TOY.package)) == ["toyengine/scheduler.py"]
    with pytest.raises(ValueError, match="not a .py file under vllm/"):
        parse_state(text, VLLM.package)
    (site / "outside.py").write_text("x = 1\n")
    (site / "toyengine" / "link.py").symlink_to(site / "outside.py")
    files = LocalFiles(site, TOY.package)
    assert read_state(files) == {}
    assert files.real("toyengine/scheduler.py") == "toyengine/scheduler.py"
    with pytest.raises(ToolError, match="outside the tree's toyengine/"):
        files.real("toyengine/link.py")


def test_reports_name_the_toy_engine_where_they_named_vllm(site: Path) -> None:
    provenance = read_provenance(DirectoryTree(site, find_dist_info(site, TOY.package), TOY))
    report = CheckReport(TargetInfo("path", str(site), directory=True), provenance, (), "0")
    data = report.to_json()
    assert "vllm" not in data and "toyengine" not in data
    assert data["engine"]["name"] == "toyengine"
    assert data["engine"]["distribution"] == {"name": "toyengine-npu", "version": "2.0.0+npu3"}
    header = " ".join(TableReporter().render(report, False).split())
    assert "(a distribution of ToyEngine)" in header and "built for NPU" in header
    sarif = json.loads(SarifReporter().render(report, False))
    assert sarif["runs"][0]["properties"]["toyengine"]["commit"] == COMMIT
    assert f'name="toyengine.commit" value="{COMMIT}"' in JunitReporter().render(report, False)


def test_a_vllm_report_names_its_engine_and_validates() -> None:
    report = CheckReport(TargetInfo("path", "/srv/site"), Provenance("0.33.0", None, None, None), (), "0")
    data = report.to_json()
    assert data["engine"]["name"] == "vllm" and data["engine"]["version"] == "0.33.0" and "vllm" not in data
    jsonschema.validate(data, CHECK_SCHEMA)


def test_remedies_of_a_vendor_build_name_its_engine(site: Path) -> None:
    from dflash_doctor.model import ABSENT, FixResult

    provenance = read_provenance(DirectoryTree(site, find_dist_info(site, TOY.package), TOY))
    fix = FixResult("a-fix", ABSENT, "A fix", (), (), "Upgrade.", "")
    (remedied,) = for_distribution((fix,), provenance)
    assert remedied.remedy.startswith(
        "This is toyengine-npu 2.0.0+npu3, a vendor build or fork of ToyEngine, not ToyEngine itself:"
    )
    assert remedied.remedy.endswith("In ToyEngine itself: Upgrade.")


def test_an_unknown_engine_name_is_refused_naming_the_known_ones() -> None:
    assert engines.named("vllm") is VLLM
    with pytest.raises(LookupError, match=r"no engine called 'toyengine' \(known: sglang, vllm\)"):
        engines.named("toyengine")


def test_no_engine_neutral_module_names_an_engine() -> None:
    """Only an engine's own files name it: its descriptor (``engines/``) and its own passes
    (``draft/<engine>.py``). Everything else reads the descriptor the tree carries, or the
    default engine (``engines.DEFAULT_ENGINE``) where nothing names one."""
    package = Path(engines.__file__).resolve().parent.parent
    own = {f"draft/{name}.py" for name in engines.ENGINES}
    descriptors = {name.upper() for name in engines.ENGINES}
    names = {*engines.ENGINES, *(f"{engine.package}/" for engine in engines.ENGINES.values())}
    named: list[str] = []
    for path in sorted(package.rglob("*.py")):
        relpath = path.relative_to(package).as_posix()
        if relpath.startswith("engines/") or relpath in own:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and {alias.name for alias in node.names} & descriptors:
                named.append(f"{relpath}:{node.lineno} imports an engine's descriptor")
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.lower() in names:
                named.append(f"{relpath}:{node.lineno} names {node.value!r}")
    assert len(own) == 2 and {"vllm", "sglang"} <= set(engines.ENGINES)  # the scan knows what it looks for
    assert named == []


def test_a_checkouts_transformers_pin_is_read_where_its_engine_states_it(tmp_path: Path) -> None:
    """vLLM's clone states it in requirements/common.txt, SGLang's in python/pyproject.toml (the tree
    root: python/); each engine reads its own file only. A hostile pyproject is no pin, in bounded time."""
    clone = tmp_path / "clone"
    (clone / "requirements").mkdir(parents=True)
    (clone / "requirements" / "common.txt").write_text("requests\ntransformers >= 5.1, < 6  # our own\n")
    (clone / "pyproject.toml").write_text('[project]\nname = "x"\ndependencies = ["requests", "transformers==5.3.0"]\n')
    assert checkout_requirement(DirectoryTree(clone, None, VLLM)) == "transformers>=5.1,<6"
    assert checkout_requirement(DirectoryTree(clone, None, SGLANG)) == "transformers==5.3.0"
    (clone / "requirements" / "common.txt").unlink()
    assert checkout_requirement(DirectoryTree(clone, None, VLLM)) is None  # SGLang's file is not vLLM's
    hostile = {
        "nested arrays": "[project]\ndependencies = " + "[" * 30_000 + "]" * 30_000 + "\n",
        "not TOML": "[project\ndependencies = ['transformers==5.3.0']\n",
        "project not a table": 'project = 3\ndependencies = ["transformers==5.3.0"]\n',
        "dependencies a string": '[project]\ndependencies = "transformers==5.3.0"\n',
        "no strings": "[project]\ndependencies = [1, {a = 1}, [2]]\n",
        "a URL": '[project]\ndependencies = ["transformers @ https://example.invalid/t.whl"]\n',
        "extras only": '[project.optional-dependencies]\nsrt = ["transformers==5.3.0"]\n',
        "too large": '[project]\ndependencies = ["transformers==5.3.0"]\n' + "#" * MAX_REQUIREMENTS_BYTES + "\n",
    }
    for name, text in hostile.items():
        (clone / "pyproject.toml").write_text(text)
        start = time.perf_counter()
        assert checkout_requirement(DirectoryTree(clone, None, SGLANG)) is None, name
        assert time.perf_counter() - start < 10, name  # a bound, not a speed figure: about 0.1 s here
