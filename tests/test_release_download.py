"""Downloading a release: real pip against a real package index on 127.0.0.1.

The index serves a small wheel built here (our own two-line package, plus
incompressible padding so the download takes a moment), slowly, so a
terminal (a pty from ``script``) sees the progress bar move. pip runs with
no configuration but the index URL, and every cache is under tmp_path.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from conftest import assert_error, pip_env, run_cli
from http_index import VERSION, WHEEL
from terminals import on_a_terminal

# ------------------------------------------------------------ one canonical release, one cached tree


@pytest.mark.slow
def test_tag_and_short_forms_name_one_cached_tree(tmp_path, index):
    server = index()
    env = pip_env(tmp_path, server.url)
    proc = run_cli("check", "--release", f"v{VERSION}", "--format", "json", env=env)
    assert proc.stdout, proc.stderr
    report = json.loads(proc.stdout)
    assert report["target"]["location"].endswith(f"releases/{VERSION}")
    releases = tmp_path / "cache" / "releases"
    assert sorted(os.listdir(releases)) == [VERSION] and (releases / VERSION / ".complete").is_file()
    assert (releases / VERSION / "vllm/__init__.py").is_file() and not (
        releases / VERSION / "vllm/padding.bin"
    ).exists()
    assert server.downloads == [WHEEL]

    for spelling in ("0.99", "V0.99.0", "0.99.0.0"):
        again = run_cli("check", "--release", spelling, "--format", "json", env=env)
        assert json.loads(again.stdout)["target"] == report["target"], again.stderr
    assert sorted(os.listdir(releases)) == [VERSION]  # never a second copy under 0.99
    assert server.downloads == [WHEEL]  # and no second download


@pytest.mark.release
def test_short_form_uses_the_cached_release(tmp_path, release):
    """0.20 is 0.20.0, already cached (a private cache linking the real tree; the
    index is a closed port): checked there, nothing downloaded or added."""
    env = pip_env(tmp_path)
    releases = tmp_path / "cache" / "releases"
    releases.mkdir(parents=True)
    (releases / "0.20.0").symlink_to(release("0.20.0"))
    proc = run_cli("check", "--release", "0.20", "--only", "layer-offset", "--format", "json", env=env)
    assert proc.stdout, proc.stderr
    assert json.loads(proc.stdout)["target"]["location"] == str((releases / "0.20.0").resolve())
    assert os.listdir(releases) == ["0.20.0"]


@pytest.mark.parametrize("spelling", ["0.20.x", "v", "vv0.20.1", "0.20.1-rc1", "../0.20.1"])
def test_not_a_release_is_refused_before_any_download(tmp_path, spelling):
    assert_error(run_cli("check", "--release", spelling, env=pip_env(tmp_path)), "not a release version")
    assert not (tmp_path / "cache").exists()


# ------------------------------------------------------------ what pip could not do, said as it is


@pytest.mark.release
def test_unreachable_index_is_reported_as_unreachable(tmp_path):
    env = pip_env(tmp_path)
    proc = run_cli("check", "--release", "0.23.0", env=env)
    assert_error(proc, f"the package index {env['PIP_INDEX_URL']}/vllm/ cannot be reached")
    assert "Connection refused" in proc.stderr and "PIP_INDEX_URL" in proc.stderr
    assert "not on the package index" not in proc.stderr
    assert not (tmp_path / "cache" / "releases").exists()


@pytest.mark.slow
@pytest.mark.release
def test_release_missing_from_a_reachable_index_is_reported_as_missing(tmp_path, index):
    server = index()
    proc = run_cli("check", "--release", "0.98.0", env=pip_env(tmp_path, server.url))
    assert_error(proc, "vLLM release 0.98.0 is not on the package index")
    assert server.downloads == []


def test_releases_without_a_reachable_index_or_a_cache_say_why(tmp_path):
    env = pip_env(tmp_path)
    proc = run_cli("releases", "--format", "json", env=env)
    assert_error(proc, f"the package index {env['PIP_INDEX_URL']}/vllm/ cannot be reached")
    assert (
        proc.stderr.rstrip().endswith("; or pass --offline for the releases already in the cache") and proc.stdout == ""
    )


# ------------------------------------------------------------ progress on a terminal


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("script") is None, reason="needs script(1) for a pty")
def test_check_release_shows_the_download_size_and_speed_on_a_terminal(tmp_path, index):
    server = index(seconds=3)
    shown = on_a_terminal(["check", "--release", VERSION], pip_env(tmp_path, server.url))
    assert f"vllm {VERSION}: downloading the wheel" in shown
    assert "/2.5 MB" in shown and "/s" in shown  # size done of the total, and speed
    assert server.downloads == [WHEEL]

    # Piped, nothing but the report (the release is cached now: download it again elsewhere).
    env = pip_env(tmp_path / "piped", server.url)
    proc = run_cli("check", "--release", VERSION, env=env)
    assert "downloading" not in proc.stderr and "MB" not in proc.stderr, proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("script") is None, reason="needs script(1) for a pty")
def test_releases_nests_the_download_bar_under_its_own(tmp_path, index):
    server = index(seconds=3)
    shown = on_a_terminal(["releases", "--from", VERSION, "--to", VERSION], pip_env(tmp_path, server.url))
    assert "0/1" in shown and f"vllm {VERSION}: downloading the wheel" in shown and "/2.5 MB" in shown
    assert "LiveError" not in shown and "Traceback" not in shown
    assert server.downloads == [WHEEL]


# ------------------------------------------------------------ the release cache is not an installation


@pytest.mark.release
def test_patch_of_a_tree_in_the_release_cache_says_what_is_wrong(tmp_path, mini_tree):
    cache = tmp_path / "cache"
    shutil.copytree(mini_tree("0.20.1"), cache / "releases" / "0.20.1")
    env = {**os.environ, "DFLASH_DOCTOR_CACHE": str(cache)}
    for args in (["--dry-run"], ["--yes"]):
        proc = run_cli("patch", "--path", str(cache / "releases" / "0.20.1"), *args, env=env)
        assert_error(proc, f"is in dflash-doctor's read-only release cache ({cache / 'releases'})")
        assert "give --path" not in proc.stderr
