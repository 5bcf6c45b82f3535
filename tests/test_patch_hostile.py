"""`patch` and `restore` on trees a hostile peer prepared.

Each tree is a small copy of a real release (``mini_tree``) beside an
``outside`` marker directory that holds a victim file. The peer plants
symlinks (the state directory, its backups, the lock, the manifest, a
target file, a directory on the way) and manifests that name paths out of
the tree or have fields of the wrong type. Every test asserts the exit code,
the one-line error, that nothing under ``outside`` (and nothing else beside
the tree) was created or changed, and that the tree is as it was.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import check_json, make_venv, run_cli, statuses
from patching import ONLY, RESOLVER, STATE, entries, patch, sha
from sshd import host, trust

VICTIM = b"# the operator's file outside the tree\n"

pytestmark = pytest.mark.release


@pytest.fixture
def hostile(tmp_path, mini_tree):
    """A 0.20.1 tree, and an ``outside`` directory holding ``victim.py``;
    ``untouched()`` asserts outside and the tree's neighbours are as they were."""
    root = mini_tree("0.20.1")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.py").write_bytes(VICTIM)
    (outside / "victim.py").chmod(0o600)

    class Hostile:
        def __init__(self):
            self.root, self.outside = root, outside

        def freeze(self):
            self.before = entries(outside), sorted(os.listdir(tmp_path))

        def untouched(self):
            assert (entries(outside), sorted(os.listdir(tmp_path))) == self.before
            assert (outside / "victim.py").read_bytes() == VICTIM

    return Hostile()


def restore(root: Path) -> object:
    return run_cli("restore", "--path", str(root), "--yes")


def assert_refused(proc, fragment: str) -> None:
    """Exit 3 and one error line, the last (patch first names the sites it would change)."""
    assert proc.returncode == 3, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("dflash-doctor: error: ")]
    assert errors == lines[-1:] and fragment in errors[0], lines


def manifest(files: dict) -> str:
    return json.dumps({"schema": "dflash-doctor/patch-state/v1", "files": files})


def entry(before: bytes, after: bytes) -> dict:
    """A manifest entry as this tool writes it."""
    patch_record = {
        "fix": "layer-offset",
        "symbol": "s",
        "form": "f",
        "produces": "p",
        "tool_version": "0",
        "applied_at": "t",
    }
    return {"sha256_before": sha(before), "sha256_after": sha(after), "backup": "x", "patches": [patch_record]}


def plant_state(root: Path, files: dict, backups: dict[str, bytes]) -> None:
    (root / STATE / "backups").mkdir(parents=True)
    (root / STATE / "manifest.json").write_text(manifest(files))
    for name, data in backups.items():
        (root / STATE / "backups" / name).write_bytes(data)


# ------------------------------------------------------------ planted state symlinks


@pytest.mark.parametrize(
    "planted, restore_code",
    [
        (STATE, 3),
        (f"{STATE}/backups", 0),
        (f"{STATE}/lock", 0),
        (f"{STATE}/manifest.json", 3),
    ],
)
def test_planted_state_symlink_is_refused_and_nothing_is_written_outside(hostile, planted, restore_code):
    """restore reads the manifest first: through a planted link it refuses;
    without a manifest it has nothing to restore, and writes nothing either way."""
    root, outside = hostile.root, hostile.outside
    if planted != STATE:
        (root / STATE).mkdir()
    target = outside if planted in (STATE, f"{STATE}/backups") else outside / "victim.py"
    (root / planted).symlink_to(target)
    hostile.freeze()
    tree = entries(root)

    proc = patch(root)
    assert_refused(proc, f"{planted} in {root} is a symlink")
    assert entries(root) == tree
    hostile.untouched()

    proc = restore(root)
    if restore_code == 3:
        assert_refused(
            proc, f"{STATE} in {root} is a symlink" if planted == STATE else f"{planted} in {root} is a symlink"
        )
    else:
        assert proc.returncode == 0 and "nothing to restore" in proc.stderr, proc.stderr
    assert entries(root) == tree
    hostile.untouched()


def test_planted_state_symlink_with_a_manifest_behind_it_restores_nothing(hostile):
    """The link leads to a state dir the peer filled: a manifest whose entry
    the tree's file matches, and a 'backup' with the peer's bytes."""
    root, outside = hostile.root, hostile.outside
    current = (root / RESOLVER).read_bytes()
    planted = outside / "state"
    (planted / "backups").mkdir(parents=True)
    evil = b"import os  # the peer's code\n"
    (planted / "manifest.json").write_text(manifest({RESOLVER: entry(evil, current)}))
    (planted / "backups" / f"gpu_model_runner.py.{sha(evil)[:16]}").write_bytes(evil)
    (root / STATE).symlink_to(planted)
    hostile.freeze()
    tree = entries(root)
    proc = restore(root)
    assert_refused(proc, f"{STATE} in {root} is a symlink")
    assert entries(root) == tree and (root / RESOLVER).read_bytes() == current
    hostile.untouched()


# ------------------------------------------------------------ manifests naming paths out of the tree


@pytest.mark.parametrize(
    "named",
    [
        "../outside/victim.py",
        "vllm/../../outside/victim.py",
        "ABSOLUTE",
        "vllm//x.py",
        "vllm/./x.py",
        "setup.py",
        "vllm/x.txt",
    ],
)
def test_manifest_naming_a_path_out_of_vllm_is_refused(hostile, named):
    root, outside = hostile.root, hostile.outside
    named = str(outside / "victim.py") if named == "ABSOLUTE" else named
    evil = b"import os  # the peer's code\n"
    plant_state(root, {named: entry(evil, VICTIM)}, {f"victim.py.{sha(evil)[:16]}": evil})
    hostile.freeze()
    tree = entries(root)
    for proc in (restore(root), patch(root)):
        assert_refused(proc, "manifest.json in")
        assert "is not a .py file under vllm/" in proc.stderr
        assert entries(root) == tree
        hostile.untouched()


def test_manifest_entry_linked_out_of_the_tree_is_refused(hostile):
    """The entry is a plain vllm/ path, but the file there links outside."""
    root, outside = hostile.root, hostile.outside
    (root / "vllm" / "evil.py").symlink_to(outside / "victim.py")
    evil = b"import os  # the peer's code\n"
    plant_state(root, {"vllm/evil.py": entry(evil, VICTIM)}, {f"evil.py.{sha(evil)[:16]}": evil})
    hostile.freeze()
    tree = entries(root)
    proc = restore(root)
    assert_refused(proc, f"vllm/evil.py in {root} links to {outside / 'victim.py'}, outside the tree's vllm/")
    assert entries(root) == tree
    hostile.untouched()


@pytest.mark.parametrize(
    "files",
    [
        [],
        {RESOLVER: "not an object"},
        {RESOLVER: {"sha256_before": 5, "sha256_after": "0" * 64, "patches": []}},
        {RESOLVER: {"sha256_before": "../../../outside/x" + "0" * 46, "sha256_after": "0" * 64, "patches": []}},
        {RESOLVER: {"sha256_before": "0" * 64, "sha256_after": "0" * 64, "patches": "x"}},
        {RESOLVER: {"sha256_before": "0" * 64, "sha256_after": "0" * 64, "patches": [{"fix": 1}]}},
        {RESOLVER: {"sha256_before": "0" * 64, "sha256_after": "0" * 64, "patches": [[1, 2]]}},
    ],
)
def test_manifest_with_fields_of_the_wrong_type_is_one_line_exit_3(hostile, files):
    root = hostile.root
    (root / STATE).mkdir()
    (root / STATE / "manifest.json").write_text(json.dumps({"schema": "dflash-doctor/patch-state/v1", "files": files}))
    hostile.freeze()
    tree = entries(root)
    for proc in (restore(root), patch(root)):
        assert_refused(proc, f"{STATE}/manifest.json in {root} cannot be read")
        assert entries(root) == tree
        hostile.untouched()
    # A check reads the same manifest and only ignores it.
    code, report = check_json("--path", str(root), *ONLY)
    assert code == 1 and statuses(report) == {"layer-offset": "absent"} and "local_patches" not in report


# ------------------------------------------------------------ target files that are symlinks


@pytest.mark.parametrize("linked", ["file", "directory"])
def test_target_linked_out_of_the_tree_is_refused(hostile, linked):
    root, outside = hostile.root, hostile.outside
    if linked == "file":
        shutil.copy2(root / RESOLVER, outside / "runner.py")
        (root / RESOLVER).unlink()
        (root / RESOLVER).symlink_to(outside / "runner.py")
        link, real = RESOLVER, outside / "runner.py"
    else:
        worker = root / "vllm/v1/worker"
        shutil.copytree(worker, outside / "worker")
        shutil.rmtree(worker)
        worker.symlink_to(outside / "worker")
        link, real = RESOLVER, outside / "worker" / "gpu_model_runner.py"
    hostile.freeze()
    tree = entries(root)
    proc = patch(root)
    assert_refused(proc, f"{link} in {root} links to {real}, outside the tree's vllm/")
    assert entries(root) == tree and not (root / STATE).exists()
    hostile.untouched()


def test_target_symlinked_inside_the_tree_is_patched_at_its_real_path_and_restored_exactly(hostile):
    root = hostile.root
    real = root / "vllm/v1/worker/runner_impl.py"
    os.replace(root / RESOLVER, real)
    real.chmod(0o640)
    (root / RESOLVER).symlink_to("runner_impl.py")
    hostile.freeze()
    tree = entries(root)

    proc = patch(root)
    assert proc.returncode == 0, proc.stderr
    assert os.readlink(root / RESOLVER) == "runner_impl.py"  # still the link, to the same file
    assert real.stat().st_mode & 0o7777 == 0o640  # the real file's mode, not the link's 0777
    recorded = json.loads((root / STATE / "manifest.json").read_text())["files"]
    assert set(recorded) == {RESOLVER}
    assert sha(real.read_bytes()) == recorded[RESOLVER]["sha256_after"] != recorded[RESOLVER]["sha256_before"]
    code, report = check_json("--path", str(root), *ONLY)
    assert code == 0 and statuses(report) == {"layer-offset": "present"}
    hostile.untouched()

    proc = restore(root)
    assert proc.returncode == 0, proc.stderr
    assert entries(root) == tree  # the link, the real file's bytes and mode; no state left
    hostile.untouched()


def test_bytecode_behind_a_linked_pycache_is_left_alone(hostile):
    """Patching removes unchecked-hash bytecode of the file; a __pycache__ that
    links out of the tree is not followed to do it. Python would still run that
    bytecode instead of the patched file, so the check after the patch says so
    (unknown, exit 2) rather than present."""
    root, outside = hostile.root, hostile.outside
    (outside / "pycache").mkdir()
    unchecked = outside / "pycache" / "gpu_model_runner.cpython-311.pyc"
    unchecked.write_bytes(b"\x00" * 4 + (1).to_bytes(4, "little") + b"\x00" * 8)
    (root / "vllm/v1/worker/__pycache__").symlink_to(outside / "pycache")
    hostile.freeze()
    proc = patch(root)
    assert proc.returncode == 2, proc.stderr
    assert "is an unchecked-hash .pyc: Python runs it without reading vllm/v1/worker/gpu_model_runner.py" in proc.stdout
    assert os.readlink(root / "vllm/v1/worker/__pycache__") == str(outside / "pycache")
    hostile.untouched()


# ------------------------------------------------------------ restore says nothing before it has decided


@pytest.mark.parametrize("refusal", ["damaged backup", "held lock"])
def test_restore_that_refuses_never_says_it_restored(hostile, refusal):
    root = hostile.root
    assert patch(root).returncode == 0
    patched = (root / RESOLVER).read_bytes()
    if refusal == "damaged backup":
        backup = next((root / STATE / "backups").iterdir())
        backup.write_bytes(b"damaged\n")
        proc = restore(root)
        assert_refused(proc, "is missing or damaged")
    else:
        with open(root / STATE / "lock", "w") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            proc = restore(root)
        assert_refused(proc, "another dflash-doctor patch or restore is running")
    assert "back to its original" not in proc.stderr
    assert (root / RESOLVER).read_bytes() == patched


# ------------------------------------------------------------ the same over ssh (SFTP writes)


@pytest.fixture
def over_ssh(hostile, tmp_path, server, client):
    """``over_ssh("patch", ...)``: the hostile tree behind a real sshd, through a venv that points at it."""
    python = make_venv(tmp_path / "venv", hostile.root)
    srv = server()
    trust(client, srv)

    def run(command: str, *args: str):
        return run_cli(
            command, *client["args"], "--host", host(srv), "--python", str(python), *ONLY, *args, env=client["env"]
        )

    return run


def _plant_escaping_manifest(root: Path, outside: Path) -> None:
    evil = b"import os  # the peer's code\n"
    plant_state(root, {"../outside/victim.py": entry(evil, VICTIM)}, {f"victim.py.{sha(evil)[:16]}": evil})


def _plant_linked_entry(root: Path, outside: Path) -> None:
    (root / "vllm" / "evil.py").symlink_to(outside / "victim.py")
    evil = b"import os  # the peer's code\n"
    plant_state(root, {"vllm/evil.py": entry(evil, VICTIM)}, {f"evil.py.{sha(evil)[:16]}": evil})


def _plant_state_link(root: Path, outside: Path) -> None:
    (root / STATE).symlink_to(outside)


def _plant_backups_link(root: Path, outside: Path) -> None:
    (root / STATE).mkdir()
    (root / STATE / "backups").symlink_to(outside)


def _link_target_out(root: Path, outside: Path) -> None:
    shutil.copy2(root / RESOLVER, outside / "runner.py")
    (root / RESOLVER).unlink()
    (root / RESOLVER).symlink_to(outside / "runner.py")


@pytest.mark.slow
@pytest.mark.parametrize(
    "plant, command, fragments",
    [
        (_plant_state_link, "patch", (f"{STATE} in ", "is a symlink")),
        (_plant_state_link, "restore", (f"{STATE} in ", "is a symlink")),
        (_plant_backups_link, "patch", (f"{STATE}/backups in ", "is a symlink")),
        (
            _plant_escaping_manifest,
            "restore",
            ("manifest.json in ", "'../outside/victim.py' is not a .py file under vllm/"),
        ),
        (
            _plant_escaping_manifest,
            "patch",
            ("manifest.json in ", "'../outside/victim.py' is not a .py file under vllm/"),
        ),
        (_plant_linked_entry, "restore", ("vllm/evil.py in ", "outside the tree's vllm/")),
        (_link_target_out, "patch", (f"{RESOLVER} in ", "outside the tree's vllm/")),
    ],
    ids=lambda value: getattr(value, "__name__", None) or (value if isinstance(value, str) else ""),
)
def test_hostile_tree_over_ssh_is_refused_and_nothing_is_written_outside(hostile, over_ssh, plant, command, fragments):
    root = hostile.root
    plant(root, hostile.outside)
    hostile.freeze()
    tree = entries(root)
    proc = over_ssh(command, "--yes")
    for fragment in fragments:
        assert_refused(proc, fragment)
    assert entries(root) == tree
    hostile.untouched()


@pytest.mark.slow
def test_target_symlinked_inside_the_tree_over_ssh_is_patched_at_its_real_path_and_restored_exactly(hostile, over_ssh):
    root = hostile.root
    real = root / "vllm/v1/worker/runner_impl.py"
    os.replace(root / RESOLVER, real)
    real.chmod(0o640)
    (root / RESOLVER).symlink_to("runner_impl.py")
    hostile.freeze()
    tree = entries(root)
    proc = over_ssh("patch", "--yes")
    assert proc.returncode == 0, proc.stderr
    assert os.readlink(root / RESOLVER) == "runner_impl.py" and real.stat().st_mode & 0o7777 == 0o640
    assert (
        sha(real.read_bytes())
        == json.loads((root / STATE / "manifest.json").read_text())["files"][RESOLVER]["sha256_after"]
    )
    proc = over_ssh("restore", "--yes")
    assert proc.returncode == 0, proc.stderr
    assert entries(root) == tree
    hostile.untouched()
