"""Drafter config lint: published configs, broken copies of them, and the CLI."""

import json
from pathlib import Path

import pytest
from conftest import run_cli

from dflash_doctor.draft.config import SPECULATORS, ZLAB, load_draft_config
from dflash_doctor.draft.lint import lint_report
from dflash_doctor.model import ToolError

DRAFTERS = Path(__file__).parent / "data" / "drafters"
QWEN36 = DRAFTERS / "qwen3.6-27b-dflash.json"
QWEN36_PARTIAL = DRAFTERS / "qwen3.6-27b-dflash.partial.json"
QWEN3_8B = DRAFTERS / "qwen3-8b-dflash-b16.json"
DFLASH2 = DRAFTERS / "qwen3.8-27b-dflash2.json"
MIMO = DRAFTERS / "mimo-v2.5-pro-dflash.json"
SPECULATORS_CONFIG = DRAFTERS / "speculators-qwen3-8b-dflash.json"


def codes(report, severity=None) -> set[str]:
    return {f.code for f in report.findings if severity is None or f.severity == severity}


def altered(tmp_path: Path, source: Path, change) -> Path:
    data = json.loads(source.read_text())
    change(data)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return path


# -- published configs ------------------------------------------------------------


@pytest.mark.parametrize(
    "path, fmt",
    [
        (QWEN36, ZLAB),
        (QWEN36_PARTIAL, ZLAB),
        (QWEN3_8B, ZLAB),
        (DFLASH2, ZLAB),
        (MIMO, ZLAB),
        (SPECULATORS_CONFIG, SPECULATORS),
    ],
)
def test_published_configs_have_no_errors(path, fmt):
    report = lint_report(path)
    assert report.config.format == fmt
    assert codes(report, "error") == set()
    assert report.exit_code == 0


def test_expected_aux_ids_per_format():
    assert load_draft_config(QWEN36).expected_aux_layer_ids() == (2, 17, 32, 47, 62)
    assert load_draft_config(SPECULATORS_CONFIG).expected_aux_layer_ids() == (2, 10, 18, 26, 34)


def test_expected_layers_follow_the_reference_convention():
    def summary(path):
        return [(layer["sliding_window"], layer["causal"]) for layer in load_draft_config(path).expected_layers()]

    assert summary(QWEN36) == [(2048, True)] * 4 + [(None, False)]
    assert summary(QWEN3_8B) == [(None, False)] * 5
    assert summary(DFLASH2) == [(2048, False)] * 5  # is_causal: false overrides
    assert summary(MIMO) == [(1024, False)] * 5  # use_swa without layer_types
    assert summary(SPECULATORS_CONFIG) == [(None, None)] * 5  # causality not stated


def test_block_size_gives_num_speculative_tokens():
    messages = {f.code: f.message for f in lint_report(QWEN36).findings}
    assert "num_speculative_tokens = 15" in messages["num-speculative-tokens"]
    messages = {f.code: f.message for f in lint_report(DFLASH2).findings}  # block_size inside dflash_config
    assert "num_speculative_tokens = 7" in messages["num-speculative-tokens"]


def test_transformers_caveat_when_use_sliding_window_is_not_true():
    assert "window-nulled" in codes(lint_report(QWEN36_PARTIAL), "warning")
    assert "window-nulled" not in codes(lint_report(QWEN36))  # the full config sets it true
    assert "window-nulled" not in codes(lint_report(MIMO))  # swa_window_size wins in vLLM


def test_causal_overrides_are_reported(tmp_path):
    assert "causal-override" in codes(lint_report(DFLASH2), "info")
    path = altered(tmp_path, QWEN3_8B, lambda d: d["dflash_config"].update(causal=True))
    finding = next(f for f in lint_report(path).findings if f.code == "causal-override")
    assert "dflash_config.causal is true" in finding.message


def test_speculators_tokens_must_match_block_size(tmp_path):
    path = altered(
        tmp_path,
        SPECULATORS_CONFIG,
        lambda d: d["speculators_config"]["proposal_methods"][0].update(speculative_tokens=16),
    )
    assert "spec-tokens-mismatch" in codes(lint_report(path), "warning")


# -- broken configs ------------------------------------------------------------------


def test_ids_out_of_the_targets_range(tmp_path):
    path = altered(tmp_path, QWEN36, lambda d: d["dflash_config"].update(target_layer_ids=[1, 16, 31, 46, 64]))
    report = lint_report(path)
    finding = next(f for f in report.findings if f.code == "ids-out-of-range")
    assert "[64]" in finding.message and "0..63" in finding.message
    assert report.exit_code == 1


def test_target_config_decides_the_range(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"text_config": {"num_hidden_layers": 36}}))
    drafter = altered(tmp_path, QWEN3_8B, lambda d: d.pop("num_target_layers"))
    assert "ids-range-unchecked" in codes(lint_report(drafter))
    assert codes(lint_report(drafter, target), "error") == set()
    # A drafter for a 64-layer target against a 36-layer target.
    report = lint_report(QWEN36, target)
    assert {"target-layers-mismatch", "ids-out-of-range"} <= codes(report, "error")


def test_layer_types_length_and_values(tmp_path):
    short = altered(tmp_path, QWEN36, lambda d: d["layer_types"].pop())
    assert "layer-types-length" in codes(lint_report(short), "error")
    wrong = altered(tmp_path, QWEN36, lambda d: d["layer_types"].__setitem__(0, "linear_attention"))
    assert "layer-types-invalid" in codes(lint_report(wrong), "error")


def test_sliding_layers_without_a_window(tmp_path):
    path = altered(tmp_path, QWEN36, lambda d: d.pop("sliding_window"))
    assert "window-missing" in codes(lint_report(path), "error")
    path = altered(tmp_path, MIMO, lambda d: (d.pop("sliding_window"), d["dflash_config"].pop("swa_window_size")))
    assert "window-missing" in codes(lint_report(path), "error")


@pytest.mark.parametrize(
    "change, code, severity",
    [
        (lambda d: d["dflash_config"].pop("mask_token_id"), "mask-missing", "error"),
        (lambda d: (d.pop("block_size"), d["dflash_config"].pop("block_size")), "block-missing", "warning"),
        (lambda d: d.update(block_size=16), "block-conflict", "error"),
        (lambda d: d.pop("num_hidden_layers"), "missing-key", "error"),
        (lambda d: d.update(num_hidden_layers=10**9), "missing-key", "error"),
        (lambda d: d.pop("dflash_config"), "format", "error"),
        (lambda d: d["dflash_config"].update(target_layer_ids="1,16"), "ids-invalid", "error"),
    ],
)
def test_missing_and_conflicting_keys(tmp_path, change, code, severity):
    path = altered(tmp_path, MIMO, change)
    assert code in codes(lint_report(path), severity)


def test_unreadable_input_is_a_tool_error(tmp_path):
    with pytest.raises(ToolError, match="has no config.json"):
        load_draft_config(tmp_path)
    (tmp_path / "config.json").write_text('{"dflash_config": {"target_layer_ids": [1, 2,]}}')
    with pytest.raises(ToolError, match="not valid JSON.*line 1"):
        load_draft_config(tmp_path)
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(ToolError, match="not an object"):
        load_draft_config(tmp_path / "config.json")
    (tmp_path / "config.json").write_text("[" * 200_000)
    with pytest.raises(ToolError, match="nested too deeply"):
        load_draft_config(tmp_path / "config.json")


# -- the command -----------------------------------------------------------------------


def test_config_command_exit_codes_and_json(tmp_path):
    proc = run_cli("config", str(QWEN36), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)
    assert document["schema"] == "dflash-doctor/config/v1"
    assert document["draft"]["format"] == "z-lab" and document["exit_code"] == 0
    broken = altered(tmp_path, QWEN36, lambda d: d["layer_types"].pop())
    proc = run_cli("config", str(broken))
    assert proc.returncode == 1
    assert "layer-types-length" in proc.stdout


def test_config_command_bad_input_is_one_line_exit_3(tmp_path):
    (tmp_path / "model").mkdir()
    for argument in (str(tmp_path / "model"), str(tmp_path / "missing.json")):
        proc = run_cli("config", argument)
        assert proc.returncode == 3
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("dflash-doctor: error:")
        assert "Traceback" not in proc.stderr
    (tmp_path / "model" / "config.json").write_text("{not json")
    proc = run_cli("config", str(tmp_path / "model"))
    assert proc.returncode == 3 and "not valid JSON" in proc.stderr


def test_config_command_writes_output_atomically(tmp_path):
    out = tmp_path / "lint.json"
    proc = run_cli("config", str(MIMO), "--format", "json", "--output", str(out))
    assert proc.returncode == 0 and proc.stdout == ""
    assert json.loads(out.read_text())["draft"]["path"].endswith("mimo-v2.5-pro-dflash.json")
    assert [p.name for p in tmp_path.iterdir()] == ["lint.json"]
