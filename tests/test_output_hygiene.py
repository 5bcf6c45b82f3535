"""Terminal injection (issue 12): strings from a tree, a file or a host reach the terminal inert.

The hostile tree carries ESC/CSI/OSC/BEL/CR/C1 sequences, rich markup and an emoji code in
its version, a file name and probe file names; the report is rendered through a real pty
(``script``), where the tool sees a terminal and rich styles its own cells.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_cli

from dflash_doctor.terminal import clean

FAKE_ROW = "\r\n│ swa-config │ [bold green]present[/] │ :thumbs_up:\nswa-config    PRESENT  fine"
HOSTILE = "0.19.0\x1b[2J\x1b]0;pwned\x07\x9b31m\u202e" + FAKE_ROW
SGR = re.compile(r"\x1b\[[0-9;]*m")  # rich's own styling: the only escape sequence allowed out


def in_pty(*args: str, stderr: Path) -> str:
    """The CLI's standard output as a terminal shows it (script gives it a pty; CRLF back to LF).
    Standard error goes to a file, so rich's progress bar does not mix its cursor moves in."""
    command = shlex.join([sys.executable, "-m", "dflash_doctor", *args]) + " 2>" + shlex.quote(str(stderr))
    proc = subprocess.run(
        ["script", "-qefc", command, "/dev/null"],
        capture_output=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "400", "LINES": "50", "TERM": "xterm-256color"},
    )
    return proc.stdout.decode("utf-8").replace("\r\n", "\n")


def assert_inert(output: str) -> str:
    """No control character but rich's SGR styling and line breaks; returns the text without styling."""
    text = SGR.sub("", output)
    controls = sorted(
        {
            hex(ord(c))
            for c in text
            if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F or 0x202A <= ord(c) <= 0x202E
        }
    )
    assert not controls, controls
    return text


def no_fake_present(text: str) -> None:
    assert not re.search(r"│\s*present\s*│", text), text
    assert not re.search(r"^\S+: present\b", text, re.M), text
    assert not re.search(r"^\S+\s+PRESENT\b", text, re.M), text  # a fix's first line: id, verdict, headline


def hostile_tree(mini_tree) -> Path:
    """A 0.19.0 tree (no fix applies: every verdict is not-applicable) whose version is hostile."""
    tree = mini_tree("0.19.0")
    next(tree.glob("vllm-*.dist-info")).joinpath("METADATA").unlink()  # the version then comes from _version.py
    (tree / "vllm" / "_version.py").write_text(f"__version__ = {HOSTILE!r}\n__commit_id__ = 'g2a69949bd'\n")
    return tree


def test_clean_escapes_every_control_character():
    assert clean("a\x1b[2Jb\x07c\rd\ne\tf\x7f\x9b\u202eg") == "a\\x1b[2Jb\\x07c\\rd\\ne\\tf\\x7f\\x9b\\u202eg"
    assert clean("[green]present[/] :smile: é 漢") == "[green]present[/] :smile: é 漢"
    assert clean("diff\n\tline\x1b", keep="\n\t") == "diff\n\tline\\x1b"


@pytest.mark.release
def test_table_on_a_terminal_prints_tree_strings_literally(mini_tree, tmp_path):
    output = in_pty("check", "--path", str(hostile_tree(mini_tree)), stderr=tmp_path / "stderr")
    assert "NOT-APPLICABLE" in output  # the report is there
    text = assert_inert(output)
    assert "[bold green]present[/]" in text and ":thumbs_up:" in text  # markup and emoji codes shown as typed
    assert "\\x1b[2J" in text and "\\x07" in text
    no_fake_present(text)


@pytest.mark.release
def test_plain_table_keeps_one_line_per_row(mini_tree):
    proc = run_cli("check", "--path", str(hostile_tree(mini_tree)))
    assert proc.returncode == 1, proc.stderr
    text = assert_inert(proc.stdout)
    assert "\x1b" not in proc.stdout
    no_fake_present(text)
    assert text.splitlines()[0].startswith("vLLM 0.19.0\\x1b[2J")


@pytest.mark.release
def test_json_keeps_the_data_and_stays_json(mini_tree):
    proc = run_cli("check", "--path", str(hostile_tree(mini_tree)), "--format", "json")
    assert "\x1b" not in proc.stdout  # json.dumps escapes controls itself
    assert json.loads(proc.stdout)["engine"]["version"] == HOSTILE


@pytest.mark.release
def test_hostile_file_name_in_evidence(mini_tree, tmp_path):
    """The anchor file moved to a file whose name drives a terminal: the scan finds it, the table shows it inert."""
    tree = mini_tree("0.33.0")
    models = tree / "vllm" / "model_executor" / "models"
    (models / "qwen3_dflash.py").rename(models / "\x1b]0;pwned\x07[green]x.py")
    output = in_pty("check", "--path", str(tree), "--only", "swa-config", stderr=tmp_path / "stderr")
    text = assert_inert(output)
    assert "\\x1b]0;pwned\\x07[green]x.py" in text


@pytest.mark.release
def test_error_message_is_one_inert_line(mini_tree, tmp_path):
    waivers = tmp_path / "w\x1b]0;pwned\x07\n[red]x.toml"
    proc = run_cli("check", "--path", str(mini_tree("0.33.0")), "--waivers", str(waivers))
    assert proc.returncode == 3
    assert proc.stderr.count("\n") == 1 and "\x1b" not in proc.stderr and "\x07" not in proc.stderr
    assert "w\\x1b]0;pwned\\x07\\n[red]x.toml does not exist" in proc.stderr


def test_fleet_table_shows_host_names_and_errors_literally(tmp_path):
    probes = tmp_path / "probes"
    probes.mkdir()
    for name in ("\x1b]0;pwned\x07[bold green]present", "gpu\x1b[2J\r\x9b31m"):
        (probes / f"{name}.txt").write_text("not a probe answer\x1b[2J\x07\n")
    output = in_pty("check", "--from-probe", str(probes), stderr=tmp_path / "stderr")
    text = assert_inert(output)
    assert_inert((tmp_path / "stderr").read_text())
    assert "[bold green]present" in text and "error" in text
    no_fake_present(text)
