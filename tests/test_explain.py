"""What each verdict says (issue 13): headlines per verdict from the rule files,
reasons in words, partial naming the configurations, remedies by verdict and
cause, and the --draft-config gate for drafters a defect cannot reach. All on
real release trees and real drafter configs."""

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from conftest import DEMO_RULE_PREAMBLE, ProbeAnswerOf, check_json, run_cli
from dflash_doctor.cache import structure_fixes
from dflash_doctor.structure.forms import MISSING_CODE, UNKNOWN_CODE, UNREADABLE
from dflash_doctor.model import ToolError
from dflash_doctor.rulefile import load_rule, load_rules
from dflash_doctor.targets.path import PathTarget

REPO = Path(__file__).resolve().parent.parent
DRAFTERS = Path(__file__).resolve().parent / "data" / "drafters"
ALL_FULL = DRAFTERS / "qwen3-8b-dflash-b16.json"  # z-lab Qwen3-8B: every layer full attention
SLIDING = DRAFTERS / "qwen3.8-27b-dflash2.json"  # every layer sliding (2048), non-causal
SPECULATORS = DRAFTERS / "speculators-qwen3-8b-dflash.json"  # ids are capture ids already
CHECK_SCHEMA = json.loads((REPO / "schemas" / "check-v2.schema.json").read_text())
VERDICTS = ("present", "absent", "partial", "not-applicable", "unknown")


def fixes_of(report: dict) -> dict[str, dict]:
    jsonschema.Draft202012Validator(CHECK_SCHEMA).validate(report)
    return {fix["id"]: fix for fix in report["fixes"]}


# --- 1. headlines: data in the rule files, validated, shown ---------------------------------


def test_every_rule_has_a_headline_per_verdict_distinct_from_its_title():
    for rule in load_rules():
        headlines = dict(rule.headlines)
        assert tuple(headlines) == VERDICTS, rule.id
        assert len(set(headlines.values())) == len(VERDICTS), rule.id
        assert rule.title not in (headlines["absent"], headlines["unknown"]), rule.id


def test_a_rule_without_a_headline_for_a_verdict_is_refused(tmp_path):
    text = (
        "id = 'demo'\ntitle = 't'\n"
        + DEMO_RULE_PREAMBLE.replace('partial = "pa"\n', "")
        + """
[[anchors]]
id = "site"
file = "vllm/x.py"
symbol = "f"
[[forms]]
id = "good"
verdict = "present"
description = "the good form"
anchors = ["site"]
patterns = ["good()"]
"""
    )
    path = tmp_path / "demo.toml"
    path.write_text(text)
    with pytest.raises(ToolError, match="headlines: missing partial"):
        load_rule(path)
    path.write_text(text.replace('unknown = "u"', 'unknown = "u"\nmaybe = "m"\npartial = "pa"'))
    with pytest.raises(ToolError, match="unknown key maybe"):
        load_rule(path)
    path.write_text(
        text.replace('unknown = "u"', 'unknown = "u"\npartial = "pa"').replace('description = "the good form"\n', "")
    )
    with pytest.raises(ToolError, match="description must be a non-empty sentence"):
        load_rule(path)


def test_rules_show_and_the_fix_pages_give_each_verdicts_headline_and_remedy():
    for rule in load_rules():
        shown = run_cli("rules", "show", rule.id, "--engine", rule.engine)
        page = (REPO / "docs" / "fixes" / rule.page).read_text()
        for verdict, headline in rule.headlines:
            assert f"| {verdict} | {headline} |" in shown.stdout
            assert f"| {verdict} | {headline} |" in page
        assert f"| not-applicable | {dict(rule.headlines)['not-applicable']} | {rule.applies.remedy} |" in page


# --- 2-3. reasons in words; partial names what works and what fails --------------------------


@pytest.mark.release
def test_0_30_cache_drop_partial_names_the_opt_out_in_words():
    code, report = check_json("--release", "0.30.0", "--only", "cache-drop")
    fix = fixes_of(report)["cache-drop"]
    assert fix["status"] == "partial" and code == 1
    assert fix["headline"] == (
        "DFlash still drops the last prefix-cache block in some configurations "
        "(e.g. unless disable_eagle_block_drop is set)."
    )
    assert fix["title"] == "DFlash is exempt from EAGLE's prefix-cache block drop"
    assert fix["reason"].startswith(
        "fails for z-lab drafters with full attention only by default: the block-drop flag handed"
    )
    assert "works for z-lab drafters with full attention only with disable_eagle_block_drop set" in fix["reason"]
    assert fix["remedy_kind"] == "upgrade"
    assert fix["remedy"].startswith("Upgrade to vLLM 0.33.0") and '"disable_eagle_block_drop": true' in fix["remedy"]
    # machines keep the form ids in the evidence and the raw answer; people get sentences
    assert "opt-out-flag" in {item["form"] for item in fix["evidence"]}
    assert "opt-out-flag" not in fix["reason"] and "zlab-full" not in fix["reason"]
    assert fix["behaviour"]["works"] == ["zlab-full (disable_eagle_block_drop)"]


@pytest.mark.release
def test_0_25_swa_config_partial_says_mixed_drafters_are_refused():
    _, report = check_json("--release", "0.25.0", "--only", "swa-config")
    fix = fixes_of(report)["swa-config"]
    assert fix["status"] == "partial"
    assert fix["reason"].startswith("fails for z-lab drafters mixing sliding and full layers: no runner accepts it")
    assert "NotImplementedError" in fix["reason"]
    works = fix["reason"].split("; works for ", 1)[1]
    assert "drafters with only sliding, non-causal layers on the V1 and V2 runners" in works
    assert "MiMo drafters with a dflash_config sliding window" in works


@pytest.mark.release
def test_a_structure_decided_absent_reads_the_forms_sentence(release):
    """What the code's forms alone say (the engine, as where behaviour cannot run):
    the reason for absent is the deciding forms' sentences, not their ids."""
    rules = tuple(rule for rule in load_rules() if rule.id == "cache-drop" and rule.engine == "vllm")
    tree = PathTarget(release("0.24.0")).resolve().tree
    (fix,) = structure_fixes(tree, rules)
    assert fix.status == "absent"
    assert fix.reason == (
        "KV cache manager told to drop for every use_eagle() method, DFlash included; "
        "hybrid Mamba chunking backs off a block for every use_eagle() method, DFlash included"
    )
    assert fix.headline == "DFlash still drops the last prefix-cache block on every turn."


# --- 5. remedies by verdict and cause ----------------------------------------------------------


@pytest.mark.release
def test_0_19_without_dflash_gets_one_remedy_install_dflash():
    code, report = check_json("--release", "0.19.0")
    fixes = fixes_of(report)
    assert code == 1 and {fix["status"] for fix in fixes.values()} == {"not-applicable"}
    for fix in fixes.values():
        assert (
            fix["remedy"] == "Install a vLLM release with DFlash (0.20.0 or later); no fix of DFlash applies before it."
        )
        assert fix["remedy_kind"] == "install" and fix["headline"].startswith("This vLLM has no DFlash")
        assert "Upgrade" not in fix["remedy"] and "eagle_aux_hidden_state_layer_ids" not in fix["remedy"]
    table = run_cli("check", "--release", "0.19.0").stdout
    assert "eagle_aux_hidden_state_layer_ids" not in table and "Upgrade to" not in table


@pytest.mark.release
def test_a_file_that_does_not_parse_is_unknown_with_what_to_do(mini_tree):
    tree = mini_tree("0.33.0")
    with open(tree / "vllm/v1/core/sched/scheduler.py", "a") as handle:
        handle.write("\ndef broken(:\n")
    code, report = check_json("--path", str(tree))
    fix = fixes_of(report)["cache-drop"]
    assert code == 2 and fix["status"] == "unknown" and fix["remedy_kind"] == "investigate"
    assert fix["headline"] == "Could not tell whether DFlash still drops the last prefix-cache block."
    assert "scheduler.py does not parse" in fix["reason"]
    assert "Upgrade" not in fix["remedy"] and "0.33.0" not in fix["remedy"]
    assert fix["remedy"] == UNREADABLE.format(engine="vLLM")


@pytest.mark.release
def test_code_in_an_unknown_form_asks_for_a_look_not_an_upgrade(mini_tree):
    """Structure alone (the engine): the scheduler hands the KV cache manager a drop flag
    in a form no rule knows; unknown, and the remedy says how to get an answer."""

    tree = mini_tree("0.33.0")
    scheduler = tree / "vllm/v1/core/sched/scheduler.py"
    text = scheduler.read_text()
    assert text.count("use_eagle=self.use_eagle_block_drop,") == 1
    scheduler.write_text(text.replace("use_eagle=self.use_eagle_block_drop,", "use_eagle=policy_table[self.method],"))
    rules = tuple(rule for rule in load_rules() if rule.id == "cache-drop" and rule.engine == "vllm")
    (fix,) = structure_fixes(PathTarget(tree).resolve().tree, rules)
    assert fix.status == "unknown" and "has a form this rule does not know" in fix.reason
    assert fix.remedy == UNKNOWN_CODE and "Upgrade" not in fix.remedy
    assert fix.headline == "Could not tell whether DFlash still drops the last prefix-cache block."


@pytest.mark.release
def test_a_required_definition_missing_says_it_was_not_found(mini_tree):
    """Structure alone: Scheduler.__init__ renamed away; unknown, and the remedy says the
    code was not found (there is no evidence to read by hand)."""
    tree = mini_tree("0.33.0")
    scheduler = tree / "vllm/v1/core/sched/scheduler.py"
    text = scheduler.read_text()
    assert text.count("    def __init__(") >= 1
    scheduler.write_text(text.replace("class Scheduler(", "class Scheduler0(", 1))
    rules = tuple(rule for rule in load_rules() if rule.id == "cache-drop" and rule.engine == "vllm")
    (fix,) = structure_fixes(PathTarget(tree).resolve().tree, rules)
    assert fix.status == "unknown" and "Scheduler.__init__ not found" in fix.reason
    assert fix.remedy == MISSING_CODE


@pytest.mark.release
def test_unknown_where_behaviour_cannot_run_says_where_to_run_it(mini_tree):
    """A tree from another machine (a probe answer): structure alone, and code in an
    unknown form; the remedy asks for a look and says where behaviour could answer."""
    from dflash_doctor.check import run_check

    tree = mini_tree("0.33.0")
    scheduler = tree / "vllm/v1/core/sched/scheduler.py"
    scheduler.write_text(
        scheduler.read_text().replace("use_eagle=self.use_eagle_block_drop,", "use_eagle=policy_table[self.method],")
    )
    rules = tuple(rule for rule in load_rules() if rule.id == "cache-drop" and rule.engine == "vllm")
    (fix,) = run_check(ProbeAnswerOf(tree), rules).fixes
    assert fix.status == "unknown" and fix.decided_by == "structure"
    assert fix.remedy.startswith(UNKNOWN_CODE) and "check --path on the machine or in the container" in fix.remedy
    assert "never run on this one" in fix.remedy and "Upgrade" not in fix.remedy


# --- 4. the --draft-config gate --------------------------------------------------------------


@pytest.mark.release
def test_all_full_drafter_on_0_24_is_not_affected_by_swa_config():
    code, report = check_json("--release", "0.24.0", "--draft-config", str(ALL_FULL))
    fixes = fixes_of(report)
    swa = fixes["swa-config"]
    assert swa["status"] == "absent"  # the tree's verdict stays
    assert swa["affects_drafter"] is False and "no sliding-window layers" in swa["affects_reason"]
    assert "z-lab drafters mixing sliding and full layers" in swa["reason"]  # the references' answer
    cache = fixes["cache-drop"]
    assert cache["status"] == "absent" and cache["affects_drafter"] is True
    assert code == 1  # cache-drop still fails the gate
    code, report = check_json("--release", "0.24.0", "--only", "swa-config", "--draft-config", str(ALL_FULL))
    assert fixes_of(report)["swa-config"]["status"] == "absent" and code == 0 and report["exit_code"] == 0
    code, report = check_json("--release", "0.24.0", "--only", "swa-config")
    assert code == 1 and fixes_of(report)["swa-config"]["affects_drafter"] is None


@pytest.mark.release
def test_sliding_drafter_on_0_24_is_affected_and_gates():
    code, report = check_json("--release", "0.24.0", "--only", "swa-config", "--draft-config", str(SLIDING))
    swa = fixes_of(report)["swa-config"]
    assert swa["status"] == "absent" and swa["affects_drafter"] is True and code == 1
    assert swa["reason"].startswith(
        f"fails for your drafter ({SLIDING.name}) on the V1 and V2 runners: the sliding window of layer 0"
    )


@pytest.mark.release
def test_speculators_drafter_is_not_affected_by_the_missing_shift_on_0_20_1():
    code, report = check_json("--release", "0.20.1", "--only", "layer-offset", "--draft-config", str(SPECULATORS))
    fix = fixes_of(report)["layer-offset"]
    assert fix["status"] == "absent" and fix["affects_drafter"] is False and code == 0
    assert "speculators format" in fix["affects_reason"]
    code, report = check_json("--release", "0.20.1", "--only", "layer-offset", "--draft-config", str(ALL_FULL))
    fix = fixes_of(report)["layer-offset"]
    assert fix["status"] == "absent" and fix["affects_drafter"] is True and code == 1


def _shift_speculators_ids_twice(tree: Path) -> None:
    """update_dflash (not update_dspark, which has the same line) hands on its ids shifted once more."""
    algos = tree / "vllm/transformers_utils/configs/speculators/algos.py"
    text = algos.read_text()
    line = 'pre_trained_config["eagle_aux_hidden_state_layer_ids"] = aux_layer_ids\n'
    start = text.index("def update_dflash(")
    at = text.index(line, start)
    assert at < text.index("\ndef ", start + 1)
    algos.write_text(
        text[:at] + line.replace("= aux_layer_ids", "= [i + 1 for i in aux_layer_ids]") + text[at + len(line) :]
    )


@pytest.mark.release
def test_behaviour_failing_the_drafter_overrules_its_config(mini_tree):
    """A 0.33.0 tree whose speculators translation shifts the ids again: the config says
    the missing shift cannot reach a speculators drafter, but running the tree's code
    shows this drafter fed the wrong layers, so the fix is affected and gates."""
    tree = mini_tree("0.33.0")
    _shift_speculators_ids_twice(tree)
    code, report = check_json("--path", str(tree), "--only", "layer-offset", "--draft-config", str(SPECULATORS))
    fix = fixes_of(report)["layer-offset"]
    assert fix["status"] in ("absent", "unknown") and code != 0
    assert fix["affects_drafter"] is True and "shows this drafter failing" in fix["affects_reason"]
    _, unedited = check_json(
        "--path", str(mini_tree("0.33.0", "unedited")), "--only", "layer-offset", "--draft-config", str(SPECULATORS)
    )
    assert fixes_of(unedited)["layer-offset"]["status"] == "present"
    assert fixes_of(unedited)["layer-offset"]["affects_drafter"] is False


# --- 6. other report formats use the headline ------------------------------------------------


@pytest.mark.release
def test_sarif_and_junit_messages_lead_with_the_headline(tmp_path):
    sarif, junit = tmp_path / "r.sarif", tmp_path / "j.xml"
    run_cli(
        "check",
        "--release",
        "0.30.0",
        "--only",
        "cache-drop",
        "--output",
        f"sarif={sarif}",
        "--output",
        f"junit={junit}",
    )
    (result,) = json.loads(sarif.read_text())["runs"][0]["results"]
    assert "DFlash still drops the last prefix-cache block in some configurations" in result["message"]["text"]
    assert (
        "works for z-lab drafters with full attention only with disable_eagle_block_drop set"
        in result["message"]["text"]
    )
    assert 'message="partial: DFlash still drops the last prefix-cache block' in junit.read_text()


@pytest.mark.release
def test_a_fix_that_cannot_reach_the_drafter_is_a_note_in_sarif_and_skipped_in_junit(tmp_path):
    sarif, junit = tmp_path / "r.sarif", tmp_path / "j.xml"
    run_cli(
        "check",
        "--release",
        "0.24.0",
        "--draft-config",
        str(ALL_FULL),
        "--output",
        f"sarif={sarif}",
        "--output",
        f"junit={junit}",
    )
    levels = {result["ruleId"]: result["level"] for result in json.loads(sarif.read_text())["runs"][0]["results"]}
    assert levels["swa-config"] == "note" and levels["cache-drop"] == "error"
    cases = {case.get("name"): case for case in ET.parse(junit).getroot().iter("testcase")}
    swa = next(case for name, case in cases.items() if "swa-config" in name)
    cache = next(case for name, case in cases.items() if "cache-drop" in name)
    assert swa.find("skipped") is not None and swa.find("failure") is None
    assert cache.find("failure") is not None


@pytest.mark.release
def test_without_behaviour_the_config_alone_never_exempts_a_fix(mini_tree, tmp_path):
    """Judged from a probe answer (structure only), a speculators drafter on a tree that
    shifts its ids twice: the config says the missing shift cannot reach it, but a defect
    of another shape can, and nothing ran the tree's code on it: the fix still gates."""
    tree = mini_tree("0.30.0")
    _shift_speculators_ids_twice(tree)
    script = tmp_path / "probe.py"
    script.write_text(run_cli("probe-script").stdout)
    answer = tmp_path / "node.probe"
    # -S: the collector puts PYTHONPATH and the site directories on sys.path itself, as on a host
    probed = subprocess.run(
        [sys.executable, "-I", "-S", str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(tree), "PATH": os.environ["PATH"]},
    )
    assert probed.returncode == 0, probed.stderr
    answer.write_text(probed.stdout)
    code, report = check_json("--from-probe", str(answer), "--only", "layer-offset", "--draft-config", str(SPECULATORS))
    fix = fixes_of(report)["layer-offset"]
    assert fix["decided_by"] == "structure" and fix["status"] in ("absent", "partial"), fix
    assert fix["affects_drafter"] is None and "could not be run" in fix["affects_reason"]
    assert code == 1


@pytest.mark.release
def test_sliding_layers_without_a_stated_window_are_not_exempt(tmp_path):
    """All layers sliding_attention, but neither sliding_window nor swa_window_size set:
    the config cannot say the defect misses it (the model class may default a window)."""
    data = json.loads(SLIDING.read_text())
    data.pop("sliding_window")
    data.get("dflash_config", {}).pop("swa_window_size", None)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(data))
    code, report = check_json("--release", "0.24.0", "--only", "swa-config", "--draft-config", str(config))
    swa = fixes_of(report)["swa-config"]
    assert swa["status"] == "absent" and swa["affects_drafter"] is not False and code == 1
