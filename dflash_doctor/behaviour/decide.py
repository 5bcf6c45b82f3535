"""A rule's verdict from its observations: links of a chain must all hold for a
configuration to work; configurations along the rule's alternatives may
disagree (partial); a runner that refuses the drafter does not run it."""

from __future__ import annotations

import dataclasses
from collections import defaultdict

from ..model import ABSENT, PARTIAL, PRESENT, BehaviourAnswer, ConfigResult, Observation
from ..rules import Behaviour

ACCEPTS = "runner-accepts"
DEFAULT = "default"  # the setting of a question with one
MAX_WORKS = 6  # configurations that work, named in a reason before the rest are counted


def decide(
    behaviour: Behaviour, observations: tuple[Observation, ...], subjects: tuple[str, ...], guards: tuple[str, ...]
) -> BehaviourAnswer:
    """``subjects`` decide the verdict; a broken ``guard`` makes a present verdict partial."""
    results: dict[tuple[str, str | None, str | None], ConfigResult] = {}
    open_: list[str] = []  # why alternatives could not be computed (a verdict that holds whatever they give stands)
    for config in (*subjects, *guards):
        mine = [item for item in observations if item.config == config]
        found = _configuration(behaviour, config, mine, config in guards)
        if isinstance(found, str):
            return BehaviourAnswer(behaviour.question, None, found, observations=observations)
        outcome, unknown = found
        open_.extend(unknown)
        for result in outcome:
            key = _alternative_key(behaviour, result)
            known = results.get(key)
            if known is None or (
                known.works and not result.works
            ):  # every collapsed value must work: the first failure stands
                results[key] = dataclasses.replace(result, runner=key[1], setting=key[2])
    subject_results = {result.works for key, result in results.items() if key[0] in subjects}
    if not subject_results:
        return BehaviourAnswer(
            behaviour.question, None, "no runner of this tree runs any reference drafter", observations=observations
        )
    broken_guards = [result for key, result in results.items() if key[0] in guards and not result.works]
    if open_ and subject_results != {True, False}:  # only some alternatives working and some not is certain
        return BehaviourAnswer(behaviour.question, None, open_[0], observations=observations)
    if subject_results == {True}:
        status = PARTIAL if broken_guards else PRESENT
    elif subject_results == {False}:
        status = ABSENT
    else:
        status = PARTIAL
    answer = BehaviourAnswer(behaviour.question, status, "", tuple(results.values()), observations)
    if status == PRESENT:
        return answer
    reason = f"fails for {'; '.join(result.label() for result in answer.fails)}"
    works = ", ".join(shortened([result.label() for result in answer.works]))
    reason += f"; works for {works}" if works else ""
    return dataclasses.replace(answer, reason=reason + (f"; not known for {len(open_)}: {open_[0]}" if open_ else ""))


def shortened(worked: list[str]) -> list[str]:
    """The configurations that work, the first MAX_WORKS named and the rest counted."""
    return worked if len(worked) <= MAX_WORKS else [*worked[:MAX_WORKS], f"{len(worked) - MAX_WORKS} more"]


def _configuration(
    behaviour: Behaviour, config: str, observations: list[Observation], guard: bool
) -> tuple[list[ConfigResult], list[str]] | str:
    """How one drafter config fares on each runner and setting, and why the settings that are
    alternatives and could not be computed were not; or the reason it cannot be told. A guard
    no runner accepts is not judged: the fix cannot break a drafter the tree does not run."""
    if not observations:
        return f"{config} was not observed"
    accepts = {item.runner: item for item in observations if item.part == ACCEPTS}
    unknown = [item for item in accepts.values() if item.ok is None]
    if unknown and ACCEPTS in behaviour.chain:
        item = unknown[0]
        return f"whether the {(item.runner or '-').upper()} runner accepts {config} is not known: {item.note}"
    # Where acceptance only chooses whose answers count, a runner that may run the
    # drafter counts; the runners must then agree, so the answer holds whichever runs.
    running = {runner for runner, item in accepts.items() if item.ok is not False}
    if accepts and not running:
        if ACCEPTS in behaviour.chain and not guard:
            refusals = tuple((item.runner or "-", item.note) for item in accepts.values())
            return [ConfigResult(config, None, None, False, refusals=refusals)], []
        return [], []
    links: dict[tuple[str | None, str], list[Observation]] = defaultdict(list)
    for item in observations:
        if item.part in behaviour.chain and item.part != ACCEPTS and (item.runner is None or item.runner in running):
            links[(item.runner, item.setting)].append(item)
    outcome = []
    open_settings = []
    for key, items in links.items():
        missing = {item.part for item in items}
        open_ = [item for item in items if item.ok is None]
        if open_:
            item = open_[0]
            where = f" on the {item.runner.upper()} runner" if item.runner else ""
            why = f"{item.part} for {config}{where} could not be computed: {item.note or 'no answer'}"
            if "setting" not in behaviour.alternatives or item.setting == DEFAULT:
                return why
            open_settings.append(f"{item.part} for {config} with {item.setting}: {item.note or 'no answer'}")
            continue
        broken = [item for item in items if not item.ok]
        absent_links = [part for part in behaviour.chain if part != ACCEPTS and part not in missing]
        if absent_links:
            return f"{config}: no observation of {', '.join(absent_links)}"
        runner, setting = key
        outcome.append(ConfigResult(config, runner, setting, not broken, broken[0] if broken else None))
    by_setting: dict[str | None, set[bool]] = defaultdict(set)
    for result in outcome:
        by_setting[result.setting].add(result.works)
    if unknown and any(len(results) > 1 for results in by_setting.values()):
        item = unknown[0]
        return (
            f"whether the {(item.runner or '-').upper()} runner accepts {config} is not known ({item.note}), "
            "and the runners that may run it give different answers"
        )
    return outcome, open_settings


def _alternative_key(behaviour: Behaviour, result: ConfigResult) -> tuple[str, str | None, str | None]:
    """Dimensions that are not alternatives collapse (None): every value must work."""
    return (
        result.config,
        result.runner if "runner" in behaviour.alternatives else None,
        result.setting if "setting" in behaviour.alternatives else None,
    )
