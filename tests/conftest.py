"""Shared fixtures: real vLLM release trees (downloaded once, cached) and
small trees built from them for altered-code tests.

Markers come from what a test's code reaches (itself, its fixtures, and the
module functions they call): one that reaches ``release_tree`` or runs the CLI
with ``--release <version>`` is marked ``release``, one that reaches a helper
known to take seconds (``SLOW_HELPERS``) is marked ``slow``, so
``pytest -m "not release and not slow"`` is the fast tier, and
``pytest -m "not release"`` never downloads or reads a wheel. Every test that
is not marked ``release`` runs with an empty cache and pip pointed at nothing,
so one that reads a wheel anyway fails in both tiers instead of quietly making
the fast tier slow. ``run_cli`` runs a command in the test process (a Python
start costs a third of a second per command); ``run_process`` starts
the real entry point where the process itself is what a test proves.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from dflash_doctor.cli import main
from dflash_doctor.rulefile import load_rules
from dflash_doctor.targets.release import RELEASE, release_tree

# The rule texts and applicability of the small demo rules that tests write.
DEMO_RULE_PREAMBLE = '''
what = "w"
why = "y"
remedy = "r"
[headlines]
present = "p"
absent = "a"
partial = "pa"
not-applicable = "na"
unknown = "u"
[applies]
file = "vllm/config/speculative.py"
symbol = "SpeculativeConfig"
literal = "dflash"
remedy = "i"
'''

# Test helpers (a module, or module.name) that make a test take seconds.
SLOW_HELPERS = {
    "gitrepos",  # real git histories
    "sshd",  # real OpenSSH servers
    "metrics_server",  # real metrics servers, sampled over real time windows
    "registry.Registry",  # a real image registry
    "registry.TokenServer",  # a real token server in front of it
    "test_release_download.Index",  # real pip against an index that serves slowly on purpose
    "test_ssh_hostile.bomb_answer",  # compresses 1 GiB
    "test_stamp.settle",  # waits out the package stamp's racy window (2 s)
}

# Files a check of these releases reads, plus what makes a tree a tree.
TREE_FILES = ["vllm/__init__.py", "vllm/_version.py"]


def reached(item: pytest.Item) -> tuple[list, set[str]]:
    """The globals and string constants that the test, its fixtures and the
    module functions they call (transitively) name in their code."""
    functions = [getattr(item, "function", None)]
    info = getattr(item, "_fixtureinfo", None)  # pytest's record of the fixtures a test function uses
    for definitions in (info.name2fixturedefs.values() if info else ()):
        functions.extend(definition.func for definition in definitions)
    values, strings = [], set()
    for function in functions:
        if isinstance(function, types.FunctionType):
            named, constants = _reached_from(function)
            values.extend(named)
            strings |= constants
    return values, strings


@functools.cache
def _reached_from(root: types.FunctionType) -> tuple[tuple, frozenset[str]]:
    """What ``root`` and the module functions it calls name: walked once per
    function (tests share fixtures, parametrized tests their function)."""
    todo, seen, values, strings = [root], {root}, [], set()
    while todo:
        function = todo.pop()
        codes = [function.__code__]
        while codes:
            code = codes.pop()
            strings.update(const for const in code.co_consts if isinstance(const, str))
            codes.extend(const for const in code.co_consts if isinstance(const, types.CodeType))
            for name in code.co_names:
                value = function.__globals__.get(name)
                values.append(value)
                if isinstance(value, types.FunctionType) and value not in seen:
                    seen.add(value)
                    todo.append(value)
    return tuple(values), frozenset(strings)


def reads_wheels(values: list, strings: set[str]) -> bool:
    """It calls ``release_tree`` (the ``release`` and ``mini_tree`` fixtures do), or runs
    the CLI with ``--release`` and a version (the CLI downloads that release)."""
    if any(value is release_tree for value in values):
        return True
    return "--release" in strings and any(RELEASE.fullmatch(string) for string in strings)


def takes_seconds(values: list) -> bool:
    for value in values:
        module = getattr(value, "__module__", None)
        if module in SLOW_HELPERS or f"{module}.{getattr(value, '__qualname__', '')}" in SLOW_HELPERS:
            return True
    return False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        values, strings = reached(item)
        if reads_wheels(values, strings) and item.get_closest_marker("release") is None:
            item.add_marker(pytest.mark.release)
        if takes_seconds(values):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session", autouse=True)
def no_results_cache():
    """Every check in the tests evaluates the rules; the results cache has its own test."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DFLASH_DOCTOR_NO_CACHE", "1")
        yield


@pytest.fixture(scope="session")
def empty_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("empty-cache")


@pytest.fixture(autouse=True)
def no_wheels_unless_marked(request, empty_cache, monkeypatch):
    """A test not marked ``release`` gets an empty cache and an index that does not answer."""
    if request.node.get_closest_marker("release") is not None:
        yield
        return
    monkeypatch.setenv("DFLASH_DOCTOR_CACHE", str(empty_cache))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # no extra index or link from a pip.conf
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    yield
    assert not (empty_cache / "releases").exists() and not (empty_cache / "tmp").exists(), (
        f"{request.node.nodeid} reached for a vLLM wheel: mark it release (the release and mini_tree fixtures do)"
    )


@pytest.fixture(scope="session")
def release():
    """``release("0.20.1")`` -> the extracted tree of that real wheel."""
    return release_tree


def rule_files() -> list[str]:
    return sorted({relpath for rule in load_rules() for relpath in rule.files})


@pytest.fixture
def mini_tree(tmp_path):
    """``mini_tree("0.22.0")`` -> a copy of the files the rules read, with dist-info."""

    def build(version: str, name: str = "tree") -> Path:
        source = release_tree(version)
        dest = tmp_path / f"{name}-{version}"
        for relpath in TREE_FILES + rule_files():
            if (source / relpath).is_file():
                (dest / relpath).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source / relpath, dest / relpath)
        for dist_info in source.glob("vllm-*.dist-info"):
            shutil.copytree(dist_info, dest / dist_info.name)
        return dest

    return build


def run_process(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``python -m dflash_doctor args`` in its own process: for tests where the
    process is the point (its imports, exit at interpreter shutdown, signals, limits)."""
    return subprocess.run(
        [sys.executable, "-m", "dflash_doctor", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=900
    )


def run_cli(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``dflash-doctor args`` in this process: ``cli.main`` with the words, the
    environment ``env`` (all of it, as a child would get it) and ``cwd``, an empty
    standard input, and standard output and error captured as a pipe carries them."""
    out, err = io.BytesIO(), io.BytesIO()
    with pytest.MonkeyPatch.context() as patch:
        if env is not None:
            for key in set(os.environ) - set(env):
                patch.delenv(key)
            for key, value in env.items():
                patch.setenv(key, value)
        if cwd is not None:
            patch.chdir(cwd)
        patch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(), encoding="utf-8"))
        patch.setattr(sys, "stdout", io.TextIOWrapper(out, encoding="utf-8", write_through=True))
        patch.setattr(sys, "stderr", io.TextIOWrapper(err, encoding="utf-8", errors="backslashreplace", write_through=True))
        with pytest.raises(SystemExit) as ended:
            main([os.fspath(arg) for arg in args])
        stdout, stderr = out.getvalue().decode(), err.getvalue().decode()  # before the wrappers go and close them
    return subprocess.CompletedProcess(["dflash-doctor", *args], ended.value.code, stdout, stderr)


def check_json(*args: str, **kwargs) -> tuple[int, dict]:
    proc = run_cli("check", *args, "--format", "json", **kwargs)
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def statuses(report: dict) -> dict[str, str]:
    return {fix["id"]: fix["status"] for fix in report["fixes"]}


def assert_error(proc, fragment: str) -> None:
    assert proc.returncode == 3, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dflash-doctor: error: ") and fragment in lines[0], lines


class ProbeAnswerOf:
    """A target judged from a collector answer holding ``tree``'s .py files, as
    ``--from-probe`` reads one (structure only: nothing runs the tree's code)."""

    def __init__(self, tree: Path) -> None:
        self.tree = tree

    def resolve(self):
        from dflash_doctor.targets.snapshot import snapshot_target

        files = {str(p.relative_to(self.tree)): p.read_bytes() for p in self.tree.rglob("*.py")}
        answer = {"root": str(self.tree), "files": {k: v.decode("latin-1") for k, v in files.items()},
                  "sha256": {k: hashlib.sha256(v).hexdigest() for k, v in files.items()}}
        return snapshot_target(answer, "probe", "probe file x")
