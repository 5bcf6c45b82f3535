"""Shared fixtures: real vLLM release trees (downloaded once, cached) and
small trees built from them for altered-code tests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dflash_doctor.rules import load_rules
from dflash_doctor.targets.release import release_tree

# The rule texts and applicability of the small demo rules that tests write.
DEMO_RULE_PREAMBLE = '''
what = "w"
why = "y"
remedy = "r"
[applies]
file = "vllm/config/speculative.py"
symbol = "SpeculativeConfig"
literal = "dflash"
'''

# Every check in the tests evaluates the rules; the results cache has its own test.
os.environ["DFLASH_DOCTOR_NO_CACHE"] = "1"

# Files a check of these releases reads, plus what makes a tree a tree.
TREE_FILES = ["vllm/__init__.py", "vllm/_version.py"]


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


def run_cli(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dflash_doctor", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=900
    )


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
