"""Time `dflash-doctor check --path` on a real vLLM 0.33.0 tree beside a baseline.

Baseline: one Python process that imports libcst and parses, once each, the
files the rules read (what a naive libcst checker would do). Measured side by
side in one run, each a fresh process, median of N runs:

    python benchmarks/bench_check.py [--runs 7] [--release 0.33.0]

It prints the figures for the README. The results cache is measured both off
(cold: every rule evaluated) and on (warm: the second and later runs).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from dflash_doctor.rules import load_rules
from dflash_doctor.targets.release import release_tree

BASELINE = """
import sys, libcst
root = sys.argv[1]
for relpath in sys.argv[2:]:
    with open(f"{root}/{relpath}", encoding="utf-8") as handle:
        libcst.parse_module(handle.read())
"""


def timed(command: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--release", default="0.33.0")
    args = parser.parse_args()
    root = release_tree(args.release)
    files = sorted({a.file for r in load_rules() for a in r.anchors} | {r.applies.file for r in load_rules()})
    files = [f for f in files if (root / f).is_file()]
    check = [sys.executable, "-m", "dflash_doctor", "check", "--path", str(root), "--format", "json"]
    baseline = [sys.executable, "-c", BASELINE, str(root), *files]
    cold_env = {**os.environ, "DFLASH_DOCTOR_NO_CACHE": "1"}
    warm_env = {k: v for k, v in os.environ.items() if k != "DFLASH_DOCTOR_NO_CACHE"}
    timed(check, warm_env)  # fill the results cache and the OS page cache
    samples: dict[str, list[float]] = {"baseline": [], "cold": [], "warm": []}
    for _ in range(args.runs):  # interleaved, so that machine noise hits all three alike
        samples["baseline"].append(timed(baseline, cold_env))
        samples["cold"].append(timed(check, cold_env))
        samples["warm"].append(timed(check, warm_env))
    base = statistics.median(samples["baseline"])
    print(f"vLLM {args.release}: {len(files)} files read by the rules, {args.runs} runs each, median wall time")
    print(f"  baseline (libcst parse of those files, one process): {base:.3f} s")
    for name in ("cold", "warm"):
        value = statistics.median(samples[name])
        print(f"  check --path, cache {'off' if name == 'cold' else 'on '}: {value:.3f} s = {value / base:.2f}x baseline")


if __name__ == "__main__":
    main()
