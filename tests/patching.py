"""What the patch tests share: the files a patch changes, the state directory,
a whole release tree standing in for a site-packages, snapshots of a tree, and
``patch`` as the hostile-tree tests run it."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import run_cli
from dflash_doctor.targets.release import release_tree

RESOLVER = "vllm/v1/worker/gpu_model_runner.py"

SCHEDULER = "vllm/v1/core/sched/scheduler.py"

STATE = ".dflash-doctor"

ONLY = ("--only", "layer-offset")


def installed(tmp_path: Path, version: str) -> Path:
    """A whole release tree, copied to stand in for an installed site-packages."""
    dest = tmp_path / f"site-{version}"
    shutil.copytree(release_tree(version), dest, symlinks=True)
    return dest


def snapshot(root: Path) -> dict[str, tuple[bytes, int, int, int]]:
    """Every file under root: bytes, mode, owner."""
    found = {}
    for directory, _, files in os.walk(root):
        for name in files:
            path = Path(directory, name)
            info = path.lstat()
            found[path.relative_to(root).as_posix()] = (path.read_bytes(), info.st_mode, info.st_uid, info.st_gid)
    return found


def entries(root: Path) -> dict[str, tuple[object, ...]]:
    """Every entry under root, links not followed: a link's target, a file's bytes and mode, a directory's mode;
    a file over 16 MiB (a sparse giant) is its size and allocated blocks, never read."""
    found: dict[str, tuple[object, ...]] = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(directory, name)
            info = path.lstat()
            relpath = path.relative_to(root).as_posix()
            if path.is_symlink():
                found[relpath] = ("link", os.readlink(path))
            elif path.is_dir():
                found[relpath] = ("dir", info.st_mode)
            elif info.st_size > 16 << 20:
                found[relpath] = ("giant", info.st_size, info.st_blocks, info.st_mode)
            else:
                found[relpath] = (path.read_bytes(), info.st_mode, info.st_uid, info.st_gid)
    return found


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def patch(root: Path, *args: str) -> subprocess.CompletedProcess:
    """``patch --only layer-offset --yes`` of the tree at ``root``."""
    return run_cli("patch", "--path", str(root), *ONLY, "--yes", *args)


def strace_ok() -> bool:
    """strace is here and can hold an fsync (the kill-point tests need it)."""
    if shutil.which("strace") is None:
        return False
    probe = subprocess.run(
        [
            "strace",
            "-f",
            "--seccomp-bpf",
            "-o",
            "/dev/null",
            "-e",
            "trace=fsync",
            "-e",
            "inject=fsync:delay_enter=1000",
            sys.executable,
            "-c",
            "pass",
        ],
        capture_output=True,
    )
    return probe.returncode == 0


def kill(proc: subprocess.Popen) -> None:
    """SIGKILL to the process group of ``proc`` (started with a session of its own), and wait until
    every process of the group has exited: ``proc`` may be strace, whose tracee dies after it and
    holds the tree's lock until it does."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    deadline = time.monotonic() + 30
    while _running_in_group(proc.pid):
        assert time.monotonic() < deadline, f"process group {proc.pid} still running 30 s after SIGKILL"
        time.sleep(0.01)


def _running_in_group(group: int) -> bool:
    """Whether a process of ``group`` has not exited yet (a zombie has: its files are closed)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:  # exited meanwhile
            continue
        if int(fields[2]) == group and fields[0] != "Z":  # after "pid (comm)": state, ppid, pgrp
            return True
    return False
