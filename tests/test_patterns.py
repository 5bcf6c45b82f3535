import libcst as cst
import pytest

from dflash_doctor.structure.patterns import Pattern, PatternError


def found(pattern: str, code: str) -> list[str]:
    module = cst.parse_module(code)
    return [module.code_for_node(m.node).strip() for m in Pattern(pattern).find(module)]


def test_metavariable_binds_any_expression_and_layout_does_not_matter():
    code = "x = [\n    n + 1   for n in (cfg.get( 'ids' ) or [])  # +1\n]\n"
    assert len(found("[$I + 1 for $I in ($C.get('ids') or [])]", code)) == 1


def test_repeated_metavariable_must_bind_the_same_code():
    assert found("[$I + 1 for $I in $X]", "y = [j + 1 for i in xs]\n") == []
    assert found("[$I + 1 for $I in $X]", "y = [i + 1 for i in xs]\n") == ["[i + 1 for i in xs]"]


def test_metavariable_stands_for_code_not_for_an_absent_part():
    assert found("return $X", "def f():\n    return\n") == []
    assert found("return $X", "def f():\n    return 1\n") == ["return 1"]


def test_quote_style_is_irrelevant_but_string_value_is_not():
    assert found("d.get('a')", 'd.get("a")\n') == ['d.get("a")']
    assert found("d.get('a')", 'd.get("b")\n') == []


def test_comments_and_strings_never_match_code():
    code = "# dflash_config.get('target_layer_ids')\nx = \"dflash_config.get('target_layer_ids')\"\n"
    assert found("$C.get('target_layer_ids')", code) == []


def test_ellipsis_in_arguments_after_keywords():
    code = "m = KVCacheManager(cfg, 4, use_eagle=self.use_eagle, log=True)\n"
    assert len(found("KVCacheManager(..., use_eagle=self.use_eagle, ...)", code)) == 1
    assert found("KVCacheManager(..., use_eagle=self.other, ...)", code) == []
    assert found("KVCacheManager(use_eagle=self.use_eagle)", code) == []


def test_ellipsis_in_dicts_lists_and_blocks():
    assert len(found("{..., 'k': [$I - 1 for $I in ...], ...}", "d = {'a': 1, 'k': [x - 1 for x in aux]}\n")) == 1
    assert len(found("[..., 2, ...]", "v = [1, 2, 3]\n")) == 1
    code = "if a and isinstance(a, dict):\n    x = 1\n    y = 2\nelse:\n    pass\n"
    assert len(found("if $A and isinstance($A, dict): ...", code)) == 1


def test_statement_pattern_matches_assignment():
    code = "def f():\n    ids = cfg.get('target_layer_ids')\n"
    assert found("$X = $C.get('target_layer_ids')", code) == ["ids = cfg.get('target_layer_ids')"]


def test_invalid_pattern_is_a_clear_error():
    with pytest.raises(PatternError, match="is not Python"):
        Pattern("def (")
