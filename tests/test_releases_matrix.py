"""The release matrix on real wheels, its cache, its offline behaviour; and what
the terminal sees (progress only on a terminal, NO_COLOR)."""

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from conftest import THREE, assert_error, env_for, run_cli, unreachable_index_env

SCHEMA = json.loads((Path(__file__).resolve().parent.parent / "schemas" / "releases-v1.schema.json").read_text())
KNOWN = {
    "0.20.1": {"cache-drop": "absent", "layer-offset": "absent", "swa-config": "absent"},
    "0.22.0": {"cache-drop": "absent", "layer-offset": "present", "swa-config": "absent"},
    "0.33.0": {"cache-drop": "present", "layer-offset": "present", "swa-config": "present"},
}
COLOUR = re.compile(r"\x1b\[[0-9;]*3[0-7]m|\x1b\[[0-9;]*;3[0-7];")


def matrix(*args: str, env: dict) -> tuple[int, dict, str]:
    proc = run_cli("releases", *args, "--format", "json", env=env)
    assert proc.stdout, proc.stderr
    data = json.loads(proc.stdout)
    jsonschema.Draft202012Validator(SCHEMA).validate(data)
    return proc.returncode, data, proc.stderr


@pytest.mark.release
def test_matrix_of_three_real_releases_then_from_the_cache_alone(release_cache):
    env = env_for(release_cache)
    code, data, stderr = matrix("--offline", "--from", "0.20.0", env=env)
    assert code == 0 and data["exit_code"] == 0
    assert [row["release"] for row in data["releases"]] == list(THREE)
    assert {row["release"]: row["fixes"] for row in data["releases"]} == KNOWN
    assert not any(row["cached"] for row in data["releases"])
    since = {fix["id"]: fix["present_from"] for fix in data["fixes"]}
    assert since == {"layer-offset": "0.22.0", "swa-config": "0.33.0", "cache-drop": "0.33.0"}
    assert data["all_present_from"] == "0.33.0"
    assert data["releases_from"] == "cache only (--offline)" and "cache only (--offline)" in stderr
    assert len(list((release_cache / "matrix").glob("*.json"))) == 3

    # The trees are gone: the second run answers from the matrix cache, checking nothing.
    for version in THREE:
        (release_cache / "releases" / version).unlink()
    code, again, _ = matrix("--offline", "--from", "0.20.0", env=env)
    assert code == 0 and all(row["cached"] for row in again["releases"])
    assert [row["fixes"] for row in again["releases"]] == [row["fixes"] for row in data["releases"]]
    assert again["fixes"] == data["fixes"]


@pytest.mark.release
def test_range_bounds_and_a_fix_present_in_the_oldest_release(release_cache):
    code, data, _ = matrix("--offline", "--from", "0.22.0", "--to", "0.33.0", env=env_for(release_cache))
    assert [row["release"] for row in data["releases"]] == ["0.22.0", "0.33.0"]
    layer = next(fix for fix in data["fixes"] if fix["id"] == "layer-offset")
    assert layer["present_from"] == "0.22.0" and layer["present_in_oldest_checked"] is True


@pytest.mark.release
def test_releases_come_from_the_package_index(release_cache):
    """The real index (pip's configured one) lists 0.22.0; its tree is in the cache, so nothing is downloaded."""
    code, data, stderr = matrix("--from", "0.22.0", "--to", "0.22.0", env=env_for(release_cache))
    assert code == 0, stderr
    assert data["releases_from"] == "package index" and stderr == ""
    assert [row["release"] for row in data["releases"]] == ["0.22.0"]


@pytest.mark.release
def test_unreachable_index_is_an_error_naming_it_and_only_offline_uses_the_cache(release_cache):
    """Issue 21.6: an index that does not answer is exit 3 naming it, not a matrix of the cached rows."""
    env = unreachable_index_env(release_cache)
    proc = run_cli("releases", "--from", "0.20.0", env=env)
    assert_error(proc, f"the package index {env['PIP_INDEX_URL']}")
    assert "cannot be reached" in proc.stderr and proc.stdout == ""
    code, data, stderr = matrix("--offline", "--from", "0.20.0", env=env)
    assert code == 0 and [row["release"] for row in data["releases"]] == list(THREE)
    assert data["releases_from"] == "cache only (--offline)"
    assert stderr.startswith("dflash-doctor: releases from the cache only (--offline)")


def unjudgeable_release(cache: Path, mini_tree) -> None:
    """A release 0.34.0 in the cache whose layer-offset the check cannot judge (its resolver renamed)."""
    tree = mini_tree("0.33.0")
    resolver = tree / "vllm/v1/worker/gpu_model_runner.py"
    resolver.write_text(
        resolver.read_text().replace("def _get_eagle3_aux_layers_from_config(", "def _aux_layers_from_cfg(")
    )
    tree.rename(cache / "releases" / "0.34.0")
    (cache / "releases" / "0.34.0" / ".complete").write_text("0.34.0\n")


@pytest.mark.release
def test_a_release_that_cannot_be_judged_keeps_the_recommendation(release_cache, mini_tree):
    """Issue 19.7: 0.34.0 with a fix unknown is listed as not judged; 0.33.0 stays the release to pick."""
    unjudgeable_release(release_cache, mini_tree)
    code, data, _ = matrix("--offline", "--from", "0.20.0", env=env_for(release_cache))
    assert code == 0
    assert data["releases"][-1]["release"] == "0.34.0" and data["releases"][-1]["fixes"]["layer-offset"] == "unknown"
    assert data["unjudged"] == ["0.34.0"]
    assert data["all_present_from"] == "0.33.0"
    assert {fix["id"]: fix["present_from"] for fix in data["fixes"]} == {
        "layer-offset": "0.22.0",
        "swa-config": "0.33.0",
        "cache-drop": "0.33.0",
    }
    assert data["summary"]["text"] == "all three fixes: vLLM 0.33.0 or later"
    table = run_cli("releases", "--offline", "--from", "0.20.0", env=env_for(release_cache)).stdout.splitlines()
    assert table[4].split() == ["0.34.0", "present", "unknown", "present", "not", "judged"]
    assert table[-2] == "not judged (a fix unknown; left out of the bottom line): 0.34.0"
    assert table[-1] == "bottom line: all three fixes: vLLM 0.33.0 or later"


@pytest.mark.release
def test_a_range_without_releases_is_an_error(tmp_path):
    proc = run_cli("releases", "--from", "0.20.3", "--to", "0.20.9", env=env_for(tmp_path / "empty"))
    assert proc.returncode == 3 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "dflash-doctor: error: the package index lists no vLLM release from 0.20.3 to 0.20.9"
    ]


def test_nothing_listed_and_nothing_cached_is_an_error(tmp_path):
    proc = run_cli("releases", "--offline", env=env_for(tmp_path / "empty"))
    assert proc.returncode == 3 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "dflash-doctor: error: cannot list vLLM releases (--offline) and no release in the range is cached"
    ]


@pytest.mark.parametrize(
    "args, message",
    [
        (("--from", "latest"), "not a release version: 'latest'"),
        (("--to", "0.2x"), "not a release version: '0.2x'"),
        (("--from", "0.30.0", "--to", "0.22.0"), "--from 0.30.0 is newer than --to 0.22.0"),
        (("--format", "html"), "html"),
    ],
)
def test_bad_arguments(tmp_path, args, message):
    proc = run_cli("releases", "--offline", *args, env=env_for(tmp_path / "empty"))
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and message in proc.stderr


@pytest.mark.release
def test_a_release_that_cannot_be_checked_is_marked_and_exits_3(release_cache):
    broken = release_cache / "releases" / "0.21.0"
    broken.mkdir()
    (broken / ".complete").write_text("0.21.0\n")  # a cache entry whose tree is gone
    proc = run_cli("releases", "--offline", "--from", "0.20.0", "--format", "json", env=env_for(release_cache))
    assert proc.returncode == 3
    data = json.loads(proc.stdout)
    jsonschema.Draft202012Validator(SCHEMA).validate(data)
    bad = next(row for row in data["releases"] if row["release"] == "0.21.0")
    assert "no vllm package under" in bad["error"] and data["exit_code"] == 3
    assert len([row for row in data["releases"] if "fixes" in row]) == 3
    assert proc.stderr.splitlines()[-1].startswith(
        "dflash-doctor: error: release 0.21.0 could not be checked: no vllm package"
    )
    assert not list((release_cache / "matrix").glob("0.21.0-*"))  # a failure is never cached


@pytest.mark.release
def test_table_and_markdown(release_cache):
    env = env_for(release_cache)
    table = run_cli("releases", "--offline", "--from", "0.20.0", env=env)
    assert table.returncode == 0
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["release", "cache-drop", "layer-offset", "swa-config", "all", "present"]
    assert lines[1].split() == ["0.20.1", "absent", "absent", "absent"]
    assert lines[3].split() == ["0.33.0", "present", "present", "present", "yes"]
    assert "  layer-offset: 0.22.0" in lines and "  every fix: 0.33.0" in lines
    assert lines[-1] == "bottom line: all three fixes: vLLM 0.33.0 or later"
    assert "\x1b[" not in table.stdout + table.stderr  # not a terminal: no colour, no progress
    markdown = run_cli("releases", "--offline", "--from", "0.20.0", "--format", "markdown", env=env).stdout
    assert "| release | `cache-drop` | `layer-offset` | `swa-config` | all present |" in markdown
    assert "| 0.22.0 | absent | present | absent |  |" in markdown
    assert "- every fix: 0.33.0" in markdown
    assert markdown.splitlines()[-1] == "Bottom line: all three fixes: vLLM 0.33.0 or later."


def run_on_terminal(args: list[str], env: dict) -> str:
    """Run the CLI with standard output and error on a real pseudo-terminal; everything it drew."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "dflash_doctor", *args], stdout=follower, stderr=follower, env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: the process is done
            break
        if not chunk:
            break
        chunks.append(chunk)
    proc.wait(timeout=600)
    os.close(leader)
    return b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.release
def test_progress_bar_only_on_a_terminal(release_cache):
    env = env_for(release_cache, DFLASH_DOCTOR_NO_CACHE="1", COLUMNS="120", TERM="xterm")
    drawn = run_on_terminal(["releases", "--offline", "--from", "0.20.0"], env)
    assert "━" in drawn and "vllm 0." in drawn  # the bar and the release being checked
    assert "0.33.0" in drawn and "present" in drawn
    piped = run_cli("releases", "--offline", "--from", "0.20.0", env=env)
    assert "━" not in piped.stderr and "vllm 0." not in piped.stderr


@pytest.mark.release
def test_no_color_is_respected_on_a_terminal(mini_tree):
    tree = str(mini_tree("0.20.1"))
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    env.update(TERM="xterm-256color", COLUMNS="160")
    coloured = run_on_terminal(["check", "--path", tree], env)
    assert "ABSENT" in coloured and COLOUR.search(coloured)  # the table shows verdicts in capitals
    plain = run_on_terminal(["check", "--path", tree], {**env, "NO_COLOR": "1"})
    assert "ABSENT" in plain and "layer-offset" in plain and not COLOUR.search(plain)


@pytest.mark.release
def test_offline_fetches_nothing_and_keeps_no_answer_it_could_not_reach(release_cache):
    """--offline with a release cached but not the transformers it loads drafter
    configs with: nothing is downloaded (pip is pointed at a port where nothing
    listens), the fix that needs it is not judged, and that unknown is not cached
    for a later run that can fetch."""
    (release_cache / "transformers").unlink()
    env = unreachable_index_env(release_cache)
    code, data, stderr = matrix("--offline", "--from", "0.33.0", "--to", "0.33.0", env=env)
    assert code == 0 and not (release_cache / "transformers").exists() and not list((release_cache / "tmp").glob("*"))
    row = data["releases"][0]
    assert row["fixes"]["swa-config"] == "unknown", row
    assert data["all_present_from"] is None and "0.33.0" in [r["release"] for r in data["releases"]]
    assert not list((release_cache / "matrix").glob("0.33.0-*"))
