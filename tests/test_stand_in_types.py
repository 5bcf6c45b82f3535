"""Classes outside the extracted code while a class is constructed: a type check
against one is not known (explored both ways), and a declared container holds the
items it is built from. Snippets written here, run in the real sandbox."""

from __future__ import annotations

from dflash_doctor.isolation import sandbox
from dflash_doctor.isolation.session import Call, Chunk, Outcome

HARNESS_GLOBALS = {
    "nn": {"$standin": "nn", "assume": {"nn.ModuleList": {"$container": "nn.ModuleList"}}, "record": []},
    "QuantKind": {"$standin": "QuantKind", "assume": {}, "record": []},
}


def run(source: str, expr: str) -> Outcome:
    outcomes = sandbox.run([Chunk("probe", source)], [Call("c", expr)], {}, HARNESS_GLOBALS)
    return outcomes["c"]


def test_a_type_check_against_a_stand_in_class_gives_the_same_answer_both_ways_or_none() -> None:
    same_either_way = run(
        "def probe(layer):\n    if isinstance(layer, QuantKind):\n        return 1\n    return 1\n",
        "probe(nn.Linear())",
    )
    assert same_either_way.ok and same_either_way.value == 1
    differs = run("def probe(layer):\n    return 2 if isinstance(layer, QuantKind) else 3\n", "probe(nn.Linear())")
    assert not differs.ok and differs.gap and "isinstance(nn.Linear(), QuantKind)" in differs.gap
    known = run("def probe(value):\n    return isinstance(value, (int, QuantKind))\n", "probe(4)")
    assert known.ok and known.value is True  # a known class that matches decides alone


def test_a_declared_container_holds_its_items_in_order() -> None:
    outcome = run(
        "def probe():\n    layers = nn.ModuleList([i * 2 for i in range(3)])\n    return [x + 1 for x in layers]\n",
        "probe()",
    )
    assert outcome.ok and outcome.value == [1, 3, 5]
    other = run("def probe():\n    return list(nn.Sequential([1, 2]))\n", "probe()")
    assert not other.ok and other.gap  # not declared a container: iterating it is not known
