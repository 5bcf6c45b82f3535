"""`check --image` on a loopback registry beside `skopeo copy` of the same image.

Writes two images into an OCI layout: A = a large unrelated base layer (1 GB of
incompressible bytes by default) + the real vLLM 0.33.0 tree; B = the same base
+ the 0.22.0 tree. Pushes both into Debian's docker-registry on 127.0.0.1, then
times, as fresh processes and interleaved:

- `skopeo copy docker://…/A dir:…` (every blob downloaded and verified);
- the first `check --image …/A` with an empty cache (every layer streamed);
- `check --image …/B` afterwards (only B's new layer downloaded);

and the peak resident memory of each check:

    python benchmarks/bench_image.py [--base-mb 1024] [--runs 1]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from registry import Random, Registry, python_files, tree_files, write_image, write_layer  # noqa: E402

from dflash_doctor.targets.release import release_tree  # noqa: E402


def run(command: list[str], env: dict) -> tuple[float, int]:
    """Wall seconds and peak RSS (MB) of one process."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise SystemExit(f"{command[:4]} failed: {proc.stderr.read().decode()[-500:]}")
    proc.stderr.close()
    return seconds, usage.ru_maxrss // 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-mb", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        made = time.perf_counter()
        base = write_layer(work / "oci", {"usr/share/base.bin": Random(args.base_mb << 20, seed=1), **python_files()})
        write_image(work / "oci", "a", [base, tree_files(release_tree("0.33.0"))])
        write_image(work / "oci", "b", [base, tree_files(release_tree("0.22.0"))])
        registry = Registry(work / "registry")
        try:
            for tag in ("a", "b"):
                registry.push(work / "oci", tag, f"bench/vllm:{tag}")
            print(f"images written and pushed in {time.perf_counter() - made:.0f} s")
            samples: dict[str, list[float]] = {"skopeo": [], "first": [], "second": []}
            memory: dict[str, int] = {"first": 0, "second": 0}
            env = {k: v for k, v in os.environ.items() if k != "DFLASH_DOCTOR_NO_CACHE"}
            for attempt in range(args.runs):
                target = work / f"skopeo-{attempt}"
                seconds, _ = run(
                    [
                        "skopeo",
                        "copy",
                        "--quiet",
                        "--src-tls-verify=false",
                        f"docker://{registry.host}/bench/vllm:a",
                        f"dir:{target}",
                    ],
                    env,
                )
                samples["skopeo"].append(seconds)
                shutil.rmtree(target)
                env["DFLASH_DOCTOR_CACHE"] = str(work / f"cache-{attempt}")
                for name, tag in (("first", "a"), ("second", "b")):
                    seconds, peak = run(
                        [
                            sys.executable,
                            "-m",
                            "dflash_doctor",
                            "check",
                            "--format",
                            "json",
                            "--image",
                            f"{registry.host}/bench/vllm:{tag}",
                            "--insecure-registry",
                            registry.host,
                        ],
                        env,
                    )
                    samples[name].append(seconds)
                    memory[name] = max(memory[name], peak)
            layers = len(list((work / "cache-0/images/layers").glob("*.json")))
        finally:
            registry.stop()
    skopeo, first, second = (statistics.median(samples[k]) for k in ("skopeo", "first", "second"))
    print(f"base layer {args.base_mb} MB + vLLM layer; {args.runs} run(s), median wall time, loopback registry")
    print(f"  skopeo copy of image A (all blobs to a dir): {skopeo:.2f} s")
    print(
        f"  check --image A, empty cache:               {first:.2f} s = {first / skopeo:.2f}x skopeo; peak RSS "
        f"{memory['first']} MB"
    )
    print(
        f"  check --image B, sharing A's base:          {second:.2f} s = {second / skopeo:.2f}x skopeo; peak RSS "
        f"{memory['second']} MB"
    )
    print(f"  layers read in all: {layers} (A: 2, B: 1 new)")


if __name__ == "__main__":
    main()
