"""Seams chosen by what a target or a format can do, and the one exit-code rule.

Synthetic trees and reports only: no wheel is read here.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from dflash_doctor import model
from dflash_doctor.model import (
    ABSENT,
    EXIT_ERROR,
    EXIT_MISSING,
    EXIT_OK,
    EXIT_UNKNOWN,
    NOT_APPLICABLE,
    PARTIAL,
    PRESENT,
    UNKNOWN,
    CheckReport,
    FixResult,
    HostOutcome,
    Provenance,
    TargetInfo,
    ToolError,
    Waiver,
    exit_code_for,
    fleet_exit_code,
    verdict_code,
)

PACKAGE = Path(model.__file__).parent


def fix(status: str, waived: bool = False, fix_id: str = "layer-offset") -> FixResult:
    waiver = Waiver(fix_id, "accepted") if waived else None
    return FixResult(fix_id, status, "title", (1,), (), "remedy", waiver=waiver)


def report(*fixes: FixResult, strict: bool = False, directory: bool = True, location: str = "/srv/site") -> CheckReport:
    target = TargetInfo("path", location, directory=directory)
    return CheckReport(target, Provenance(None, None, None, None), fixes, "0", strict=strict)


# ------------------------------------------------------------------ the one exit-code rule


@pytest.mark.parametrize(
    "codes, expected",
    [
        ((), EXIT_OK),
        ((EXIT_OK,), EXIT_OK),
        ((EXIT_OK, EXIT_UNKNOWN), EXIT_UNKNOWN),
        ((EXIT_UNKNOWN, EXIT_MISSING), EXIT_MISSING),
        ((EXIT_MISSING, EXIT_UNKNOWN, EXIT_OK), EXIT_MISSING),
        ((EXIT_OK, EXIT_ERROR, EXIT_MISSING), EXIT_ERROR),
        ((EXIT_UNKNOWN, EXIT_ERROR), EXIT_ERROR),
    ],
)
def test_the_worst_part_decides(codes, expected):
    assert exit_code_for(iter(codes)) == expected


@pytest.mark.parametrize(
    "status, strict, expected",
    [
        (PRESENT, False, EXIT_OK),
        (PRESENT, True, EXIT_OK),
        (ABSENT, False, EXIT_MISSING),
        (PARTIAL, False, EXIT_MISSING),
        (NOT_APPLICABLE, False, EXIT_MISSING),
        (UNKNOWN, False, EXIT_UNKNOWN),
        (UNKNOWN, True, EXIT_MISSING),
    ],
)
def test_a_fix_verdicts_part(status, strict, expected):
    assert verdict_code(status, strict) == expected


@pytest.mark.parametrize(
    "statuses, strict, expected",
    [
        ((PRESENT, PRESENT), False, EXIT_OK),
        ((PRESENT, UNKNOWN), False, EXIT_UNKNOWN),
        ((PRESENT, UNKNOWN), True, EXIT_MISSING),
        ((UNKNOWN, ABSENT), False, EXIT_MISSING),
        ((NOT_APPLICABLE,), False, EXIT_MISSING),
    ],
)
def test_a_check_report_combines_its_verdicts(statuses, strict, expected):
    assert (
        report(*(fix(status, fix_id=f"f{i}") for i, status in enumerate(statuses)), strict=strict).exit_code == expected
    )


def test_a_waived_fix_is_no_part_of_the_code():
    assert report(fix(ABSENT, waived=True), fix(PRESENT, fix_id="other")).exit_code == EXIT_OK
    assert report(fix(ABSENT, waived=True), fix(UNKNOWN, fix_id="other")).exit_code == EXIT_UNKNOWN


@pytest.mark.parametrize(
    "hosts, expected",
    [
        ([EXIT_OK, EXIT_OK], EXIT_OK),
        ([EXIT_OK, EXIT_UNKNOWN], EXIT_UNKNOWN),
        ([EXIT_UNKNOWN, EXIT_MISSING], EXIT_MISSING),
        ([EXIT_MISSING, None], EXIT_ERROR),  # None: the host could not be checked
    ],
)
def test_a_fleet_is_its_worst_host(hosts, expected):
    by_code = {EXIT_OK: report(fix(PRESENT)), EXIT_UNKNOWN: report(fix(UNKNOWN)), EXIT_MISSING: report(fix(ABSENT))}
    outcomes = [
        HostOutcome(f"h{i}", report=by_code[code]) if code is not None else HostOutcome(f"h{i}", error="down")
        for i, code in enumerate(hosts)
    ]
    assert fleet_exit_code(outcomes) == expected
    assert model.fleet_json(outcomes)["exit_code"] == expected


def test_ancestry_accept_and_lint_use_the_rule():
    from dflash_doctor.accept.diagnose import EXIT_CODES, Diagnosis
    from dflash_doctor.ancestry.report import CONTAINED, MISSING, UNKNOWN as NOT_KNOWN, AncestryReport, PrAncestry

    def ancestry(*statuses):
        prs = tuple(PrAncestry(i, None, status, "merge-commit", (), "") for i, status in enumerate(statuses))
        return AncestryReport("repo", "c" * 40, None, "main", prs).exit_code

    assert [ancestry(), ancestry(CONTAINED), ancestry(CONTAINED, NOT_KNOWN), ancestry(NOT_KNOWN, MISSING)] == [
        EXIT_OK,
        EXIT_OK,
        EXIT_UNKNOWN,
        EXIT_MISSING,
    ]
    assert {code: Diagnosis(code, "").exit_code for code in EXIT_CODES} == EXIT_CODES


# ------------------------------------------------------------------ HostOutcome and the reporters


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            names.add("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_reporters_never_import_fleet():
    for path in sorted((PACKAGE / "reporters").glob("*.py")):
        assert not any(name.endswith("fleet") for name in imported_modules(path)), path.name


def test_formats_come_from_the_registry_and_an_unknown_one_is_an_error():
    from dflash_doctor.reporters import FORMATS, REPORTERS, reporter

    assert FORMATS == tuple(REPORTERS) and "table" in FORMATS
    for name in FORMATS:
        module, _, cls = REPORTERS[name].partition(":")
        assert type(reporter(name)).__qualname__ == cls and type(reporter(name)).__module__.endswith(
            f"reporters.{module}"
        )
    with pytest.raises(ToolError, match="unknown report format 'xml'"):
        reporter("xml")


def test_every_registered_format_renders_a_report_and_a_fleet():
    from dflash_doctor.reporters import FORMATS, reporter

    one = report(fix(ABSENT))
    outcomes = [HostOutcome("up", report=one), HostOutcome("down", error="connection refused")]
    for name in FORMATS:
        assert "layer-offset" in reporter(name).render(one, terminal=False), name
        assert "connection refused" in reporter(name).render_fleet(outcomes, terminal=False), name


# ------------------------------------------------------------------ SARIF root from what the target says


def sarif_root(target_report: CheckReport) -> dict:
    from dflash_doctor.reporters.sarif import ROOT_ID, SarifReporter

    return json.loads(SarifReporter().render(target_report, terminal=False))["runs"][0]["originalUriBaseIds"][ROOT_ID]


def test_sarif_names_a_local_directory_by_uri_and_anything_else_by_description():
    assert sarif_root(report(fix(ABSENT), directory=True, location="/srv/site")) == {"uri": "file:///srv/site/"}
    # An absolute-looking location that is not a directory here (a probe's host path) gets no file: URI.
    assert sarif_root(report(fix(ABSENT), directory=False, location="/srv/site")) == {
        "description": {"text": "path /srv/site"}
    }


def test_a_fleet_host_that_could_not_be_checked_is_a_failed_invocation_with_exit_3():
    from dflash_doctor.reporters.sarif import SarifReporter

    log = json.loads(SarifReporter().render_fleet([HostOutcome("down", error="refused")], terminal=False))
    assert log["runs"][0]["invocations"][0]["exitCode"] == EXIT_ERROR


# ------------------------------------------------------------------ the patch backend is the target's to say


def synthetic_tree(root: Path) -> Path:
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text("__version__ = '0.0.0'\n")
    return root


def test_a_local_directory_is_patched_through_local_files(tmp_path):
    from dflash_doctor.targets import files_for
    from dflash_doctor.patching.files import LocalFiles
    from dflash_doctor.targets.path import PathTarget

    resolved = PathTarget(synthetic_tree(tmp_path / "site") / "vllm").resolve()
    files = files_for(resolved)()
    assert isinstance(files, LocalFiles) and files.root == (tmp_path / "site").resolve()
    assert resolved.info.directory


def test_a_tree_in_the_release_cache_cannot_be_patched(tmp_path, monkeypatch):
    from dflash_doctor.targets import files_for
    from dflash_doctor.targets.path import PathTarget

    monkeypatch.setenv("DFLASH_DOCTOR_CACHE", str(tmp_path / "cache"))
    resolved = PathTarget(synthetic_tree(tmp_path / "cache" / "releases" / "9.9.9")).resolve()
    assert resolved.files is None and resolved.behaviour is not None  # still checked and run, never written
    with pytest.raises(ToolError, match=r"cannot be patched: it is in dflash-doctor's read-only release cache"):
        files_for(resolved)


def test_a_probe_answer_cannot_be_patched(tmp_path):
    from dflash_doctor.targets import files_for
    from dflash_doctor.targets.snapshot import snapshot_target

    resolved = snapshot_target({"host": "gpu1", "root": "/srv/site", "files": {}}, "probe", "probe file x")
    assert not resolved.info.directory
    with pytest.raises(ToolError, match="gpu1:/srv/site cannot be patched: its files are copies a probe sent"):
        files_for(resolved)


def test_no_type_or_kind_dispatch_is_left_in_the_patch_seam():
    for path in (
        PACKAGE / "patching" / "__init__.py",
        PACKAGE / "commands" / "patch.py",
        PACKAGE / "reporters" / "sarif.py",
    ):
        text = path.read_text()
        assert (
            "isinstance(" not in text and ".kind ==" not in text and ".kind !=" not in text and "KINDS" not in text
        ), path


# ------------------------------------------------------------------ typed report sections


def test_sections_keep_their_json_keys_in_order_and_the_table_only_iterates():
    import datetime

    from dflash_doctor.ancestry.report import AncestryReport, PrAncestry
    from dflash_doctor.reporters.table import TableReporter
    from dflash_doctor.waivers import WaiversSection, waiver_summary

    waiver = Waiver("layer-offset", "known", until=datetime.date(2030, 1, 1))
    prs = (PrAncestry(40727, "layer-offset", "missing", "merge-commit", (), "not on main"),)
    ancestry = AncestryReport("/repo", "c" * 40, "version", "origin/main", prs)
    waived = WaiversSection("waivers.toml", ((ABSENT, waiver),), (), ())
    checked = CheckReport(
        TargetInfo("path", "/site"),
        Provenance(None, None, None, None),
        (fix(ABSENT),),
        "0",
        sections=(ancestry, waived),
    )
    data = checked.to_json()
    assert list(data)[-4:] == ["ancestry", "waivers", "strict", "exit_code"]
    assert data["ancestry"] == ancestry.to_json() and data["ancestry"]["prs"][0]["pr"] == 40727
    assert data["waivers"]["waived"] == [
        {"status": ABSENT, "id": "layer-offset", "target": None, "reason": "known", "until": "2030-01-01"}
    ]
    plain = TableReporter().render(checked, terminal=False).splitlines()
    assert plain[-2:] == [f"ancestry of {'c' * 40} in /repo:", "    #40727 (layer-offset): missing by merge-commit"]
    assert waiver_summary(checked) == [
        "1 fix waived by waivers.toml",
        "waived layer-offset (absent) until 2030-01-01: known",
    ]


def test_section_lines_are_clean_for_a_terminal():
    from dflash_doctor.ancestry.report import AncestryReport, PrAncestry

    hostile = AncestryReport(
        "/repo\x1b[2J", "c" * 40, None, "main", (PrAncestry(1, "fix\nfake", "missing", "m", (), ""),)
    )
    assert all("\x1b" not in line and "\n" not in line for line in hostile.lines())


def test_a_command_run_builds_only_its_own_module_and_the_help_lists_every_command(tmp_path):
    import subprocess
    import sys

    program = (
        "import sys\nfrom dflash_doctor.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('dflash_doctor.commands.')), file=sys.stderr)"
    )

    def run(*words: str) -> tuple[str, str]:
        done = subprocess.run(
            [sys.executable, "-c", program, *words], capture_output=True, text=True, cwd=tmp_path, check=True
        )
        return done.stdout, done.stderr.strip().splitlines()[-1]

    assert run("rules", "list")[1] == "['dflash_doctor.commands.rules']"
    assert (
        run("--debug", "restore", "--help")[1] == "['dflash_doctor.commands.options', 'dflash_doctor.commands.patch']"
    )
    page, _ = run("--help")
    from dflash_doctor.commands import MODULES

    assert all(f"  {name} " in page for name in MODULES)
