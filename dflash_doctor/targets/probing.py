"""Running the stdlib probe and reading its answer (local, ssh, probe files)."""

from __future__ import annotations

import base64
import json
import zlib
from pathlib import Path

from ..model import ToolError
from ..probe import MARKER
from ..rules import Rule
from ..source import search_name


def probe_source() -> str:
    return Path(__file__).resolve().parent.parent.joinpath("probe.py").read_text(encoding="utf-8")


def probe_request(rules: tuple[Rule, ...]) -> dict:
    """The files the rules read, and the anchors the probe must search for if moved."""
    files = {relpath for rule in rules for relpath in rule.files}  # anchors, applicability, behaviour
    anchors = {(a.file, search_name(a.symbol)) for rule in rules for a in rule.anchors if not a.optional}
    anchors |= {(rule.applies.file, search_name(rule.applies.symbol)) for rule in rules}
    return {"files": sorted(files | {"vllm/_version.py"}), "anchors": sorted(map(list, anchors))}


def encode_request(request: dict) -> str:
    return base64.b64encode(json.dumps(request).encode()).decode("ascii")


def parse_probe_output(stdout: str, who: str) -> dict:
    """The last marked line of the probe's output; junk before it is ignored."""
    for line in reversed(stdout.splitlines()):
        if not line.startswith(MARKER):
            continue
        payload = line[len(MARKER):].strip()
        try:
            if not payload.startswith("{"):
                payload = zlib.decompress(base64.b64decode(payload, validate=True)).decode("utf-8")
            answer = json.loads(payload)
        except (ValueError, zlib.error):
            break
        if isinstance(answer, dict):
            return answer
        break
    raise ToolError(f"{who} did not answer the probe (printed {len(stdout)} bytes without a probe result)")
