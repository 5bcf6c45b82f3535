"""Time `dflash-doctor check --path` on a real vLLM 0.33.0 tree beside two baselines.

Baselines: one Python process that imports libcst and parses, once each, the
files the rules read (what a naive libcst checker would do); and the previous
engine (structure only), a ``git worktree`` of ``--previous`` (default: main)
in a temporary directory run with the same interpreter. Measured side by side
in one run, each a fresh process, median of N runs:

    python benchmarks/bench_check.py [--runs 7] [--release 0.33.0] [--previous main]

It prints the figures for the README. The results cache is measured both off
(cold: every rule evaluated) and on (warm: the second and later runs).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dflash_doctor.rules import load_rules
from dflash_doctor.targets.release import release_tree

BASELINE = """
import sys, libcst
root = sys.argv[1]
for relpath in sys.argv[2:]:
    with open(f"{root}/{relpath}", encoding="utf-8") as handle:
        libcst.parse_module(handle.read())
"""


def timed(command: list[str], env: dict, cwd: Path | None = None) -> float:
    """Wall time of one run. ``cwd`` matters: ``python -m`` puts it first on sys.path."""
    start = time.perf_counter()
    subprocess.run(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--release", default="0.33.0")
    parser.add_argument("--previous", default="main", help="git revision of the previous engine")
    args = parser.parse_args()
    root = release_tree(args.release)
    files = sorted({a.file for r in load_rules() for a in r.anchors} | {r.applies.file for r in load_rules()})
    files = [f for f in files if (root / f).is_file()]
    repo = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="bench-check-") as scratch:
        previous = Path(scratch) / "previous"
        subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", str(previous), args.previous],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            _measure(args, root, files, repo, previous, Path(scratch))
        finally:
            subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(previous)], check=False)


def _measure(args, root: Path, files: list[str], repo: Path, previous: Path, scratch: Path) -> None:
    check = [sys.executable, "-m", "dflash_doctor", "check", "--path", str(root), "--format", "json"]
    baseline = [sys.executable, "-c", BASELINE, str(root), *files]
    base_env = {k: v for k, v in os.environ.items() if k not in ("DFLASH_DOCTOR_NO_CACHE", "PYTHONPATH")}
    envs = {}
    for name, source in (("now", repo), ("previous", previous)):
        cache = {"DFLASH_DOCTOR_CACHE": str(scratch / f"cache-{name}"), "PYTHONPATH": str(source)}
        envs[f"{name} cold"] = {**base_env, **cache, "DFLASH_DOCTOR_NO_CACHE": "1"}
        envs[f"{name} warm"] = {**base_env, **cache}
        timed(check, envs[f"{name} warm"], scratch)  # fill the results cache and the OS page cache
    samples: dict[str, list[float]] = {"baseline": [], **{name: [] for name in envs}}
    for _ in range(args.runs):  # interleaved, so that machine noise hits all of them alike
        samples["baseline"].append(timed(baseline, envs["now cold"], scratch))
        for name, env in envs.items():
            samples[name].append(timed(check, env, scratch))
    base = statistics.median(samples["baseline"])
    print(f"vLLM {args.release}: {len(files)} files read by the rules, {args.runs} runs each, median wall time")
    print(f"  baseline (libcst parse of those files, one process): {base:.3f} s")
    before = {kind: statistics.median(samples[f"previous {kind}"]) for kind in ("cold", "warm")}
    for name in envs:
        value = statistics.median(samples[name])
        engine, kind = name.split()
        label = "this engine (behaviour + structure)" if engine == "now" else f"previous engine ({args.previous})"
        ratio = f", {value / before[kind]:.2f}x previous" if engine == "now" else ""
        print(f"  {label}, cache {'off' if kind == 'cold' else 'on '}: {value:.3f} s = {value / base:.2f}x baseline{ratio}")


if __name__ == "__main__":
    main()
