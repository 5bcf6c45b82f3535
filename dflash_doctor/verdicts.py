"""Verdicts: structure and behaviour on one resolved target, combined (no cache)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .behaviour.run import answer_rules, user_name
from .draft.session import Outcome, SandboxError
from .model import FixResult
from .rules import Rule

if TYPE_CHECKING:
    from .draft.config import DraftConfig
    from .behaviour.computed import Computed
    from .targets import ResolvedTarget


def judge(
    resolved: ResolvedTarget, rules: tuple[Rule, ...], user: DraftConfig | None = None
) -> tuple[tuple[FixResult, ...], Computed | None, bool]:
    """(fixes, what the tree computes for ``user``'s config, whether the answer
    follows from the files alone: not when the behaviour child failed or a call
    timed out, which load can cause). Behaviour runs only where the target can run it."""
    opened = resolved.behaviour or (lambda: contextlib.nullcontext(None))
    with opened() as run:  # first: the child starts while the engine is imported and structure checked
        from .behaviour.combine import combine  # heavy: libcst (both), imported while the child starts
        from .engine import Checker

        structure = Checker(resolved.tree).run(rules)
        watched = _Watched(run) if run is not None else None
        answers, probes = answer_rules(resolved.tree, rules, watched, user) if watched is not None else ({}, None)
    fixes = tuple(combine(rule, fix, answers.get(rule.id), resolved.no_behaviour) for rule, fix in zip(rules, structure))
    if user is not None:
        fixes = tuple(_for_drafter(rule, fix, user) for rule, fix in zip(rules, fixes))
    return fixes, probes, watched is None or watched.steady


class _Watched:
    """A session's ``run`` that notes whether every request was answered in time."""

    def __init__(self, run: Callable[..., dict[str, Outcome]]) -> None:
        self.run = run
        self.steady = True

    def __call__(self, *args: Any) -> dict[str, Outcome]:
        try:
            outcomes = self.run(*args)
        except SandboxError:
            self.steady = False
            raise
        if any(outcome.timeout for outcome in outcomes.values()):
            self.steady = False
        return outcomes


def _for_drafter(rule: Rule, fix: FixResult, user: DraftConfig) -> FixResult:
    """Whether the fix's defect can reach the user's drafter: the rule's ``[affects]``
    says it cannot only when the tree's code also ran on this drafter without failing
    it (a defect of another shape could reach it); behaviour failing it overrules
    the config. A fix it cannot reach keeps its verdict and does not fail the gate."""
    affected, why = rule.affects_drafter(user)
    if affected is False:
        mine = user_name(user)
        behaviour = fix.behaviour
        if behaviour is not None and any(label.startswith(mine) for label in behaviour.fails):
            affected, why = True, "running the tree's code shows this drafter failing, whatever its config says"
        elif behaviour is None or not any(item.config == mine and item.ok for item in behaviour.observations):
            # the config alone never exempts: nothing ran this drafter through the tree's code
            affected, why = None, f"{why}, but the tree's code could not be run on this drafter here, so the fix still counts"
    return dataclasses.replace(fix, affects_drafter=affected, affects_reason=why)
