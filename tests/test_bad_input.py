"""Bad input: one clear line on stderr, exit 3, never a traceback."""

import os
import stat
import subprocess
import sys

import pytest

from conftest import assert_error, check_json, make_venv, run_cli, run_process, statuses


def test_nonexistent_path():
    assert_error(run_cli("check", "--path", "/nonexistent/site-packages"), "no such path")
    # The same through the real entry point: the one line and exit 3 survive interpreter shutdown.
    assert_error(run_process("check", "--path", "/nonexistent/site-packages"), "no such path")


def test_directory_without_vllm(tmp_path):
    assert_error(run_cli("check", "--path", str(tmp_path)), "no vllm or sglang package under")
    assert_error(run_cli("check", "--path", str(tmp_path), "--engine", "vllm"), "no vllm package under")
    assert_error(
        run_cli("check", "--path", str(tmp_path), "--engine", "tgi"),
        "--engine: no engine called 'tgi' (known: sglang, vllm)",
    )


def test_file_instead_of_directory(tmp_path):
    target = tmp_path / "f.py"
    target.write_text("x = 1\n")
    assert_error(run_cli("check", "--path", str(target)), "not a directory")


def test_symlink_loop(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    assert_error(run_cli("check", "--path", str(tmp_path / "a")), "cannot resolve")


def test_missing_interpreter():
    assert_error(run_cli("check", "--python", "/nonexistent/bin/python"), "not found")


def test_interpreter_that_fails(tmp_path):
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\necho 'boom: no such module' >&2\nexit 7\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    assert_error(run_cli("check", "--python", str(script)), "failed (exit 7): boom")


def test_interpreter_that_prints_garbage(tmp_path):
    script = tmp_path / "python"
    script.write_text('#!/bin/sh\ncat >/dev/null\necho \'{"not": "a probe answer"}\'\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    assert_error(run_cli("check", "--python", str(script)), "did not answer the probe")


def test_interpreter_without_vllm():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    assert_error(run_cli("check", "--python", sys.executable, env=env), "neither vllm nor sglang is installed")
    assert_error(run_cli("check", "--python", sys.executable, "--engine", "sglang", env=env), "sglang is not installed")


@pytest.mark.release
def test_interpreter_with_vllm_is_inspected_without_import(tmp_path, release):
    python = make_venv(tmp_path / "venv", release("0.20.1"))
    code, report = check_json("--python", str(python))
    assert report["target"]["kind"] == "python" and report["target"]["python"].startswith(str(tmp_path))
    assert statuses(report) == {"cache-drop": "absent", "layer-offset": "absent", "swa-config": "absent"}
    assert report["engine"]["version"] == "0.20.1"
    assert code == 1


@pytest.mark.release
def test_interpreter_with_junk_before_the_answer(tmp_path, release):
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "sitecustomize.py").write_text("print('welcome to the GPU box')\n")
    python = make_venv(tmp_path / "venv", tmp_path / "hooks", release("0.33.0"))
    assert (
        "welcome to the GPU box" in subprocess.run([str(python), "-c", "pass"], capture_output=True, text=True).stdout
    )
    code, report = check_json("--python", str(python))
    assert code == 0 and set(statuses(report).values()) == {"present"}


@pytest.mark.release
def test_release_that_does_not_exist():
    assert_error(run_cli("check", "--release", "0.0.999"), "not on the package index")


def test_release_that_is_not_a_version():
    assert_error(run_cli("check", "--release", "latest;rm"), "not a release version")


@pytest.mark.release
def test_two_targets():
    assert_error(run_cli("check", "--path", "/tmp", "--release", "0.20.1"), "give one target")


def test_unknown_fix_id(tmp_path):
    assert_error(run_cli("check", "--path", str(tmp_path), "--only", "nope"), "unknown fix id nope")


def test_unknown_option_and_format():
    assert_error(run_cli("check", "--bogus"), "--bogus")
    assert_error(run_cli("check", "--format", "xml"), "xml")


@pytest.mark.release
def test_unwritable_output_keeps_nothing_half_written(tmp_path, mini_tree):
    tree = mini_tree("0.20.1")
    assert_error(
        run_cli("check", "--path", str(tree), "--output", str(tmp_path / "missing-dir" / "r.json")), "cannot write"
    )
    out = tmp_path / "r.json"
    out.write_text("previous report")
    proc = run_cli("check", "--path", str(tree), "--format", "json", "--output", str(out))
    assert proc.returncode == 1 and proc.stdout == ""
    assert '"dflash-doctor/check/v2"' in out.read_text()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".r.json")] == []
