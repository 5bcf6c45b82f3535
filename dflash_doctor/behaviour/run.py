"""Answer every rule's behavioural question on one tree, in one probe run."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..draft.config import DraftConfig, TargetLayers, target_layer_count
from ..model import PRESENT, BehaviourAnswer
from ..provenance import read_platform
from ..rules import Rule, reference_configs
from ..source import SourceTree
from .capture import evaluate as evaluate_capture
from .compute import compute
from .computed import Computed, RunProgram
from .construct import construct_layers
from .decide import decide
from .flag import evaluate as evaluate_flag
from .observe import QUESTION_KINDS
from .plan import Questions


def user_name(draft: DraftConfig) -> str:
    return f"user:{draft.path.name}"


def answer_rules(
    tree: SourceTree,
    rules: tuple[Rule, ...],
    run: RunProgram,
    user: DraftConfig | None = None,
    target: TargetLayers | None = None,
) -> tuple[dict[str, BehaviourAnswer], Computed | None]:
    """Each rule's answer by id, and the user's probes (for the report's probes section).
    With a user config its answer gates where it has one, unless it works and the
    rule's defect cannot reach that drafter (``[affects]``); else the references answer.
    ``target`` (from --target-config): the user's drafter taps a target of that many layers,
    and a question asked per target architecture is asked of the ones it names."""
    asked = [rule for rule in rules if rule.behaviour is not None]
    configs = list(reference_configs())
    if user is not None:
        configs.append((user_name(user), user))
    if not asked and user is None:
        return {}, None
    questions, unlike = questions_of(asked)
    probes = compute(tree, tuple(draft for _, draft in configs), questions, run)
    platform = read_platform(tree)  # branches on the platform are taken for the one the target is built for
    answers = {}
    for rule in asked:
        behaviour = rule.behaviour
        assert behaviour is not None
        if rule.id in unlike:
            answers[rule.id] = BehaviourAnswer(behaviour.question, None, unlike[rule.id])
            continue
        kind = QUESTION_KINDS[behaviour.question]
        construct = behaviour.construct
        built: list[Any]  # what the rule's own run found, per drafter config
        if behaviour.flag is not None:  # one answer of the tree's, the same for every drafter config
            built = [evaluate_flag(tree, behaviour.flag, run)] * len(probes)
        elif behaviour.capture is not None:  # per drafter: its ids, on a target with its layer count
            drafters = [(*_ids_and_count(draft, target if draft is user else None), draft.data) for _, draft in configs]
            built = evaluate_capture(tree, behaviour.capture, drafters, run, target)
        elif construct is not None:
            built = construct_layers(
                tree, construct, [found.hf_config for found in probes], run, rule.files, platform.name
            )
        else:
            built = [None] * len(probes)
        observations = tuple(
            item
            for (name, draft), found, layers in zip(configs, probes, built)
            for item in kind(name, draft, found, layers)
        )
        answer = decide(behaviour, observations, behaviour.subjects, behaviour.guards)
        if behaviour.flag is not None and answer.status == PRESENT:  # present says why: what the predicate answered
            answer = dataclasses.replace(answer, reason=observations[0].note)
        if user is not None:
            mine = decide(behaviour, observations, (user_name(user),), ())
            # A working drafter the defect cannot reach keeps the tree's answer (which then does not gate).
            unreachable = mine.status == PRESENT and rule.affects_drafter(user)[0] is False
            if mine.status is not None and not unreachable:
                answer = mine
            elif mine.status is None:  # the user's config cannot be judged for this question: the references answer
                answer = dataclasses.replace(
                    answer, reason=f"{answer.reason} (for {user_name(user)}: {mine.reason})".lstrip()
                )
        if behaviour.capture is not None and target is not None and target.architectures:
            answer = dataclasses.replace(answer, scope=target.architectures)  # the target's architectures only
        answers[rule.id] = answer
    return answers, probes[-1] if user is not None else None


def _ids_and_count(draft: DraftConfig, target: TargetLayers | None) -> tuple[tuple[int, ...] | None, int | None]:
    """The drafter's ids as written and the target's layer count (``target``'s, else ``num_target_layers``)."""
    ids = draft.layer_ids
    counted = target_layer_count(draft, target)
    usable = isinstance(ids, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in ids) and ids
    return (tuple(ids) if usable else None), (counted.count if counted else None)


def questions_of(asked: list[Rule]) -> tuple[Questions, dict[str, str]]:
    """What the asked rules call, from the first rule of each kind to name it; and, by rule id,
    why a rule that names other code for the same question is not answered (one program asks each once)."""
    resolvers: dict[str, Any] = {}
    handing: dict[str, Any] = {}
    unlike: dict[str, str] = {}
    for rule in asked:
        behaviour = rule.behaviour
        assert behaviour is not None
        anchors = {anchor.id: anchor for anchor in rule.anchors}
        mine: dict[str, Any] = {}
        if behaviour.resolvers:
            mine = {"resolvers": tuple((runner, anchors[anchor_id]) for runner, anchor_id in behaviour.resolvers)}
        if behaviour.handing is not None:
            mine = {"handing": behaviour.handing, "constructor": anchors[behaviour.handing.constructor]}
        if not mine:
            continue
        first = resolvers if "resolvers" in mine else handing
        if not first:
            first.update(mine, rule=rule.id)
        elif {key: value for key, value in first.items() if key != "rule"} != mine:
            unlike[rule.id] = (
                f"rule {first['rule']} asks the {behaviour.question} question of other code "
                "(the program asks each question once)"
            )
    return Questions(
        resolvers=resolvers.get("resolvers", ()), handing=handing.get("handing"), constructor=handing.get("constructor")
    ), unlike
