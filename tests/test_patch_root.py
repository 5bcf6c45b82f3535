"""`patch` and `restore` hold the tree they checked, and read its state within caps.

- The root swapped for a symlink to another tree right after the hash check
  (strace holds the process inside the check's read of the file, a real
  stop; the test swaps the directory while it is held): nothing lands in the
  other tree, nor anywhere outside.
- A sparse 4 GiB manifest or backup is refused by its size, with the cap
  named, within a measured memory bound.
- ``patch --repo --dry-run`` on a checkout whose ``.git/index`` is a valid
  index padded to 512 MiB (an optional extension git ignores) copies nothing
  of it: disk use under a private TMPDIR is measured while it runs.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import make_venv, run_cli
from measure import run_measured
from patching import RESOLVER, STATE, entries, kill, patch, sha, strace_ok
from sshd import host, trust

pytestmark = pytest.mark.release

GIB = 1 << 30
# A patch run of a small tree peaks near 75 MiB here (a refused one near 65 MiB); reading
# a 4 GiB file whole could not stay under this.
RSS_BOUND = 200 << 20


# ------------------------------------------------------------ the root swapped during the run


def _descendants(pid: int) -> list[int]:
    """``pid`` and every process under it (processes come and go while this looks)."""
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        found.append(current)
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as children:
                    queue += [int(child) for child in children.read().split()]
        except OSError:
            continue
    return found


def _open_paths(pid: int) -> set[str]:
    paths = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return paths
    for fd in fds:
        try:
            paths.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
    return paths


def _in_hash_check(proc: subprocess.Popen, lock: Path, target: Path) -> bool:
    """A process of the run holds the lock and has the file open: it is inside the
    hash check's read (held there by strace), the only moment both are open."""
    return any({str(lock), str(target)} <= _open_paths(pid) for pid in _descendants(proc.pid))


@pytest.mark.parametrize("command", ["patch", "restore"])
def test_root_swapped_for_a_link_after_the_hash_check_writes_nothing_into_the_other_tree(tmp_path, mini_tree, command):
    """patch: the other tree was patched before for another fix (it has a state directory);
    restore: both trees were patched alike, so the other tree's backup fits too."""
    if not strace_ok():
        pytest.skip("strace cannot inject syscall delays here")
    root = mini_tree("0.20.1")
    other = mini_tree("0.20.1", "other")  # another tree of the same release
    if command == "patch":
        assert run_cli("patch", "--path", str(other), "--only", "cache-drop", "--yes").returncode == 0, "set-up"
    else:
        assert patch(root).returncode == 0 and patch(other).returncode == 0, "set-up"
    moved = tmp_path / "moved"
    before_root, before_other = entries(root), entries(other)
    marker = sha((other / RESOLVER).read_bytes())
    # Every read(2) of the file is held 1 s: the check's reads, and the hash check's under the lock.
    traced = [
        "strace",
        "-f",
        "--seccomp-bpf",
        "-o",
        "/dev/null",
        "-P",
        str(root / RESOLVER),
        "-e",
        "trace=read",
        "-e",
        "inject=read:delay_enter=1000000",
        sys.executable,
        "-m",
        "dflash_doctor",
        command,
        "--path",
        str(root),
        "--only",
        "layer-offset",
        "--yes",
    ]
    proc = subprocess.Popen(traced, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not _in_hash_check(proc, root / STATE / "lock", root / RESOLVER):
            assert proc.poll() is None, f"finished before the hash check: {proc.stderr.read().decode()}"
            assert time.monotonic() < deadline, "the hash check was not reached"
            time.sleep(0.005)
        os.rename(root, moved)  # the owner of the directory above the root swaps it ...
        root.symlink_to(other)  # ... for a link to the other tree, while the file is being hashed
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.returncode is None:
            kill(proc)
    assert sha((other / RESOLVER).read_bytes()) == marker  # the other tree untouched: no payload ...
    assert entries(other) == before_other  # ... no backup, no manifest
    assert entries(moved) == before_root  # and the tree itself as it was (patch: no state, no backup left)
    assert sorted(os.listdir(tmp_path)) == sorted(["moved", root.name, other.name])  # nothing written beside them
    lines = err.decode().strip().splitlines()
    assert proc.returncode == 3 and lines[-1].startswith("dflash-doctor: error: "), lines
    assert "was moved or replaced while dflash-doctor ran" in lines[-1], lines


# ------------------------------------------------------------ sparse giants in the state directory


def _sparse(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        handle.truncate(size)


def _measured(command: str, root: Path):
    # 1 GiB of address space: a whole read of 4 GiB fails at once instead of filling the machine.
    return run_measured(
        command, "--path", str(root), "--only", "layer-offset", "--yes", address_space_mb=1024, timeout=300
    )


def _assert_capped(result, fragment: str) -> None:
    assert result.returncode == 3, (result.returncode, result.stderr[-2000:])
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr and lines[-1].startswith("dflash-doctor: error: "), lines
    assert fragment in lines[-1] and f"({4 * GIB} bytes); nothing was changed" in lines[-1], lines
    assert result.peak_rss < RSS_BOUND, result.peak_rss


@pytest.mark.parametrize("command", ["patch", "restore"])
def test_sparse_4gib_manifest_is_refused_by_its_size(mini_tree, command):
    root = mini_tree("0.20.1")
    _sparse(root / STATE / "manifest.json", 4 * GIB)
    before = entries(root)
    _assert_capped(_measured(command, root), "manifest.json in ")
    assert "over the 64 KiB cap for the patch manifest" in _measured(command, root).stderr
    assert entries(root) == before


def test_sparse_4gib_backup_is_refused_by_patch(mini_tree):
    """patch reads a backup already at the backup's name (a run that died after writing it)."""
    root = mini_tree("0.20.1")
    _sparse(root / STATE / "backups" / f"gpu_model_runner.py.{sha((root / RESOLVER).read_bytes())[:16]}", 4 * GIB)
    before = entries(root)
    result = _measured("patch", root)
    _assert_capped(result, "over the 1 MiB cap for a patch backup")
    assert entries(root) == before


def test_sparse_4gib_backup_is_refused_by_restore(mini_tree):
    root = mini_tree("0.20.1")
    assert patch(root).returncode == 0, "set-up"
    backup = next((root / STATE / "backups").iterdir())
    backup.unlink()
    _sparse(backup, 4 * GIB)
    before = entries(root)
    result = _measured("restore", root)
    _assert_capped(result, "over the 1 MiB cap for a patch backup")
    assert "back to its original" not in result.stderr
    assert entries(root) == before


def test_sparse_4gib_pyc_is_judged_by_its_header_alone(mini_tree):
    """Only the 16-byte header of a .pyc beside a patched file is read (is it an unchecked hash-based pyc?)."""
    root = mini_tree("0.20.1")
    pyc = root / "vllm/v1/worker/__pycache__/gpu_model_runner.cpython-311.pyc"
    _sparse(pyc, 4 * GIB)  # a zero header: a timestamp pyc, which notices the new source by itself
    result = _measured("patch", root)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.peak_rss < RSS_BOUND, result.peak_rss
    assert pyc.stat().st_size == 4 * GIB  # kept


def test_a_state_directory_of_more_than_10000_names_is_refused(mini_tree):
    root = mini_tree("0.20.1")
    backups = root / STATE / "backups"
    backups.mkdir(parents=True)
    for number in range(10_001):
        (backups / f"planted-{number}").touch()
    before = entries(root)
    result = _measured("patch", root)
    assert result.returncode == 3 and "over the 10000-entry cap" in result.stderr.strip().splitlines()[-1], (
        result.stderr
    )
    assert entries(root) == before


def test_state_within_its_caps_still_patches_and_restores(mini_tree):
    """The caps leave room for real state: a whole run of every patchable fix, and its restore."""
    root = mini_tree("0.20.1")
    original = entries(root)
    patched = run_measured("patch", "--path", str(root), "--only", "layer-offset", "--only", "cache-drop", "--yes")
    assert patched.returncode == 0, patched.stderr
    assert patched.peak_rss < RSS_BOUND, patched.peak_rss
    manifest = (root / STATE / "manifest.json").stat().st_size
    assert 0 < manifest < (64 << 10) // 16, manifest  # the cap leaves 16x the state of every patchable fix
    assert run_measured("restore", "--path", str(root), "--yes").returncode == 0
    assert entries(root) == original


# ------------------------------------------------------------ patch --repo: nothing of the index copied


def _pad_index(index: Path, size: int) -> None:
    """The index as git wrote it, with a sparse optional extension ``ZZZZ`` of ``size``
    bytes before the trailer: git reads the index and ignores the extension."""
    data = index.read_bytes()[:-20]
    with open(index, "wb") as handle:
        handle.write(data + b"ZZZZ" + struct.pack(">I", size))
        handle.seek(size, os.SEEK_CUR)
        handle.write(bytes(20))


def _disk_use(directory: Path) -> int:
    """Bytes allocated under ``directory`` now (files come and go while it is walked)."""
    used = 0
    for parent, _, files in os.walk(directory):  # os.walk skips what vanished
        for name in files:
            try:
                used += os.lstat(os.path.join(parent, name)).st_blocks * 512
            except OSError:
                continue
    return used


@pytest.mark.slow
def test_patch_repo_dry_run_copies_nothing_of_a_512mib_index(copy, tmp_path):
    from gitrepos import SPECULATIVE as REPO_SPECULATIVE

    copy.git("checkout", "--quiet", "releases/v0.20")
    _pad_index(copy.path / ".git" / "index", 512 << 20)
    assert copy.git("ls-files", REPO_SPECULATIVE).strip() == REPO_SPECULATIVE  # git reads it as a valid index
    private = tmp_path / "tmp"
    private.mkdir()
    samples, done = [], threading.Event()

    def watch() -> None:
        while not done.is_set():
            samples.append(_disk_use(private))
            time.sleep(0.002)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = run_measured(
            "patch",
            "--repo",
            str(copy.path),
            "--pr",
            "53388",
            "--dry-run",
            env={**os.environ, "TMPDIR": str(private)},
            timeout=300,
        )
    finally:
        done.set()
        watcher.join()
    assert result.returncode == 0, result.stderr
    assert '+        return self.use_eagle() and self.method != "dflash"' in result.stdout
    assert len(samples) > 20 and max(samples) > 0, samples  # it watched the run, and saw the throw-away repository
    assert max(samples) < 8 << 20, max(samples)  # its objects and index, not the 512 MiB
    assert copy.git("status", "--porcelain") == ""


@pytest.mark.slow
def test_patch_repo_keeps_the_entries_a_sparse_checkout_leaves_out(copy):
    """A file a sparse checkout leaves out of the work tree (skip-worktree) is not a
    deletion: the snapshot keeps the index's entry, as git itself would."""
    from gitrepos import SPECULATIVE as REPO_SPECULATIVE

    copy.git("checkout", "--quiet", "releases/v0.20")
    copy.git("update-index", "--skip-worktree", REPO_SPECULATIVE)
    (copy.path / REPO_SPECULATIVE).unlink()
    result = run_measured("patch", "--repo", str(copy.path), "--pr", "53388", "--dry-run", timeout=300)
    assert result.returncode == 0, result.stderr
    assert '+        return self.use_eagle() and self.method != "dflash"' in result.stdout


# ------------------------------------------------------------ the same race over ssh (SFTP)


@pytest.mark.slow
def test_root_swapped_for_a_link_during_an_sftp_patch_is_refused(tmp_path, mini_tree, server, client):
    """sshd's own SFTP server is held inside its read of the file by strace (attached
    to the real sshd); the root is swapped while the lock is held and the file read."""
    if not strace_ok():
        pytest.skip("strace cannot inject syscall delays here")
    root = mini_tree("0.20.1")
    other = mini_tree("0.20.1", "other")
    assert run_cli("patch", "--path", str(other), "--only", "cache-drop", "--yes").returncode == 0, "set-up"
    python = make_venv(tmp_path / "venv", root)
    srv = server()
    trust(client, srv)
    moved = tmp_path / "moved"
    before_root, before_other = entries(root), entries(other)
    tracer = subprocess.Popen(
        [
            "strace",
            "-f",
            "-p",
            str(srv.process.pid),
            "-o",
            "/dev/null",
            "-P",
            str(root / RESOLVER),
            "-e",
            "trace=read",
            "-e",
            "inject=read:delay_enter=1000000",
        ],
        stderr=subprocess.PIPE,
    )
    try:
        time.sleep(1)  # attached
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dflash_doctor",
                "patch",
                *client["args"],
                "--host",
                host(srv),
                "--python",
                str(python),
                "--only",
                "layer-offset",
                "--yes",
            ],
            env=client["env"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 300
            while not _holding(srv.process.pid, root / STATE / "lock", root / RESOLVER):
                assert proc.poll() is None, f"finished before the hash check: {proc.stderr.read().decode()}"
                assert time.monotonic() < deadline, "the hash check was not reached"
                time.sleep(0.005)
            os.rename(root, moved)
            root.symlink_to(other)
            _, err = proc.communicate(timeout=300)
        finally:
            if proc.returncode is None:
                kill(proc)
    finally:
        tracer.terminate()
        tracer.wait(timeout=30)
    assert entries(other) == before_other  # no payload, backup or manifest in the other tree
    after = entries(moved)
    # The tree as it was, but for the empty state directory made before the swap: once the
    # root's path leads elsewhere, SFTP cannot reach the tree to remove it, and does not try.
    left = {name: value for name, value in after.items() if name.startswith(STATE)}
    lock = (b"", 0o100644, moved.stat().st_uid, moved.stat().st_gid)
    assert left == {STATE: ("dir", 0o40755), f"{STATE}/backups": ("dir", 0o40755), f"{STATE}/lock": lock}
    assert {name: value for name, value in after.items() if not name.startswith(STATE)} == before_root
    lines = err.decode().strip().splitlines()
    assert proc.returncode == 3 and "was moved or replaced while dflash-doctor ran" in lines[-1], lines


def _holding(pid: int, lock: Path, target: Path) -> bool:
    """Some process under ``pid`` holds the lock (the lock holder) while another has the file open (SFTP)."""
    paths = set().union(*(_open_paths(each) for each in _descendants(pid)))
    return {str(lock), str(target)} <= paths


# ------------------------------------------------------------ a kernel without openat2


def _traced(log: Path, inject: tuple[str, ...], *args: str) -> subprocess.CompletedProcess:
    """dflash-doctor with its openat2 calls logged (and, with ``inject``, failing as on a kernel before 5.6)."""
    command = [
        "strace",
        "-f",
        "--seccomp-bpf",
        "-o",
        str(log),
        "-e",
        "trace=openat2",
        *inject,
        sys.executable,
        "-m",
        "dflash_doctor",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("kernel", ["openat2", "no openat2"])
def test_paths_are_resolved_beneath_the_root_with_or_without_openat2(tmp_path, mini_tree, kernel):
    """The same refusals and the same writes whether the kernel resolves the path
    (openat2) or the walk does, one O_NOFOLLOW open per component."""
    if not strace_ok():
        pytest.skip("strace cannot inject syscall errors here")
    inject = ("-e", "inject=openat2:error=ENOSYS") if kernel == "no openat2" else ()
    log = tmp_path / "openat2.log"
    outside = tmp_path / "outside"
    outside.mkdir()
    planted = mini_tree("0.20.1", "planted")
    (planted / STATE).mkdir()
    (planted / STATE / "backups").symlink_to(outside)
    proc = _traced(log, inject, "patch", "--path", str(planted), "--only", "layer-offset", "--yes")
    assert proc.returncode == 3 and f"{STATE}/backups in {planted} is a symlink" in proc.stderr.splitlines()[-1]
    assert os.listdir(outside) == []

    root = mini_tree("0.20.1")
    before = entries(root)
    proc = _traced(log, inject, "patch", "--path", str(root), "--only", "layer-offset", "--yes")
    assert proc.returncode == 0, proc.stderr
    assert sha((root / RESOLVER).read_bytes()) != sha(before[RESOLVER][0])
    calls = log.read_text()
    beneath = [line for line in calls.splitlines() if "resolve=RESOLVE_NO_SYMLINKS|RESOLVE_BENEATH" in line]
    assert beneath, calls[-2000:]  # the resolution was asked of the kernel ...
    refused = [line for line in beneath if "ENOSYS" in line]
    assert (refused == beneath) if inject else not refused  # ... and, without openat2, the walk did it
    assert _traced(log, inject, "restore", "--path", str(root), "--yes").returncode == 0
    assert entries(root) == before
