"""A rule as Markdown: the one text behind `rules show` and docs/fixes/."""

from __future__ import annotations

from .rules import Rule


def rule_markdown(rule: Rule) -> str:
    prs = ", ".join(f"#{pr}" for pr in rule.prs) or "none"
    unmerged = ", ".join(f"#{pr}" for pr in rule.unmerged_prs)
    out = [
        f"# {rule.id}: {rule.title}",
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
        "## Where it looks",
        "",
    ]
    for anchor in rule.anchors:
        optional = " (optional: a variant not every tree has)" if anchor.optional else ""
        out.append(f"- `{anchor.symbol}` in `{anchor.file}`{optional}")
    out += ["", "## Forms it knows", "", "| form | verdict | where | meaning |", "|---|---|---|---|"]
    for form in rule.forms:
        out.append(f"| `{form.id}` | {form.verdict} | {', '.join(form.anchors)} | {form.description} |")
    out += [
        "",
        "Code at an anchor that matches none of these forms makes the verdict `unknown`.",
        "",
        "## Remedy",
        "",
        rule.remedy,
    ]
    extra = [form.remedy for form in rule.forms if form.remedy]
    out += [f"{line}" for line in extra]
    return "\n".join(out) + "\n"
