"""`patch` and `restore` on real vLLM release trees copied to a temp dir.

Every patch is proved by behaviour, not only by the rule: the patched
resolver or predicate is cut out of the patched file and run on stub
configs in a separate interpreter. Failure modes use real conditions:
a pseudo-terminal, a read-only bind mount, an immutable file, a full tmpfs,
and a process killed while strace holds it inside an fsync.
"""

from __future__ import annotations

import ast
import fcntl
import json
import os
import pty
import select
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import DEMO_RULE_PREAMBLE, check_json, make_venv, run_cli, statuses
from patching import RESOLVER, SCHEDULER, STATE, installed, kill, sha, snapshot, strace_ok
from dflash_doctor.targets.release import release_tree

SPECULATIVE = "vllm/config/speculative.py"
ALGOS = "vllm/transformers_utils/configs/speculators/algos.py"

pytestmark = pytest.mark.release


# ---------------------------------------------------------------- helpers


def patch(root: Path, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return run_cli("patch", "--path", str(root), *args, **kwargs)


def restore(root: Path, *args: str) -> subprocess.CompletedProcess:
    return run_cli("restore", "--path", str(root), *args)


def assert_refused(proc, fragment: str, code: int = 3) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert fragment in proc.stderr, proc.stderr


def function_source(path: Path, qualname: str) -> str:
    """A def cut out of a file with the stdlib ast (decorators dropped), dedented."""
    text = path.read_text()
    node = _find_def(ast.parse(text), qualname.split("."))
    return textwrap.dedent("".join(text.splitlines(keepends=True)[node.lineno - 1 : node.end_lineno]))


def _find_def(node: ast.AST, parts: list[str]) -> ast.AST:
    for child in ast.walk(node):
        if isinstance(child, (ast.FunctionDef, ast.ClassDef)) and child.name == parts[0]:
            return child if len(parts) == 1 else _find_def(child, parts[1:])
    raise AssertionError(f"{parts} not found")


def run_python(code: str):
    """Run code in a fresh interpreter; its last stdout line is JSON."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------- behaviour of the patched code


def resolver_answers(root: Path) -> list:
    """The V1 resolver of this tree on a z-lab config, on a speculators config
    translated by the tree's own update_dflash, and on an EAGLE config."""
    code = "\n".join(
        [
            "from __future__ import annotations",
            "import json",
            "from types import SimpleNamespace as NS",
            function_source(root / RESOLVER, "GPUModelRunner._get_eagle3_aux_layers_from_config"),
            function_source(root / ALGOS, "update_dflash"),
            "def resolve(hf):",
            "    runner = NS(speculative_config=NS(draft_model_config=NS(hf_config=hf)))",
            "    return _get_eagle3_aux_layers_from_config(runner)",
            "zlab = resolve(NS(dflash_config={'target_layer_ids': [1, 16, 31, 46, 61]}))",
            "zlab_small = resolve(NS(dflash_config={'target_layer_ids': [0, 16, 31]}))",
            "pre = {}",
            "update_dflash({'aux_hidden_state_layer_ids': [2, 17, 32, 47, 62], 'mask_token_id': 7, "
            "'draft_vocab_size': 9}, pre)",
            "speculators = resolve(NS(**pre))",
            "eagle = resolve(NS(eagle_aux_hidden_state_layer_ids=[3, 5]))",
            "print(json.dumps([zlab, zlab_small, speculators, eagle]))",
        ]
    )
    return run_python(code)


SPEC_STUB = """
class Spec:
    def __init__(self, method, disable_eagle_block_drop=False):
        self.method = method
        self.disable_eagle_block_drop = disable_eagle_block_drop
"""
METHODS = ["dflash", "eagle3", "eagle", "mtp", "ngram"]


def scheduler_answers(root: Path) -> dict:
    """For each method: the use_eagle handed to the KV cache manager and the
    Mamba back-off condition, cut from the tree's Scheduler and evaluated with
    the tree's own SpeculativeConfig.use_eagle/use_dflash."""
    init = _find_def(ast.parse((root / SCHEDULER).read_text()), ["Scheduler", "__init__"])
    call = next(n for n in ast.walk(init) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "KVCacheManager")
    manager_arg = ast.unparse(next(k.value for k in call.keywords if k.arg == "use_eagle"))
    split = _find_def(ast.parse((root / SCHEDULER).read_text()), ["Scheduler", "_mamba_block_aligned_split"])
    backoff = next(
        ast.unparse(n.test) for n in ast.walk(split) if isinstance(n, ast.If) and "use_eagle" in ast.unparse(n.test)
    )
    code = "\n".join(
        [
            "import json",
            "from types import SimpleNamespace as NS",
            function_source(root / SPECULATIVE, "SpeculativeConfig.use_eagle"),
            function_source(root / SPECULATIVE, "SpeculativeConfig.use_dflash"),
            SPEC_STUB,
            "Spec.use_eagle, Spec.use_dflash = use_eagle, use_dflash",
            "def scheduler(method):",
            "    spec = Spec(method)",
            "    return NS(use_eagle=spec.use_eagle(), vllm_config=NS(speculative_config=spec))",
            f"print(json.dumps({{m: [bool(eval({manager_arg!r}, {{'self': scheduler(m)}})), "
            f"bool(eval({backoff!r}, {{'self': scheduler(m)}}))] for m in {METHODS!r}}}))",
        ]
    )
    return run_python(code)


def predicate_answers(root: Path) -> dict:
    """SpeculativeConfig.use_eagle_block_drop of this tree, per method, without and with the opt-out flag."""
    code = "\n".join(
        [
            "import json",
            *(
                function_source(root / SPECULATIVE, f"SpeculativeConfig.{name}")
                for name in ("use_eagle", "use_dflash", "use_eagle_block_drop")
            ),
            SPEC_STUB,
            "Spec.use_eagle, Spec.use_dflash, Spec.use_eagle_block_drop = use_eagle, use_dflash, use_eagle_block_drop",
            "print(json.dumps({m: [Spec(m).use_eagle_block_drop(), Spec(m, True).use_eagle_block_drop()] "
            f"for m in {METHODS!r}}}))",
        ]
    )
    return run_python(code)


# ------------------------------------------------------ patch, check, restore

CYCLES = {
    "0.20.1": (["layer-offset", "cache-drop"], [RESOLVER, SCHEDULER]),
    "0.26.0": (["cache-drop"], [SCHEDULER]),
    "0.30.0": (["cache-drop"], [SPECULATIVE]),
}


@pytest.mark.parametrize("version", sorted(CYCLES))
def test_patch_check_restore_cycle(tmp_path, version):
    fixes, files = CYCLES[version]
    root = installed(tmp_path, version)  # the whole tree: every file is compared after restore
    only = [arg for fix in fixes for arg in ("--only", fix)]
    original = snapshot(root)
    _, before = check_json("--path", str(root), *only)
    assert set(statuses(before).values()) <= {"absent", "partial"}

    proc = patch(root, *only, "--yes")
    assert proc.returncode == 0, proc.stderr
    assert "patched " in proc.stderr and " PRESENT  " in proc.stdout
    assert proc.stdout.splitlines()[-1] == "bottom line: nothing to do"  # the check after the patch ends like any check

    code, report = check_json("--path", str(root), *only)
    assert code == 0 and set(statuses(report).values()) == {"present"}
    assert report["engine"]["modified_files"] == sorted(files)
    for fix in report["fixes"]:
        assert "local dflash-doctor patch" in fix["reason"]
        assert any("patched locally by dflash-doctor" in e.get("note", "") for e in fix["evidence"])
    section = {entry["file"]: entry for entry in report["local_patches"]}
    assert sorted(section) == sorted(files) and {e["status"] for e in section.values()} == {"applied"}
    patched = snapshot(root)
    changed = {path for path in original if original[path][0] != patched[path][0]}
    assert changed == set(files)
    manifest = json.loads((root / STATE / "manifest.json").read_text())
    for relpath in files:
        entry = manifest["files"][relpath]
        assert entry["sha256_before"] == sha(original[relpath][0]) and entry["sha256_after"] == sha(patched[relpath][0])
        assert (root / entry["backup"]).read_bytes() == original[relpath][0]
        assert {p["fix"] for p in entry["patches"]} <= set(fixes) and entry["patches"][0]["tool_version"]

    again = patch(root, *only, "--yes")  # idempotent: nothing to do, nothing written
    assert again.returncode == 0 and "nothing to patch" in again.stderr
    assert snapshot(root) == patched

    undo = restore(root, "--yes")
    assert undo.returncode == 0, undo.stderr
    assert snapshot(root) == original  # every file's bytes, mode and owner; no state directory left
    _, after = check_json("--path", str(root), *only)
    assert statuses(after) == statuses(before) and "local_patches" not in after


def test_python_target_is_patched_where_its_vllm_lives(tmp_path, mini_tree):

    root = mini_tree("0.20.1")
    original = snapshot(root)
    python = make_venv(tmp_path / "venv", root)
    proc = run_cli("patch", "--python", str(python), "--only", "layer-offset", "--yes")
    assert proc.returncode == 0, proc.stderr
    _, report = check_json("--python", str(python), "--only", "layer-offset")
    assert report["target"]["kind"] == "python" and statuses(report) == {"layer-offset": "present"}
    assert report["local_patches"][0]["file"] == RESOLVER and (root / STATE / "manifest.json").is_file()
    assert run_cli("restore", "--python", str(python), "--yes").returncode == 0
    assert snapshot(root) == original


def test_layer_offset_patch_shifts_only_dflash_ids(tmp_path, mini_tree):
    root = mini_tree("0.20.1")
    zlab, zlab_small, speculators, eagle = resolver_answers(root)
    assert zlab == [1, 16, 31, 46, 61]  # the bug: raw ids, one layer early
    assert patch(root, "--only", "layer-offset", "--yes").returncode == 0
    zlab, zlab_small, speculators, eagle = resolver_answers(root)
    assert zlab == [2, 17, 32, 47, 62] and zlab_small == [1, 17, 32]
    assert speculators == [2, 17, 32, 47, 62]  # capture ids already: read first, not shifted twice
    assert eagle == [3, 5]


@pytest.mark.parametrize("version", ["0.20.1", "0.24.0", "0.26.0", "0.29.0"])
def test_cache_drop_patch_exempts_dflash_only_in_the_scheduler(tmp_path, mini_tree, version):
    root = mini_tree(version)
    assert scheduler_answers(root)["dflash"] == [True, True]  # the bug: DFlash drops the block
    assert patch(root, "--only", "cache-drop", "--yes").returncode == 0
    answers = scheduler_answers(root)
    assert answers["dflash"] == [False, False]
    assert answers["eagle3"] == answers["eagle"] == answers["mtp"] == [True, True]
    assert answers["ngram"] == [False, False]


def test_cache_drop_patch_changes_the_mamba_chunking_for_dflash_only(tmp_path, mini_tree):
    """The whole patched 0.20.1 _mamba_block_aligned_split, run on a 100-token prompt with 16-token blocks."""
    root = mini_tree("0.20.1")
    assert patch(root, "--only", "cache-drop", "--yes").returncode == 0
    code = "\n".join(
        [
            "from __future__ import annotations",
            "import json",
            "from types import SimpleNamespace as NS",
            function_source(root / SPECULATIVE, "SpeculativeConfig.use_eagle"),
            function_source(root / SPECULATIVE, "SpeculativeConfig.use_dflash"),
            function_source(root / SCHEDULER, "Scheduler._mamba_block_aligned_split"),
            SPEC_STUB,
            "Spec.use_eagle, Spec.use_dflash = use_eagle, use_dflash",
            "def chunk(method):",
            "    spec = Spec(method)",
            "    me = NS(use_eagle=spec.use_eagle(), vllm_config=NS(speculative_config=spec), "
            "cache_config=NS(block_size=16))",
            "    request = NS(num_computed_tokens=0, num_prompt_tokens=100, num_tokens=100)",
            "    return _mamba_block_aligned_split(me, request, 100)",
            "print(json.dumps({m: chunk(m) for m in ['dflash', 'eagle3', 'ngram']}))",
        ]
    )
    assert run_python(code) == {"dflash": 96, "eagle3": 80, "ngram": 96}


@pytest.mark.parametrize("version", ["0.30.0", "0.32.0"])
def test_cache_drop_patch_of_the_block_drop_predicate(tmp_path, mini_tree, version):
    root = mini_tree(version)
    assert predicate_answers(root)["dflash"] == [True, False]  # drops unless the opt-out flag is set
    assert patch(root, "--only", "cache-drop", "--yes").returncode == 0
    answers = predicate_answers(root)
    assert answers["dflash"] == [False, False]
    assert answers["eagle3"] == answers["eagle"] == answers["mtp"] == [True, False]
    assert answers["ngram"] == [False, False]


def test_patch_keeps_mode_and_owner(tmp_path, mini_tree):
    root = mini_tree("0.20.1")
    target = root / RESOLVER
    os.chmod(target, 0o640)
    if os.geteuid() == 0:
        os.chown(target, 4321, 8765)
    before = target.stat()
    assert patch(root, "--only", "layer-offset", "--yes").returncode == 0
    after = target.stat()
    assert (after.st_mode, after.st_uid, after.st_gid) == (before.st_mode, before.st_uid, before.st_gid)
    assert after.st_ino != before.st_ino  # replaced by rename, not rewritten in place
    assert restore(root, "--yes").returncode == 0
    again = target.stat()
    assert (again.st_mode, again.st_uid, again.st_gid) == (before.st_mode, before.st_uid, before.st_gid)


def test_unchecked_bytecode_of_a_patched_file_is_removed(tmp_path, mini_tree):
    import py_compile

    root = mini_tree("0.20.1")
    cache = root / "vllm/v1/worker/__pycache__"
    unchecked = cache / "gpu_model_runner.cpython-311.pyc"
    timestamped = cache / "gpu_model_runner.cpython-399.pyc"
    py_compile.compile(
        str(root / RESOLVER), cfile=str(unchecked), invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH
    )
    py_compile.compile(
        str(root / RESOLVER), cfile=str(timestamped), invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP
    )
    assert patch(root, "--only", "layer-offset", "--yes").returncode == 0
    assert not unchecked.exists()  # Python would have kept running the unpatched code
    assert timestamped.exists()  # notices the new source by itself


# ------------------------------------------------------------------ refusals


def test_swa_config_is_refused_with_the_release_and_runner_it_needs(tmp_path, mini_tree):
    root = mini_tree("0.20.1")
    original = snapshot(root)
    proc = patch(root, "--only", "swa-config", "--yes")
    assert proc.returncode == 1, proc.stderr
    assert "swa-config: not patched" in proc.stderr and "0.26.0" in proc.stderr and "V2 model runner" in proc.stderr
    assert snapshot(root) == original


def test_no_dflash_release_is_refused(tmp_path, mini_tree):
    root = mini_tree("0.19.0")
    original = snapshot(root)
    proc = patch(root, "--yes")
    assert proc.returncode == 1
    assert "no DFlash support" in proc.stderr and "nothing to patch" in proc.stderr
    assert snapshot(root) == original


def test_unknown_form_is_refused(tmp_path, mini_tree):
    root = mini_tree("0.20.1")
    path = root / RESOLVER
    path.write_text(
        path.read_text().replace(
            'dflash_config.get("target_layer_ids")', 'read_ids(dflash_config, key="target_layer_ids")'
        )
    )
    original = snapshot(root)
    proc = patch(root, "--only", "layer-offset", "--yes")
    assert proc.returncode == 2  # the tree stays unknown
    assert "layer-offset: not patched: the check cannot place this code" in proc.stderr
    assert snapshot(root) == original


def test_variant_the_patch_was_not_written_for_is_refused(tmp_path, mini_tree):
    root = mini_tree("0.20.1")
    path = root / RESOLVER
    path.write_text(
        path.read_text().replace(
            'layer_ids = dflash_config.get("target_layer_ids")',
            'layer_ids = tuple(dflash_config.get("target_layer_ids"))',
        )
    )
    original = snapshot(root)
    assert statuses(check_json("--path", str(root), "--only", "layer-offset")[1]) == {"layer-offset": "absent"}
    proc = patch(root, "--only", "layer-offset", "--yes")
    assert proc.returncode == 1
    assert "the patch for form raw-dflash-ids does not fit this code" in proc.stderr
    assert snapshot(root) == original


def test_release_trees_are_refused(tmp_path):
    assert_refused(run_cli("patch", "--release", "0.20.1", "--yes"), "download cache, not an installation")
    assert_refused(run_cli("restore", "--release", "0.20.1", "--yes"), "download cache, not an installation")
    cache = tmp_path / "cache"
    shutil.copytree(release_tree("0.20.1"), cache / "releases" / "0.20.1")
    env = {**os.environ, "DFLASH_DOCTOR_CACHE": str(cache)}
    proc = run_cli("patch", "--path", str(cache / "releases" / "0.20.1" / "vllm"), "--yes", env=env)
    assert_refused(proc, "download cache, not an installation")


def test_without_a_terminal_and_without_yes_nothing_happens(tmp_path, mini_tree):
    root = mini_tree("0.20.1")
    original = snapshot(root)
    proc = patch(root, "--only", "layer-offset")  # stdin is not a terminal here
    assert_refused(proc, "no terminal to ask on; pass --yes")
    assert proc.stdout == ""
    assert snapshot(root) == original
    assert patch(root, "--only", "layer-offset", "--yes").returncode == 0
    assert_refused(restore(root), "no terminal to ask on; pass --yes")


def test_dry_run_prints_the_diff_and_changes_nothing(tmp_path, mini_tree):
    root = mini_tree("0.20.1")
    original = snapshot(root)
    proc = patch(root, "--dry-run")
    assert proc.returncode == 1  # swa-config would stay absent
    assert snapshot(root) == original
    assert f"--- a/{RESOLVER}" in proc.stdout and f"+++ b/{SCHEDULER}" in proc.stdout
    assert '+                layer_ids = [i + 1 for i in (dflash_config.get("target_layer_ids") or [])]' in proc.stdout
    applied = subprocess.run(
        ["patch", "-p1", "--dry-run", "-d", str(root)], input=proc.stdout, capture_output=True, text=True
    )
    assert applied.returncode == 0, applied.stdout + applied.stderr  # a diff GNU patch accepts
    assert patch(root, "--only", "layer-offset", "--only", "cache-drop", "--dry-run").returncode == 0


def test_file_changed_after_the_check_is_refused(tmp_path, mini_tree):
    """The plan holds the bytes the check read; the file changes before the write."""
    from dflash_doctor.cache import structure_fixes
    from dflash_doctor.model import ToolError
    from dflash_doctor.patching.apply import apply_changes
    from dflash_doctor.patching.files import LocalFiles
    from dflash_doctor.patching.plan import plan_patches
    from dflash_doctor.rulefile import select
    from dflash_doctor.targets.path import PathTarget

    root = mini_tree("0.20.1")
    rules = select(["layer-offset"])
    tree = PathTarget(root).resolve().tree
    plan = plan_patches(tree, rules, structure_fixes(tree, rules))
    assert [change.file for change in plan.changes] == [RESOLVER]
    with open(root / RESOLVER, "a") as handle:
        handle.write("# someone else's edit\n")
    edited = snapshot(root)
    with pytest.raises(ToolError, match="changed since it was checked"):
        apply_changes(LocalFiles(root, "vllm"), plan.changes, "test")
    assert snapshot(root) == edited  # no backup, no manifest, no state directory


def test_file_changed_while_the_prompt_waits_is_refused(tmp_path, mini_tree):
    """On a real pseudo-terminal: the diff and question are shown, the file is
    edited before the answer, and the yes is refused."""
    root = mini_tree("0.20.1")
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "dflash_doctor", "patch", "--path", str(root), "--only", "layer-offset"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        close_fds=True,
    )
    os.close(slave)
    seen = _read_until(master, b"[y/N]")
    assert b"+                layer_ids = [i + 1" in seen
    with open(root / RESOLVER, "a") as handle:
        handle.write("# edited while dflash-doctor was asking\n")
    edited = snapshot(root)
    os.write(master, b"y\n")
    rest = _read_until(master, None)
    assert proc.wait(timeout=60) == 3
    assert b"changed since it was checked" in rest
    assert snapshot(root) == edited
    os.close(master)


@pytest.mark.parametrize("answer", [b"n\n", b"\x04"], ids=["no", "end-of-input"])
def test_answering_no_changes_nothing(tmp_path, mini_tree, answer):
    """On a real pty: a no, or the end of input, at the prompt ends with the documented last line, saying what
    was left unchanged (issue 21.8)."""
    root = mini_tree("0.20.1")
    original = snapshot(root)
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "dflash_doctor", "patch", "--path", str(root)],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        close_fds=True,
    )
    os.close(slave)
    _read_until(master, b"[y/N]")
    os.write(master, answer)
    rest = _read_until(master, None)
    assert proc.wait(timeout=60) == 3
    last = rest.decode().replace("\r\n", "\n").strip().splitlines()[-1].strip()  # input() may write its " " late
    assert last == f"dflash-doctor: error: not confirmed: nothing was changed in {root}", rest
    assert snapshot(root) == original
    os.close(master)


def _read_until(fd: int, marker: bytes | None, timeout: float = 60) -> bytes:
    """Read a pty until marker (or end of output)."""
    data = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # the other side closed
            return data
        if not chunk:
            return data
        data += chunk
        if marker is not None and marker in data:
            return data
    raise AssertionError(f"no {marker!r} within {timeout} s: {data[-2000:]!r}")


def test_restore_refuses_a_file_changed_since_the_patch(tmp_path, mini_tree):
    root = mini_tree("0.20.1")
    original = snapshot(root)
    assert patch(root, "--only", "layer-offset", "--yes").returncode == 0
    with open(root / RESOLVER, "a") as handle:
        handle.write("# a later hand edit\n")
    edited = snapshot(root)
    proc = restore(root, "--yes")
    assert_refused(proc, "was changed since dflash-doctor patched it")
    assert "the original is in .dflash-doctor/backups/" in proc.stderr
    assert snapshot(root) == edited  # the edit, the manifest and the backup are all kept
    _, report = check_json("--path", str(root), "--only", "layer-offset")
    assert report["local_patches"][0]["status"] == "changed"
    assert not any("patched locally" in e.get("note", "") for e in report["fixes"][0]["evidence"])
    backup = root / report["local_patches"][0]["backup"]
    assert backup.read_bytes() == original[RESOLVER][0]


def test_restore_only_one_fix(tmp_path, mini_tree):
    root = mini_tree("0.20.1")
    original = snapshot(root)
    assert patch(root, "--only", "layer-offset", "--only", "cache-drop", "--yes").returncode == 0
    assert restore(root, "--only", "cache-drop", "--yes").returncode == 0
    now = snapshot(root)
    assert now[SCHEDULER] == original[SCHEDULER] and now[RESOLVER] != original[RESOLVER]
    _, report = check_json("--path", str(root), "--only", "layer-offset", "--only", "cache-drop")
    assert statuses(report) == {"layer-offset": "present", "cache-drop": "absent"}
    assert restore(root, "--only", "layer-offset", "--yes").returncode == 0
    assert snapshot(root) == original
    nothing = restore(root, "--yes")
    assert nothing.returncode == 0 and "nothing to restore" in nothing.stderr


def test_reinstalled_file_is_recorded_as_changed_and_patched_afresh(tmp_path, mini_tree):
    """pip replaced the patched file (an upgrade to 0.21.0's resolver, still without the fix)."""
    root = mini_tree("0.20.1")
    assert patch(root, "--only", "layer-offset", "--yes").returncode == 0
    old_backup = next((root / STATE / "backups").iterdir())
    upgraded = (release_tree("0.21.0") / RESOLVER).read_bytes()
    (root / RESOLVER).write_bytes(upgraded)
    _, report = check_json("--path", str(root), "--only", "layer-offset")
    assert statuses(report) == {"layer-offset": "absent"} and report["local_patches"][0]["status"] == "changed"
    assert_refused(restore(root, "--yes"), "was changed since dflash-doctor patched it")
    assert patch(root, "--only", "layer-offset", "--yes").returncode == 0
    manifest = json.loads((root / STATE / "manifest.json").read_text())
    assert manifest["files"][RESOLVER]["sha256_before"] == sha(upgraded)
    assert not old_backup.exists()  # the backup of bytes no longer installed is dropped with its record
    assert restore(root, "--yes").returncode == 0
    assert (root / RESOLVER).read_bytes() == upgraded and not (root / STATE).exists()


DEMO_RULE = (
    """
id = "demo"
title = "a second fix in the same function"
"""
    + DEMO_RULE_PREAMBLE
    + """[[anchors]]
id = "resolver"
file = "vllm/v1/worker/gpu_model_runner.py"
symbol = "GPUModelRunner._get_eagle3_aux_layers_from_config"
[[forms]]
id = "eagle-ids-or-none"
description = "the eagle-ids-or-none form"
verdict = "present"
anchors = ["resolver"]
patterns = ["getattr($H, 'eagle_aux_hidden_state_layer_ids', None) or None"]
[[forms]]
id = "eagle-ids"
description = "the eagle-ids form"
verdict = "absent"
anchors = ["resolver"]
patterns = ["getattr($H, 'eagle_aux_hidden_state_layer_ids', None)"]
patch.produces = "eagle-ids-or-none"
patch.rewrite = [{ find = "getattr($H, 'eagle_aux_hidden_state_layer_ids', None)", replace = "getattr($H, 'eagle_aux_hidden_state_layer_ids', None) or None" }]
"""  # noqa: E501 (a TOML inline table is one line)
)


def test_two_fixes_in_one_file_share_one_backup(tmp_path, mini_tree):
    from dflash_doctor.structure.forms import FormReader
    from dflash_doctor.model import ToolError
    from dflash_doctor.patching.apply import apply_changes, apply_restore, plan_restore
    from dflash_doctor.patching.files import LocalFiles
    from dflash_doctor.patching.plan import plan_patches
    from dflash_doctor.rulefile import load_rule, select
    from dflash_doctor.rules import for_engine
    from dflash_doctor.targets.path import PathTarget

    root = mini_tree("0.20.1")
    original = snapshot(root)
    (tmp_path / "demo.toml").write_text(DEMO_RULE)
    files = LocalFiles(root, "vllm")
    for rules in (for_engine(select(["layer-offset"]), "vllm"), (load_rule(tmp_path / "demo.toml"),)):
        tree = PathTarget(root).resolve().tree
        plan = plan_patches(tree, rules, FormReader(tree).run(rules))
        assert [change.file for change in plan.changes] == [RESOLVER] and not plan.refusals
        apply_changes(files, plan.changes, "test")
    manifest = json.loads((root / STATE / "manifest.json").read_text())
    entry = manifest["files"][RESOLVER]
    assert [p["fix"] for p in entry["patches"]] == ["layer-offset", "demo"]
    assert entry["sha256_before"] == sha(original[RESOLVER][0]) and entry["sha256_after"] == sha(
        (root / RESOLVER).read_bytes()
    )
    assert len(list((root / STATE / "backups").iterdir())) == 1
    with pytest.raises(ToolError, match="also holds the patch for layer-offset"):
        plan_restore(files, frozenset({"demo"}))
    apply_restore(files, plan_restore(files, None))
    assert snapshot(root) == original


def test_a_fix_read_in_a_file_now_gone_is_refused(tmp_path, mini_tree):
    """Verdicts from an earlier check whose file has since been removed: the fix is
    refused with the file named, never an AttributeError."""
    from dflash_doctor.structure.forms import FormReader
    from dflash_doctor.patching.plan import Refusal, plan_patches
    from dflash_doctor.rulefile import select
    from dflash_doctor.rules import for_engine
    from dflash_doctor.targets.path import PathTarget

    root = mini_tree("0.20.1")
    rules = for_engine(select(["layer-offset"]), "vllm")  # as patch reads it: the tree's engine's rule
    fixes = FormReader(PathTarget(root).resolve().tree).run(rules)
    assert any(item.file == RESOLVER for item in fixes[0].evidence)
    (root / RESOLVER).unlink()
    plan = plan_patches(PathTarget(root).resolve().tree, rules, fixes)
    assert plan.refusals == (Refusal("layer-offset", f"{RESOLVER} is no longer in the tree"),) and not plan.changes


def test_a_file_removed_while_restore_runs_is_refused_by_name(tmp_path, mini_tree):
    """Someone removes the patched file after restore's check under the lock: a clear
    error naming the backup, never a traceback (the write was handed no mode)."""
    from dflash_doctor.model import ToolError
    from dflash_doctor.patching.apply import apply_restore, plan_restore
    from dflash_doctor.patching.files import LocalFiles

    root = mini_tree("0.20.1")
    assert patch(root, "--only", "layer-offset", "--yes").returncode == 0

    class RemovedMeanwhile(LocalFiles):
        """The tree, its patched file removed by another process right after restore's last check."""

        def still_there(self) -> None:
            super().still_there()
            (root / RESOLVER).unlink()

    files = RemovedMeanwhile(root, "vllm")
    plan = plan_restore(files, None)
    with pytest.raises(ToolError, match=f"{RESOLVER} was removed while restore ran; it is not restored"):
        apply_restore(files, plan)
    assert not (root / RESOLVER).exists()


def test_a_held_lock_refuses_a_second_run(tmp_path, mini_tree):
    root = mini_tree("0.20.1")
    (root / STATE).mkdir()
    with open(root / STATE / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held = snapshot(root)
        proc = patch(root, "--only", "layer-offset", "--yes")
        assert_refused(proc, "another dflash-doctor patch or restore is running")
        assert snapshot(root) == held
    assert patch(root, "--only", "layer-offset", "--yes").returncode == 0


# ------------------------------------------- failing writes under real conditions


def _private_mounts(script: str) -> subprocess.CompletedProcess:
    """Run a shell script in its own mount namespace (mounts vanish with it); skip where that is not allowed."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not installed")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("mount namespaces are not allowed here (needs root or CAP_SYS_ADMIN)")
    return subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-ec", script], capture_output=True, text=True, timeout=300
    )


def test_read_only_tree_is_refused_and_left_alone(tmp_path, mini_tree):
    root = mini_tree("0.20.1")
    original = snapshot(root)
    script = (
        f"mount --bind {root} {root}; mount -o remount,bind,ro {root}; "
        f"{sys.executable} -m dflash_doctor patch --path {root} --only layer-offset --yes || echo exit=$?"
    )
    proc = _private_mounts(script)
    assert "exit=3" in proc.stdout, proc.stdout + proc.stderr
    assert (
        "dflash-doctor: error: cannot create .dflash-doctor" in proc.stderr and "Read-only file system" in proc.stderr
    )
    assert snapshot(root) == original


def test_immutable_file_fails_at_the_rename_and_leaves_no_trace(tmp_path, mini_tree):
    root = mini_tree("0.20.1")
    target = root / RESOLVER
    if subprocess.run(["chattr", "+i", str(target)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not supported here")
    try:
        original = snapshot(root)
        proc = patch(root, "--only", "layer-offset", "--yes")
        assert_refused(proc, f"cannot replace {RESOLVER}: Operation not permitted; it is unchanged")
        assert snapshot(root) == original  # backup, manifest, temp file and state directory removed again
    finally:
        subprocess.run(["chattr", "-i", str(target)], check=True)


FILL = """
import os, sys
mount, leave = sys.argv[1], int(sys.argv[2])
st = os.statvfs(mount)
free = st.f_bavail * st.f_frsize
with open(os.path.join(mount, "filler"), "wb") as handle:
    handle.write(b"\\0" * (free - leave))
"""


@pytest.mark.parametrize("where", ["backup", "new file"])
def test_disk_full_leaves_the_old_file(tmp_path, mini_tree, where):
    """A size-limited tmpfs filled so that the backup, or the patched file's
    temp copy, does not fit."""
    source = mini_tree("0.20.1")
    size = (source / RESOLVER).stat().st_size
    pages = -(-size // 4096)
    leave = 2 * 4096 if where == "backup" else (pages + 3) * 4096
    mount, tree = tmp_path / "full", tmp_path / "full" / "tree"
    mount.mkdir()
    (tmp_path / "fill.py").write_text(FILL)
    out = tmp_path / "out"
    script = "; ".join(
        [
            f"mount -t tmpfs -o size=16m tmpfs {mount}",
            f"cp -a {source} {tree}",
            f"{sys.executable} {tmp_path / 'fill.py'} {mount} {leave}",
            f"{sys.executable} -m dflash_doctor patch --path {tree} --only layer-offset --yes "
            f"> {out}.stdout 2> {out}.stderr || echo $? > {out}.code",
            f"cp -a {tree} {out}.tree",
        ]
    )
    proc = _private_mounts(script)
    assert proc.returncode == 0, proc.stderr
    assert (Path(f"{out}.code")).read_text().strip() == "3"
    error = Path(f"{out}.stderr").read_text()
    assert "No space left on device" in error and "Traceback" not in error
    if where == "new file":
        assert f"cannot write {RESOLVER}" in error and "it is unchanged" in error
    assert snapshot(Path(f"{out}.tree")) == snapshot(source)  # old file; no backup, manifest, temp or state dir


# --------------------------------------- a process killed in the middle of a write


def _stalled(args: list[str], at: Path) -> subprocess.Popen:
    """dflash-doctor with the fsync of ``at`` held for 60 s by strace: the write
    stops at that known point, long enough to look and to kill it there."""
    command = [
        "strace",
        "-f",
        "--seccomp-bpf",
        "-o",
        "/dev/null",
        "-P",
        str(at),
        "-e",
        "trace=fsync",
        "-e",
        "inject=fsync:delay_enter=60000000",
        sys.executable,
        "-m",
        "dflash_doctor",
        *args,
    ]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def _wait_for(condition, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if proc.poll() is not None:
            raise AssertionError(f"finished before the kill point: {proc.stderr.read().decode()}")
        time.sleep(0.005)
    raise AssertionError("kill point not reached")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return -1


KILL_POINTS = ["backup written", "manifest written", "new file written", "file renamed"]


@pytest.mark.parametrize("point", KILL_POINTS)
def test_killed_patch_leaves_old_or_new_file_and_recovers(tmp_path, mini_tree, point):
    if not strace_ok():
        pytest.skip("strace cannot inject syscall delays here")
    root = mini_tree("0.20.1")
    original = snapshot(root)
    old = original[RESOLVER][0]
    new = _patched_resolver_bytes(mini_tree)
    backup_temp = root / STATE / "backups" / f".gpu_model_runner.py.{sha(old)[:16]}.dflash-doctor-tmp"
    manifest_temp = root / STATE / ".manifest.json.dflash-doctor-tmp"
    new_temp = root / "vllm/v1/worker/.gpu_model_runner.py.dflash-doctor-tmp"
    stall, reached = {  # the fsync held, and what is on disk while it is held
        "backup written": (backup_temp, lambda: _size(backup_temp) == len(old)),
        "manifest written": (manifest_temp, lambda: _size(manifest_temp) > 0),
        "new file written": (new_temp, lambda: _size(new_temp) == len(new)),
        "file renamed": ((root / RESOLVER).parent, lambda: _size(root / RESOLVER) == len(new)),
    }[point]
    proc = _stalled(["patch", "--path", str(root), "--only", "layer-offset", "--yes"], stall)
    try:
        _wait_for(reached, proc)
        if point == "new file written":  # the lock is held: a second run must not start
            assert_refused(
                patch(root, "--only", "layer-offset", "--yes"), "another dflash-doctor patch or restore is running"
            )
    finally:
        kill(proc)

    resolver = (root / RESOLVER).read_bytes()
    assert resolver in (old, new), "torn file"
    assert resolver == (new if point == "file renamed" else old)
    _, report = check_json("--path", str(root), "--only", "layer-offset")
    patched_note = any("patched locally" in e.get("note", "") for e in report["fixes"][0]["evidence"])
    assert patched_note == (resolver == new)  # the record never claims more than the bytes show
    if resolver == new:
        manifest = json.loads((root / STATE / "manifest.json").read_text())
        backup = root / manifest["files"][RESOLVER]["backup"]
        assert backup.read_bytes() == old

    finish = patch(root, "--only", "layer-offset", "--yes")
    assert finish.returncode == 0, finish.stderr
    assert (root / RESOLVER).read_bytes() == new
    assert restore(root, "--yes").returncode == 0
    assert snapshot(root) == original  # leftover temp files and records cleaned up


def test_killed_restore_leaves_the_patched_file_and_recovers(tmp_path, mini_tree):
    if not strace_ok():
        pytest.skip("strace cannot inject syscall delays here")
    root = mini_tree("0.20.1")
    original = snapshot(root)
    assert patch(root, "--only", "layer-offset", "--yes").returncode == 0
    patched = (root / RESOLVER).read_bytes()
    temp = root / "vllm/v1/worker/.gpu_model_runner.py.dflash-doctor-tmp"
    proc = _stalled(["restore", "--path", str(root), "--yes"], temp)
    try:
        _wait_for(lambda: _size(temp) == len(original[RESOLVER][0]), proc)
    finally:
        kill(proc)
    assert (root / RESOLVER).read_bytes() == patched
    assert restore(root, "--yes").returncode == 0
    assert snapshot(root) == original


def _patched_resolver_bytes(mini_tree) -> bytes:
    other = mini_tree("0.20.1", "reference")
    assert patch(other, "--only", "layer-offset", "--yes").returncode == 0
    return (other / RESOLVER).read_bytes()


# ------------------------------------------------- rules: patch declarations


RULE = (
    """
id = "demo"
title = "demo"
"""
    + DEMO_RULE_PREAMBLE
    + """[[anchors]]
id = "site"
file = "vllm/x.py"
symbol = "f"
[[forms]]
id = "good"
description = "the good form"
verdict = "present"
anchors = ["site"]
patterns = ["good($X)"]
[[forms]]
id = "bad"
description = "the bad form"
verdict = "absent"
anchors = ["site"]
patterns = ["bad($X)"]
patch.produces = "good"
patch.rewrite = [{{ find = "bad($X)", replace = "{replace}" }}]
[[cases]]
name = "bad call"
anchor = "site"
expect = ["bad"]
code = "def f():\\n    return bad(a or b)\\n"
[[cases]]
name = "good call"
anchor = "site"
expect = ["good"]
code = "def f():\\n    return good(1)\\n"
"""
)


def _rule(tmp_path: Path, replace: str):
    from dflash_doctor.rulefile import load_rule

    path = tmp_path / "demo.toml"
    path.write_text(RULE.format(replace=replace))
    return load_rule(path)


def test_rules_test_tries_each_patch_on_its_cases(tmp_path):
    from dflash_doctor.rulestest import check_rule

    results = dict(check_rule(_rule(tmp_path, "good($X)")))
    assert results["demo: bad call: patched to good"] is True
    wrong = dict(check_rule(_rule(tmp_path, "still_bad($X)")))
    assert wrong["demo: bad call: patched to good (still nothing, missing ['good'])"] is False
    broken = dict(check_rule(_rule(tmp_path, "$Y")))
    assert any("which find does not bind" in line and not ok for line, ok in broken.items())


def test_template_keeps_the_meaning_of_bound_code(tmp_path):
    import libcst as cst

    from dflash_doctor.patching.codemod import apply_edits, site_edits

    rule = _rule(tmp_path, "good($X.value)")
    module = cst.parse_module("def f():\n    return bad(a or b)\n")
    code = apply_edits(module, site_edits(list(rule.forms), module)).code
    assert code == "def f():\n    return good((a or b).value)\n"


def test_a_patch_must_produce_a_present_form(tmp_path):
    from dflash_doctor.model import ToolError
    from dflash_doctor.rulefile import load_rule

    path = tmp_path / "demo.toml"
    path.write_text(RULE.format(replace="good($X)").replace('patch.produces = "good"', 'patch.produces = "bad"'))
    with pytest.raises(ToolError, match="patch.produces must name a present form"):
        load_rule(path)


# ---------------------------------------------------------------- patch --repo --pr (a git checkout)


@pytest.mark.slow
def test_patch_repo_pr_dry_run_confirmation_apply_and_again(copy):
    from gitrepos import SPECULATIVE as REPO_SPECULATIVE

    copy.git("checkout", "--quiet", "releases/v0.20")
    original = (copy.path / REPO_SPECULATIVE).read_bytes()
    args = ("--repo", str(copy.path), "--pr", "53388")
    dry = run_cli("patch", *args, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert '+        return self.use_eagle() and self.method != "dflash"' in dry.stdout
    assert "nothing was changed" in dry.stderr
    asked = run_cli("patch", *args)
    assert_refused(asked, "there is no terminal to ask on")
    assert (copy.path / REPO_SPECULATIVE).read_bytes() == original and copy.git("status", "--porcelain") == ""
    applied = run_cli("patch", *args, "--yes")
    assert applied.returncode == 0, applied.stderr
    assert f"#53388 applied to {REPO_SPECULATIVE}" in applied.stderr
    assert 'self.method != "dflash"' in (copy.path / REPO_SPECULATIVE).read_text()
    assert copy.git("status", "--porcelain").split() == ["M", REPO_SPECULATIVE]
    again = run_cli("patch", *args, "--yes")
    assert again.returncode == 0 and "#53388 is already in" in again.stderr


@pytest.mark.slow
def test_patch_repo_pr_conflict_lists_the_files_and_changes_nothing(copy):
    from gitrepos import SPECULATIVE as REPO_SPECULATIVE

    copy.git("checkout", "--quiet", "releases/v0.20")
    copy.replace(REPO_SPECULATIVE, "        return self.use_eagle()\n", "        return self.use_eagle()  # local\n")
    edited = (copy.path / REPO_SPECULATIVE).read_bytes()
    proc = run_cli("patch", "--repo", str(copy.path), "--pr", "53388", "--yes")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"conflicts with {copy.path} in {REPO_SPECULATIVE}; nothing was changed" in proc.stderr
    assert (copy.path / REPO_SPECULATIVE).read_bytes() == edited


@pytest.mark.slow
def test_patch_repo_pr_bad_input(copy, tmp_path):
    from conftest import assert_error

    assert_error(run_cli("patch", "--repo", str(copy.path)), "give --repo and --pr together")
    assert_error(run_cli("patch", "--repo", str(copy.path), "--pr", "53388", "--path", str(tmp_path)), "without --path")
    assert_error(run_cli("patch", "--repo", str(tmp_path), "--pr", "53388", "--yes"), str(tmp_path))
    assert_error(
        run_cli("patch", "--repo", str(copy.path), "--pr", "54163", "--yes"), "fetch origin +refs/pull/54163/head"
    )
