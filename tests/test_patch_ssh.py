"""`patch` and `restore` over ssh: a copy of a real release tree behind a real OpenSSH server.

The remote interpreter is a venv whose .pth points at a private copy of the
release tree (never at the shared cache), so the files SFTP writes are the
files the test then reads back byte for byte.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from pathlib import Path

import pytest

from conftest import check_json, make_venv, run_cli, statuses
from patching import RESOLVER, SCHEDULER, STATE, installed, sha, snapshot
from sshd import host, trust
from dflash_doctor.model import ToolError

pytestmark = pytest.mark.release

FIXES = ("--only", "layer-offset", "--only", "cache-drop")


@pytest.fixture
def remote(tmp_path, server, client):
    """A 0.20.1 tree copied to tmp, its venv, and a trusted sshd."""
    root = installed(tmp_path, "0.20.1")
    python = make_venv(tmp_path / "venv", root)
    srv = server()
    trust(client, srv)
    args = [*client["args"], "--host", host(srv), "--python", str(python)]
    return {"root": root, "python": python, "srv": srv, "args": args, "env": client["env"], "client": client}


def over_ssh(remote, command: str, *args: str):
    return run_cli(command, *remote["args"], *args, env=remote["env"])


def connections(remote) -> int:
    return remote["srv"].log_count("Connection from 127.0.0.1")


@pytest.mark.slow
def test_patch_check_restore_over_ssh_one_connection_per_run(remote):
    root = remote["root"]
    before = snapshot(root)

    proc = over_ssh(remote, "patch", *FIXES, "--yes")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert f"patched {RESOLVER}, {SCHEDULER}" in proc.stderr or f"patched {SCHEDULER}, {RESOLVER}" in proc.stderr
    assert re.search(r"^layer-offset +PRESENT ", proc.stdout, re.M)  # the re-check's verdicts
    assert connections(remote) == 1
    assert remote["srv"].log_count("Starting session: subsystem 'sftp'") == 1
    # the probe, the lock holder, the re-check's probe, and the behaviour runs of the check and the re-check
    assert remote["srv"].log_count("req exec") >= 4
    manifest = json.loads((root / STATE / "manifest.json").read_text())
    assert set(manifest["files"]) == {RESOLVER, SCHEDULER}
    for relpath, entry in manifest["files"].items():
        assert sha((root / relpath).read_bytes()) == entry["sha256_after"]
        assert sha((root / entry["backup"]).read_bytes()) == entry["sha256_before"] == sha(before[relpath][0])
        assert (root / relpath).stat().st_mode == before[relpath][1]
    assert not list(root.rglob("*.dflash-doctor-tmp"))

    # The remote report marks the patched fixes exactly as a local check of the same tree does.
    code, report = check_json(*remote["args"], *FIXES, env=remote["env"])
    _, local = check_json("--path", str(root), *FIXES)
    assert code == 0 and statuses(report) == {"layer-offset": "present", "cache-drop": "present"}
    assert report["fixes"] == local["fixes"]
    assert all(
        "patched locally by dflash-doctor" in (e.get("note") or "")
        for fix in report["fixes"]
        for e in fix["evidence"]
        if e["file"] in (RESOLVER, SCHEDULER)
    )
    assert all("local dflash-doctor patch" in fix["reason"] for fix in report["fixes"])
    assert report["local_patches"] == local["local_patches"]
    assert {entry["status"] for entry in report["local_patches"]} == {"applied"}
    assert {RESOLVER, SCHEDULER} <= set(report["engine"]["modified_files"])
    assert connections(remote) == 2

    patched = snapshot(root)
    again = over_ssh(remote, "patch", *FIXES, "--yes")
    assert again.returncode == 0 and "nothing to patch" in again.stderr, again.stderr
    assert snapshot(root) == patched
    assert connections(remote) == 3

    proc = over_ssh(remote, "restore", "--yes")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert " ABSENT  " in proc.stdout
    assert snapshot(root) == before  # every file's bytes, mode and owner; no state directory left
    assert connections(remote) == 4
    again = over_ssh(remote, "restore", "--yes")
    assert again.returncode == 0 and "nothing to restore" in again.stderr
    assert snapshot(root) == before


@pytest.mark.slow
def test_mode_and_owner_are_kept_over_sftp(remote):
    root = remote["root"]
    (root / RESOLVER).chmod(0o640)
    os.chown(root / RESOLVER, 4321, 4321)
    proc = over_ssh(remote, "patch", "--only", "layer-offset", "--yes")
    assert proc.returncode == 0, proc.stderr
    info = (root / RESOLVER).stat()
    assert (info.st_mode & 0o7777, info.st_uid, info.st_gid) == (0o640, 4321, 4321)
    assert (
        sha((root / RESOLVER).read_bytes())
        == json.loads((root / STATE / "manifest.json").read_text())["files"][RESOLVER]["sha256_after"]
    )


@pytest.mark.slow
def test_remote_file_changed_after_the_check_is_refused(remote):
    """Between the probe and the write (same connection), someone edits the file."""
    from dflash_doctor.cache import structure_fixes
    from dflash_doctor.targets import files_for
    from dflash_doctor.patching.apply import apply_changes
    from dflash_doctor.patching.plan import plan_patches
    from dflash_doctor.rulefile import select
    from dflash_doctor.targets.probing import probe_request
    from dflash_doctor.targets.ssh import SshOptions, SshTarget

    root, user = remote["root"], remote["client"]
    rules = select(["layer-offset"])
    options = SshOptions(python=str(remote["python"]), identity=Path(user["args"][1]), known_hosts=user["known"])
    target = SshTarget(host(remote["srv"]), options, probe_request(rules))
    with target.connected():
        resolved = target.resolve()
        plan = plan_patches(resolved.tree, rules, structure_fixes(resolved.tree, rules))
        assert [change.file for change in plan.changes] == [RESOLVER]
        edited = (root / RESOLVER).read_bytes() + b"# edited by someone else\n"
        (root / RESOLVER).write_bytes(edited)
        with pytest.raises(ToolError, match="changed since it was checked"):
            apply_changes(files_for(resolved)(), plan.changes, "test")
    assert (root / RESOLVER).read_bytes() == edited
    assert not (root / STATE).exists()
    assert connections(remote) == 1


@pytest.mark.slow
def test_a_lock_held_on_the_remote_machine_refuses_the_run(remote):
    """The remote lock is the local one: a `patch --path` running there blocks an ssh patch."""
    root = remote["root"]
    before = snapshot(root)
    (root / STATE).mkdir()
    with open(root / STATE / "lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        proc = over_ssh(remote, "patch", "--only", "layer-offset", "--yes")
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    assert "another dflash-doctor patch or restore is running" in proc.stderr
    assert (root / RESOLVER).read_bytes() == before[RESOLVER][0]
    assert not (root / STATE / "manifest.json").exists()


@pytest.mark.slow
def test_dry_run_over_ssh_changes_nothing(remote):
    before = snapshot(remote["root"])
    proc = over_ssh(remote, "patch", *FIXES, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert f"+++ b/{RESOLVER}" in proc.stdout and f"+++ b/{SCHEDULER}" in proc.stdout
    assert snapshot(remote["root"]) == before
    assert remote["srv"].log_count("Starting session: subsystem 'sftp'") == 0


@pytest.mark.slow
def test_restore_over_ssh_refuses_a_file_changed_since_the_patch(remote):
    root = remote["root"]
    assert over_ssh(remote, "patch", "--only", "layer-offset", "--yes").returncode == 0
    edited = (root / RESOLVER).read_bytes() + b"# hand edit\n"
    (root / RESOLVER).write_bytes(edited)
    proc = over_ssh(remote, "restore", "--yes")
    assert proc.returncode == 3 and "was changed since dflash-doctor patched it" in proc.stderr, proc.stderr
    assert (root / RESOLVER).read_bytes() == edited


@pytest.mark.slow
def test_host_and_path_together_are_refused(remote):
    proc = run_cli("patch", "--host", "127.0.0.1:1", "--path", str(remote["root"]), "--yes")
    assert proc.returncode == 3 and "not --host and --path" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_the_remote_lock_ends_when_dflash_doctor_dies(remote, tmp_path):
    """Held by a process that is then killed: sshd closes the channel and the holder lets go."""
    import signal
    import subprocess
    import sys
    import time

    root, user = remote["root"], remote["client"]
    (root / STATE).mkdir()
    script = tmp_path / "hold.py"
    script.write_text(
        "import sys, time\n"
        "from pathlib import Path\n"
        "from dflash_doctor.patching.sftp_files import SftpFiles\n"
        "from dflash_doctor.targets.ssh import SshOptions, SshTarget\n"
        f"options = SshOptions(python={str(remote['python'])!r}, identity=Path({user['args'][1]!r}), "
        f"known_hosts=Path({str(user['known'])!r}))\n"
        f"with SshTarget({host(remote['srv'])!r}, options, {{}}).connected() as ssh_client:\n"
        f"    with SftpFiles(ssh_client, {str(root)!r}, options.python, 'remote', 'vllm').lock('{STATE}/lock'):\n"
        "        print('held', flush=True)\n"
        "        time.sleep(600)\n"
    )
    holder = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, env=remote["env"])
    try:
        assert holder.stdout.readline() == b"held\n"
        with open(root / STATE / "lock") as lock:
            with pytest.raises(BlockingIOError):
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            holder.send_signal(signal.SIGKILL)
            holder.wait(timeout=10)
            deadline = time.monotonic() + 10
            while True:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    assert time.monotonic() < deadline, "the remote lock outlived the process that held it"
                    time.sleep(0.05)
    finally:
        if holder.poll() is None:
            holder.kill()


def test_the_probe_takes_only_package_files_from_a_manifest():
    from dflash_doctor.standalone.probe import patched_files

    manifest = {
        "files": {RESOLVER: {}, "vllm/../../etc/shadow": {}, "/etc/passwd": {}, "setup.py": {}, "vllm/x.py": {}}
    }
    assert patched_files(json.dumps(manifest).encode(), "vllm") == [RESOLVER, "vllm/x.py"]
    assert (
        patched_files(b"not json", "vllm")
        == patched_files(b'{"files": 3}', "vllm")
        == patched_files(None, "vllm")
        == []
    )
