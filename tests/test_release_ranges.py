"""Release wheels read by HTTP range requests from a real index (nginx on 127.0.0.1).

The wheels are built here from the real 0.33.0 release tree in the user cache
(its ``vllm/**.py`` files and dist-info, with a correct RECORD) plus
incompressible members standing in for its shared objects. nginx counts the
bytes it sends; pip runs with no configuration but what each test gives it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import assert_error, run_cli, statuses, unreachable_index_env
from measure import run_measured
from nginx_index import NginxIndex, build_wheel, self_signed
from terminals import on_a_terminal

from dflash_doctor.behaviour.transformers import requires
from dflash_doctor.paths import cache_dir
from dflash_doctor.targets.release import transformers_tree

VERSION = "0.33.0"
WHEEL = f"vllm-{VERSION}-py3-none-any.whl"
FEW = ["vllm/__init__.py", "vllm/_version.py", "vllm/config/speculative.py", "vllm/transformers_utils/config.py"]


@pytest.fixture(scope="session")
def real_tree(release) -> Path:
    return release(VERSION)


@pytest.fixture(scope="session")
def big_wheel(real_tree, tmp_path_factory) -> Path:
    """Every .py file of the real release, and 96 MB standing in for its shared objects."""
    return build_wheel(tmp_path_factory.mktemp("big") / WHEEL, real_tree, VERSION, blobs=96)


@pytest.fixture(scope="session")
def small_wheel(real_tree, tmp_path_factory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("small") / WHEEL, real_tree, VERSION, only=FEW, blobs=8)


@pytest.fixture
def index(tmp_path):
    servers: list[NginxIndex] = []

    def start(wheels: list[Path], **options) -> NginxIndex:
        servers.append(NginxIndex(tmp_path / f"nginx{len(servers)}", wheels, **options))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def pip_env(cache: Path, **pip: str) -> dict[str, str]:
    """No pip configuration and an index that does not answer, but for ``pip`` (PIP_* variables). Without
    requests' certificate variables: they override pip's ``cert`` (in pip as here, both use requests)."""
    env = {k: v for k, v in unreachable_index_env(cache).items() if k not in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")}
    return {**env, "PIP_CACHE_DIR": str(cache.parent / "pip-cache"), **pip}


def kept(tree: Path) -> dict[str, bytes]:
    return {str(p.relative_to(tree)): p.read_bytes() for p in sorted(tree.rglob("*")) if p.is_file()}


def wheel_members(wheel: Path) -> dict[str, bytes]:
    """What a full extraction keeps: the .py files and the dist-info."""
    with zipfile.ZipFile(wheel) as archive:
        return {
            name: archive.read(name) for name in archive.namelist() if name.endswith(".py") or ".dist-info/" in name
        }


def only_ranges(server: NginxIndex) -> bool:
    return bool(server.requests()) and all(line.split()[2] == "206" for line in server.requests())


def fetched(cache: Path) -> Path:
    return cache / "releases" / VERSION


# ------------------------------------------------------------ a fraction of the bytes, the same verdicts


@pytest.mark.release
def test_check_reads_only_the_python_and_judges_as_a_full_download(tmp_path, index, big_wheel, real_tree):
    transformers_tree(requires((real_tree / f"vllm-{VERSION}.dist-info" / "METADATA").read_text(encoding="utf-8")))
    server = index([big_wheel])
    caches = {}
    for way, extra in (("ranges", []), ("full", ["--full-wheel"])):
        caches[way] = tmp_path / way
        caches[way].mkdir()
        (caches[way] / "transformers").symlink_to(cache_dir() / "transformers")  # only vLLM comes from this index
        before = server.file_bytes()
        proc = run_cli(
            "check",
            "--release",
            VERSION,
            *extra,
            "--format",
            "json",
            env=pip_env(caches[way], PIP_INDEX_URL=server.url),
        )
        assert proc.stdout, proc.stderr
        caches[way] = (caches[way], proc, server.file_bytes() - before, only_ranges(server))

    (ranged_cache, ranged, ranged_bytes, ranges_only), (full_cache, full, full_bytes, _) = (
        caches["ranges"],
        caches["full"],
    )
    size = big_wheel.stat().st_size
    assert ranges_only  # the range read asked for ranges only
    assert full_bytes == size  # --full-wheel: the whole file, once
    with zipfile.ZipFile(big_wheel) as archive:
        python = sum(info.compress_size for info in archive.infolist() if not info.filename.endswith(".so"))
    assert python <= ranged_bytes < python * 1.1 + 2 * 1024 * 1024 and ranged_bytes < size / 5, (
        ranged_bytes,
        python,
        size,
    )

    assert ranged.returncode == full.returncode
    assert statuses(json.loads(ranged.stdout)) == statuses(json.loads(full.stdout))
    assert kept(fetched(ranged_cache)) == kept(fetched(full_cache))
    assert {name: data for name, data in kept(fetched(ranged_cache)).items() if name != ".complete"} == wheel_members(
        big_wheel
    )


@pytest.mark.release
def test_a_server_that_ignores_ranges_gets_the_full_download(tmp_path, index, small_wheel):
    server = index([small_wheel], ranges=False)
    proc = run_cli(
        "check",
        "--release",
        VERSION,
        "--only",
        "layer-offset",
        "--format",
        "json",
        env=pip_env(tmp_path / "cache", PIP_INDEX_URL=server.url),
    )
    assert proc.stdout, proc.stderr
    assert [line.split()[2:4] for line in server.requests()] == [["200", str(small_wheel.stat().st_size)]]
    assert {k: v for k, v in kept(fetched(tmp_path / "cache")).items() if k != ".complete"} == wheel_members(
        small_wheel
    )


# ------------------------------------------------------------ bytes that are not the RECORD's are refused


@pytest.mark.release
@pytest.mark.parametrize("way", [[], ["--full-wheel"]], ids=["ranges", "full-wheel"])
def test_a_member_unlike_its_record_line_is_refused_and_nothing_is_cached(tmp_path, index, real_tree, way):
    wheel = build_wheel(tmp_path / WHEEL, real_tree, VERSION, only=FEW, blobs=8, altered="vllm/config/speculative.py")
    server = index([wheel])
    cache = tmp_path / "cache"
    proc = run_cli("check", "--release", VERSION, *way, env=pip_env(cache, PIP_INDEX_URL=server.url))
    assert_error(proc, f"vllm/config/speculative.py in {WHEEL} does not match the wheel's RECORD")
    assert "refused, nothing cached" in proc.stderr
    assert server.requests()  # it was fetched, and refused
    assert not (cache / "releases").exists() and list((cache / "tmp").iterdir()) == []


def lie_about_size(wheel: Path, name: str, size: int) -> None:
    """Make the zip's local and central headers say ``name`` unpacks to ``size`` bytes."""
    with zipfile.ZipFile(wheel) as archive:
        local = archive.getinfo(name).header_offset
    data = bytearray(wheel.read_bytes())
    central = data.rfind(name.encode()) - 46  # the central entry's fixed part precedes its name
    assert data[central : central + 4] == b"PK\x01\x02" and data[local : local + 4] == b"PK\x03\x04"
    data[central + 24 : central + 28] = data[local + 22 : local + 26] = size.to_bytes(4, "little")
    wheel.write_bytes(bytes(data))


@pytest.mark.release
@pytest.mark.parametrize("lie", [False, True], ids=["announced", "hidden"])
def test_a_decompression_bomb_is_refused_in_bounded_memory(tmp_path, index, real_tree, lie):
    """200 MB of one byte, deflated to 0.2 MB, as a .py member: announced, it is over the cap; hidden behind
    a size of 1,000 in the zip headers, at most 1,001 bytes are inflated and they do not match the RECORD."""
    wheel = build_wheel(tmp_path / WHEEL, real_tree, VERSION, only=FEW, extra={"vllm/bomb.py": b"#" * (200 << 20)})
    if lie:
        lie_about_size(wheel, "vllm/bomb.py", 1000)
    assert wheel.stat().st_size < 2 << 20
    server = index([wheel])
    cache = tmp_path / "cache"
    proc = run_measured("check", "--release", VERSION, env=pip_env(cache, PIP_INDEX_URL=server.url))
    assert proc.returncode == 3 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert (
        "does not match the wheel's RECORD" if lie else "more than 64 MiB"
    ) in proc.stderr and "vllm/bomb.py" in proc.stderr
    assert proc.peak_rss < 150 << 20, proc.peak_rss  # far below the 200 MB a full inflate would take
    assert not (cache / "releases").exists() and list((cache / "tmp").iterdir()) == []


@pytest.mark.release
def test_names_that_climb_out_are_skipped_and_a_name_clash_is_one_line(tmp_path, index, real_tree):
    climbing = {"vllm/../../escaped.py": b"x = 1\n", "/tmp/absolute.py": b"x = 2\n", "vllm/./dot.py": b"x = 3\n"}
    (tmp_path / "climb").mkdir()
    wheel = build_wheel(tmp_path / "climb" / WHEEL, real_tree, VERSION, only=FEW, extra=climbing)
    server = index([wheel])
    cache = tmp_path / "cache"
    proc = run_cli(
        "check",
        "--release",
        VERSION,
        "--only",
        "layer-offset",
        "--format",
        "json",
        env=pip_env(cache, PIP_INDEX_URL=server.url),
    )
    assert proc.stdout, proc.stderr
    assert not (cache / "escaped.py").exists() and not (cache / "releases" / "escaped.py").exists()
    assert not Path("/tmp/absolute.py").exists() and not (fetched(cache) / "vllm" / "dot.py").exists()
    assert {k: v for k, v in kept(fetched(cache)).items() if k != ".complete"} == {
        k: v for k, v in wheel_members(wheel).items() if k not in climbing
    }

    clash = build_wheel(
        tmp_path / WHEEL,
        real_tree,
        VERSION,
        only=FEW,
        extra={"vllm/clash.py": b"a = 1\n", "vllm/clash.py/inner.py": b"b = 2\n"},
    )
    server = index([clash])
    cache = tmp_path / "cache2"
    proc = run_cli("check", "--release", VERSION, env=pip_env(cache, PIP_INDEX_URL=server.url))
    assert_error(proc, f"cannot write vllm/clash.py/inner.py of {WHEEL} into the cache")
    assert not (cache / "releases").exists() and list((cache / "tmp").iterdir()) == []


# ------------------------------------------------------------ the user's pip configuration


def write_pip_conf(path: Path, **settings: str) -> Path:
    path.write_text("[global]\n" + "".join(f"{key} = {value}\n" for key, value in settings.items()))
    return path


@pytest.mark.release
@pytest.mark.parametrize("where", ["pip.conf", "PIP_INDEX_URL", "extra-index-url"])
def test_the_index_comes_from_pip_configuration(tmp_path, index, small_wheel, where):
    server = index([small_wheel])
    cache = tmp_path / "cache"
    env = pip_env(cache)
    if where == "pip.conf":
        del env["PIP_INDEX_URL"]
        env["PIP_CONFIG_FILE"] = str(write_pip_conf(tmp_path / "pip.conf", **{"index-url": server.url, "retries": "0"}))
    elif where == "PIP_INDEX_URL":
        env["PIP_INDEX_URL"] = server.url
    else:  # the main index does not answer, the extra one has the wheel
        env["PIP_CONFIG_FILE"] = str(write_pip_conf(tmp_path / "pip.conf", **{"extra-index-url": server.url}))
    proc = run_cli("check", "--release", VERSION, "--only", "layer-offset", "--format", "json", env=env)
    assert proc.stdout, proc.stderr
    assert only_ranges(server) and (fetched(cache) / "vllm/config/speculative.py").is_file()


def test_a_pip_configuration_pip_cannot_read_is_one_line(tmp_path):
    cache = tmp_path / "cache"
    env = {**pip_env(cache), "PIP_CONFIG_FILE": str(write_pip_conf(tmp_path / "pip.conf", retries="many"))}
    proc = run_cli("check", "--release", VERSION, env=env)
    assert_error(proc, "pip cannot read its configuration: ")
    assert "invalid integer value: 'many'" in proc.stderr and proc.stdout == "" and not (cache / "releases").exists()


@pytest.mark.release
def test_a_certificate_from_pip_conf_is_used(tmp_path, index, small_wheel):
    cert, key = self_signed(tmp_path)
    server = index([small_wheel], tls=(cert, key))
    cache = tmp_path / "cache"
    untrusted = run_cli("check", "--release", VERSION, env=pip_env(cache, PIP_INDEX_URL=server.url))
    assert_error(untrusted, f"the package index {server.url}/vllm/ cannot be reached")
    assert "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr and server.requests() == []

    env = {
        **pip_env(cache),
        "PIP_CONFIG_FILE": str(write_pip_conf(tmp_path / "pip.conf", cert=str(cert), **{"index-url": server.url})),
    }
    del env["PIP_INDEX_URL"]
    proc = run_cli("check", "--release", VERSION, "--only", "layer-offset", "--format", "json", env=env)
    assert proc.stdout, proc.stderr
    assert only_ranges(server) and (fetched(cache) / "vllm/__init__.py").is_file()


@pytest.mark.release
@pytest.mark.parametrize("how", ["netrc", "url"])
def test_basic_auth_credentials_as_pip_takes_them(tmp_path, index, small_wheel, how):
    server = index([small_wheel], users={"reader": "s3cret"})
    cache = tmp_path / "cache"
    refused = run_cli("check", "--release", VERSION, env=pip_env(cache, PIP_INDEX_URL=server.url))
    assert_error(refused, "401")
    assert not (cache / "releases").exists()

    if how == "netrc":
        netrc = tmp_path / "netrc"
        netrc.write_text("machine 127.0.0.1 login reader password s3cret\n")
        netrc.chmod(0o600)
        env = pip_env(cache, PIP_INDEX_URL=server.url, NETRC=str(netrc))
    else:
        env = pip_env(cache, PIP_INDEX_URL=server.url.replace("://", "://reader:s3cret@"))
    proc = run_cli("check", "--release", VERSION, "--only", "layer-offset", "--format", "json", env=env)
    assert proc.stdout, proc.stderr
    answers = [line.split()[2] for line in server.requests()]
    assert answers and set(answers) <= {"206", "401"} and "206" in answers
    assert "s3cret" not in proc.stderr + proc.stdout


@pytest.mark.release
@pytest.mark.skipif(shutil.which("script") is None, reason="needs script(1) for a pty")
def test_a_terminal_shows_the_bytes_of_the_parts_fetched(tmp_path, index, small_wheel):
    server = index([small_wheel], rate="30k")  # the parts take a few seconds
    shown = on_a_terminal(
        ["check", "--release", VERSION, "--only", "layer-offset"], pip_env(tmp_path / "cache", PIP_INDEX_URL=server.url)
    )
    assert f"vllm {VERSION}: fetching the files kept (range requests)" in shown
    total = server.file_bytes()
    assert f"/{total / 1000:.1f} kB" in shown, (total, shown[-3000:])  # done of the total the parts take
    assert "MB" not in shown  # never the size of the wheel
    assert only_ranges(server)


# ------------------------------------------------------------ several at once: releases, and concurrent checks


@pytest.mark.release
def test_two_processes_fetching_one_release_leave_one_tree(tmp_path, index, small_wheel):
    server = index([small_wheel], rate="200k")  # each fetch takes a while: the two overlap
    cache = tmp_path / "cache"
    env = pip_env(cache, PIP_INDEX_URL=server.url)
    command = [
        sys.executable,
        "-m",
        "dflash_doctor",
        "check",
        "--release",
        VERSION,
        "--only",
        "layer-offset",
        "--format",
        "json",
    ]
    procs = [
        subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)
    ]
    answers = [proc.communicate(timeout=300) for proc in procs]
    for proc, (out, err) in zip(procs, answers):
        assert proc.returncode in (0, 1, 2) and json.loads(out)["target"]["location"].endswith(f"releases/{VERSION}"), (
            err
        )
    assert os.listdir(cache / "releases") == [VERSION] and list((cache / "tmp").iterdir()) == []
    assert {k: v for k, v in kept(fetched(cache)).items() if k != ".complete"} == wheel_members(small_wheel)
    assert [line.split()[3] for line in server.requests()].count(
        "65536"
    ) == 2  # each read the wheel's tail: both fetched


@pytest.mark.release
def test_releases_fetches_several_releases_at_once(tmp_path, index, release):
    versions = ["0.32.0", "0.33.0", "0.34.0"]
    wheels = []
    for version in versions:
        tree = release(version)
        transformers_tree(requires((tree / f"vllm-{version}.dist-info" / "METADATA").read_text(encoding="utf-8")))
        wheels.append(build_wheel(tmp_path / f"vllm-{version}-py3-none-any.whl", tree, version, only=FEW))
    server = index(wheels, rate="50k")  # a few seconds a release
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "transformers").symlink_to(cache_dir() / "transformers")
    proc = run_cli(
        "releases",
        "--from",
        versions[0],
        "--to",
        versions[-1],
        "--format",
        "json",
        env=pip_env(cache, PIP_INDEX_URL=server.url),
    )
    assert proc.stdout, proc.stderr
    assert [row["release"] for row in json.loads(proc.stdout)["releases"]] == versions
    assert sorted(os.listdir(cache / "releases")) == versions
    spans = {}  # each wheel's first request start and last request end, as nginx logged them
    for line in server.requests():
        _, path, _, _, ended, took = line.split()
        start, end = spans.get(path, (float("inf"), 0.0))
        spans[path] = (min(start, float(ended) - float(took)), max(end, float(ended)))
    assert len(spans) == 3
    assert max(start for start, _ in spans.values()) < min(end for _, end in spans.values()), spans  # all three at once


@pytest.mark.release
def test_releases_full_wheel_downloads_each_wheel_whole(tmp_path, index, small_wheel, real_tree):
    transformers_tree(requires((real_tree / f"vllm-{VERSION}.dist-info" / "METADATA").read_text(encoding="utf-8")))
    server = index([small_wheel])
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "transformers").symlink_to(cache_dir() / "transformers")
    proc = run_cli(
        "releases",
        "--from",
        VERSION,
        "--to",
        VERSION,
        "--full-wheel",
        "--format",
        "json",
        env=pip_env(cache, PIP_INDEX_URL=server.url),
    )
    assert proc.stdout, proc.stderr
    assert [line.split()[2:4] for line in server.requests()] == [["200", str(small_wheel.stat().st_size)]]
    assert os.listdir(cache / "releases") == [VERSION]


# ------------------------------------------------------------ a real downloaded wheel, when one is at hand


REAL_WHEEL = os.environ.get("DFLASH_DOCTOR_TEST_WHEEL", "")


@pytest.mark.skipif(
    not REAL_WHEEL.endswith(".whl") or not Path(REAL_WHEEL).is_file(),
    reason="set DFLASH_DOCTOR_TEST_WHEEL to a downloaded vLLM wheel",
)
def test_a_real_wheel_read_by_ranges_equals_its_full_extraction(tmp_path, index):
    wheel = Path(REAL_WHEEL)
    version = wheel.name.split("-")[1]
    server = index([wheel])
    cache = tmp_path / "cache"
    proc = run_cli(
        "check",
        "--release",
        version,
        "--only",
        "layer-offset",
        "--format",
        "json",
        env=pip_env(cache, PIP_INDEX_URL=server.url),
    )
    assert proc.stdout, proc.stderr
    assert only_ranges(server) and server.file_bytes() < wheel.stat().st_size * 0.07
    tree = cache / "releases" / version
    assert {k: v for k, v in kept(tree).items() if k != ".complete"} == wheel_members(wheel)
