"""Known answers on real vLLM wheels, downloaded once into the user cache."""

from pathlib import Path

import pytest

from conftest import check_json, statuses

KNOWN = {
    "0.19.0": {"layer-offset": "not-applicable", "swa-config": "not-applicable", "cache-drop": "not-applicable"},
    "0.20.1": {"layer-offset": "absent", "swa-config": "absent", "cache-drop": "absent"},
    "0.22.0": {"layer-offset": "present", "swa-config": "absent", "cache-drop": "absent"},
    "0.25.0": {"layer-offset": "present", "swa-config": "partial", "cache-drop": "absent"},
    "0.30.0": {"layer-offset": "present", "swa-config": "present", "cache-drop": "partial"},
    "0.33.0": {"layer-offset": "present", "swa-config": "present", "cache-drop": "present"},
}
EXIT = {"0.19.0": 1, "0.20.1": 1, "0.22.0": 1, "0.25.0": 1, "0.30.0": 1, "0.33.0": 0}


@pytest.mark.release
@pytest.mark.parametrize("version", sorted(KNOWN))
def test_release_verdicts(version, release):
    code, report = check_json("--release", version)
    assert statuses(report) == KNOWN[version]
    assert code == EXIT[version]
    assert report["schema"] == "dflash-doctor/check/v2"
    assert report["target"]["kind"] == "release"
    assert report["engine"]["version"] == version
    assert report["engine"]["modified_files"] == []
    root = Path(report["target"]["location"])
    for fix in report["fixes"]:
        assert fix["evidence"], fix
        for item in fix["evidence"]:
            assert (root / item["file"]).is_file()
            assert item["line"] >= 1 and item["symbol"] and item["form"]


@pytest.mark.release
def test_evidence_lines_point_at_the_code_that_decided(release):
    code, report = check_json("--release", "0.20.1", "--only", "layer-offset")
    root = Path(report["target"]["location"])
    raw = [e for e in report["fixes"][0]["evidence"] if e["form"] == "raw-dflash-ids"]
    assert len(raw) == 1
    line = (root / raw[0]["file"]).read_text().splitlines()[raw[0]["line"] - 1]
    assert 'dflash_config.get("target_layer_ids")' in line
    assert raw[0]["symbol"] == "GPUModelRunner._get_eagle3_aux_layers_from_config"


@pytest.mark.release
def test_provenance_reads_commit_from_version_file(release):
    _, report = check_json("--release", "0.33.0")
    assert report["engine"]["commit"] == "4ba787ec9"
    assert report["engine"]["commit_source"] == "_version.py"


@pytest.mark.release
def test_only_selects_fixes_and_exit_code_follows(release):
    code, report = check_json("--release", "0.22.0", "--only", "layer-offset")
    assert statuses(report) == {"layer-offset": "present"}
    assert code == 0
    assert report["fixes"][0]["prs"] == [40727, 40898]
