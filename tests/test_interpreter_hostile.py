"""check --python on an environment that carries code: its .pth files and
sitecustomize must not run (the interpreter is started with -I -S), while
vllm is still found where site would have put it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import assert_error, run_cli, statuses


def hostile_venv(where: Path, marker: Path, *paths: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    site = next(where.glob("lib/python3*/site-packages"))
    (site / "extra.pth").write_text("# a comment\n" + "".join(f"{p}\n" for p in paths))
    (site / "evil.pth").write_text(f"import os; open({str(marker) + '.pth'!r}, 'w').write('ran')\n")
    (site / "sitecustomize.py").write_text(f"open({str(marker) + '.sitecustomize'!r}, 'w').write('ran')\n")
    return where / "bin" / "python"


@pytest.mark.release
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


@pytest.mark.release
def test_pythonpath_is_still_honoured(tmp_path, release):
    python = hostile_venv(tmp_path / "venv", tmp_path / "marker")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.environ.get("PYTHONPATH", ""), str(release("0.20.1"))])}
    proc = run_cli("check", "--python", str(python), "--format", "json", env=env)
    assert json.loads(proc.stdout)["target"]["location"] == str(release("0.20.1")), proc.stderr
    assert list(tmp_path.glob("marker*")) == []


@pytest.mark.release
def test_a_setuptools_editable_install_is_found_without_running_its_finder(tmp_path, release):
    """The finder module and .pth written by setuptools' own editable_wheel code
    (building a real editable wheel needs `wheel`, which is not installed here). They are
    written by a process of their own: setuptools refuses to load where the standard
    library's distutils already is (pip, run in this process by release tests, loads it)."""
    python = hostile_venv(tmp_path / "venv", tmp_path / "marker")
    site = next((tmp_path / "venv").glob("lib/python3*/site-packages"))
    (site / "extra.pth").unlink()
    name = "__editable__.vllm-0.33.0.finder"
    written = subprocess.run(
        [
            sys.executable,
            "-c",
            (
                "import json, sys; from setuptools.command.editable_wheel import _finder_template, _make_identifier; "
                "name, path = sys.argv[1:]; print(json.dumps([_make_identifier(name), _finder_template(name, "
                "{'vllm': path}, {})]))"
            ),
            name,
            str(release("0.33.0") / "vllm"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    finder, source = json.loads(written.stdout)
    (site / f"{finder}.py").write_text(source)
    (site / "__editable__.vllm-0.33.0.pth").write_text(f"import {finder}; {finder}.install()")
    assert (
        "0.33.0"
        in subprocess.run(
            [str(python), "-c", "import importlib.util as u; print(u.find_spec('vllm').origin)"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    proc = run_cli("check", "--python", str(python), "--format", "json")
    assert json.loads(proc.stdout)["target"]["location"] == str(release("0.33.0")), proc.stderr


def test_an_interpreter_that_answers_nonsense_is_an_error(tmp_path):
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\ncat >/dev/null\necho 'DFLASH-DOCTOR-PROBE:{\"python\": 3}'\n")
    script.chmod(0o755)
    assert_error(run_cli("check", "--python", str(script)), "the probe answer is malformed: field 'python'")
    script.write_text('#!/bin/sh\ncat >/dev/null\necho \'DFLASH-DOCTOR-PROBE:{"python": "x"}\'\n')
    assert_error(run_cli("check", "--python", str(script)), "the probe answer names no package directory")
