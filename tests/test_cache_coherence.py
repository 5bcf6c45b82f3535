"""The results cache cannot go stale: on real 0.33.0 trees edited after the
cache was filled, in files only behaviour reads as much as in the files the
rules name, the cached answer is the fresh one (the fresh one: the test
session's ``DFLASH_DOCTOR_NO_CACHE=1``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import RESOLVERS, SHIFT, check_json, statuses

from dflash_doctor.stamp import RACY_NS

pytestmark = pytest.mark.release

MiniTree = Callable[..., Path]  # conftest's mini_tree fixture

# The +1 of both resolvers on 0.33.0, and the same ids through a helper module.
THROUGH_HELPER = 'dflash_shift(i) for i in (dflash_config.get("target_layer_ids") or [])'
HELPER = "def dflash_shift(i):\n    return i + 1\n"
NO_SHIFT = "def dflash_shift(i):\n    return i\n"
# A check in its own process that says on stderr each process it starts (the behaviour child)
# and each .py file it opens.
WATCHED = """
import sys
def spawned(event, args):
    if event == "subprocess.Popen":
        sys.stderr.write("SPAWNED %s\\n" % (args[1][:3],))
    elif event == "open" and str(args[0]).endswith(".py"):
        sys.stderr.write("OPENED %s\\n" % (args[0],))
sys.addaudithook(spawned)
from dflash_doctor.cli import main
main()
"""


class CachedCheck:
    """``check(tree)`` -> (exit code, JSON report) of a check with the results cache on, in ``cache``."""

    def __init__(self, cache: Path) -> None:
        self.env = {k: v for k, v in os.environ.items() if k != "DFLASH_DOCTOR_NO_CACHE"}
        self.env["DFLASH_DOCTOR_CACHE"] = str(cache)

    def __call__(self, tree: Path) -> tuple[int, dict]:
        return check_json("--path", str(tree), env=self.env)


@pytest.fixture
def cached(tmp_path: Path) -> CachedCheck:
    return CachedCheck(tmp_path / "cache")


def fresh(tree: Path) -> tuple[int, dict]:
    return check_json("--path", str(tree))


def shift_in_helper(tree: Path, helper: str = "vllm/dflash_shift.py") -> Path:
    """Both resolvers take their +1 from ``dflash_shift`` in a new module of the tree."""
    for relpath in RESOLVERS:
        path = tree / relpath
        text = path.read_text()
        assert SHIFT in text, relpath
        path.write_text(text.replace(SHIFT, THROUGH_HELPER) + "\nfrom vllm.dflash_shift import dflash_shift\n")
    path = tree / helper
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HELPER)
    return path


def test_dropping_the_shift_in_a_helper_only_behaviour_reads_is_seen(mini_tree: MiniTree, cached: CachedCheck) -> None:
    tree = mini_tree("0.33.0")
    helper = shift_in_helper(tree)
    code, report = cached(tree)
    assert (code, statuses(report)["layer-offset"]) == (0, "present")
    helper.write_text(NO_SHIFT)
    code, report = cached(tree)
    assert (code, statuses(report)["layer-offset"]) == (1, "absent")
    assert (code, report) == fresh(tree)


def test_a_same_length_edit_with_the_mtime_put_back_is_seen(mini_tree: MiniTree, cached: CachedCheck) -> None:
    tree = mini_tree("0.33.0")
    helper = shift_in_helper(tree)
    before = helper.stat()
    assert cached(tree)[0] == 0
    helper.write_text(HELPER.replace("i + 1", "i - 1"))
    os.utime(helper, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert helper.stat().st_size == before.st_size and helper.stat().st_mtime_ns == before.st_mtime_ns
    code, report = cached(tree)
    assert statuses(report)["layer-offset"] == "absent"
    assert (code, report) == fresh(tree)


def test_a_deleted_file_on_the_route_is_seen(mini_tree: MiniTree, cached: CachedCheck) -> None:
    tree = mini_tree("0.33.0")
    helper = shift_in_helper(tree)
    assert cached(tree)[0] == 0
    helper.unlink()
    code, report = cached(tree)
    assert statuses(report)["layer-offset"] != "present"
    assert (code, report) == fresh(tree)


@pytest.mark.parametrize(
    "route, shadow",
    [
        ("vllm/dflash_shift/__init__.py", "vllm/dflash_shift.py"),  # a new module beside the package on the route
        (
            "vllm/dflash_shift.py",
            "vllm/dflash_shift/__init__.py",
        ),  # a new package beside the module (Python imports the package)
    ],
    ids=["module-beside-package", "package-beside-module"],
)
def test_a_new_module_shadowing_one_on_the_route_is_seen(
    mini_tree: MiniTree, cached: CachedCheck, route: str, shadow: str
) -> None:
    """Whichever of the two behaviour follows, the cached answer is the fresh one:
    the files it looked for and did not find are part of the record."""
    tree = mini_tree("0.33.0")
    shift_in_helper(tree, route)
    assert cached(tree)[0] == 0
    (tree / shadow).parent.mkdir(parents=True, exist_ok=True)
    (tree / shadow).write_text(NO_SHIFT)
    assert cached(tree) == fresh(tree)


def moved_resolver(tree: Path) -> None:
    """The V1 resolver renamed: the rules' required anchor is nowhere, so the
    package is searched for it, and behaviour cannot compute the capture ids."""
    path = tree / RESOLVERS[0]
    path.write_text(path.read_text().replace("_get_eagle3_aux_layers_from_config", "_aux_layers_elsewhere"))


def unreadable_resolver(tree: Path) -> None:
    """The V2 resolver's file is a FIFO: a file the rules name that cannot be read."""
    path = tree / RESOLVERS[1]
    path.unlink()
    os.mkfifo(path)


def watched_check(tree: Path, env: dict, cwd: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    proc = subprocess.run(
        [sys.executable, "-c", WATCHED, "check", "--path", str(tree), "--format", "json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=600,
    )
    return proc, [line for line in proc.stderr.splitlines() if line.startswith("SPAWNED ")]


@pytest.mark.parametrize("unknowable", [moved_resolver, unreadable_resolver], ids=["searched", "unreadable"])
def test_an_unknown_answer_is_served_from_the_cache_without_a_child(
    mini_tree: MiniTree, cached: CachedCheck, tmp_path: Path, unknowable: Callable[[Path], None]
) -> None:
    tree = mini_tree("0.33.0")
    unknowable(tree)
    first, spawned = watched_check(tree, cached.env, tmp_path)
    assert first.returncode == 2 and spawned, (first.returncode, first.stderr[-2000:])
    second, spawned = watched_check(tree, cached.env, tmp_path)
    assert second.returncode == 2 and spawned == [], second.stderr[-2000:]
    assert second.stdout == first.stdout
    assert (2, json.loads(second.stdout)) == fresh(tree)


def test_code_that_moved_into_a_new_file_is_seen_after_a_cached_search(
    mini_tree: MiniTree, cached: CachedCheck
) -> None:
    """An answer that searched the package is cached with what the search found:
    a new file defining the missing code changes the search, so the cache misses."""
    tree = mini_tree("0.33.0")
    moved_resolver(tree)
    code, before = cached(tree)
    assert (code, statuses(before)["layer-offset"]) == (2, "unknown")
    original = (mini_tree("0.33.0", "original") / RESOLVERS[0]).read_text()
    (tree / "vllm/v1/worker/moved_runner.py").write_text(original)
    code, after = cached(tree)
    assert (code, statuses(after)["layer-offset"]) == (0, "present")
    assert (code, after) == fresh(tree)


def test_an_answer_with_a_call_that_timed_out_is_not_kept(
    mini_tree: MiniTree, cached: CachedCheck, tmp_path: Path
) -> None:
    """A call that runs out of time says as much about the machine's load as
    about the tree: the next check runs the tree's code again."""
    tree = mini_tree("0.33.0")
    looping = "def dflash_shift(i):\n    while i == 46:  # one z-lab drafter's id\n        pass\n    return i + 1\n"
    shift_in_helper(tree).write_text(looping)
    first, spawned = watched_check(tree, cached.env, tmp_path)
    assert first.returncode == 2 and spawned, first.stderr[-2000:]
    assert "did not finish within" in json.dumps(json.loads(first.stdout)["fixes"])
    second, spawned = watched_check(tree, cached.env, tmp_path)
    assert second.returncode == 2 and spawned, second.stderr[-2000:]


def test_a_search_is_not_repeated_while_no_file_of_the_package_changed(
    mini_tree: MiniTree, cached: CachedCheck, tmp_path: Path
) -> None:
    """A hit on an answer that searched the package reads the files it recorded,
    not the package: the files nothing but the search reads are not opened."""
    tree = mini_tree("0.33.0")
    moved_resolver(tree)
    unrelated = [tree / f"vllm/unrelated/m{index}.py" for index in range(20)]
    for path in unrelated:
        path.parent.mkdir(exist_ok=True)
        path.write_text("def f():\n    return 1\n")
    time.sleep(RACY_NS / 1e9)  # settled: files changed just before the search are digested, so opened again
    first, _ = watched_check(tree, cached.env, tmp_path)
    second, spawned = watched_check(tree, cached.env, tmp_path)
    assert first.returncode == second.returncode == 2 and spawned == []
    assert all(f"OPENED {path}" in first.stderr for path in unrelated)
    assert not any(f"OPENED {path}" in second.stderr for path in unrelated)


def test_a_same_length_edit_that_the_search_would_find_is_seen(mini_tree: MiniTree, cached: CachedCheck) -> None:
    """A file only the search reads gains the missing definition in place, same
    length, mtime put back: its ctime moved, so the search is repeated."""
    tree = mini_tree("0.33.0")
    moved_resolver(tree)
    original = (mini_tree("0.33.0", "original") / RESOLVERS[0]).read_text()
    elsewhere = tree / "vllm/v1/worker/moved_runner.py"
    elsewhere.write_text(original.replace("_get_eagle3_aux_layers_from_config", "_get_eagle3_aux_layers_from_confiX"))
    time.sleep(RACY_NS / 1e9)  # settled: trusted by its stat, not digested
    assert cached(tree)[0] == 2
    before = elsewhere.stat()
    with open(elsewhere, "r+b") as handle:
        data = handle.read().replace(b"_get_eagle3_aux_layers_from_confiX", b"_get_eagle3_aux_layers_from_config")
        handle.seek(0)
        handle.write(data)
    os.utime(elsewhere, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (elsewhere.stat().st_size, elsewhere.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    code, report = cached(tree)
    assert (code, statuses(report)["layer-offset"]) == (0, "present")
    assert (code, report) == fresh(tree)
