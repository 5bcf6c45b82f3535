"""The results cache answers image checks: an image checked again, or another
image holding the same vLLM files, starts no behaviour child.

Images are OCI layouts written here from a real 0.33.0 tree; each check runs
in its own process, which says on stderr every behaviour child it starts (the
sandbox's ``python -I -S -c`` program, seen by an audit hook)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from registry import Random, python_files, tree_files, write_image

pytestmark = pytest.mark.release

WATCHED = """
import sys
def spawned(event, args):
    if event == "subprocess.Popen" and "-I" in list(args[1])[1:2]:
        sys.stderr.write("CHILD\\n")
sys.addaudithook(spawned)
from dflash_doctor.cli import main
main()
"""


@pytest.fixture
def layout(tmp_path: Path, mini_tree: Callable[..., Path]) -> Path:
    """Images ``a`` and ``b``: different bases (so different digests), the same vLLM files."""
    tree = tree_files(mini_tree("0.33.0"))
    out = tmp_path / "oci"
    digests = [
        write_image(out, tag, [{**python_files(), "usr/share/base.bin": Random(1 << 16, seed)}, tree])["digest"]
        for tag, seed in (("a", 1), ("b", 2))
    ]
    assert digests[0] != digests[1]
    return out


def check(tmp_path: Path, *references: str) -> tuple[int, dict, int]:
    """(exit code, JSON report, behaviour children started) of one check with the results cache on."""
    env = {k: v for k, v in os.environ.items() if k != "DFLASH_DOCTOR_NO_CACHE"}
    env["DFLASH_DOCTOR_CACHE"] = str(tmp_path / "cache")
    images = [a for reference in references for a in ("--image", reference)]
    proc = subprocess.run(
        [sys.executable, "-c", WATCHED, "check", *images, "--format", "json", "--jobs", "4"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout), proc.stderr.count("CHILD\n")


def test_the_second_check_of_an_image_starts_no_child(tmp_path: Path, layout: Path) -> None:
    code, first, children = check(tmp_path, f"oci:{layout}:a")
    assert children == 1
    again, second, children = check(tmp_path, f"oci:{layout}:a")
    assert (again, second["fixes"], children) == (code, first["fixes"], 0)


def test_images_with_the_same_vllm_files_checked_together_start_one_child(tmp_path: Path, layout: Path) -> None:
    code, fleet, children = check(tmp_path, f"oci:{layout}:a", f"oci:{layout}:b")
    assert code == 0 and children == 1
    a, b = (entry["fixes"] for entry in fleet["hosts"])
    assert a == b and len({entry["target"]["digest"] for entry in fleet["hosts"]}) == 2  # two images, one answer
