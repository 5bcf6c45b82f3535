"""`check --host` over ssh on loopback beside a local `check --path` of the same tree.

Starts a real sshd on 127.0.0.1 (the tests' helper), makes a venv whose
interpreter sees the real vLLM release tree, then times the commands as
fresh processes, interleaved, and reports medians, the ratio, the bytes
moved and the connections / exec channels sshd logged. The baselines
"structure only" are the same `check --host` with the connection not held
open, so no behaviour runs on the host (what --host did before behaviour
ran there), and the same `check --path` with behaviour switched off. What
behaviour adds over ssh, less what it adds locally (the extraction in this
process is the same), is the cost of running it on the host: the exec
channel, the round trips and the remote child.

    python benchmarks/bench_ssh.py [--runs 7] [--release 0.33.0]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from sshd import client_env, loopback_host  # noqa: E402

from bench_check import STRUCTURE_ONLY  # noqa: E402 - `check --path` with behaviour switched off

from dflash_doctor.targets.release import release_tree  # noqa: E402


def timed(command: list[str], env: dict) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    return time.perf_counter() - start, proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--release", default="0.33.0")
    args = parser.parse_args()
    root = release_tree(args.release)
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        with loopback_host(work, root) as (server, key):
            (work / "known_hosts").write_text(server.host_public_key_line)
            env = {**client_env(), "HOME": str(work), "DFLASH_DOCTOR_NO_CACHE": "1"}
            cli = [sys.executable, "-m", "dflash_doctor", "check", "--format", "json"]
            remote = cli + [
                "--host",
                f"127.0.0.1:{server.port}",
                "--python",
                str(work / "venv/bin/python"),
                "--identity",
                str(key),
                "--known-hosts",
                str(work / "known_hosts"),
            ]
            local = cli + ["--path", str(root)]
            # The same CLI with SshTarget.connected() a no-op: resolve() then holds no connection, no behaviour.
            unheld = [
                sys.executable,
                "-c",
                "import contextlib; from dflash_doctor.targets.ssh import SshTarget; "
                "SshTarget.connected = lambda self: contextlib.nullcontext(); "
                "from dflash_doctor.cli import main; main()",
            ] + remote[3:]
            local_structure = [sys.executable, "-c", STRUCTURE_ONLY] + local[3:]
            before = server.log_count("Connection from"), server.log_count("request exec")
            samples: dict[str, list[float]] = {"local": [], "ssh": [], "structure": [], "local structure": []}
            report = {}
            for _ in range(args.runs):
                samples["local"].append(timed(local, env)[0])
                seconds, out = timed(remote, env)
                samples["ssh"].append(seconds)
                report = json.loads(out)
                samples["structure"].append(timed(unheld, env)[0])
                samples["local structure"].append(timed(local_structure, env)[0])
            connections = server.log_count("Connection from") - before[0]
            execs = server.log_count("request exec") - before[1] - args.runs  # the baseline's probes
    local_s, ssh_s, bare_s, local_bare_s = (
        statistics.median(samples[k]) for k in ("local", "ssh", "structure", "local structure")
    )
    target = report["target"]
    print(f"vLLM {args.release}, {args.runs} runs each, median wall time, results cache off")
    print(
        f"  check --path (local):       {local_s:.3f} s; structure only {local_bare_s:.3f} s: behaviour adds "
        f"{local_s - local_bare_s:+.3f} s"
    )
    print(f"  check --host (ssh loopback): {ssh_s:.3f} s = {ssh_s / local_s:.2f}x local")
    print(
        f"  check --host, structure only (baseline): {bare_s:.3f} s; behaviour on the host adds {ssh_s - bare_s:+.3f} s"
    )
    print(
        f"  running behaviour on the host rather than here costs {(ssh_s - bare_s) - (local_s - local_bare_s):+.3f} s"
    )
    print(
        f"  per behaviour check: {(connections - args.runs) / args.runs:g} connection(s), "
        f"{execs / args.runs:g} exec channel(s); "
        f"{int(target['bytes_sent']):,} bytes sent, {int(target['bytes_received']):,} bytes received"
    )


if __name__ == "__main__":
    main()
