"""Screens other than check's report on a real terminal of 60, 80 and 200 columns (issue 21): `accept`,
`rules list`, `rules show`, `config` and the download progress bar. No row is wider than the terminal (tmux
shows the rows as drawn: a row the terminal had to wrap fails ``in_tmux``), and no word is cut: every word
on the screen is a word of the same command's piped output, unless that word is longer than the room the
screen has for it. Also: the bare command prints its help (issue 21).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import pip_env, run_cli, run_process
from http_index import VERSION

from dflash_doctor.rulefile import load_rules
from metrics_server import COLLAPSED, FakeEngine
from terminals import in_tmux

WIDTHS = [60, 80, 200]
SLOW = pytest.mark.slow  # a tmux server and a command in it: a second or two each
HEADINGS = {"id", "engine", "PRs", "title"}  # the words a screen adds to the piped output: rules list's column headings
REFERENCE = Path(__file__).resolve().parent.parent / "rules" / "reference" / "drafters"
ACCEPT = ("--window", "0.1", "--drafter", "Qwen3-8B-DFlash-b16", "--dataset", "mt-bench")


def word(token: str) -> str:
    """A token without the punctuation and markup around it (Markdown's backticks, stars and pipes)."""
    return token.strip("`*|:,;.()[]'\"")


def assert_fits(rows: list[str], piped: str, width: int, room: int) -> None:
    """Every row within ``width``; every word on the screen a whole word of ``piped``, or a piece of one longer
    than ``room`` (the widest the screen can give it: a URL may have to be cut)."""
    words = {word(token) for token in piped.split()} | HEADINGS
    assert all(len(row) <= width for row in rows), max(rows, key=len)
    for row in rows:
        for token in map(word, row.split()):
            if not any(char.isalnum() for char in token) or token in words:
                continue
            assert any(len(whole) > room and token in whole for whole in words), (token, row)


def test_bare_command_prints_the_help():
    for group in ([], ["rules"]):
        bare, asked = run_process(*group), run_process(*group, "--help")
        assert (bare.returncode, bare.stderr) == (0, ""), (bare.returncode, bare.stderr)
        assert bare.stdout == asked.stdout and bare.stdout.startswith("Usage: dflash-doctor")
        assert "\\n" not in bare.stdout and len(bare.stdout.splitlines()) > 8


@SLOW
@pytest.mark.parametrize("width", WIDTHS)
def test_rules_list_on_a_terminal(width, tmp_path):
    rows = in_tmux(width, "rules", "list", tmp_path=tmp_path)
    piped = run_cli("rules", "list").stdout
    assert_fits(rows, piped, width, room=width)
    for line in piped.splitlines():  # each rule's id starts a row, and its PRs are all there
        fix_id, *prs = line.split("  ")[0].split() + re.findall(r"#\d+", line)
        assert any(row.startswith(fix_id + " ") for row in rows), (fix_id, rows)
        assert set(prs) <= set(re.findall(r"#\d+", "\n".join(rows)))
    assert (len(rows) == 1 + len(load_rules())) == (width == 200), (
        rows
    )  # a header and a row per rule when there is room


@SLOW
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("fix_id", ["swa-config", "layer-offset"])
def test_rules_show_renders_the_markdown(width, fix_id, tmp_path):
    rows = in_tmux(width, "rules", "show", fix_id, tmp_path=tmp_path)
    piped = run_cli("rules", "show", fix_id).stdout
    assert_fits(rows, piped, width, room=width)
    screen = "\n".join(rows)
    assert "|---" not in screen and "## " not in screen and "`" not in screen  # rendered, not raw
    assert "…" not in screen  # nothing cut short
    for heading in re.findall(r"^#+ (.+)$", piped, re.MULTILINE):
        assert heading.split(":")[0] in screen, heading
    if width == 200:
        assert max(map(len, rows)) > 120  # the width is used


@pytest.fixture
def drafter_config(tmp_path) -> Path:
    """A drafter config with errors, a warning and a note, in a directory with a long name."""
    config = json.loads((REFERENCE / "zlab-mixed.json").read_text())
    config["dflash_config"]["target_layer_ids"][-1] = 99
    config["layer_types"][-1] = "weird_attention"
    del config["block_size"]
    directory = tmp_path / "Qwen3.6-27B-DFlash-retrained-for-the-long-context-pool"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(config))
    return directory


@SLOW
@pytest.mark.parametrize("width", WIDTHS)
def test_config_on_a_terminal(width, drafter_config, tmp_path):
    rows = in_tmux(width, "config", str(drafter_config), tmp_path=tmp_path)
    piped = run_cli("config", str(drafter_config))
    assert piped.returncode == 1
    assert_fits(rows, piped.stdout, width, room=width)
    screen = " ".join(" ".join(rows).split())
    for line in piped.stdout.splitlines()[1:-1]:  # each finding's words, in order (the title may fold its path)
        assert " ".join(line.split()).removeprefix("fix: ").removeprefix("note: ").split(": ", 1)[-1] in screen, line
    assert rows[-1] == "2 error(s), 1 warning(s)"


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_accept_on_a_terminal(width, tmp_path):
    with FakeEngine({"m": COLLAPSED}) as engine:
        rows = in_tmux(width, "accept", "--metrics-url", engine.metrics_url, *ACCEPT, tmp_path=tmp_path)
        piped = run_cli("accept", "--metrics-url", engine.metrics_url, *ACCEPT)
    assert piped.returncode == 1
    screen = [steady(row) for row in rows]
    assert_fits(screen, steady(piped.stdout), width, room=width - 18)
    labels = [line[:13].strip() for line in piped.stdout.splitlines()]
    assert [row[2:18].strip() for row in rows if row[2:18].strip()] == labels
    if width == 200:
        assert max(map(len, rows)) > 120  # no longer a fixed 120 columns


def steady(text: str) -> str:
    """``text`` without what differs between two runs of accept: the server's port and the window's length."""
    return re.sub(r"(?<=127\.0\.0\.1:)\d+", "PORT", re.sub(r"(?<=window of )[\d.]+(?= s)", "T", text))


def on_a_terminal(width: int, args: list[str], env: dict[str, str]) -> list[str]:
    """Every line a terminal of ``width`` columns (a pty made by ``script``) was given while the command ran,
    each frame of a progress bar included, without the escape sequences."""
    command = shlex.join([sys.executable, "-m", "dflash_doctor", *args])
    env = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.run(
        ["script", "-qec", f"stty cols {width} rows 50; {command}", "/dev/null"],
        env=env,
        capture_output=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert proc.returncode in (0, 1, 2), proc.stdout.decode(errors="replace")[-2000:]
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", proc.stdout.decode("utf-8", "replace"))
    return [line for line in re.split(r"[\r\n]", plain) if line.strip()]


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_download_bar_is_one_line(width, tmp_path, index):
    server = index(seconds=3)
    lines = on_a_terminal(width, ["check", "--release", VERSION], pip_env(tmp_path, server.url))
    bar = [line for line in lines if line.startswith(f"vllm {VERSION}: ")]
    assert bar and all(len(line) <= width for line in bar), max(bar, key=len)  # (the report is test_render's)
    assert any("/2.5 MB" in line for line in bar), bar  # the size done of the total
    assert not any("?" in line for line in bar), bar  # nothing shown of an amount not known yet
    speeds = [line for line in lines if re.search(r"[kM]B/s", line)]
    assert speeds and all(line in bar for line in speeds), speeds  # the speed on the bar's own line
    assert any("━" in line for line in bar) == (width >= 80), bar  # a bar where there is room for one
    assert server.downloads == [f"vllm-{VERSION}-py3-none-any.whl"]
