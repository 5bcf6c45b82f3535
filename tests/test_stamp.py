"""The package stamp: a change a search of the package would read is never
missed, whatever the change puts back."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import tiers
from dflash_doctor.stamp import RACY_NS, stamp, unchanged

pytestmark = pytest.mark.slow


def package(root: Path) -> Path:
    for relpath in ("vllm/a.py", "vllm/sub/b.py"):
        (root / relpath).parent.mkdir(parents=True, exist_ok=True)
        (root / relpath).write_text("x = 1\n")
    return root


def settle() -> None:
    tiers.require("slow", "waits out the stamp's racy window")
    time.sleep(RACY_NS / 1e9)


def test_a_file_changed_just_before_is_recorded_by_its_bytes_and_matches_once_settled(tmp_path: Path) -> None:
    rows = stamp(str(package(tmp_path)), "vllm")
    assert [row[1] for row in rows] == ["sha256", "sha256"]
    settle()
    assert stamp(str(tmp_path), "vllm") != rows
    assert unchanged(str(tmp_path), "vllm", rows)
    (tmp_path / "vllm/sub/b.py").write_text("x = 2\n")
    assert not unchanged(str(tmp_path), "vllm", rows)


def test_a_same_length_edit_with_the_mtime_put_back_is_a_change(tmp_path: Path) -> None:
    path = package(tmp_path) / "vllm/sub/b.py"
    settle()
    rows = stamp(str(tmp_path), "vllm")
    assert [row[1] for row in rows] != ["sha256", "sha256"]
    before = path.stat()
    path.write_text("x = 2\n")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert not unchanged(str(tmp_path), "vllm", rows)


def test_a_new_or_deleted_file_is_a_change(tmp_path: Path) -> None:
    package(tmp_path)
    settle()
    rows = stamp(str(tmp_path), "vllm")
    assert unchanged(str(tmp_path), "vllm", rows)
    (tmp_path / "vllm/sub/c.py").write_text("")
    assert not unchanged(str(tmp_path), "vllm", rows)
    (tmp_path / "vllm/sub/c.py").unlink()
    (tmp_path / "vllm/a.py").unlink()
    assert not unchanged(str(tmp_path), "vllm", rows)
