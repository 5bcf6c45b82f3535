"""check --python on an environment that carries code: its .pth files and
sitecustomize must not run (the interpreter is started with -I -S), while
vllm is still found where site would have put it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import run_cli, statuses


def hostile_venv(where: Path, marker: Path, *paths: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    site = next(where.glob("lib/python3*/site-packages"))
    (site / "extra.pth").write_text("# a comment\n" + "".join(f"{p}\n" for p in paths))
    (site / "evil.pth").write_text(f"import os; open({str(marker) + '.pth'!r}, 'w').write('ran')\n")
    (site / "sitecustomize.py").write_text(f"open({str(marker) + '.sitecustomize'!r}, 'w').write('ran')\n")
    return where / "bin" / "python"


def test_the_environments_pth_files_and_sitecustomize_do_not_run(tmp_path, release):
    marker = tmp_path / "marker"
    python = hostile_venv(tmp_path / "venv", marker, release("0.33.0"))
    proc = run_cli("check", "--python", str(python), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["target"]["location"] == str(release("0.33.0"))
    assert set(statuses(report).values()) == {"present"}
    assert list(tmp_path.glob("marker*")) == []
    # the same interpreter started normally does run them: the markers prove the hooks are live
    subprocess.run([str(python), "-c", "pass"], check=True)
    assert sorted(p.name for p in tmp_path.glob("marker*")) == ["marker.pth", "marker.sitecustomize"]


def test_pythonpath_is_still_honoured(tmp_path, release):
    python = hostile_venv(tmp_path / "venv", tmp_path / "marker")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.environ.get("PYTHONPATH", ""), str(release("0.20.1"))])}
    proc = run_cli("check", "--python", str(python), "--format", "json", env=env)
    assert json.loads(proc.stdout)["target"]["location"] == str(release("0.20.1")), proc.stderr
    assert list(tmp_path.glob("marker*")) == []
