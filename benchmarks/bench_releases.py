"""Time `dflash-doctor releases` beside a baseline, side by side in one run.

Baseline: one `dflash-doctor check --release X --format json` process per
release (what a script around `check` would do). Measured: the matrix with
every cache off (cold), and again with the matrix cache filled (warm), both
with ``--offline`` so the package index is not part of the figure; and the
warm run asking the index (what a user's second run costs). Release trees
come from ``release_tree`` (downloaded once) and are linked into a private
cache directory, so the user's matrix cache is not touched. Median of N runs:

    python benchmarks/bench_releases.py [--runs 5] [--from 0.20.0] [--to 0.33.0]
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

from dflash_doctor.releases import in_range, index_releases
from dflash_doctor.targets.release import release_tree


def timed(command: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(command, env=env, check=False, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--from", dest="first", default="0.20.0")
    parser.add_argument("--to", dest="last", default="0.33.0")
    args = parser.parse_args()
    versions = in_range(index_releases(), args.first, args.last)
    cli = [sys.executable, "-m", "dflash_doctor"]
    with tempfile.TemporaryDirectory() as cache:
        (Path(cache) / "releases").mkdir()
        for version in versions:
            (Path(cache) / "releases" / version).symlink_to(release_tree(version))
        base_env = {**os.environ, "DFLASH_DOCTOR_CACHE": cache}
        cold_env = {**base_env, "DFLASH_DOCTOR_NO_CACHE": "1"}
        warm_env = {k: v for k, v in base_env.items() if k != "DFLASH_DOCTOR_NO_CACHE"}
        matrix = [*cli, "releases", "--from", args.first, "--to", args.last, "--format", "json"]
        subprocess.run([*matrix, "--offline"], env=warm_env, check=True, capture_output=True)  # fill the matrix cache
        samples: dict[str, list[float]] = {
            "baseline: check per release": [],
            "releases, cold": [],
            "releases, warm (--offline)": [],
            "releases, warm (index asked)": [],
        }
        for _ in range(args.runs):
            samples["baseline: check per release"].append(
                sum(timed([*cli, "check", "--release", v, "--format", "json"], cold_env) for v in versions)
            )
            samples["releases, cold"].append(timed([*matrix, "--offline"], cold_env))
            samples["releases, warm (--offline)"].append(timed([*matrix, "--offline"], warm_env))
            samples["releases, warm (index asked)"].append(timed(matrix, warm_env))
    print(f"{len(versions)} releases ({versions[0]}..{versions[-1]}), median of {args.runs} runs")
    for name, values in samples.items():
        print(f"  {name:<30} {statistics.median(values):7.2f} s")


if __name__ == "__main__":
    main()
