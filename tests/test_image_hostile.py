"""Hostile images (issue 20), built as a hostile registry or archive would build them:
raw tar headers written here, each run as the real CLI in a child process whose peak
RSS is measured (tests/measure.py). Every read is bounded before it happens (extended
headers, the members of an archive or of an image's layers, the paths kept), and the
merge of the layers costs the path parts they hold, whatever their whiteouts."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import time
from pathlib import Path

import pytest

from conftest import assert_error
from dflash_doctor.images.layers import LayerIndex
from dflash_doctor.images.merge import merge
from measure import run_measured
from registry import OCI_LAYER, put_blob, tag_image

MIB = 1024 * 1024
SITE = "usr/local/lib/python3.12/dist-packages"


def header(name: bytes, size: int = 0, kind: bytes = b"0", linkname: bytes = b"") -> bytes:
    """A ustar header block (tarfile's own writer is ten times slower for 10^5 members)."""
    block = bytearray(512)
    block[0 : len(name)] = name
    block[100:108] = b"0000644\0"
    block[108:116] = block[116:124] = b"0000000\0"
    block[124:136] = b"%011o\0" % size
    block[136:148] = b"00000000000\0"
    block[148:156] = b"        "
    block[156:157] = kind
    block[157 : 157 + len(linkname)] = linkname
    block[257:265] = b"ustar\x0000"
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def tar_of(names) -> bytes:
    """Empty regular files, then the end of the archive."""
    return b"".join(header(name) for name in names) + b"\0" * 1024


def raw_image(directory: Path, tag: str, layers: list[bytes], config: dict | None = None) -> None:
    """An image in an OCI layout whose layers are these raw tars (gzip'd), verified digests and all."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    descriptors = [{"mediaType": OCI_LAYER, **put_blob(directory, gzip.compress(raw, 1))} for raw in layers]
    diff_ids = ["sha256:" + hashlib.sha256(raw).hexdigest() for raw in layers]
    config = {
        "architecture": "amd64",
        "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        **(config or {}),
    }
    config_descriptor = {
        "mediaType": "application/vnd.oci.image.config.v1+json",
        **put_blob(directory, json.dumps(config).encode()),
    }
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config_descriptor,
        "layers": descriptors,
    }
    tag_image(
        directory, {"mediaType": manifest["mediaType"], **put_blob(directory, json.dumps(manifest).encode())}, tag
    )


def measured_check(*args: str):
    return run_measured("check", *args, timeout=180)


def one_line(result, fragment: str) -> None:
    assert result.returncode == 3, (result.returncode, result.stderr)
    assert result.stderr.startswith("dflash-doctor: error: ") and result.stderr.count("\n") == 1, result.stderr
    assert fragment in result.stderr, result.stderr


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> int:
    """The peak RSS of a check of a tiny image without vLLM: what every run costs anyway."""
    directory = tmp_path_factory.mktemp("baseline") / "oci"
    raw_image(directory, "tiny", [tar_of([b"usr/share/a"])])
    result = measured_check("--image", f"oci:{directory}:tiny")
    one_line(result, "no vllm or sglang package in the image")
    return result.peak_rss


# -- the merge ------------------------------------------------------------------------------


def issue_layers(entries: int, whiteouts: int) -> list[LayerIndex]:
    """The issue's shape: ``entries`` sources in ``whiteouts`` directories, each directory then whited out."""
    files = {f"{SITE}/vllm/d{i % whiteouts}/f{i}.py": ("file", f"p:{i}:1") for i in range(entries)}
    return [LayerIndex(files, (), ()), LayerIndex({}, tuple(f"{SITE}/vllm/d{i}" for i in range(whiteouts)), ())]


def cpu_seconds(indexes: list[LayerIndex]) -> tuple[float, dict]:
    start = time.process_time()
    view = merge(indexes)
    return time.process_time() - start, view


def test_the_merge_costs_the_entries_not_entries_times_whiteouts():
    """8,000 directory whiteouts over 30,000 entries cost 12 s more in the old merge (each
    whiteout scanned every entry): now they cost about what the entries cost alone."""
    layers = issue_layers(30_000, 8_000)
    alone, view = cpu_seconds(layers[:1])
    assert len(view) == 30_000
    with_whiteouts, view = cpu_seconds(layers)
    assert view == {}
    assert with_whiteouts < 4 * alone + 0.05, (with_whiteouts, alone)


# -- the budget of an image's layers --------------------------------------------------------


@pytest.mark.slow
def test_bin_python_entries_count_against_the_kept_paths(tmp_path, baseline):
    """``bin/python`` members were all kept, uncapped: 50,000 of 12 path parts now reach the cap on kept paths."""
    directory = tmp_path / "oci"
    raw_image(directory, "pythons", [tar_of(b"a/b/c/d/e/f/g/h/i/p%06d/bin/python" % i for i in range(50_000))])
    result = measured_check("--image", f"oci:{directory}:pythons")
    one_line(result, "the cap on kept paths")
    assert result.peak_rss < baseline + 60 * MIB, (result.peak_rss, baseline)


@pytest.mark.slow
def test_a_layer_of_many_members_keeps_no_list_of_its_headers(tmp_path, baseline):
    """tarfile kept a TarInfo of every member it read, and its gzip reader copied all that 64 KB
    inflate to for every header (seconds per thousand headers of a gzip'd layer). Now 100,000
    empty members cost no more memory than one."""
    directory = tmp_path / "oci"
    raw_image(directory, "many", [tar_of(b"usr/share/m%07d" % i for i in range(100_000))])
    result = measured_check("--image", f"oci:{directory}:many")
    one_line(result, "no vllm or sglang package in the image")
    assert result.peak_rss < baseline + 20 * MIB, (result.peak_rss, baseline)


def test_the_members_of_all_layers_are_capped(tmp_path, monkeypatch):
    """Reading headers is the time a layer costs: an image's layers together stop at the cap."""
    import dflash_doctor.images.layers as layers
    from conftest import run_cli

    monkeypatch.setattr(layers, "MAX_IMAGE_MEMBERS", 1_000)  # the real cap is 1,000,000: a minute to build and read
    directory = tmp_path / "oci"
    raw_image(directory, "wide", [tar_of(b"usr/share/%d/m%04d" % (n, i) for i in range(600)) for n in range(2)])
    assert_error(
        run_cli("check", "--image", f"oci:{directory}:wide"),
        "more than 1000 tar members in its layers (the cap on members)",
    )
    assert layers.MAX_IMAGE_MEMBERS == 1_000  # and its real value, for the record:
    monkeypatch.undo()
    assert layers.MAX_IMAGE_MEMBERS == 1_000_000


# -- docker-archive: the archive's own tar ----------------------------------------------------


def archive_of(path: Path, members: bytes) -> None:
    path.write_bytes(gzip.compress(members + b"\0" * 1024, 1))


@pytest.mark.slow
def test_a_long_name_header_in_a_docker_archive_is_refused_before_it_is_read(tmp_path, baseline):
    """The issue's archive, scaled: a GNU long-name header of 256 MiB (gzip: about 1 MB) was read whole."""
    archive = tmp_path / "image.tar.gz"
    size = 256 * MIB
    archive_of(archive, header(b"././@LongLink", size, b"L") + b"a" * size + header(b"manifest.json"))
    assert archive.stat().st_size < 2 * MIB
    result = measured_check("--image", f"docker-archive:{archive}")
    one_line(result, "extended tar header, more than 1048576 allowed (the cap on tar headers)")
    assert result.peak_rss < baseline + 40 * MIB, (result.peak_rss, baseline)


@pytest.mark.slow
def test_a_docker_archive_of_many_members_stops_at_the_cap(tmp_path, baseline):
    """1.5 M empty members used 680 MB: the archive's tar now stops after 1,088 members."""
    archive = tmp_path / "image.tar.gz"
    archive_of(archive, b"".join(header(b"m%07d" % i) for i in range(150_000)))
    result = measured_check("--image", f"docker-archive:{archive}")
    one_line(result, "more than 1088 members (the cap on archive members)")
    assert result.peak_rss < baseline + 20 * MIB, (result.peak_rss, baseline)


def test_a_chain_of_links_in_a_docker_archive_is_not_followed_far(tmp_path):
    """tarfile follows a link by recursing through the members before it; the archive follows 8 hops."""
    from conftest import run_cli

    links = b"".join(header(b"l%04d" % i, 0, b"2", b"l%04d" % (i - 1)) for i in range(1, 1000))
    archive = tmp_path / "image.tar"
    manifest = json.dumps([{"Config": "l0999", "Layers": []}]).encode()
    (tmp_path / "image.tar").write_bytes(
        header(b"l0000", 0)
        + links
        + header(b"manifest.json", len(manifest))
        + manifest.ljust(512, b"\0")
        + b"\0" * 1024
    )
    assert_error(run_cli("check", "--image", f"docker-archive:{archive}"), "l0999 is missing from")


# -- JSON of the wrong depth or type ----------------------------------------------------------


def test_a_deeply_nested_index_json_is_one_line(tmp_path):
    from conftest import run_cli

    directory = tmp_path / "oci"
    directory.mkdir()
    (directory / "index.json").write_text("[" * 100_000 + "]" * 100_000)
    assert_error(run_cli("check", "--image", f"oci:{directory}"), "index.json is nested too deeply")


@pytest.mark.parametrize(
    "change",
    [
        {"config": 5},
        {"config": {"Labels": 5, "Env": "PATH=/x"}},
        {"os": ["linux"], "architecture": 5},
    ],
    ids=["config", "labels-env", "platform"],
)
def test_an_image_config_of_the_wrong_types_is_treated_as_absent(tmp_path, change):
    from conftest import run_cli

    directory = tmp_path / "oci"
    raw_image(directory, "odd", [tar_of([b"usr/share/a"])], change)
    assert_error(run_cli("check", "--image", f"oci:{directory}:odd"), "no vllm or sglang package in the image")


def test_an_index_and_an_archive_of_the_wrong_types_are_one_line(tmp_path):
    from conftest import run_cli

    directory = tmp_path / "oci"
    index = json.dumps(
        {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": 5}
    ).encode()
    tag_image(
        directory if directory.mkdir() is None else directory,
        {"mediaType": "application/vnd.oci.image.index.v1+json", **put_blob(directory, index)},
        "index",
    )
    assert_error(
        run_cli("check", "--image", f"oci:{directory}:index"),
        "no image for platform linux/amd64 (the index offers: none)",
    )
    archive = tmp_path / "image.tar"
    manifest = json.dumps([{"Config": 5, "Layers": [7], "RepoTags": 5}]).encode()
    archive.write_bytes(header(b"manifest.json", len(manifest)) + manifest.ljust(512, b"\0") + b"\0" * 1024)
    assert_error(run_cli("check", "--image", f"docker-archive:{archive}"), "manifest.json names no config or layers")
    assert os.path.getsize(archive) < 4096


@pytest.mark.parametrize(
    "body", [b"[" * 60_000, b'{"errors": {"a": 1}}', b'{"errors": 5}'], ids=["nested", "dict", "int"]
)
def test_a_registry_error_body_of_any_shape_is_one_line(body):
    """The registry's 404 explains itself in JSON: nested past the parser, or of the wrong types."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from conftest import run_cli

    class Registry(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    with ThreadingHTTPServer(("127.0.0.1", 0), Registry) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        host = f"127.0.0.1:{server.server_address[1]}"
        try:
            proc = run_cli("check", "--image", f"{host}/team/vllm:v1", "--insecure-registry", host)
        finally:
            server.shutdown()
    assert_error(proc, "not found in")
