"""Time `dflash-doctor ancestry` on a generated 25,000-commit repository beside a baseline.

The repository (git fast-import, a few seconds) has vLLM's shape: a main line of
squash commits ending in ``(#N)`` with the five merged fix PRs landing late in it,
a release branch cut before them with 300 commits of its own (backports of
#40727 and #46104 among them), and ``refs/pull/40898/head``. One ancestry run
judges every PR of the three fixes for the release tip and for the main tip.

Baseline: plain ``git merge-base --is-ancestor <landing or PR head> <judged>``,
one call per PR, handed the shas (it cannot find them itself, and it answers
"no" for backports). Each run is a fresh process; median of N runs:

    python benchmarks/bench_ancestry.py [--runs 5] [--commits 25000]

cold = caches off (``DFLASH_DOCTOR_NO_CACHE=1``: landing index and patch-ids
computed from scratch); warm = the second and later runs with the caches in
``.git/dflash-doctor/``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from gitrepos import DFLASH, SPECULATIVE, Repo, generate_history  # noqa: E402

FIX_EDITS = {
    40727: (
        "[Spec Decode] Shift DFlash target layer ids by one",
        DFLASH,
        "    return list(ids)",
        "    return [layer_id + 1 for layer_id in ids]",
    ),
    46104: (
        "[Spec Decode] Keep the drafter's sliding window",
        DFLASH,
        "    window = None",
        '    window = config.get("sliding_window")',
    ),
    47914: (
        "[Spec Decode] Resolve layer types",
        DFLASH,
        '    layers = config.get("layer_types")',
        '    layers = config.get("layer_types") or []',
    ),
    48113: (
        "[Spec Decode] Per-layer windows",
        DFLASH,
        '    return {"window": window, "layers": layers}',
        '    return {"window": window, "layers": layers, "per_layer": True}',
    ),
    53388: (
        "[Spec Decode] Keep the last prefix-cache block for DFlash",
        SPECULATIVE,
        "        return self.use_eagle()\n",
        '        return self.use_eagle() and self.method != "dflash"\n',
    ),
}


def landing(pr: int) -> tuple[str, str, str, str]:
    subject, path, old, new = FIX_EDITS[pr]
    return f"{subject} (#{pr})", path, old, new


def build(path: Path, commits: int) -> dict[str, str]:
    repo = Repo.init(path)
    late = commits - 5000
    positions = {40727: late, 46104: late + 1000, 47914: late + 2000, 48113: late + 3000, 53388: late + 4500}
    main = generate_history(repo, "main", commits, edits={pos: landing(pr) for pr, pos in positions.items()})
    cut = main[late - 1000]
    generate_history(
        repo,
        "releases/v0.20",
        300,
        start=cut,
        first_number=90_000,
        edits={100: landing(40727), 200: landing(46104)},
    )
    pr_commits = generate_history(
        repo,
        "pull-40898",
        2,
        start=main[late + 2500],
        first_number=95_000,
        edits={
            0: ("Add SWA support", DFLASH, "def build(", "def swa():\n    return True\n\n\ndef build("),
            1: ("Shift ids in the SWA path", DFLASH, "    return True\n", "    return 1\n"),
        },
    )
    repo.git("update-ref", "refs/pull/40898/head", pr_commits[-1])
    repo.git("branch", "-D", "pull-40898")
    shas = {"release": repo.sha("releases/v0.20"), "main": repo.sha("main"), "40898": pr_commits[-1]}
    shas.update({str(pr): main[pos] for pr, pos in positions.items()})
    return shas


def timed(command: list[str], env: dict) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    return time.perf_counter() - start, proc


def baseline(repo: Path, shas: dict[str, str], judged: str, env: dict) -> tuple[float, dict[int, bool]]:
    start = time.perf_counter()
    answers = {}
    for pr in (40727, 46104, 47914, 48113, 53388, 40898):
        proc = subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", shas[str(pr)], judged], env=env)
        answers[pr] = proc.returncode == 0
    return time.perf_counter() - start, answers


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--commits", type=int, default=25_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-ancestry-") as scratch:
        repo = Path(scratch) / "vllm"
        start = time.perf_counter()
        shas = build(repo, args.commits)
        count = subprocess.run(
            ["git", "-C", str(repo), "rev-list", "--count", "--all"], capture_output=True, text=True
        ).stdout.strip()
        print(f"generated {count} commits in {time.perf_counter() - start:.1f} s")
        cold_env = {**os.environ, "DFLASH_DOCTOR_NO_CACHE": "1"}
        warm_env = {k: v for k, v in os.environ.items() if k != "DFLASH_DOCTOR_NO_CACHE"}
        startup = [timed([sys.executable, "-m", "dflash_doctor", "--version"], warm_env) for _ in range(args.runs)]
        print(
            "dflash-doctor --version (interpreter + CLI start-up, part of every run): "
            f"{statistics.median(t for t, _ in startup):.3f} s"
        )
        for name in ("release", "main"):
            judged = shas[name]
            command = [
                sys.executable,
                "-m",
                "dflash_doctor",
                "ancestry",
                "--repo",
                str(repo),
                "--commit",
                judged,
                "--format",
                "json",
            ]
            cold = [timed(command, cold_env) for _ in range(args.runs)]
            timed(command, warm_env)  # writes the caches
            warm = [timed(command, warm_env) for _ in range(args.runs)]
            base = [baseline(repo, shas, judged, warm_env) for _ in range(args.runs)]
            report = json.loads(cold[-1][1].stdout)
            assert report == json.loads(warm[-1][1].stdout), "cached and fresh answers differ"
            answers = {e["pr"]: f"{e['status']}/{e['method']}" for e in report["prs"]}
            ahead = subprocess.run(
                ["git", "-C", str(repo), "rev-list", "--count", f"{judged}...{shas['main']}"],
                capture_output=True,
                text=True,
            ).stdout.strip()
            print(
                f"\njudged: {name} tip {judged[:12]}, {ahead} commits in the merge-base range (ancestry exit "
                f"{cold[-1][1].returncode})"
            )
            print(f"  ancestry, all PRs, cold     {statistics.median(t for t, _ in cold):6.3f} s")
            print(f"  ancestry, all PRs, warm     {statistics.median(t for t, _ in warm):6.3f} s")
            print(f"  merge-base --is-ancestor x6 {statistics.median(t for t, _ in base):6.3f} s")
            for pr, contained in base[-1][1].items():
                print(f"    #{pr}: ancestry {answers[pr]:<24} is-ancestor {'yes' if contained else 'no'}")
            print(f"    #54163: ancestry {answers[54163]:<24} is-ancestor (no sha to ask about)")


if __name__ == "__main__":
    main()
