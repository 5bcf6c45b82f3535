"""check --image against a real registry (Debian's docker-registry) on 127.0.0.1,
OCI layouts and docker archives: images written here from real vLLM wheel trees,
pushed with skopeo. Verdicts must equal check --path on the same files."""

from __future__ import annotations

import functools
import gzip
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from conftest import HOSTILE_TEXT, assert_inert_xml, fleet_validator, run_cli
from registry import (
    OCI_LAYER,
    SITE,
    WHITEOUT,
    Link,
    Random,
    Registry,
    TokenServer,
    make_cert,
    put_blob,
    python_files,
    tag_image,
    tree_files,
    write_image,
    write_index,
)

SCHEDULER = "vllm/v1/core/sched/scheduler.py"
DFLASH_MODEL = "vllm/model_executor/models/qwen3_dflash.py"
VENV_SITE = "opt/venv/lib/python3.12/site-packages"
BASE = {"usr/share/base.bin": Random(2 << 20), **python_files()}


CHECK_SCHEMA = json.loads((Path(__file__).resolve().parent.parent / "schemas" / "check-v2.schema.json").read_text())


def image_check(*args: str, env: dict | None = None) -> tuple[int, dict | None, str]:
    proc = run_cli("check", *args, "--format", "json", env=env)
    report = json.loads(proc.stdout) if proc.stdout else None
    if report is not None:
        jsonschema.Draft202012Validator(CHECK_SCHEMA).validate(report)
    return proc.returncode, report, proc.stderr


@functools.cache
def path_fixes(tree: Path) -> list:
    proc = run_cli("check", "--path", str(tree), "--format", "json")
    return json.loads(proc.stdout)["fixes"]


def one_line_error(code: int, stderr: str, fragment: str) -> None:
    assert code == 3, stderr
    assert stderr.startswith("dflash-doctor: error: ") and stderr.count("\n") == 1, stderr
    assert "Traceback" not in stderr and fragment in stderr, stderr


@pytest.fixture(scope="module")
def trees(tmp_path_factory, release):
    """Small real trees (the files the rules read, dist-info) and their variants as --path would see them."""
    from conftest import TREE_FILES, rule_files

    base = tmp_path_factory.mktemp("trees")

    def mini(version: str) -> Path:
        source, dest = release(version), base / version
        for relpath in TREE_FILES + rule_files():
            if (source / relpath).is_file():
                (dest / relpath).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source / relpath, dest / relpath)
        for dist_info in source.glob("vllm-*.dist-info"):
            shutil.copytree(dist_info, dest / dist_info.name)
        return dest

    old, new = mini("0.22.0"), mini("0.33.0")
    layered = base / "layered"  # 0.22.0, scheduler.py from 0.33.0, the DFlash model deleted
    shutil.copytree(old, layered)
    shutil.copy2(new / SCHEDULER, layered / SCHEDULER)
    (layered / DFLASH_MODEL).unlink()
    return {"0.22.0": old, "0.33.0": new, "layered": layered}


@pytest.fixture(scope="module")
def layout(tmp_path_factory, trees):
    """One OCI layout holding every test image, by tag."""
    out = tmp_path_factory.mktemp("layout") / "oci"
    old, new = tree_files(trees["0.22.0"]), tree_files(trees["0.33.0"])
    digests = {}
    digests["plain"] = write_image(out, "plain", [BASE, old], labels={"org.opencontainers.image.revision": "feedface"})[
        "digest"
    ]
    digests["layered"] = write_image(
        out,
        "layered",
        [
            BASE,
            old,
            {f"{SITE}/{SCHEDULER}": (trees["0.33.0"] / SCHEDULER).read_bytes()},
            {f"{SITE}/{DFLASH_MODEL}": WHITEOUT},
        ],
    )["digest"]
    # An earlier vllm hidden by an opaque directory, then 0.33.0 written over it in the same layer.
    digests["opaque"] = write_image(
        out,
        "opaque",
        [BASE, old, {f"{SITE}/vllm/.wh..wh..opq": b"", **{k: v for k, v in new.items() if "/vllm/" in k}}],
    )["digest"]
    venv = {
        "opt/venv/pyvenv.cfg": b"home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.12.3\n",
        "opt/venv/bin/python3": Link("/usr/bin/python3"),
        "opt/venv/bin/python": Link("python3"),
        **tree_files(trees["0.33.0"], VENV_SITE),
    }
    digests["two-pythons"] = write_image(
        out, "two-pythons", [BASE, old, venv], env={"PATH": "/opt/venv/bin:/usr/local/bin:/usr/bin:/bin"}
    )["digest"]
    digests["system-python"] = write_image(
        out, "system-python", [BASE, old, venv], env={"PATH": "/usr/local/bin:/usr/bin:/bin"}
    )["digest"]
    amd = write_image(out, None, [BASE, new])
    arm = write_image(out, None, [BASE, old], platform=("linux", "arm64"))
    digests["multi"] = write_index(out, "multi", [amd, arm])["digest"]
    digests["multi-amd64"], digests["multi-arm64"] = amd["digest"], arm["digest"]
    return out, digests


@pytest.fixture(scope="module")
def registry(tmp_path_factory, layout):
    directory, _ = layout
    reg = Registry(tmp_path_factory.mktemp("registry"))
    for tag in ("plain", "layered", "opaque", "two-pythons", "system-python"):
        reg.push(directory, tag, f"team/vllm:{tag}")
    reg.push(directory, "multi", "team/vllm:multi", all_platforms=True)
    yield reg
    reg.stop()


def ref(reg: Registry, tag: str) -> tuple[str, ...]:
    return ("--image", f"{reg.host}/team/vllm:{tag}", "--insecure-registry", reg.host)


@pytest.mark.slow
@pytest.mark.release
def test_registry_image_verdicts_equal_check_path_on_the_same_files(registry, layout, trees):
    code, report, stderr = image_check(*ref(registry, "plain"))
    assert report["fixes"] == path_fixes(trees["0.22.0"]), stderr
    assert stderr == ""  # no progress bar on a pipe
    assert code == 1 and report["engine"]["version"] == "0.22.0"
    target = report["target"]
    assert target["kind"] == "image" and target["reference"] == f"{registry.host}/team/vllm:plain"
    assert target["digest"] == layout[1]["plain"] and target["platform"] == "linux/amd64"
    assert target["site"] == f"/{SITE}" and target["python"] == "/usr/bin/python3"
    assert target["org.opencontainers.image.revision"] == "feedface"


@pytest.mark.slow
@pytest.mark.release
def test_whiteout_overwrite_and_opaque_directory_from_later_layers(registry, trees):
    _, layered, _ = image_check(*ref(registry, "layered"))
    assert layered["fixes"] == path_fixes(trees["layered"])
    assert layered["fixes"] != path_fixes(trees["0.22.0"])  # the later layers did change what is checked
    _, opaque, _ = image_check(*ref(registry, "opaque"))
    assert opaque["fixes"] == path_fixes(trees["0.33.0"])
    assert opaque["engine"]["version"] == "0.22.0"  # the dist-info beside vllm/ was not under the opaque dir


@pytest.mark.slow
@pytest.mark.release
def test_two_pythons_the_one_first_on_path_wins(registry, trees):
    _, venv, _ = image_check(*ref(registry, "two-pythons"))
    assert venv["target"]["site"] == f"/{VENV_SITE}" and venv["target"]["python"] == "/opt/venv/bin/python3"
    assert venv["fixes"] == path_fixes(trees["0.33.0"]) and venv["engine"]["version"] == "0.33.0"
    _, system, _ = image_check(*ref(registry, "system-python"))
    assert system["target"]["site"] == f"/{SITE}" and system["target"]["python"] == "/usr/bin/python3"
    assert system["fixes"] == path_fixes(trees["0.22.0"])


@pytest.mark.slow
@pytest.mark.release
def test_multi_platform_index_picks_the_platform(registry, layout, trees):
    _, amd, _ = image_check(*ref(registry, "multi"))
    assert amd["target"]["digest"] == layout[1]["multi-amd64"] and amd["fixes"] == path_fixes(trees["0.33.0"])
    _, arm, _ = image_check(*ref(registry, "multi"), "--platform", "linux/arm64")
    assert arm["target"]["digest"] == layout[1]["multi-arm64"] and arm["target"]["platform"] == "linux/arm64"
    assert arm["fixes"] == path_fixes(trees["0.22.0"])
    code, _, stderr = image_check(*ref(registry, "multi"), "--platform", "linux/s390x")
    one_line_error(code, stderr, "no image for platform linux/s390x (the index offers: linux/amd64, linux/arm64)")


@pytest.mark.release
def test_oci_layout_and_docker_archive_on_disk(layout, trees, tmp_path):
    directory, digests = layout
    code, report, stderr = image_check("--image", f"oci:{directory}:layered")
    assert report["fixes"] == path_fixes(trees["layered"]), stderr
    assert report["target"]["digest"] == digests["layered"]
    archive = tmp_path / "image.tar"
    subprocess.run(
        ["skopeo", "copy", "--quiet", f"oci:{directory}:layered", f"docker-archive:{archive}:team/vllm:layered"],
        check=True,
        capture_output=True,
        timeout=300,
    )
    code, report, stderr = image_check("--image", f"docker-archive:{archive}")
    assert report["fixes"] == path_fixes(trees["layered"]), stderr
    config_id = json.loads(
        subprocess.run(["tar", "-xOf", str(archive), "manifest.json"], capture_output=True, check=True).stdout
    )[0]["Config"]
    assert report["target"]["digest"] == "sha256:" + config_id.removesuffix(".json")  # the image ID
    code, _, stderr = image_check("--image", f"oci:{directory}:nosuchtag")
    one_line_error(code, stderr, "no image tagged 'nosuchtag'")


@pytest.mark.slow
@pytest.mark.release
def test_tampered_blob_is_refused(registry, layout, tmp_path):
    directory, _ = layout
    marker = {"etc/unique-marker": b"tampered-image-only\n"}
    write_image(directory, "tamper", [BASE, tree_files(Path(__file__).parent / "data" / "drafters", SITE) | marker])
    registry.push(directory, "tamper", "team/vllm:tamper")
    manifest = json.loads((directory / "blobs/sha256" / _tag_digest(directory, "tamper")).read_text())
    blob = registry.blob_file(manifest["layers"][1]["digest"])
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one byte changed
    blob.write_bytes(bytes(data))
    code, _, stderr = image_check(*ref(registry, "tamper"))
    one_line_error(code, stderr, "sha256 mismatch")


def _tag_digest(directory: Path, tag: str) -> str:
    index = json.loads((directory / "index.json").read_text())
    entry = next(m for m in index["manifests"] if m["annotations"]["org.opencontainers.image.ref.name"] == tag)
    return entry["digest"].split(":", 1)[1]


@pytest.mark.slow
@pytest.mark.release
def test_missing_tag_bad_reference_and_no_tls_on_a_plain_registry(registry):
    code, _, stderr = image_check(*ref(registry, "nosuchtag"))
    one_line_error(code, stderr, "not found in")
    code, _, stderr = image_check("--image", "Not A Reference!")
    one_line_error(code, stderr, "not an image reference")
    code, _, stderr = image_check("--image", f"{registry.host}/team/vllm:plain")  # HTTPS by default
    one_line_error(code, stderr, f"--insecure-registry {registry.host}")


@pytest.mark.slow
@pytest.mark.release
def test_second_image_sharing_the_base_downloads_only_its_new_layers(registry, layout, tmp_path):
    """With the layer cache on, the shared base layer is then made unreadable in the
    registry: the second image still checks, so its base came from the cache."""
    directory, _ = layout
    env = {**os.environ, "DFLASH_DOCTOR_CACHE": str(tmp_path / "cache")}
    env.pop("DFLASH_DOCTOR_NO_CACHE")
    code, first, stderr = image_check(*ref(registry, "plain"), env=env)
    assert first is not None, stderr
    manifest = json.loads((directory / "blobs/sha256" / _tag_digest(directory, "layered")).read_text())
    base_blob = registry.blob_file(manifest["layers"][0]["digest"])
    saved = base_blob.read_bytes()
    base_blob.write_bytes(b"\0" * len(saved))  # any download of it now fails verification
    try:
        code, second, stderr = image_check(*ref(registry, "layered"), env=env)
        assert second is not None and second["target"]["digest"] == layout[1]["layered"], stderr
        env_nocache = {**env, "DFLASH_DOCTOR_NO_CACHE": "1"}
        code, _, stderr = image_check(*ref(registry, "layered"), env=env_nocache)
        one_line_error(code, stderr, "sha256 mismatch")  # the control: downloading the base fails
    finally:
        base_blob.write_bytes(saved)
    assert len(list((tmp_path / "cache/images/layers").glob("*.json"))) == 4  # base, 0.22.0, overwrite, whiteout


@pytest.mark.release
def test_hostile_layer_writes_nothing_outside_the_tree(tmp_path, trees):
    """Members that climb out, absolute names and symlinks pointing away are never followed."""
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.py"
    secret.write_text("SECRET = 1\n")
    hostile = {
        f"../../../../../../{outside}/escape.py".replace("//", "/"): b"ESCAPED = 1\n",
        f"{outside}/absolute.py": b"ABSOLUTE = 1\n",
        f"{SITE}/vllm/evil.py": Link(str(secret)),
        f"{SITE}/vllm/up.py": Link("../../../../../../../../../../" + str(secret)),
        f"{SITE}/vllm/linkdir": Link(str(outside)),
        f"{SITE}/vllm/linkdir/through.py": b"THROUGH = 1\n",
    }
    directory = tmp_path / "oci"
    write_image(directory, "hostile", [BASE, tree_files(trees["0.22.0"]), hostile])
    env = {**os.environ, "DFLASH_DOCTOR_CACHE": str(tmp_path / "cache")}
    env.pop("DFLASH_DOCTOR_NO_CACHE")
    code, report, stderr = image_check("--image", f"oci:{directory}:hostile", env=env)
    assert report["fixes"] == path_fixes(trees["0.22.0"]), stderr
    assert sorted(p.name for p in outside.iterdir()) == ["secret.py"]
    assert secret.read_text() == "SECRET = 1\n"
    tree = next((tmp_path / "cache/images/trees").iterdir()) / "root"
    assert not [p for p in tree.rglob("*") if p.is_symlink()]
    assert not (tree / "vllm/evil.py").exists() and not (tree / "vllm/up.py").exists()
    assert (tree / "vllm/linkdir/through.py").read_text() == "THROUGH = 1\n"  # a plain file under a plain directory


def test_registry_that_never_answers_hits_the_deadline():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        accepted = []
        threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
        host = f"127.0.0.1:{server.getsockname()[1]}"
        start = time.monotonic()
        code, _, stderr = image_check(
            "--image", f"{host}/team/vllm:v1", "--insecure-registry", host, "--registry-timeout", "1"
        )
        assert time.monotonic() - start < 30
        assert accepted  # it connected, then waited
        one_line_error(code, stderr, "did not answer within 1 s")


@pytest.mark.slow
@pytest.mark.release
def test_several_images_make_a_report_each_and_reports_name_the_image(registry, tmp_path):
    good, bad = f"{registry.host}/team/vllm:plain", f"{registry.host}/team/vllm:nosuchtag"
    proc = run_cli("check", "--image", good, "--image", bad, "--insecure-registry", registry.host, "--format", "json")
    fleet = json.loads(proc.stdout)
    assert list(fleet_validator().iter_errors(fleet)) == []
    assert proc.returncode == 3 and len(fleet["hosts"]) == 2
    assert fleet["hosts"][0]["target"]["reference"] == good and "not found" in fleet["hosts"][1]["error"]
    junit, sarif = tmp_path / "junit.xml", tmp_path / "report.sarif"
    proc = run_cli(
        "check",
        "--image",
        good,
        "--insecure-registry",
        registry.host,
        "--format",
        "junit",
        "--output",
        str(junit),
        "--output",
        f"sarif={sarif}",
    )
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite.get("name") == f"dflash-doctor check image {good}", proc.stderr
    run = json.loads(sarif.read_text())["runs"][0]
    digest = fleet["hosts"][0]["target"]["digest"]
    assert (
        run["automationDetails"]["id"] == f"dflash-doctor/image:{good}@{digest}/"
    )  # the image, by reference and digest
    assert run["originalUriBaseIds"]["VLLM_ROOT"] == {"description": {"text": f"image {good}"}}


@pytest.mark.slow
@pytest.mark.release
def test_patch_refuses_an_image_and_ancestry_reads_the_revision_label(registry, tmp_path, trees):
    proc = run_cli("patch", "--image", f"{registry.host}/team/vllm:plain", "--yes")
    one_line_error(proc.returncode, proc.stderr, "docs/images.md")
    from gitrepos import build_vllm_like

    history = build_vllm_like(tmp_path / "vllm")
    no_commit = tmp_path / "tree"  # a tree that records no build commit of its own
    shutil.copytree(trees["0.22.0"], no_commit)
    (no_commit / "vllm/_version.py").write_text("__version__ = '0.22.0'\n")
    directory = tmp_path / "oci"
    write_image(
        directory,
        "labelled",
        [BASE, tree_files(no_commit)],
        labels={"org.opencontainers.image.revision": history.c["main"]},
    )
    write_image(directory, "unlabelled", [BASE, tree_files(no_commit)])
    proc = run_cli("ancestry", "--repo", str(history.path), "--image", f"oci:{directory}:labelled", "--format", "json")
    report = json.loads(proc.stdout)
    assert (
        report["commit"] == history.c["main"] and report["commit_source"] == "org.opencontainers.image.revision label"
    ), proc.stderr
    assert {e["pr"]: e["status"] for e in report["prs"]}[40727] == "contained"
    proc = run_cli("ancestry", "--repo", str(history.path), "--image", f"oci:{directory}:unlabelled")
    one_line_error(proc.returncode, proc.stderr, "records no build commit")


def retagged_with_layer(directory: Path, tag: str, layer: dict) -> None:
    """An image ``tag`` in the layout whose only layer is ``layer`` (a descriptor of a blob already there)."""
    descriptor = write_image(directory, None, [{"etc/placeholder": b""}])
    manifest = json.loads((directory / "blobs/sha256" / descriptor["digest"].split(":", 1)[1]).read_text())
    manifest["layers"] = [layer]
    tag_image(directory, {**descriptor, **put_blob(directory, json.dumps(manifest).encode())}, tag)


def test_zstd_layers_and_huge_tar_headers_are_refused(tmp_path):
    directory = tmp_path / "oci"
    plain = write_image(directory, None, [BASE])
    layer = json.loads((directory / "blobs/sha256" / plain["digest"].split(":", 1)[1]).read_text())["layers"][0]
    retagged_with_layer(directory, "zstd", {**layer, "mediaType": "application/vnd.oci.image.layer.v1.tar+zstd"})
    code, _, stderr = image_check("--image", f"oci:{directory}:zstd")
    one_line_error(code, stderr, "zstd-compressed layers are not supported")
    # A pax header tarfile would read whole into memory: refused past 1 MB.
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(f"{SITE}/vllm/__init__.py")
        info.pax_headers = {"comment": "x" * (2 << 20)}
        tar.addfile(info, io.BytesIO(b""))
    retagged_with_layer(
        directory, "pax", {"mediaType": OCI_LAYER, **put_blob(directory, gzip.compress(raw.getvalue()))}
    )
    code, _, stderr = image_check("--image", f"oci:{directory}:pax")
    one_line_error(code, stderr, "extended tar header")


def docker_config(directory: Path, entries: dict) -> dict:
    """An environment whose docker config holds ``entries`` (never the user's own)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(entries))
    return {**os.environ, "DOCKER_CONFIG": str(directory)}


def basic_auth(user: str, password: str) -> dict:
    import base64

    return {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    return make_cert(tmp_path_factory.mktemp("tls"))


@pytest.mark.slow
@pytest.mark.release
def test_basic_auth_over_tls_with_credentials_from_docker_config(tmp_path, layout, trees, tls):
    directory, digests = layout
    reg = Registry(tmp_path / "registry", users={"alice": "s3cret"}, tls=tls)
    try:
        reg.push(directory, "plain", "team/vllm:plain", creds="alice:s3cret")
        image = ("--image", f"{reg.host}/team/vllm:plain")
        good = docker_config(tmp_path / "good", {"auths": {f"https://{reg.host}": basic_auth("alice", "s3cret")}})
        code, report, stderr = image_check(*image, env={**good, "SSL_CERT_FILE": str(tls[0])})
        assert report["fixes"] == path_fixes(trees["0.22.0"]) and report["target"]["digest"] == digests["plain"], stderr
        code, _, stderr = image_check(*image, env=good)  # the test CA is not trusted by default
        one_line_error(code, stderr, "certificate verify failed")
        none = docker_config(tmp_path / "none", {})
        code, _, stderr = image_check(*image, env={**none, "SSL_CERT_FILE": str(tls[0])})
        one_line_error(code, stderr, "needs credentials")
        wrong = docker_config(tmp_path / "wrong", {"auths": {reg.host: basic_auth("alice", "guess")}})
        code, _, stderr = image_check(*image, env={**wrong, "SSL_CERT_FILE": str(tls[0])})
        one_line_error(code, stderr, "the credentials were refused")
        # A credential helper, as `credHelpers` names it: docker-credential-NAME get, server on stdin.
        helpers = tmp_path / "bin"
        helpers.mkdir()
        seen = tmp_path / "helper-asked"
        helper = helpers / "docker-credential-testhelper"
        helper.write_text(f'#!/bin/sh\ncat > {seen}\necho \'{{"Username": "alice", "Secret": "s3cret"}}\'\n')
        helper.chmod(0o755)
        helped = docker_config(tmp_path / "helped", {"credHelpers": {reg.host: "testhelper"}})
        env = {**helped, "SSL_CERT_FILE": str(tls[0]), "PATH": f"{helpers}:{os.environ['PATH']}"}
        code, report, stderr = image_check(*image, env=env)
        assert report is not None and report["fixes"] == path_fixes(trees["0.22.0"]), stderr
        assert seen.read_text().strip() == reg.host
    finally:
        reg.stop()


@pytest.mark.slow
@pytest.mark.release
def test_bearer_token_challenge_flow(tmp_path, layout, trees, tls):
    directory, _ = layout
    tokens = TokenServer(*tls, users={"bob": "hunter2"})
    reg = Registry(tmp_path / "registry", tls=tls, auth=tokens.registry_auth(tls[0]))
    try:
        reg.push(directory, "plain", "team/vllm:plain", creds="bob:hunter2")
        image = ("--image", f"{reg.host}/team/vllm:plain")
        env = {
            **docker_config(tmp_path / "good", {"auths": {reg.host: basic_auth("bob", "hunter2")}}),
            "SSL_CERT_FILE": str(tls[0]),
        }
        tokens.requests.clear()
        code, report, stderr = image_check(*image, env=env)
        assert report["fixes"] == path_fixes(trees["0.22.0"]), stderr
        assert tokens.requests and all(
            "scope=repository%3Ateam%2Fvllm%3Apull" in r and "service=test-registry" in r for r in tokens.requests
        )
        anonymous = {**docker_config(tmp_path / "none", {}), "SSL_CERT_FILE": str(tls[0])}
        code, _, stderr = image_check(*image, env=anonymous)
        one_line_error(code, stderr, "needs credentials")
        wrong = {
            **docker_config(tmp_path / "wrong", {"auths": {reg.host: basic_auth("bob", "guess")}}),
            "SSL_CERT_FILE": str(tls[0]),
        }
        code, _, stderr = image_check(*image, env=wrong)
        one_line_error(code, stderr, "the credentials were refused")
    finally:
        reg.stop()
        tokens.stop()


@pytest.mark.release
def test_a_progress_bar_per_layer_on_a_terminal(layout, tmp_path):
    """stderr on a pseudo-terminal: rich draws a bar named after each layer's digest."""
    import pty

    directory, digests = layout
    manifest = json.loads((directory / "blobs/sha256" / digests["plain"].split(":", 1)[1]).read_text())
    leader, follower = pty.openpty()
    # The report goes to a file: a pipe nobody reads while the terminal is drained would fill and stall the check.
    report = (tmp_path / "report.json").open("w+b")
    proc = subprocess.Popen(
        [sys.executable, "-m", "dflash_doctor", "check", "--image", f"oci:{directory}:plain", "--format", "json"],
        stdout=report,
        stderr=follower,
    )
    os.close(follower)
    drawn = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        drawn += chunk
    proc.wait(timeout=300)
    os.close(leader)
    report.seek(0)
    assert json.loads(report.read())["target"]["kind"] == "image"  # the report itself still goes to stdout
    for layer in manifest["layers"]:
        assert layer["digest"][7:19].encode() in drawn, drawn[-2000:]


@pytest.mark.parametrize(
    "given, expected",
    [
        ("vllm/vllm-openai:v0.20.1", ("docker.io", "vllm/vllm-openai", "v0.20.1", None)),
        ("python", ("docker.io", "library/python", "latest", None)),
        ("index.docker.io/library/ubuntu", ("docker.io", "library/ubuntu", "latest", None)),
        ("localhost:5000/team/vllm:rc1", ("localhost:5000", "team/vllm", "rc1", None)),
        ("nvcr.io/nvidia/vllm:25.09-py3", ("nvcr.io", "nvidia/vllm", "25.09-py3", None)),
        (
            f"registry.example.com:5000/team/vllm@sha256:{'ab' * 32}",
            ("registry.example.com:5000", "team/vllm", None, f"sha256:{'ab' * 32}"),
        ),
    ],
)
def test_references_follow_dockers_grammar_and_docker_hub_defaults(given, expected):
    from dflash_doctor.images.registry import RegistrySource, parse_reference

    ref = parse_reference(given)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == expected
    source = RegistrySource(given)
    assert source.api_host == ("registry-1.docker.io" if expected[0] == "docker.io" else expected[0])
    assert source.scheme == "https"


@pytest.mark.release
def test_junit_escapes_control_and_bidi_characters_of_an_image_label(tmp_path, trees):

    directory = tmp_path / "oci"
    write_image(
        directory,
        "labelled",
        [BASE, tree_files(trees["0.22.0"])],
        labels={"org.opencontainers.image.version": "v1" + HOSTILE_TEXT + "\n\x85fake line"},
    )
    proc = run_cli("check", "--image", f"oci:{directory}:labelled", "--format", "junit")
    assert proc.stdout.startswith("<?xml"), proc.stderr
    root = assert_inert_xml(proc.stdout)
    label = root.find("testsuite/properties/property[@name='target.org.opencontainers.image.version']").get("value")
    assert label == "v1\\x1b]0;pwned\\x07\\x1b[2J\\x00\\x9b\\u202e\\u2066\\ufffe\\n\\x85fake line", label


@pytest.mark.release
def test_a_plugin_installed_in_the_image_is_named_as_one_that_may_change_the_answer(trees, tmp_path):
    """vLLM loads the general plugins every distribution in the image declares; the image's
    entry points are kept (not the plugin's code), so each plugin is named in the reasons
    rather than left unseen."""
    files = {
        **tree_files(trees["0.33.0"]),
        f"{SITE}/old_sched-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: old_sched\nVersion: 1.0\n",
        f"{SITE}/old_sched-1.0.dist-info/entry_points.txt": b"[vllm.general_plugins]\nold_sched = old_sched:register\n",
        f"{SITE}/old_sched.py": b"def register():\n    pass\n",
    }
    out = tmp_path / "oci"
    write_image(out, "plugged", [BASE, files])
    code, report, stderr = image_check("--image", f"oci:{out}:plugged")
    assert report is not None, stderr
    reasons = [fix["reason"] or "" for fix in report["fixes"]]
    assert all(
        "plugin old_sched (vllm.general_plugins of old_sched) could not be read and may change this answer" in reason
        for reason in reasons
    ), reasons
