"""Hostile local files (issue 12): sparse giants, links to /dev/zero, FIFOs, deep nesting,
wrong types, and an unexpected exception, each run as the real CLI in a child process.

Every run measures the child's own peak RSS (``os.wait4``) and has a deadline: a read
that is not bounded shows as memory, a FIFO that blocks shows as the deadline.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import measure

SWA_FILE = "vllm/model_executor/models/qwen3_dflash.py"
PEAK_MB = 300


class Run:
    def __init__(self, code: int, stdout: str, stderr: str, peak_mb: float, seconds: float) -> None:
        self.code, self.stdout, self.stderr, self.peak_mb, self.seconds = code, stdout, stderr, peak_mb, seconds


def run_measured(*args: str, deadline: float = 60.0, address_space_mb: int | None = None) -> Run:
    """The CLI in a child process (its own session, measured by a small go-between):
    exit code, output, the child's peak RSS; killed (and failed) past the deadline."""
    result = measure.run_measured(*args, timeout=deadline, address_space_mb=address_space_mb)
    if result.seconds > deadline:
        pytest.fail(f"dflash-doctor {' '.join(args)} still running after {deadline} s")
    return Run(result.returncode, result.stdout, result.stderr, result.peak_rss / 2**20, result.seconds)


def one_line_error(run: Run, *words: str) -> None:
    assert run.code == 3, (run.code, run.stderr)
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("dflash-doctor: "), run.stderr
    assert "Traceback" not in run.stderr
    for word in words:
        assert word in lines[0], lines[0]


def fix(report: dict, fix_id: str) -> dict:
    return next(item for item in report["fixes"] if item["id"] == fix_id)


@pytest.mark.release
def test_sparse_giant_in_the_tree_is_not_read(mini_tree, tmp_path):
    tree = mini_tree("0.33.0")
    giant = tree / SWA_FILE
    with giant.open("r+b") as handle:
        handle.truncate(3 * 1024**3)  # 3 GB, sparse: costs no disk, only a reader that trusts it
    run = run_measured("check", "--path", str(tree), "--format", "json")
    report = json.loads(run.stdout)
    assert fix(report, "swa-config")["status"] == "unknown"
    assert "too large" in json.dumps(fix(report, "swa-config"))
    assert fix(report, "cache-drop")["status"] == "present"  # the other fixes are still judged
    assert run.peak_mb < PEAK_MB, f"peak RSS {run.peak_mb:.0f} MB"


@pytest.mark.release
def test_dev_zero_link_in_the_tree_is_not_read(mini_tree, tmp_path):
    tree = mini_tree("0.33.0")
    (tree / SWA_FILE).unlink()
    (tree / SWA_FILE).symlink_to("/dev/zero")
    run = run_measured("check", "--path", str(tree), "--format", "json", deadline=30)
    report = json.loads(run.stdout)
    assert run.code == 2, run.stderr
    assert fix(report, "swa-config")["status"] == "unknown"
    assert "not a regular file" in json.dumps(fix(report, "swa-config"))
    assert run.peak_mb < PEAK_MB, f"peak RSS {run.peak_mb:.0f} MB"


@pytest.mark.release
def test_fifo_does_not_block_the_package_scan(mini_tree, tmp_path):
    """The anchor file is gone, so its classes are searched for across the package, FIFOs and all."""
    tree = mini_tree("0.33.0")
    (tree / SWA_FILE).unlink()
    os.mkfifo(tree / "vllm" / "x.py")
    os.mkfifo(tree / "vllm" / "model_executor" / "models" / "y.py")
    run = run_measured("check", "--path", str(tree), "--format", "json", deadline=30)
    report = json.loads(run.stdout)
    assert fix(report, "cache-drop")["status"] == "present"
    assert fix(report, "swa-config")["status"] != "present"


@pytest.mark.release
def test_fifo_as_an_anchor_file_is_unknown_not_a_hang(mini_tree, tmp_path):
    tree = mini_tree("0.33.0")
    (tree / SWA_FILE).unlink()
    os.mkfifo(tree / SWA_FILE)
    run = run_measured("check", "--path", str(tree), "--format", "json", deadline=30)
    swa = fix(json.loads(run.stdout), "swa-config")
    assert swa["status"] == "unknown" and "not a regular file" in json.dumps(swa)


@pytest.mark.release
def test_link_to_a_regular_file_is_read(mini_tree, tmp_path):
    tree = mini_tree("0.33.0")
    real = tmp_path / "elsewhere.py"
    (tree / SWA_FILE).rename(real)
    (tree / SWA_FILE).symlink_to(real)
    run = run_measured("check", "--path", str(tree), "--format", "json")
    assert fix(json.loads(run.stdout), "swa-config")["status"] == "present"


def _waivers_check(mini_tree, tmp_path, waivers: Path, deadline: float = 30) -> Run:
    return run_measured("check", "--path", str(mini_tree("0.33.0")), "--waivers", str(waivers), deadline=deadline)


@pytest.mark.release
def test_waivers_nested_deep_are_one_line(mini_tree, tmp_path):
    waivers = tmp_path / "waivers.toml"
    depth = 100_000
    waivers.write_text(f'[[waiver]]\nid = "cache-drop"\nreason = "r"\ntarget = {"[" * depth}{"]" * depth}\n')
    one_line_error(_waivers_check(mini_tree, tmp_path, waivers), "waivers file", "nested too deeply")


@pytest.mark.release
def test_waivers_linked_to_dev_zero_are_one_line(mini_tree, tmp_path):
    waivers = tmp_path / "waivers.toml"
    waivers.symlink_to("/dev/zero")
    run = _waivers_check(mini_tree, tmp_path, waivers)
    one_line_error(run, "waivers file", "not a regular file")
    assert run.peak_mb < PEAK_MB


@pytest.mark.release
def test_waivers_fifo_does_not_block(mini_tree, tmp_path):
    waivers = tmp_path / "waivers.toml"
    os.mkfifo(waivers)
    one_line_error(_waivers_check(mini_tree, tmp_path, waivers), "not a regular file")


def test_drafter_config_linked_to_dev_zero_is_one_line(tmp_path):
    config = tmp_path / "config.json"
    config.symlink_to("/dev/zero")
    run = run_measured("config", str(config), deadline=30)
    one_line_error(run, "drafter config", "not a regular file")
    assert run.peak_mb < PEAK_MB


def test_hosts_file_fifo_does_not_block(tmp_path):
    hosts = tmp_path / "hosts"
    os.mkfifo(hosts)
    one_line_error(run_measured("check", "--hosts-file", str(hosts), deadline=30), "hosts file", "not a regular file")


@pytest.mark.release
@pytest.mark.parametrize(
    "direct_url",
    [
        {"vcs_info": {"commit_id": ["not", "a", "string"]}},
        {"vcs_info": {"commit_id": 12345678}},
        {"vcs_info": "a string"},
        ["a list"],
        "[" * 100_000 + "]" * 100_000,
    ],
    ids=["list", "number", "vcs-string", "top-list", "nested"],
)
def test_direct_url_of_the_wrong_shape_is_no_commit(mini_tree, tmp_path, direct_url):
    tree = mini_tree("0.33.0")
    dist_info = next(tree.glob("vllm-*.dist-info"))
    text = direct_url if isinstance(direct_url, str) else json.dumps(direct_url)
    (dist_info / "direct_url.json").write_text(text)
    run = run_measured("check", "--path", str(tree), "--format", "json")
    assert run.code == 0, run.stderr
    assert json.loads(run.stdout)["engine"]["commit_source"] == "_version.py"


@pytest.mark.release
def test_output_to_a_fifo_is_refused(mini_tree, tmp_path):
    fifo = tmp_path / "report.json"
    os.mkfifo(fifo)
    run = run_measured("check", "--path", str(mini_tree("0.33.0")), "--output", f"json={fifo}", deadline=30)
    one_line_error(run, "not a regular file")
    assert fifo.is_fifo()


@pytest.fixture
def memory_hungry_tree(mini_tree):
    """A tree whose anchor file is valid Python under the size cap that takes far more memory to parse than it holds."""
    tree = mini_tree("0.33.0")
    line = "_pad = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]\n"
    with (tree / SWA_FILE).open("a") as handle:
        handle.write(line * (1_500_000 // len(line)))
    return tree


@pytest.mark.release
def test_memory_error_is_an_internal_error_on_one_line(memory_hungry_tree, tmp_path):
    run = run_measured("check", "--path", str(memory_hungry_tree), address_space_mb=250)
    one_line_error(run, "internal error: MemoryError", "--debug")


@pytest.mark.release
def test_debug_shows_the_traceback(memory_hungry_tree, tmp_path):
    run = run_measured("--debug", "check", "--path", str(memory_hungry_tree), address_space_mb=250)
    assert run.code == 3
    assert "Traceback (most recent call last)" in run.stderr
    assert run.stderr.splitlines()[-1].startswith("dflash-doctor: internal error: MemoryError")


@pytest.mark.release
def test_reader_that_leaves_early_is_one_line(mini_tree):
    proc = subprocess.Popen(
        [sys.executable, "-m", "dflash_doctor", "check", "--path", str(mini_tree("0.33.0"))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    proc.stdout.close()  # gone before the report is written, like `| head -0`
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 3
    assert stderr.splitlines() == ["dflash-doctor: error: standard output was closed before all of it was written"], (
        stderr
    )


@pytest.mark.release
def test_output_symlink_is_replaced_not_written_through(mini_tree, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me\n")
    link = tmp_path / "report.json"
    link.symlink_to(outside)
    run = run_measured("check", "--path", str(mini_tree("0.33.0")), "--output", f"json={link}")
    assert run.code == 0, run.stderr
    assert outside.read_text() == "keep me\n"
    assert not link.is_symlink() and json.loads(link.read_text())["exit_code"] == 0
