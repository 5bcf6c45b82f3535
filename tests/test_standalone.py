"""dflash_doctor/standalone/: the code that runs without the tool (the collector on a
host, the behaviour child's lockdown and harness) keeps to the standard library and to
the oldest Python it promises, 3.6. Its grammar is checked everywhere; where a real
Python 3.6 is installed (pyenv's, say) each module is compiled by it and the collector
run under it on a real release tree."""

from __future__ import annotations

import ast
import glob
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import check_json, run_cli

STANDALONE = Path(__file__).resolve().parent.parent / "dflash_doctor" / "standalone"
MODULES = sorted(STANDALONE.glob("*.py"))
OLDEST = (3, 6)


def oldest_python() -> str | None:
    """An interpreter of the oldest promised Python that really runs, or None."""
    candidates = [
        os.environ.get("DFLASH_DOCTOR_PYTHON36", ""),
        *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.6*/bin/python3.6"))),
        "/usr/bin/python3.6",
        "/usr/local/bin/python3.6",
    ]
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            probe = subprocess.run(
                [candidate, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True
            )
            if probe.returncode == 0 and probe.stdout.strip() == str(OLDEST):
                return candidate
    return None


def test_there_is_standalone_code_to_hold():
    assert {path.name for path in MODULES} >= {"probe.py", "harness.py", "lockdown.py"}


@pytest.mark.parametrize("module", MODULES, ids=lambda path: path.name)
def test_standalone_modules_use_the_standard_library_alone_and_python_3_6_grammar(module: Path):
    source = module.read_text(encoding="utf-8")
    tree = ast.parse(source, feature_version=OLDEST)  # 3.8+ syntax (walrus, positional-only, ...) is refused
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{module.name}:{node.lineno} imports relatively: it would need the package"
            assert node.module != "__future__" or all(alias.name != "annotations" for alias in node.names), (
                f"{module.name}:{node.lineno}: from __future__ import annotations is Python 3.7"
            )
            names = [node.module or ""]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        siblings = {path.stem for path in MODULES}  # sent together, as one program
        for name in names:
            top = name.split(".")[0]
            assert top in sys.stdlib_module_names or top in siblings, (
                f"{module.name}:{node.lineno} imports {name}, outside the standard library"
            )
            assert top not in ("dataclasses", "contextvars"), f"{module.name}:{node.lineno}: {top} is Python 3.7"


@pytest.mark.slow
@pytest.mark.parametrize("module", MODULES, ids=lambda path: path.name)
def test_standalone_modules_compile_under_python_3_6(module: Path):
    python = oldest_python()
    if python is None:
        pytest.skip("no Python 3.6 installed here (set DFLASH_DOCTOR_PYTHON36 to one): the grammar test stands in")
    compiled = subprocess.run(
        [
            python,
            "-c",
            "import sys; compile(open(sys.argv[1], encoding='utf-8').read(), sys.argv[1], 'exec')",
            str(module),
        ],
        capture_output=True,
        text=True,
    )
    assert compiled.returncode == 0, compiled.stderr


@pytest.mark.release
@pytest.mark.slow
def test_the_collector_answers_under_python_3_6_and_the_answer_is_judged(tmp_path: Path, release):
    python = oldest_python()
    if python is None:
        pytest.skip("no Python 3.6 installed here (set DFLASH_DOCTOR_PYTHON36 to one)")
    script = tmp_path / "probe.py"
    script.write_text(run_cli("probe-script").stdout)
    answer = subprocess.run(
        [python, str(script)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(release("0.33.0"))},
    )
    assert answer.stdout.strip() and not answer.stderr.strip()
    (tmp_path / "host.probe").write_text(answer.stdout)
    code, report = check_json("--from-probe", str(tmp_path / "host.probe"))
    assert report["engine"]["name"] == "vllm" and report["engine"]["version"] == "0.33.0"
    assert {fix["id"]: fix["status"] for fix in report["fixes"]}["layer-offset"] == "present"
    assert code in (0, 2)  # behaviour does not run from a probe file: structure may leave a fix unknown
