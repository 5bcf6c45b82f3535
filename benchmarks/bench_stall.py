"""Time `dflash-doctor check --path` on real 0.33.0 trees that stall the behaviour child.

Each tree is the real 0.33.0 files the rules read, with the V1 aux-layer
resolver and ``DFlashQwen3Model.__init__`` made hostile: they walk frames to
the real ``signal`` module, block the child's call timer (SIGALRM) and wait on
a lock, without using CPU:

- ``clean``: not changed;
- ``per-request``: 18 s in the first such call of each request, then answers
  as vLLM does (the verdicts stay; the check slows down);
- ``per-call``: 2.5 s in every such call, then answers;
- ``forever``: never returns.

Each is checked by this engine and by each ``--previous`` revision (its
``dflash_doctor`` from ``git archive``, run with the same interpreter), one
fresh process per run, interleaved:

    python benchmarks/bench_stall.py [--runs 1] [--previous REV]

It prints wall time, exit code and each fix's status.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
from pathlib import Path

from dflash_doctor.rulefile import load_rules
from dflash_doctor.targets.release import release_tree

ANCHORS = (
    ("vllm/v1/worker/gpu_model_runner.py", "    def _get_eagle3_aux_layers_from_config(self)"),
    ("vllm/model_executor/models/qwen3_dflash.py", "class DFlashQwen3Model(nn.Module):"),
)
# Inserted at the top of each hostile function's body: ``{once}`` waits only in a request's first call.
STALL = """
box = []

def walk():
    frame = box[0].gi_frame.f_back
    frames = []
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    yield frames

box.append(walk())
frames = next(box[0])
load = frames[-1].f_builtins["_" + "_import__"]
signals = load("signal")
signals.pthread_sigmask(signals.SIG_BLOCK, [signals.SIGALRM])
ids = [f.f_locals["request"]["id"] for f in frames if "request" in f.f_locals]
seen = load("sys").modules.setdefault("stalled-requests", set())
if ids and not ({once} and ids[0] in seen):
    seen.add(ids[0])
    lock = load("_thread").allocate_lock()
    lock.acquire()
    while not lock.acquire(True, {seconds}) and {forever}:
        pass
"""
TREES = {
    "clean": None,
    "per-request": (True, 18.0, False),
    "per-call": (False, 2.5, False),
    "forever": (True, 60.0, True),
}


def mini_tree(dest: Path) -> Path:
    """The files of the real 0.33.0 wheel that the rules read, with its dist-info."""
    source = release_tree("0.33.0")
    relpaths = {"vllm/__init__.py", "vllm/_version.py", *(path for rule in load_rules() for path in rule.files)}
    for relpath in relpaths:
        if (source / relpath).is_file():
            (dest / relpath).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / relpath, dest / relpath)
    for dist_info in source.glob("vllm-*.dist-info"):
        shutil.copytree(dist_info, dest / dist_info.name)
    return dest


def hostile(clean: Path, dest: Path, once: bool, seconds: float, forever: bool) -> Path:
    shutil.copytree(clean, dest)
    stall = STALL.format(once=once, seconds=seconds, forever=forever)
    for relpath, anchor in ANCHORS:
        path = dest / relpath
        text = path.read_text()
        start = text.index(anchor)
        if anchor.startswith("class "):
            start = text.index("    def __init__(", start)
        body = text.index(":\n", text.index(")", start)) + 2  # after the signature
        if text[body:].lstrip().startswith('"""'):  # after the docstring
            opening = text.index('"""', body)
            body = text.index('"""', opening + 3) + 4
        path.write_text(text[:body] + textwrap.indent(stall, " " * 8) + text[body:])
    return dest


def engine(revision: str, into: Path) -> Path:
    """``dflash_doctor`` and ``rules`` of ``revision``, from git archive (no worktree is made)."""
    archive = subprocess.run(
        ["git", "archive", revision, "dflash_doctor", "rules"],
        capture_output=True,
        check=True,
        cwd=Path(__file__).resolve().parent.parent,
    ).stdout
    into.mkdir()
    archive_path = into.with_suffix(".tar")
    archive_path.write_bytes(archive)
    with tarfile.open(archive_path) as tar:
        tar.extractall(into, filter="data")
    return into


def check(tree: Path, pythonpath: Path | None, out: Path) -> tuple[float, int, dict[str, str]]:
    env = {**os.environ, "DFLASH_DOCTOR_NO_CACHE": "1"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    command = [
        sys.executable,
        "-m",
        "dflash_doctor",
        "check",
        "--path",
        str(tree),
        "--format",
        "json",
        "--output",
        f"json={out}",
    ]
    start = time.perf_counter()
    # From the scratch directory: ``python -m`` puts the working directory first on sys.path.
    code = subprocess.run(
        command, env=env, cwd=out.parent, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False
    ).returncode
    wall = time.perf_counter() - start
    statuses = {fix["id"]: fix["status"] for fix in json.loads(out.read_text())["fixes"]}
    return wall, code, statuses


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument(
        "--previous", action="append", default=[], help="git revision of a previous engine (repeatable)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-stall-") as scratch:
        root = Path(scratch)
        clean = mini_tree(root / "clean")
        trees = {name: clean if shape is None else hostile(clean, root / name, *shape) for name, shape in TREES.items()}
        engines: dict[str, Path | None] = {"this engine": None}
        engines.update(
            {revision: engine(revision, root / f"engine-{index}") for index, revision in enumerate(args.previous)}
        )
        results: dict[tuple[str, str], list[tuple[float, int, dict[str, str]]]] = {}
        for _ in range(args.runs):
            for tree_name, tree in trees.items():
                for engine_name, pythonpath in engines.items():
                    found = check(tree, pythonpath, root / "report.json")
                    results.setdefault((tree_name, engine_name), []).append(found)
        for (tree_name, engine_name), runs in results.items():
            wall = statistics.median(run[0] for run in runs)
            code, statuses = runs[-1][1], runs[-1][2]
            shown = ", ".join(f"{fix} {status}" for fix, status in sorted(statuses.items()))
            print(f"{tree_name:12} {engine_name:12} {wall:6.1f} s  exit {code}  {shown}")


if __name__ == "__main__":
    main()
