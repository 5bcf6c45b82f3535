"""Rules are data: one TOML file per fix in ``rules/``. This module is the rule
model (frozen dataclasses); ``rulefile.py`` reads and validates the files into it."""

from __future__ import annotations

import dataclasses
import tomllib
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .engines import DEFAULT_ENGINE
from .model import ABSENT, NOT_APPLICABLE, PARTIAL, PRESENT, UNKNOWN, Evidence, ToolError

if TYPE_CHECKING:
    from .draft.config import DraftConfig

IGNORE = "ignore"  # a form that locates code off the DFlash path: evidence only
FORM_VERDICTS = (PRESENT, ABSENT, PARTIAL, IGNORE)


def for_engine(rules: tuple[Rule, ...], engine: str) -> tuple[Rule, ...]:
    """One rule per fix id, in the order the ids first come: the one describing ``engine``'s code where
    there is one, else the default engine's (the fixes every report names: its fix is then unknown for that
    engine's trees, no rule judges it). A fix only another engine has a rule of is not this engine's."""
    chosen: dict[str, Rule] = {}
    for rule in rules:
        mine = rule.engine == engine
        if (mine and (rule.id not in chosen or chosen[rule.id].engine != engine)) or (
            rule.engine == DEFAULT_ENGINE.name and rule.id not in chosen
        ):
            chosen[rule.id] = rule
    return tuple(chosen.values())


def rules_dir() -> Path:
    """``rules/`` inside the installed package, or beside it in a checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "rules", here.parent / "rules"):
        if candidate.is_dir():
            return candidate
    raise ToolError("the rules directory is missing from this installation")


def reference_dir() -> Path:
    return rules_dir() / "reference" / "drafters"


@cache
def reference_names() -> tuple[str, ...]:
    return tuple(sorted(path.stem for path in reference_dir().glob("*.json")))


@cache
def reference_words() -> dict[str, str]:
    """Each reference config's readable name (names.toml), for the reasons people read."""
    path = reference_dir() / "names.toml"
    try:
        words = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ToolError(f"{path.name}: cannot load the reference drafter names: {exc}") from None
    missing = [name for name in reference_names() if not isinstance(words.get(name), str) or not words[name].strip()]
    if missing:
        raise ToolError(f"{path.name}: no readable name for {', '.join(missing)}")
    return words


@cache
def reference_configs() -> tuple[tuple[str, DraftConfig], ...]:
    from .draft.config import load_draft_config  # warm runs: as DraftConfig above

    return tuple((name, load_draft_config(reference_dir() / f"{name}.json")) for name in reference_names())


@dataclasses.dataclass(frozen=True)
class Anchor:
    """Where a fix's code lives. ``optional``: absent from older releases; ``gone_with``: a
    file whose removal takes the code with it (the anchor is then not looked for)."""

    id: str
    file: str
    symbol: str
    optional: bool = False
    gone_with: str | None = None

    @property
    def name(self) -> str:
        return self.symbol.rsplit(".", 1)[-1]


@dataclasses.dataclass(frozen=True)
class Applies:
    """The rule applies when ``symbol`` in ``file`` holds the string ``literal`` (or assigns a name so spelt:
    an enum's member);
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

    def reaches(self, draft: DraftConfig) -> tuple[bool | None, str]:
        from .draft.affects import DRAFTER_TESTS

        affected = DRAFTER_TESTS[self.drafter](draft)
        if affected is None:
            return None, f"the drafter config does not say whether the defect can reach it ({self.drafter})"
        return affected, self.yes if affected else self.no


@dataclasses.dataclass(frozen=True)
class Form:
    """One known code form. Patterns are kept as source and compiled on first
    use (``structure.patterns.form_patterns``), so that reading rule metadata never imports libcst."""

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


@dataclasses.dataclass(frozen=True)
class Rewrite:
    """Inside a match of its form, the code ``find`` matches becomes ``replace``
    (``$NAME`` in ``replace`` is the code ``find`` bound to it)."""

    find_source: str
    replace_source: str
    where_file: str = ""


@dataclasses.dataclass(frozen=True)
class FormPatch:
    """How a patch turns code of its form into the present form ``produces``."""

    produces: str
    rewrites: tuple[Rewrite, ...]
    # a def of the form that replaces an earlier def of the same name already in the form
    # ``produces`` (a shadowing duplicate) is removed, so that the earlier one runs, not rewritten
    unshadow: bool = False


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
    "layer-rope": ("runner-accepts", "rotary-base"),
    "algorithm-flag": ("predicate",),
    "capture-position": ("capture-position", "hook-fails", "taps-nothing", "not-generative"),
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
    resolvers: tuple[tuple[str, str], ...] = ()  # capture-ids: runner -> the anchor of the resolver it calls
    handing: Handing | None = None  # block-drop: what is handed on, and by which constructor
    flag: Flag | None = None  # algorithm-flag: the predicate of the method's member that decides a behaviour
    capture: Capture | None = None  # capture-position: the hook every target architecture captures through


@dataclasses.dataclass(frozen=True)
class Flag:
    """The predicate ``predicate`` of member ``member`` of the enumeration ``enum`` (a class in
    ``file``), run by the tree's own code, must give ``expected`` (SGLang: ``SpeculativeAlgorithm.DFLASH.is_eagle()``
    decides whether the radix cache keys DFlash as EAGLE). ``meaning``: what the predicate decides, for the report."""

    file: str
    enum: str
    member: str
    predicate: str
    expected: bool
    meaning: str


@dataclasses.dataclass(frozen=True)
class IdMap:
    """The engine's ``file:function`` its worker runs on the drafter's ids before handing
    them to the capture hook, called with these keywords: the target's config, the
    drafter's config, and the ids; it returns the ids the hook is handed."""

    function: str
    target: str
    draft: str
    ids: str


@dataclasses.dataclass(frozen=True)
class Capture:
    """The engine hands a drafter's ids to ``hook``, a method of the target model's class
    (each architecture a file lists in ``entry``); what it sets, directly or through the
    models it holds, is the capture: a list of layer ids (an attribute of ``lists``) or
    layers marked with ``mark``. The class that holds it taps each listed layer's input
    or output, as its own loop over the layers says; a tap handed into the layer's call
    is at ``handed`` ("input" or "output"). ``assume``: what the hook's branches read of
    the deployment (``*.pp_group.world_size``: that attribute of any model); ``counted``:
    attributes that hold the target's layer count (``num_hidden_layers``); ``indexed``: layer
    attributes that hold the layer's own index in the model's list (``layer.layer_id``);
    ``registry``: the package directory whose modules register the target architectures;
    ``generation``: the engine's ``file:function`` that, called with a list holding one
    architecture's name, says whether it generates with it (the others are not judged);
    ``id_map``: the worker's map of the drafter's ids before it calls the hook."""

    hook: str
    lists: tuple[str, ...]
    mark: str
    entry: str
    handed: str
    assume: tuple[tuple[str, Any], ...]
    counted: tuple[str, ...] = ()
    indexed: tuple[str, ...] = ()
    registry: str = ""
    generation: str = ""
    id_map: IdMap | None = None

    @property
    def files(self) -> tuple[str, ...]:
        """The engine's files the question runs functions of (the registry is searched, not named)."""
        named = (self.generation, self.id_map.function if self.id_map else "")
        return tuple(spec.partition(":")[0] for spec in named if spec)


@dataclasses.dataclass(frozen=True)
class Handing:
    """What the constructor at anchor ``constructor`` hands the construction of
    ``callee`` through ``keywords`` (any of them true changes the block); ``opt_out``:
    the speculative config's field that turns it off, where a tree has it."""

    constructor: str
    callee: str
    keywords: tuple[str, ...]
    opt_out: str | None = None


@dataclasses.dataclass(frozen=True)
class Construct:
    """Build the drafter's decoder layers from the tree's own classes: ``layer``
    (a class in ``file``) for each layer index (its parameter named one of
    ``index_parameters``), with stand-ins for every name outside the extracted
    code; calls of ``recorded`` are recorded and bound to the parameters of
    ``signature`` (``file``, ``Class.__init__``) to read ``parameter``; ``causal``
    is an attribute path on the built layer, or ``causal_parameter`` a parameter of
    the recorded call whose stand-in value ``causal_values`` maps to a causality. ``assume``: values of stand-ins a
    branch reads (the deployment the question is about). ``model``: the class in
    ``file`` that builds the layers; it is constructed with ``layer`` recorded, to
    read the index each layer really receives. ``platform``: the stand-in whose
    ``is_<platform>()`` tells the platform; its branches are taken for the
    platform the target is built for. ``containers``: stand-ins that build a container
    (``nn.ModuleList``): called with one iterable, they hold its items in order.
    ``unset``: stand-ins that are None in the deployment the question is about
    (``*.quant_config``: that attribute of whatever it is read from)."""

    file: str
    layer: str
    index_parameters: tuple[str, ...]
    recorded: str
    signature_file: str
    signature: str
    parameter: str  # the recorded call's parameter the question reads (the window, the RoPE base)
    causal: str | None  # an attribute path on the built layer holding its causality
    assume: tuple[tuple[str, Any], ...]
    model: str | None = None
    platform: str | None = None
    containers: tuple[str, ...] = ()
    unset: tuple[str, ...] = ()
    offset: int = 0  # what the engine's parameter holds is the config's value plus this (SGLang: a window less one)
    none_value: Any = None  # the parameter's value that means "none" (SGLang: -1, no window)
    causal_parameter: str | None = None  # or: the recorded call's parameter that holds causality,
    causal_values: tuple[tuple[str, bool], ...] = ()  # by the stand-in path it is handed


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
    engine: str = DEFAULT_ENGINE.name  # the engine whose code the rule describes (its ``engine`` key, else the default)

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
        workarounds = dict.fromkeys(
            forms[item.form].remedy for item in evidence if item.form in forms and forms[item.form].remedy
        )
        return " ".join([self.remedy, *workarounds])

    def affects_drafter(self, draft: DraftConfig) -> tuple[bool | None, str]:
        """Whether the defect can reach ``draft`` (None: the config does not say), and why."""
        if self.affects is None:
            return True, "the defect can reach every DFlash drafter"
        return self.affects.reaches(draft)

    @property
    def page(self) -> str:
        """Its page under docs/fixes/: the default engine's by id, another engine's in a folder of its name."""
        return f"{self.id}.md" if self.engine == DEFAULT_ENGINE.name else f"{self.engine}/{self.id}.md"

    @property
    def files(self) -> tuple[str, ...]:
        """Every file a check of this rule reads: anchors, applicability, behaviour."""
        files = {a.file for a in self.anchors} | {self.applies.file}
        if self.behaviour is not None:
            files |= {*self.behaviour.files, *(self.behaviour.capture.files if self.behaviour.capture else ())}
        return tuple(sorted(files))

    def forms_for(self, anchor_id: str) -> list[Form]:
        return [form for form in self.forms if anchor_id in form.anchors]
