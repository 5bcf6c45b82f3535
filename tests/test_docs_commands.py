"""Every command the README and docs/*.md show in ``sh`` / ``console`` blocks, run as pasted
(``sh -c``, in a temporary HOME) wherever it can run here, so that a pasted command never
fails because of the docs. What cannot run here is skipped with its reason.

The docs' placeholder paths (`/path/to/site-packages`, `...`, `/opt/venvs/serve/bin/python`)
are replaced by a site-packages holding a copy of the real 0.20.1 tree and an interpreter
that sees it; `~/...` paths exist in the temporary HOME; release trees come from the real
download cache (DFLASH_DOCTOR_CACHE)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from conftest import TREE_FILES, rule_files
from documented import COMMANDS, REPO, Command, why_not_here
from dflash_doctor.paths import cache_dir
from dflash_doctor.targets.release import release_tree

DRAFTER = REPO / "tests" / "data" / "drafters" / "qwen3.6-27b-dflash.json"

SITE = "{site}"  # a site-packages with vllm (a copy of the real 0.20.1 tree's files the rules read)
PYTHON = "{python}"  # an interpreter whose sys.path holds SITE
PLACEHOLDERS = {
    "/path/to/site-packages": SITE,
    "...": SITE,
    "/opt/venvs/serve/lib/python3.11/site-packages": SITE,
    "/opt/venv/lib/python3.11/site-packages": SITE,
    "/opt/venv/lib/python3.12/site-packages": SITE,
    "/root/ml-env/bin/python": PYTHON,
    "/opt/venvs/serve/bin/python": PYTHON,
    "/opt/venv/bin/python": PYTHON,
}

# Exit codes the docs state for a command; any other command may exit 0, 1 or 2 (never 3).
STATED = {"dflash-doctor check --release 0.20.1": {1}, "dflash-doctor rules test": {0}, "dflash-doctor --version": {0}}


def pasted(command: Command, session: dict[str, str]) -> str:
    """The command with the docs' placeholders replaced (whole words only)."""
    words = shlex.split(command.text, comments=True, posix=False)
    return " ".join(PLACEHOLDERS.get(word, word).format(**session) for word in words)


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    """A temporary HOME and working directory where the documented paths exist."""
    home = tmp_path_factory.mktemp("home")
    work = home / "work"
    site = home / "venv" / "site-packages"
    source = release_tree("0.20.1")
    for relpath in [*TREE_FILES, *rule_files()]:
        if (source / relpath).is_file():
            (site / relpath).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / relpath, site / relpath)
    for dist_info in source.glob("vllm-*.dist-info"):
        shutil.copytree(dist_info, site / dist_info.name)
    shutil.copytree(site, home / "src" / "vllm")  # `check --path ~/src/vllm`: a source checkout's layout
    bin_dir = home / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={shlex.quote(str(site))} exec {shlex.quote(sys.executable)} "$@"\n')
    tool = bin_dir / "dflash-doctor"
    tool.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m dflash_doctor "$@"\n')
    for script in (python, tool):
        script.chmod(0o755)
    for drafter in (home / "models" / "Qwen3.6-27B-DFlash", work / "Qwen3.6-27B-DFlash", work / "drafter"):
        drafter.mkdir(parents=True)
        shutil.copy(DRAFTER, drafter / "config.json")
    (home / "models" / "Qwen3.6-27B").mkdir()
    (home / "models" / "Qwen3.6-27B" / "config.json").write_text(json.dumps({"num_hidden_layers": 64}))
    (work / "serve.sh").write_text(  # the launch command the docs lint with --launch-flags @serve.sh
        "python -m sglang.launch_server --model-path Qwen/Qwen3.6-27B --speculative-algorithm DFLASH \\\n"
        "    --speculative-draft-model-path z-lab/Qwen3.6-27B-DFlash --speculative-num-draft-tokens 16\n"
    )
    env = {
        **os.environ,
        "HOME": str(home),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        # the interpreter running dflash-doctor sees vllm too (`dflash-doctor check` with no target)
        "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(REPO), str(site)])),
        "DFLASH_DOCTOR_CACHE": str(cache_dir()),
        "DFLASH_DOCTOR_NO_CACHE": "1",  # results cache off: nothing is written into the real cache
    }
    env.pop("XDG_CACHE_HOME", None)
    # `run python3 probe.py > HOST.probe on each host` (docs/ssh.md): one host's answer, made here
    (work / "answers").mkdir(parents=True)
    probe = subprocess.run(
        ["dflash-doctor", "probe-script"], env=env, capture_output=True, text=True, timeout=60, check=True
    ).stdout
    answer = subprocess.run(
        [str(python), "-"], input=probe, env=env, capture_output=True, text=True, timeout=60, check=True
    )
    (work / "answers" / "gpu-01.probe").write_text(answer.stdout)
    return {"site": str(site), "python": str(python), "cwd": str(work), "env": env}


def test_the_docs_show_commands_and_most_run_here():
    assert len(COMMANDS) > 50
    runnable = [command for command in COMMANDS if why_not_here(command) is None]
    assert len(runnable) >= 25, [str(c) for c in runnable]
    assert all(command.words[0] == "dflash-doctor" for command in runnable), [str(c) for c in runnable]
    for text in STATED:
        assert any(command.text.split("#")[0].strip() == text for command in runnable), text


def test_no_documented_command_is_a_shell_pipe_of_subcommands():
    """`rules list | rules show ...` pastes as a pipe into a command that does not exist."""
    for command in COMMANDS:
        for part in re.split(r"\|\||&&|\||;", command.text.split(" #")[0])[1:]:
            first = part.split()[0] if part.split() else ""
            assert shutil.which(first) or first in ("dflash-doctor", "pytest", "./deploy.sh"), str(command)


@pytest.mark.release
@pytest.mark.parametrize("command", COMMANDS, ids=[f"{c.page}:{c.line}" for c in COMMANDS])
def test_documented_command_runs_as_pasted(command, session):
    reason = why_not_here(command)
    if reason:
        pytest.skip(f"{command.text}: {reason}")
    line = pasted(command, session)
    proc = subprocess.run(
        ["sh", "-c", line], cwd=session["cwd"], env=session["env"], capture_output=True, text=True, timeout=300
    )
    expected = STATED.get(command.text.split("#")[0].strip(), {0, 1, 2})
    assert proc.returncode in expected, f"{command}\n  ran: {line}\n  exit {proc.returncode}: {proc.stderr.strip()}"
    assert "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.release
def test_config_notes_say_what_to_do_or_nothing(session):
    """Info findings carry a note or nothing: no "fix: nothing to do" under every line,
    and no pointer to probes that the standalone command does not have."""
    proc = subprocess.run(
        ["dflash-doctor", "config", str(DRAFTER)], env=session["env"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert "nothing to do" not in proc.stdout and "see the probes" not in proc.stdout, proc.stdout
    lines = proc.stdout.splitlines()
    for finding, after in zip(lines, lines[1:] + [""]):
        if finding.startswith("  info "):
            assert not after.strip().startswith("fix:"), (finding, after)
    assert any(line.strip().startswith("note: run a vLLM whose V2 runner") for line in lines), proc.stdout
    assert "`dflash-doctor check --draft-config`" in proc.stdout
