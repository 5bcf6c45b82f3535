"""Behaviour decides, structure explains: the decision on observations written
here, rule validation, and real 0.22.0/0.33.0 trees edited the way forks do."""

from pathlib import Path

import pytest

from conftest import ProbeAnswerOf

from dflash_doctor.behaviour.construct import _signature
from dflash_doctor.behaviour.decide import decide
from dflash_doctor.behaviour.definitions import ExtractError
from dflash_doctor.behaviour.observe import QUESTION_KINDS
from dflash_doctor.check import run_check
from dflash_doctor.model import Observation, ToolError
from dflash_doctor.rules import QUESTIONS, Behaviour, Construct
from dflash_doctor.rulefile import load_rule, load_rules
from dflash_doctor.source import DirectoryTree
from dflash_doctor.targets.path import PathTarget

RESOLVER = "vllm/v1/worker/gpu_model_runner.py"
SHIFT = (
    'layer_ids = [\n                    i + 1 for i in (dflash_config.get("target_layer_ids") or [])\n                ]'
)


def obs(config, runner, part, ok, setting="default", layer=None):
    return Observation(config, runner, setting, part, layer, 1, 1 if ok else 0, ok, "" if ok is not None else "why not")


def ask(chain=("resolver",), alternatives=("runner",)):
    return Behaviour("capture-ids", tuple(chain), tuple(alternatives), ("a", "b"), ("g",), ())


def configs(**links):
    """configs(a={"v1": (accepts, ok), ...}, ...) -> observations."""
    found = []
    for config, runners in links.items():
        for runner, (accepts, ok) in runners.items():
            found += [obs(config, runner, "runner-accepts", accepts), obs(config, runner, "resolver", ok)]
    return tuple(found)


def test_every_configuration_working_is_present_and_one_broken_link_is_absent():
    good = configs(a={"v1": (True, True)}, b={"v1": (True, True)}, g={"v1": (True, True)})
    assert decide(ask(), good, ("a", "b"), ("g",)).status == "present"
    broken = configs(a={"v1": (True, False)}, b={"v1": (True, False)}, g={"v1": (True, True)})
    answer = decide(ask(), broken, ("a", "b"), ("g",))
    assert answer.status == "absent" and "a on the V1 runner" in answer.reason


def test_alternatives_that_disagree_are_partial_and_say_which_work():
    mixed = configs(
        a={"v1": (True, True), "v2": (True, False)}, b={"v1": (True, True), "v2": (True, True)}, g={"v1": (True, True)}
    )
    answer = decide(ask(), mixed, ("a", "b"), ("g",))
    assert answer.status == "partial"
    assert "a on the V2 runner" in answer.fails[0].label() and "b on the V2 runner" in [r.label() for r in answer.works]
    assert (answer.fails[0].config, answer.fails[0].runner, answer.fails[0].broken.part) == ("a", "v2", "resolver")
    # Runners that are not alternatives must all work: the config fails as a whole.
    assert decide(ask(alternatives=()), mixed, ("a", "b"), ("g",)).status == "partial"
    assert decide(ask(alternatives=()), mixed, ("a",), ()).status == "absent"


def test_a_runner_that_refuses_the_drafter_does_not_run_it_unless_acceptance_is_a_link():
    refused = configs(
        a={"v1": (True, True), "v2": (False, False)},
        b={"v1": (False, False), "v2": (False, False)},
        g={"v1": (True, True)},
    )
    assert decide(ask(), refused, ("a", "b"), ("g",)).status == "present"  # b runs nowhere: not judged
    answer = decide(ask(chain=("runner-accepts", "resolver")), refused, ("a", "b"), ("g",))
    assert answer.status == "partial" and "b: no runner accepts it" in answer.fails[0].label()
    assert answer.fails[0].refusals and answer.fails[0].broken is None


def test_a_broken_guard_makes_present_partial_and_unknowns_are_never_guessed():
    guard = configs(a={"v1": (True, True)}, b={"v1": (True, True)}, g={"v1": (True, False)})
    assert decide(ask(), guard, ("a", "b"), ("g",)).status == "partial"
    unknown = configs(a={"v1": (True, True)}, b={"v1": (True, None)}, g={"v1": (True, True)})
    answer = decide(ask(), unknown, ("a", "b"), ("g",))
    assert answer.status is None and "why not" in answer.reason
    # Acceptance unknown: where it is a link of the chain, the answer is unknown; where it
    # only chooses whose answers count, the runners that may run the drafter must agree.
    acceptance = configs(a={"v1": (None, True)}, b={"v1": (True, True)}, g={"v1": (True, True)})
    assert decide(ask(chain=("runner-accepts", "resolver")), acceptance, ("a", "b"), ("g",)).status is None
    assert decide(ask(), acceptance, ("a", "b"), ("g",)).status == "present"
    split = configs(a={"v1": (None, True), "v2": (True, False)}, b={"v1": (True, True)}, g={"v1": (True, True)})
    answer = decide(ask(), split, ("a", "b"), ("g",))
    assert answer.status is None and "give different answers" in answer.reason
    agree = configs(a={"v1": (None, False), "v2": (None, False)}, b={"v1": (True, False)}, g={"v1": (True, True)})
    assert decide(ask(), agree, ("a", "b"), ("g",)).status == "absent"


def test_every_declared_question_has_its_kind_and_rules_name_only_known_links():
    assert set(QUESTIONS) == set(QUESTION_KINDS)
    for rule in load_rules():
        assert rule.behaviour is not None and set(rule.behaviour.chain) <= set(QUESTIONS[rule.behaviour.question])


def test_a_where_naming_an_unbound_metavariable_is_an_error_at_load(tmp_path):
    source = next(r.source for r in load_rules() if r.id == "cache-drop").read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(
        source.replace(
            "where = { T = { not_contains = \"'dflash'\" } }", "where = { U = { not_contains = \"'dflash'\" } }", 1
        )
    )
    with pytest.raises(ToolError, match=r"where names \$U, which no pattern of the form binds"):
        load_rule(bad)


def verdicts(tree: Path) -> dict:
    return {fix.id: fix for fix in run_check(PathTarget(tree), load_rules()).fixes}


@pytest.mark.release
def test_shift_through_a_helper_is_present_by_behaviour_not_absent_by_the_catch_all(mini_tree, monkeypatch):
    monkeypatch.setenv("DFLASH_DOCTOR_NO_CACHE", "1")
    tree = mini_tree("0.22.0")
    resolver = tree / RESOLVER
    text = resolver.read_text()
    assert SHIFT in text
    resolver.write_text(
        text.replace(SHIFT, 'layer_ids = _capture_ids(dflash_config.get("target_layer_ids"))')
        + "\n\ndef _capture_ids(ids):\n    return [n + 1 for n in (ids or [])]\n"
    )
    fix = verdicts(tree)["layer-offset"]
    assert (fix.status, fix.decided_by, fix.structure_status) == ("present", "behaviour", "absent")
    # The helper turned wrong: behaviour says absent, and nothing guesses present.
    resolver.write_text(resolver.read_text().replace("return [n + 1 for n in (ids or [])]", "return list(ids or [])"))
    fix = verdicts(tree)["layer-offset"]
    assert (fix.status, fix.decided_by) == ("absent", "behaviour")
    assert "[1, 16, 31, 46, 61]" in fix.reason


@pytest.mark.release
def test_a_method_rebound_after_its_class_is_unknown_with_the_line(mini_tree, monkeypatch):
    monkeypatch.setenv("DFLASH_DOCTOR_NO_CACHE", "1")
    tree = mini_tree("0.33.0")
    scheduler = tree / "vllm/v1/core/sched/scheduler.py"
    text = scheduler.read_text()
    scheduler.write_text(
        text + "\n\ndef _old_init(self, *args, **kwargs):\n    pass\n\n\nScheduler.__init__ = _old_init\n"
    )
    line = len((text + "\n\ndef _old_init(self, *args, **kwargs):\n    pass\n\n\n").splitlines()) + 1
    fix = verdicts(tree)["cache-drop"]
    assert fix.status == "unknown"
    assert f"replaced at line {line}" in fix.reason
    assert any(item.form == "rebound" and item.line == line for item in fix.evidence)


@pytest.mark.release
def test_a_probe_answer_is_judged_by_structure_only(mini_tree, tmp_path, monkeypatch):
    monkeypatch.setenv("DFLASH_DOCTOR_NO_CACHE", "1")
    fixes = run_check(ProbeAnswerOf(mini_tree("0.33.0")), load_rules()).fixes
    assert {fix.decided_by for fix in fixes} == {"structure"}
    assert all(fix.behaviour is None for fix in fixes)
    assert {fix.id: fix.status for fix in fixes} == {
        "cache-drop": "present",
        "layer-offset": "present",
        "swa-config": "present",
    }
    assert "never run on this one" in next(fix for fix in fixes if fix.id == "layer-offset").reason


def test_rules_test_runs_fix_cases_and_fails_a_wrong_expectation(tmp_path):
    from dflash_doctor.rulestest import check_rule

    source = next(r.source for r in load_rules() if r.id == "layer-offset").read_text()
    assert 'status = "present"\ndecided_by = "behaviour"' in source
    wrong = tmp_path / "layer-offset.toml"
    wrong.write_text(
        source.replace(
            'status = "present"\ndecided_by = "behaviour"', 'status = "present"\ndecided_by = "structure"', 1
        )
    )
    results = [(line, ok) for line, ok in check_rule(load_rule(wrong)) if "fix case" in line]
    assert len(results) == 2
    assert not results[0][1] and "expected present by structure, got present by behaviour" in results[0][0]
    assert results[1][1]


def test_a_guard_no_runner_accepts_is_not_judged():
    refused_guard = configs(a={"v1": (True, True)}, b={"v1": (True, True)}, g={"v1": (False, False)})
    assert decide(ask(chain=("runner-accepts", "resolver")), refused_guard, ("a", "b"), ("g",)).status == "present"


QWEN3_DFLASH = "vllm/model_executor/models/qwen3_dflash.py"
MODEL_INDEX = "                    layer_idx=layer_idx,\n"


@pytest.mark.release
def test_the_index_each_layer_receives_comes_from_the_trees_own_model(mini_tree, monkeypatch):
    """swa-config's layer-index link: DFlashQwen3Model is constructed and each layer
    must receive its own index; a model that hands layer 0's index to every layer is
    caught there, and a model that cannot be constructed leaves the answer unknown."""
    monkeypatch.setenv("DFLASH_DOCTOR_NO_CACHE", "1")
    rules = tuple(rule for rule in load_rules() if rule.id == "swa-config" and rule.engine == "vllm")
    tree = mini_tree("0.33.0")
    (fix,) = run_check(PathTarget(tree), rules).fixes
    indices = [
        item for item in fix.behaviour.observations if item.part == "layer-index" and item.config == "zlab-mixed"
    ]
    assert fix.status == "present"
    assert [(item.layer, item.observed, item.ok) for item in indices if item.runner == "v2"] == [
        (i, i, True) for i in range(5)
    ]

    model = tree / QWEN3_DFLASH
    text = model.read_text()
    assert text.count(MODEL_INDEX) == 1
    model.write_text(text.replace(MODEL_INDEX, "                    layer_idx=0,\n"))
    (fix,) = run_check(PathTarget(tree), rules).fixes
    assert fix.behaviour.status == "absent"
    assert "layer-index layer 1 is 0, needs 1" in fix.behaviour.reason

    # A branch on state behaviour does not know is run both ways: one that changes nothing
    # leaves the answer; one on which the indices depend leaves it unknown, naming the state.
    head = "        super().__init__()\n        speculative_config = vllm_config.speculative_config\n"
    assert text.count(head) == 1
    model.write_text(text.replace(head, head + "        if vllm_config.parallel_config:\n            pass\n"))
    (fix,) = run_check(PathTarget(tree), rules).fixes
    assert fix.status == "present", fix.reason
    model.write_text(
        text.replace(head, head + "        if vllm_config.parallel_config:\n            config = None\n").replace(
            MODEL_INDEX, "                    layer_idx=layer_idx if config is not None else 0,\n"
        )
    )
    (fix,) = run_check(PathTarget(tree), rules).fixes
    assert (
        fix.status == "unknown"
        and "layer-index" in fix.reason
        and "the branches decided by vllm_config.parallel_config" in fix.reason
    )


@pytest.mark.release
def test_an_answer_of_the_wrong_shape_from_tree_code_is_unknown_not_a_crash(mini_tree, monkeypatch):
    """init_speculator hands back a dict that looks like the harness's own record but
    holds a number: the V2 runner's support is unknown; the check still answers."""
    monkeypatch.setenv("DFLASH_DOCTOR_NO_CACHE", "1")
    tree = mini_tree("0.33.0")
    factory = tree / "vllm/v1/worker/gpu/spec_decode/__init__.py"
    text = factory.read_text()
    docstring = '    """Build the speculator for this config."""\n'
    assert text.count(docstring) == 1
    factory.write_text(text.replace(docstring, docstring + '    return {"$constructed": 5}\n'))
    fixes = verdicts(tree)
    assert set(fixes) == {"layer-offset", "swa-config", "cache-drop"}
    assert fixes["cache-drop"].status == "present"  # untouched by the edit


def test_a_signature_whose_class_has_no_init_of_its_own_is_unknown_not_a_crash(tmp_path):
    """``Attention.__init__`` looked for where Attention inherits its ``__init__``: the locator
    finds the class itself, which has no parameters to bind: an ExtractError (the answer is unknown),
    not an AttributeError out of the check."""
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "attention.py").write_text("class Attention(Base):\n    pass\n", encoding="utf-8")
    construct = Construct(
        file="vllm/attention.py",
        layer="Layer",
        index_parameters=("layer_idx",),
        recorded="Attention",
        signature_file="vllm/attention.py",
        signature="Attention.__init__",
        parameter="sliding_window",
        causal="attn",
        assume=(),
    )
    with pytest.raises(ExtractError, match="Attention.__init__ is not defined in vllm/attention.py"):
        _signature(DirectoryTree(tmp_path, None), construct)
