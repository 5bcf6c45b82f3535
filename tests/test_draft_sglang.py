"""``config --engine sglang`` and ``--launch-flags``: what SGLang reads of a drafter config
and of its launch flags, on the published configs (tests/data/drafters) and copies of them
broken one key at a time; the guess of tapped layers against SGLang's own function, read
from its wheels at test time."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest
from conftest import assert_error, run_cli

from dflash_doctor.draft.launch import read_launch_flags
from dflash_doctor.draft.lint import lint_report
from dflash_doctor.draft.sglang import guessed_ids
from dflash_doctor.model import ToolError

DRAFTERS = Path(__file__).parent / "data" / "drafters"
QWEN36 = DRAFTERS / "qwen3.6-27b-dflash.json"  # block 16, taps [1, 16, 31, 46, 61] of 64, sliding layers
QWEN3_8B = DRAFTERS / "qwen3-8b-dflash-b16.json"
DFLASH2 = DRAFTERS / "qwen3.8-27b-dflash2.json"  # taps [5, 19, 33, 47, 61] of 64: the count collision of #37475
MIMO = DRAFTERS / "mimo-v2.5-pro-dflash.json"  # taps the last layer (69 of 70), use_swa
SPECULATORS_CONFIG = DRAFTERS / "speculators-qwen3-8b-dflash.json"
GOOD_FLAGS = "--speculative-algorithm DFLASH --speculative-draft-model-path z-lab/Qwen3.6-27B-DFlash"


def findings(report) -> dict[str, tuple[str, str]]:
    return {f.code: (f.severity, f.message) for f in report.findings}


def altered(tmp_path: Path, source: Path, change, name: str = "config.json") -> Path:
    data = json.loads(source.read_text())
    change(data)
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def target(tmp_path: Path, layers: int, architecture: str = "Qwen3_5ForConditionalGeneration") -> Path:
    path = tmp_path / "target.json"
    path.write_text(json.dumps({"architectures": [architecture], "text_config": {"num_hidden_layers": layers}}))
    return path


def sglang(path: Path, target_config: Path | None = None, flags: str | None = None):
    return lint_report(path, target_config, "sglang", None if flags is None else read_launch_flags(flags))


# -- guessed ids (sglang issue #37475) --------------------------------------------


def test_the_guess_of_tapped_layers():
    assert guessed_ids(64, 5) == (1, 16, 31, 46, 61)  # the issue's own example for Qwen3.8-27B-DFlash2
    assert guessed_ids(36, 5) == (1, 9, 17, 25, 33)
    assert guessed_ids(40, 1) == (20,)
    assert guessed_ids(3, 2) is None  # SGLang refuses fewer than 4 target layers


def sglang_guess_functions() -> list[tuple[str, object]]:
    """``build_target_layer_ids`` of every SGLang wheel with DFlash in the user cache, compiled alone
    from its source."""
    from dflash_doctor.engines import SGLANG
    from dflash_doctor.targets import releases_dir

    found = []
    for tree in sorted(releases_dir(SGLANG).glob("*/sglang/srt/speculative/dflash_utils.py")):
        module = ast.parse(tree.read_text())
        node = next(n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "build_target_layer_ids")
        namespace: dict = {"List": list}
        exec(compile(ast.Module([node], []), str(tree), "exec"), namespace)
        found.append((tree.parents[3].name, namespace["build_target_layer_ids"]))
    return found


@pytest.mark.release
def test_the_guess_is_sglangs_own_in_every_release_cached():
    functions = sglang_guess_functions()
    assert {"0.5.11", "0.5.23"} <= {version for version, _ in functions}, functions
    for version, theirs in functions:
        for target_layers in range(1, 130):
            for draft_layers in range(1, 12):
                try:
                    expected = tuple(theirs(target_layers, draft_layers))
                except ValueError:
                    expected = None
                assert guessed_ids(target_layers, draft_layers) == expected, (version, target_layers, draft_layers)


def test_a_config_without_ids_is_warned_with_the_layers_sglang_will_tap(tmp_path):
    path = altered(tmp_path, DFLASH2, lambda d: d["dflash_config"].pop("target_layer_ids"))
    report = sglang(path, target(tmp_path, 64))
    severity, message = findings(report)["sglang-guessed-ids"]
    assert severity == "warning"
    assert "for a 64-layer target and 5 draft layers it taps [1, 16, 31, 46, 61]" in message and "#37475" in message
    without_target = findings(sglang(path))["sglang-guessed-ids"][1]
    assert "it taps [1, 16, 31, 46, 61]" in without_target  # num_target_layers 64 in the drafter config
    alone = altered(tmp_path, path, lambda d: d.pop("num_target_layers"), "alone.json")
    assert "give --target-config to see the layers it picks" in findings(sglang(alone))["sglang-guessed-ids"][1]
    assert "sglang-guessed-ids" not in findings(lint_report(path, target(tmp_path, 64)))  # vLLM reads no guess


def test_a_top_level_target_layer_ids_is_read_by_sglang(tmp_path):
    def move(data):
        data["target_layer_ids"] = data["dflash_config"].pop("target_layer_ids")

    assert "sglang-guessed-ids" not in findings(sglang(altered(tmp_path, DFLASH2, move)))


def test_speculators_ids_are_not_read_by_sglang():
    severity, message = findings(sglang(SPECULATORS_CONFIG))["sglang-guessed-ids"]
    assert severity == "warning" and "SGLang does not read speculators' aux_hidden_state_layer_ids" in message


# -- the last layer (sglang issue #32204) ---------------------------------------------


def test_a_tap_on_the_last_layer_fails(tmp_path):
    report = sglang(MIMO)
    severity, message = findings(report)["sglang-last-layer"]
    assert severity == "error" and report.exit_code == 1
    assert "(69): SGLang captures before layer id + 1 = 70, which no 70-layer target has" in message
    assert "#32204" in message
    assert lint_report(MIMO).exit_code == 0  # vLLM captures the final output: right there
    mimo_target = target(tmp_path, 70, "MiMoV2FlashForCausalLM")
    assert findings(sglang(MIMO, mimo_target))["sglang-last-layer"][0] == "warning"  # mimo_v2.py, from 0.5.20


def test_published_configs_have_no_sglang_error():
    for path in (QWEN36, QWEN3_8B, DFLASH2):
        report = sglang(path, flags=GOOD_FLAGS)
        assert [f.code for f in report.findings if f.severity == "error"] == [], path
        codes = {f.code for f in report.findings}
        assert "num-speculative-tokens" not in codes and "format" in codes  # said in SGLang's terms


# -- mask token and windows ---------------------------------------------------------------


def test_a_mask_token_id_only_at_the_top_level(tmp_path):
    def lift(data):
        data["mask_token_id"] = data["dflash_config"].pop("mask_token_id")

    path = altered(tmp_path, QWEN36, lift)
    severity, message = findings(sglang(path))["sglang-mask-top-level"]
    assert severity == "warning"
    assert "from 0.5.18 on; 0.5.11-0.5.17 read it only under dflash_config" in message and '"<|MASK|>"' in message
    assert "sglang-mask-top-level" not in findings(sglang(QWEN36))


def test_mimo_swa_keys_are_never_read_by_sglang():
    severity, message = findings(sglang(MIMO))["sglang-swa-unread"]
    assert severity == "warning" and "without its window" in message
    assert "sglang-swa-unread" not in findings(sglang(QWEN36))  # layer_types and sliding_window: read from 0.5.14
    assert "sglang-windows" in findings(sglang(QWEN36))


# -- launch flags -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags, code, severity, words",
    [
        ("--speculative-draft-model-path d", "sglang-algorithm", "error", "--speculative-algorithm is not given"),
        ("--speculative-algorithm EAGLE3 --speculative-draft-model d", "sglang-algorithm", "error", 'is "EAGLE3"'),
        ("--speculative-algorithm DFLASH", "sglang-draft-model", "error", "no --speculative-draft-model-path"),
        (
            GOOD_FLAGS + " --speculative-num-draft-tokens 15",
            "sglang-draft-tokens",
            "warning",
            "15 (block size - 1: vLLM's num_speculative_tokens): for SGLang the flag IS the block size, here 16",
        ),
        (
            GOOD_FLAGS + " --speculative-num-draft-tokens=8",
            "sglang-draft-tokens",
            "warning",
            "capping the acceptance length at 8",
        ),
        (
            GOOD_FLAGS + " --speculative-num-draft-tokens 17",
            "sglang-draft-tokens",
            "error",
            "past the drafter's block size 16",
        ),
        (
            GOOD_FLAGS + " --speculative-dflash-block-size 17",
            "sglang-draft-tokens",
            "error",
            "past the drafter's block",
        ),
        (
            GOOD_FLAGS + " --speculative-num-draft-tokens 16 --speculative-dflash-block-size 8",
            "sglang-draft-tokens",
            "error",
            "differ: SGLang refuses to start",
        ),
        (
            GOOD_FLAGS + " --speculative-num-draft-tokens sixteen",
            "sglang-draft-tokens",
            "error",
            "not a number of tokens",
        ),
        (GOOD_FLAGS, "sglang-draft-tokens", "info", "SGLang reads block_size from the drafter"),
        (
            GOOD_FLAGS + " --speculative-draft-window-size 2048",
            "sglang-window-flag",
            "warning",
            "not the drafter's per-layer",
        ),
        (GOOD_FLAGS + " --speculative-num-steps 3", "sglang-steps", "info", "DFLASH overrides it to 1"),
    ],
)
def test_launch_flags_against_the_drafter(flags, code, severity, words):
    found = findings(sglang(QWEN36, flags=flags))
    assert code in found, found
    assert found[code][0] == severity and words in found[code][1], found[code]


def test_the_right_flags_say_nothing_of_the_flags():
    found = findings(sglang(QWEN36, flags=GOOD_FLAGS + " --speculative-num-draft-tokens 16"))
    assert not {"sglang-algorithm", "sglang-draft-model", "sglang-draft-tokens"} & set(found)


# -- the command ---------------------------------------------------------------------------------


def test_sglang_flags_choose_the_engine_and_json_carries_them(tmp_path):
    script = tmp_path / "serve.sh"
    script.write_text(
        "#!/bin/sh\n# serve the 27B with its drafter\n"
        "python -m sglang.launch_server --model-path Qwen/Qwen3.6-27B \\\n"
        "    --speculative-algorithm DFLASH \\\n"
        "    --speculative-draft-model-path 'z-lab/Qwen3.6-27B-DFlash' \\\n"
        "    --speculative-num-draft-tokens 15  # as for vLLM\n"
    )
    proc = run_cli("config", str(QWEN36), "--launch-flags", f"@{script}", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    draft = json.loads(proc.stdout)["draft"]
    assert draft["engine"] == "sglang"
    assert draft["launch_flags"]["source"] == str(script)
    assert {"flag": "--speculative-num-draft-tokens", "value": "15"} in draft["launch_flags"]["flags"]
    codes = {finding["code"]: finding["severity"] for finding in draft["findings"]}
    assert codes["sglang-draft-tokens"] == "warning"
    text = run_cli("config", str(QWEN36), "--launch-flags", f"@{script}")
    assert text.returncode == 0 and "for SGLang, with launch flags from" in text.stdout.splitlines()[0]
    plain = json.loads(run_cli("config", str(QWEN36), "--format", "json").stdout)["draft"]
    assert plain["engine"] == "vllm" and plain["launch_flags"] is None


def test_engine_sglang_without_flags_and_the_exit_code(tmp_path):
    assert run_cli("config", str(MIMO), "--engine", "sglang").returncode == 1
    assert run_cli("config", str(MIMO)).returncode == 0


@pytest.mark.parametrize(
    "args, fragment",
    [
        (
            ("--launch-flags", '--speculative-config \'{"method": "dflash"}\''),
            "--launch-flags: no speculative flags of sglang",
        ),
        (("--engine", "vllm", "--launch-flags", GOOD_FLAGS), "only the launch flags of sglang are linted, not vllm's"),
        (("--engine", "trtllm"), "--engine: no engine called 'trtllm'"),
        (("--launch-flags", "--speculative-algorithm 'DFLASH"), "cannot split the flags as a shell would"),
        (("--launch-flags", "@/nonexistent/serve.sh"), "launch flags file /nonexistent/serve.sh"),
    ],
)
def test_bad_launch_flags_are_one_line_exit_3(args, fragment):
    assert_error(run_cli("config", str(QWEN36), *args), fragment)


def test_hostile_launch_flag_files_are_refused_before_reading_them_whole(tmp_path):
    """A link to /dev/zero, a FIFO nobody writes, 2 MiB, words past the cap, not UTF-8: one line, nothing written."""
    zero = tmp_path / "zero.sh"
    zero.symlink_to("/dev/zero")
    fifo = tmp_path / "fifo.sh"
    os.mkfifo(fifo)
    large = tmp_path / "large.sh"
    large.write_text("--x " * (600 * 1024))
    words = tmp_path / "words.sh"
    words.write_text("a " * 10_001)
    binary = tmp_path / "binary.sh"
    binary.write_bytes(b"--speculative-algorithm \xff\xfe")
    out = tmp_path / "lint.json"
    for path, fragment in (
        (zero, "launch flags file"),
        (fifo, "launch flags file"),
        (large, "launch flags file"),
        (words, "more than 10000 words"),
        (binary, "is not UTF-8 text"),
    ):
        assert_error(run_cli("config", str(QWEN36), "--launch-flags", f"@{path}", "--output", str(out)), fragment)
    assert not out.exists()


def test_read_launch_flags_pairs():
    flags = read_launch_flags("--a 1 --b=2 --c --d -5 -- --e")
    assert flags.flags == (("--a", "1"), ("--b", "2"), ("--c", None), ("--d", "-5"), ("--e", None))
    assert flags.value("--a", "--b") == "2" and flags.given("--c") and not flags.given("--z")
    with pytest.raises(ToolError):
        read_launch_flags('--a "unclosed')


@pytest.mark.release
def test_check_of_an_sglang_tree_lints_the_drafter_for_sglang():
    proc = run_cli(
        "check", "--release", "0.5.11", "--engine", "sglang", "--draft-config", str(MIMO), "--format", "json"
    )
    assert proc.returncode in (0, 1, 2), proc.stderr
    draft = json.loads(proc.stdout)["draft"]
    assert draft["engine"] == "sglang"
    assert {"sglang-last-layer": "error", "sglang-swa-unread": "warning"}.items() <= {
        finding["code"]: finding["severity"] for finding in draft["findings"]
    }.items()
