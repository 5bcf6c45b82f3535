"""An SGLang check beside a vLLM check of the same kind, in one run (issue 23's speed item).

    python benchmarks/bench_engines.py [--runs 5] [--vllm 0.34.0] [--sglang 0.5.23]

Each check is `dflash-doctor check --path <release tree> --engine <engine> --format json`, a
fresh process, cold (DFLASH_DOCTOR_NO_CACHE=1: every rule evaluated, behaviour run) and warm
(the results cache on, filled by a first run); and a deployment's check, with a drafter's
config and the target's (``--draft-config``, ``--target-config`` naming LlamaForCausalLM, which
both engines register), always evaluated afresh. Interleaved so that machine noise hits all
alike; medians of wall and CPU time. The release trees come from the user cache (fetched
once when missing). The package is byte-compiled first, as ``pip install`` leaves it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dflash_doctor.engines import SGLANG, VLLM
from dflash_doctor.targets.release import release_tree

DRAFTER = Path(__file__).resolve().parent.parent / "tests" / "data" / "drafters" / "qwen3.6-27b-dflash.json"
TARGET = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 64}  # our own


def timed(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall time and CPU time (user + system, its children included) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--vllm", default="0.34.0")
    parser.add_argument("--sglang", default="0.5.23")
    args = parser.parse_args()
    repo = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(repo / "dflash_doctor")], check=True)
    trees = {
        VLLM.name: (release_tree(args.vllm, VLLM), args.vllm),
        SGLANG.name: (release_tree(args.sglang, SGLANG), args.sglang),
    }
    base = {k: v for k, v in os.environ.items() if k not in ("DFLASH_DOCTOR_NO_CACHE", "PYTHONPATH")}
    with tempfile.TemporaryDirectory(prefix="bench-engines-") as scratch:
        (Path(scratch) / "target.json").write_text(json.dumps(TARGET))
        runs: dict[str, tuple[list[str], dict[str, str]]] = {}
        for engine, (root, _) in trees.items():
            command = [sys.executable, "-m", "dflash_doctor", "check", "--path", str(root), "--engine", engine]
            env = {**base, "DFLASH_DOCTOR_CACHE": str(Path(scratch) / engine), "PYTHONPATH": str(repo)}
            runs[f"{engine} cold"] = ([*command, "--format", "json"], {**env, "DFLASH_DOCTOR_NO_CACHE": "1"})
            runs[f"{engine} warm"] = ([*command, "--format", "json"], env)
            deployment = ["--draft-config", str(DRAFTER), "--target-config", str(Path(scratch) / "target.json")]
            runs[f"{engine} deployment"] = ([*command, *deployment, "--format", "json"], env)
            timed(*runs[f"{engine} warm"])  # fill the results cache and the OS page cache
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
        for _ in range(args.runs):
            for name, (command, env) in runs.items():
                samples[name].append(timed(command, env))
    print(f"check --path: vLLM {args.vllm} beside SGLang {args.sglang}, {args.runs} runs each, medians")
    for index, what in enumerate(("wall", "CPU")):
        median = {name: statistics.median(sample[index] for sample in samples[name]) for name in samples}
        for kind in ("cold", "warm", "deployment"):
            ratio = median[f"sglang {kind}"] / median[f"vllm {kind}"]
            print(
                f"  {what:4} {kind}: vLLM {median[f'vllm {kind}']:.2f} s, SGLang {median[f'sglang {kind}']:.2f} s"
                f" = {ratio:.2f}x vLLM"
            )


if __name__ == "__main__":
    main()
