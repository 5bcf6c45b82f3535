"""A rule's verdict from its observations: links of a chain must all hold for a
configuration to work; configurations along the rule's alternatives may
disagree (partial); a runner that refuses the drafter does not run it."""

from __future__ import annotations

from collections import defaultdict

from ..model import ABSENT, PARTIAL, PRESENT, BehaviourAnswer, Observation
from ..rules import Behaviour

ACCEPTS = "runner-accepts"


def judge(behaviour: Behaviour, observations: tuple[Observation, ...], subjects: tuple[str, ...], guards: tuple[str, ...]) -> BehaviourAnswer:
    """``subjects`` decide the verdict; a broken ``guard`` makes a present verdict partial."""
    results: dict[tuple[str, ...], bool] = {}
    failures: dict[tuple[str, ...], str] = {}
    for config in (*subjects, *guards):
        mine = [item for item in observations if item.config == config]
        outcome = _configuration(behaviour, config, mine, config in guards)
        if isinstance(outcome, str):
            return BehaviourAnswer(behaviour.question, None, outcome, observations=observations)
        for key, (works, why) in outcome.items():
            collapsed = _alternative_key(behaviour, key)
            results[collapsed] = results.get(collapsed, True) and works
            if not works:
                failures.setdefault(collapsed, why)
    subject_keys = [key for key in results if key[0] in subjects]
    if not subject_keys:
        return BehaviourAnswer(behaviour.question, None, "no runner of this tree runs any reference drafter", observations=observations)
    works = tuple(_label(key) for key in results if results[key])
    fails = tuple(f"{_label(key)}: {failures[key]}" for key in results if not results[key])
    subject_results = {results[key] for key in subject_keys}
    broken_guards = [key for key in results if key[0] in guards and not results[key]]
    if subject_results == {True}:
        status = PARTIAL if broken_guards else PRESENT
    elif subject_results == {False}:
        status = ABSENT
    else:
        status = PARTIAL
    reason = "" if status == PRESENT else f"fails for {'; '.join(fails)}" + (f"; works for {', '.join(works)}" if works else "")
    return BehaviourAnswer(behaviour.question, status, reason, works, fails, observations)


def _configuration(behaviour: Behaviour, config: str, observations: list[Observation], guard: bool):
    """{(config, runner, setting): (works, why not)} for one drafter config, or
    the reason it cannot be told. A guard no runner accepts is not judged: the
    fix cannot break a drafter the tree does not run."""
    if not observations:
        return f"{config} was not observed"
    accepts = {item.runner: item for item in observations if item.part == ACCEPTS}
    unknown = [item for item in accepts.values() if item.ok is None]
    if unknown and ACCEPTS in behaviour.chain:
        item = unknown[0]
        return f"whether the {item.runner.upper()} runner accepts {config} is not known: {item.note}"
    # Where acceptance only chooses whose answers count, a runner that may run the
    # drafter counts; the runners must then agree, so the answer holds whichever runs.
    running = {runner for runner, item in accepts.items() if item.ok is not False}
    if accepts and not running:
        if ACCEPTS in behaviour.chain and not guard:
            refusal = "; ".join(f"{item.runner.upper()}: {item.note}" for item in accepts.values())
            return {(config, "-", "-"): (False, f"no runner accepts it ({refusal})")}
        return {}
    links: dict[tuple[str, str, str], list[Observation]] = defaultdict(list)
    for item in observations:
        if item.part in behaviour.chain and item.part != ACCEPTS and (item.runner is None or item.runner in running):
            links[(config, item.runner or "-", item.setting)].append(item)
    outcome = {}
    for key, items in links.items():
        missing = {item.part for item in items}
        open_ = [item for item in items if item.ok is None]
        if open_:
            item = open_[0]
            where = f" on the {item.runner.upper()} runner" if item.runner else ""
            return f"{item.part} for {config}{where} could not be computed: {item.note or 'no answer'}"
        broken = [item for item in items if not item.ok]
        absent_links = [part for part in behaviour.chain if part != ACCEPTS and part not in missing]
        if absent_links:
            return f"{config}: no observation of {', '.join(absent_links)}"
        outcome[key] = (not broken, _why(broken[0]) if broken else "")
    by_setting: dict[str, set[bool]] = defaultdict(set)
    for (_, _, setting), (works, _) in outcome.items():
        by_setting[setting].add(works)
    if unknown and any(len(results) > 1 for results in by_setting.values()):
        item = unknown[0]
        return (f"whether the {item.runner.upper()} runner accepts {config} is not known ({item.note}), "
                "and the runners that may run it give different answers")
    return outcome


def _why(item: Observation) -> str:
    layer = f" layer {item.layer}" if item.layer is not None else ""
    return f"{item.part}{layer} is {item.observed!r}, needs {item.expected!r}" + (f" ({item.note})" if item.note else "")


def _alternative_key(behaviour: Behaviour, key: tuple[str, str, str]) -> tuple[str, ...]:
    """Dimensions that are not alternatives collapse: every value must work."""
    config, runner, setting = key
    return (
        config,
        runner if "runner" in behaviour.alternatives else "-",
        setting if "setting" in behaviour.alternatives else "-",
    )


def _label(key: tuple[str, ...]) -> str:
    config, runner, setting = key
    label = config if runner == "-" else f"{config} on the {runner.upper()} runner"
    return label if setting == "-" else f"{label} ({setting})"
