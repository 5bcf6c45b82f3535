"""Command help on a real terminal: paragraphs wrapped to its width, never a word split across
lines, descriptions given room (not squeezed into a narrow column next to the options)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest
import typer

from dflash_doctor.cli import HELP_MAX_WIDTH, app

MARK = "=== help of:"


def _commands(command, path=()):
    """(words, click command) for the root and every command under it."""
    yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from _commands(sub, (*path, name))


COMMANDS = list(_commands(typer.main.get_command(app)))


def _sources(command) -> str:
    """Every text the help of ``command`` shows, unwrapped: what a line break may only fall between words of."""
    ctx = command.context_class(command, info_name="dflash-doctor")
    texts = [command.help or ""]
    texts += [record[1] for param in command.get_params(ctx) if (record := param.get_help_record(ctx))]
    texts += [sub.get_short_help_str(limit=1000) for sub in getattr(command, "commands", {}).values()]
    return " ".join(" ".join(texts).split())


# One process shows every command's help in turn (a process per command costs seconds, and shows the same).
SHOW_ALL = f"""
import sys
from dflash_doctor.cli import main
for words in sys.argv[1:]:
    print({MARK!r} + words, flush=True)
    try:
        main([*words.split(), "--help"])
    except SystemExit:
        pass
"""


def _render_on_pty(columns: int) -> dict[tuple[str, ...], list[str]]:
    """Each command's --help as a real terminal of ``columns`` columns shows it (COLUMNS unset: the pty's size)."""
    show = [sys.executable, "-c", SHOW_ALL, *(" ".join(words) for words, _ in COMMANDS)]
    script = f"stty cols {columns} rows 50; {shlex.join(show)}"
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.run(["script", "-qec", script, "/dev/null"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    pages: dict[tuple[str, ...], list[str]] = {}
    for line in proc.stdout.replace("\r\n", "\n").split("\n"):
        if line.startswith(MARK):
            page = pages.setdefault(tuple(line[len(MARK) :].split()), [])
        else:
            page.append(line)
    assert set(pages) == {words for words, _ in COMMANDS}
    return pages


@pytest.fixture(scope="module", params=[80, 200])
def rendered(request):
    return request.param, _render_on_pty(request.param)


def _description_column(lines: list[str]) -> int | None:
    """Where option descriptions start: the column after a term and two spaces, on option rows."""
    columns = {m.start(2) for line in lines if (m := re.match(r"  (-\S.*?)\s{2,}(\S)", line))}
    assert len(columns) <= 1, columns
    return columns.pop() if columns else None


def _continuations(lines: list[str]):
    """(line, next line) pairs where the next line carries on the same description or paragraph."""
    column = _description_column(lines)
    in_text = True  # the paragraphs between "Usage:" and the first section
    for above, below in zip(lines, lines[1:]):
        if re.match(r"\S.*:$", below):
            in_text = False
        if not above.strip() or not below.strip() or above.startswith("Usage:"):
            continue
        if in_text and above.startswith("  ") and below.startswith("  ") and not below.startswith("   "):
            yield above, below
        elif (
            column
            and len(above) > column
            and above[column - 2 : column] == "  "
            and above[column] != " "
            and below[:column].isspace()
            and below[column] != " "
        ):
            yield above, below


def test_help_lines_break_between_words_and_only_when_full(rendered):
    columns, pages = rendered
    width = min(columns, HELP_MAX_WIDTH) - 2  # the longest line click writes (a two-column margin)
    checked = 0
    for words, command in COMMANDS:
        lines, source = pages[words], _sources(command)
        assert lines and lines[0].startswith("Usage: dflash-doctor"), lines[:3]
        for above, below in _continuations(lines):
            last, first = above.split()[-1], below.split()[0]
            assert f"{last} {first}" in source, f"{words}: a word split across lines:\n{above}\n{below}"
            assert len(above) + 1 + len(first) > width, f"{words}: broken before the line was full:\n{above}\n{below}"
            checked += 1
        assert all(len(line) <= columns for line in lines), (words, max(lines, key=len))
    assert checked > (50 if columns == 80 else 10)  # the checks above really ran over wrapped descriptions


def test_help_gives_descriptions_room(rendered):
    columns, pages = rendered
    lines = pages[("check",)]
    column = _description_column(lines)
    assert column is not None and column <= 36, column  # 80 columns leave the descriptions >= 44 characters
    if columns == 200:
        assert max(len(line) for line in lines) > 100  # a wide terminal is used, up to HELP_MAX_WIDTH
    summary = next(line for line in pages[()] if line.startswith("  check "))
    assert summary.rstrip().endswith("vLLM or SGLang tree.")  # one-sentence summaries, not cut off with "..."
    for words in ((), ("rules",)):
        cut = [line for line in pages[words] if line.startswith("  ") and line.rstrip().endswith("...")]
        assert not cut, cut
