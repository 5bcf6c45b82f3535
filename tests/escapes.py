"""Code that escapes the restricted builtins as a hostile peer would, for the
isolation tests: the frame walk (``WALK``), behaviour programs built from tree
files holding it, a real 0.33.0 tree whose resolver escapes, a session on one
local child, and the children this test process leaves."""

from __future__ import annotations

import os
import re
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dflash_doctor.behaviour.definitions import Locator
from dflash_doctor.behaviour.program import ProgramBuilder
from dflash_doctor.isolation.sandbox import Chunk, LocalPipe, child_program
from dflash_doctor.isolation.session import Session
from dflash_doctor.source import DirectoryTree

# Out of the restricted builtins, as an attacker would: a running generator's
# frame leads up the stack to the interpreter's real builtins.
WALK = """
def _top_frame():
    box = []

    def walk():
        frame = box[0].gi_frame.f_back
        while frame.f_back is not None:
            frame = frame.f_back
        yield frame

    box.append(walk())
    return next(box[0])


def _real(name):
    return _top_frame().f_builtins[name]


def _module(name):
    return _real("_" + "_import__")(name)
"""


def program_for(tmp_path: Path, source: str) -> tuple[list[Chunk], dict[str, dict[str, str]]]:
    """The program for the last function of a tree file holding WALK and ``source``."""
    name = re.findall(r"^def (\w+)", textwrap.dedent(source), re.M)[-1]
    root = tmp_path / "tree"
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text("")
    (root / "vllm" / "probed.py").write_text(WALK + textwrap.dedent(source))
    tree = DirectoryTree(root, None)
    builder = ProgramBuilder(tree, ())
    symbol = Locator(tree, [("vllm/probed.py", name)]).one("vllm/probed.py", name)
    assert symbol is not None, name
    builder.function(symbol)
    return builder.chunks, {gap: {"$gap": label} for gap, label in builder.gaps.items()}


def my_children() -> list[str]:
    """Processes (alive or zombie) whose parent is this test process."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == os.getpid():
            found.append(stat.parent.name)
    return found


def session_for(**limits: Any) -> Session:
    """A session on one local child, with bounds of our own."""
    return Session(LocalPipe(child_program()), **limits)


# The first lines of the hostile resolver: the real builtins and os, through WALK (appended to its module).
ESCAPE_BODY = '        real = _top_frame().f_builtins\n        os_module = _module("os")\n'
RESOLVER_START = (
    "        if not (self.speculative_config and self.speculative_config.draft_model_config):\n"
    "            return None\n"
)


def hostile_tree(mini_tree: Callable[[str], Path], action: str) -> Path:
    """A copy of the real 0.33.0 files the checks read, whose V1 aux-layer resolver escapes first."""
    tree = mini_tree("0.33.0")
    runner = tree / "vllm/v1/worker/gpu_model_runner.py"
    text = runner.read_text()
    assert text.count(RESOLVER_START) == 1
    runner.write_text(
        text.replace(RESOLVER_START, ESCAPE_BODY + textwrap.indent(action, " " * 8) + "\n" + RESOLVER_START) + WALK
    )
    return tree
