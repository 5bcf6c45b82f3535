"""What a terminal shows while ``dflash-doctor`` runs in it: a pty made by
``script``, or a tmux pane of a given width."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
import uuid
from pathlib import Path

END = "__render_test_done__"


def on_a_terminal(args: list[str], env: dict[str, str]) -> str:
    """What a terminal (a pty made by ``script``) shows while the command runs."""
    command = shlex.join([sys.executable, "-m", "dflash_doctor", *args])
    proc = subprocess.run(
        ["script", "-qec", command, "/dev/null"],
        env={**env, "COLUMNS": "120"},
        capture_output=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode in (0, 1, 2), proc.stdout.decode(errors="replace")[-2000:]  # a verdict, not an error
    return proc.stdout.decode("utf-8", "replace")


def in_tmux(width: int, *args: str, tmp_path: Path, colour: bool = False, cwd: Path | None = None) -> list[str]:
    """The rows of a ``width``-column tmux pane after ``dflash-doctor *args`` ran in it (in ``cwd``; standard error
    to a file)."""
    socket = f"render-{uuid.uuid4().hex[:8]}"
    command = shlex.join([sys.executable, "-m", "dflash_doctor", *args]) + f" 2>{shlex.quote(str(tmp_path / 'stderr'))}"
    tmux = ["tmux", "-L", socket, "-f", os.devnull]
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "TMUX", "NO_COLOR")}
    subprocess.run(
        [
            *tmux,
            "new-session",
            "-d",
            "-x",
            str(width),
            "-y",
            "200",
            "-c",
            str(cwd or tmp_path),
            f"{command}; echo {END}; sleep 600",
        ],
        check=True,
        env={**env, "TERM": "xterm-256color"},
    )
    try:
        for _ in range(600):
            plain = subprocess.run([*tmux, "capture-pane", "-p"], capture_output=True, text=True, check=True).stdout
            if END in plain:
                break
            time.sleep(0.1)
        else:
            raise AssertionError(f"no end marker in the pane: {plain}")
        joined = subprocess.run([*tmux, "capture-pane", "-p", "-J"], capture_output=True, text=True, check=True).stdout
        styled = subprocess.run([*tmux, "capture-pane", "-p", "-e"], capture_output=True, text=True, check=True).stdout
    finally:
        subprocess.run([*tmux, "kill-server"], check=False)
    rows = plain[: plain.index(END)].rstrip("\n").split("\n")
    assert rows == joined[: joined.index(END)].rstrip("\n").split("\n"), "the terminal wrapped a line: it was too long"
    return styled[: styled.index(END)].rstrip("\n").split("\n") if colour else rows
