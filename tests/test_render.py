"""The check and fleet reports as a person reads them (issue 13): on a real terminal (tmux) at 80 and 200
columns, and piped.

tmux gives the CLI a real pty of a set size; ``capture-pane -p`` without ``-J`` shows each row as the
terminal drew it, so a line the tool made too long shows up as a row the terminal wrapped (``-J`` joins
those rows again: the two captures differ).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import check_json, run_cli
from terminals import in_tmux

RELEASE = pytest.mark.release  # real release trees, read from the download cache


def fix_blocks(rows: list[str], ids: list[str]) -> dict[str, list[str]]:
    """Each fix's rows: from the row that starts with its id to the blank row after it."""
    blocks: dict[str, list[str]] = {}
    for index, row in enumerate(rows):
        fix_id = row.split(" ", 1)[0]
        if fix_id in ids:
            end = rows.index("", index) if "" in rows[index:] else len(rows)
            blocks[fix_id] = rows[index:end]
    assert list(blocks) == ids, rows
    return blocks


def continued(block: list[str], index: int) -> str:
    """The words of row ``index`` and of the continuation rows (indented deeper than a label) after it."""
    words = block[index].split()
    for row in block[index + 1 :]:
        if not row.startswith("   "):
            break
        words += row.split()
    return " ".join(words)


def sentence(block: list[str], label: str) -> str:
    """The words of a labelled field, its wrapped rows joined."""
    index = next(i for i, row in enumerate(block) if row.startswith(f"  {label} "))
    return continued(block, index).removeprefix(label + " ")


@RELEASE
@pytest.mark.parametrize(
    ("version", "width", "most"),
    [
        ("0.30.0", 80, 35),
        ("0.30.0", 200, 24),
        ("0.19.0", 80, 30),
        ("0.19.0", 200, 22),
        ("0.33.0", 80, 26),
        ("0.33.0", 200, 18),
        ("0.30.0", 60, 42),
    ],
)
def test_check_on_a_terminal(version, width, most, tmp_path):
    _, report = check_json("--release", version)
    rows = in_tmux(width, "check", "--release", version, tmp_path=tmp_path)
    assert rows[0].startswith(f"vLLM {version} ")
    assert all(len(row) <= width for row in rows)
    assert len(rows) <= most, "\n".join(rows)
    blocks = fix_blocks(rows, [fix["id"] for fix in report["fixes"]])
    for fix in report["fixes"]:
        block = blocks[fix["id"]]
        headline = fix["headline"] or fix["title"]
        assert re.match(rf"^{re.escape(fix['id'])} +{re.escape(fix['status'].upper())}  \S", block[0]), block[0]
        assert continued(block, 0).split(None, 2)[2] == " ".join(headline.split())  # wrapped at words only
        for item in fix["evidence"]:
            place = f"{item['file']}:{item['line']}"
            assert any(re.search(rf"(^| ){re.escape(place)}( |$)", row) for row in block), (place, block)
        assert ("remedy" in " ".join(row[:12] for row in block)) == (fix["status"] != "present")
        if fix["reason"]:
            assert sentence(block, "why") == " ".join(fix["reason"].split())
    if version == "0.30.0":  # partial: the reason says in words which configurations work and which fail
        cache_drop = blocks["cache-drop"]
        why = sentence(cache_drop, "why")
        assert (
            why.startswith("fails for z-lab drafters") and "works for" in why and "disable_eagle_block_drop" in why
        ), why
        assert sentence(cache_drop, "remedy").startswith("Upgrade")


@RELEASE
def test_wider_terminal_fewer_lines(tmp_path):
    narrow = in_tmux(80, "check", "--release", "0.30.0", tmp_path=tmp_path)
    wide = in_tmux(200, "check", "--release", "0.30.0", tmp_path=tmp_path)
    assert len(wide) < len(narrow) - 5, (narrow, wide)
    assert max(map(len, wide)) > 120  # the width is used


@RELEASE
def test_colour_on_a_terminal_plain_when_piped(tmp_path):
    styled = "\n".join(in_tmux(80, "check", "--release", "0.30.0", tmp_path=tmp_path, colour=True))
    assert re.search(r"\x1b\[[0-9;]*m\s*PARTIAL", styled) or "PARTIAL\x1b" in styled
    piped = run_cli("check", "--release", "0.30.0")
    assert piped.returncode == 1 and "\x1b" not in piped.stdout


@RELEASE
def test_piped_report_one_line_per_item():
    proc = run_cli("check", "--release", "0.30.0")
    _, report = check_json("--release", "0.30.0")
    rows = proc.stdout.splitlines()
    assert rows[0].startswith("vLLM 0.30.0 commit ") and rows[0].endswith("inspected files match RECORD")
    for fix in report["fixes"]:
        headline = fix["headline"] or fix["title"]
        assert re.search(
            rf"^{re.escape(fix['id'])} +{fix['status'].upper()}  {re.escape(headline)}$", proc.stdout, re.M
        )
        for item in fix["evidence"]:
            assert re.search(
                rf"^(  evidence)? +{re.escape(item['file'])}:{item['line']} {re.escape(item['symbol'])}$",
                proc.stdout,
                re.M,
            )
        if fix["reason"]:
            assert f"  why         {fix['reason']}" in rows
    assert "  remedy      " + next(f["remedy"] for f in report["fixes"] if f["id"] == "cache-drop") in rows
    not_present = sum(fix["status"] != "present" for fix in report["fixes"])
    assert (
        sum(row.startswith("  remedy ") for row in rows) == not_present
    )  # one per fix that is not present, none for present
    assert "[" not in "".join(row for row in rows if row.startswith("  evidence"))  # no form slugs


@pytest.fixture
def fleet_answers(tmp_path, release):
    """Real probe answers of 0.30.0 and 0.33.0, and a host whose answer is junk."""
    script = run_cli("probe-script")
    (tmp_path / "probe.py").write_text(script.stdout)
    answers = tmp_path / "answers"
    answers.mkdir()
    for name, version in (("gpu-node-7", "0.30.0"), ("gpu-node-8", "0.33.0")):
        env = {**os.environ, "PYTHONPATH": str(release(version))}
        out = subprocess.run(
            [sys.executable, str(tmp_path / "probe.py")], capture_output=True, text=True, env=env, check=True
        )
        (answers / f"{name}.probe").write_text(out.stdout)
    (answers / "gpu-node-9.probe").write_text("no probe here\n")
    return answers


@RELEASE
@pytest.mark.parametrize("width", [80, 200])
def test_fleet_error_across_the_host_row(fleet_answers, tmp_path, width):
    rows = in_tmux(width, "check", "--from-probe", fleet_answers.name, tmp_path=tmp_path, cwd=fleet_answers.parent)
    assert re.match(r"^host +cache-drop +layer-offset +swa-config$", rows[1]), rows
    assert re.match(r"^gpu-node-7 +PARTIAL +PRESENT +PRESENT$", rows[2]), rows
    assert re.match(r"^gpu-node-8 +PRESENT +PRESENT +PRESENT$", rows[3]), rows
    error = re.match(r"^gpu-node-9 +error: probe file answers/gpu-node-9\.probe did not answer", rows[4])
    assert error and error.start(0) == 0 and rows[4].index("error:") == rows[1].index("cache-drop"), rows
    assert rows[-2:] == ["", "bottom line: cache-drop: vLLM 0.33.0 or later"], rows  # over the hosts checked
    assert len(rows) - 2 <= 6 if width == 80 else len(rows) - 2 == 5


@RELEASE
def test_fleet_piped(fleet_answers):
    proc = run_cli("check", "--from-probe", fleet_answers.name, cwd=fleet_answers.parent)
    rows = proc.stdout.splitlines()
    assert proc.returncode == 3 and "\x1b" not in proc.stdout
    assert re.match(r"^gpu-node-7 +PARTIAL +PRESENT +PRESENT$", rows[2]), rows
    assert re.match(
        r"^gpu-node-9 +error: probe file answers/gpu-node-9\.probe did not answer the probe \(.*\)$", rows[4]
    )
    assert rows[4].index("error:") == rows[1].index("cache-drop") and len(rows) == 7
    assert rows[5:] == ["", "bottom line: cache-drop: vLLM 0.33.0 or later"]


@RELEASE
def test_fleet_with_a_long_host_stacks_at_80(fleet_answers, tmp_path):
    long_host = "gpu-node-" + "0123456789" * 7
    (fleet_answers / "gpu-node-7.probe").rename(fleet_answers / f"{long_host}.probe")
    rows = in_tmux(80, "check", "--from-probe", fleet_answers.name, tmp_path=tmp_path, cwd=fleet_answers.parent)
    assert long_host in rows
    assert re.match(r"^ +PARTIAL +PRESENT +PRESENT$", rows[rows.index(long_host) + 1]), rows
    assert re.match(r"^ +error: ", rows[rows.index("gpu-node-9") + 1]), rows


@RELEASE
def test_waiver_and_drafter_shown_on_a_terminal(tmp_path):
    """A waived fix and a fix that cannot affect the given drafter keep their verdict and say
    so on a line of their own."""
    waivers = tmp_path / "waivers.toml"
    waivers.write_text(
        '[[waiver]]\nid = "cache-drop"\nreason = "prefix caching is off on this pool"\nuntil = "2099-12-31"\n'
    )
    drafter = Path(__file__).parent / "data" / "drafters" / "qwen3-8b-dflash-b16.json"  # full attention only
    args = ("check", "--release", "0.24.0", "--draft-config", str(drafter), "--waivers", str(waivers))
    _, report = check_json(*args[1:])
    swa = next(fix for fix in report["fixes"] if fix["id"] == "swa-config")
    assert swa["status"] == "absent" and swa["affects_drafter"] is False
    rows = in_tmux(80, *args, tmp_path=tmp_path)
    blocks = fix_blocks(rows, ["cache-drop", "layer-offset", "swa-config"])
    assert re.match(r"^cache-drop +ABSENT  ", blocks["cache-drop"][0])
    assert sentence(blocks["cache-drop"], "waived") == "until 2099-12-31: prefix caching is off on this pool"
    assert re.match(r"^swa-config +ABSENT  ", blocks["swa-config"][0])
    assert sentence(blocks["swa-config"], "drafter").startswith("does not affect this drafter: ")
    assert "drafter config" in "\n".join(rows)  # the drafter lint section still renders


@RELEASE
def test_guide_example_is_what_the_tool_prints(tmp_path):
    """docs/guide.md shows `check --release 0.30.0` at 80 columns: the fixes' lines as the tool prints them."""
    guide = (Path(__file__).resolve().parent.parent / "docs" / "guide.md").read_text()
    example = re.search(r"`check --release 0\.30\.0` at 80 columns:\n\n```text\n(.*?)\n```", guide, re.S).group(1)
    rows = in_tmux(80, "check", "--release", "0.30.0", tmp_path=tmp_path)
    documented = example.split("\n")
    assert documented[documented.index("") :] == rows[rows.index("") :]  # the header names this machine's cache


@RELEASE
@pytest.mark.parametrize("pad", [72, 73, 150])
def test_a_hostile_version_cannot_fake_a_fix_line_at_80(mini_tree, tmp_path, pad):
    """A version holding a fake fix line, padded so the terminal would wrap it to column 0: split at its spaces
    instead, it starts indented; no row but the real ones starts with a fix id and a verdict."""
    tree = mini_tree("0.19.0")  # every fix not-applicable: a PRESENT row can only be fake
    next(tree.glob("vllm-*.dist-info")).joinpath("METADATA").unlink()  # the version then comes from _version.py
    fake = "0.19.0" + " " * pad + "swa-config    PRESENT  The drafter's sliding windows reach its attention layers."
    (tree / "vllm" / "_version.py").write_text(f"__version__ = {fake!r}\n__commit_id__ = 'g2a69949bd'\n")
    rows = in_tmux(80, "check", "--path", str(tree), tmp_path=tmp_path)
    assert not [row for row in rows if re.match(r"^\S+ +PRESENT\b", row)], rows
    assert [row.split()[:2] for row in rows if re.match(r"^\S+ +[A-Z-]+  ", row)] == [
        ["cache-drop", "NOT-APPLICABLE"],
        ["layer-offset", "NOT-APPLICABLE"],
        ["swa-config", "NOT-APPLICABLE"],
    ]
    assert "  swa-config    PRESENT  The drafter's" in "\n".join(rows)  # shown, indented, as the tree wrote it


def test_layout_wraps_words_and_never_cuts_a_token():
    from dflash_doctor.reporters.layout import text_of, words, wrap

    def laid(tokens, width, first=(), indent=4):
        return [text_of(line) for line in wrap(tokens, width, list(first), indent)]

    path = ("vllm/transformers_utils/configs/speculators/algos.py:122", "")
    assert laid(words("one two three four"), 14, [("label ", "")]) == ["label one two", "    three four"]
    assert laid([path, *words("is read")], 40, [("evidence", "")], 12) == [
        "evidence",
        f"    {path[0]}",
        " " * 12 + "is read",
    ]
    assert laid([path], None, [("evidence ", "")], 12) == [f"evidence {path[0]}"]  # piped: nothing wraps
    assert laid(words("pad    kept here"), 80) == ["pad    kept here"]
    spaced = ("x" * 70 + " fix    PRESENT  fake", "")  # wider than any line, with spaces: split at them
    assert laid([spaced], 60, [("vLLM", "")], 2) == ["vLLM", "  " + "x" * 70, "  fix    PRESENT  fake"]
