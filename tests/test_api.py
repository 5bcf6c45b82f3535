"""dflash_doctor.api: the CLI's commands as functions of typed requests, on real trees.
What a script gets from the API is what the CLI reports, and only a writing call writes."""

import hashlib
import json
from pathlib import Path

import pytest
from conftest import run_cli

from dflash_doctor import api
from dflash_doctor.model import ToolError

pytestmark = pytest.mark.release


def _digests(tree: Path) -> dict[str, str]:
    return {str(p.relative_to(tree)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(tree.rglob("*.py"))}


def test_check_through_the_api_is_what_the_cli_reports(mini_tree, monkeypatch):
    monkeypatch.setenv("DFLASH_DOCTOR_NO_CACHE", "1")
    tree = mini_tree("0.22.0")
    result = api.check(api.CheckRequest(api.TargetSpec(path=tree)))
    assert not result.fleet and len(result.reports) == 1
    proc = run_cli("check", "--path", str(tree), "--format", "json")
    cli = json.loads(proc.stdout)
    assert result.reports[0].to_json()["fixes"] == cli["fixes"]
    assert {fix.id: fix.status for fix in result.reports[0].fixes} == {
        "layer-offset": "present",
        "swa-config": "absent",
        "cache-drop": "absent",
    }
    assert result.exit_code == proc.returncode == 1
    strict = api.check(api.CheckRequest(api.TargetSpec(path=tree), only=("layer-offset",)))
    assert [fix.id for fix in strict.reports[0].fixes] == ["layer-offset"] and strict.exit_code == 0


def test_a_patch_is_planned_then_applied_and_restored_byte_for_byte(mini_tree, monkeypatch):
    monkeypatch.setenv("DFLASH_DOCTOR_NO_CACHE", "1")
    tree = mini_tree("0.20.1")
    before = _digests(tree)
    request = api.PatchRequest(api.TargetSpec(path=tree), only=("layer-offset",))
    with api.patching(request, dry_run=True) as session:
        assert [change.file for change in session.plan.changes] and session.dry_run_code == 0
        with pytest.raises(ToolError, match="a dry run writes nothing"):
            session.apply()
    assert _digests(tree) == before  # planning wrote nothing
    with api.patching(request) as session:
        session.apply()
        after = session.recheck()
    assert [(fix.id, fix.status) for fix in after.fixes] == [("layer-offset", "present")] and after.exit_code == 0
    assert _digests(tree) != before
    shown = []
    result = api.restore(request, lambda plan, location: shown.append((plan, location)))
    assert shown and shown[0][1] == str(tree) and result.report is not None
    assert [(fix.id, fix.status) for fix in result.report.fixes] == [("layer-offset", "absent")]
    assert _digests(tree) == before


def test_refusals_are_tool_errors_before_anything_is_read(tmp_path):
    marker = tmp_path / "never"
    with pytest.raises(ToolError, match="not both"):
        api.check(api.CheckRequest(api.TargetSpec(path=marker, hosts=("example.invalid",))))
    with pytest.raises(ToolError, match="download cache"):
        with api.patching(api.PatchRequest(api.TargetSpec(release="0.20.1"))):
            pass
    with pytest.raises(ToolError, match="cannot be patched in place"):
        api.restore(api.PatchRequest(api.TargetSpec(images=("oci:" + str(marker),))))
    assert not marker.exists()
