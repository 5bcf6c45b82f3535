"""SGLang on the targets that find their engines when they are opened: a host over ssh (real OpenSSH on
127.0.0.1) and a container image (OCI layouts, and the real registry), each holding SGLang alone or beside
vLLM, from the real wheels' trees. ``--engine auto`` checks every engine a host's Python or an image holds,
a host's over one connection; an image's editable SGLang checkout under ``/sgl-workspace`` is followed
through its ``.pth``, finder or ``direct_url.json``, never outside the image."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from dflash_doctor.engines import SGLANG
from dflash_doctor.targets.release import release_tree

from conftest import fleet_validator, make_venv, run_cli, ssh_check
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
    # the first registered engine's collector (no vLLM there, SGLang found), then SGLang's; no behaviour child
    assert srv.log_count("request exec") == 2


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
