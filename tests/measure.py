"""Run the CLI as a child and measure it: wall time and the child's own peak RSS
(os.wait4 gives the rusage of that one child, not of every child the test ran)."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import time


@dataclasses.dataclass(frozen=True)
class Measured:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    peak_rss: int  # bytes


def run_measured(*args: str, env: dict | None = None, timeout: float = 120.0) -> Measured:
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.monotonic()
        child = subprocess.Popen([sys.executable, "-m", "dflash_doctor", *args], stdout=out, stderr=err, env=env)
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - started > timeout:
                child.send_signal(signal.SIGKILL)
            time.sleep(0.02)
        seconds = time.monotonic() - started
        child.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        out.seek(0)
        err.seek(0)
        return Measured(child.returncode, out.read().decode(), err.read().decode(), seconds, usage.ru_maxrss * 1024)
