"""What a results-cache hit costs on a real vLLM tree, part by part.

A hit computes the key (the tool's own sources, the rule files, the reference
drafter configs, the files the rules name) and then re-reads and re-digests
every file the cached evaluation read, and, when it searched the package for
moved code, checks the package's stamp (each .py file's stat) instead of
repeating the search. Measured in this process, each part alone
on a fresh tree object (the OS page cache warm), median of N:

    python benchmarks/bench_cache.py [--runs 20] [--release 0.33.0]

The "moved code" tree is a copy of the release whose V1 resolver is renamed,
so the rules search the whole package for it (0.34.0 has no V1 runner: every
check of it searches).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from dflash_doctor import cache
from dflash_doctor.rulefile import load_rules
from dflash_doctor.source import SourceTree
from dflash_doctor.targets.path import PathTarget
from dflash_doctor.targets.release import release_tree

RESOLVER = "vllm/v1/worker/gpu_model_runner.py"


def median_s(runs: int, work: Callable[[], object]) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        work()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def measure(name: str, root: Path, runs: int) -> None:
    rules = tuple(load_rules())
    cache.judged_fixes(PathTarget(root).resolve(), rules)  # fill: one evaluation with behaviour
    resolved = PathTarget(root).resolve()
    files = sorted({relpath for rule in rules for relpath in rule.files})
    where = "behaviour on this machine"
    key = cache._key(resolved.tree, rules, files, where, cache._references())
    (entry,) = cache._load(key)[:1]
    reads, scans = entry["reads"], entry["scans"]
    size = sum((root / relpath).stat().st_size for relpath, state in reads.items() if len(state) == 64)
    print(
        f"{name}: {len(reads)} files recorded ({sum(len(s) == 64 for s in reads.values())} read, {size / 1e6:.2f} MB; "
        f"the rest looked for and not there), {len(scans)} package search(es); medians of {runs}:"
    )
    timings = {
        "digest of the tool's own sources (once per process)": cache._tool_digest.__wrapped__,
        "key (rule files, references, the rules' files; the tool digest kept)": lambda: cache._key(
            PathTarget(root).resolve().tree, rules, files, where, cache._references()
        ),
        "re-digest the recorded files": lambda: _states(PathTarget(root).resolve().tree, reads),
        "of which the files the key does not read": lambda: _states(
            PathTarget(root).resolve().tree,
            {relpath: state for relpath, state in reads.items() if relpath not in files},
        ),
        "the hit after the key (load, re-digest what the key did not read, search, rebuild the fixes)": None,
        "repeat the package search": lambda: cache._same_searches(PathTarget(root).resolve().tree, scans, {}),
        "check the package's stamp instead": lambda: cache._same_searches(
            PathTarget(root).resolve().tree, scans, entry["stamps"]
        ),
        "whole hit (judged_fixes)": lambda: cache.judged_fixes(PathTarget(root).resolve(), rules),
    }
    for what, work in timings.items():
        if what.startswith(("repeat", "check the package")) and not scans:
            continue
        if work is None:
            seconds = statistics.median(_after_key(root, rules, key) for _ in range(runs))
        else:
            seconds = median_s(runs, work)
        print(f"  {what}: {seconds * 1000:.1f} ms")


def _after_key(root: Path, rules: tuple, key: str) -> float:
    tree = PathTarget(root).resolve().tree
    files = sorted({relpath for rule in rules for relpath in rule.files})
    assert cache._key(tree, rules, files, "behaviour on this machine", cache._references()) == key
    start = time.perf_counter()
    assert cache._hit(key, tree) is not None
    return time.perf_counter() - start


def _states(tree: SourceTree, reads: dict[str, str]) -> None:
    assert all(tree.state(relpath) == state for relpath, state in reads.items())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--release", default="0.33.0")
    args = parser.parse_args()
    root = release_tree(args.release)
    with tempfile.TemporaryDirectory(prefix="bench-cache-") as scratch:
        os.environ["DFLASH_DOCTOR_CACHE"] = str(Path(scratch) / "cache")
        os.environ.pop("DFLASH_DOCTOR_NO_CACHE", None)
        cache._tool_digest()  # once per process, as in a check
        measure(f"vLLM {args.release}", root, args.runs)
        if not (root / RESOLVER).is_file():
            return  # the package is searched on every check of this release already
        moved = Path(scratch) / "moved"
        shutil.copytree(root / "vllm", moved / "vllm")
        resolver = moved / RESOLVER
        resolver.write_text(resolver.read_text().replace("_get_eagle3_aux_layers_from_config", "_aux_layers_elsewhere"))
        measure(f"vLLM {args.release}, resolver moved", moved, args.runs)


if __name__ == "__main__":
    main()
