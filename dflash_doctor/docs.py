"""A rule as Markdown: the one text behind `rules show` and docs/fixes/."""

from __future__ import annotations

import json
from pathlib import Path

from .engines import named
from .model import UNKNOWN
from .rules import Rule
from .rulefile import load_rules


def rule_markdown(rule: Rule) -> str:
    prs = ", ".join(f"#{pr}" for pr in rule.prs) or "none"
    unmerged = ", ".join(f"#{pr}" for pr in rule.unmerged_prs)
    engine = named(rule.engine).display
    out = [
        f"# {rule.id}: {rule.title}",
        "",
        f"Engine: {engine} (PRs are {engine}'s).",
        "",
        f"Merged PRs: {prs}." + (f" Unmerged PRs people build from: {unmerged}." if unmerged else ""),
        "",
        f"First release with the fix: {rule.first_release or 'none yet'}.",
        "",
        "## What",
        "",
        rule.what,
        "",
        "## Why",
        "",
        rule.why,
        "",
        "## What each verdict says",
        "",
        "| verdict | what the install will do | remedy |",
        "|---|---|---|",
        *(f"| {status} | {text} | {_remedy(rule, status)} |" for status, text in rule.headlines),
        "",
        *_affects(rule),
        "## Where it looks",
        "",
    ]
    for anchor in rule.anchors:
        optional = " (optional: a variant not every tree has)" if anchor.optional else ""
        out.append(f"- `{anchor.symbol}` in `{anchor.file}`{optional}")
    behaviour = rule.behaviour
    if behaviour is not None:
        out += [
            "",
            "## How behaviour decides",
            "",
            f"Question `{behaviour.question}`, run on the tree's own code for every check that can run it. "
            "Chain (every link must hold for a configuration to work): "
            f"{', '.join(f'`{p}`' for p in behaviour.chain)}. "
            f"Alternatives (configurations that may disagree, giving `partial`): drafter configs"
            + "".join(f", {d}s" for d in behaviour.alternatives)
            + ". "
            f"Subjects: {', '.join(f'`{n}`' for n in behaviour.subjects)}."
            + (
                f" Guards (must not break): {', '.join(f'`{n}`' for n in behaviour.guards)}."
                if behaviour.guards
                else ""
            )
            + (
                f" Not run (their forms join the chain): {', '.join(f'`{a}`' for a in behaviour.uncovered)}."
                if behaviour.uncovered
                else ""
            )
            + (
                f" Layers built from the tree's own `{behaviour.construct.layer}`, recording "
                f"`{behaviour.construct.recorded}`."
                if behaviour.construct
                else ""
            )
            + (
                f" The index each layer receives is read by constructing the tree's own `{behaviour.construct.model}`."
                if behaviour.construct and behaviour.construct.model
                else ""
            )
            + " With `--draft-config` the user's config is the subject where it can be judged.",
        ]
        if rule.fix_cases:
            out += [
                "",
                "Fix cases (`rules test`): "
                + "; ".join(f"{case.name} → {case.status} by {case.decided_by}" for case in rule.fix_cases)
                + ".",
            ]
    out += ["", "## Forms it knows", "", "| form | verdict | where | meaning |", "|---|---|---|---|"]
    for form in rule.forms:
        catch_all = " (catch-all: locates, never decides alone)" if form.catch_all else ""
        out.append(f"| `{form.id}` | {form.verdict} | {', '.join(form.anchors)} | {form.description}{catch_all} |")
    out += [
        "",
        "Code at an anchor that matches none of these forms is decided by behaviour, or is `unknown` where behaviour "
        "could not answer; so is code that only a catch-all form matches.",
    ]
    return "\n".join(out) + "\n"


def _remedy(rule: Rule, status: str) -> str:
    if status == UNKNOWN:
        return (
            "what to do to get an answer, by cause (a file that does not parse, code in a form the rule does not "
            "know, behaviour that could not run)"
        )
    forms = [form for form in rule.forms if form.remedy and form.verdict == status]
    workaround = "".join(f" Where the code is `{form.id}`: {form.remedy}" for form in forms)
    return rule.remedy_for(status) + workaround


def _affects(rule: Rule) -> list[str]:
    """With --draft-config: which drafters the defect can reach."""
    if rule.affects is None:
        return ["With `--draft-config`: the defect can reach every DFlash drafter, so this fix always gates.", ""]
    return [
        f"With `--draft-config`: the drafter test `{rule.affects.drafter}` decides whether the defect can reach the "
        f"drafter. Affected: {rule.affects.yes}. Not affected: {rule.affects.no}; the fix then keeps the tree's "
        "verdict with `affects_drafter: false` and does not fail the gate (unless running the tree's code shows that "
        "drafter failing).",
        "",
    ]


def schemas_markdown(schema_dir: Path) -> str:
    """docs/schemas.md: every JSON Schema file of schemas/, embedded as it is shipped."""
    out = [
        "# JSON Schemas",
        "",
        "Every JSON report names its schema in its `schema` key. The files below are shipped in",
        "`schemas/` of the repository and the tests validate real reports against them.",
        "What the fields mean, with examples: [JSON reports](report-json.md).",
    ]
    for path in sorted(schema_dir.glob("*.schema.json")):
        schema = json.loads(path.read_text(encoding="utf-8"))
        out += ["", f"## {schema.get('title', path.name)}", "", f"`schemas/{path.name}`", ""]
        if schema.get("description"):
            out += [schema["description"], ""]
        out += ["```json", path.read_text(encoding="utf-8").rstrip("\n"), "```"]
    return "\n".join(out) + "\n"


def generated_pages(repo: Path) -> dict[Path, str]:
    """The docs pages made from data (rules/, schemas/): path -> text."""
    pages = {repo / "docs" / "fixes" / rule.page: rule_markdown(rule) for rule in load_rules()}
    pages[repo / "docs" / "schemas.md"] = schemas_markdown(repo / "schemas")
    return pages


def main() -> None:
    """``python -m dflash_doctor.docs``: regenerate those pages in this checkout."""
    repo = Path(__file__).resolve().parent.parent
    if not (repo / "docs").is_dir() or not (repo / "schemas").is_dir():
        raise SystemExit(f"dflash-doctor: error: {repo} is not a dflash-doctor checkout (no docs/ or schemas/)")
    for path, text in generated_pages(repo).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(path.relative_to(repo))


if __name__ == "__main__":
    main()
