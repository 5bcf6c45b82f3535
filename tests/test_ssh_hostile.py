"""A hostile remote host and hostile probe answers, against a real sshd on
127.0.0.1: the "python" there is a script that floods, drips, bombs or lies.
Every case ends in exit 3 with one line, within its time and memory bounds."""

from __future__ import annotations

import base64
import json
import os
import time
import zlib
from pathlib import Path

import pytest

from conftest import assert_error, fleet_validator, run_cli, statuses
from measure import run_measured
from sshd import host, trust
import tiers

MARKER = "DFLASH-DOCTOR-PROBE:"
MIB = 1024 * 1024
BOMB_EXPANDED = 1024 * MIB  # 1 GiB of JSON that compresses to about 1 MiB


def hostile_python(where: Path, body: str) -> Path:
    """An executable the remote side runs as its interpreter."""
    script = where / "python"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    return script


def bomb_answer(path: Path) -> Path:
    """A probe answer line whose zlib payload expands to BOMB_EXPANDED bytes."""
    tiers.require("slow", "compresses 1 GiB")
    packer = zlib.compressobj(9)
    chunk = b" " * MIB
    compressed = [packer.compress(b'{"files": "')]
    compressed += [packer.compress(chunk) for _ in range(BOMB_EXPANDED // MIB)]
    compressed.append(packer.compress(b'"}') + packer.flush())
    path.write_text(MARKER + base64.b64encode(b"".join(compressed)).decode() + "\n")
    return path


@pytest.fixture(scope="module")
def real_answer(tmp_path_factory, release) -> dict:
    """The decoded answer the real probe gives for the 0.33.0 release tree."""
    work = tmp_path_factory.mktemp("answer")
    (work / "probe.py").write_text(run_cli("probe-script").stdout)
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-S", str(work / "probe.py")],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(release("0.33.0")), "PATH": os.environ["PATH"]},
    ).stdout
    payload = out.strip().splitlines()[-1][len(MARKER) :]
    return json.loads(zlib.decompress(base64.b64decode(payload)))


def answer_file(path: Path, answer: dict) -> Path:
    payload = base64.b64encode(zlib.compress(json.dumps(answer).encode())).decode()
    path.write_text(f"login banner\n{MARKER}{payload}\n")
    return path


@pytest.fixture
def remote(server, client):
    srv = server()
    trust(client, srv)
    return srv


def ssh_run(client, srv, python: Path, *args: str):
    return run_measured(
        "check", *client["args"], "--host", host(srv), "--python", str(python), *args, env=client["env"]
    )


def one_line(result, fragment: str) -> None:
    assert result.returncode == 3, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dflash-doctor: error: ") and fragment in lines[0], lines


@pytest.mark.slow
def test_a_zlib_bomb_over_ssh_is_refused_with_little_memory(remote, client, tmp_path):
    bomb = bomb_answer(tmp_path / "bomb.answer")
    assert bomb.stat().st_size < 4 * MIB
    python = hostile_python(tmp_path, f"cat {bomb}\n")
    result = ssh_run(client, remote, python)
    one_line(result, "expands past 64 MiB")
    assert result.peak_rss < 400 * MIB < BOMB_EXPANDED, result.peak_rss


@pytest.mark.slow
def test_a_zlib_bomb_in_a_probe_file_is_refused_with_little_memory(tmp_path):
    result = run_measured("check", "--from-probe", str(bomb_answer(tmp_path / "node.probe")))
    one_line(result, "expands past 64 MiB")
    assert result.peak_rss < 400 * MIB, result.peak_rss


@pytest.mark.slow
def test_endless_junk_on_remote_stdout_stops_at_the_cap(remote, client, tmp_path):
    python = hostile_python(tmp_path, "exec yes 'Welcome to gpu-node-7, have a nice day'\n")
    result = ssh_run(client, remote, python)
    one_line(result, "printed more than 32 MiB")
    assert result.peak_rss < 300 * MIB, result.peak_rss


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


@pytest.mark.slow
def test_a_dripping_interpreter_times_out_and_is_killed_on_the_remote_side(remote, client, tmp_path):
    pids = tmp_path / "pids"
    python = hostile_python(
        tmp_path,
        # Ignores SIGPIPE and a closed channel; leaves a child behind; one byte a second, forever.
        f"trap '' PIPE HUP\nsleep 300 &\necho $$ $! > {pids}\nwhile :; do printf x; sleep 1; done\n",
    )
    result = ssh_run(client, remote, python, "--probe-timeout", "2")
    one_line(result, "did not finish within 2 s")
    assert result.seconds < 10, result.seconds
    launched = [int(pid) for pid in pids.read_text().split()]
    deadline = time.monotonic() + 15
    while any(map(_alive, launched)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(map(_alive, launched)), "the remote probe outlived the client"


@pytest.mark.slow
def test_a_silent_interpreter_times_out(remote, client, tmp_path):
    python = hostile_python(tmp_path, "exec sleep 300\n")
    result = ssh_run(client, remote, python, "--probe-timeout", "1.5")
    one_line(result, "did not finish within 1.5 s")
    assert result.seconds < 10, result.seconds


@pytest.mark.slow
@pytest.mark.parametrize(
    "config",
    [
        "Host gpu\n  ProxyJump gpu\n",
        "Host gpu\n  ProxyJump bastion\nHost bastion\n  ProxyJump edge\nHost edge\n  ProxyJump gpu\n",
    ],
)
def test_a_proxy_jump_loop_is_refused_in_one_line(config, client, tmp_path):
    (tmp_path / "config").write_text(config)
    result = run_measured("check", "--host", "gpu", "--ssh-config", str(tmp_path / "config"), env=client["env"])
    one_line(result, "ProxyJump loop in the ssh config (gpu -> ")
    assert result.seconds < 30


def _break(answer: dict, how: str) -> dict:
    broken = json.loads(json.dumps(answer))
    some_file = next(iter(broken["files"]))
    if how == "files-list":
        broken["files"] = list(broken["files"])
    elif how == "file-number":
        broken["files"][some_file] = 5
    elif how == "root-number":
        broken["root"] = 7
    elif how == "search-text":
        broken["search"] = {"DFlashProposer": "vllm/x.py"}
    elif how == "search-numbers":
        broken["search"] = {"DFlashProposer": [1, 2]}
    elif how == "sha-null":
        broken["sha256"][some_file] = None
    elif how == "dist-info-dict":
        broken["dist_info_files"]["METADATA"] = {"Version": "0.33.0"}
    elif how == "error-list":
        broken["error"] = ["vllm", "missing"]
    return broken


@pytest.mark.release
@pytest.mark.parametrize(
    "how",
    [
        "files-list",
        "file-number",
        "root-number",
        "search-text",
        "search-numbers",
        "sha-null",
        "dist-info-dict",
        "error-list",
    ],
)
def test_a_probe_file_with_a_field_of_the_wrong_type_is_an_error(how, real_answer, tmp_path):
    path = answer_file(tmp_path / "node.probe", _break(real_answer, how))
    assert_error(run_cli("check", "--from-probe", str(path)), "the probe answer is malformed: field")


@pytest.mark.release
def test_a_non_string_commit_id_records_no_commit(real_answer, tmp_path):
    answer = json.loads(json.dumps(real_answer))
    answer["dist_info_files"]["direct_url.json"] = json.dumps({"url": "file:///x", "vcs_info": {"commit_id": 123}})
    path = answer_file(tmp_path / "node.probe", answer)
    proc = run_cli("check", "--from-probe", str(path), "--format", "json")
    assert proc.returncode in (0, 1, 2) and "Traceback" not in proc.stderr, proc.stderr
    assert json.loads(proc.stdout)["engine"]["commit_source"] != "direct_url.json"


@pytest.mark.release
def test_the_real_answer_file_checks_and_a_fifo_is_refused(real_answer, tmp_path):
    path = answer_file(tmp_path / "node.probe", real_answer)
    proc = run_cli("check", "--from-probe", str(path), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert set(statuses(json.loads(proc.stdout)).values()) == {"present"}
    os.mkfifo(tmp_path / "answers.fifo")
    result = run_measured("check", "--from-probe", str(tmp_path / "answers.fifo"), timeout=30)
    assert result.returncode == 3 and result.seconds < 25


@pytest.mark.slow
@pytest.mark.release
def test_a_malformed_answer_over_ssh_is_an_error(remote, client, real_answer, tmp_path):
    path = answer_file(tmp_path / "answer", _break(real_answer, "file-number"))
    result = ssh_run(client, remote, hostile_python(tmp_path, f"cat {path}\n"))
    one_line(result, "the probe answer is malformed: field 'files'")


@pytest.mark.slow
def test_remote_without_vllm_says_how_to_point_at_one(remote, client, tmp_path):
    answer = tmp_path / "answer"
    answer.write_text(MARKER + json.dumps({"error": "vllm is not installed in this interpreter's environment"}) + "\n")
    python = hostile_python(tmp_path, f"cat {answer}\n")
    result = ssh_run(client, remote, python, "--engine", "vllm")
    one_line(
        result,
        "vllm is not installed in this interpreter's environment (point at the remote interpreter "
        "that has vllm with --python)",
    )
    one_line(  # --engine auto: no engine found (the answer names none of the others)
        ssh_run(client, remote, python),
        "neither vllm nor sglang is installed in its environment (point at the remote interpreter that has one "
        "of them with --python)",
    )


@pytest.mark.slow
@pytest.mark.release
def test_byte_counts_are_numbers_in_the_ssh_and_fleet_json(remote, client, real_answer, tmp_path):
    path = answer_file(tmp_path / "answer", real_answer)
    python = hostile_python(tmp_path, f"echo 'some noise' >&2\ncat {path}\n")
    single = ssh_run(client, remote, python, "--format", "json")
    # The fake interpreter answers the probe, not the behaviour runs: those are unknown (exit 2), not a crash.
    assert single.returncode == 2 and "gave no readable answer" in single.stdout, single.stderr
    target = json.loads(single.stdout)["target"]
    assert target["bytes_received"] == path.stat().st_size + len("some noise\n")
    assert isinstance(target["bytes_sent"], int) and target["bytes_sent"] > 10_000  # the probe's source
    fleet = ssh_run(client, remote, python, "--host", host(remote), "--format", "json")
    document = json.loads(fleet.stdout)
    assert list(fleet_validator().iter_errors(document)) == []
    assert all(isinstance(h["target"]["bytes_received"], int) for h in document["hosts"])
