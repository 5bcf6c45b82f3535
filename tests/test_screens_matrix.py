"""`releases` and `ancestry` as a real terminal of 60, 80 and 200 columns shows them (issue 21.5): no line
wider than the terminal, no word, sha or path cut (every word on screen is a word of the piped output)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import env_for, run_cli
from gitrepos import build_vllm_like

SGR = re.compile(r"\x1b\[[0-9;]*m")
TITLE = {"vLLM", "releases", "×", "DFlash", "fixes", "all", "present"}  # the terminal's own words


def on_screen(columns: int, args: list[str], env: dict) -> list[str]:
    """The lines standard output shows on a pty of ``columns`` columns (COLUMNS unset: the pty's own size)."""
    command = shlex.join([sys.executable, "-m", "dflash_doctor", *args]) + " 2>/dev/null"
    env = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.run(
        ["script", "-qec", f"stty cols {columns} rows 50; {command}", "/dev/null"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    return SGR.sub("", proc.stdout.replace("\r\n", "\n")).splitlines()


def bare(text: str) -> set[str]:
    """The words of ``text``, without the punctuation the two layouts place differently."""
    return {word.strip(":;,.()") for word in text.split()}


def assert_fits(lines: list[str], columns: int, words: set[str]) -> None:
    assert lines and all(len(line) <= columns for line in lines), max(lines, key=len)
    cut = bare("\n".join(lines)) - words
    assert not cut, cut


@pytest.fixture(scope="module")
def clone():
    """A vLLM-shaped clone at a short path, so that its path fits a 60-column line whole."""
    with tempfile.TemporaryDirectory(prefix="dd-") as root:
        yield build_vllm_like(Path(root) / "v")


@pytest.mark.release
@pytest.mark.parametrize("columns", [60, 80, 200])
def test_releases_screen_fits(release_cache, columns):
    env = env_for(release_cache, TERM="xterm-256color")
    run_cli("releases", "--offline", "--from", "0.20.0", env=env)  # fills the matrix cache: the screens below read it
    plain = run_cli("releases", "--offline", "--from", "0.20.0", env=env).stdout
    lines = on_screen(columns, ["releases", "--offline", "--from", "0.20.0"], env)
    assert_fits(lines, columns, bare(plain) | TITLE)
    assert lines[-1] == "bottom line: all three fixes: vLLM 0.33.0 or later"
    assert any(line.split()[:4] == ["0.33.0", "present", "present", "present"] for line in lines)


@pytest.mark.slow
@pytest.mark.parametrize("columns", [60, 80, 200])
def test_ancestry_screen_fits(clone, columns):
    args = ["ancestry", "--repo", str(clone.path), "--commit", "releases/v0.20"]
    plain = run_cli(*args).stdout
    lines = on_screen(columns, args, dict(os.environ, TERM="xterm-256color"))
    assert_fits(lines, columns, bare(plain))
    assert any(line.startswith("layer-offset #40727 contained (patch-id)") for line in lines), lines
