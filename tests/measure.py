"""Run the CLI as a child and measure it: wall time and the child's own peak RSS
(os.wait4 gives the rusage of that one child, not of every child the test ran)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tempfile


@dataclasses.dataclass(frozen=True)
class Measured:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    peak_rss: int  # bytes


# A small Python starts the CLI and measures it. Linux gives a child started
# from a big process (fork or vfork, then exec) that process's peak RSS as its
# own floor, and the test process grows with every command it runs in process.
# The child gets its own session (killed as a group at the timeout) and, when
# asked, an address-space limit.
REAPER = """
import os, resource, signal, subprocess, sys, time
timeout, report, space = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
limit = (lambda: resource.setrlimit(resource.RLIMIT_AS, (space, space))) if space else None
started = time.monotonic()
child = subprocess.Popen(sys.argv[4:], stdin=subprocess.DEVNULL, preexec_fn=limit, start_new_session=True)
while True:
    pid, status, usage = os.wait4(child.pid, os.WNOHANG)
    if pid:
        break
    if time.monotonic() - started > timeout:
        os.killpg(child.pid, signal.SIGKILL)
    time.sleep(0.02)
os.write(report, f"{os.waitstatus_to_exitcode(status)} {time.monotonic() - started} {usage.ru_maxrss}".encode())
"""


def run_measured(
    *args: str, env: dict | None = None, timeout: float = 120.0, address_space_mb: int | None = None
) -> Measured:
    return measured(
        [sys.executable, "-m", "dflash_doctor", *args], env=env, timeout=timeout, address_space_mb=address_space_mb
    )


def measured(
    argv: list[str], env: dict | None = None, timeout: float = 120.0, address_space_mb: int | None = None
) -> Measured:
    """``argv`` run from the small reaper above, measured."""
    read, write = os.pipe()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, os.fdopen(read, "rb") as report:
        try:
            reaper = subprocess.run(
                [sys.executable, "-c", REAPER, str(timeout), str(write), str((address_space_mb or 0) << 20), *argv],
                stdout=out,
                stderr=err,
                env=env,
                pass_fds=(write,),
                timeout=timeout + 60,
            )
        finally:
            os.close(write)
        answer = report.read().decode()
        out.seek(0)
        err.seek(0)
        assert reaper.returncode == 0 and answer, (reaper.returncode, err.read().decode()[-2000:])
        returncode, seconds, peak_kib = answer.split()
        return Measured(int(returncode), out.read().decode(), err.read().decode(), float(seconds), int(peak_kib) * 1024)
