"""The README, docs/index.md and docs/architecture.md kept in step with the code wherever a claim can be
checked mechanically (issue 21): the commands and options they name exist in the CLI, the modules,
packages and names architecture.md points to exist, and the counts they state (fixes, reference
drafters, skipped documentation tests) are the counts of the code.
"""

from __future__ import annotations

import importlib
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer

import documented
from dflash_doctor.rules import reference_dir
from dflash_doctor.cli import app
from dflash_doctor.rulefile import load_rules

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", REPO / "docs" / "index.md", REPO / "docs" / "architecture.md"]
ARCHITECTURE = REPO / "docs" / "architecture.md"
NUMBERS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}
CLI = typer.main.get_command(app)


def command_lines(text: str) -> list[str]:
    """``dflash-doctor ...`` as the page writes it: in inline code, or a line of a code block (comment cut).
    Inline code that starts with a command's name (`check --image`) is that command."""
    blocks = "\n".join(re.findall(r"^```[a-z]*\n(.*?)^```", text, re.DOTALL | re.MULTILINE))
    lines = re.findall(r"^(dflash-doctor [^#\n]*)", blocks, re.MULTILINE)
    for span in re.findall(r"`([^`\n]+)`", text):
        first = span.split()[0]
        if first == "dflash-doctor" or (first in CLI.commands and span != first):
            lines.append(span if first == "dflash-doctor" else f"dflash-doctor {span}")
    return lines


def resolve(words: list[str]) -> tuple[Any, list[str]]:
    """The command the words name, and the option names given to it."""
    command, options = CLI, []
    for word in words[1:]:
        if word.startswith("-"):
            options.append(word.split("=", 1)[0])
        elif hasattr(command, "commands") and not options:  # a group (typer carries its own click)
            assert word in command.commands, f"`{' '.join(words)}`: no command {word!r} in {sorted(command.commands)}"
            command = command.commands[word]
    return command, options


def option_names(command: Any) -> set[str]:
    return {name for param in command.params for name in param.opts + param.secondary_opts} | {"--help"}


def every_option() -> set[str]:
    names, todo = set(), [CLI]
    while todo:
        command = todo.pop()
        names |= option_names(command)
        todo.extend(getattr(command, "commands", {}).values())
    return names


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_commands_and_their_options_exist(page):
    lines = command_lines(page.read_text())
    assert len(lines) > 20 or page.name != "README.md", lines  # the README's commands were found
    for line in lines:
        words = shlex.split(line.replace("...", "x"))
        command, options = resolve(words)
        unknown = set(options) - option_names(command)
        assert not unknown, f"{page.name}: `{line}`: {command.name} has no {sorted(unknown)}"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_option_named_in_prose_exists(page):
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.DOTALL | re.MULTILINE)
    named = set(re.findall(r"`(--[a-z][a-z-]*)", text))
    tools = {"--require-hashes", "--generate-hashes"}  # pip's, in text about installing
    assert named - tools <= every_option(), sorted(named - tools - every_option())


def paragraphs(text: str) -> list[tuple[str | None, str]]:
    """architecture.md's paragraphs, each with the package its bold heading names (``**`behaviour/`**``)."""
    out = []
    for paragraph in re.split(r"\n\s*\n", text):
        heading = re.match(r"\*\*`([a-z_]+)/`", paragraph)
        out.append((heading.group(1) if heading else None, paragraph))
    return out


def module_file(name: str, package: str | None) -> Path | None:
    """Where ``name`` (``engine.py``, ``draft/session.py``) is in dflash_doctor: in the paragraph's package,
    else at the top, else (a paragraph about several packages) anywhere."""
    if name.startswith("tests/"):
        return REPO / name if (REPO / name).is_file() else None
    for base in ([package] if package else []) + [""]:
        path = REPO / "dflash_doctor" / base / name
        if path.is_file():
            return path
    return None if package else next((REPO / "dflash_doctor").rglob(name), None)


def test_architecture_names_modules_that_exist():
    checked = 0
    for package, paragraph in paragraphs(ARCHITECTURE.read_text()):
        if package:
            assert (REPO / "dflash_doctor" / package / "__init__.py").is_file(), package
        for name in re.findall(r"`([a-z_/]+\.py)`", paragraph):
            if name != "probe.py" or package is None:
                assert module_file(name, package), (package, name)
                checked += 1
    assert checked > 60


def test_architecture_names_attributes_that_exist():
    """`engine.FormReader`, `rules.QUESTIONS`, `model.exit_code_for`: each an attribute of that module."""
    checked = 0
    for package, paragraph in paragraphs(ARCHITECTURE.read_text()):
        for module, name in re.findall(r"`([a-z_]+)\.([A-Za-z_]+)`", paragraph):
            if name in ("py", "toml", "md", "json"):
                continue
            candidates = [f"dflash_doctor.{package}.{module}"] if package else []
            candidates.append(f"dflash_doctor.{module}")
            found = [c for c in candidates if importlib.util.find_spec(c) is not None]
            assert found, (package, module)
            assert hasattr(importlib.import_module(found[0]), name), f"{found[0]} has no {name}"
            checked += 1
    assert checked >= 5


def test_architecture_paths_in_the_repository_exist():
    for path in re.findall(r"`((?:rules|docs|schemas|benchmarks)/[^`]*)`", ARCHITECTURE.read_text()):
        assert list(REPO.glob(path.rstrip("/").replace("<id>", "*"))), path


def test_the_fix_tables_list_the_rules():
    for page in (REPO / "README.md", REPO / "docs" / "index.md"):
        for heading, engine in (("fix", "vllm"), ("SGLang fix", "sglang")):
            ids = {rule.id for rule in load_rules() if rule.engine == engine}
            table = re.search(rf"^\| {heading} \|.*?\n\n", page.read_text(), re.DOTALL | re.MULTILINE).group()
            listed = re.findall(r"^\| \[?`?([a-z]+(?:-[a-z]+)+)`?\]?", table, re.MULTILINE)
            assert sorted(listed) == sorted(ids), (page.name, engine, listed)


def test_counts_in_words_are_the_code_counts():
    text = " ".join(page.read_text() for page in PAGES)
    fixes = {NUMBERS[word] for word in re.findall(r"\b(two|three|four|five|six|seven) fixes\b", text)}
    drafters = {NUMBERS[word] for word in re.findall(r"\b(two|three|four|five|six|seven) reference drafters\b", text)}
    assert fixes == {len([rule for rule in load_rules() if rule.engine == "vllm" and rule.prs])}  # vLLM's defects
    assert drafters == {len(list(reference_dir().glob("*.json")))}


def test_the_readme_counts_the_documentation_tests_that_skip():
    skipped = sum(documented.why_not_here(command) is not None for command in documented.COMMANDS)
    stated = re.findall(
        r"skips (\d+) of the tests that run each command the\s+docs show", (REPO / "README.md").read_text()
    )
    assert stated == [str(skipped)]
