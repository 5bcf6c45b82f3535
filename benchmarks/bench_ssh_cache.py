"""`check --host` answered from the results cache, beside its floor, on loopback.

Starts a real sshd on 127.0.0.1 (the tests' helper; OpenSSH's default
MaxStartups), makes a venv whose interpreter sees the real vLLM release tree,
then times fresh processes, interleaved, and reports medians:

- warm: `check --host` of an unchanged host (results cache filled) beside its
  floor, OpenSSH's own `ssh host true` plus a warm `check --path` of the same tree;
- cold: `check --host` with the results cache off beside `ssh host true` plus a
  cold `check --path` (behaviour in both: on the host, here);
- a fleet: `check --hosts-file` of N aliases of that one server (N unchanged
  hosts, the cache filled), at `--jobs 4` and `16`, and the same fleet cold
  (cache empty: the first host's answer serves the others).

It also counts the behaviour children the host's interpreter started (a
wrapper logs each invocation), which a warm check must not start.

    python benchmarks/bench_ssh_cache.py [--runs 5] [--release 0.33.0] [--hosts 64]
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from sshd import client_env, loopback_host  # noqa: E402

from dflash_doctor.targets.release import release_tree  # noqa: E402


def timed(command: list[str], env: dict) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    return time.perf_counter() - start, proc


def checked(proc: subprocess.CompletedProcess) -> dict:
    if proc.returncode not in (0, 1, 2) or not proc.stdout:
        raise SystemExit(f"the check failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def timed_input(command: list[str], text: str, env: dict) -> tuple[float, int]:
    """Seconds, and how many lines the command printed (one per host that failed)."""
    start = time.perf_counter()
    proc = subprocess.run(command, input=text, env=env, capture_output=True, text=True, check=False)
    return time.perf_counter() - start, len(proc.stdout.splitlines())


def fleet_run(command: list[str], env: dict, log: Path) -> tuple[float, int, int, int]:
    """Seconds, hosts answered, behaviour children started, connections tried."""
    before = log.read_text().splitlines().count("-I")
    seconds, proc = timed(command, env)
    hosts = checked(proc)["hosts"]
    answered = [entry for entry in hosts if "error" not in entry]
    tries = sum(int(entry["target"]["connect_tries"]) for entry in answered)
    return seconds, len(answered), log.read_text().splitlines().count("-I") - before, tries


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--release", default="0.33.0")
    parser.add_argument("--hosts", type=int, default=64)
    args = parser.parse_args()
    root = release_tree(args.release)
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        with loopback_host(work, root) as (server, key):
            log = work / "invocations"
            python = work / "python"  # the host's interpreter, logging how it is started
            python.write_text(f'#!/bin/sh\nprintf "%s\\n" "$1" >> {log}\nexec {work / "venv/bin/python"} "$@"\n')
            python.chmod(0o755)
            known = work / "known_hosts"
            known.write_text(server.host_public_key_line)
            config = work / "ssh_config"
            config.write_text(
                "".join(f"Host h{i:02d}\n  HostName 127.0.0.1\n  Port {server.port}\n" for i in range(args.hosts))
            )
            (work / "fleet.txt").write_text("".join(f"h{i:02d}\n" for i in range(args.hosts)))
            cache = work / "cache"
            warm_env = {**client_env(), "HOME": str(work), "DFLASH_DOCTOR_CACHE": str(cache)}
            warm_env.pop("DFLASH_DOCTOR_NO_CACHE", None)
            cold_env = {**warm_env, "DFLASH_DOCTOR_NO_CACHE": "1"}
            cli = [sys.executable, "-m", "dflash_doctor", "check", "--format", "json"]
            ssh_args = [
                "--python",
                str(python),
                "--identity",
                str(key),
                "--known-hosts",
                str(known),
                "--ssh-config",
                str(config),
            ]
            remote = cli + ["--host", f"127.0.0.1:{server.port}", *ssh_args]
            local = cli + ["--path", str(root)]
            ssh_true = [
                shutil.which("ssh") or "ssh",
                "-i",
                str(key),
                "-p",
                str(server.port),
                "-F",
                "none",
                "-o",
                f"UserKnownHostsFile={known}",
                "-o",
                "StrictHostKeyChecking=yes",
                "-o",
                "BatchMode=yes",
                "127.0.0.1",
                "true",
            ]
            fleet = cli + ["--hosts-file", str(work / "fleet.txt"), *ssh_args]
            checked(timed(remote, warm_env)[1])  # fills the results cache
            checked(timed(local, warm_env)[1])
            samples: dict[str, list[float]] = {
                name: [] for name in ("ssh true", "warm path", "warm host", "cold path", "cold host")
            }
            children = 0
            report = {}
            for _ in range(args.runs):
                samples["ssh true"].append(timed(ssh_true, warm_env)[0])
                samples["warm path"].append(timed(local, warm_env)[0])
                before = log.read_text().splitlines().count("-I")
                seconds, proc = timed(remote, warm_env)
                samples["warm host"].append(seconds)
                report = checked(proc)
                children += log.read_text().splitlines().count("-I") - before
                samples["cold path"].append(timed(local, cold_env)[0])
                samples["cold host"].append(timed(remote, cold_env)[0])
            fleets = {}
            for jobs in (4, 16):
                # The floor: OpenSSH's `ssh host true` for every alias, as many at once.
                # (No retries: a host the server turned away past its MaxStartups prints "failed".)
                one = shlex.join([ssh_true[0], "-i", str(key), "-F", str(config), *ssh_true[7:-2]])
                floor = ["xargs", "-P", str(jobs), "-I", "{}", "sh", "-c", f'{one} "$1" true || echo failed', "-", "{}"]
                floor_s = timed_input(floor, (work / "fleet.txt").read_text(), warm_env)
                fleets[f"warm, --jobs {jobs}"] = fleet_run(fleet + ["--jobs", str(jobs)], warm_env, log) + (floor_s,)
            shutil.rmtree(cache)
            fleets["cold (cache empty), --jobs 16"] = fleet_run(fleet + ["--jobs", "16"], warm_env, log) + (None,)
    m = {name: statistics.median(values) for name, values in samples.items()}
    warm_floor, cold_floor = m["ssh true"] + m["warm path"], m["ssh true"] + m["cold path"]
    target = report["target"]
    print(f"vLLM {args.release}, {args.runs} runs each, median wall time")
    print(
        f"  ssh host true: {m['ssh true']:.3f} s; check --path warm {m['warm path']:.3f} s, cold {m['cold path']:.3f} s"
    )
    print(
        f"  check --host warm: {m['warm host']:.3f} s = {m['warm host'] / warm_floor:.2f}x its floor "
        f"({warm_floor:.3f} s); "
        f"{children} behaviour children in {args.runs} checks; {int(target['bytes_received']):,} bytes received"
    )
    print(
        f"  check --host cold: {m['cold host']:.3f} s = {m['cold host'] / cold_floor:.2f}x its floor "
        f"({cold_floor:.3f} s)"
    )
    for name, (seconds, answered, started, tries, floor_s) in fleets.items():
        floor = (
            f"; `ssh host true` to each, as many at once: {floor_s[0]:.2f} s, {floor_s[1]} failed"
            if floor_s is not None
            else ""
        )
        print(
            f"  fleet of {args.hosts} unchanged hosts, {name}: {seconds:.2f} s, {answered} answered "
            f"({tries} connections tried), {started} behaviour children{floor}"
        )


if __name__ == "__main__":
    main()
