"""The lint and type gate: ruff (lint and the formatter's layout) over the whole repository, mypy over the whole
package and the typed test modules pyproject.toml lists."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "tool",
    [
        pytest.param(["ruff", "check", "--no-cache", "."], id="ruff"),
        pytest.param(["ruff", "format", "--check", "--no-cache", "."], id="ruff-format"),
        pytest.param(["mypy", "--no-incremental"], id="mypy", marks=pytest.mark.slow),  # a mypy process: seconds
    ],
)
def test_the_repository_passes(tool: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-m", *tool], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
