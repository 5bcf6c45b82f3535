"""Verdicts: structure and behaviour on one resolved target, combined (no cache)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .behaviour.run import answer_rules, user_name
from .isolation.session import Outcome, SandboxError
from .model import NOT_APPLICABLE, UNKNOWN, Evidence, FixResult
from .rules import Rule

SHADOWED = "shadowed"  # evidence form: Python loads another file for this module
PLUGIN = "plugin"  # evidence form: an engine's plugin whose code names this fix's route

if TYPE_CHECKING:
    from .draft.config import DraftConfig, TargetLayers
    from .behaviour.computed import Computed
    from .targets import ResolvedTarget


def judge(
    resolved: ResolvedTarget,
    rules: tuple[Rule, ...],
    user: DraftConfig | None = None,
    target: TargetLayers | None = None,
) -> tuple[tuple[FixResult, ...], Computed | None, bool]:
    """(fixes, what the tree computes for ``user``'s config, whether the answer
    follows from the files alone: not when the behaviour child failed or a call
    timed out, which load can cause). Behaviour runs only where the target can run it,
    and only for rules of the tree's engine (structure says the others' fixes are unknown)."""
    ours = tuple(rule for rule in rules if rule.engine == resolved.tree.engine.name)
    opened = resolved.behaviour if resolved.behaviour is not None and ours else (lambda: contextlib.nullcontext(None))
    with opened() as run:  # first: the child starts while the engine is imported and structure checked
        from .behaviour.combine import combine  # heavy: libcst (both), imported while the child starts
        from .structure.forms import FormReader

        structure = FormReader(resolved.tree).run(rules)
        watched = _Watched(run) if run is not None else None
        answers, probes = (
            answer_rules(resolved.tree, ours, watched, user, target) if watched is not None else ({}, None)
        )
    fixes = tuple(
        combine(rule, fix, answers.get(rule.id), resolved.no_behaviour)
        if rule.engine == resolved.tree.engine.name
        else fix
        for rule, fix in zip(rules, structure)
    )
    fixes = _what_python_loads(resolved, rules, fixes)
    fixes = _plugins_on_route(resolved, rules, fixes)
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


def _what_python_loads(
    resolved: ResolvedTarget, rules: tuple[Rule, ...], fixes: tuple[FixResult, ...]
) -> tuple[FixResult, ...]:
    """A file the check read that Python would not run (a package, an extension
    module or an unchecked-hash .pyc comes first) leaves every judged fix unknown:
    the verdicts speak of code the engine does not import."""
    from .structure.forms import UNKNOWN_CODE, restate

    shadows = [
        (relpath, why) for relpath in sorted(resolved.tree.inspected()) if (why := resolved.tree.shadowed(relpath))
    ]
    if not shadows:
        return fixes
    words = "; ".join(why for _, why in shadows)
    evidence = tuple(Evidence(relpath, None, relpath, SHADOWED, why) for relpath, why in shadows)
    return tuple(
        fix
        if fix.status in (UNKNOWN, NOT_APPLICABLE)
        else restate(
            rule,
            dataclasses.replace(fix, evidence=(*fix.evidence, *evidence)),
            UNKNOWN,
            f"the code read is not the code that runs: {words}",
            UNKNOWN_CODE,
        )
        for rule, fix in zip(rules, fixes)
    )


def _plugins_on_route(
    resolved: ResolvedTarget, rules: tuple[Rule, ...], fixes: tuple[FixResult, ...]
) -> tuple[FixResult, ...]:
    """The engine loads its plugins at start, and they may patch its classes: a plugin whose
    code names a definition on a fix's route (or its module) leaves the fix unknown;
    one whose code cannot be read is said to possibly change the answer."""
    from .structure.forms import UNKNOWN_CODE, restate

    plugins = resolved.tree.plugins()
    if not plugins:
        return fixes
    judged = []
    for rule, fix in zip(rules, fixes):
        route = {part for item in fix.evidence for part in (*item.symbol.split("."), item.file.rpartition("/")[2][:-3])}
        route = {name for name in route if len(name) > 3 and not name.startswith("__")}
        touching = [(plugin, plugin.touches(route)) for plugin in plugins]
        touching = [(plugin, names) for plugin, names in touching if names]
        unread = [plugin for plugin in plugins if not plugin.read]
        if touching and fix.status not in (UNKNOWN, NOT_APPLICABLE):
            words = "; ".join(
                f"plugin {p.name} ({p.group} of {p.distribution}, {p.target}) names {', '.join(names)}"
                for p, names in touching
            )
            evidence = tuple(
                Evidence(p.target, None, p.name, PLUGIN, f"names {', '.join(names)}") for p, names in touching
            )
            fix = restate(
                rule,
                dataclasses.replace(fix, evidence=(*fix.evidence, *evidence)),
                UNKNOWN,
                f"{resolved.tree.engine.display} loads plugins at start that may replace the code on this fix's "
                f"route: {words}",
                UNKNOWN_CODE,
            )
        elif unread:
            note = "; ".join(
                f"plugin {p.name} ({p.group} of {p.distribution}) could not be read and may change this answer"
                for p in unread
            )
            fix = dataclasses.replace(fix, reason=f"{fix.reason}; {note}" if fix.reason else note)
        judged.append(fix)
    return tuple(judged)


def _for_drafter(rule: Rule, fix: FixResult, user: DraftConfig) -> FixResult:
    """Whether the fix's defect can reach the user's drafter: the rule's ``[affects]``
    says it cannot only when the tree's code also ran on this drafter without failing
    it (a defect of another shape could reach it); behaviour failing it overrules
    the config. A fix it cannot reach keeps its verdict and does not fail the gate."""
    affected, why = rule.affects_drafter(user)
    if affected is False:
        mine = user_name(user)
        behaviour = fix.behaviour
        if behaviour is not None and any(result.config == mine for result in behaviour.fails):
            affected, why = True, "running the tree's code shows this drafter failing, whatever its config says"
        elif behaviour is None or not any(item.config == mine and item.ok for item in behaviour.observations):
            # the config alone never exempts: nothing ran this drafter through the tree's code
            affected, why = (
                None,
                f"{why}, but the tree's code could not be run on this drafter here, so the fix still counts",
            )
    return dataclasses.replace(fix, affects_drafter=affected, affects_reason=why)
