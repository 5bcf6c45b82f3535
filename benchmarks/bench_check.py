"""Time `dflash-doctor check --path` on a real vLLM 0.33.0 tree beside its baselines.

Baselines: one Python process that imports libcst and parses, once each, the
files the rules read (what a naive libcst checker would do); this engine with
behaviour switched off (the structure-only check: the target's tree is given
no place to run code); and each ``--previous`` engine, a ``git worktree`` of
that revision (default: main) in a temporary directory run with the same
interpreter. Measured side by side in one run, each a fresh process,
interleaved, median of N runs; beside them the floor, the interpreter starting
with nothing to do (its site-packages' .pth files run at every start), and
the same interpreter importing the CLI framework (typer) and nothing else:

    python benchmarks/bench_check.py [--runs 7] [--release 0.33.0] [--previous main [--previous REV]]

It prints the figures for the README. The results cache is measured both off
(cold: every rule evaluated) and on (warm: the second and later runs). Each
engine's package is byte-compiled first, as ``pip install`` leaves it: under
PYTHONDONTWRITEBYTECODE (set on the machines these figures come from) every run would otherwise compile the
package's sources again (~0.2 s a run, a cost an installed tool never pays).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dflash_doctor.rulefile import load_rules
from dflash_doctor.targets.release import release_tree

# The same CLI with local targets structure only: their ResolvedTarget has no behaviour.
STRUCTURE_ONLY = (
    "import dataclasses; from dflash_doctor.targets import path; made = path.local; "
    "path.local = lambda tree, info: dataclasses.replace(made(tree, info), behaviour=None); "
    "from dflash_doctor.cli import main; main()"
)
BASELINE = """
import sys, libcst
root = sys.argv[1]
for relpath in sys.argv[2:]:
    with open(f"{root}/{relpath}", encoding="utf-8") as handle:
        libcst.parse_module(handle.read())
"""


def timed(command: list[str], env: dict, cwd: Path | None = None) -> tuple[float, float]:
    """Wall time and CPU time (user + system, its children included) of one run.
    ``cwd`` matters: ``python -m`` puts it first on sys.path."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--release", default="0.33.0")
    parser.add_argument(
        "--previous", action="append", help="git revision of a previous engine (repeatable; default main)"
    )
    args = parser.parse_args()
    args.previous = args.previous or ["main"]
    root = release_tree(args.release)
    files = sorted({a.file for r in load_rules() for a in r.anchors} | {r.applies.file for r in load_rules()})
    files = [f for f in files if (root / f).is_file()]
    repo = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="bench-check-") as scratch:
        previous = {revision: Path(scratch) / f"previous-{index}" for index, revision in enumerate(args.previous)}
        try:
            for revision, tree in previous.items():
                subprocess.run(
                    ["git", "-C", str(repo), "worktree", "add", "--detach", str(tree), revision],
                    check=True,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            _measure(args, root, files, repo, previous, Path(scratch))
        finally:
            for tree in previous.values():
                subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)], check=False)


def _measure(args, root: Path, files: list[str], repo: Path, previous: dict[str, Path], scratch: Path) -> None:
    options = ["check", "--path", str(root), "--format", "json"]
    check = [sys.executable, "-m", "dflash_doctor", *options]
    baseline = [sys.executable, "-c", BASELINE, str(root), *files]
    base_env = {k: v for k, v in os.environ.items() if k not in ("DFLASH_DOCTOR_NO_CACHE", "PYTHONPATH")}
    runs: dict[str, tuple[list[str], dict]] = {}
    for name, source in (
        ("this engine", repo),
        *((f"previous engine ({rev})", tree) for rev, tree in previous.items()),
    ):
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", str(source / "dflash_doctor")],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        cache = {"DFLASH_DOCTOR_CACHE": str(scratch / f"cache-{len(runs)}"), "PYTHONPATH": str(source)}
        runs[f"{name}, cache off"] = (check, {**base_env, **cache, "DFLASH_DOCTOR_NO_CACHE": "1"})
        runs[f"{name}, cache on "] = (check, {**base_env, **cache})
        timed(check, runs[f"{name}, cache on "][1], scratch)  # fill the results cache and the OS page cache
    structure = "this engine, structure only, cache off"
    runs[structure] = ([sys.executable, "-c", STRUCTURE_ONLY, *options], runs["this engine, cache off"][1])
    floor = [sys.executable, "-c", "pass"]  # this interpreter's start-up with its site-packages (.pth files run)
    framework = [sys.executable, "-c", "import typer"]  # what any command of this CLI pays before its own code
    samples: dict[str, list[tuple[float, float]]] = {
        "baseline": [],
        "floor": [],
        "framework": [],
        **{name: [] for name in runs},
    }
    for _ in range(args.runs):  # interleaved, so that machine noise hits all of them alike
        samples["floor"].append(timed(floor, runs["this engine, cache off"][1], scratch))
        samples["framework"].append(timed(framework, runs["this engine, cache off"][1], scratch))
        samples["baseline"].append(timed(baseline, runs["this engine, cache off"][1], scratch))
        for name, (command, env) in runs.items():
            samples[name].append(timed(command, env, scratch))
    print(f"vLLM {args.release}: {len(files)} files read by the rules, {args.runs} runs each, medians")
    for index, what in enumerate(("wall time", "CPU time (user + system, child processes included)")):
        median = {name: statistics.median(values[index] for values in samples[name]) for name in samples}
        print(f" {what}:")
        print(f"  floor (python -c pass, the same interpreter and site-packages): {median['floor']:.3f} s")
        print(f"  the CLI framework (python -c 'import typer'): {median['framework']:.3f} s")
        print(f"  baseline (libcst parse of those files, one process): {median['baseline']:.3f} s")
        for name in runs:
            ratios = [f"{median[name] / median['baseline']:.2f}x baseline"]
            if name.startswith("this engine, cache"):
                kind = name.rsplit(", ", 1)[1]
                if kind == "cache off":
                    ratios.append(f"{median[name] / median[structure]:.2f}x structure only")
                ratios += [
                    f"{median[name] / median[f'previous engine ({rev}), {kind}']:.2f}x previous ({rev})"
                    for rev in previous
                ]
            print(f"  {name}: {median[name]:.3f} s = {', '.join(ratios)}")


if __name__ == "__main__":
    main()
