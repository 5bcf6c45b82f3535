"""The test suite's own rules: no test module imports another (fixtures live in
conftest.py, shared helpers in modules that are not test modules), and a test's
tier is checked where a slow thing starts (tests/tiers.py)."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import pytest

from sshd import SshServer
import tiers

TESTS = Path(__file__).resolve().parent


def is_test_module(name: str) -> bool:
    """``test_x``, ``tests.test_x`` or ``tests.test_x.y``: a name that imports a test module."""
    return any(part.startswith("test_") for part in name.split("."))


def imports_of_test_modules(directory: Path) -> list[str]:
    """``file:line: name`` for every import of a test module in the .py files under ``directory``."""
    found = []
    for path in sorted(directory.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):  # from test_x import y, from .test_x import y, from . import test_x
                names = [node.module or ""] + ([alias.name for alias in node.names] if node.level else [])
            else:
                continue
            found += [f"{path.relative_to(directory)}:{node.lineno}: {name}" for name in names if is_test_module(name)]
    return found


def test_no_test_module_imports_another() -> None:
    assert imports_of_test_modules(TESTS) == []


def test_imports_of_test_modules_are_found_in_every_form(tmp_path: Path) -> None:
    (tmp_path / "test_a.py").write_text("import test_b\nfrom test_b import f\nfrom tests.test_b import g\n")
    (tmp_path / "test_c.py").write_text("def f():\n    from .test_b import h\n    from . import test_b\n")
    (tmp_path / "helpers.py").write_text("import tiers\nfrom conftest import run_cli\nfrom testing import x\n")
    assert imports_of_test_modules(tmp_path) == [
        "test_a.py:1: test_b",
        "test_a.py:2: test_b",
        "test_a.py:3: tests.test_b",
        "test_c.py:2: test_b",
        "test_c.py:3: test_b",
    ]


def test_the_running_test_is_what_tiers_checks(request: pytest.FixtureRequest) -> None:
    assert tiers.running is request.node


def test_a_server_helper_fails_a_test_without_the_slow_marker(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    with pytest.raises(
        pytest.fail.Exception, match="test_a_server_helper_fails.* starts an OpenSSH server: mark it slow"
    ):
        SshServer(tmp_path / "sshd", tmp_path / "no-key")  # refused before anything starts
    assert not (tmp_path / "sshd").exists()
    request.node.add_marker(pytest.mark.slow)
    tiers.require("slow", "starts an OpenSSH server")  # with the marker it goes on


def test_the_release_fixture_fails_a_test_without_the_release_marker(release: Callable[[str], Path]) -> None:
    with pytest.raises(pytest.fail.Exception, match="reads the vLLM 0.20.1 wheel: mark it release"):
        release("0.20.1")
