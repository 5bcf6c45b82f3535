"""Classes outside the extracted code while a class is constructed: a type check
against one is not known (explored both ways), and a declared container holds the
items it is built from; a class imported inside the code is known by its qualified
name, in every request of a child. Snippets written here, run in the real sandbox."""

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


def test_a_class_imported_inside_the_code_is_never_taken_for_the_served_type_in_a_later_request() -> None:
    """init_speculator's check, ``issubclass(speculator_cls, BaseSpeculator)`` with the base imported
    inside the function, gave False now and then (then read ``BaseSpeculator.__qualname__`` for its
    TypeError: "raises AttributeError: __qualname__"): the harness knew its served ``type`` by id(),
    and the served ``type`` of an earlier request of the child, freed, left its id to a later object.
    Many requests in one child, each holding many imported names, land one on such an id."""
    program = [
        Chunk("Base", "class Base(metaclass=_copied_meta):\n    pass\nBase._qualified_name = 'pkg.kinds.Base'"),
        Chunk("Kind", "class Kind(Base, metaclass=_copied_meta):\n    pass\nKind._qualified_name = 'pkg.kinds.Kind'"),
        Chunk(
            "builds",
            "def builds(count):\n"
            "    bases = []\n"
            "    for _ in range(count):\n"
            "        from pkg.kinds import Base\n"
            "        bases.append(Base)\n"
            "    return [isinstance(Kind, type) and issubclass(Kind, base) for base in bases].count(False)\n",
        ),
    ]
    with sandbox.session() as ask:  # one child for all the requests, as a check has
        outcomes = [
            ask(program, [Call("c", "builds(3000)")], {}, {"_copied_meta": {"$copied_meta": True}})["c"]
            for _ in range(20)
        ]
    assert all(outcome.ok for outcome in outcomes), outcomes
    assert [outcome.value for outcome in outcomes] == [0] * 20  # every imported Base is Kind's base
