"""Reading a rule file (``rules/<id>.toml``) into the rule model of ``rules.py``,
validated as it loads: an unknown key, a missing verdict headline, a ``where``
naming an unbound metavariable or a patch that does not compile is an error."""

from __future__ import annotations

import hashlib
import json
import os
import re
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

from .engines import ENGINES, DEFAULT_ENGINE
from .model import ABSENT, DECIDERS, PARTIAL, PRESENT, VERDICTS, ToolError
from .paths import cache_dir, caches_disabled, write_atomically
from .rules import (
    DIMENSIONS,
    FORM_VERDICTS,
    QUESTIONS,
    Affects,
    Anchor,
    Applies,
    Behaviour,
    Case,
    Construct,
    FixCase,
    Capture,
    Flag,
    Form,
    FormPatch,
    Handing,
    IdMap,
    Rewrite,
    Rule,
    reference_names,
    reference_words,
    rules_dir,
)


def _table(text: str) -> dict[str, Any]:
    """A rule file's TOML, parsed once per content: kept as JSON in the user cache under the
    sha256 of its text, so an edited file is parsed again (tomllib took ~6 ms of a warm check).
    What the cache holds is validated below like a fresh parse; nothing is kept with the cache off."""
    if caches_disabled():
        return tomllib.loads(text)
    kept = cache_dir() / "rules" / f"{hashlib.sha256(text.encode()).hexdigest()}.json"
    try:
        data = json.loads(kept.read_text(encoding="utf-8"))
        if isinstance(data, dict):
            return data
    except (OSError, ValueError):
        pass
    data = tomllib.loads(text)
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(kept, json.dumps(data))
    except (OSError, TypeError, ValueError, ToolError):  # TypeError: a TOML date, which JSON has not
        pass
    return data


def _require(data: dict[str, Any], key: str, where: str) -> Any:
    if key not in data:
        raise ToolError(f"{where}: missing key {key!r}")
    return data[key]


def _prose(text: str) -> str:
    """Rule texts are wrapped in the TOML file; one line each everywhere else."""
    return " ".join(text.split())


def load_rule(path: Path) -> Rule:
    where = path.name
    try:
        data = _table(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ToolError(f"{where}: cannot load rule: {exc}") from None
    anchors = tuple(
        Anchor(
            _require(a, "id", where),
            _require(a, "file", where),
            _require(a, "symbol", where),
            a.get("optional", False),
            _optional_path(a, "gone_with", where),
        )
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
        Case(
            _require(c, "name", where),
            _require(c, "anchor", where),
            _require(c, "code", where),
            tuple(c.get("expect", [])),
        )
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
        applies=Applies(
            applies["file"],
            applies["symbol"],
            applies["literal"],
            _prose(_require(applies, "remedy", f"{where}: applies")),
        ),
        headlines=_headlines(_require(data, "headlines", where), where),
        affects=_affects(data.get("affects"), where),
        anchors=anchors,
        forms=tuple(forms),
        cases=cases,
        source=path,
        patch_refusal=_prose(data.get("patch_refusal", "")),
        behaviour=_behaviour(data.get("behaviour"), where, anchor_ids),
        fix_cases=tuple(_fix_case(raw, where) for raw in data.get("fix_cases", [])),
        engine=_engine(data, where),
    )


def _engine(data: dict[str, Any], where: str) -> str:
    """The engine a rule describes: its ``engine`` key, a registered engine's name; the default
    engine's when it has none."""
    name = data.get("engine", DEFAULT_ENGINE.name)
    if name not in ENGINES:
        raise ToolError(f"{where}: engine must be one of {', '.join(sorted(ENGINES))} (not {name!r})")
    return name


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
    from .draft.affects import DRAFTER_TESTS

    where = f"{where}: affects"
    if not isinstance(raw, dict):
        raise ToolError(f"{where} must be a table")
    _known_keys(raw, ("drafter", "yes", "no"), where)
    drafter = _require(raw, "drafter", where)
    if drafter not in DRAFTER_TESTS:
        raise ToolError(f"{where}: drafter must be one of {', '.join(DRAFTER_TESTS)}")
    return Affects(
        drafter,
        _sentence(_require(raw, "yes", where), f"{where}.yes"),
        _sentence(_require(raw, "no", where), f"{where}.no"),
    )


def _boolean(raw: dict[str, Any], key: str, where: str) -> bool:
    value = raw.get(key, False)
    if not isinstance(value, bool):
        raise ToolError(f"{where}: {key} must be true or false")
    return value


def _strings(raw: dict[str, Any], key: str, where: str, allowed: tuple[str, ...] | None = None) -> tuple[str, ...]:
    value = raw.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ToolError(f"{where}: {key} must be a list of strings")
    if allowed is not None:
        bad = [item for item in value if item not in allowed]
        if bad:
            raise ToolError(f"{where}: {key} names {', '.join(bad)} (known: {', '.join(allowed)})")
    return tuple(value)


def _behaviour(raw: Any, where: str, anchor_ids: set[str]) -> Behaviour | None:
    if raw is None:
        return None
    where = f"{where}: behaviour"
    if not isinstance(raw, dict):
        raise ToolError(f"{where} must be a table")
    _known_keys(
        raw,
        (
            "question",
            "chain",
            "alternatives",
            "subjects",
            "guards",
            "files",
            "construct",
            "uncovered",
            "resolvers",
            "handing",
            "flag",
            "capture",
        ),
        where,
    )
    question = _require(raw, "question", where)
    if question not in QUESTIONS:
        raise ToolError(f"{where}: question must be one of {', '.join(QUESTIONS)}")
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
        resolvers=_resolvers(raw, question, where, anchor_ids),
        handing=_handing(raw.get("handing"), question, f"{where}.handing", anchor_ids),
        flag=_flag(raw.get("flag"), question, f"{where}.flag"),
        capture=_capture(raw.get("capture"), question, f"{where}.capture"),
    )


NEEDS = {
    "capture-ids": "resolvers",
    "block-drop": "handing",
    "algorithm-flag": "flag",
    "capture-position": "capture",
}  # what a kind reads


CAPTURE_KEYS = "hook lists mark entry registry generation id_map handed assume counted indexed".split()


def _capture(raw: Any, question: str, where: str) -> Capture | None:
    if raw is None:
        if question == "capture-position":
            raise ToolError(f"{where}: the capture-position question needs a capture table")
        return None
    if question != "capture-position" or not isinstance(raw, dict):
        raise ToolError(f"{where}: only the capture-position question reads a capture table")
    _known_keys(raw, tuple(CAPTURE_KEYS), where)
    hook, mark, entry, handed = (_require(raw, key, where) for key in ("hook", "mark", "entry", "handed"))
    registry = _require(raw, "registry", where)
    if not isinstance(registry, str) or not all(part.isidentifier() for part in registry.split("/")):
        raise ToolError(f"{where}: registry must be a package directory (names joined by /)")
    generation = raw.get("generation", "")
    if generation and not _file_function(generation):
        raise ToolError(f"{where}: generation must be file.py:function")
    id_map = _id_map(raw.get("id_map"), f"{where}: id_map")
    lists = _strings(raw, "lists", where)
    if not all(isinstance(name, str) and name.isidentifier() for name in (hook, mark, entry, *lists)) or not lists:
        raise ToolError(f"{where}: hook, mark, entry and lists must be names")
    if handed not in ("input", "output"):
        raise ToolError(f"{where}: handed must be input or output")
    assume = raw.get("assume", {})
    if not isinstance(assume, dict):
        raise ToolError(f"{where}: assume must be a table of attribute paths and values")
    counted, indexed = _strings(raw, "counted", where), _strings(raw, "indexed", where)
    if not all(isinstance(name, str) and name.isidentifier() for name in (*counted, *indexed)):
        raise ToolError(f"{where}: counted and indexed must be names")
    assumed = tuple(sorted(assume.items()))
    return Capture(hook, lists, mark, entry, handed, assumed, counted, indexed, registry, generation, id_map)


def _file_function(value: Any) -> bool:
    file, _, function = value.partition(":") if isinstance(value, str) else ("", "", "")
    return file.endswith(".py") and function.isidentifier()


def _id_map(raw: Any, where: str) -> IdMap | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ToolError(f"{where} must be a table of function, target, draft and ids")
    keywords = ("target", "draft", "ids")
    _known_keys(raw, ("function", *keywords), where)
    function = _require(raw, "function", where)
    if not _file_function(function):
        raise ToolError(f"{where}: function must be file.py:function")
    target, draft, ids = (_require(raw, key, where) for key in keywords)
    if not all(isinstance(name, str) and name.isidentifier() for name in (target, draft, ids)):
        raise ToolError(f"{where}: target, draft and ids must be the function's keyword names")
    return IdMap(function, target, draft, ids)


def _flag(raw: Any, question: str, where: str) -> Flag | None:
    if raw is None:
        if question == "algorithm-flag":
            raise ToolError(f"{where}: the algorithm-flag question needs a flag table")
        return None
    if question != "algorithm-flag" or not isinstance(raw, dict):
        raise ToolError(f"{where}: only the algorithm-flag question reads a flag table")
    _known_keys(raw, ("file", "enum", "member", "predicate", "expected", "meaning"), where)
    enum, member, predicate = (_require(raw, key, where) for key in ("enum", "member", "predicate"))
    if not all(isinstance(name, str) and name.isidentifier() for name in (enum, member, predicate)):
        raise ToolError(f"{where}: enum, member and predicate must be names")
    if not isinstance(raw.get("expected"), bool):
        raise ToolError(f"{where}: expected must be true or false")
    meaning = _prose(_require(raw, "meaning", where))
    return Flag(_require(raw, "file", where), enum, member, predicate, raw["expected"], meaning)


def _resolvers(raw: dict[str, Any], question: str, where: str, anchor_ids: set[str]) -> tuple[tuple[str, str], ...]:
    value = raw.get("resolvers", {})
    if not isinstance(value, dict) or not all(isinstance(k, str) and v in anchor_ids for k, v in value.items()):
        raise ToolError(f"{where}: resolvers must map each runner to the id of an anchor")
    if (NEEDS.get(question) == "resolvers") != bool(value):
        raise ToolError(f"{where}: resolvers belong to a capture-ids question, which needs them")
    return tuple(sorted(value.items()))


def _handing(raw: Any, question: str, where: str, anchor_ids: set[str]) -> Handing | None:
    if (NEEDS.get(question) == "handing") != (raw is not None):
        raise ToolError(f"{where}: belongs to a block-drop question, which needs it")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ToolError(f"{where} must be a table")
    _known_keys(raw, ("constructor", "callee", "keywords", "opt_out"), where)
    constructor = _require(raw, "constructor", where)
    if constructor not in anchor_ids:
        raise ToolError(f"{where}: constructor must be the id of an anchor")
    keywords = _strings(raw, "keywords", where)
    callee, opt_out = _require(raw, "callee", where), raw.get("opt_out")
    if (
        not keywords
        or not all(name.isidentifier() for name in (callee, *keywords))
        or not (opt_out is None or (isinstance(opt_out, str) and opt_out.isidentifier()))
    ):
        raise ToolError(f"{where}: callee, keywords and opt_out must be names (and keywords not empty)")
    return Handing(constructor, callee, keywords, opt_out)


def _construct(raw: Any, where: str) -> Construct | None:
    if raw is None:
        return None
    if (
        not isinstance(raw, dict)
        or not isinstance(raw.get("signature"), dict)
        or not isinstance(raw.get("assume", {}), dict)
    ):
        raise ToolError(f"{where} must be a table with a signature table")
    _known_keys(
        raw,
        (
            "file",
            "layer",
            "index_parameters",
            "recorded",
            "signature",
            "parameter",
            "causal",
            "assume",
            "model",
            "platform",
            "containers",
            "unset",
            "offset",
            "none",
            "causal_parameter",
            "causal_values",
        ),
        where,
    )
    signature = raw["signature"]
    offset, causal_values = raw.get("offset", 0), raw.get("causal_values", {})
    if not isinstance(offset, int) or isinstance(offset, bool):
        raise ToolError(f"{where}: offset must be an integer")
    if not isinstance(causal_values, dict) or not all(isinstance(v, bool) for v in causal_values.values()):
        raise ToolError(f"{where}: causal_values must map stand-in paths to true or false")
    if "causal" in raw and "causal_parameter" in raw:
        raise ToolError(f"{where}: causality is read from the layer (causal) or the recorded call, not both")
    return Construct(
        file=_require(raw, "file", where),
        layer=_require(raw, "layer", where),
        index_parameters=_strings(raw, "index_parameters", where),
        recorded=_require(raw, "recorded", where),
        signature_file=_require(signature, "file", where),
        signature=_require(signature, "symbol", where),
        parameter=_require(raw, "parameter", where),
        causal=_optional_text(raw, "causal", where),
        assume=tuple(sorted(raw.get("assume", {}).items())),
        model=_optional_name(raw, "model", where),
        platform=_optional_text(raw, "platform", where),
        containers=_strings(raw, "containers", where),
        unset=_strings(raw, "unset", where),
        offset=offset,
        none_value=raw.get("none"),
        causal_parameter=_optional_name(raw, "causal_parameter", where),
        causal_values=tuple(sorted(causal_values.items())),
    )


def _optional_path(raw: dict[str, Any], key: str, where: str) -> str | None:
    value = raw.get(key)
    if value is not None and not (
        isinstance(value, str) and value.endswith(".py") and not value.startswith("/") and ".." not in value
    ):
        raise ToolError(f"{where}: {key} must be a .py path inside the tree")
    return value


def _optional_text(raw: dict[str, Any], key: str, where: str) -> str | None:
    value = raw.get(key)
    if value is not None and not (isinstance(value, str) and value.strip()):
        raise ToolError(f"{where}: {key} must be a non-empty string")
    return value


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
    """``patch.produces``, ``patch.rewrite = [{find, replace}, ...]`` and ``patch.unshadow`` of a form."""
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
            Rewrite(
                _require(r, "find", f"{where}: patch.rewrite"), _require(r, "replace", f"{where}: patch.rewrite"), where
            )
            for r in rewrites
        ),
        unshadow=_boolean(patch, "unshadow", f"{where}: patch"),
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


EXTRA_RULES = "DFLASH_DOCTOR_RULES"  # more rule directories (os.pathsep-separated): a vendor's own fixes


def load_rules() -> tuple[Rule, ...]:
    """The rules shipped with the tool, then those of the directories in $DFLASH_DOCTOR_RULES."""
    return _load_rules(os.environ.get(EXTRA_RULES, ""))


@cache
def _load_rules(extra: str) -> tuple[Rule, ...]:
    directories = [rules_dir(), *(Path(part) for part in extra.split(os.pathsep) if part)]
    rules: list[Rule] = []
    for directory in directories:
        if not directory.is_dir():
            raise ToolError(f"{EXTRA_RULES}: {directory} is not a directory of rule files")
        rules += [load_rule(path) for path in sorted(directory.glob("*.toml"))]
    seen: set[tuple[str, str]] = set()  # one rule per fix and engine: each engine's code has its own
    for rule in rules:
        if (rule.engine, rule.id) in seen:
            raise ToolError(f"{rule.source}: a rule with the id {rule.id!r} is already loaded for {rule.engine}")
        seen.add((rule.engine, rule.id))
    return tuple(rules)


def select(only: list[str] | None) -> tuple[Rule, ...]:
    rules = load_rules()
    if not only:
        return rules
    known = {rule.id for rule in rules}
    unknown = [fix_id for fix_id in only if fix_id not in known]
    if unknown:
        raise ToolError(f"unknown fix id {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    return tuple(rule for rule in rules if rule.id in only)
