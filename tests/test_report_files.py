"""Report files written with --output are ordinary files: the umask decides their mode."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest


@pytest.mark.release
@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_output_files_honour_the_umask(mini_tree, tmp_path, umask, mode):
    tree = mini_tree("0.33.0")
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "dflash_doctor", "check", "--path", str(tree), "--output", f"json={report}"],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=lambda: os.umask(umask),
    )
    assert proc.returncode in (0, 1, 2), proc.stderr
    assert stat.S_IMODE(report.stat().st_mode) == mode
