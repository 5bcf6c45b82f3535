"""Text for the ``draft`` and ``probes`` report sections (JSON dicts in, lines out).

Plain lines work in a log and in the check table's footer; ``lint_table``
is the rich form of the findings for a terminal.
"""

from __future__ import annotations

from typing import Any

from ..terminal import clean

SEVERITY_STYLES = {"error": "bold red", "warning": "bold yellow", "info": "cyan"}


def lint_lines(draft: dict[str, Any]) -> list[str]:
    """The findings as lines, each clean for a terminal."""
    lines = [f"drafter config {draft['path']} ({draft['format']} format); {_target(draft)}"]
    for finding in draft["findings"]:
        lines.append(f"  {finding['severity']:<7} {finding['code']}: {finding['message']}")
        if finding["fix"]:  # info findings carry a note, or nothing to do
            lines.append(f"          {'note' if finding['severity'] == 'info' else 'fix'}: {finding['fix']}")
    lines.append(f"  {draft['errors']} error(s), {draft['warnings']} warning(s)")
    return [clean(line) for line in lines]


def lint_table(draft: dict[str, Any]) -> str:
    from ..terminal import literal, terminal_text
    from rich.table import Table
    from rich.text import Text

    table = Table(title=literal(f"drafter config {draft['path']} ({draft['format']} format); {_target(draft)}"), title_justify="left", show_lines=True)
    for column in ("severity", "finding", "fix or note"):
        table.add_column(column, overflow="fold")
    for finding in draft["findings"]:
        style = SEVERITY_STYLES.get(finding["severity"], "")
        message = Text(f"{clean(finding['code'])}\n{clean(finding['message'])}")
        table.add_row(literal(finding["severity"], style), message, literal(finding["fix"]))
    return terminal_text(table, f"{draft['errors']} error(s), {draft['warnings']} warning(s)")


def probe_lines(probes: dict[str, Any]) -> list[str]:
    """What the probes computed, mismatches first (they are the news); clean lines."""
    lines = ["probes (the tree's own code run on the drafter config):"]
    for mismatch in probes["mismatches"]:
        lines.append(f"  !! {mismatch}")
    lines.append(f"  aux layer ids: {_value(probes['aux_layer_ids'])} (expected {_value(probes['expected_aux_layer_ids'])})")
    support = probes.get("runner_support") or {}
    accepts = ", ".join(f"{name.upper()} {_accepts(value['supported'])}" for name, value in support.items())
    lines.append(f"  runner: {_value(probes['runner'] and probes['runner'].upper())}" + (f" ({accepts})" if accepts else ""))
    if probes["layers"] is None:
        lines.append("  layers: not computable")
    else:
        for layer in probes["layers"]:
            window = layer["sliding_window"] if layer["sliding_window"] is not None else "full"
            lines.append(f"  layer {layer['index']}: window {window}, {'causal' if layer['causal'] else 'non-causal'}")
    lines.append(f"  drops the prefix-cache block for method='dflash': {_value(probes['drops_prefix_block'])}")
    for field, why in (probes.get("reason") or {}).items():
        lines.append(f"  ({field}: {why})")
    return [clean(line) for line in lines]


def _target(draft: dict[str, Any]) -> str:
    target = draft.get("target_layers")
    return "target layer count unknown" if target is None else f"target has {target['count']} layers ({target['source']})"


def _value(value: Any) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _accepts(supported: bool | None) -> str:
    return {True: "accepts", False: "refuses", None: "unknown"}[supported]
