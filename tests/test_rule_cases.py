"""`rules test`: every shipped rule's snippets pass, and the harness catches bad rules."""

from pathlib import Path

import pytest

from dflash_doctor.model import ToolError
from dflash_doctor.rulefile import load_rule, load_rules
from dflash_doctor.rules import rules_dir
from dflash_doctor.rulestest import check_rule, run_rule_cases

from conftest import DEMO_RULE_PREAMBLE, run_cli

RULE_HEADER = (
    """
id = "demo"
title = "demo"
"""
    + DEMO_RULE_PREAMBLE
    + """[[anchors]]
id = "site"
file = "vllm/x.py"
symbol = "f"
[[forms]]
id = "good"
description = "the good form"
verdict = "present"
anchors = ["site"]
patterns = ["good()"]
[[forms]]
id = "bad"
description = "the bad form"
verdict = "absent"
anchors = ["site"]
patterns = ["bad()"]
"""
)


def test_every_shipped_rule_case_passes():
    results = list(run_rule_cases())
    assert results, "no rule cases ran"
    assert [line for line, ok in results if not ok] == []


def test_shipped_rules_are_the_fixes_each_with_cases():
    rules = load_rules()
    assert {(rule.engine, rule.id) for rule in rules} == {
        ("vllm", "layer-offset"),
        ("vllm", "swa-config"),
        ("vllm", "cache-drop"),
        ("sglang", "swa-config"),
        ("sglang", "rope-base"),
        ("sglang", "cache-drop"),
        ("sglang", "layer-offset"),
    }
    assert all(len(rule.cases) >= 4 for rule in rules)


def test_rule_without_cases_fails(tmp_path: Path):
    path = tmp_path / "demo.toml"
    path.write_text(RULE_HEADER)
    results = list(check_rule(load_rule(path)))
    assert results == [("demo: the rule has no cases", False)]


def test_form_without_a_case_fails(tmp_path: Path):
    path = tmp_path / "demo.toml"
    path.write_text(
        RULE_HEADER + '[[cases]]\nname = "g"\nanchor = "site"\nexpect = ["good"]\ncode = "def f():\\n    good()\\n"\n'
    )
    failures = [line for line, ok in check_rule(load_rule(path)) if not ok]
    assert "demo: form bad has no case that matches it" in failures


def test_wrong_expectation_fails(tmp_path: Path):
    path = tmp_path / "demo.toml"
    path.write_text(
        RULE_HEADER + '[[cases]]\nname = "g"\nanchor = "site"\nexpect = ["bad"]\ncode = "def f():\\n    good()\\n"\n'
    )
    failures = [line for line, ok in check_rule(load_rule(path)) if not ok]
    assert any("expected ['bad'], got ['good']" in line for line in failures)


@pytest.mark.parametrize(
    "mutation, message",
    [
        (lambda t: t.replace('verdict = "absent"', 'verdict = "maybe"'), "verdict must be one of"),
        (
            lambda t: t.replace(
                'anchors = ["site"]\npatterns = ["bad()"]', 'anchors = ["nowhere"]\npatterns = ["bad()"]'
            ),
            "anchors must name declared anchors",
        ),
        (lambda t: t + "[[[", "cannot load rule"),
    ],
)
def test_malformed_rule_is_a_clear_error(tmp_path: Path, mutation, message):
    path = tmp_path / "demo.toml"
    path.write_text(mutation(RULE_HEADER))
    with pytest.raises(ToolError, match=message):
        load_rule(path)


def test_pattern_that_is_not_python_fails_rules_test(tmp_path: Path):
    path = tmp_path / "demo.toml"
    path.write_text(RULE_HEADER.replace('patterns = ["bad()"]', 'patterns = ["bad("]'))
    failures = [line for line, ok in check_rule(load_rule(path)) if not ok]
    assert len(failures) == 1 and "form 'bad'" in failures[0] and "is not Python" in failures[0]


def test_rules_cli_list_show_test():
    listed = run_cli("rules", "list")
    assert listed.returncode == 0
    assert [line.split()[:2] for line in listed.stdout.splitlines()] == [
        ["cache-drop", "vllm"],
        ["layer-offset", "vllm"],
        ["cache-drop", "sglang"],
        ["layer-offset", "sglang"],
        ["rope-base", "sglang"],
        ["swa-config", "sglang"],
        ["swa-config", "vllm"],
    ]
    shown = run_cli("rules", "show", "layer-offset")
    assert shown.returncode == 0 and "#40727" in shown.stdout and "raw-dflash-ids" in shown.stdout
    tested = run_cli("rules", "test")
    assert tested.returncode == 0 and "FAIL" not in tested.stdout
    assert run_cli("rules", "show", "nope").returncode == 3


def test_fix_pages_in_docs_are_generated_from_the_rules():
    from dflash_doctor.docs import rule_markdown

    docs = Path(__file__).resolve().parent.parent / "docs" / "fixes"
    for rule in load_rules():
        assert (docs / rule.page).read_text() == rule_markdown(rule), f"regenerate docs/fixes/{rule.page}"


def test_the_extra_rules_cases_hold():
    """Rules shipped beside the default ones, loaded with $DFLASH_DOCTOR_RULES (rules/extra/)."""
    extra = sorted((Path(__file__).resolve().parent.parent / "rules" / "extra").glob("*.toml"))
    assert extra, "no extra rule shipped"
    for path in extra:
        results = list(check_rule(load_rule(path)))
        assert results and [line for line, ok in results if not ok] == [], path.name


@pytest.mark.parametrize(
    "id_map, message",
    [
        ('{ function = "spec.py", target = "t", draft = "d", ids = "i" }', "function must be file.py:function"),
        ('{ function = "spec.py:f", target = "t-c", draft = "d", ids = "i" }', "must be the function's keyword names"),
        ('{ function = "spec.py:f", target = "t", draft = "d" }', "missing key 'ids'"),
        ('{ function = "spec.py:f", target = "t", draft = "d", ids = "i", order = 1 }', "unknown key order"),
        ('"spec.py:f"', "must be a table of function, target, draft and ids"),
    ],
)
def test_a_malformed_id_map_is_a_clear_error(tmp_path: Path, id_map: str, message: str):
    """The worker's id map a capture table names (SGLang's layer-offset) is checked like the rest."""
    text = (rules_dir() / "sglang-layer-offset.toml").read_text()
    start = text.index("\nid_map = ") + 1
    path = tmp_path / "sglang-layer-offset.toml"
    path.write_text(text[:start] + f"id_map = {id_map}" + text[text.index("\n", start) :])
    with pytest.raises(ToolError, match=message):
        load_rule(path)
