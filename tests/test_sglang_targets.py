"""SGLang on the targets that find their engines when they are opened: a host over ssh (real OpenSSH on
127.0.0.1) and a container image (OCI layouts, and the real registry), each holding SGLang alone or beside
vLLM, from the real wheels' trees. ``--engine auto`` checks every engine a host's Python or an image holds,
a host's over one connection; an image's editable SGLang checkout under ``/sgl-workspace`` is followed
through its ``.pth``, finder or ``direct_url.json``, never outside the image."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import jsonschema
import pytest

from dflash_doctor.engines import SGLANG
from dflash_doctor.targets.release import release_tree

from conftest import check_json, fleet_validator, make_venv, run_cli, ssh_check
from sshd import SshServer, host, trust

pytestmark = [pytest.mark.release, pytest.mark.slow]  # real wheels' trees, OpenSSH and a registry

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"
CHECK_V2 = json.loads((SCHEMAS / "check-v2.schema.json").read_text())
SGL = "0.5.11"  # the first SGLang release with DFlash
VLLM = "0.33.0"


@pytest.fixture(scope="module")
def pythons(tmp_path_factory, release) -> dict[str, Path]:
    """Interpreters on the "remote" side: venvs whose site-packages see the real release trees (a .pth)."""
    base = tmp_path_factory.mktemp("remote")
    sglang = release_tree(SGL, SGLANG)
    return {
        "sglang": make_venv(base / "venv-sglang", sglang),
        "both": make_venv(base / "venv-both", release(VLLM), sglang),
        "vllm": make_venv(base / "venv-vllm", release(VLLM)),
        "none": make_venv(base / "venv-none"),
    }


def engines_of(fleet: dict) -> list[tuple[str, str]]:
    return [(report["engine"]["name"], report["engine"]["version"]) for report in fleet["hosts"]]


def test_a_host_holding_sglang_alone_is_checked_for_sglang(server, client, pythons) -> None:
    srv = server()
    trust(client, srv)
    proc = ssh_check(client, "--host", host(srv), "--python", str(pythons["sglang"]), "--format", "json")
    report = json.loads(proc.stdout)
    jsonschema.validate(report, CHECK_V2)
    assert (report["engine"]["name"], report["engine"]["version"]) == ("sglang", SGL)
    assert report["engine"]["distribution"] == {"name": "sglang", "version": SGL}
    assert report["target"]["kind"] == "ssh" and report["target"]["host"] == host(srv)
    assert report["target"]["location"] == f"{host(srv)}:{release_tree(SGL, SGLANG)}"
    assert srv.log_count("Connection from 127.0.0.1") == 1
    # one collector run (no vLLM there, so it answered for SGLang in its place) and one behaviour child,
    # which runs SGLang's own rules' questions on the host
    assert srv.log_count("request exec") == 2
    assert {fix["decided_by"] for fix in report["fixes"] if fix["id"] == "rope-base"} == {"behaviour"}
    # layer-offset lists the registry's architectures by searches the host's collector answers
    # (every module naming the hook, then the classes that have it): the same taps as --path
    _, local = check_json("--path", str(release_tree(SGL, SGLANG)), "--engine", "sglang", "--only", "layer-offset")
    (remote,) = [fix for fix in report["fixes"] if fix["id"] == "layer-offset"]
    assert remote["decided_by"] == "behaviour" and remote["status"] == local["fixes"][0]["status"]

    def taps(fix: dict) -> set[tuple]:
        return {(o["setting"], o["part"], str(o["observed"])) for o in fix["behaviour"]["observations"]}

    assert taps(remote) == taps(local["fixes"][0]) and len(taps(remote)) > 40


def test_a_host_holding_both_engines_is_checked_for_each_over_one_connection(server, client, pythons) -> None:
    srv = server()
    trust(client, srv)
    proc = ssh_check(client, "--host", host(srv), "--python", str(pythons["both"]), "--format", "json")
    fleet = json.loads(proc.stdout)
    fleet_validator().validate(fleet)
    assert engines_of(fleet) == [("vllm", VLLM), ("sglang", SGL)]
    assert {report["target"]["host"] for report in fleet["hosts"]} == {host(srv)}
    assert srv.log_count("Connection from 127.0.0.1") == 1  # both engines' checks over the same connection
    vllm = fleet["hosts"][0]
    assert vllm["target"]["behaviour"] == f"runs on {host(srv)}"
    assert {fix["id"]: fix["status"] for fix in vllm["fixes"]}["layer-offset"] == "present"
    alone = json.loads(
        ssh_check(
            client, "--host", host(srv), "--python", str(pythons["both"]), "--engine", "vllm", "--format", "json"
        ).stdout
    )
    assert alone["fixes"] == vllm["fixes"] and alone["engine"] == vllm["engine"]
    sglang = json.loads(
        ssh_check(
            client, "--host", host(srv), "--python", str(pythons["both"]), "--engine", "sglang", "--format", "json"
        ).stdout
    )
    assert sglang["engine"] == fleet["hosts"][1]["engine"] and sglang["fixes"] == fleet["hosts"][1]["fixes"]
    table = ssh_check(client, "--host", host(srv), "--python", str(pythons["both"])).stdout
    assert f"{host(srv)} vLLM" in table and f"{host(srv)} SGLang" in table
    assert proc.returncode == fleet["exit_code"]


def test_a_host_holding_neither_engine_says_so_in_one_line(server, client, pythons) -> None:
    srv = server()
    trust(client, srv)
    proc = ssh_check(client, "--host", host(srv), "--python", str(pythons["none"]))
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"dflash-doctor: error: {host(srv)}: {pythons['none']}: neither vllm nor sglang is installed in its "
        "environment (point at the remote interpreter that has one of them with --python)"
    ]


def test_a_hosts_file_reports_a_row_per_host_and_engine(tmp_path: Path, keys, client, pythons) -> None:
    """Three hosts whose ``remote-python`` runs a different venv each (sshd's SetEnv PATH): SGLang, both, vLLM."""
    servers = {}
    for name in ("sglang", "both", "vllm"):
        bin_dir = tmp_path / f"bin-{name}"
        bin_dir.mkdir()
        (bin_dir / "remote-python").write_text(f'#!/bin/sh\nexec {pythons[name]} "$@"\n')
        (bin_dir / "remote-python").chmod(0o755)
        servers[name] = SshServer(tmp_path / name, keys["user"], settings=f"SetEnv PATH={bin_dir}:/usr/bin:/bin\n")
    try:
        trust(client, *servers.values())
        hosts = tmp_path / "hosts"
        hosts.write_text("".join(f"{host(srv)}  # {name}\n" for name, srv in servers.items()))
        proc = ssh_check(client, "--hosts-file", str(hosts), "--python", "remote-python", "--format", "json")
        fleet = json.loads(proc.stdout)
        fleet_validator().validate(fleet)
        assert [r.get("error") for r in fleet["hosts"]] == [None] * 4
        assert engines_of(fleet) == [("sglang", SGL), ("vllm", VLLM), ("sglang", SGL), ("vllm", VLLM)]
        assert [report["target"]["host"] for report in fleet["hosts"]] == [
            host(servers[name]) for name in ("sglang", "both", "both", "vllm")
        ]
        assert all(srv.log_count("Connection from 127.0.0.1") == 1 for srv in servers.values())
        table = ssh_check(client, "--hosts-file", str(hosts), "--python", "remote-python").stdout
        both = host(servers["both"])
        assert f"{both} vLLM" in table and f"{both} SGLang" in table
        assert f"{host(servers['sglang'])} SGLang" not in table  # one engine: the host's own name
    finally:
        for srv in servers.values():
            srv.stop()


# -- images ------------------------------------------------------------------------------------------------------

CHECKOUT = "sgl-workspace/sglang/python"  # where SGLang's images install it from source, editable
FINDER = f"__editable___sglang_{SGL.replace('.', '_')}_finder"
POINTERS: dict[str, dict[str, bytes]] = {
    # setuptools' PEP 660 .pth naming the project's directory, as `pip install -e` writes it for SGLang
    "pth": {f"__editable__.sglang-{SGL}.pth": f"/{CHECKOUT}\n".encode()},
    # the same, relative to the site directory (five levels below the image's root)
    "relative": {f"__editable__.sglang-{SGL}.pth": f"../../../../../{CHECKOUT}\n".encode()},
    # setuptools' editable finder: a .pth that imports it, its MAPPING naming the package's directory
    "finder": {
        f"__editable__.sglang-{SGL}.pth": f"import {FINDER}; {FINDER}.install()\n".encode(),
        f"{FINDER}.py": f"MAPPING: dict[str, str] = {{'sglang': '/{CHECKOUT}/sglang'}}\nNAMESPACES = {{}}\n".encode(),
    },
    # no .pth: only what pip recorded, the project's directory in direct_url.json
    "direct_url": {},
}


def sglang_checkout(prefix: str = CHECKOUT) -> dict[str, object]:
    """SGLang's package from its real wheel's tree, as layer entries of a source checkout at ``prefix``."""
    tree = release_tree(SGL, SGLANG)
    return {
        f"{prefix}/{path.relative_to(tree).as_posix()}": path.read_bytes()
        for path in sorted((tree / "sglang").rglob("*.py"))
    }


def editable_site(pointer: dict[str, bytes], url: str = f"file:///{CHECKOUT}") -> dict[str, object]:
    """The site directory of an editable install: the wheel's METADATA, pip's direct_url.json, the pointer files."""
    from registry import SITE

    dist_info = f"sglang-{SGL}.dist-info"
    metadata = (release_tree(SGL, SGLANG) / dist_info / "METADATA").read_bytes()
    direct_url = json.dumps({"url": url, "dir_info": {"editable": True}}).encode()
    record = "".join(f"{name},,\n" for name in (*pointer, f"{dist_info}/METADATA", f"{dist_info}/direct_url.json"))
    files = {
        f"{dist_info}/METADATA": metadata,
        f"{dist_info}/direct_url.json": direct_url,
        f"{dist_info}/RECORD": record.encode(),
    }
    return {f"{SITE}/{relpath}": data for relpath, data in {**files, **pointer}.items()}


@pytest.fixture(scope="module")
def path_report() -> dict:
    """``check --path`` of the wheel's own tree: what every image holding the same files must answer."""
    return json.loads(run_cli("check", "--path", str(release_tree(SGL, SGLANG)), "--format", "json").stdout)


def image_json(*args: str, env: dict | None = None) -> dict:
    proc = run_cli("check", *args, "--format", "json", env=env)
    assert proc.stdout, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("kind", list(POINTERS))
def test_an_editable_sglang_image_is_checked_from_its_checkout(tmp_path: Path, kind: str, path_report: dict) -> None:
    from registry import SITE, python_files, write_image

    layout = tmp_path / "oci"
    write_image(layout, "sgl", [python_files(), sglang_checkout(), editable_site(POINTERS[kind])])
    report = image_json("--image", f"oci:{layout}:sgl")
    jsonschema.validate(report, CHECK_V2)
    assert (report["engine"]["name"], report["engine"]["version"]) == ("sglang", SGL)
    assert report["engine"]["distribution"] == {"name": "sglang", "version": SGL}
    assert report["target"]["site"] == f"/{SITE}" and report["target"]["checkout"] == f"/{CHECKOUT}"
    assert report["fixes"] == path_report["fixes"]


def test_an_image_holding_both_engines_from_a_registry_is_checked_for_each(tmp_path: Path, mini_tree) -> None:
    from registry import Registry, python_files, tree_files, write_image

    layout = tmp_path / "oci"
    vllm = mini_tree(VLLM)
    write_image(layout, "both", [python_files(), tree_files(vllm), sglang_checkout(), editable_site(POINTERS["pth"])])
    write_image(layout, "sglang", [python_files(), sglang_checkout(), editable_site(POINTERS["pth"])])
    env = {"DFLASH_DOCTOR_CACHE": str(tmp_path / "cache")}
    registry = Registry(tmp_path / "registry")
    try:
        refs = {tag: registry.push(layout, tag, f"lmsysorg/sglang:{tag}") for tag in ("both", "sglang")}
        insecure = ("--insecure-registry", registry.host)
        fleet = image_json("--image", refs["both"], *insecure)
        fleet_validator().validate(fleet)
        assert engines_of(fleet) == [("vllm", VLLM), ("sglang", SGL)]
        assert [report["target"]["reference"] for report in fleet["hosts"]] == [refs["both"]] * 2
        assert (
            "checkout" not in fleet["hosts"][0]["target"] and fleet["hosts"][1]["target"]["checkout"] == f"/{CHECKOUT}"
        )
        vllm_alone = json.loads(run_cli("check", "--path", str(vllm), "--format", "json").stdout)
        assert fleet["hosts"][0]["fixes"] == vllm_alone["fixes"]
        for engine, report in zip(("vllm", "sglang"), fleet["hosts"]):
            alone = image_json("--image", refs["both"], *insecure, "--engine", engine)
            assert alone["engine"] == report["engine"] and alone["fixes"] == report["fixes"]
        table = run_cli("check", "--image", refs["both"], *insecure).stdout
        assert f"{refs['both']} vLLM" in table and f"{refs['both']} SGLang" in table
        # Two images: a row per image and engine; a second run reads no layer (what each image holds is kept).
        cached = {**os.environ, **env}
        cached.pop("DFLASH_DOCTOR_NO_CACHE", None)
        both_refs = ("--image", refs["both"], "--image", refs["sglang"], *insecure)
        first = image_json(*both_refs, env=cached)
        assert engines_of(first) == [("vllm", VLLM), ("sglang", SGL), ("sglang", SGL)]
        images = tmp_path / "cache" / "images"
        for name in ("layers", "files"):
            shutil.rmtree(images / name)
        assert image_json(*both_refs, env=cached)["hosts"] == first["hosts"]
        assert not (images / "layers").exists() and not (images / "files").exists()
    finally:
        registry.stop()


def test_a_hostile_images_pointers_are_followed_only_inside_it(tmp_path: Path) -> None:
    """Pointers to a host directory holding a marker SGLang, and one that climbs above the image's root with
    ``..`` to the checkout the image does hold: neither is followed (the marker's version is never read)."""
    from registry import python_files, write_image

    outside = tmp_path / "outside"
    (outside / "sglang").mkdir(parents=True)
    (outside / "sglang" / "__init__.py").write_text("")
    (outside / "sglang" / "_version.py").write_text("__version__ = version = '6.6.6'\n")
    hostile = {
        "host-pth": {f"__editable__.sglang-{SGL}.pth": f"{outside}\n".encode()},
        "climbing-pth": {f"__editable__.sglang-{SGL}.pth": f"../../../../../../../{CHECKOUT}\n".encode()},
        "climbing-finder": {
            f"__editable__.sglang-{SGL}.pth": f"import {FINDER}; {FINDER}.install()\n".encode(),
            f"{FINDER}.py": f"MAPPING = {{'sglang': '../../../../../../../{CHECKOUT}/sglang'}}\n".encode(),
        },
    }
    layout = tmp_path / "oci"
    checkout = sglang_checkout()
    for tag, pointer in hostile.items():
        write_image(layout, tag, [python_files(), checkout, editable_site(pointer, url=outside.as_uri())])
    write_image(layout, "climbing-url", [python_files(), checkout, editable_site({}, url=f"file:///../../{CHECKOUT}")])
    env = {**os.environ, "DFLASH_DOCTOR_CACHE": str(tmp_path / "cache")}
    env.pop("DFLASH_DOCTOR_NO_CACHE", None)
    for tag in (*hostile, "climbing-url"):
        proc = run_cli("check", "--image", f"oci:{layout}:{tag}", "--engine", "sglang", env=env)
        assert proc.returncode == 3 and "6.6.6" not in proc.stdout + proc.stderr
        assert proc.stderr.strip().splitlines() == [
            "dflash-doctor: error: no sglang package in the image (looked in every site-packages and dist-packages)"
        ], tag
    # Nothing assembled from what they point at: each image is recorded as holding no engine, and no tree is written.
    images = tmp_path / "cache" / "images"
    assert [json.loads(path.read_text()) for path in (images / "held").iterdir()] == [[]] * 4
    assert list((images / "trees").iterdir()) == []
