"""Rules are data: one TOML file per fix in ``rules/``; this module loads them.

Over ~400 lines for now: the rule model and its validation are being extended
together (issue 13); once that lands, loading (``load_rule`` and its helpers)
moves to a module of its own.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from functools import cache, cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .model import ABSENT, DECIDERS, NOT_APPLICABLE, PARTIAL, PRESENT, UNKNOWN, VERDICTS, Evidence, ToolError

if TYPE_CHECKING:
    from .draft.config import DraftConfig
    from .patterns import Pattern, Template

IGNORE = "ignore"  # a form that locates code off the DFlash path: evidence only
FORM_VERDICTS = (PRESENT, ABSENT, PARTIAL, IGNORE)


def rules_dir() -> Path:
    """``rules/`` inside the installed package, or beside it in a checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "rules", here.parent / "rules"):
        if candidate.is_dir():
            return candidate
    raise ToolError("the rules directory is missing from this installation")


@dataclasses.dataclass(frozen=True)
class Anchor:
    id: str
    file: str
    symbol: str
    optional: bool = False

    @property
    def name(self) -> str:
        return self.symbol.rsplit(".", 1)[-1]


@dataclasses.dataclass(frozen=True)
class Applies:
    """The rule applies when ``symbol`` in ``file`` holds the string ``literal``;
    ``remedy`` is what to do when it does not (not-applicable)."""

    file: str
    symbol: str
    literal: str
    remedy: str


@dataclasses.dataclass(frozen=True)
class Affects:
    """Which drafters the defect can reach: ``drafter`` names a test of
    affects.DRAFTER_TESTS; ``yes``/``no`` say why a drafter is or is not affected."""

    drafter: str
    yes: str
    no: str

    def judge(self, draft: DraftConfig) -> tuple[bool | None, str]:
        from .affects import DRAFTER_TESTS

        affected = DRAFTER_TESTS[self.drafter](draft)
        if affected is None:
            return None, f"the drafter config does not say whether the defect can reach it ({self.drafter})"
        return affected, self.yes if affected else self.no


@dataclasses.dataclass(frozen=True)
class Form:
    """One known code form. Patterns are kept as source and compiled on first
    use, so that reading rule metadata never imports libcst."""

    id: str
    verdict: str
    anchors: tuple[str, ...]
    description: str
    pattern_sources: tuple[str, ...]
    unless_sources: tuple[str, ...]
    where_sources: tuple[tuple[str, str, str], ...]  # (metavariable, contains|not_contains, pattern)
    remedy: str = ""
    where_file: str = ""
    patch: FormPatch | None = None
    catch_all: bool = False  # matches more code than the fix's own: locates, never decides alone

    @cached_property
    def patterns(self) -> tuple[Pattern, ...]:
        return _compile(self.pattern_sources, self.where_file)

    @cached_property
    def unless(self) -> tuple[Pattern, ...]:
        return _compile(self.unless_sources, self.where_file)

    @cached_property
    def where(self) -> tuple[tuple[str, str, Pattern], ...]:
        compiled = _compile(tuple(source for _, _, source in self.where_sources), self.where_file)
        return tuple((name, test, pattern) for (name, test, _), pattern in zip(self.where_sources, compiled))

    def compiled(self) -> tuple:
        """Every pattern and template, compiled now (and cached); raises ToolError on a bad one."""
        rewrites = self.patch.rewrites if self.patch else ()
        return (*self.patterns, *self.unless, *self.where, *(r.find for r in rewrites), *(r.replace for r in rewrites))


@dataclasses.dataclass(frozen=True)
class Rewrite:
    """Inside a match of its form, the code ``find`` matches becomes ``replace``
    (``$NAME`` in ``replace`` is the code ``find`` bound to it)."""

    find_source: str
    replace_source: str
    where_file: str = ""

    @cached_property
    def find(self) -> Pattern:
        return _compile((self.find_source,), self.where_file)[0]

    @cached_property
    def replace(self) -> Template:
        import libcst as cst

        from .patterns import PatternError, Template, metavariables

        try:
            template = Template(self.replace_source)
        except PatternError as exc:
            raise ToolError(f"{self.where_file}: {exc}") from None
        unbound = template.metavariables - metavariables(self.find.node)
        if unbound:
            raise ToolError(f"{self.where_file}: replace uses ${', $'.join(sorted(unbound))}, which find does not bind")
        if isinstance(template.node, cst.BaseExpression) != isinstance(self.find.node, cst.BaseExpression):
            raise ToolError(f"{self.where_file}: find and replace must both be expressions or both statements")
        return template


@dataclasses.dataclass(frozen=True)
class FormPatch:
    """How a patch turns code of its form into the present form ``produces``."""

    produces: str
    rewrites: tuple[Rewrite, ...]


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    anchor: str
    code: str
    expect: tuple[str, ...]


QUESTIONS = {  # question kind -> the links (parts) its observations have
    "capture-ids": ("runner-accepts", "resolver"),
    "layer-attention": ("runner-accepts", "layer-index", "sliding-window", "causality"),
    "block-drop": ("kv-cache-manager",),
}
DIMENSIONS = ("runner", "setting")  # drafter configs are always alternatives (subjects, guards)


@dataclasses.dataclass(frozen=True)
class Behaviour:
    """The end-to-end question a fix answers by running the tree's own code.

    ``chain``: the links that must all hold for one configuration to work;
    ``alternatives``: the dimensions whose configurations may disagree (the
    fix is then partial), any other dimension must work everywhere;
    ``subjects``: the reference configs the fix is about; ``guards``: configs
    it must not break; ``files``: what the question reads beyond the anchors."""

    question: str
    chain: tuple[str, ...]
    alternatives: tuple[str, ...]
    subjects: tuple[str, ...]
    guards: tuple[str, ...]
    files: tuple[str, ...]
    construct: Construct | None = None
    uncovered: tuple[str, ...] = ()  # anchors whose code the question does not run: their forms still count


@dataclasses.dataclass(frozen=True)
class Construct:
    """Build the drafter's decoder layers from the tree's own classes: ``layer``
    (a class in ``file``) for each layer index (its parameter named one of
    ``index_parameters``), with stand-ins for every name outside the extracted
    code; calls of ``recorded`` are recorded and bound to the parameters of
    ``signature`` (``file``, ``Class.__init__``) to read ``window``; ``causal``
    is an attribute path on the built layer. ``assume``: values of stand-ins a
    branch reads (the deployment the question is about). ``model``: the class in
    ``file`` that builds the layers; it is constructed with ``layer`` recorded, to
    read the index each layer really receives."""

    file: str
    layer: str
    index_parameters: tuple[str, ...]
    recorded: str
    signature_file: str
    signature: str
    window: str
    causal: str
    assume: tuple[tuple[str, Any], ...]
    model: str | None = None


@dataclasses.dataclass(frozen=True)
class FixCase:
    """A whole-fix case: a small tree (relpath -> code) and what the check must say."""

    name: str
    files: tuple[tuple[str, str], ...]
    status: str
    decided_by: str


@dataclasses.dataclass(frozen=True)
class Rule:
    id: str
    title: str
    prs: tuple[int, ...]  # merged upstream
    unmerged_prs: tuple[int, ...]  # closed or open PRs that people build from
    first_release: str | None
    what: str
    why: str
    remedy: str
    applies: Applies
    anchors: tuple[Anchor, ...]
    forms: tuple[Form, ...]
    cases: tuple[Case, ...]
    source: Path
    headlines: tuple[tuple[str, str], ...]  # (verdict, what the install will do), one per verdict
    patch_refusal: str = ""  # why forms without a patch are not patched in place
    behaviour: Behaviour | None = None
    fix_cases: tuple[FixCase, ...] = ()
    affects: Affects | None = None  # None: the defect can reach every DFlash drafter

    def headline(self, status: str) -> str:
        return dict(self.headlines)[status]

    def remedy_for(self, status: str, evidence: tuple[Evidence, ...] = (), cause: str = "") -> str:
        """The remedy that fits the verdict: for absent and partial the upgrade, and the
        workaround of each form in ``evidence`` that has one; for not-applicable, a
        release with DFlash; for unknown, ``cause``: what to do to get an answer."""
        if status == PRESENT:
            return "none needed"
        if status == NOT_APPLICABLE:
            return self.applies.remedy
        if status == UNKNOWN:
            return cause
        forms = {form.id: form for form in self.forms}
        workarounds = dict.fromkeys(forms[item.form].remedy for item in evidence if item.form in forms and forms[item.form].remedy)
        return " ".join([self.remedy, *workarounds])

    def affects_drafter(self, draft: DraftConfig) -> tuple[bool | None, str]:
        """Whether the defect can reach ``draft`` (None: the config does not say), and why."""
        if self.affects is None:
            return True, "the defect can reach every DFlash drafter"
        return self.affects.judge(draft)

    @property
    def files(self) -> tuple[str, ...]:
        """Every file a check of this rule reads: anchors, applicability, behaviour."""
        files = {a.file for a in self.anchors} | {self.applies.file}
        return tuple(sorted(files | set(self.behaviour.files if self.behaviour else ())))

    def forms_for(self, anchor_id: str) -> list[Form]:
        return [form for form in self.forms if anchor_id in form.anchors]


def _require(data: dict[str, Any], key: str, where: str) -> Any:
    if key not in data:
        raise ToolError(f"{where}: missing key {key!r}")
    return data[key]


def _prose(text: str) -> str:
    """Rule texts are wrapped in the TOML file; one line each everywhere else."""
    return " ".join(text.split())


def _compile(sources: tuple[str, ...], where: str) -> tuple[Pattern, ...]:
    from .patterns import Pattern, PatternError

    try:
        return tuple(Pattern(source) for source in sources)
    except PatternError as exc:
        raise ToolError(f"{where}: {exc}") from None


def load_rule(path: Path) -> Rule:
    where = path.name
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ToolError(f"{where}: cannot load rule: {exc}") from None
    anchors = tuple(
        Anchor(_require(a, "id", where), _require(a, "file", where), _require(a, "symbol", where), a.get("optional", False))
        for a in _require(data, "anchors", where)
    )
    anchor_ids = {anchor.id for anchor in anchors}
    forms = []
    for raw in _require(data, "forms", where):
        form_where = f"{where}: form {raw.get('id')!r}"
        verdict = _require(raw, "verdict", form_where)
        if verdict not in FORM_VERDICTS:
            raise ToolError(f"{form_where}: verdict must be one of {', '.join(FORM_VERDICTS)}")
        unknown_anchors = set(raw.get("anchors", [])) - anchor_ids
        if unknown_anchors or not raw.get("anchors"):
            raise ToolError(f"{form_where}: anchors must name declared anchors (bad: {sorted(unknown_anchors)})")
        if not raw.get("patterns") and not raw.get("unless"):
            raise ToolError(f"{form_where}: needs patterns or unless")
        where_clauses = []
        for metavariable, tests in raw.get("where", {}).items():
            if not any(re.search(rf"\${re.escape(metavariable)}\b", source) for source in raw.get("patterns", [])):
                raise ToolError(f"{form_where}: where names ${metavariable}, which no pattern of the form binds")
            for test, pattern in tests.items():
                if test not in ("contains", "not_contains"):
                    raise ToolError(f"{form_where}: where test must be contains or not_contains")
                where_clauses.append((metavariable, test, pattern))
        forms.append(
            Form(
                id=_require(raw, "id", form_where),
                verdict=verdict,
                anchors=tuple(raw["anchors"]),
                description=_sentence(raw.get("description"), f"{form_where}: description"),
                pattern_sources=tuple(raw.get("patterns", [])),
                unless_sources=tuple(raw.get("unless", [])),
                where_sources=tuple(where_clauses),
                remedy=_prose(raw.get("remedy", "")),
                where_file=form_where,
                patch=_form_patch(raw, verdict, form_where),
                catch_all=_boolean(raw, "catch_all", form_where),
            )
        )
    _check_patches(forms, where)
    cases = tuple(
        Case(_require(c, "name", where), _require(c, "anchor", where), _require(c, "code", where), tuple(c.get("expect", [])))
        for c in data.get("cases", [])
    )
    applies = _require(data, "applies", where)
    return Rule(
        id=_require(data, "id", where),
        title=_require(data, "title", where),
        prs=tuple(data.get("prs", [])),
        unmerged_prs=tuple(data.get("unmerged_prs", [])),
        first_release=data.get("first_release"),
        what=_prose(_require(data, "what", where)),
        why=_prose(_require(data, "why", where)),
        remedy=_prose(_require(data, "remedy", where)),
        applies=Applies(applies["file"], applies["symbol"], applies["literal"], _prose(_require(applies, "remedy", f"{where}: applies"))),
        headlines=_headlines(_require(data, "headlines", where), where),
        affects=_affects(data.get("affects"), where),
        anchors=anchors,
        forms=tuple(forms),
        cases=cases,
        source=path,
        patch_refusal=_prose(data.get("patch_refusal", "")),
        behaviour=_behaviour(data.get("behaviour"), where, anchor_ids),
        fix_cases=tuple(_fix_case(raw, where) for raw in data.get("fix_cases", [])),
    )


def _sentence(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ToolError(f"{where} must be a non-empty sentence")
    return _prose(value)


def _headlines(raw: Any, where: str) -> tuple[tuple[str, str], ...]:
    """``[headlines]``: for every verdict, one sentence of what the install will do."""
    where = f"{where}: headlines"
    if not isinstance(raw, dict):
        raise ToolError(f"{where} must be a table")
    _known_keys(raw, VERDICTS, where)
    missing = [verdict for verdict in VERDICTS if verdict not in raw]
    if missing:
        raise ToolError(f"{where}: missing {', '.join(missing)} (one sentence per verdict)")
    return tuple((verdict, _sentence(raw[verdict], f"{where}.{verdict}")) for verdict in VERDICTS)


def _affects(raw: Any, where: str) -> Affects | None:
    if raw is None:
        return None
    from .affects import DRAFTER_TESTS

    where = f"{where}: affects"
    if not isinstance(raw, dict):
        raise ToolError(f"{where} must be a table")
    _known_keys(raw, ("drafter", "yes", "no"), where)
    drafter = _require(raw, "drafter", where)
    if drafter not in DRAFTER_TESTS:
        raise ToolError(f"{where}: drafter must be one of {', '.join(DRAFTER_TESTS)}")
    return Affects(drafter, _sentence(_require(raw, "yes", where), f"{where}.yes"), _sentence(_require(raw, "no", where), f"{where}.no"))


def _boolean(raw: dict[str, Any], key: str, where: str) -> bool:
    value = raw.get(key, False)
    if not isinstance(value, bool):
        raise ToolError(f"{where}: {key} must be true or false")
    return value


def _strings(raw: dict[str, Any], key: str, where: str, allowed: tuple[str, ...] | None = None) -> tuple[str, ...]:
    value = raw.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ToolError(f"{where}: {key} must be a list of strings")
    bad = [item for item in value if allowed is not None and item not in allowed]
    if bad:
        raise ToolError(f"{where}: {key} names {', '.join(bad)} (known: {', '.join(allowed)})")
    return tuple(value)


def _behaviour(raw: Any, where: str, anchor_ids: set[str]) -> Behaviour | None:
    if raw is None:
        return None
    where = f"{where}: behaviour"
    if not isinstance(raw, dict):
        raise ToolError(f"{where} must be a table")
    _known_keys(raw, ("question", "chain", "alternatives", "subjects", "guards", "files", "construct", "uncovered"), where)
    question = _require(raw, "question", where)
    if question not in QUESTIONS:
        raise ToolError(f"{where}: question must be one of {', '.join(QUESTIONS)}")
    from .behaviour.reference import reference_names, reference_words

    reference_words()  # every reference config has its readable name
    chain = _strings(raw, "chain", where, QUESTIONS[question])
    subjects = _strings(raw, "subjects", where, reference_names())
    if not chain or not subjects:
        raise ToolError(f"{where}: needs a chain and subjects")
    return Behaviour(
        question=question,
        chain=chain,
        alternatives=_strings(raw, "alternatives", where, DIMENSIONS),
        subjects=subjects,
        guards=_strings(raw, "guards", where, reference_names()),
        files=_strings(raw, "files", where),
        construct=_construct(raw.get("construct"), f"{where}.construct"),
        uncovered=_strings(raw, "uncovered", where, tuple(sorted(anchor_ids))),
    )


def _construct(raw: Any, where: str) -> Construct | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("signature"), dict) or not isinstance(raw.get("assume", {}), dict):
        raise ToolError(f"{where} must be a table with a signature table")
    _known_keys(raw, ("file", "layer", "index_parameters", "recorded", "signature", "window", "causal", "assume", "model"), where)
    signature = raw["signature"]
    return Construct(
        file=_require(raw, "file", where), layer=_require(raw, "layer", where),
        index_parameters=_strings(raw, "index_parameters", where), recorded=_require(raw, "recorded", where),
        signature_file=_require(signature, "file", where), signature=_require(signature, "symbol", where),
        window=_require(raw, "window", where), causal=_require(raw, "causal", where),
        assume=tuple(sorted(raw.get("assume", {}).items())), model=_optional_name(raw, "model", where),
    )


def _optional_name(raw: dict[str, Any], key: str, where: str) -> str | None:
    value = raw.get(key)
    if value is not None and not (isinstance(value, str) and value.isidentifier()):
        raise ToolError(f"{where}: {key} must be a class name")
    return value


def _known_keys(raw: dict[str, Any], known: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ToolError(f"{where}: unknown key {', '.join(unknown)} (known: {', '.join(known)})")


def _fix_case(raw: Any, where: str) -> FixCase:
    from .model import VERDICTS

    name = _require(raw, "name", where)
    where = f"{where}: fix case {name!r}"
    files = _require(raw, "files", where)
    status = _require(raw, "status", where)
    decided_by = _require(raw, "decided_by", where)
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise ToolError(f"{where}: files must map relative paths to code")
    if status not in VERDICTS or decided_by not in DECIDERS:
        raise ToolError(f"{where}: status must be a verdict and decided_by one of {', '.join(DECIDERS)}")
    return FixCase(name, tuple(sorted(files.items())), status, decided_by)


def _form_patch(raw: dict[str, Any], verdict: str, where: str) -> FormPatch | None:
    """``patch.produces`` and ``patch.rewrite = [{find, replace}, ...]`` of a form."""
    if "patch" not in raw:
        return None
    patch = raw["patch"]
    if verdict not in (ABSENT, PARTIAL) or not raw.get("patterns"):
        raise ToolError(f"{where}: only an absent or partial form with patterns can have a patch")
    rewrites = _require(patch, "rewrite", f"{where}: patch")
    if not isinstance(rewrites, list) or not rewrites:
        raise ToolError(f"{where}: patch.rewrite must be a list of {{find, replace}} tables")
    return FormPatch(
        produces=_require(patch, "produces", f"{where}: patch"),
        rewrites=tuple(
            Rewrite(_require(r, "find", f"{where}: patch.rewrite"), _require(r, "replace", f"{where}: patch.rewrite"), where)
            for r in rewrites
        ),
    )


def _check_patches(forms: list[Form], where: str) -> None:
    """A patch must produce a present form that the rule reads at the same anchors."""
    by_id = {form.id: form for form in forms}
    for form in forms:
        if form.patch is None:
            continue
        produced = by_id.get(form.patch.produces)
        if produced is None or produced.verdict != PRESENT:
            raise ToolError(f"{form.where_file}: patch.produces must name a present form of this rule")
        if not set(form.anchors) <= set(produced.anchors):
            raise ToolError(f"{form.where_file}: patch.produces names a form that is not read at the same anchors")


@cache
def load_rules() -> tuple[Rule, ...]:
    return tuple(load_rule(path) for path in sorted(rules_dir().glob("*.toml")))


def select(only: list[str] | None) -> tuple[Rule, ...]:
    rules = load_rules()
    if not only:
        return rules
    known = {rule.id for rule in rules}
    unknown = [fix_id for fix_id in only if fix_id not in known]
    if unknown:
        raise ToolError(f"unknown fix id {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    return tuple(rule for rule in rules if rule.id in only)
