"""The CI recipes under docs/ci (issue 21): they install a pinned, hash-checked dflash-doctor, never a bare
name from an index, and the shell gate says "could not run" (3) when it is not told what to check.

The install step of the GitHub workflow and docs/ci/gate.sh run as written, in a fresh venv, against a
wheel built from this checkout and served by a real HTTP server on 127.0.0.1. The wheel carries a local
version label, so it cannot be mistaken for a dflash-doctor installed elsewhere on the machine. The venv
sees the machine's site-packages for the dependencies (the tests have no index); in CI the requirements
file pins those with hashes too (docs/ci.md).
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CI = ROOT / "docs" / "ci"
VERSION = "0.1.0+pinned"  # the wheel built here, told apart from any installed dflash-doctor
SLOW = pytest.mark.slow  # builds a wheel and a venv


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory) -> Path:
    """A wheel of this checkout (version ``VERSION``), and beside it in ``tampered/`` other bytes under its name."""
    pytest.importorskip("hatchling", reason="building the wheel needs hatchling (the test extras)")
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for name in ("dflash_doctor", "rules", "schemas"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    init = source / "dflash_doctor" / "__init__.py"
    init.write_text(re.sub(r'__version__ = "[^"]+"', f'__version__ = "{VERSION}"', init.read_text()))
    house = tmp_path_factory.mktemp("wheels")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(house),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = house.glob("*.whl")
    (house / "tampered").mkdir()
    (house / "tampered" / wheel.name).write_bytes(wheel.read_bytes() + b"\0")  # still a zip, other bytes
    squatter = house / "simple" / "dflash-doctor"  # an index that offers the tampered bytes under the bare name
    squatter.mkdir(parents=True)
    (squatter / "index.html").write_text(f'<a href="../../tampered/{wheel.name}">{wheel.name}</a>\n')
    return house


@pytest.fixture(scope="module")
def served(wheelhouse) -> Iterator[str]:
    """The wheelhouse on a real HTTP server on 127.0.0.1: its base URL."""
    handler = functools.partial(_Quiet, directory=str(wheelhouse))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def requirements_line(wheelhouse: Path, url: str, under: str = "") -> str:
    """The line docs/ci.md says to write: the wheel's URL and its sha256."""
    (wheel,) = wheelhouse.glob("*.whl")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return f"dflash-doctor @ {url}/{under}{wheel.name} --hash=sha256:{digest}\n"


def fresh(tmp_path: Path, *venv_options: str) -> Path:
    """A fresh venv (``venv/``) and a repository directory (``repo/``) holding ``.dflash-doctor/``."""
    subprocess.run([sys.executable, "-m", "venv", *venv_options, str(tmp_path / "venv")], check=True, timeout=300)
    (tmp_path / "repo" / ".dflash-doctor").mkdir(parents=True)
    return tmp_path


@pytest.fixture
def checkout(tmp_path) -> Path:
    """``fresh``, its venv seeing the machine's site-packages for the dependencies."""
    return fresh(tmp_path, "--system-site-packages")


@pytest.fixture
def empty_checkout(tmp_path) -> Path:
    """``fresh``, its venv holding nothing but pip (as on a CI runner: no dflash-doctor anywhere)."""
    return fresh(tmp_path)


def environment(checkout: Path, index: str = "http://127.0.0.1:9/simple") -> dict[str, str]:
    """The venv first on PATH (as setup-python puts its Python), no pip.conf, ``index`` (by
    default none that answers)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "PYTHONPATH", "GPU_HOST", "DFLASH_DOCTOR_TARGET")
    }
    return {
        **env,
        "PATH": f"{checkout / 'venv' / 'bin'}:{env['PATH']}",
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_INDEX_URL": index,
        "PIP_RETRIES": "0",
        "PIP_NO_INPUT": "1",
    }


def install_step() -> str:
    """The ``run`` of the workflow's install step, exactly as the recipe has it."""
    workflow = yaml.safe_load((CI / "github-actions.yml").read_text())
    (step,) = [step for step in workflow["jobs"]["gate"]["steps"] if step.get("name") == "Install dflash-doctor"]
    return step["run"]


def run_step(run: str, checkout: Path, **index: str) -> subprocess.CompletedProcess:
    """A workflow ``run`` as GitHub's runner starts it: ``bash -e`` in the repository's directory."""
    return subprocess.run(
        ["bash", "-e", "-c", run],
        check=False,
        cwd=checkout / "repo",
        env=environment(checkout, **index),
        capture_output=True,
        text=True,
        timeout=300,
    )


def installed_version(checkout: Path) -> str | None:
    """What the venv's own ``dflash-doctor --version`` says, or None when the venv has no dflash-doctor."""
    program = checkout / "venv" / "bin" / "dflash-doctor"
    if not program.exists():
        return None
    return subprocess.run([str(program), "--version"], capture_output=True, text=True, check=True).stdout.strip()


def pin(checkout: Path, text: str) -> None:
    (checkout / "repo" / ".dflash-doctor" / "requirements.txt").write_text(text)


# ------------------------------------------------------------ the GitHub workflow


def test_every_recipe_installs_only_hash_checked_files():
    """No recipe names a bare package for pip, nor a variable that could hold one."""
    installs = []
    for path in [*CI.iterdir(), ROOT / "docs" / "ci.md"]:
        for line in path.read_text().splitlines():
            if re.search(r"\bpip install\b", line):
                installs.append((path.name, line))
                assert "--require-hashes" in line, (path.name, line)
        assert "DFLASH_DOCTOR_SPEC" not in path.read_text(), path.name
    assert {name for name, _ in installs} >= {"github-actions.yml", "gate.sh"}, installs


@SLOW
def test_workflow_install_step_installs_the_pinned_wheel(wheelhouse, served, checkout):
    pin(checkout, requirements_line(wheelhouse, served))
    proc = run_step(install_step(), checkout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert installed_version(checkout) == f"dflash-doctor {VERSION}"


@SLOW
def test_workflow_install_step_refuses_other_bytes_under_the_pinned_hash(wheelhouse, served, checkout):
    pin(checkout, requirements_line(wheelhouse, served, under="tampered/"))
    proc = run_step(install_step(), checkout)
    assert proc.returncode != 0 and "DO NOT MATCH THE HASHES" in proc.stderr, proc.stderr
    assert installed_version(checkout) != f"dflash-doctor {VERSION}"


@SLOW
@pytest.mark.parametrize("line", ["dflash-doctor\n", "dflash-doctor==0.1.0\n"])
def test_workflow_install_step_refuses_a_name_without_a_hash(served, empty_checkout, line):
    """An index that offers other bytes under the name: pip fetches them to hash them, and installs nothing."""
    pin(empty_checkout, line)
    proc = run_step(install_step(), empty_checkout, index=f"{served}/simple")
    refused = ("ERROR: In --require-hashes mode", "Hashes are required in --require-hashes mode")  # unpinned, pinned
    assert proc.returncode != 0 and any(reason in proc.stderr for reason in refused), proc.stderr
    assert installed_version(empty_checkout) is None


@SLOW
def test_workflow_install_step_fails_without_the_requirements_file(checkout):
    proc = run_step(install_step(), checkout)
    assert proc.returncode != 0 and ".dflash-doctor/requirements.txt" in proc.stderr, proc.stderr


# ------------------------------------------------------------ the shell gate


def gate(checkout: Path, **env: str) -> subprocess.CompletedProcess:
    """docs/ci/gate.sh run by sh in the repository's directory, with ``env`` added."""
    return subprocess.run(
        ["sh", str(CI / "gate.sh")],
        check=False,
        cwd=checkout / "repo",
        env={**environment(checkout), **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture
def bare(tmp_path) -> Path:
    """A repository directory with nothing in it, and no venv (gate.sh must stop before it installs)."""
    (tmp_path / "repo").mkdir()
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    return tmp_path


def test_gate_without_a_target_could_not_run(bare):
    proc = gate(bare)
    assert proc.returncode == 3, (proc.returncode, proc.stderr)
    assert (
        proc.stderr == "dflash-doctor: the check could not run: set GPU_HOST or DFLASH_DOCTOR_TARGET: not deploying\n"
    )
    assert not list((bare / "repo").iterdir())  # no report, nothing installed


@SLOW
def test_gate_with_a_tampered_wheel_could_not_run(wheelhouse, served, checkout):
    pin(checkout, requirements_line(wheelhouse, served, under="tampered/"))
    proc = gate(checkout, GPU_HOST="127.0.0.1")
    assert proc.returncode == 3, (proc.returncode, proc.stderr)
    assert "DO NOT MATCH THE HASHES" in proc.stderr
    assert proc.stderr.endswith(
        "cannot install the pinned dflash-doctor from .dflash-doctor/requirements.txt: not deploying\n"
    ), proc.stderr
    assert installed_version(checkout) != f"dflash-doctor {VERSION}"
    assert not (checkout / "repo" / "dflash-doctor.sarif").exists()


@pytest.mark.release
@SLOW
def test_gate_installs_the_pin_and_runs_the_check(wheelhouse, served, checkout, mini_tree):
    pin(checkout, requirements_line(wheelhouse, served))
    tree = mini_tree("0.20.1")
    proc = gate(checkout, DFLASH_DOCTOR_TARGET=f"--path {tree}")
    assert installed_version(checkout) == f"dflash-doctor {VERSION}"
    assert proc.returncode == 1, (proc.returncode, proc.stderr)  # 0.20.1 lacks the fixes
    assert proc.stderr.endswith("dflash-doctor: a DFlash fix is missing: not deploying (see dflash-doctor.sarif)\n")
    sarif = (checkout / "repo" / "dflash-doctor.sarif").read_text()
    assert '"layer-offset"' in sarif and (checkout / "repo" / "dflash-doctor.xml").is_file()


@SLOW
def test_gate_with_a_host_that_does_not_answer_could_not_run(wheelhouse, served, checkout):
    """GPU_HOST alone is the target; a host nothing listens on is "could not run", after the pinned install."""
    pin(checkout, requirements_line(wheelhouse, served))
    proc = gate(checkout, GPU_HOST="root@127.0.0.1:9")
    assert installed_version(checkout) == f"dflash-doctor {VERSION}"
    assert proc.returncode == 3, (proc.returncode, proc.stderr)
    assert "dflash-doctor: error: " in proc.stderr and "127.0.0.1" in proc.stderr
    assert proc.stderr.endswith("dflash-doctor: the check could not run (exit 3): not deploying\n"), proc.stderr
