"""The commands the README and docs/*.md show in ``sh`` / ``console`` blocks,
and why one cannot run here (tests/test_docs_commands.py runs the others as
pasted; tests/test_docs_claims.py counts them)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

# What a documented command needs that this machine does not have: (words that mark it, reason).
NEEDS = [
    ({"--host", "--hosts-file"}, "needs ssh hosts with vLLM (tests/test_ssh.py checks a real sshd on 127.0.0.1)"),
    ({"--metrics-url"}, "needs a running vLLM or SGLang server (tests/test_accept*.py serve real metrics)"),
    ({"--image"}, "needs a registry or an image built here (tests/test_image.py pushes real ones to a local registry)"),
    (
        {"ancestry", "--repo"},
        "needs a clone of vLLM's history at ~/src/vllm (tests/test_ancestry.py builds real repos)",
    ),
    ({"--install-completion"}, "writes the shell's startup files"),
    ({"pip"}, "installs into this environment (the tests run the checkout itself)"),
    ({"ansible-playbook"}, "needs an inventory of GPU hosts"),
    ({"./gate.sh"}, "needs GPU_HOST; tests/test_docs.py::test_shell_gate_step runs docs/ci/gate.sh"),
]
NEEDS_INDEX = (
    "asks the package index and fetches every release missing from the cache (182 MB by range requests "
    "from an empty one)"
)
NEEDS_TERMINAL = "asks for confirmation on a terminal"


@dataclass(frozen=True)
class Command:
    page: str
    line: int
    text: str  # as written, continuations joined

    @property
    def words(self) -> list[str]:
        return shlex.split(self.text, comments=True)

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.text}"


def documented_commands() -> list[Command]:
    """The commands of every ``sh`` and ``console`` block, in page order; a block that is a
    script (``#!``) is a file shown verbatim, not commands to paste."""
    commands = []
    for page in PAGES:
        text = page.read_text()
        for block in re.finditer(r"^```(sh|console)\n(.*?)^```", text, re.M | re.S):
            first = text[: block.start(2)].count("\n") + 1
            body = block.group(2)
            if body.startswith("#!"):
                continue
            pending, start = "", 0
            for offset, line in enumerate(body.splitlines()):
                if block.group(1) == "console" and not pending:
                    if not line.startswith("$ "):
                        continue  # output shown after the command
                    line = line[2:]
                pending, start = (pending + " " + line.strip(), start) if pending else (line.strip(), first + offset)
                if pending.endswith("\\"):
                    pending = pending[:-1].rstrip()
                    continue
                if pending and not pending.startswith("#"):
                    commands.append(Command(page.relative_to(REPO).as_posix(), start, pending))
                pending = ""
    return commands


COMMANDS = documented_commands()


def why_not_here(command: Command) -> str | None:
    """What the command needs that this machine does not have, or None."""
    words = command.words
    for marks, reason in NEEDS:
        if marks & set(words):
            return reason
    if words[:2] == ["dflash-doctor", "releases"] and "--offline" not in words:
        return NEEDS_INDEX
    if words[:2] == ["dflash-doctor", "patch"] and not {"--yes", "-y", "--dry-run"} & set(words):
        return NEEDS_TERMINAL
    return None
